"""FTZ evidence parsers on the real PTX and SASS NVRTC 13.0 produced on the H200 (sm_90)."""
from __future__ import annotations

from pathlib import Path

import pytest

from kbrepro.kernels import compile as kc

H200 = Path(__file__).resolve().parent / "fixtures" / "results-quick-h200" / "binaries"


@pytest.mark.parametrize("variant,expected", [("nvrtc_ftz_false", False), ("nvrtc_ftz_true", True)])
def test_ptx_counts_decide_the_mode(variant, expected):
    counts = kc.ptx_ftz_counts((H200 / f"{variant}.ptx").read_bytes())
    assert counts["f32_exact_ops"] > 100
    assert kc.ptx_says_ftz(counts) is expected
    # ex2.approx.ftz appears in both modes: the raw count of '.ftz' is not the evidence
    assert counts["ftz_approx"] > 0
    assert counts["ftz_total"] == (H200 / f"{variant}.ptx").read_text().count(".ftz")


@pytest.mark.parametrize("variant,expected", [("nvrtc_ftz_false", False), ("nvrtc_ftz_true", True)])
def test_sass_counts_decide_the_mode(variant, expected):
    counts = kc.sass_ftz_counts((H200 / f"{variant}.sass").read_text())
    assert counts["fmul_ffma"] > 40
    assert kc.sass_says_ftz(counts) is expected
    # --ftz=false SASS still carries some .FTZ (negations, NaN tests, F2I): a naive rule would lie
    assert counts["ftz_instructions"] > 0


def test_ftz_false_has_no_flushing_multiply_and_ftz_true_nearly_all():
    off = kc.sass_ftz_counts((H200 / "nvrtc_ftz_false.sass").read_text())
    on = kc.sass_ftz_counts((H200 / "nvrtc_ftz_true.sass").read_text())
    assert off["fmul_ffma_ftz"] == 0
    assert on["fmul_ffma_ftz"] / on["fmul_ffma"] > 0.9


def test_empty_listings_decide_nothing():
    assert kc.sass_says_ftz(kc.sass_ftz_counts("")) is None
    assert kc.ptx_says_ftz(kc.ptx_ftz_counts("")) is None


def test_scrub_option_hides_install_paths():
    assert kc.scrub_option("-I/opt/x/lib/python3.12/site-packages/cupy/_core/include") == \
        "-I<site-packages>/cupy/_core/include"
    assert kc.scrub_option("-I/usr/local/cuda/include") == "-I<path>"
    assert kc.scrub_option("--fmad=false") == "--fmad=false"
