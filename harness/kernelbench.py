"""The pinned KernelBench checkout: lock verification and task loading.

The project pins KernelBench at one commit: ``manifests/kernelbench.pin.json`` holds the
sha256 of every task file and the LICENSE at that commit, and each study's own lock
(``kernelbench.lock.json`` in its folder) the subset it uses. A task is loaded only from bytes whose hash matches
the lock, and the module is executed from exactly those bytes (no second read from disk).

Where the checkout lives: ``--kernelbench PATH``, else the ``KBREPRO_KERNELBENCH``
environment variable, else ``KernelBench/`` in the project root.
"""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from kbrepro.harness import jsonio
from kbrepro.errors import InvalidResultsError, KernelBenchPinError, UsageError
from kbrepro import manifests, schemas

PROJECT_ROOT = Path(__file__).resolve().parent.parent
ENV_VAR = "KBREPRO_KERNELBENCH"
LOCK_SCHEMA = "kbrepro/kernelbench-lock"


@dataclass(frozen=True)
class KernelBenchLock:
    """``commit``: 40-hex upstream commit; ``files``: repo-relative path -> sha256 hex."""

    repository: str
    commit: str
    files: Mapping[str, str]

    @classmethod
    def from_doc(cls, doc: dict) -> "KernelBenchLock":
        return cls(repository=doc["repository"], commit=doc["commit"], files=dict(doc["files"]))

    def to_doc(self) -> dict:
        return {"schema": LOCK_SCHEMA, "schema_version": 1, "repository": self.repository,
                "commit": self.commit, "files": dict(sorted(self.files.items()))}

    def task_path(self, level: int, task: int) -> str:
        """Lock path of a task file, e.g. ``KernelBench/level2/53_Gemm_....py``.
        Raises UsageError if the lock has no file for the task."""
        prefix = f"KernelBench/level{level}/{task}_"
        hits = [p for p in self.files if p.startswith(prefix) and p.endswith(".py")]
        if len(hits) != 1:
            raise UsageError(f"the KernelBench lock has no file for level {level} task {task}",
                             "rewrite the study's lock with 'python -m kbrepro.harness lock --study <folder>', "
                             "or remove the task from the study")
        return hits[0]


#: the product's KernelBench pin: every task file and the LICENSE at the pinned commit (manifests/)
PIN_FILE = "kernelbench.pin.json"


def load_pin() -> KernelBenchLock:
    """The product's pin (:data:`PIN_FILE`): the judge of every study's lock and of every
    KernelBench file a bundle carries."""
    return load_lock(manifests.path(PIN_FILE))


def load_lock(path: Path) -> KernelBenchLock:
    """Read and schema-check a lock file. Raises UnreadableInputError / InvalidResultsError."""
    doc = jsonio.read_json(path)
    problems = schemas.validate(doc, "kernelbench-lock")
    if problems:
        raise InvalidResultsError(f"{path.name} is not a valid KernelBench lock: "
                                  + "; ".join(map(str, problems[:5])), "restore it from git")
    return KernelBenchLock.from_doc(doc)


def resolve_checkout(explicit: str | os.PathLike | None = None) -> Path:
    """Where the KernelBench checkout is: ``explicit``, else ``$KBREPRO_KERNELBENCH``, else
    ``<project>/KernelBench``."""
    if explicit:
        return Path(explicit).expanduser().resolve()
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser().resolve()
    return PROJECT_ROOT / "KernelBench"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def git_head(root: Path) -> str | None:
    """``git rev-parse HEAD`` of ``root`` if it is a git checkout (or submodule), else None."""
    if not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    head = out.stdout.strip()
    return head if out.returncode == 0 and re.fullmatch(r"[0-9a-f]{40}", head) else None


_FIX = ("run 'git submodule update --init KernelBench' in the project root, or point "
        "--kernelbench / KBREPRO_KERNELBENCH at a checkout of commit {commit}")


class KernelBenchCheckout:
    """A checkout verified against a lock.

    ``verify()`` raises :class:`KernelBenchPinError` if the folder is missing, its git HEAD
    differs from the lock's commit, or a locked file is missing or differs. A folder without
    git metadata is accepted when every locked file matches; ``commit_verified_by`` then
    says ``"file hashes"`` instead of ``"git HEAD and file hashes"``.
    """

    def __init__(self, root: Path, lock: KernelBenchLock):
        self.root = Path(root)
        self.lock = lock
        self.commit_verified_by: str | None = None

    def verify(self, paths: list[str] | None = None) -> None:
        fix = _FIX.format(commit=self.lock.commit)
        if not self.root.is_dir():
            raise KernelBenchPinError(f"no KernelBench checkout at {self.root}", fix)
        head = git_head(self.root)
        if head is not None and head != self.lock.commit:
            raise KernelBenchPinError(
                f"KernelBench checkout {self.root} is at commit {head}, the lock pins {self.lock.commit}",
                f"run 'git -C {self.root} checkout {self.lock.commit}'")
        bad = []
        for rel in paths if paths is not None else sorted(self.lock.files):
            expected = self.lock.files.get(rel)
            if expected is None:
                raise UsageError(f"{rel} is not in the KernelBench lock", "add it with 'python -m kbrepro.harness lock'")
            f = self.root / rel
            if not f.is_file():
                bad.append(f"{rel} is missing")
            elif sha256_file(f) != expected:
                bad.append(f"{rel} differs from the lock (sha256 {sha256_file(f)[:12]}..., "
                           f"lock {expected[:12]}...)")
        if bad:
            raise KernelBenchPinError("KernelBench files do not match the lock: " + "; ".join(bad), fix)
        self.commit_verified_by = "git HEAD and file hashes" if head else "file hashes"

    def read_verified(self, rel: str) -> bytes:
        """Bytes of a locked file, checked against the lock in the same read."""
        expected = self.lock.files.get(rel)
        if expected is None:
            raise UsageError(f"{rel} is not in the KernelBench lock", "add it with 'python -m kbrepro.harness lock'")
        try:
            data = (self.root / rel).read_bytes()
        except OSError as exc:
            raise KernelBenchPinError(f"cannot read {rel} in {self.root}: {exc.strerror}",
                                      _FIX.format(commit=self.lock.commit)) from exc
        if hashlib.sha256(data).hexdigest() != expected:
            raise KernelBenchPinError(f"{rel} differs from the lock", _FIX.format(commit=self.lock.commit))
        return data

    def load_task(self, level: int, task: int) -> types.ModuleType:
        """Import a task module (``Model``, ``get_inputs``, ``get_init_inputs``) from its
        verified bytes. Raises KernelBenchPinError / UsageError."""
        rel = self.lock.task_path(level, task)
        data = self.read_verified(rel)
        module = types.ModuleType(f"kernelbench_level{level}_task{task}")
        module.__file__ = str(self.root / rel)
        exec(compile(data, module.__file__, "exec"), module.__dict__)  # noqa: S102 (verified bytes)
        module.__kbrepro_src__ = bytes(data)  # what a prefetch worker executes (harness/prefetch.py)
        for attr in ("Model", "get_inputs", "get_init_inputs"):
            if not hasattr(module, attr):
                raise UsageError(f"{rel} has no {attr}", "only KernelBench-style task files can be loaded")
        return module


def make_lock(root: Path, repository: str, commit: str, paths: list[str]) -> KernelBenchLock:
    """Build a lock for ``paths`` (repo-relative) of the checkout at ``root``."""
    return KernelBenchLock(repository=repository, commit=commit,
                           files={p: sha256_file(Path(root) / p) for p in paths})
