"""A candidate run that survives being stopped (issue 29): every finished candidate is kept in
the results folder as it finishes, and the same command run again on the same folder resumes
after the last one kept.

Layout, inside the run's results folder while the run is unfinished::

    progress/run.json          what the run is (its identity) and what it measured once
                               (environment at start, copy bandwidth)
    progress/<index>.json      one finished candidate: its record and the files it added
    inputs/, provenance/       those files, written as each candidate finishes

The finished run writes ``results/`` and removes ``progress/``. A folder whose ``run.json``
names another run (other candidates, tasks, sizes, profile or device), or whose machine or
software changed since it started (any environment field but the clocks), is refused: records
of two runs never end up in one document.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from kbrepro.errors import UnreadableInputError, UsageError
from kbrepro.harness import jsonio

PROGRESS = "progress"
RUN_FILE = "run.json"
KIND = "kbrepro/candidate-run-progress"
#: environment fields that may differ between the start of a run and its resumption
MOVING_FIELDS = frozenset({"clocks_start", "clocks_end"})


def identity(*, profile: str, device: str, sizes: Mapping, extra_shapes: tuple, names: list[str],
             sources: list[bytes], paths: list[str], commit: str) -> dict:
    """What makes two commands the same run: the profile, device, sizes and extra shapes as
    given, and each candidate's name, SHA-256 and task path, in order, at KernelBench ``commit``."""
    return {"profile": profile, "device": device, "sizes": json.loads(jsonio.dumps(dict(sizes or {}))),
            "extra_shapes": json.loads(jsonio.dumps([dict(s) for s in extra_shapes])), "kernelbench": commit,
            "candidates": [{"name": n, "sha256": hashlib.sha256(s).hexdigest(), "task": p}
                           for n, s, p in zip(names, sources, paths)]}


def holds_progress(results_dir: Path) -> bool:
    """Whether ``results_dir`` holds an unfinished candidate run (``progress/run.json``)."""
    return (Path(results_dir) / PROGRESS / RUN_FILE).is_file()


def _kept_path(rel: object) -> str:
    """``rel`` if it is a path a finished candidate keeps (relative, under ``inputs/`` or
    ``provenance/``, no ``..``); else ValueError (a progress file naming another path is
    refused: a resume never reads or writes outside its results folder)."""
    parts = rel.split("/") if isinstance(rel, str) else []
    if not parts or parts[0] not in ("inputs", "provenance") or any(p in ("", ".", "..") for p in parts) \
            or "\\" in rel or "\x00" in rel:
        raise ValueError(f"a kept file outside the candidate's folders: {str(rel)[:80]!r}")
    return rel


def _lock(folder: Path, results_dir: Path):
    """An exclusive lock on ``folder/.lock`` held while the run lasts (the open file); a second
    run on the same results folder is refused."""
    import fcntl
    import os

    fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise UsageError(f"another run is using --results-dir {results_dir}",
                         "wait for it to finish, or choose another --results-dir") from None
    return fd


def _env_key(env: Mapping) -> dict:
    return {k: v for k, v in (env.get("fields") or {}).items() if k not in MOVING_FIELDS}


@dataclass
class Checkpoint:
    """An unfinished run's progress folder: ``env`` and ``bandwidth`` (``(gbps, block)``) as
    measured when the run started, and ``finished`` (candidate index -> ``(record, files)``)."""

    folder: Path
    env: dict
    bandwidth: tuple
    started: str
    finished: dict = field(default_factory=dict)
    lock_fd: int | None = None

    def keep(self, index: int, rec: dict, files: Mapping[str, bytes]) -> None:
        """Keep finished candidate ``index``: its ``files`` (results-folder path -> bytes) written
        first, then its record, each atomically (a record is kept only once its files are)."""
        root = self.folder.parent
        for rel, data in files.items():
            dst = root / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            jsonio.atomic_write_bytes(dst, data)
        jsonio.atomic_write_bytes(self.folder / f"{index}.json",
                                  jsonio.dumps({"record": rec, "files": sorted(files)}).encode())
        self.finished[index] = (rec, dict(files))

    def remove(self) -> None:
        """Remove the progress folder (the run's ``results/`` now holds everything)."""
        shutil.rmtree(self.folder, ignore_errors=True)
        self.release()

    def release(self) -> None:
        """Let go of the run's lock (the folder stays, for the next command to resume)."""
        if self.lock_fd is not None:
            import os

            os.close(self.lock_fd)
            self.lock_fd = None


def open_run(results_dir: Path, ident: dict, env: dict, bandwidth: tuple, started: str) -> Checkpoint:
    """The progress of the run ``ident`` in ``results_dir``: a new one (``env``, ``bandwidth``
    and ``started`` recorded) or, where the folder holds that run's progress, the one kept
    there (its own environment, bandwidth and start; its finished candidates read back).
    Holds the folder's run lock until :meth:`Checkpoint.remove` or :meth:`Checkpoint.release`.
    Raises UsageError where another run holds the folder, where it holds another run's progress, or the machine or
    software changed since it started, or a progress file cannot be read (each with the next
    step)."""
    folder = Path(results_dir) / PROGRESS
    run = folder / RUN_FILE
    folder.mkdir(parents=True, exist_ok=True)
    fd = _lock(folder, Path(results_dir))
    try:
        cp = _open(results_dir, folder, run, ident, env, bandwidth, started)
    except BaseException:
        import os

        os.close(fd)
        raise
    cp.lock_fd = fd
    return cp


def _open(results_dir: Path, folder: Path, run: Path, ident: dict, env: dict, bandwidth: tuple,
          started: str) -> Checkpoint:
    if not run.is_file():
        jsonio.atomic_write_bytes(run, jsonio.dumps({"kind": KIND, "identity": ident, "environment": env,
                                                     "bandwidth": list(bandwidth), "started_utc": started}).encode())
        return Checkpoint(folder, env, bandwidth, started)
    again = f"choose another --results-dir, or remove {folder} to start the run again"
    try:
        doc = jsonio.loads_strict(run.read_bytes(), str(run))
        if doc.get("kind") != KIND:
            raise ValueError("not a progress file")
        if doc["identity"] != ident:
            raise UsageError(f"--results-dir {results_dir} holds an unfinished run of other candidates, tasks or "
                             "settings", again)
        if _env_key(doc["environment"]) != _env_key(env):
            moved = sorted(k for k in set(_env_key(doc["environment"])) | set(_env_key(env))
                           if _env_key(doc["environment"]).get(k) != _env_key(env).get(k))
            raise UsageError(f"--results-dir {results_dir} holds a run started on another machine or software "
                             f"(changed: {', '.join(moved[:5])})", again)
        cp = Checkpoint(folder, doc["environment"], tuple(doc["bandwidth"]), doc["started_utc"])
        n = len(ident["candidates"])
        for p in sorted(folder.glob("*.json")):
            if p.name == RUN_FILE:
                continue
            i = int(p.stem)
            if not 0 <= i < n:
                raise ValueError(f"{p.name}: no such candidate")
            kept = jsonio.loads_strict(p.read_bytes(), str(p))
            rec = kept["record"]
            if rec.get("name") != ident["candidates"][i]["name"]:
                raise ValueError(f"{p.name}: the record of another candidate")
            own = {_kept_path(rel): (Path(results_dir) / rel).read_bytes() for rel in kept["files"]}
            # what the record says ran is what is kept (an edited file would pack and then fail verification)
            if hashlib.sha256(own.get(str(rec.get("file")), b"")).hexdigest() != rec.get("source_sha256") or \
                    own.get(str(rec.get("file"))) is None:
                raise ValueError(f"{p.name}: the kept candidate file is not the one that ran")
            cp.finished[i] = (rec, own)
        return cp
    except UsageError:
        raise
    except (UnreadableInputError, OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UsageError(f"the progress kept in {folder} cannot be read ({type(exc).__name__}: "
                         f"{' '.join(str(exc).split())[:160]})", again) from None


def summary_line(rec: Mapping) -> str:
    """One line for a finished candidate: its seconds and its verdicts (caught by, undecided)."""
    vs = [v for v in rec.get("verdicts") or [] if isinstance(v, dict)]
    caught = [v["name"] for v in vs if v.get("passed") is False]
    open_ = [v["name"] for v in vs if v.get("passed") is None]
    head = f"{rec.get('name')}: finished in {float(rec.get('seconds') or 0):.1f} s; "
    if caught == ["ran"]:  # it never ran (its build or its first call raised): nothing was caught
        return head + "DID NOT RUN (its build or first call failed; the 'ran' check says why)"
    if caught:
        return head + f"CAUGHT by {', '.join(caught[:4])}" + (f" (+{len(caught) - 4})" if len(caught) > 4 else "")
    return head + (f"passed {len(vs) - len(open_)} checks, {len(open_)} undecided"
                   + (f" ({', '.join(open_[:3])}{f' and {len(open_) - 3} more' if len(open_) > 3 else ''})"
                      if open_ else ""))


__all__ = ["Checkpoint", "identity", "holds_progress", "open_run", "summary_line", "PROGRESS", "RUN_FILE"]

