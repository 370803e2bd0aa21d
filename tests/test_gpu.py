"""GPU tests (marker ``gpu``): run on a machine with a CUDA GPU and CuPy.

They check what only hardware can show: the FTZ mode of each compiled binary (the
witness), that the NVRTC compile-cache defence holds within and across processes, that
launches follow torch's current stream into CUDA graphs, and the quick study end to end.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parent.parent

WITNESS_SCRIPT = textwrap.dedent("""
    import json, os, sys
    import torch
    from kbrepro.harness.study import default_study_path, load_study
    from kbrepro.kernels import compile as kc
    from kbrepro.kernels.launch import KernelSet
    from kbrepro.studies.pointwise_fusion.binding import KERNEL_NAMES, launch_tail
    order = sys.argv[1].split(",")
    raw = sys.argv[2] == "raw"   # raw: NVRTC with only the variant's options (no --no-cache), as a careless tool would
    props = torch.cuda.get_device_properties(0)
    arch = f"sm_{props.major}{props.minor}"
    study = load_study(default_study_path(), "full")
    variants = {"nvrtc_ftz_false": kc.CompileVariant("nvrtc_ftz_false", "nvrtc", ("--std=c++11", "--fmad=false", "--ftz=false"), False),
                "nvrtc_ftz_true": kc.CompileVariant("nvrtc_ftz_true", "nvrtc", ("--std=c++11", "--fmad=false", "--ftz=true"), True),
                "cupy_default": kc.CompileVariant("cupy_default", "cupy_rawmodule", ("--std=c++11", "--fmad=false"), True)}
    assert all(study.variant(n) == v for n, v in variants.items()), "the published study's variants changed"
    x = torch.tensor([[-88.0, -87.5]], device="cuda")
    ref = (x * torch.sigmoid(x) / 2.0).clamp(-1, 1).tanh().clamp(-1, 1)
    out = {"reference": [hex(v & 0xffffffff) for v in ref.view(torch.int32).flatten().tolist()]}
    for name in order:
        v = variants[name]
        src = study.file(study.variant_sources[name])
        if v.route == "cupy_rawmodule":
            b, fns = kc.compile_cupy_rawmodule(src, v, list(KERNEL_NAMES.values()))
        elif raw:
            from cupy_backends.cuda.libs import nvrtc
            prog = nvrtc.createProgram(src.decode(), "t.cu", (), ())
            nvrtc.compileProgram(prog, tuple(v.options) + (f"--gpu-architecture={arch}",))
            cub = kc.full_cubin(prog); nvrtc.destroyProgram(prog)
            fns = kc.load_cubin(cub, list(KERNEL_NAMES.values())); b = None
        else:
            b = kc.compile_nvrtc(src, v, arch)
            fns = kc.load_cubin(b.cubin, list(KERNEL_NAMES.values()))
        y = launch_tail(KernelSet(name, fns), 81, x, {})
        torch.cuda.synchronize()
        out[name] = {"bits": [hex(v & 0xffffffff) for v in y.view(torch.int32).flatten().tolist()],
                     "cubin_sha256": __import__("hashlib").sha256(b.cubin_complete or b.cubin).hexdigest() if b else None}
    print(json.dumps(out))
""")


def _witness(order: str, raw: bool = False, env_extra: dict | None = None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.update(env_extra or {})
    proc = subprocess.run([sys.executable, "-c", WITNESS_SCRIPT, order, "raw" if raw else "ours"], cwd=ROOT,
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


FLUSHED = ["0x80000000", "0x80000000"]


def test_witness_in_one_process_ftz_false_compiled_first():
    w = _witness("nvrtc_ftz_false,nvrtc_ftz_true,cupy_default")
    assert w["nvrtc_ftz_false"]["bits"] == w["reference"]
    assert w["reference"] != FLUSHED
    assert w["nvrtc_ftz_true"]["bits"] == FLUSHED
    assert w["cupy_default"]["bits"] == FLUSHED
    # explicit --ftz=true builds the same machine code as CuPy's implicit -ftz=true
    assert w["nvrtc_ftz_true"]["cubin_sha256"] == w["cupy_default"]["cubin_sha256"]


def test_witness_after_an_earlier_process_populated_the_nvrtc_cache():
    # an earlier process compiles the same source with --ftz=false and NO cache defence
    env = {k: v for k, v in os.environ.items() if k != "CUDA_CACHE_DISABLE"}
    earlier = subprocess.run([sys.executable, "-c", WITNESS_SCRIPT, "nvrtc_ftz_false", "raw"], cwd=ROOT, env={
        **env, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}, capture_output=True, text=True, timeout=300)
    assert earlier.returncode == 0, earlier.stderr[-3000:]
    # our route afterwards, in a new process, must still produce a flushing ftz=true binary
    w = _witness("nvrtc_ftz_true,cupy_default,nvrtc_ftz_false")
    assert w["nvrtc_ftz_true"]["bits"] == FLUSHED
    assert w["cupy_default"]["bits"] == FLUSHED
    assert w["nvrtc_ftz_false"]["bits"] == w["reference"]


class _Tails:
    """The published study's fused tails of one variant: ``launch(task, x, params, ...)``
    through :func:`kbrepro.studies.pointwise_fusion.binding.launch_tail`."""

    def __init__(self, kernels):
        self.kernels = kernels

    def launch(self, task, x, params, **kw):
        from kbrepro.studies.pointwise_fusion.binding import launch_tail

        return launch_tail(self.kernels, task, x, params, **kw)


def _ftz_false_tails():
    import torch

    from kbrepro.harness.study import default_study_path, load_study
    from kbrepro.kernels import compile as kc
    from kbrepro.kernels.launch import KernelSet
    from kbrepro.studies.pointwise_fusion.binding import KERNEL_NAMES

    study = load_study(default_study_path(), "full")
    props = torch.cuda.get_device_properties(0)
    v = study.variant("nvrtc_ftz_false")
    assert v.options == ("--std=c++11", "--fmad=false", "--ftz=false") and not v.expected_ftz
    b = kc.compile_nvrtc(study.file(study.variant_sources[v.name]), v, f"sm_{props.major}{props.minor}")
    return _Tails(KernelSet(v.name, kc.load_cubin(b.cubin, list(KERNEL_NAMES.values()))))


def test_side_stream_launch_during_capture_is_an_error():
    import torch

    from kbrepro.kernels.launch import LaunchError

    k = _ftz_false_tails()
    x = torch.randn(64, 64, device="cuda")
    side = torch.cuda.Stream()
    k.launch(81, x, {})
    g = torch.cuda.CUDAGraph()
    with pytest.raises(LaunchError, match="side stream"):
        with torch.cuda.graph(g):
            k.launch(81, x, {}, stream=side)


def test_launch_is_captured_into_a_cuda_graph():
    import torch

    k = _ftz_false_tails()
    x = torch.randn(256, 512, device="cuda")
    bias = torch.randn(512, device="cuda")
    out = torch.empty_like(x)
    k.launch(95, x, {"bias": bias}, out=out)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        k.launch(95, x, {"bias": bias}, out=out)
    x.mul_(0.5)
    bias.add_(0.25)
    g.replay()
    torch.cuda.synchronize()
    ref = torch.nn.functional.hardtanh(torch.nn.functional.gelu(torch.tanh(torch.sigmoid(x + bias) * (x + bias))), -1, 1)
    assert torch.equal(out.view(torch.int32), ref.view(torch.int32))


def test_quick_study_runs_packs_and_verifies(tmp_path):
    results = tmp_path / "results"
    out = tmp_path / "quick.tar"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "make_bundle.py", "--profile", "quick", "--results-dir", str(results),
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    from kbrepro import schemas
    from kbrepro.harness import jsonio

    for name in ("run", "environment", "compile", "witness", "correctness", "timings"):
        assert schemas.validate(jsonio.read_json(results / f"{name}.json"), name) == []
    # the study's own document, by the study folder's own schema
    study = ROOT / "studies" / "pointwise_fusion"
    scout_schema = json.loads((study / "schemas" / "scout.schema.json").read_text())
    assert schemas.validate_with(jsonio.read_json(results / "scout.json"), scout_schema, "scout") == []
    run_doc = jsonio.read_json(results / "run.json")
    assert run_doc["study"]["name"] == "pointwise-fusion-ftz"
    ver = subprocess.run([sys.executable, "verify_bundle.py", str(out), "--level", "static"], cwd=ROOT,
                         capture_output=True, text=True, env=env, timeout=300)
    assert ver.returncode == 0, ver.stdout + ver.stderr
    compile_doc = jsonio.read_json(results / "compile.json")
    assert {v["name"]: v["ftz_evidence"]["agrees"] for v in compile_doc["variants"]} == {
        "cupy_default": True, "nvrtc_ftz_false": True, "nvrtc_ftz_true": True}


def test_selftests_catch_every_known_bad_tail():
    """Each known-bad tail is caught by a named check it was expected to fail; the good
    control passes every check."""
    import torch

    from kbrepro.harness import extras
    from kbrepro.harness.selftest import run_selftests

    props = torch.cuda.get_device_properties(0)
    gbps = extras.copy_gbps(extras.copy_bandwidth(None, nbytes=1 << 28))
    res = run_selftests(gbps, f"sm_{props.major}{props.minor}")
    by = {r["name"]: r for r in res["tests"]}
    assert set(by) == {"good_control", "all_zero", "unwritten_output", "mutates_input", "side_stream",
                       "ftz_false_label_that_flushes", "fast_math_twin"}
    assert by["good_control"]["failed_checks"] == []
    for name, r in by.items():
        assert r["as_expected"], (name, r["failed_checks"], r["expected"])
    assert "input_unchanged" in by["mutates_input"]["failed_checks"]
    assert "capture_stream_guard" in by["side_stream"]["failed_checks"]
    assert "timed_stream_covers_work" in by["side_stream"]["failed_checks"]
    assert "ftz_evidence" in by["ftz_false_label_that_flushes"]["failed_checks"]
