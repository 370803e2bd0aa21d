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
from pathlib import Path
from typing import Callable, Mapping, Sequence

from kbrepro.errors import UnreadableInputError, UsageError
from kbrepro.harness import cases as hcases, jsonio
from kbrepro.harness.cases import Case
from kbrepro.model.sizes import SizeValue, canonical_map
from kbrepro import schemas
from kbrepro.bundle import candidates as bc
from kbrepro.bundle.shard_merge import LOCK, PLAN, load_plan, merge_cases, write_merged
from kbrepro.harness.candidate import PROFILES
from kbrepro.harness.kernelbench import KernelBenchCheckout, load_pin, resolve_checkout


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


def plan_folder(items: Sequence[tuple[Path, str]], *, profile: str, kernelbench: str | None, results_dir: Path,
                device: str, engine: str, sizes: Mapping[str, SizeValue] | None = None,
                extra_shapes: tuple = ()) -> list[Path]:
    """Plan every ``(candidate file, task argument)`` as its own case and write the plan and
    the case folders under ``results_dir`` (:func:`plan_cases`, :func:`prepare_cases`); runs
    nothing. Returns the case folders in plan order. Raises UsageError (bad task or profile,
    sizes or extra shapes the tasks refuse: :func:`kbrepro.bundle.candidates.task_configs`),
    KernelBenchPinError and UnreadableInputError (a candidate file that cannot be read)."""
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
    from kbrepro.cli.shard import build  # (here, not at the top: kbrepro.cli.shard imports this module)
    from kbrepro.process import run_main

    run_main(build())


__all__ = ["plan_cases", "prepare_cases", "run_case_folder", "run_sharded", "plan_folder", "run_plan", "run_lock",
           "plan_device", "JOB"]
