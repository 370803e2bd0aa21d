"""The study, run end to end in one process, writing schema-versioned result documents.

Stages, in order (each writes its documents atomically when it ends, and ``run.json``
records the stage and its wall time, so a crash keeps what was measured and never leaves a
run that looks complete):

1. ``setup``: GPU and CuPy present, precision modes set, NVRTC/driver compile cache off,
   KernelBench verified against the lock, fingerprint taken.
2. ``compile``: every variant compiled; cubin, PTX and SASS saved; FTZ evidence from PTX/SASS.
3. ``witness``: the minimal FTZ witness (task 81 tail at -88 and -87.5) for the reference
   and every variant; the compile records are completed with it.
4. per task: ``correctness`` (seeds x distributions, full program, every variant),
   ``controls`` (boundary/non-finite tail array, the actual Linear output, timing-input
   correctness, TorchScript full and tail, CUDA-graph replay after mutation), ``timing``
   (full program and tail, events and graphs, every arm interleaved in the same rounds).
5. ``extra_shapes``, ``tiny_value_controls``, ``ftz_cost``, ``scout``.

Documents (``schemas/<name>.schema.json``): ``run.json``, ``environment.json``,
``compile.json``, ``witness.json``, ``correctness.json``, ``timings.json``, ``scout.json``,
and ``binaries/<variant>.{cubin,ptx,sass}``.
"""
from __future__ import annotations

import gc
import logging
import os
import struct
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from kbrepro import manifests
from kbrepro.harness import checks, fingerprint, jsonio, tasks
from kbrepro.harness.kernelbench import KernelBenchCheckout, load_lock, resolve_checkout
from kbrepro.harness.study import StudyConfig, values
from kbrepro.harness.timing import AdaptiveRule, ClockWatch, TimingProtocol, run_block
from kbrepro.kernels import compile as kc
from kbrepro.errors import EnvironmentUnavailableError, ReproError
from kbrepro.kernels.launch import KERNEL_NAMES, TailKernels

log = logging.getLogger("kbrepro.run")

DOCUMENTS = ("run", "environment", "compile", "witness", "correctness", "timings", "scout", "selftest")
SCHEMA_PREFIX = "kbrepro/"


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
    return {"value": jsonio.enc_float(x), "bits": float_bits(x)}


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
    import torch

    before = os.environ.get("CUDA_CACHE_DISABLE")
    initialised = torch.cuda.is_initialized()
    if before != "1" and not initialised:
        os.environ["CUDA_CACHE_DISABLE"] = "1"
    return {"CUDA_CACHE_DISABLE": os.environ.get("CUDA_CACHE_DISABLE"),
            "set_by": "environment" if before == "1" else ("kbrepro before CUDA initialisation" if not initialised
                                                           else "not set: CUDA was already initialised"),
            "nvrtc_no_cache_option": True}


class StudyRun:
    """One run of a study into ``out_dir``. Use :func:`run_study`."""

    def __init__(self, study: StudyConfig, out_dir: Path, kernelbench: str | None = None,
                 cache_dir: Path | None = None, progress: Progress | None = None,
                 kernel_source: bytes | None = None):
        self.study = study
        self.kernel_source = kernel_source
        self.out = Path(out_dir)
        self.kb_root = resolve_checkout(kernelbench)
        self.cache = kc.CubinCache(cache_dir) if cache_dir else None
        self.progress = progress or Progress()
        self.tol = study.tolerance
        self.docs: dict[str, dict] = {}
        self.stages: list[dict] = []
        self.kernels: dict[str, TailKernels] = {}
        self.binaries: dict[str, kc.CompiledBinary] = {}
        self.clocks: ClockWatch | None = None
        self.current_stage: str | None = None

    # ------------------------------------------------------------------ documents
    def _doc(self, name: str, **body) -> dict:
        d = {"schema": SCHEMA_PREFIX + name, "schema_version": 1, **body}
        self.docs[name] = d
        return d

    def _write(self, *names: str) -> None:
        for n in names:
            jsonio.write_json(self.out / f"{n}.json", self.docs[n])

    def _stage(self, name: str, fn: Callable[[], None]) -> None:
        self.current_stage = name
        self.progress(name, "start")
        t = time.perf_counter()
        fn()
        seconds = time.perf_counter() - t
        self.stages.append({"name": name, "seconds": seconds})
        self.docs["run"]["stages"] = self.stages
        self._write("run")
        self.progress(name, "end", f"{seconds:.1f} s")

    # ------------------------------------------------------------------ run
    def run(self) -> dict:
        import torch

        self.out.mkdir(parents=True, exist_ok=True)
        self._doc("run", study={"name": self.study.name, "profile": self.study.profile,
                                "source_name": self.study.source_name, "sha256": self.study.sha256,
                                "resolved": self.study.doc},
                  status="running", started_utc=utc_now(), finished_utc=None, stages=[],
                  failure=None, imported=None)
        self._write("run")
        t_all = time.perf_counter()
        try:
            self._stage("setup", self._setup)
            self._stage("compile", self._compile)
            self._stage("witness", self._witness)
            self._doc("correctness", predicate=self._predicate_doc(), full_program=[], tasks={},
                      extra_shapes=[], tiny_value_controls={},
                      predicate_direction=checks.predicate_direction_witness(self.tol))
            self._doc("timings", blocks=[], extras={})
            if self.study.extra("measurement_floor"):
                self._stage("measurement_floor", self._floor)
            if self.study.extra("roofline") or self.study.extra("self_test"):
                self._stage("copy_bandwidth", self._copy_bandwidth)
            for task in self.study.tasks:
                self._stage(f"task_{task}", lambda task=task: self._task(task))
            self._stage("extra_shapes", self._extra_shapes)
            self._stage("tiny_value_controls", self._tiny_value_controls)
            self._stage("ftz_cost", self._ftz_cost)
            self._stage("scout", self._scout)
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
                    self._write(name)
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
        self._write(*[n for n in DOCUMENTS if n in self.docs])
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
        lock = load_lock(manifests.path(self.study.doc["kernelbench"]["lock"]))
        self.checkout = KernelBenchCheckout(self.kb_root, lock)
        level = self.study.doc["kernelbench"]["level"]
        used = sorted({lock.task_path(level, t) for t in (*self.study.tasks, *self.study.doc["scout"]["tasks"])}
                      | ({"LICENSE"} if "LICENSE" in lock.files else set()))
        self.checkout.verify(used)
        self.level = level
        self.kb_files = used
        self.docs["run"]["kernelbench"] = {"commit": lock.commit, "repository": lock.repository,
                                           "verified_by": self.checkout.commit_verified_by, "files": used}
        self.docs["run"]["compile_cache"] = cache_state
        self.docs["run"]["precision"] = {"allow_tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
                                         "allow_tf32_cudnn": torch.backends.cudnn.allow_tf32,
                                         "float32_matmul_precision": torch.get_float32_matmul_precision()}
        self.docs["environment"] = fingerprint.collect("start")
        self._write("environment")
        self.clocks = ClockWatch(torch.cuda.current_device())

    def _compile(self) -> None:
        import torch

        source = self.kernel_source if self.kernel_source is not None else \
            kc.read_source(kc.SOURCE_PATH.parent / self.study.doc["source"])
        self.source = source
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        arch = f"sm_{props.major}{props.minor}"
        names = list(KERNEL_NAMES.values())
        records = []
        bin_dir = self.out / "binaries"
        for v in self.study.variants:
            if v.route == "nvrtc":
                b = kc.compile_nvrtc(source, v, arch, cache=self.cache)
                fns = kc.load_cubin(b.cubin, names)
            else:
                b, fns = kc.compile_cupy_rawmodule(source, v, names)
            self.binaries[v.name] = b
            self.kernels[v.name] = TailKernels(v.name, fns)
            jsonio.atomic_write_bytes(bin_dir / f"{v.name}.cubin", b.cubin)
            if b.cubin_complete:
                jsonio.atomic_write_bytes(bin_dir / f"{v.name}.complete.cubin", b.cubin_complete)
            if b.ptx:
                jsonio.atomic_write_bytes(bin_dir / f"{v.name}.ptx", b.ptx)
            sass, how = kc.disassemble(b.cubin_complete or b.cubin)
            if sass is not None:
                jsonio.atomic_write_bytes(bin_dir / f"{v.name}.sass", sass.encode())
            ptx_counts = kc.ptx_ftz_counts(b.ptx) if b.ptx else None
            sass_counts = kc.sass_ftz_counts(sass) if sass is not None else None
            records.append({
                "name": v.name, "route": v.route, "expected_ftz": v.expected_ftz,
                "requested_options": list(b.requested_options), "effective_options": list(b.effective_options),
                "nvrtc_version": list(b.nvrtc_version), "arch": b.arch,
                "source": {"file": self.study.doc["source"], "sha256": b.source_sha256},
                "cubin": {"file": f"binaries/{v.name}.cubin", "sha256": b.cubin_sha256, "bytes": len(b.cubin)},
                "cubin_complete": ({"file": f"binaries/{v.name}.complete.cubin", "sha256": kc.sha256_hex(b.cubin_complete),
                                    "bytes": len(b.cubin_complete),
                                    "loaded_is_prefix": b.cubin_complete.startswith(b.cubin),
                                    "note": "CuPy's getCUBIN dropped the last byte of the cubin it loaded; this is the "
                                            "complete cubin NVRTC produced, used for SASS"}
                                   if b.cubin_complete else None),
                "ptx": ({"file": f"binaries/{v.name}.ptx", "sha256": b.ptx_sha256, "bytes": len(b.ptx)} if b.ptx else None),
                "sass": ({"file": f"binaries/{v.name}.sass", "sha256": kc.sha256_hex(sass.encode()), "tool": how}
                         if sass is not None else None),
                "program_log": b.program_log,
                "our_cache": b.cache,
                "nvrtc_cache_disabled_by": list(b.nvrtc_cache_disabled_by),
                "ftz_evidence": {
                    "expected": v.expected_ftz,
                    "ptx": ({**ptx_counts, "says_ftz": kc.ptx_says_ftz(ptx_counts)} if ptx_counts else None),
                    "sass": ({**sass_counts, "says_ftz": kc.sass_says_ftz(sass_counts), "tool": how}
                             if sass_counts else {"unavailable": how}),
                    "witness": None, "agrees": None,
                },
            })
            self.progress("compile", "step", f"{v.name}: cubin {b.cubin_sha256[:12]} ({b.cache})")
        self._doc("compile", source={"file": self.study.doc["source"], "sha256": kc.sha256_hex(source)},
                  variants=records)
        self._write("compile")

    def _witness(self) -> None:
        import torch

        w = self.study.doc["witness"]
        task = int(w["task"])
        spec = tasks.spec(task)
        inputs = values(w["inputs"])
        model = self._model_for_params(task)
        x = torch.tensor([inputs], dtype=torch.float32, device="cuda")
        bias = torch.zeros(x.shape[1], device="cuda") if spec.has_bias else None
        ref = spec.reference_tail(model, x, bias).float()
        rows = {"reference": [value_record(float(v)) for v in ref[0].cpu()]}
        flushes = {}
        for name, k in self.kernels.items():
            out = k.launch(task, x, spec.kernel_params(model, bias))
            torch.cuda.synchronize()
            recs = [value_record(float(v)) for v in out[0].cpu()]
            rows[name] = recs
            flushed = [r["bits"] in ("0x00000000", "0x80000000") and ref_r["bits"] not in ("0x00000000", "0x80000000")
                       for r, ref_r in zip(recs, rows["reference"])]
            flushes[name] = {"flushes": any(flushed),
                             "bit_identical_to_reference": [r["bits"] for r in recs] == [r["bits"] for r in rows["reference"]]}
        if self.study.extra("inductor"):
            from kbrepro.harness import extras

            fn, _ = extras.compile_timed(lambda v: spec.reference_tail(model, v, bias), x)
            out = fn(x)
            torch.cuda.synchronize()
            recs = [value_record(float(v)) for v in out[0].cpu()]
            rows["inductor_tail"] = recs
            flushes["inductor_tail"] = {
                "flushes": any(r["bits"] in ("0x00000000", "0x80000000") and q["bits"] not in ("0x00000000", "0x80000000")
                               for r, q in zip(recs, rows["reference"])),
                "bit_identical_to_reference": [r["bits"] for r in recs] == [r["bits"] for r in rows["reference"]]}
        self._doc("witness", task=task, inputs=[value_record(v) for v in inputs], outputs=rows, verdicts=flushes,
                  description="fused tail of the task at inputs whose sigmoid intermediate is subnormal: "
                              "under FTZ the output flushes to signed zero; without FTZ it equals PyTorch")
        for rec in self.docs["compile"]["variants"]:
            ev = rec["ftz_evidence"]
            if rec["name"] not in flushes:
                continue
            ev["witness"] = {"task": task, "flushes": flushes[rec["name"]]["flushes"],
                             "bit_identical_to_reference": flushes[rec["name"]]["bit_identical_to_reference"]}
            says = [ev["witness"]["flushes"]]
            if ev["ptx"] and ev["ptx"]["says_ftz"] is not None:
                says.append(ev["ptx"]["says_ftz"])
            if ev["sass"] and ev["sass"].get("says_ftz") is not None:
                says.append(ev["sass"]["says_ftz"])
            ev["agrees"] = all(s == ev["expected"] for s in says)
        self._write("witness", "compile")
        self.progress("witness", "step", ", ".join(f"{n}: {'flushes' if f['flushes'] else 'keeps subnormals'}"
                                                     for n, f in flushes.items()))

    # ------------------------------------------------------------------ helpers
    def _module(self, task: int):
        return self.checkout.load_task(self.level, task)

    def _model_for_params(self, task: int):
        """A model whose pointwise constants (scale, clamp bounds) the witness uses; built at
        a tiny shape so it costs nothing. Constants do not depend on the shape."""
        import torch

        mod = self._module(task)
        spec = tasks.spec(task)
        torch.manual_seed(0)
        return mod.Model(*spec.init_at(list(mod.get_init_inputs()), 8, 8)).cuda().eval()

    def _inputs(self, mod, seed: int):
        """Model and the study's input distributions for ``seed`` (see the study YAML)."""
        import torch

        torch.manual_seed(seed)
        model = mod.Model(*mod.get_init_inputs()).cuda().eval()
        x = mod.get_inputs()[0].cuda()
        for dist in self.study.doc["correctness"]["distributions"]:
            if dist == "official_uniform":
                yield model, dist, x
            elif dist == "normal":
                yield model, dist, torch.randn_like(x)
            elif dist == "uniform_x100":
                yield model, dist, torch.rand_like(x) * 100
            elif dist == "uniform_x_minus100":
                yield model, dist, torch.rand_like(x) * (-100)

    def _full(self, task: int, name: str, model, x, bias=None):
        spec = tasks.spec(task)
        k = self.kernels[name]
        return lambda: k.launch(task, spec.linear(model)(x), spec.kernel_params(model, bias))

    def _tail(self, task: int, name: str, model, z, bias=None):
        spec = tasks.spec(task)
        k = self.kernels[name]
        return lambda: k.launch(task, z, spec.kernel_params(model, bias))

    def _checks(self, ref, outs: dict) -> dict:
        return {name: checks.compare(ref, out, self.tol) for name, out in outs.items()}

    # ------------------------------------------------------------------ per task
    def _task(self, task: int) -> None:
        import torch

        spec = tasks.spec(task)
        mod = self._module(task)
        cdoc = self.docs["correctness"]
        task_doc = cdoc["tasks"].setdefault(str(task), {})
        # 1. full-program correctness
        for seed in self.study.doc["correctness"]["seeds"]:
            for model, dist, x in self._inputs(mod, seed):
                ref = model(x)
                outs = {n: self._full(task, n, model, x)() for n in self.kernels}
                cdoc["full_program"].append({"case": {"task": task, "seed": seed, "distribution": dist,
                                                      "shape": list(x.shape)},
                                             "checks": self._checks(ref, outs)})
                del ref, outs
            del model, x
            gc.collect()
            torch.cuda.empty_cache()
        self.progress(f"task_{task}", "step", "full-program correctness done")
        # 2. controls on the timing input
        seed = self.study.doc["timing"]["seed"]
        torch.manual_seed(seed)
        model = mod.Model(*mod.get_init_inputs()).cuda().eval()
        x = mod.get_inputs()[0].cuda()
        z = spec.linear(model)(x)
        bnd = self.study.doc["controls"]["boundary"]
        vals = torch.tensor(values(bnd["values"]), dtype=torch.float32, device="cuda")
        if spec.has_bias:
            cols = z.shape[1]
            control = vals.repeat((cols + vals.numel() - 1) // vals.numel())[:cols].repeat(bnd["bias_task_rows"], 1)
        else:
            control = vals.repeat(bnd["rows"]).reshape(bnd["rows"], -1)
        control = control.contiguous()
        task_doc["tail_controls"] = [
            {"name": "boundaries_and_nonfinite", "shape": list(control.shape), "criterion": criterion(control),
             "checks": self._checks(spec.reference_tail(model, control),
                                    {n: self._tail(task, n, model, control)() for n in self.kernels})},
            {"name": "actual_linear_output", "shape": list(z.shape), "criterion": criterion(z),
             "checks": self._checks(spec.reference_tail(model, z),
                                    {n: self._tail(task, n, model, z)() for n in self.kernels})},
        ]
        ref = model(x)
        task_doc["timing_input"] = {"seed": seed, "shape": list(x.shape),
                                    "checks": self._checks(ref, {n: self._full(task, n, model, x)() for n in self.kernels})}
        ts_full = torch.jit.freeze(torch.jit.trace(model, x))

        class TailModule(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, v):
                return spec.reference_tail(self.m, v)

        ts_tail = torch.jit.freeze(torch.jit.trace(TailModule(model).eval(), z))
        task_doc["torchscript"] = {
            "full": checks.compare(ref, ts_full(x), self.tol),
            "tail": checks.compare(spec.reference_tail(model, z), ts_tail(z), self.tol),
        }
        # CUDA-graph replay after changing the input, the weights and the bias parameter
        mut = self.study.doc["controls"]["graph_mutation"]
        lin = spec.linear(model)
        saved = {"x": x.clone(), "w": lin.weight.detach().clone(),
                 "b": spec.bias_of(model).detach().clone() if spec.has_bias else None}
        graphs = {}
        for n in self.kernels:
            fn = self._full(task, n, model, x)
            fn()
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                out = fn()
            graphs[n] = (g, out)
        x.mul_(mut["input_scale"])
        lin.weight.add_(mut["weight_delta"])
        if spec.has_bias:
            spec.bias_of(model).add_(mut["bias_delta"])
        ref_m = model(x)
        outs = {}
        for n, (g, out) in graphs.items():
            g.replay()
            torch.cuda.synchronize()
            outs[n] = out.clone()
        task_doc["graph_mutation"] = {"mutation": mut, "checks": self._checks(ref_m, outs),
                                      "output_changed": {n: not bool(torch.equal(o, ref)) for n, o in outs.items()}}
        del graphs, outs, ref_m
        x.copy_(saved["x"])
        lin.weight.copy_(saved["w"])
        if spec.has_bias:
            spec.bias_of(model).copy_(saved["b"])
        self._write("correctness")
        # eligibility: a variant is timed only if every official check of this task passed
        eligible = {}
        for n in self.kernels:
            oks = [c["checks"][n]["official"]["pass"] for c in cdoc["full_program"] if c["case"]["task"] == task]
            oks += [c["checks"][n][c["criterion"]]["pass"] for c in task_doc["tail_controls"]]
            oks += [task_doc["timing_input"]["checks"][n]["official"]["pass"],
                    task_doc["graph_mutation"]["checks"][n]["official"]["pass"]]
            eligible[n] = all(oks)
        task_doc["eligible_for_timing"] = eligible
        ts_ok = task_doc["torchscript"]["full"]["official"]["pass"] and task_doc["torchscript"]["tail"]["official"]["pass"]
        self._write("correctness")
        self.progress(f"task_{task}", "step", "controls done; eligible: " + ", ".join(n for n, e in eligible.items() if e))
        # 3. timings
        full_arms = {"eager": lambda: model(x)}
        tail_arms = {"eager_tail": lambda: spec.reference_tail(model, z)}
        if ts_ok:
            full_arms["torchscript"] = lambda: ts_full(x)
            tail_arms["torchscript_tail"] = lambda: ts_tail(z)
        for n, ok in eligible.items():
            if ok:
                full_arms[n] = self._full(task, n, model, x)
                tail_arms[n] = self._tail(task, n, model, z)
        if self.study.extra("inductor"):
            ind = self._inductor(task, model, x, z, ref)
            if ind["full"]["check"]["official"]["pass"]:
                full_arms["inductor"] = ind["full"]["fn"]
            if ind["tail"]["check"]["official"]["pass"]:
                tail_arms["inductor_tail"] = ind["tail"]["fn"]
        tail_bytes = 2 * z.numel() * 4 + (z.shape[1] * 4 if spec.has_bias else 0)
        for scope, arms in (("full", full_arms), ("tail", tail_arms)):
            for mode in self.study.doc["timing"]["modes"]:
                block = run_block(arms, self._protocol(mode, arms, scope), self.clocks)
                self.docs["timings"]["blocks"].append({"id": f"{task}.{scope}.{mode}", "task": task, "scope": scope,
                                                       "mode": mode, "shape": list(x.shape), "kind": "study",
                                                       **({"bytes_moved": tail_bytes} if scope == "tail" else {}),
                                                       **block})
                self.progress(f"task_{task}", "step", f"timing {scope}/{mode} done ({len(block['rounds'])} rounds)")
        if self.study.extra("cold_l2"):
            self._cold_blocks(task, full_arms, tail_arms, x, tail_bytes)
        if self.study.extra("roofline"):
            lin = spec.linear(model)
            for mode in ("events", "graph"):
                blk = run_block({"gemm": lambda: lin(x)}, self.study.timing_protocol(mode), self.clocks)
                self.docs["timings"]["blocks"].append({
                    "id": f"{task}.gemm.{mode}", "task": task, "scope": "gemm", "mode": mode, "kind": "gemm",
                    "shape": [x.shape[0], lin.weight.shape[0]], "flops": 2 * x.shape[0] * x.shape[1] * lin.weight.shape[0],
                    **blk})
        self._write("timings", "correctness")
        del model, x, z, ts_full, ts_tail, ref
        gc.collect()
        torch.cuda.empty_cache()

    def _protocol(self, mode: str, arms: dict, scope: str, l2: str = "warm") -> TimingProtocol:
        """The study's protocol, adaptive when the study's extras say so: pairs compare each
        variant with every baseline present (eager, TorchScript, Inductor)."""
        base = self.study.timing_protocol(mode)
        ad = self.study.extra("adaptive")
        if not ad:
            return TimingProtocol(**{**base.__dict__, "l2": l2})
        baselines = [a for a in arms if a in ("eager", "torchscript", "inductor", "eager_tail", "torchscript_tail",
                                              "inductor_tail", "l2_flush_only")]
        variants = [a for a in arms if a in self.kernels]
        pairs = tuple((v, b) for v in variants for b in baselines)
        rule = AdaptiveRule(target_rel_half_width=ad["target_rel_half_width"], min_rounds=ad.get("min_rounds", 10),
                            max_rounds=ad["max_rounds"], max_seconds=ad["max_seconds"], pairs=pairs)
        return TimingProtocol(mode=mode, warmups=base.warmups, rounds=rule.min_rounds,
                              invocations_per_pair=base.invocations_per_pair, order_seed=base.order_seed,
                              adaptive=rule, l2=l2)

    def _cold_blocks(self, task: int, full_arms: dict, tail_arms: dict, x, tail_bytes: int) -> None:
        from kbrepro.harness.extras import L2Flush

        flush = L2Flush.for_device(2.0)
        self.docs["timings"]["extras"]["l2_flush_bytes"] = flush.nbytes
        for scope, arms, modes in (("tail", tail_arms, ("events", "graph")), ("full", full_arms, ("graph",))):
            cold_arms = {"l2_flush_only": lambda: None, **arms}
            for mode in modes:
                blk = run_block(cold_arms, self._protocol(mode, cold_arms, scope, l2="cold"), self.clocks, flush=flush)
                self.docs["timings"]["blocks"].append({
                    "id": f"{task}.{scope}.{mode}.cold", "task": task, "scope": scope, "mode": mode, "kind": "cold_l2",
                    "shape": list(x.shape), "l2": "cold", "flush_bytes": flush.nbytes,
                    **({"bytes_moved": tail_bytes} if scope == "tail" else {}), **blk})
                self.progress(f"task_{task}", "step", f"cold-L2 timing {scope}/{mode} done ({len(blk['rounds'])} rounds)")
        del flush

    def _inductor(self, task: int, model, x, z, ref) -> dict:
        from kbrepro.harness import extras

        spec = tasks.spec(task)
        full_fn, full_s = extras.compile_timed(model, x)
        tail_fn, tail_s = extras.compile_timed(lambda v: spec.reference_tail(model, v), z)
        rec = {"settings": extras.inductor_settings(),
               "compile_seconds": {"full": full_s, "tail": tail_s},
               "full": checks.compare(ref, full_fn(x), self.tol),
               "tail": checks.compare(spec.reference_tail(model, z), tail_fn(z), self.tol)}
        self.docs["correctness"]["tasks"][str(task)]["inductor"] = rec
        self.docs["timings"]["extras"].setdefault("inductor_compile_seconds", {})[str(task)] = rec["compile_seconds"]
        self.progress(f"task_{task}", "step", f"inductor compiled in {full_s:.1f} s (full) and {tail_s:.1f} s (tail)")
        return {"full": {"fn": lambda: full_fn(x), "check": rec["full"]},
                "tail": {"fn": lambda: tail_fn(z), "check": rec["tail"]}}

    def _floor(self) -> None:
        from kbrepro.harness import extras

        self.docs["timings"]["blocks"].extend(extras.measurement_floor(self.clocks))
        self._write("timings")

    def _copy_bandwidth(self) -> None:
        from kbrepro.harness import extras

        blk = extras.copy_bandwidth(self.clocks)
        self.docs["timings"]["blocks"].append(blk)
        self.copy_gbps = extras.copy_gbps(blk)
        self.progress("copy_bandwidth", "step", f"{self.copy_gbps:.0f} GB/s (read + write)")
        self._write("timings")

    def _self_test(self) -> None:
        import torch

        from kbrepro.harness.selftest import run_selftests

        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        res = run_selftests(getattr(self, "copy_gbps", None), f"sm_{props.major}{props.minor}",
                            progress=lambda n: self.progress("self_test", "step", n))
        self._doc("selftest", **res)
        self._write("selftest")

    def _extra_shapes(self) -> None:
        import torch

        for es in self.study.doc["extra_shapes"]:
            for task in self.study.tasks:
                spec = tasks.spec(task)
                mod = self._module(task)
                torch.manual_seed(es["seed"])
                model = mod.Model(*spec.init_at(list(mod.get_init_inputs()), es["in_features"],
                                                es["out_features"])).cuda().eval()
                x = torch.rand(es["batch"], es["in_features"], device="cuda")
                ref = model(x)
                ts = torch.jit.freeze(torch.jit.trace(model, x))
                chk = self._checks(ref, {n: self._full(task, n, model, x)() for n in self.kernels})
                chk["torchscript"] = checks.compare(ref, ts(x), self.tol)
                shape = [es["batch"], es["in_features"], es["out_features"]]
                self.docs["correctness"]["extra_shapes"].append({"case": {"task": task, "seed": es["seed"],
                                                                          "shape_B_K_H": shape}, "checks": chk})
                arms = {"eager": lambda: model(x)}
                if chk["torchscript"]["official"]["pass"]:
                    arms["torchscript"] = lambda: ts(x)
                for n in self.kernels:
                    if chk[n]["official"]["pass"]:
                        arms[n] = self._full(task, n, model, x)
                for mode in self.study.doc["timing"]["modes"]:
                    block = run_block(arms, self.study.timing_protocol(mode, rounds=es["rounds"]), self.clocks)
                    self.docs["timings"]["blocks"].append({
                        "id": f"{task}.full.{mode}.B{shape[0]}K{shape[1]}H{shape[2]}", "task": task, "scope": "full",
                        "mode": mode, "shape": [es["batch"], es["out_features"]], "kind": "extra_shape",
                        "shape_B_K_H": shape, **block})
                del model, x, ref, ts
                torch.cuda.empty_cache()
        self._write("correctness", "timings")

    def _tiny_value_controls(self) -> None:
        import torch

        tv = self.study.doc["controls"]["tiny_value"]
        ls = tv["linspace"]
        vals = torch.cat([torch.linspace(ls["start"], ls["stop"], ls["count"], device="cuda"),
                          torch.tensor(values(tv["extra_values"]), dtype=torch.float32, device="cuda")])
        rows, cols = tv["shape"]
        n = rows * cols
        a = vals.repeat((n + vals.numel() - 1) // vals.numel())[:n].reshape(rows, cols).contiguous()
        names = list(self.kernels)
        for task in self.study.tasks:
            spec = tasks.spec(task)
            model = self._model_for_params(task)
            bias = torch.zeros(cols, device="cuda") if spec.has_bias else None
            ref = spec.reference_tail(model, a, bias)
            outs = {nm: self.kernels[nm].launch(task, a, spec.kernel_params(model, bias)) for nm in names}
            cross = {f"{b}_vs_{c}": checks.compare(outs[c], outs[b], self.tol)
                     for i, c in enumerate(names) for b in names[i + 1:]}
            chk = self._checks(ref, outs)
            if self.study.extra("inductor"):
                from kbrepro.harness import extras

                fn, secs = extras.compile_timed(lambda v: spec.reference_tail(model, v, bias), a)
                chk["inductor_tail"] = checks.compare(ref, fn(a), self.tol)
                self.docs["timings"]["extras"].setdefault("inductor_compile_seconds", {}).setdefault(
                    str(task), {})["tiny_value_tail"] = secs
            self.docs["correctness"]["tiny_value_controls"][str(task)] = {
                "shape": [rows, cols], "bias": "zero" if spec.has_bias else None, "criterion": criterion(a),
                "domain": f"linspace({ls['start']}, {ls['stop']}, {ls['count']}) plus {len(tv['extra_values'])} "
                          "subnormal, signed-zero, infinite and NaN values, tiled",
                "checks": chk, "cross": cross}
        self._write("correctness")

    def _ftz_cost(self) -> None:
        import torch

        fc = self.study.doc["ftz_cost"]
        seed = self.study.doc["timing"]["seed"]
        for task in self.study.tasks:
            spec = tasks.spec(task)
            mod = self._module(task)
            torch.manual_seed(seed)
            model = mod.Model(*mod.get_init_inputs()).cuda().eval()
            x = mod.get_inputs()[0].cuda()
            z = spec.linear(model)(x)
            ref = spec.reference_tail(model, z)
            arms = {n: self._tail(task, n, model, z) for n in fc["variants"]}
            chk = {n: checks.compare(ref, fn(), self.tol) for n, fn in arms.items()}
            block = {"id": f"{task}.ftz_cost.{fc['mode']}", "task": task, "scope": "tail", "mode": fc["mode"],
                     "shape": list(z.shape), "kind": "ftz_cost", "checks": chk}
            if all(c["official"]["pass"] for c in chk.values()):
                block.update(run_block(arms, self.study.ftz_cost_protocol(), self.clocks))
            else:
                block.update({"protocol": self.study.ftz_cost_protocol().to_doc(), "arms": list(arms), "rounds": [],
                              "skipped": "a variant failed its check on the timing input"})
            self.docs["timings"]["blocks"].append(block)
            del model, x, z, ref
            torch.cuda.empty_cache()
        self._write("timings")

    def _scout(self) -> None:
        import torch

        sc = self.study.doc["scout"]
        cases = []
        for task in sc["tasks"]:
            mod = self._module(task)
            for seed in sc["seeds"]:
                torch.manual_seed(seed)
                model = mod.Model(*mod.get_init_inputs()).cuda().eval()
                x = mod.get_inputs()[0].cuda()
                ref = model(x)
                if task == 14:
                    half = model.scaling_factor / 2
                    out = (x @ model.weight.sum(0)).unsqueeze(1) * half
                    out64 = ((x.double() @ model.weight.double().sum(0)).unsqueeze(1) * half).float()
                    rewrite = "(x @ W.sum(0)).unsqueeze(1) * (scaling_factor / 2)"
                else:
                    lin = model.gemm
                    v = lin.weight.mean(0)
                    c = lin.bias.mean() - model.subtract.mean()
                    out = torch.nn.functional.gelu((x @ v + c).unsqueeze(1)) + x
                    v64 = lin.weight.double().mean(0)
                    c64 = lin.bias.double().mean() - model.subtract.double().mean()
                    out64 = torch.nn.functional.gelu((x.double() @ v64 + c64).float().unsqueeze(1)) + x
                    rewrite = "gelu((x @ W.mean(0) + b.mean() - subtract.mean()).unsqueeze(1)) + x"
                cases.append({"case": {"task": task, "seed": seed, "shape": list(x.shape)}, "rewrite": rewrite,
                              "checks": {"fp32": checks.compare(ref, out, self.tol),
                                         "fp64_accumulated": checks.compare(ref, out64, self.tol)}})
                del model, x, ref, out, out64
                gc.collect()
                torch.cuda.empty_cache()
        self._doc("scout", cases=cases,
                  description="algebraic rewrites of tasks 14 and 51 that reassociate the GEMM reduction; "
                              "a numerical scout, not a fused kernel")
        self._write("scout")


def run_study(study: StudyConfig, out_dir: Path, *, kernelbench: str | None = None, cache_dir: Path | None = None,
              progress: Callable[[dict], None] | None = None, kernel_source: bytes | None = None) -> dict:
    """Run ``study`` on this GPU and write its documents into ``out_dir``.

    Returns the ``run.json`` document. Raises EnvironmentUnavailableError (no GPU/CuPy),
    KernelBenchPinError (checkout missing or changed), CompileError, or whatever CUDA
    raised; in every case the documents of finished stages stay in ``out_dir`` and
    ``run.json`` says ``"status": "failed"`` with the stage and error. ``kernel_source``
    replaces the product's ``kernels/<source>`` (used only by a replay the user trusted).
    """
    r = StudyRun(study, out_dir, kernelbench=kernelbench, cache_dir=cache_dir, progress=Progress(progress),
                 kernel_source=kernel_source)
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


__all__ = ["run_study", "StudyRun", "DOCUMENTS", "ReproError"]
