"""A candidate run split into cases, run by an engine, merged back into one results folder.

``make_bundle.py --candidate ... --shards N --engine local|submitit|ray`` plans one case per
(candidate, task) pair (:func:`plan_cases`), writes each case's folder
(:func:`prepare_cases`), hands the folders to an engine (:mod:`kbrepro.harness.engines`)
with :func:`run_case_folder` as the runner, and merges what the cases wrote
(:func:`merge_cases`, a pure function) into the results folder layout that
``--from-results`` packs. ``--from-results`` on a folder whose cases were never merged (a
Slurm run, say) merges them in memory the same way (:func:`merged_files`).

The merged ``results/candidates.json`` is the unsharded document plus two additive fields:
``cases`` (every case of the plan, in plan order: its id, index, fields, ``status``
``done``/``failed``, ``error`` and ``ran_on``) and, in each candidate record, ``case``
(``id``, the copy bandwidth its own process measured, GB/s, which its roofline used, and the
raw copy block that bandwidth is derived from: the verifier derives it again).
A case that failed is listed as failed and has no record; the others are intact.

    python -m kbrepro.bundle.shard plan --candidate A.py --task 1/88 ... --results-dir RESULTS   # plan only
    python -m kbrepro.bundle.shard run-case RESULTS/cases/<id>    # (re)run one case here
    python -m kbrepro.bundle.shard run RESULTS [--max-cases K]    # run the cases not done yet, then merge
    python -m kbrepro.bundle.shard merge RESULTS                  # merge the cases into RESULTS/results
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from kbrepro.errors import InvalidResultsError, UnreadableInputError, UsageError
from kbrepro.harness import cases as hcases
from kbrepro.harness import jsonio
from kbrepro.harness.cases import Case
from kbrepro.model.sizes import SizeValue, canonical_map


PLAN = "shard.json"


PLAN_SCHEMA = "kbrepro/shard-plan"


JOB = "job.json"


#: the most cases one plan holds (the candidates schema's limit)
MAX_CASES = 256


def plan_cases(items: Sequence[tuple[str, bytes, str]], *, profile: str, pin,
               sizes: Mapping[str, SizeValue] | None = None, extra_shapes: tuple = ()) -> list[Case]:
    """One :class:`~kbrepro.harness.cases.Case` per ``(name, candidate bytes, task pin path)``
    in ``items``, indexed in that order. ``pin`` is the KernelBench lock (task digests come
    from it, never from the checkout); ``sizes`` (name -> int or tuple of ints) and
    ``extra_shapes`` (a tuple of such mappings) are the run's variant. Raises UsageError for
    more than :data:`MAX_CASES` cases, an unknown profile, or two cases with the same id."""
    import hashlib

    from kbrepro.harness.candidate import PROFILES

    if profile not in PROFILES:
        raise UsageError(f"unknown candidate profile {profile!r}", f"use one of {', '.join(PROFILES)}")
    if len(items) > MAX_CASES:
        raise UsageError(f"{len(items)} cases, more than the {MAX_CASES} one run holds",
                         "split the candidates over several runs")
    seeds = tuple(PROFILES[profile].seeds)
    out = []
    for i, (name, src, tp) in enumerate(items):
        out.append(Case(task=tp, task_sha256=pin.files[tp], candidate=name,
                        candidate_sha256=hashlib.sha256(src).hexdigest(), profile=profile, seeds=seeds,
                        sizes=tuple(sorted(canonical_map(sizes).items())),
                        extra_shapes=tuple(tuple(canonical_map(s).items()) for s in extra_shapes), index=i))
    ids = [c.id for c in out]
    if len(set(ids)) != len(ids):
        raise UsageError("two cases are the same (the same candidate, task and variant)", "give each pair once")
    return out


def prepare_cases(results_dir: Path, cases: Sequence[Case], sources: Sequence[bytes], *, kernelbench: str | None,
                  device: str, engine: str) -> list[Path]:
    """Write ``shard.json`` (the plan: the case ids in order, device, engine) and each case's
    folder (``case.json``, ``job.json`` with the run's parameters that are not the case's
    identity, ``input/<candidate>.py``) under ``results_dir``. Returns the case folders in
    plan order. Raises OSError where the folder cannot be written."""
    results_dir = Path(results_dir)
    folders = []
    for c, src in zip(cases, sources):
        f = hcases.case_dir(results_dir, c.id)
        (f / "input").mkdir(parents=True, exist_ok=True)
        jsonio.write_json(f / "case.json", c.to_doc())
        jsonio.write_json(f / JOB, {"schema": "kbrepro/case-job", "schema_version": 1, "device": device,
                                    "engine": engine, "kernelbench": None if kernelbench is None
                                    else str(Path(kernelbench).resolve())})
        jsonio.atomic_write_bytes(f / "input" / f"{c.candidate}.py", src)
        folders.append(f)
    jsonio.write_json(results_dir / PLAN, {"schema": PLAN_SCHEMA, "schema_version": 1, "device": device,
                                           "engine": engine, "cases": [c.id for c in cases]})
    return folders


def run_case_folder(folder: str) -> None:
    """Run the case of ``folder``: write ``ran_on.json`` (where it runs, before it runs), then
    check and time its candidate against its task (:func:`kbrepro.bundle.candidates.run_candidates`
    with one item, the plan's name) into ``folder/result``, replacing an earlier attempt's.
    Raises UnreadableInputError (a case folder that is not one, a candidate file that is not
    the one planned) and whatever the run raises."""
    from kbrepro.bundle import candidates as bc

    f = Path(folder)
    case = hcases.case_from_doc(jsonio.read_json(f / "case.json"))
    job = jsonio.read_json(f / JOB)
    src_path = f / "input" / f"{case.candidate}.py"
    import hashlib

    if hashlib.sha256(src_path.read_bytes()).hexdigest() != case.candidate_sha256:
        raise UnreadableInputError(f"{src_path.name} is not the candidate the case names",
                                   "remove the case folder and plan the run again")
    worker = os.environ.get("KBREPRO_WORKER")
    if job["engine"] == "submitit":  # the job's own id (a Slurm array task: <array>_<index>)
        try:
            import submitit

            worker = f"job {submitit.JobEnvironment().job_id}"
        except Exception:
            pass
    jsonio.write_json(f / hcases.RAN_ON, hcases.ran_on(job["device"], job["engine"], worker))
    res = f / "result"
    if res.exists():
        shutil.rmtree(res)
    bc.run_candidates([(src_path, case.task)], names=[case.candidate], profile=case.profile,
                      kernelbench=job.get("kernelbench"), results_dir=res,
                      extra_shapes=tuple(dict(s) for s in case.extra_shapes), sizes=dict(case.sizes) or None,
                      device=job["device"])


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
    from kbrepro.bundle.candidates import _read_results

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
        from kbrepro.bundle import scrub

        # an error may name the machine's folders: none leaves it (bundle/scrub.py)
        err = scrub.scrub_text(err, extra_paths=[str(f.resolve().parent.parent.parent), str(f.parent.parent.parent)])
    files: dict = {}
    if status == "done":
        try:
            files = _read_results(f / "result")
        except OSError as exc:
            raise UnreadableInputError(f"cannot read the result of case {case.id}: {exc.strerror}",
                                       "run the case again") from exc
    return CaseResult(case, status, err, ran, files)


def load_plan(results_dir: Path) -> list[CaseResult]:
    """Every case of ``results_dir``'s plan (``shard.json``), in plan order. Raises
    UnreadableInputError for a plan or case folder that cannot be read or does not match."""
    from kbrepro import schemas

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


def plan_folder(items: Sequence[tuple[Path, str]], *, profile: str, kernelbench: str | None, results_dir: Path,
                device: str, engine: str, sizes: Mapping[str, SizeValue] | None = None,
                extra_shapes: tuple = ()) -> list[Path]:
    """Plan every ``(candidate file, task argument)`` as its own case and write the plan and
    the case folders under ``results_dir`` (:func:`plan_cases`, :func:`prepare_cases`); runs
    nothing. Returns the case folders in plan order. Raises UsageError (bad task or profile,
    sizes or extra shapes the tasks refuse: :func:`kbrepro.bundle.candidates.task_configs`),
    KernelBenchPinError and UnreadableInputError (a candidate file that cannot be read)."""
    from kbrepro.bundle import candidates as bc
    from kbrepro.harness.kernelbench import KernelBenchCheckout, load_pin, resolve_checkout

    pin = load_pin()
    paths = [bc.task_path(t, pin) for _, t in items]
    checkout = KernelBenchCheckout(resolve_checkout(kernelbench), pin)
    checkout.verify(sorted(set(paths)))
    bc.task_configs(profile, sizes, extra_shapes, paths, checkout)  # the run's check of sizes, at plan time
    names = bc.candidate_names([p for p, _ in items])
    srcs = bc.read_sources([p for p, _ in items])
    plan = plan_cases(list(zip(names, srcs, paths)), profile=profile, pin=pin, sizes=sizes, extra_shapes=extra_shapes)
    return prepare_cases(Path(results_dir), plan, srcs, kernelbench=kernelbench, device=device, engine=engine)


def plan_device(results_dir: Path) -> str:
    """The device of the plan in ``results_dir`` (``cuda`` or ``cpu``). Raises
    UnreadableInputError for a plan that cannot be read."""
    from kbrepro import schemas

    plan = jsonio.read_json(Path(results_dir) / PLAN)
    if not isinstance(plan, dict) or schemas.validate(plan, "shard-plan"):
        raise UnreadableInputError(f"{PLAN} is not a shard plan (schemas/shard-plan.schema.json)",
                                   "pass the folder a sharded run wrote")
    return plan["device"]


def run_plan(results_dir: Path, engine, *, runner: Callable[[str], None] = run_case_folder,
             progress: Callable[[str], None] | None = None, max_cases: int | None = None) -> tuple[Path, list[dict]]:
    """Run the cases of the plan in ``results_dir`` that are not done (failed ones again), at
    most ``max_cases`` of them (None: all), on ``engine``; then merge every finished case into
    ``results_dir``. Returns ``(results_dir, cases not done)``. Raises the engine's errors,
    UnreadableInputError for a plan or case folder that cannot be read, InvalidResultsError
    when no case of the plan has finished."""
    with run_lock(Path(results_dir)):
        return _run_plan(Path(results_dir), engine, runner=runner, progress=progress, max_cases=max_cases)


#: the lock file a run holds in its results folder while it runs and merges cases
LOCK = ".shard-run.lock"


class run_lock:
    """Hold ``results_dir/.shard-run.lock`` (``flock``, exclusive, not waiting) while a run
    runs and merges its cases: two runs on one folder would run the same cases at once, each
    clearing the other's result folder. Raises UsageError (exit 2) where another process
    holds it. A no-op where the OS has no ``fcntl``."""

    def __init__(self, results_dir: Path):
        self.path = Path(results_dir) / LOCK
        self.fd = None

    def __enter__(self):
        try:
            import fcntl
        except ImportError:  # pragma: no cover (not POSIX)
            return self
        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise UsageError(f"cannot write {self.path.name} in {self.path.parent}: {exc.strerror}",
                             "run in a results folder you can write") from exc
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(self.fd)
            self.fd = None
            raise UsageError(f"another run is running the cases of {self.path.parent} (it holds {LOCK})",
                             "wait for it to end; run one 'shard run' per results folder at a time") from exc
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)  # closing releases the lock; the file stays (removing it would race)
            self.fd = None
        return False


def _run_plan(results_dir: Path, engine, *, runner, progress, max_cases) -> tuple[Path, list[dict]]:
    say = progress or (lambda m: None)
    results = load_plan(Path(results_dir))
    folders = [hcases.case_dir(Path(results_dir), r.case.id) for r in results]
    todo = [f for f in folders if hcases.case_status(f) != "done"]
    if max_cases is not None:
        todo = todo[:max_cases]
    for f in todo:  # where it runs now is the engine's (a plan made for one engine may be run by another)
        job = jsonio.read_json(f / JOB)
        if isinstance(job, dict) and job.get("engine") != engine.name:
            jsonio.write_json(f / JOB, {**job, "engine": engine.name})
    say(f"{len(folders)} case(s), {len(todo)} to run on engine {engine.name}")
    for o in engine.submit([str(f) for f in todo], runner):
        say(f"case {Path(o.folder).name}: " + (f"done in {o.seconds:.1f} s" if o.ok else f"FAILED: {o.error}"))
    files, failed = merge_cases(load_plan(Path(results_dir)))
    write_merged(Path(results_dir), files)
    return Path(results_dir), failed


def run_sharded(items: Sequence[tuple[Path, str]], *, profile: str, kernelbench: str | None, results_dir: Path,
                engine, device: str = "cuda", sizes: Mapping[str, SizeValue] | None = None, extra_shapes: tuple = (),
                runner: Callable[[str], None] = run_case_folder,
                progress: Callable[[str], None] | None = None) -> tuple[Path, list[dict]]:
    """Plan and prepare every ``(candidate file, task argument)`` as its own case
    (:func:`plan_folder`), run them on ``engine`` (a :class:`kbrepro.harness.engines.Engine`)
    and merge the finished cases into ``results_dir`` (``results/``, ``inputs/``,
    ``provenance/``) (:func:`run_plan`). Cases whose folder already says ``done`` are not run
    again. Returns ``(results_dir, failed cases)``. Raises UsageError (bad task or profile),
    UnreadableInputError (a candidate file), the engine's errors, and InvalidResultsError when
    no case finished."""
    plan_folder(items, profile=profile, kernelbench=kernelbench, results_dir=Path(results_dir), device=device,
                engine=engine.name, sizes=sizes, extra_shapes=extra_shapes)
    return run_plan(Path(results_dir), engine, runner=runner, progress=progress)


if __name__ == "__main__":
    from kbrepro.cli.shard import build  # the commands import the candidate engine: not this module's
    from kbrepro.process import run_main

    run_main(build())


__all__ = ["plan_cases", "prepare_cases", "run_case_folder", "CaseResult", "load_case", "load_plan", "merge_cases",
           "merged_files", "write_merged", "is_sharded", "run_sharded", "plan_folder", "run_plan", "run_lock",
           "plan_device", "PLAN", "JOB"]
