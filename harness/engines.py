"""Engines that run cases: one small interface, three implementations.

An engine takes case folders (each holding ``case.json``, see :mod:`kbrepro.harness.cases`)
and a **runner**: a module-level function ``runner(folder: str) -> None`` that runs the
case of that folder and writes its results into it (picklable by reference, so that a
spawned process, a Slurm job or a Ray worker can call it). :func:`submit` returns one
:class:`CaseOutcome` per folder, in the order given: either the case finished (its runner
returned and ``done.json`` was written) or a failure record with the error. A case that
raises, exits, segfaults or is killed fails alone; the other cases are not touched.

* ``local`` (:class:`LocalEngine`): one fresh spawned process per case, at most ``shards``
  at a time, each pinned to its own GPU (``CUDA_VISIBLE_DEVICES`` set to one GPU per slot), so
  a case's timing blocks run on a GPU nothing else uses meanwhile. On CUDA, more shards than
  GPUs is a UsageError.
* ``submitit`` (:class:`SubmititEngine`, the default for clusters): Slurm job arrays through
  ``submitit.AutoExecutor`` (``cluster=local`` runs its LocalExecutor, for tests and one
  host); ``--engine-opt K=V`` are the executor's parameters (``slurm_partition``,
  ``timeout_min``, ``gpus_per_node``...). Needs ``pip install 'kbrepro[cluster]'``.
* ``ray`` (:class:`RayEngine`, optional): Ray tasks with ``num_gpus`` each; imported only
  when chosen. Needs ``pip install 'kbrepro[ray]'``.

The outcome of a case is read from its folder (``done.json``, else ``error.json``, else
what the engine saw), so the three engines agree on what a failure is.
"""
from __future__ import annotations

import math
import os
import re
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from kbrepro.errors import EnvironmentUnavailableError, UsageError
from kbrepro.harness import jsonio, startenv
from kbrepro.harness.cases import DONE, ERROR
from kbrepro.harness.isolate import start_with_env

ENGINES = ("local", "submitit", "ray")
#: the longest error message a failure record keeps (characters)
MAX_ERROR = 400


@dataclass(frozen=True)
class CaseOutcome:
    """What became of one case: ``folder`` (its case folder), ``ok`` (True: it finished and
    wrote ``done.json``), ``error`` (one line: the failure, None when ok), ``seconds`` (wall
    time the engine waited for it, s)."""

    folder: str
    ok: bool
    error: str | None
    seconds: float


def one_line(text: str, limit: int = MAX_ERROR) -> str:
    """``text`` on one line (control characters and newlines as spaces), at most ``limit``."""
    s = "".join(ch if ch.isprintable() else " " for ch in str(text))
    return " ".join(s.split())[:limit]


def _write_error(folder: Path, kind: str, message: str) -> None:
    try:
        jsonio.atomic_write_bytes(Path(folder) / ERROR, jsonio.dumps({"type": one_line(kind, 80),
                                                                      "message": one_line(message)}).encode())
    except OSError:
        pass


def run_case(runner: Callable[[str], None], folder: str, env: Mapping[str, str] | None = None) -> str:
    """Run one case in this process: set ``env``, clear an earlier attempt's markers, call
    ``runner(folder)``, then write ``done.json`` (atomically, last). Any exception is written
    to ``error.json`` (type and one-line message) and raised again, so the engine sees the
    job fail. Returns ``folder``. This is the function every engine executes remotely."""
    for k, v in (env or {}).items():
        startenv.set_own(k, v)
    f = Path(folder)
    for m in (DONE, ERROR):
        (f / m).unlink(missing_ok=True)
    t0 = time.time()
    try:
        runner(str(f))
    except BaseException as exc:
        msg = getattr(exc, "message", None) or str(exc) or "(no message)"
        _write_error(f, type(exc).__name__, msg)
        raise
    jsonio.atomic_write_bytes(f / DONE, jsonio.dumps({"seconds": round(time.time() - t0, 3)}).encode())
    return str(f)


def _child(runner, folder: str, env: dict) -> None:  # the spawned process of the local engine
    try:
        run_case(runner, folder, env)
    except BaseException:
        if os.environ.get("KBREPRO_DEBUG") == "1":
            traceback.print_exc()
        os._exit(1)


def outcome_of(folder: str, seconds: float, seen: str | None) -> CaseOutcome:
    """The outcome of a case from its folder: done.json -> ok; else the message of
    error.json; else ``seen`` (what the engine observed: an exit code, a signal, a lost job),
    which is then written to the folder's error.json, so the folder alone tells the outcome."""
    f = Path(folder)
    if (f / DONE).is_file():
        return CaseOutcome(str(f), True, None, seconds)
    err = None
    try:
        doc = jsonio.loads_strict((f / ERROR).read_bytes(), "error.json")
        err = f"{doc.get('type')}: {doc.get('message')}"
    except Exception:
        pass
    msg = one_line(err or seen or "the case ended without writing done.json")
    if err is None:  # the case could not say (killed, lost): the engine's observation becomes its error record
        _write_error(f, "CaseDied", msg)
    return CaseOutcome(str(f), False, msg, seconds)


# ---------------------------------------------------------------------------------------------
# the interface


class Engine:
    """The interface: ``name`` and :meth:`submit`."""

    name = "?"

    def submit(self, folders: Sequence[str], runner: Callable[[str], None]) -> list[CaseOutcome]:
        """Run ``runner`` on every case folder; one outcome per folder, in the order given."""
        raise NotImplementedError


def parse_opts(items: Sequence[str]) -> dict:
    """``K=V`` strings as a dict: V as int, float, true/false, or the string. Raises
    UsageError for an item without ``=``, an empty or repeated key."""
    out: dict = {}
    for it in items:
        k, sep, v = str(it).partition("=")
        k = k.strip()
        if not sep or not k or not k.replace("_", "a").isalnum() or k in out:
            raise UsageError(f"--engine-opt {it!r} is not KEY=VALUE with each KEY once",
                             "e.g. --engine-opt slurm_partition=gpu --engine-opt timeout_min=60")
        v = v.strip()
        val: object = v
        if v.lower() in ("true", "false"):
            val = v.lower() == "true"
        else:
            for typ in (int, float):
                try:
                    val = typ(v)
                    break
                except ValueError:
                    continue
        out[k] = val
    return out


def make_engine(name: str, *, shards: int | None, device: str, opts: Mapping | None = None) -> Engine:
    """The engine ``name`` (one of :data:`ENGINES`) for ``shards`` concurrent cases (None:
    the engine's default) on ``device`` (``cuda`` or ``cpu``) with ``opts`` (from
    :func:`parse_opts`). Raises UsageError (unknown engine, bad shards or option) and
    EnvironmentUnavailableError (exit 4: the engine's package is not installed)."""
    opts = dict(opts or {})
    if name not in ENGINES:
        raise UsageError(f"unknown engine {name!r}", f"use one of {', '.join(ENGINES)}")
    if shards is not None and (not isinstance(shards, int) or shards < 1):
        raise UsageError(f"--shards {shards!r} is not a positive number", "e.g. --shards 2")
    if name == "local":
        gpus = opts.pop("gpus", None)
        minutes = opts.pop("timeout_min", None)
        if opts:
            raise UsageError(f"the local engine takes no option {', '.join(sorted(opts))} (only gpus=0,1,... and "
                             "timeout_min=N)", "drop it, or choose --engine submitit for executor parameters")
        if minutes is not None and (isinstance(minutes, bool) or not isinstance(minutes, (int, float)) or
                                    not math.isfinite(minutes) or minutes <= 0):
            raise UsageError(f"--engine-opt timeout_min={minutes} is not a positive number of minutes",
                             "e.g. --engine-opt timeout_min=60")
        if gpus is not None:
            gpus = _gpu_list(gpus, device)
        return LocalEngine(shards or 1, device, None if gpus is None else str(gpus),
                           timeout_s=None if minutes is None else float(minutes) * 60.0)
    if name == "submitit":
        return SubmititEngine(shards, device, opts)
    return RayEngine(shards, device, opts)


def _gpu_list(gpus, device: str) -> str:
    """``--engine-opt gpus=...`` checked: GPU indices (non-negative integers) or UUIDs
    (``GPU-...``, ``MIG-...``), comma-separated, each once (two slots on one GPU would time two
    cases on it at once); only with a CUDA device. Returns them as a comma-separated string.
    Raises UsageError."""
    if not str(device).startswith("cuda"):
        raise UsageError(f"--engine-opt gpus={gpus} with --device cpu: a CPU run uses no GPU",
                         "drop gpus=, or run on CUDA")
    items = [x.strip() for x in str(gpus).split(",")] if not isinstance(gpus, bool) else [str(gpus)]
    for x in items:
        if not (x.isdigit() or re.fullmatch(r"(GPU|MIG)-[0-9A-Za-z-]{1,80}", x)):
            raise UsageError(f"--engine-opt gpus={gpus}: {x!r} is not a GPU index or UUID",
                             "e.g. --engine-opt gpus=0,1")
    if len(set(items)) != len(items):
        raise UsageError(f"--engine-opt gpus={gpus} names a GPU twice: no two case processes may share one",
                         "name each GPU once")
    return ",".join(items)


# ---------------------------------------------------------------------------------------------
# local: one spawned process per case, one GPU per slot


def visible_gpus() -> list[str]:
    """The GPUs this process may hand out: the entries of CUDA_VISIBLE_DEVICES where it is
    set, else ``0 .. n-1`` for the n devices torch counts (0 where torch or CUDA is absent)."""
    v = os.environ.get("CUDA_VISIBLE_DEVICES")
    if v is not None:
        return [x.strip() for x in v.split(",") if x.strip() != ""]
    try:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    except Exception:
        return []


class LocalEngine(Engine):
    """One host: a fresh spawned process per case, at most ``shards`` at once. On CUDA each
    slot owns one GPU (``CUDA_VISIBLE_DEVICES`` of its processes is that one GPU), so no two
    cases share a GPU at any time; ``gpus`` (``"0,1"``) chooses them, by default every visible
    GPU; ``timeout_s`` (s, None: none) kills a case process that runs longer, failing that case.
    Raises UsageError when ``shards`` exceeds the GPUs (CUDA) or the CPU cores (CPU)."""

    name = "local"

    def __init__(self, shards: int, device: str, gpus: str | None = None, poll_s: float = 0.05,
                 timeout_s: float | None = None):
        self.device = "cuda" if device.startswith("cuda") else "cpu"
        self.poll_s = poll_s
        self.timeout_s = timeout_s
        if self.device == "cuda":
            have = [g.strip() for g in gpus.split(",") if g.strip()] if gpus else visible_gpus()
            if not have:
                raise EnvironmentUnavailableError("no CUDA GPU here for the local engine",
                                                  "run on a GPU machine, or use --device cpu for a run without timings")
            if shards > len(have):
                raise UsageError(f"--shards {shards} with {len(have)} GPU(s): timed cases need a GPU each, and no two "
                                 "may share one", f"use --shards {len(have)} or fewer (one case process per GPU)")
            # the worker name lands in ran_on: a GPU given by its UUID (CUDA_VISIBLE_DEVICES=GPU-...,
            # as Slurm and containers set it) is named by its slot, never by the raw UUID
            self.slots = [{"CUDA_VISIBLE_DEVICES": g, "KBREPRO_WORKER": f"gpu{g}" if g.isdigit() else f"gpu-slot{i}"}
                          for i, g in enumerate(have[:shards])]
        else:
            cores = os.cpu_count() or 1
            if shards > cores:
                raise UsageError(f"--shards {shards} with {cores} CPU core(s)", f"use --shards {cores} or fewer")
            self.slots = [{"CUDA_VISIBLE_DEVICES": "", "KBREPRO_WORKER": f"cpu{i}"} for i in range(shards)]

    def submit(self, folders, runner):
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        pending = list(enumerate(folders))
        running: dict[int, tuple] = {}  # slot -> (index, process, start)
        results: dict[int, CaseOutcome] = {}
        try:
            while pending or running:
                for slot in range(len(self.slots)):
                    if slot not in running and pending:
                        i, folder = pending.pop(0)
                        env = dict(self.slots[slot])
                        p = ctx.Process(target=_child, args=(runner, str(folder), env), daemon=False)
                        start_with_env(p, env)  # the spawned interpreter starts with these (before torch)
                        running[slot] = (i, p, time.time())
                for slot, (i, p, t0) in list(running.items()):
                    late = self.timeout_s is not None and p.exitcode is None and time.time() - t0 > self.timeout_s
                    if late:
                        p.kill()
                    elif p.exitcode is None:
                        continue
                    p.join()
                    code = p.exitcode
                    seen = (f"the case ran longer than timeout_min={self.timeout_s / 60:g} and was killed" if late else
                            f"the case process was killed by signal {-code}" if code < 0 else
                            f"the case process exited with code {code}") if late or code != 0 else None
                    results[i] = outcome_of(str(folders[i]), time.time() - t0, seen)
                    del running[slot]
                if running:
                    time.sleep(self.poll_s)
        except BaseException:
            for _, p, _ in running.values():  # Ctrl-C or an error here: no case process outlives us
                if p.is_alive():
                    p.terminate()
                p.join(5)
            raise
        return [results[i] for i in range(len(folders))]


# ---------------------------------------------------------------------------------------------
# submitit: Slurm job arrays (LocalExecutor with cluster=local)


def _need(module: str, extra: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise EnvironmentUnavailableError(f"the {module} package is not installed: engine {module} is unavailable",
                                          f"pip install 'kbrepro[{extra}]'") from exc


class SubmititEngine(Engine):
    """Cases as one submitit job array (``AutoExecutor.map_array``): a Slurm array on a
    cluster, ``cluster=local`` for submitit's LocalExecutor (one subprocess per job on this
    host), ``cluster=debug`` in this process. ``opts``: ``cluster``, ``folder`` (submitit's
    log folder, default ``<results>/submitit``) and any executor parameter
    (``slurm_partition``, ``timeout_min``, ``gpus_per_node``, ``slurm_array_parallelism``...).
    ``shards`` sets ``slurm_array_parallelism`` (at most that many cases at once) on Slurm.
    Raises EnvironmentUnavailableError without submitit; UsageError for a parameter the
    executor does not take."""

    name = "submitit"

    def __init__(self, shards: int | None, device: str, opts: Mapping):
        self.submitit = _need("submitit", "cluster")
        self.shards = shards
        self.device = "cuda" if device.startswith("cuda") else "cpu"
        self.opts = dict(opts)
        self.cluster = self.opts.pop("cluster", None)
        self.folder = self.opts.pop("folder", None)
        if self.cluster not in (None, "local", "debug", "slurm"):
            raise UsageError(f"--engine-opt cluster={self.cluster} is not one of local, debug, slurm",
                             "e.g. --engine-opt cluster=local to run the jobs on this host")

    def executor(self, log_folder: str):
        """The configured ``submitit.AutoExecutor``. Raises UsageError for a bad parameter."""
        ex = self.submitit.AutoExecutor(folder=self.folder or log_folder, cluster=self.cluster)
        params = dict(self.opts)
        if self.device == "cuda":
            params.setdefault("gpus_per_node", 1)
        if self.shards is not None and ex.cluster == "slurm":
            params.setdefault("slurm_array_parallelism", self.shards)
        try:
            ex.update_parameters(**params)
        except (ValueError, TypeError, NameError) as exc:
            raise UsageError(f"submitit's {ex.cluster} executor refuses the parameters: {one_line(exc, 200)}",
                             "give --engine-opt KEY=VALUE with the executor's parameters, e.g. timeout_min=60, "
                             "slurm_partition=gpu") from exc
        return ex

    def submit(self, folders, runner):
        if not folders:
            return []
        log = str(Path(folders[0]).parent.parent / "submitit")
        ex = self.executor(log)
        t0 = time.time()
        n = len(folders)

        with startenv.launching():  # submitit's executors copy os.environ into the jobs they start
            jobs = ex.map_array(run_case, [runner] * n, [str(f) for f in folders],
                                [{"KBREPRO_WORKER": "submitit"}] * n)
        out = []
        for f, job in zip(folders, jobs):
            seen = None
            try:
                job.result()
            except Exception as exc:  # the job failed, was cancelled, timed out or lost its node
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                seen = f"submitit job {getattr(job, 'job_id', '?')}: {type(exc).__name__}: {one_line(first, 200)}"
            out.append(outcome_of(str(f), time.time() - t0, seen))
        return out


# ---------------------------------------------------------------------------------------------
# Ray (optional)


class RayEngine(Engine):
    """Cases as Ray tasks (``num_gpus=1`` each on CUDA, so Ray gives no two of them one GPU),
    at most ``shards`` in flight. ``opts``: ``address`` (``ray.init``'s, default: a local
    instance or ``$RAY_ADDRESS``), ``num_cpus`` per task. Raises EnvironmentUnavailableError
    without the ray package; UsageError for another option."""

    name = "ray"

    def __init__(self, shards: int | None, device: str, opts: Mapping):
        extra = sorted(set(opts) - {"address", "num_cpus"})
        if extra:
            raise UsageError(f"the ray engine takes no option {', '.join(extra)} (only address, num_cpus)",
                             "drop it")
        self.ray = _need("ray", "ray")
        self.shards = shards
        self.device = "cuda" if device.startswith("cuda") else "cpu"
        self.opts = dict(opts)

    def submit(self, folders, runner):
        ray = self.ray
        ray.init(address=self.opts.get("address"), ignore_reinit_error=True)
        task = ray.remote(num_gpus=1 if self.device == "cuda" else 0, num_cpus=self.opts.get("num_cpus", 1),
                          max_retries=0)(run_case)
        limit = self.shards or len(folders)
        t0 = time.time()
        refs: dict = {}
        todo = list(enumerate(folders))
        seen: dict[int, str | None] = {}
        while todo or refs:
            while todo and len(refs) < limit:
                i, f = todo.pop(0)
                refs[task.remote(runner, str(f), {"KBREPRO_WORKER": "ray"})] = i
            done, _ = ray.wait(list(refs), num_returns=1)
            for ref in done:
                i = refs.pop(ref)
                try:
                    ray.get(ref)
                    seen[i] = None
                except Exception as exc:
                    seen[i] = f"ray task: {type(exc).__name__}: {one_line(exc, 200)}"
        return [outcome_of(str(f), time.time() - t0, seen.get(i)) for i, f in enumerate(folders)]


__all__ = ["ENGINES", "CaseOutcome", "Engine", "LocalEngine", "SubmititEngine", "RayEngine", "make_engine",
           "parse_opts", "run_case", "outcome_of", "visible_gpus", "one_line"]
