"""The numerical contract: predicate direction, NaN/Inf, subnormals, bit identity, flags."""
from __future__ import annotations

import json
import math

import pytest
import torch

from kbrepro.harness.checks import Tolerance, compare, legacy_margin_verdict, predicate_direction_witness

TOL = Tolerance(1e-4, 1e-4)


def t(*v):
    return torch.tensor(v, dtype=torch.float32)


def test_official_predicate_scales_by_the_candidate():
    # reference 0.0, candidate 1.00005e-4: allowance atol + rtol*|candidate| covers it
    r = compare(t(0.0, 1.0), t(1.00005e-4, 1.0), TOL)
    assert r["official"]["pass"] is True
    assert r["official"]["failing_count"] == 0
    assert torch.allclose(t(0.0, 1.0), t(1.00005e-4, 1.0), atol=1e-4, rtol=1e-4)
    # swapped: the allowance is atol alone and the pair fails
    s = compare(t(1.00005e-4, 1.0), t(0.0, 1.0), TOL)
    assert s["official"]["pass"] is False and s["official"]["failing_count"] == 1
    # the legacy predicate scales by the reference, so it fails the first order
    assert r["legacy"]["pass"] is False and r["legacy"]["failing_count"] == 1
    assert r["official"]["worst_ratio"] < 1.0 < r["legacy"]["worst_ratio"]


def test_direction_witness_records_both_orders():
    w = predicate_direction_witness()
    for dtype in ("float32", "float64"):
        assert w["results"][dtype] == {"allclose_reference_candidate": True, "allclose_candidate_reference": False}


def test_nan_is_never_close_officially_but_counts_equal_under_the_stress_check_and_legacy():
    ref = t(float("nan"), 1.0)
    r = compare(ref, ref.clone(), TOL)
    assert r["bit_identical_count"] == 2
    assert r["official"]["pass"] is False and r["official"]["failing_count"] == 1
    assert r["equal_nan_stress"]["pass"] is True
    assert r["legacy"]["pass"] is True
    assert r["nonfinite"]["reference_nan"] == 1 and r["nonfinite"]["nan_both"] == 1


def test_infinities_equal_sign_close_opposite_sign_not():
    r = compare(t(float("inf"), -float("inf")), t(float("inf"), float("inf")), TOL)
    assert r["official"]["failing_count"] == 1
    assert r["legacy"]["failing_count"] == 1
    assert r["nonfinite"]["mismatched"] == 1
    assert r["max_abs_error"] is None  # no finite pair


def test_subnormal_versus_zero_is_close_but_not_bit_identical():
    sub = torch.tensor([1e-39], dtype=torch.float32)
    assert 0 < sub.item() < torch.finfo(torch.float32).tiny
    r = compare(sub, torch.zeros(1), TOL)
    assert r["official"]["pass"] is True and r["legacy"]["pass"] is True
    assert r["bit_identical_count"] == 0
    assert r["max_abs_error"] == pytest.approx(1e-39, rel=1e-3)


def test_signed_zero_differs_in_bits_only():
    r = compare(t(0.0), t(-0.0), TOL)
    assert r["official"]["pass"] is True
    assert r["bit_identical_count"] == 0


def test_non_discriminating_case_is_flagged_and_a_null_candidate_passes_it():
    ref = t(5e-5, -3e-5, 0.0)
    r = compare(ref, torch.zeros(3), TOL)
    assert r["discriminating"] is False
    assert r["null_candidate_passes"] is True
    big = compare(t(0.5, 1.0), t(0.5, 1.0), TOL)
    assert big["discriminating"] is True and big["null_candidate_passes"] is False


def test_shape_mismatch_fails_both_predicates():
    r = compare(torch.zeros(2, 3), torch.zeros(3, 2), TOL)
    assert r["shape_match"] is False and not r["official"]["pass"] and not r["legacy"]["pass"]


def test_counts_are_integers_and_bit_count_uses_int32_view():
    a = torch.randn(1000)
    b = a.clone()
    b[::7] = torch.nextafter(b[::7], torch.tensor(float("inf")))
    r = compare(a, b, TOL)
    assert isinstance(r["bit_identical_count"], int)
    assert r["bit_identical_count"] == 1000 - len(range(0, 1000, 7))
    assert r["official"]["pass"] is True


@pytest.mark.parametrize("ratio,max_abs,expected", [
    (0.5, 1.0, True),            # well inside: passes under both
    (1.0 / (1 + 1e-4), 1.0, True),
    (0.99995, 1.0, None),        # inside the band: undecidable from the summary
    (1.00005, 1.0, None),
    (1.0002, 1.0, False),        # beyond 1/(1-rtol): fails under both
    (50.0, 5e-5, True),          # max |d| <= atol decides regardless of the ratio
])
def test_legacy_margin_verdict(ratio, max_abs, expected):
    verdict, why = legacy_margin_verdict(ratio, max_abs, TOL)
    assert verdict is expected
    assert why


def test_margin_rule_is_sound_on_random_cases():
    # whenever the rule decides, the official predicate agrees on the actual tensors
    g = torch.Generator().manual_seed(7)
    decided = 0
    for _ in range(300):
        ref = torch.randn(64, generator=g) * 10 ** torch.randint(-5, 2, (1,), generator=g).item()
        cand = ref + torch.randn(64, generator=g) * 1e-4 * torch.rand(1, generator=g).item() * 3
        r = compare(ref, cand, TOL)
        verdict, _ = legacy_margin_verdict(r["legacy"]["worst_ratio"], r["max_abs_error"], TOL)
        if verdict is not None:
            decided += 1
            assert verdict == r["official"]["pass"]
    assert decided > 200
    assert math.isfinite(decided)


@pytest.mark.parametrize("seed", range(40))
def test_every_compare_of_random_outputs_with_nonfinite_values_meets_the_records_invariants(seed):
    """The invariants the verifier holds a compare record to (model.compare_records) are
    true of everything harness.checks.compare writes: NaN, infinities, all-NaN outputs,
    empty ones, exact and near copies."""
    from kbrepro.harness import jsonio
    from kbrepro.model import strict
    from kbrepro.model.compare_records import Compare

    g = torch.Generator().manual_seed(seed)
    n = int(torch.randint(0, 9, (1,), generator=g))
    ref = torch.randn(n, generator=g)
    cand = ref + torch.randn(n, generator=g) * 10 ** float(torch.randint(-8, 0, (1,), generator=g))
    specials = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, 1e-40])
    for t in (ref, cand):
        for i in range(n):
            if int(torch.randint(0, 3, (1,), generator=g)) == 0:
                t[i] = specials[int(torch.randint(0, 5, (1,), generator=g))]
    if seed % 10 == 0:
        cand = torch.full_like(ref, float("nan"))
    elif seed % 10 == 1:
        cand = ref.clone()  # bit-identical, NaN included
    doc = json.loads(jsonio.dumps(compare(ref, cand, Tolerance(1e-4, 1e-4))))
    rec, problems = strict.build(Compare, doc)
    assert rec is not None and problems == [], (doc, problems)
