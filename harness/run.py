"""The study engine: any study, run end to end in one process, writing schema-versioned
result documents.

The engine knows no study. It loads the study's binding (:mod:`kbrepro.harness.plugin`)
and calls it where the contract says. Stages, in order (each writes its documents
atomically when it ends, and ``run.json`` records the stage and its wall time, so a crash
keeps what was measured and never leaves a run that looks complete):

1. ``setup``: GPU and CuPy present, precision modes set, NVRTC/driver compile cache off,
   the KernelBench files the binding uses verified against the study's lock, fingerprint.
2. ``compile``: every variant compiled; cubin, PTX and SASS saved; FTZ evidence from PTX/SASS.
3. ``witness`` (a study with a witness): the binding's witness for the reference and every
   variant; whether it discriminates is decided here (reference on the CPU with denormals
   kept and flushed); only a discriminating witness judges a binary's FTZ mode.
4. per task: full-program correctness (seeds x distributions, every variant), the binding's
   controls, the timing-input check, TorchScript (full program and every scope), CUDA-graph
   replay after mutation, eligibility, timing (full program and every scope, events and
   graphs, every arm interleaved in the same rounds).
5. ``extra_shapes``; the binding's own stages; ``self_test`` where the study asks for it.

Documents (``schemas/<name>.schema.json``): ``run.json``, ``environment.json``,
``compile.json``, ``witness.json``, ``correctness.json``, ``timings.json``, the binding's
own documents, and ``binaries/<variant>.{cubin,ptx,sass}``.
"""
from __future__ import annotations

import gc
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Mapping

from kbrepro.harness import checks, extras, fingerprint, jsonio, prefetch
from kbrepro.harness.kernelbench import KernelBenchCheckout, load_lock, resolve_checkout
from kbrepro.harness.plugin import files_digest, StudyBinding
from kbrepro.harness.records import CompileRecord
from kbrepro.harness.study import StudyConfig
from kbrepro.harness.timing import AdaptiveRule, ClockWatch, TimingProtocol, run_block
from kbrepro.kernels import compile as kc
from kbrepro.errors import ReproError
from kbrepro.kernels.launch import KernelSet
from kbrepro.model.study_rules import OPENING_STAGES, stage_plan
from kbrepro.harness.run_build import BuildStages
from kbrepro.harness.run_task import TaskStages
from kbrepro.harness.selftest import run_selftests

log = logging.getLogger("kbrepro.run")

#: documents the engine writes for every study (a study's binding may add its own)
DOCUMENTS = ("run", "environment", "compile", "witness", "correctness", "timings", "selftest")
SCHEMA_PREFIX = "kbrepro/"
_ZERO_BITS = ("0x00000000", "0x80000000")
def criterion(inputs) -> str:
    """Which check decides a control: ``"official"`` (allclose), or ``"equal_nan_stress"``
    when the input holds NaN by construction; the official predicate never counts NaN as
    close, so it would fail every candidate, right or wrong."""
    import torch

    return "equal_nan_stress" if bool(torch.isnan(inputs).any().item()) else "official"


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Progress:
    """Calls ``sink(event)`` with ``{"stage", "event", "message", "elapsed_s"}`` dicts."""

    sink: Callable[[dict], None] | None = None
    t0: float = field(default_factory=time.perf_counter)

    def __call__(self, stage: str, event: str, message: str = "") -> None:
        log.info("%s %s %s", stage, event, message)
        if self.sink:
            self.sink({"stage": stage, "event": event, "message": message,
                       "elapsed_s": time.perf_counter() - self.t0})


class StudyRun(BuildStages, TaskStages):
    """One run of a study into ``out_dir``: the engine, and the context a binding gets.

    What a binding may use: ``study``, ``tol`` (:class:`checks.Tolerance`), ``kernels``
    (variant name -> :class:`kernels.launch.KernelSet`), ``docs`` (documents by name),
    :meth:`module`, :meth:`compare`, :meth:`checks`, :meth:`doc`, :meth:`write`,
    :meth:`time_block`, :meth:`add_block`, :meth:`protocol`, :meth:`inductor`,
    :meth:`criterion`, :meth:`progress` and ``device_index``. Use :func:`run_study`."""

    def __init__(self, study: StudyConfig, out_dir: Path, kernelbench: str | None = None,
                 cache_dir: Path | None = None, progress: Progress | None = None,
                 binding: StudyBinding | None = None, prefetcher=None):
        self.study = study
        self.binding = binding if binding is not None else study.binding()
        self.out = Path(out_dir)
        self.kb_root = resolve_checkout(kernelbench)
        self.cache = kc.CubinCache(cache_dir) if cache_dir else None
        self.progress = progress or Progress()
        self.tol = study.tolerance
        self.docs: dict[str, dict] = {}
        self.stages: list[dict] = []
        self.kernels: dict[str, KernelSet] = {}
        self.binaries: dict[str, kc.CompiledBinary] = {}
        self.compile_records: dict[str, CompileRecord] = {}
        self.clocks: ClockWatch | None = None
        self.current_stage: str | None = None
        self.device_index = 0
        self.prefetch = prefetcher  # harness.prefetch.Prefetcher: handed in, or started in _setup

    # ------------------------------------------------------------------ context API
    def doc(self, name: str, **body) -> dict:
        """Start document ``name`` (schema ``kbrepro/<name>``, version 1) with ``body``."""
        d = {"schema": SCHEMA_PREFIX + name, "schema_version": 1, **body}
        self.docs[name] = d
        return d

    def write(self, *names: str) -> None:
        """Write the named documents atomically into the results folder."""
        for n in names:
            jsonio.write_json(self.out / f"{n}.json", self.docs[n])

    def module(self, task: int, level: int | None = None):
        """The KernelBench module of ``task`` (the study's level unless ``level`` is given),
        executed from the bytes the lock pins."""
        mod = self.checkout.load_task(level if level is not None else self.study.task_levels[task], task)
        return self.prefetch.wrap(mod) if self.prefetch is not None else mod

    def _start_prefetch(self) -> None:
        """Workers that build the run's models ahead with the same bits (harness/prefetch.py;
        :func:`planned_builds`), unless ``KBREPRO_PREFETCH=0`` or a prefetcher was handed in
        (:func:`early_prefetch`, started before torch was imported). :meth:`module` hands out
        task modules whose ``Model`` and ``get_inputs`` take those builds where they match."""
        if self.prefetch is not None or not prefetch.enabled():
            return
        builds = planned_builds(self.study, self.checkout, self.binding)
        if builds:
            self.prefetch = prefetch.Prefetcher(builds)
            log.info("prefetch: %d model builds in %d worker processes", len(builds), self.prefetch.workers)

    def close(self) -> None:
        """Stop the prefetch workers (what they did not hand over is dropped)."""
        if self.prefetch is not None:
            p, self.prefetch = self.prefetch, None
            log.info("prefetch: %d builds taken from the workers, %d built here; waited %.2f s for workers, "
                     "%.2f s taking builds over", p.hits, p.misses, p.wait_s, p.load_s)
            p.close()

    def compare(self, ref, out) -> dict:
        """:func:`checks.compare` of ``out`` against ``ref`` at the study's tolerance."""
        return checks.compare(ref, out, self.tol)

    def checks(self, ref, outs: Mapping) -> dict:
        """``{name: compare(ref, out)}`` for every output."""
        return {name: checks.compare(ref, out, self.tol) for name, out in outs.items()}

    def criterion(self, x) -> str:
        return criterion(x)

    def time_block(self, arms: Mapping[str, Callable], protocol: TimingProtocol, flush=None) -> dict:
        """:func:`timing.run_block` with this run's clock watch."""
        return run_block(arms, protocol, self.clocks, flush=flush)

    def add_block(self, record: dict) -> None:
        self.docs["timings"]["blocks"].append(record)

    def inductor(self, fn, *args):
        """``(compiled fn, compile seconds)`` of ``torch.compile(fn)`` warmed on ``args``."""
        return extras.compile_timed(fn, *args)

    def protocol(self, mode: str, arms: Mapping, l2: str = "warm") -> TimingProtocol:
        """The study's protocol for ``mode``, adaptive when the study's extras say so: pairs
        compare each variant with every baseline arm present (every arm that is not a variant)."""
        base = self.study.timing_protocol(mode)
        ad = self.study.extra("adaptive")
        if not ad:
            return TimingProtocol(**{**base.__dict__, "l2": l2})
        variants = [a for a in arms if a in self.kernels]
        baselines = [a for a in arms if a not in self.kernels]
        pairs = tuple((v, b) for v in variants for b in baselines)
        rule = AdaptiveRule(target_rel_half_width=ad["target_rel_half_width"], min_rounds=ad.get("min_rounds", 10),
                            max_rounds=ad["max_rounds"], max_seconds=ad["max_seconds"], pairs=pairs)
        return TimingProtocol(mode=mode, warmups=base.warmups, rounds=rule.min_rounds,
                              invocations_per_pair=base.invocations_per_pair, order_seed=base.order_seed,
                              adaptive=rule, l2=l2)

    def _stage(self, name: str, fn: Callable[[], None]) -> None:
        self.current_stage = name
        self.progress(name, "start")
        t = time.perf_counter()
        # What has survived until a stage starts (imported modules, the documents so far; the
        # stage before ended with its own collection) is moved out of the collector's reach
        # (``gc.freeze``, Python's documented remedy for long-lived heaps): every
        # ``gc.collect()`` of the stage, the engine's and a binding's between seeds, then walks
        # only what the stage made. With torch loaded a full collection took about 0.1 s, some
        # 3 s over a full run. Frozen objects are still freed by reference counting, and
        # :meth:`run` unfreezes at the end.
        gc.freeze()
        fn()
        seconds = time.perf_counter() - t
        self.stages.append({"name": name, "seconds": seconds})
        self.docs["run"]["stages"] = self.stages
        self.write("run")
        self.progress(name, "end", f"{seconds:.1f} s")

    # ------------------------------------------------------------------ run
    def run(self) -> dict:
        pass

        self.out.mkdir(parents=True, exist_ok=True)

        self.doc("run", study={"name": self.study.name, "profile": self.study.profile,
                               "source_name": self.study.source_name, "sha256": self.study.sha256,
                               "files": files_digest(self.study.files), "resolved": self.study.doc},
                 status="running", started_utc=utc_now(), finished_utc=None, stages=[],
                 failure=None, imported=None)
        self.write("run")
        t_all = time.perf_counter()
        try:
            return self._run_stages(t_all)
        finally:
            gc.unfreeze()
            self.close()

    def _run_stages(self, t_all: float) -> dict:
        import torch

        own = list(self.binding.stages(self.study))
        fns = {"setup": self._setup, "compile": self._compile, "witness": self._witness,
               "measurement_floor": self._floor, "copy_bandwidth": self._copy_bandwidth,
               "extra_shapes": self._extra_shapes, "self_test": self._self_test,
               **{f"task_{t}": (lambda t=t: self._task(t)) for t in self.study.tasks},
               **{name: (lambda fn=fn: fn(self)) for name, fn in own}}
        try:
            # the plan the verifier holds run.json's stages to (model.study_rules, the one copy);
            # the result documents open once the opening stages are done
            plan = stage_plan(self.study.doc, self.study.tasks, [n for n, _ in own])
            for i, name in enumerate(plan):
                if name not in OPENING_STAGES and all(n in OPENING_STAGES for n in plan[:i]):
                    self.doc("correctness", predicate=self._predicate_doc(), full_program=[], tasks={},
                             extra_shapes=[], predicate_direction=checks.predicate_direction_witness(self.tol))
                    self.doc("timings", blocks=[], extras={})
                self._stage(name, fns[name])
        except BaseException as exc:
            log.error("stage %s failed: %s: %s", self.current_stage, type(exc).__name__, exc)
            self.docs["run"]["status"] = "failed"
            self.docs["run"]["failure"] = {"stage": self.current_stage,
                                           "error": f"{type(exc).__name__}: {exc}"[:2000]}
            self.docs["run"]["finished_utc"] = utc_now()
            for name in self.docs:
                try:
                    self.write(name)
                except Exception:  # keep the original error
                    pass
            raise
        env = fingerprint.add_clocks(self.docs["environment"], "end")
        self.docs["environment"] = env
        run = self.docs["run"]
        run["status"] = "complete"
        run["finished_utc"] = utc_now()
        run["wall_seconds"] = time.perf_counter() - t_all
        run["peak_gpu_memory_bytes"] = {"allocated": int(torch.cuda.max_memory_allocated()),
                                        "reserved": int(torch.cuda.max_memory_reserved())}
        self.write(*self.docs)
        return run

    def _predicate_doc(self) -> dict:
        return {"atol": self.tol.atol, "rtol": self.tol.rtol, "official": checks.OFFICIAL, "legacy": checks.LEGACY,
                "definitions": checks.PREDICATES}

    # ------------------------------------------------------------------ the smaller stages
    def _floor(self) -> None:
        self.docs["timings"]["blocks"].extend(extras.measurement_floor(self.clocks))
        self.write("timings")

    def _copy_bandwidth(self) -> None:
        blk = extras.copy_bandwidth(self.clocks)
        self.add_block(blk)
        self.copy_gbps = extras.copy_gbps(blk)
        self.progress("copy_bandwidth", "step", f"{self.copy_gbps:.0f} GB/s (read + write)")
        self.write("timings")

    def _self_test(self) -> None:
        import torch

        props = torch.cuda.get_device_properties(self.device_index)
        res = run_selftests(getattr(self, "copy_gbps", None), f"sm_{props.major}{props.minor}",
                            progress=lambda n: self.progress("self_test", "step", n))
        self.doc("selftest", **res)
        self.write("selftest")



def planned_builds(study: StudyConfig, checkout: KernelBenchCheckout, binding: StudyBinding) -> list:
    """The model builds a run of ``study`` makes with the task's own construction, in the
    order the run needs them (``harness.prefetch.Build`` records): the study's tasks at
    every correctness seed and the timing seed, then the binding's other KernelBench tasks
    (probes, a witness task) at the correctness seeds, and those at the timing seed last, since
    a binding may never build them. Raises KernelBenchPinError for a task file that is not
    the pinned one."""
    c = study.doc.get("correctness") or {}
    t = study.doc.get("timing") or {}
    seeds = [int(x) for x in dict.fromkeys(c.get("seeds", []))]
    timing = [int(t["seed"])] if "seed" in t and int(t["seed"]) not in seeds else []
    own = [(study.task_levels[task], task) for task in study.tasks]
    other = [k for k in binding.kernelbench_tasks(study) if k not in own]
    order = [(k, s) for k in own for s in seeds + timing] + [(k, s) for k in other for s in seeds] + \
        [(k, s) for k in other for s in timing]
    files = {}
    for k in dict.fromkeys(k for k, _ in order):  # read, not executed: no torch import here
        rel = checkout.lock.task_path(*k)
        files[k] = (checkout.read_verified(rel), str(checkout.root / rel))  # as load_task names it
    return [prefetch.Build(src=files[k][0], filename=files[k][1], seed=s) for k, s in order]


def early_prefetch(study: StudyConfig, kernelbench: str | None = None, binding: StudyBinding | None = None):
    """A started :class:`~kbrepro.harness.prefetch.Prefetcher` for a run of ``study``, or None
    where prefetching is off, this machine shows no NVIDIA GPU, or anything the run would
    report itself is wrong (checkout, pin). Called before torch is imported, so that the
    workers' own imports and first builds overlap the main process's start; hand it to
    :func:`run_study`, which closes it (close it yourself if the run never starts)."""
    if not (prefetch.enabled() and prefetch.gpu_present()):
        return None
    try:
        binding = binding if binding is not None else study.binding()
        checkout = KernelBenchCheckout(resolve_checkout(kernelbench), load_lock(study.folder / study.lock_file))
        builds = planned_builds(study, checkout, binding)
    except ReproError:
        return None
    if not builds:
        return None
    pf = prefetch.Prefetcher(builds)
    log.info("prefetch: %d model builds in %d worker processes, started early", len(builds), pf.workers)
    return pf


def run_study(study: StudyConfig, out_dir: Path, *, kernelbench: str | None = None, cache_dir: Path | None = None,
              progress: Callable[[dict], None] | None = None, binding: StudyBinding | None = None,
              prefetcher=None) -> dict:
    """Run ``study`` on this GPU and write its documents into ``out_dir``.

    Returns the ``run.json`` document. Raises EnvironmentUnavailableError (no GPU/CuPy),
    KernelBenchPinError (checkout missing or changed), CompileError, or whatever CUDA
    raised; in every case the documents of finished stages stay in ``out_dir`` and
    ``run.json`` says ``"status": "failed"`` with the stage and error. ``binding``: the
    study's binding if already loaded (else :meth:`StudyConfig.binding` loads it).
    ``prefetcher``: from :func:`early_prefetch`; closed when the run ends, as is one the run
    starts itself.
    """
    try:
        r = StudyRun(study, out_dir, kernelbench=kernelbench, cache_dir=cache_dir, progress=Progress(progress),
                     binding=binding, prefetcher=prefetcher)
    except BaseException:
        if prefetcher is not None:
            prefetcher.close()
        raise
    logger = logging.getLogger("kbrepro")
    logger.setLevel(logging.INFO)
    (Path(out_dir) / "logs").mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(Path(out_dir) / "logs" / "run.log", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    logger.addHandler(handler)
    warnings_logger = logging.getLogger("py.warnings")
    warnings_logger.addHandler(handler)
    logging.captureWarnings(True)
    try:
        return r.run()
    finally:
        logging.captureWarnings(False)
        warnings_logger.removeHandler(handler)
        logger.removeHandler(handler)
        handler.close()


__all__ = ["run_study", "early_prefetch", "planned_builds", "StudyRun", "DOCUMENTS", "ReproError"]
