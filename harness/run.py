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
import math
import os
import struct
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Mapping

from kbrepro.harness import checks, fingerprint, jsonio
from kbrepro.harness.kernelbench import KernelBenchCheckout, load_lock, resolve_checkout
from kbrepro.harness.plugin import StudyBinding
from kbrepro.harness.records import BlockKey, CompileRecord, FileRef, FtzEvidence, WitnessVerdict
from kbrepro.harness.study import StudyConfig, values
from kbrepro.harness.timing import AdaptiveRule, ClockWatch, TimingProtocol, run_block
from kbrepro.kernels import compile as kc
from kbrepro.errors import EnvironmentUnavailableError, ReproError, UsageError
from kbrepro.kernels.launch import KernelSet

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


def float_bits(x: float) -> str:
    """IEEE-754 binary32 bits of ``x`` as ``0x%08x``."""
    return "0x%08x" % struct.unpack("<I", struct.pack("<f", x))[0]


def value_record(x: float) -> dict:
    """``{"value", "bits"}`` of ``x`` rounded to float32 (the value a float32 kernel sees:
    3e-39 in study.yaml is recorded as the float32 2.99999...e-39 it becomes)."""
    x32 = struct.unpack("<f", struct.pack("<f", x))[0]
    return {"value": jsonio.enc_float(x32), "bits": float_bits(x32)}


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


def ensure_compile_cache_disabled() -> dict:
    """Set ``CUDA_CACHE_DISABLE=1`` if CUDA is not initialised yet; report what is in effect."""
    from kbrepro.process import deferred_sigint

    with deferred_sigint():  # a Ctrl-C inside torch's C++ import would abort the process
        import torch

    before = os.environ.get("CUDA_CACHE_DISABLE")
    initialised = torch.cuda.is_initialized()
    if before != "1" and not initialised:
        from kbrepro.harness import startenv

        startenv.set_own("CUDA_CACHE_DISABLE", "1")
    return {"CUDA_CACHE_DISABLE": os.environ.get("CUDA_CACHE_DISABLE"),
            "set_by": "environment" if before == "1" else ("kbrepro before CUDA initialisation" if not initialised
                                                           else "not set: CUDA was already initialised"),
            "nvrtc_no_cache_option": True}



def _bits_of(t) -> list[str]:
    return [float_bits(float(v)) for v in t.reshape(-1).cpu()]


def witness_flushes(out: list[dict], keep: list[dict], flush: list[dict], elements: list[int]) -> bool | None:
    """Whether a binary's witness output shows FTZ: at some discriminating element its value
    is strictly closer to the flushed CPU reference than to the one that kept denormals
    (``None`` when no element discriminates). Value records as :func:`value_record` gives."""
    if not elements:
        return None
    hit = False
    for i in elements:
        o, k, f = (jsonio.dec_float(r[i]["value"]) if isinstance(r[i]["value"], str) else float(r[i]["value"])
                   for r in (out, keep, flush))
        if all(math.isfinite(v) for v in (o, k, f)) and abs(o - f) < abs(o - k):
            hit = True
    return hit


class StudyRun:
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
        from kbrepro.harness import prefetch

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
        from kbrepro.harness import extras

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
        import torch

        self.out.mkdir(parents=True, exist_ok=True)
        from kbrepro.harness.plugin import files_digest

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

        try:
            self._stage("setup", self._setup)
            self._stage("compile", self._compile)
            if self.study.doc.get("witness"):
                self._stage("witness", self._witness)
            self.doc("correctness", predicate=self._predicate_doc(), full_program=[], tasks={},
                     extra_shapes=[], predicate_direction=checks.predicate_direction_witness(self.tol))
            self.doc("timings", blocks=[], extras={})
            if self.study.extra("measurement_floor"):
                self._stage("measurement_floor", self._floor)
            if self.study.extra("roofline") or self.study.extra("self_test"):
                self._stage("copy_bandwidth", self._copy_bandwidth)
            for task in self.study.tasks:
                self._stage(f"task_{task}", lambda task=task: self._task(task))
            if self.study.doc.get("extra_shapes"):
                self._stage("extra_shapes", self._extra_shapes)
            for name, fn in self.binding.stages(self.study):
                self._stage(name, lambda fn=fn: fn(self))
            if self.study.extra("self_test"):
                self._stage("self_test", self._self_test)
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

    # ------------------------------------------------------------------ stages
    def _setup(self) -> None:
        import torch

        cache_state = ensure_compile_cache_disabled()
        if not torch.cuda.is_available():
            raise EnvironmentUnavailableError(
                "no CUDA GPU is visible to PyTorch; the study cannot run here",
                "run on a machine with a CUDA GPU, or pack existing results with "
                "'make_bundle.py --from-results DIR', or check a bundle with 'verify_bundle.py ARCHIVE'")
        try:
            import cupy  # noqa: F401  (type: ignore)
        except Exception as exc:
            raise EnvironmentUnavailableError(f"CuPy is not importable: {exc}",
                                              "pip install 'kbrepro[cuda12]' or 'kbrepro[cuda13]'") from exc
        p = self.study.doc["precision"]
        torch.backends.cuda.matmul.allow_tf32 = bool(p["allow_tf32_matmul"])
        torch.backends.cudnn.allow_tf32 = bool(p["allow_tf32_cudnn"])
        torch.set_float32_matmul_precision(p["float32_matmul_precision"])
        torch.set_grad_enabled(False)
        torch.cuda.reset_peak_memory_stats()
        self.device_index = torch.cuda.current_device()
        lock = load_lock(self.study.folder / self.study.lock_file)
        self.checkout = KernelBenchCheckout(self.kb_root, lock)
        used = sorted({lock.task_path(lv, t) for lv, t in self.binding.kernelbench_tasks(self.study)}
                      | ({"LICENSE"} if "LICENSE" in lock.files else set()))
        self.checkout.verify(used)
        self.kb_files = used
        self._start_prefetch()
        self.docs["run"]["kernelbench"] = {"commit": lock.commit, "repository": lock.repository,
                                           "verified_by": self.checkout.commit_verified_by, "files": used}
        self.docs["run"]["compile_cache"] = cache_state
        self.docs["run"]["precision"] = {"allow_tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
                                         "allow_tf32_cudnn": torch.backends.cudnn.allow_tf32,
                                         "float32_matmul_precision": torch.get_float32_matmul_precision()}
        self.docs["environment"] = fingerprint.collect("start")
        self.write("environment")
        self.clocks = ClockWatch(self.device_index)

    def _compile(self) -> None:
        import torch

        props = torch.cuda.get_device_properties(self.device_index)
        arch = f"sm_{props.major}{props.minor}"
        names = list(self.binding.kernel_names(self.study))
        records = []
        bin_dir = self.out / "binaries"
        device_index = self.device_index

        def build(v):
            # in a thread of its own: NVRTC compiles (CuPy's binding releases the GIL) and
            # the disassembler (a subprocess) of every variant run side by side
            import cupy

            cupy.cuda.Device(device_index).use()
            src_name = self.study.variant_sources[v.name]
            source = self.study.file(src_name)
            headers = {h: self.study.file(h) for h in self.study.variant_headers[v.name]}
            if v.route == "nvrtc":
                b = kc.compile_nvrtc(source, v, arch, cache=self.cache, program_name=Path(src_name).name,
                                     **({"headers": headers} if headers else {}))
                fns = None
            else:
                b, fns = kc.compile_cupy_rawmodule(source, v, names)
            return src_name, headers, b, fns, kc.disassemble(b.cubin_complete or b.cubin)

        with ThreadPoolExecutor(max_workers=max(1, len(self.study.variants)), thread_name_prefix="compile") as pool:
            futures = [pool.submit(build, v) for v in self.study.variants]
            built = [f.result() for f in futures]  # the first variant's error, in study order
        for v, (src_name, headers, b, fns, (sass, how)) in zip(self.study.variants, built):
            if fns is None:
                fns = kc.load_cubin(b.cubin, names)
            self.binaries[v.name] = b
            self.kernels[v.name] = KernelSet(v.name, fns)
            jsonio.atomic_write_bytes(bin_dir / f"{v.name}.cubin", b.cubin)
            if b.cubin_complete:
                jsonio.atomic_write_bytes(bin_dir / f"{v.name}.complete.cubin", b.cubin_complete)
            if b.ptx:
                jsonio.atomic_write_bytes(bin_dir / f"{v.name}.ptx", b.ptx)
            if sass is not None:
                jsonio.atomic_write_bytes(bin_dir / f"{v.name}.sass", sass.encode())
            ptx_counts = kc.ptx_ftz_counts(b.ptx) if b.ptx else None
            sass_counts = kc.sass_ftz_counts(sass) if sass is not None else None
            ref = FileRef
            records.append(CompileRecord(
                name=v.name, route=v.route, expected_ftz=v.expected_ftz,
                requested_options=tuple(b.requested_options), effective_options=tuple(b.effective_options),
                nvrtc_version=tuple(b.nvrtc_version), arch=b.arch, source=ref(src_name, b.source_sha256),
                headers=tuple(ref(h, kc.sha256_hex(d)) for h, d in headers.items()) if headers else None,
                cubin=ref(f"binaries/{v.name}.cubin", b.cubin_sha256, len(b.cubin)),
                cubin_complete=(ref(f"binaries/{v.name}.complete.cubin", kc.sha256_hex(b.cubin_complete),
                                    len(b.cubin_complete), {
                                        "loaded_is_prefix": b.cubin_complete.startswith(b.cubin),
                                        "note": "CuPy's getCUBIN dropped the last byte of the cubin it loaded; this is "
                                                "the complete cubin NVRTC produced, used for SASS"})
                                if b.cubin_complete else None),
                ptx=ref(f"binaries/{v.name}.ptx", b.ptx_sha256, len(b.ptx)) if b.ptx else None,
                sass=(ref(f"binaries/{v.name}.sass", kc.sha256_hex(sass.encode()), None, {"tool": how})
                      if sass is not None else None),
                program_log=b.program_log, our_cache=b.cache,
                nvrtc_cache_disabled_by=tuple(b.nvrtc_cache_disabled_by),
                ftz_evidence=FtzEvidence(
                    expected=v.expected_ftz,
                    ptx=({**ptx_counts, "says_ftz": kc.ptx_says_ftz(ptx_counts)} if ptx_counts else None),
                    sass=({**sass_counts, "says_ftz": kc.sass_says_ftz(sass_counts), "tool": how}
                          if sass_counts else {"unavailable": how}))))
            self.progress("compile", "step", f"{v.name}: cubin {b.cubin_sha256[:12]} ({b.cache})")
        self.compile_records = {r.name: r for r in records}
        self._compile_doc()

    def _compile_doc(self) -> None:
        """Render compile.json from the compile records (``agrees`` derived, never stored)
        and write it."""
        first = self.study.variant_sources[self.study.variants[0].name]
        self.doc("compile", source={"file": first, "sha256": kc.sha256_hex(self.study.file(first))},
                 variants=[r.to_doc() for r in self.compile_records.values()])
        self.write("compile")

    def _witness(self) -> None:
        import torch

        from kbrepro.harness.study import task_key

        w = self.study.doc["witness"]
        level, task = task_key(w["task"])
        inputs = values(w["inputs"])
        run = self.binding.witness(self, task, self.module(task, level), inputs)
        if run is None:
            raise UsageError(f"study {self.study.name} defines a witness but its binding gives none",
                             "implement witness() in the binding or remove witness from study.yaml")
        ref = run.reference(run.make("cuda")).float()
        keep = run.reference(run.make("cpu")).float()
        flush_supported = bool(torch.set_flush_denormal(True))
        try:
            flushed = run.reference(run.make("cpu")).float().clone()
        finally:
            torch.set_flush_denormal(False)
        rows = {"reference": [value_record(float(v)) for v in ref.reshape(-1).cpu()]}
        keep_r = [value_record(float(v)) for v in keep.reshape(-1)]
        flush_r = [value_record(float(v)) for v in flushed.reshape(-1)]
        disc = [i for i, (a, b) in enumerate(zip(keep_r, flush_r)) if a["bits"] != b["bits"]] if flush_supported else []
        verdicts = {}
        outs = {name: run.candidate(name) for name in self.kernels}
        if self.study.extra("inductor"):
            fn, _ = self.inductor(run.reference, run.make("cuda"))
            outs["inductor"] = fn(run.make("cuda"))
        for name, out in outs.items():
            torch.cuda.synchronize()
            recs = [value_record(float(v)) for v in out.reshape(-1).cpu()]
            rows[name] = recs
            verdicts[name] = {"flushes": witness_flushes(recs, keep_r, flush_r, disc),
                              "bit_identical_to_reference": [r["bits"] for r in recs] == [r["bits"] for r in rows["reference"]]}
        self.doc("witness", task=task, inputs=[value_record(v) for v in inputs], outputs=rows,
                 reference_cpu={"keep": keep_r, "flush": flush_r, "flush_supported": flush_supported},
                 discriminates=bool(disc), discriminating_elements=disc, verdicts=verdicts,
                 description=run.description + ("" if disc else "; the reference does not depend on subnormal "
                                                "handling at these inputs, so this witness cannot judge a binary"))
        self.compile_records = {
            name: (rec.with_witness(WitnessVerdict(task, bool(disc), verdicts[name]["flushes"],
                                                   verdicts[name]["bit_identical_to_reference"]))
                   if name in verdicts else rec)
            for name, rec in self.compile_records.items()}
        self.write("witness")
        self._compile_doc()
        self.progress("witness", "step", ("does not discriminate; " if not disc else "") + ", ".join(
            f"{n}: {'flushes' if f['flushes'] else 'keeps subnormals' if f['flushes'] is False else 'undecided'}"
            for n, f in verdicts.items()))

    # ------------------------------------------------------------------ helpers
    def _distributions(self, inputs: tuple):
        """The study's input distributions, in order: ``official_uniform`` is the task's own
        ``get_inputs()``; the others replace every floating input by a draw of the CUDA
        generator of the same shape (see the study YAML)."""
        import torch

        def each(f):
            return tuple(f(x) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs)

        for dist in self.study.doc["correctness"]["distributions"]:
            if dist == "official_uniform":
                yield dist, inputs
            elif dist == "normal":
                yield dist, each(torch.randn_like)
            elif dist == "uniform_x100":
                yield dist, each(lambda x: torch.rand_like(x) * 100)
            elif dist == "uniform_x_minus100":
                yield dist, each(lambda x: torch.rand_like(x) * (-100))

    @staticmethod
    def _shape(inputs: tuple) -> list:
        return list(inputs[0].shape) if inputs and hasattr(inputs[0], "shape") else []

    def _traced(self, fn, args: tuple, owner=None):
        """``torch.jit.freeze(torch.jit.trace(...))`` of a module or of a function of tensors
        (with ``owner``, the module whose parameters it reads, registered)."""
        import torch

        if isinstance(fn, torch.nn.Module):
            return torch.jit.freeze(torch.jit.trace(fn, args))

        class Wrapped(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.owner = owner if isinstance(owner, torch.nn.Module) else None

            def forward(self, *xs):
                return fn(*xs)

        return torch.jit.freeze(torch.jit.trace(Wrapped().eval(), args))

    # ------------------------------------------------------------------ per task
    def _task(self, task: int) -> None:
        import torch

        b = self.binding
        mod = self.module(task)
        cdoc = self.docs["correctness"]
        task_doc = cdoc["tasks"].setdefault(str(task), {})
        # 1. full-program correctness
        for seed in self.study.doc["correctness"]["seeds"]:
            model = b.model(self, task, mod, seed)
            inputs = b.inputs(self, task, mod)
            cands = {n: b.candidate(self, task, n, model) for n in self.kernels}
            for dist, xs in self._distributions(inputs):
                ref = model(*xs)
                outs = {n: fn(*xs) for n, fn in cands.items()}
                cdoc["full_program"].append({"case": {"task": task, "seed": seed, "distribution": dist,
                                                      "shape": self._shape(xs)},
                                             "checks": self.checks(ref, outs)})
                del ref, outs
            del model, inputs, cands
            gc.collect()
            torch.cuda.empty_cache()
        self.progress(f"task_{task}", "step", "full-program correctness done")
        # 2. controls on the timing input
        seed = self.study.doc["timing"]["seed"]
        model = b.model(self, task, mod, seed)
        inputs = b.inputs(self, task, mod)
        cands = {n: b.candidate(self, task, n, model) for n in self.kernels}
        scopes = b.scopes(self, task, model, inputs)
        task_doc.update(b.controls(self, task, model, inputs, scopes))
        ref = model(*inputs)
        task_doc["timing_input"] = {"seed": seed, "shape": self._shape(inputs),
                                    "checks": self.checks(ref, {n: fn(*inputs) for n, fn in cands.items()})}
        ts_full = self._traced(model, inputs)
        ts_scopes = {sc.name: self._traced(sc.reference, sc.inputs, sc.owner) for sc in scopes if sc.torchscript}
        task_doc["torchscript"] = {"full": self.compare(ref, ts_full(*inputs)),
                                   **{sc.name: self.compare(sc.reference(*sc.inputs), ts_scopes[sc.name](*sc.inputs))
                                      for sc in scopes if sc.torchscript}}
        mut = (self.study.doc.get("controls") or {}).get("graph_mutation")
        if mut:
            self._graph_mutation(task, task_doc, model, inputs, cands, ref, mut)
        self.write("correctness")
        # eligibility: a variant is timed only if every official check of this task passed
        sections = [k for k, v in task_doc.items() if isinstance(v, list)]
        eligible = {}
        for n in self.kernels:
            oks = [c["checks"][n]["official"]["pass"] for c in cdoc["full_program"] if c["case"]["task"] == task]
            oks += [c["checks"][n][c["criterion"]]["pass"] for s in sections for c in task_doc[s]]
            oks.append(task_doc["timing_input"]["checks"][n]["official"]["pass"])
            if "graph_mutation" in task_doc:
                oks.append(task_doc["graph_mutation"]["checks"][n]["official"]["pass"])
            eligible[n] = all(oks)
        task_doc["eligible_for_timing"] = eligible
        ts_ok = all(c["official"]["pass"] for c in task_doc["torchscript"].values())
        self.write("correctness")
        self.progress(f"task_{task}", "step", "controls done; eligible: " + ", ".join(n for n, e in eligible.items() if e))
        # 3. timings: the full program and every scope, each against its baselines
        groups = [("full", {"eager": lambda: model(*inputs)}, None)]
        if ts_ok:
            groups[0][1]["torchscript"] = lambda: ts_full(*inputs)
        for sc in scopes:
            arms = {f"eager_{sc.name}": lambda sc=sc: sc.reference(*sc.inputs)}
            if ts_ok and sc.name in ts_scopes:
                arms[f"torchscript_{sc.name}"] = lambda sc=sc: ts_scopes[sc.name](*sc.inputs)
            groups.append((sc.name, arms, sc))
        for n, ok in eligible.items():
            if ok:
                groups[0][1][n] = lambda fn=cands[n]: fn(*inputs)
                for _, arms, sc in groups[1:]:
                    arms[n] = sc.candidate(n)
        if self.study.extra("inductor"):
            self._inductor(task, task_doc, model, inputs, ref, groups)
        for scope, arms, sc in groups:
            for mode in self.study.doc["timing"]["modes"]:
                block = self.time_block(arms, self.protocol(mode, arms))
                self.add_block({"id": BlockKey(task, scope, mode).id, "task": task, "scope": scope, "mode": mode,
                                "shape": self._shape(sc.inputs if sc else inputs), "kind": "study",
                                **({"bytes_moved": sc.bytes_moved} if sc is not None and sc.bytes_moved else {}),
                                **block})
                self.progress(f"task_{task}", "step", f"timing {scope}/{mode} done ({len(block['rounds'])} rounds)")
        if self.study.extra("cold_l2"):
            self._cold_blocks(task, groups, inputs)
        b.extra_blocks(self, task, model, inputs)
        self.write("timings", "correctness")
        del model, inputs, cands, scopes, groups, ts_full, ts_scopes, ref
        gc.collect()
        torch.cuda.empty_cache()

    def _graph_mutation(self, task, task_doc, model, inputs, cands, ref, mut) -> None:
        """CUDA-graph replay after changing the inputs (scaled in place) and the parameters
        (the binding's :meth:`~plugin.StudyBinding.mutate`); everything is restored after."""
        import torch

        saved_inputs = [x.clone() if isinstance(x, torch.Tensor) else None for x in inputs]
        saved_state = {k: v.detach().clone() for k, v in model.state_dict(keep_vars=True).items()}
        graphs = {}
        for n, fn in cands.items():
            fn(*inputs)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                out = fn(*inputs)
            graphs[n] = (g, out)
        for x in inputs:
            if isinstance(x, torch.Tensor) and x.is_floating_point():
                x.mul_(mut["input_scale"])
        self.binding.mutate(self, task, model, mut)
        ref_m = model(*inputs)
        outs = {}
        for n, (g, out) in graphs.items():
            g.replay()
            torch.cuda.synchronize()
            outs[n] = out.clone()
        task_doc["graph_mutation"] = {"mutation": mut, "checks": self.checks(ref_m, outs),
                                      "output_changed": {n: not bool(torch.equal(o, ref)) for n, o in outs.items()}}
        del graphs, outs, ref_m
        for x, s in zip(inputs, saved_inputs):
            if s is not None:
                x.copy_(s)
        state = model.state_dict(keep_vars=True)
        for k, v in saved_state.items():
            state[k].data.copy_(v)

    def _inductor(self, task, task_doc, model, inputs, ref, groups) -> None:
        from kbrepro.harness import extras

        full_fn, full_s = self.inductor(model, *inputs)
        rec = {"settings": extras.inductor_settings(), "compile_seconds": {"full": full_s},
               "full": self.compare(ref, full_fn(*inputs))}
        if rec["full"]["official"]["pass"]:
            groups[0][1]["inductor"] = lambda: full_fn(*inputs)
        for scope, arms, sc in groups[1:]:
            fn, secs = self.inductor(sc.reference, *sc.inputs)
            rec["compile_seconds"][scope] = secs
            rec[scope] = self.compare(sc.reference(*sc.inputs), fn(*sc.inputs))
            if rec[scope]["official"]["pass"]:
                arms[f"inductor_{scope}"] = lambda fn=fn, sc=sc: fn(*sc.inputs)
        task_doc["inductor"] = rec
        self.docs["timings"]["extras"].setdefault("inductor_compile_seconds", {})[str(task)] = rec["compile_seconds"]
        self.progress(f"task_{task}", "step", "inductor compiled in " + ", ".join(
            f"{s:.1f} s ({k})" for k, s in rec["compile_seconds"].items()))

    def _cold_blocks(self, task: int, groups, inputs) -> None:
        """Cold-L2 twins: every scope in events and graph mode, the full program in graph mode."""
        from kbrepro.harness.extras import L2Flush

        flush = L2Flush.for_device(2.0)
        self.docs["timings"]["extras"]["l2_flush_bytes"] = flush.nbytes
        order = [g for g in groups[1:]] + [groups[0]]
        for scope, arms, sc in order:
            modes = ("graph",) if scope == "full" else ("events", "graph")
            cold_arms = {"l2_flush_only": lambda: None, **arms}
            for mode in modes:
                blk = self.time_block(cold_arms, self.protocol(mode, cold_arms, l2="cold"), flush=flush)
                self.add_block({
                    "id": BlockKey(task, scope, mode, "cold_l2").id, "task": task, "scope": scope, "mode": mode, "kind": "cold_l2",
                    "shape": self._shape(sc.inputs if sc else inputs), "l2": "cold", "flush_bytes": flush.nbytes,
                    **({"bytes_moved": sc.bytes_moved} if sc is not None and sc.bytes_moved else {}), **blk})
                self.progress(f"task_{task}", "step", f"cold-L2 timing {scope}/{mode} done ({len(blk['rounds'])} rounds)")
        del flush

    def _floor(self) -> None:
        from kbrepro.harness import extras

        self.docs["timings"]["blocks"].extend(extras.measurement_floor(self.clocks))
        self.write("timings")

    def _copy_bandwidth(self) -> None:
        from kbrepro.harness import extras

        blk = extras.copy_bandwidth(self.clocks)
        self.add_block(blk)
        self.copy_gbps = extras.copy_gbps(blk)
        self.progress("copy_bandwidth", "step", f"{self.copy_gbps:.0f} GB/s (read + write)")
        self.write("timings")

    def _self_test(self) -> None:
        import torch

        from kbrepro.harness.selftest import run_selftests

        props = torch.cuda.get_device_properties(self.device_index)
        res = run_selftests(getattr(self, "copy_gbps", None), f"sm_{props.major}{props.minor}",
                            progress=lambda n: self.progress("self_test", "step", n))
        self.doc("selftest", **res)
        self.write("selftest")

    def _extra_shapes(self) -> None:
        import torch

        b = self.binding
        for es in self.study.doc["extra_shapes"]:
            for task in self.study.tasks:
                sc = b.model_at(self, task, self.module(task), es["size"], es["seed"])
                model, xs = sc.model, sc.inputs
                ref = model(*xs)
                ts = self._traced(model, xs)
                cands = {n: b.candidate(self, task, n, model) for n in self.kernels}
                chk = self.checks(ref, {n: fn(*xs) for n, fn in cands.items()})
                chk["torchscript"] = self.compare(ref, ts(*xs))
                cdoc = self.docs["correctness"]
                cdoc["extra_shapes"].append({"case": {"task": task, "seed": es["seed"], **sc.case}, "checks": chk})
                arms = {"eager": lambda: model(*xs)}
                if chk["torchscript"]["official"]["pass"]:
                    arms["torchscript"] = lambda: ts(*xs)
                for n, fn in cands.items():
                    if chk[n]["official"]["pass"]:
                        arms[n] = lambda fn=fn: fn(*xs)
                for mode in self.study.doc["timing"]["modes"]:
                    block = self.time_block(arms, self.study.timing_protocol(mode, rounds=es["rounds"]))
                    key = BlockKey(task, "full", mode, "extra_shape", b.size_label(es["size"]))
                    self.add_block({"id": key.id, "task": task, "scope": "full",
                                    "mode": mode, "shape": list(sc.shape), "kind": "extra_shape", **sc.case, **block})
                del model, xs, ref, ts, cands, sc
                torch.cuda.empty_cache()
        self.write("correctness", "timings")


def planned_builds(study: StudyConfig, checkout: KernelBenchCheckout, binding: StudyBinding) -> list:
    """The model builds a run of ``study`` makes with the task's own construction, in the
    order the run needs them (``harness.prefetch.Build`` records): the study's tasks at
    every correctness seed and the timing seed, then the binding's other KernelBench tasks
    (probes, a witness task) at the correctness seeds, and those at the timing seed last, since
    a binding may never build them. Raises KernelBenchPinError for a task file that is not
    the pinned one."""
    from kbrepro.harness import prefetch

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
    from kbrepro.harness import prefetch

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
