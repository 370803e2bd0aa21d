"""Our cubin cache: key derivation, includes, corruption and atomic writes."""
from __future__ import annotations

import pytest

from kbrepro.kernels.compile import (CACHE_FORMAT_VERSION, CompileVariant, CubinCache, cache_key, check_includes,
                             nvrtc_options)
from kbrepro.errors import UsageError

SRC = b'extern "C" __global__ void k(float* y) { y[0] = 1.0f; }\n'
OPTS = ("--std=c++11", "--fmad=false", "--ftz=false", "--gpu-architecture=sm_90", "--no-cache")


def test_same_inputs_same_key_wherever_they_live(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        (d / "k.cu").write_bytes(SRC)
    k1 = cache_key((a / "k.cu").read_bytes(), OPTS, (13, 0), "sm_90")
    k2 = cache_key((b / "k.cu").read_bytes(), OPTS, (13, 0), "sm_90")
    assert k1 == k2 and len(k1) == 64


@pytest.mark.parametrize("change", [
    dict(source=SRC + b" "),
    dict(options=OPTS[:2] + ("--ftz=true",) + OPTS[3:]),
    dict(options=(OPTS[1], OPTS[0]) + OPTS[2:]),       # order matters
    dict(nvrtc=(13, 1)),
    dict(arch="sm_86"),
])
def test_every_input_changes_the_key(change):
    base = dict(source=SRC, options=OPTS, nvrtc=(13, 0), arch="sm_90")
    new = {**base, **change}
    assert cache_key(base["source"], base["options"], base["nvrtc"], base["arch"]) != \
        cache_key(new["source"], new["options"], new["nvrtc"], new["arch"])


def test_cache_format_version_is_part_of_the_key(monkeypatch):
    import kbrepro.kernels.compile as kc

    k1 = cache_key(SRC, OPTS, (13, 0), "sm_90")
    monkeypatch.setattr(kc, "CACHE_FORMAT_VERSION", CACHE_FORMAT_VERSION + 1)
    assert cache_key(SRC, OPTS, (13, 0), "sm_90") != k1


def test_include_without_header_bytes_is_refused():
    src = b'#include "helpers.cuh"\n' + SRC
    with pytest.raises(UsageError, match="helpers.cuh"):
        cache_key(src, OPTS, (13, 0), "sm_90")
    with pytest.raises(UsageError):
        check_includes(b"#  include <cuda_fp16.h>\n" + SRC, {})


def test_included_header_bytes_are_in_the_key():
    src = b'#include "helpers.cuh"\n' + SRC
    k1 = cache_key(src, OPTS, (13, 0), "sm_90", {"helpers.cuh": b"#define A 1\n"})
    k2 = cache_key(src, OPTS, (13, 0), "sm_90", {"helpers.cuh": b"#define A 2\n"})
    assert k1 != k2


def test_store_load_roundtrip_and_corruption_is_a_miss(tmp_path):
    cache = CubinCache(tmp_path / "cache")
    key = cache_key(SRC, OPTS, (13, 0), "sm_90")
    assert cache.load(key) is None
    cache.store(key, b"\x7fELFcubin", b"// ptx", "log")
    assert cache.load(key) == (b"\x7fELFcubin", b"// ptx", "log")
    (tmp_path / "cache" / key / "cubin").write_bytes(b"\x7fELFcubiX")
    assert cache.load(key) is None
    (tmp_path / "cache" / key / "meta.json").write_text("{not json")
    assert cache.load(key) is None
    cache.store(key, b"\x7fELFcubin", b"// ptx", "log")
    assert cache.load(key) is not None
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".")]  # no temp leftovers


def test_nvrtc_options_are_explicit_and_ordered():
    v = CompileVariant("nvrtc_ftz_false", "nvrtc", ("--std=c++11", "--fmad=false", "--ftz=false"), False)
    assert nvrtc_options(v, "sm_90", (13, 0)) == OPTS
    assert "--no-cache" not in nvrtc_options(v, "sm_86", (12, 1))  # no persistent cache before 12.9
    bad = CompileVariant("x", "nvrtc", ("--gpu-architecture=sm_80",), False)
    with pytest.raises(UsageError, match="architecture"):
        nvrtc_options(bad, "sm_90", (13, 0))
    with pytest.raises(UsageError):
        CompileVariant("x", "nvcc", (), False)
