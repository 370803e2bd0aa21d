"""A sharded run's results folder, read and merged without running anything: its plan
(``shard.json``), each case's folder (:func:`load_case`), the pure merge of the finished cases
into one results layout (:func:`merge_cases`, :func:`merged_files`), and a plain results
folder's files (:func:`read_results`). :mod:`kbrepro.bundle.shard` plans and runs the cases;
the candidate packer reads a folder through this module.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from kbrepro.errors import InvalidResultsError, UnreadableInputError, UsageError
from kbrepro.harness import cases as hcases, jsonio
from kbrepro.harness.cases import Case
from kbrepro import schemas
from kbrepro.bundle import scrub



#: the most files and bytes a results folder of candidates may hold (a whole level: up to 256
#: records of about 10 to 30 provenance files each; the archive reader takes 10,000 members)
MAX_FILES = 8000
MAX_BYTES = 1 << 30


PLAN = "shard.json"


@dataclass(frozen=True)
class CaseResult:
    """What one case folder holds: its ``case``, ``status`` (``done``, ``failed``,
    ``pending``), ``error`` (one line, or None), ``ran_on`` (dict or None) and ``files`` (its
    result folder's files, path relative to it -> bytes; empty unless done)."""

    case: Case
    status: str
    error: str | None
    ran_on: dict | None
    files: Mapping[str, bytes]


def load_case(folder: Path) -> CaseResult:
    """Read a case folder. Raises UnreadableInputError for a folder that is not a case or a
    result that cannot be read; a case that never finished is ``pending``."""
    f = Path(folder)
    case = hcases.case_from_doc(jsonio.read_json(f / "case.json"))
    status = hcases.case_status(f)
    ran = None
    if (f / hcases.RAN_ON).is_file():
        ran = jsonio.read_json(f / hcases.RAN_ON)
    err = None
    if status == "failed":
        try:
            doc = jsonio.read_json(f / hcases.ERROR)
            err = f"{doc.get('type')}: {doc.get('message')}"
        except UnreadableInputError as exc:
            err = exc.message

        # an error may name the machine's folders: none leaves it (bundle/scrub.py)
        err = scrub.scrub_text(err, extra_paths=[str(f.resolve().parent.parent.parent), str(f.parent.parent.parent)])
    files: dict = {}
    if status == "done":
        try:
            files = read_results(f / "result")
        except OSError as exc:
            raise UnreadableInputError(f"cannot read the result of case {case.id}: {exc.strerror}",
                                       "run the case again") from exc
    return CaseResult(case, status, err, ran, files)


def load_plan(results_dir: Path) -> list[CaseResult]:
    """Every case of ``results_dir``'s plan (``shard.json``), in plan order. Raises
    UnreadableInputError for a plan or case folder that cannot be read or does not match."""
    plan = jsonio.read_json(Path(results_dir) / PLAN)
    if not isinstance(plan, dict) or schemas.validate(plan, "shard-plan"):
        raise UnreadableInputError(f"{PLAN} is not a shard plan (schemas/shard-plan.schema.json)",
                                   "pass the folder a sharded run wrote")
    out = []
    for i, cid in enumerate(plan["cases"]):
        f = hcases.case_dir(results_dir, cid)
        if not (f / "case.json").is_file():
            raise UnreadableInputError(f"case {cid[:30]} of the plan has no folder cases/{cid[:30]}",
                                       "the results folder is incomplete; copy every case folder into it")
        r = load_case(f)
        if r.case.id != cid or r.case.index != i:
            raise UnreadableInputError(f"case folder {cid[:30]} holds another case", "plan the run again")
        out.append(r)
    return out


def _first_diff(a, b) -> bool:
    return jsonio.dumps(a) != jsonio.dumps(b)


def merge_cases(results: Sequence[CaseResult]) -> tuple[dict[str, bytes], list[dict]]:
    """Merge case results into one results folder: returns ``(files, failed)`` where ``files``
    maps paths (``results/candidates.json``, ``results/environment.json``, ``inputs/...``,
    ``provenance/...``) to bytes and ``failed`` lists ``{"id", "candidate", "task", "error"}``
    of the cases that did not finish. Pure: the output depends only on the cases (ordered by
    their plan index, never by the order given or the order they finished). The environment
    document is the first finished case's; ``started_utc``/``finished_utc`` span every case.
    Raises InvalidResultsError when no case finished, when cases disagree on what must be
    common (profile, predicate, KernelBench commit, device) or when two cases write one file
    with different bytes; UsageError for two cases with one index or id."""
    rs = sorted(results, key=lambda r: r.case.index)
    idx = [r.case.index for r in rs]
    ids = [r.case.id for r in rs]
    if len(set(idx)) != len(idx) or len(set(ids)) != len(ids):
        raise UsageError("two case results share a plan index or an id", "merge the cases of one plan")
    done = [r for r in rs if r.status == "done"]
    failed = [{"id": r.case.id, "candidate": r.case.candidate, "task": r.case.task,
               "error": r.error or (PENDING if r.status == "pending" else "failed")}
              for r in rs if r.status != "done"]
    if not done:
        raise InvalidResultsError(f"none of the {len(rs)} cases finished: "
                                  + "; ".join(f"{f['candidate']}: {f['error'][:120]}" for f in failed[:3]),
                                  "fix what the errors say and run again")
    files: dict[str, bytes] = {}
    base = None
    records = []
    starts, ends = [], []
    env_raw = None
    for r in done:
        if "results/candidates.json" not in r.files or "results/environment.json" not in r.files:
            raise InvalidResultsError(f"case {r.case.id} finished but holds no results/candidates.json",
                                      "run the case again")
        doc = jsonio.loads_strict(r.files["results/candidates.json"], f"cases/{r.case.id}/result/results/candidates.json")
        if not isinstance(doc, dict) or not isinstance(doc.get("candidates"), list) or len(doc["candidates"]) != 1:
            raise InvalidResultsError(f"case {r.case.id}: its result does not hold exactly one candidate record",
                                      "run the case again")
        rec = doc["candidates"][0]
        want = {"name": r.case.candidate, "task": r.case.task, "task_sha256": r.case.task_sha256,
                "source_sha256": r.case.candidate_sha256}
        got = {k: rec.get(k) for k in want}
        if got != want or doc.get("profile") != r.case.profile:
            raise InvalidResultsError(f"case {r.case.id}: its result is not of the case's candidate, task and profile",
                                      "run the case again")
        common = {k: doc.get(k) for k in ("schema", "schema_version", "kind", "profile", "device", "predicate",
                                          "kernelbench")}
        if base is None:
            base = dict(doc)
            base_common = common
            env_raw = r.files["results/environment.json"]
        elif _first_diff(common, base_common):
            raise InvalidResultsError(f"case {r.case.id} ran with another profile, predicate, device or KernelBench "
                                      "commit than the first case", "merge the cases of one plan")
        starts.append(doc.get("started_utc"))
        ends.append(doc.get("finished_utc"))
        bw = doc.get("bandwidth") or {}
        case = {"id": r.case.id, "bandwidth_gbps": bw.get("gbps")}
        if bw.get("block") is not None:  # the raw block the case's bandwidth is derived from (the verifier does)
            case["bandwidth_block"] = bw["block"]
        records.append({**rec, "case": case})
        for rel, data in r.files.items():
            if rel in ("results/candidates.json", "results/environment.json"):
                continue
            if rel in files and files[rel] != data:
                raise InvalidResultsError(f"cases write {rel} with different bytes", "merge the cases of one plan")
            files[rel] = data
    merged = dict(base)
    merged["started_utc"] = min(starts)
    merged["finished_utc"] = max(ends)
    merged["candidates"] = records
    merged["cases"] = [{"id": r.case.id, "index": r.case.index, **r.case.fields(),
                        "status": "done" if r.status == "done" else "failed",
                        "error": None if r.status == "done" else (r.error or PENDING)[:400],
                        "ran_on": r.ran_on if isinstance(r.ran_on, dict) else None} for r in rs]
    files["results/candidates.json"] = jsonio.dumps(merged).encode()
    files["results/environment.json"] = env_raw
    return dict(sorted(files.items())), failed


#: the error of a case without done.json or error.json
PENDING = "the case has not finished (no done.json: never run, interrupted, or still running)"


def merged_files(results_dir: Path) -> tuple[dict[str, bytes], list[dict]]:
    """:func:`merge_cases` of the plan in ``results_dir`` (read with :func:`load_plan`).
    Raises UsageError while a run holds the folder (:func:`lock_held`): its cases are still
    being written."""
    if lock_held(Path(results_dir)):
        raise UsageError(f"a run is running the cases of {results_dir} (it holds {LOCK}): its cases are still being "
                         "written", "pack or merge when it has ended")
    return merge_cases(load_plan(results_dir))


def lock_held(results_dir: Path) -> bool:
    """Whether another process holds ``results_dir``'s run lock (read only: a folder packed
    with --from-results may be read-only)."""
    try:
        import fcntl

        fd = os.open(Path(results_dir) / LOCK, os.O_RDONLY)
    except (ImportError, OSError):
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def write_merged(results_dir: Path, files: Mapping[str, bytes]) -> None:
    """Write merged files into ``results_dir`` (atomically, file by file; the case folders
    stay)."""
    for rel, data in files.items():
        jsonio.atomic_write_bytes(Path(results_dir) / rel, data)


def is_sharded(folder: Path) -> bool:
    """Whether ``folder`` holds a shard plan (``shard.json``)."""
    try:
        return (Path(folder) / PLAN).is_file()
    except OSError:
        return False


#: the lock file a run holds in its results folder while it runs and merges cases
LOCK = ".shard-run.lock"


def read_results(folder: Path) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    total = 0
    for top in ("inputs", "results", "provenance"):
        root = folder / top
        if not root.is_dir():
            continue
        for p in sorted(root.rglob("*")):
            if p.is_symlink():
                raise UnreadableInputError(f"{p.relative_to(folder)} is a symbolic link", "results hold plain files only")
            if not p.is_file():
                continue
            rel = p.relative_to(folder).as_posix()
            if rel == "inputs/claims.yaml":
                continue  # written anew by the packer
            data = p.read_bytes()
            total += len(data)
            out[rel] = data
            if len(out) > MAX_FILES or total > MAX_BYTES:
                raise UnreadableInputError(f"the results folder holds more than {MAX_FILES} files or {MAX_BYTES} bytes",
                                           "pack the folder run_candidates wrote, nothing else")
    return out


__all__ = ["PLAN", "LOCK", "CaseResult", "load_case", "load_plan", "merge_cases", "merged_files", "lock_held", "write_merged", "is_sharded", "read_results"]
