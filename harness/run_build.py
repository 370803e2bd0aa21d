"""The study engine's first stages (:class:`kbrepro.harness.run.StudyRun` inherits them): set-up
(GPU, precision modes, the compile cache off, the KernelBench files against the study's lock,
the fingerprint), the compile of every variant with its FTZ evidence, and the FTZ witness; and
the rules they share with the verifier (:func:`witness_flushes`, :func:`value_record`).
"""
from __future__ import annotations

import logging
import math
import os
import struct
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kbrepro.harness import fingerprint, jsonio, startenv
from kbrepro.harness.kernelbench import KernelBenchCheckout, load_lock
from kbrepro.harness.records import CompileRecord, FileRef, FtzEvidence, WitnessVerdict
from kbrepro.harness.study import task_key, values
from kbrepro.harness.timing import ClockWatch
from kbrepro.kernels import compile as kc
from kbrepro.errors import EnvironmentUnavailableError, UsageError
from kbrepro.kernels.launch import KernelSet
from kbrepro.process import deferred_sigint

log = logging.getLogger("kbrepro.run")


def float_bits(x: float) -> str:
    """IEEE-754 binary32 bits of ``x`` as ``0x%08x``."""
    return "0x%08x" % struct.unpack("<I", struct.pack("<f", x))[0]


def value_record(x: float) -> dict:
    """``{"value", "bits"}`` of ``x`` rounded to float32 (the value a float32 kernel sees:
    3e-39 in study.yaml is recorded as the float32 2.99999...e-39 it becomes)."""
    x32 = struct.unpack("<f", struct.pack("<f", x))[0]
    return {"value": jsonio.enc_float(x32), "bits": float_bits(x32)}




def ensure_compile_cache_disabled() -> dict:
    """Set ``CUDA_CACHE_DISABLE=1`` if CUDA is not initialised yet; report what is in effect."""
    with deferred_sigint():  # a Ctrl-C inside torch's C++ import would abort the process
        import torch

    before = os.environ.get("CUDA_CACHE_DISABLE")
    initialised = torch.cuda.is_initialized()
    if before != "1" and not initialised:
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


class BuildStages:
    """Set-up, compile and witness stages of :class:`kbrepro.harness.run.StudyRun` (a mixin: it
    reads the run's attributes, ``study``, ``binding``, ``kernels``, ``docs``...)."""

    def _setup(self) -> None:
        import torch

        cache_state = ensure_compile_cache_disabled()
        if not torch.cuda.is_available():
            raise EnvironmentUnavailableError(
                "no CUDA GPU is visible to PyTorch; the study cannot run here",
                "run on a machine with a CUDA GPU, or pack existing results with "
                "'make_bundle.py pack DIR', or check a bundle with 'verify_bundle.py ARCHIVE'")
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


__all__ = ["BuildStages", "ensure_compile_cache_disabled", "witness_flushes", "value_record", "float_bits"]
