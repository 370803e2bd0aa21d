"""Correctness checks: the official allclose predicate, the post's legacy predicate, bit
identity and the discrimination flags.

Official predicate (KernelBench's evaluator): ``torch.allclose(reference, candidate,
atol=atol, rtol=rtol)``, which is ``torch.isclose(reference, candidate, ...).all()``, i.e.
``|reference - candidate| <= atol + rtol * |candidate|``: the relative term scales with the
**candidate** (the second argument). NaN is never close to anything (``equal_nan=False``);
equal infinities are close. Source: PyTorch documentation of ``torch.isclose``.

Legacy predicate (the post's historical helper, kept only for audits):
``|reference - candidate| <= atol + rtol * |reference|`` over finite pairs, and a non-finite
pair passes only if both are equal or both NaN. Its relative term scales with the
**reference**.

Equal-NaN stress check: the official predicate with ``equal_nan=True``; a separate,
labelled check, never the official verdict.
"""
from __future__ import annotations

from dataclasses import dataclass

from kbrepro.harness.jsonio import enc_float

OFFICIAL = "allclose"
LEGACY = "legacy_reference_scaled"
PREDICATES = {
    OFFICIAL: {"call": "torch.allclose(reference, candidate, atol=atol, rtol=rtol)",
               "inequality": "|reference - candidate| <= atol + rtol * |candidate|",
               "relative_scale": "candidate", "argument_order": ["reference", "candidate"],
               "equal_nan": False},
    LEGACY: {"call": "post's helper (reference-scaled, historical)",
             "inequality": "|reference - candidate| <= atol + rtol * |reference| (finite pairs); "
                           "non-finite pairs equal or both NaN",
             "relative_scale": "reference", "argument_order": ["reference", "candidate"],
             "equal_nan": True},
}


@dataclass(frozen=True)
class Tolerance:
    """Absolute and relative tolerance of the predicates (dimensionless; FP32 values)."""

    atol: float
    rtol: float


def _int_view(t):
    import torch

    kind = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.contiguous().view(kind)


def compare(reference, candidate, tol: Tolerance) -> dict:
    """Compare ``candidate`` with ``reference`` (tensors of one shape and float dtype, on
    one device) under every predicate.

    Returns a JSON-ready dict: ``element_count``; ``bit_identical_count`` (integer equality
    of the int32 view: -0.0 and +0.0 differ, equal NaN payloads match); ``official`` and
    ``legacy`` each with ``pass``, ``failing_count`` and ``worst_ratio`` (max over finite
    pairs of |difference| / allowance, computed in float64, ``"inf"`` where the allowance is
    0 and the difference is not); ``equal_nan_stress`` (official with equal NaN);
    ``max_abs_error`` over finite pairs (null if there are none); ``nonfinite`` counts;
    ``max_abs_reference`` over finite reference values; ``discriminating`` (max |reference|
    > atol: otherwise any candidate within atol of zero passes); ``null_candidate_passes``
    (whether an all-zero candidate would pass the official predicate).

    A shape mismatch gives ``{"shape_match": False, ...}`` with both predicates failed.
    """
    import torch

    if tuple(reference.shape) != tuple(candidate.shape) or reference.dtype != candidate.dtype:
        return {"shape_match": False, "reference_shape": list(reference.shape),
                "candidate_shape": list(candidate.shape), "element_count": int(reference.numel()),
                "bit_identical_count": 0,
                "official": {"pass": False, "failing_count": int(reference.numel()), "worst_ratio": None},
                "legacy": {"pass": False, "failing_count": int(reference.numel()), "worst_ratio": None}}
    ref, cand = reference.detach().reshape(-1), candidate.detach().reshape(-1)
    n = ref.numel()
    parts = [_chunk(ref[i:i + CHUNK_ELEMENTS], cand[i:i + CHUNK_ELEMENTS], tol)
             for i in range(0, n, CHUNK_ELEMENTS)] or [_chunk(ref, cand, tol)]

    def total(key):
        return sum(p[key] for p in parts)

    def most(key):
        vals = [p[key] for p in parts if p[key] is not None]
        return max(vals) if vals else None

    official_fail, legacy_fail, stress_fail = total("official_fail"), total("legacy_fail"), total("stress_fail")
    max_ref = most("max_ref")
    nonfinite = {k: sum(p["nonfinite"][k] for p in parts) for k in parts[0]["nonfinite"]}
    return {
        "shape_match": True,
        "element_count": int(n),
        "bit_identical_count": total("bits"),
        "official": {"pass": official_fail == 0, "failing_count": official_fail,
                     "worst_ratio": enc_float(most("worst_off") if n else 0.0)},
        "legacy": {"pass": legacy_fail == 0, "failing_count": legacy_fail,
                   "worst_ratio": enc_float(most("worst_leg") if n else 0.0)},
        "equal_nan_stress": {"pass": stress_fail == 0, "failing_count": stress_fail},
        "max_abs_error": enc_float(most("max_abs")),
        "max_abs_reference": enc_float(max_ref),
        "nonfinite": nonfinite,
        "discriminating": bool(max_ref is not None and max_ref > tol.atol),
        "null_candidate_passes": all(p["null_passes"] for p in parts),
    }


#: elements compared at a time (float64 temporaries of one chunk: about 1 GiB); sums and
#: maxima over chunks equal those over the whole tensor, so the result does not depend on it
CHUNK_ELEMENTS = 1 << 24


def _chunk(ref, cand, tol: Tolerance) -> dict:
    """Sums and maxima of one 1-D chunk (see :func:`compare`). Every count and maximum is
    computed on the device and all are copied to the host in one transfer (one
    synchronisation per chunk instead of one per number)."""
    import torch

    n = ref.numel()
    bits = (_int_view(ref) == _int_view(cand)).sum()
    close = torch.isclose(ref, cand, rtol=tol.rtol, atol=tol.atol, equal_nan=False)
    official_close = close.sum()
    stress_close = torch.isclose(ref, cand, rtol=tol.rtol, atol=tol.atol, equal_nan=True).sum()

    finite = torch.isfinite(ref) & torch.isfinite(cand)
    r64 = ref.double()
    c64 = cand.double()
    diff = (r64 - c64).abs()
    zero = torch.zeros((), dtype=torch.float64, device=ref.device)

    def ratio_max(allow):
        ratio = torch.where(allow > 0, diff / torch.where(allow > 0, allow, torch.ones_like(allow)),
                            torch.where(diff > 0, torch.full_like(diff, float("inf")), torch.zeros_like(diff)))
        return torch.where(finite, ratio, zero).max() if n else zero

    allow_off = tol.atol + tol.rtol * c64.abs()
    allow_leg = tol.atol + tol.rtol * r64.abs()
    special_ok = (ref == cand) | (torch.isnan(ref) & torch.isnan(cand))
    legacy_fail = ((finite & (diff > allow_leg)) | (~finite & ~special_ok)).sum()
    n_finite = finite.sum()
    ref_finite = torch.isfinite(ref)
    counts = {
        "bits": bits, "official_close": official_close, "stress_close": stress_close, "legacy_fail": legacy_fail,
        "n_finite": n_finite, "n_ref_finite": ref_finite.sum(),
        "null_passes": torch.isclose(ref, torch.zeros_like(ref), rtol=tol.rtol, atol=tol.atol).all().long()
        if n else torch.ones((), dtype=torch.int64, device=ref.device),
        "reference_nan": torch.isnan(ref).sum(), "candidate_nan": torch.isnan(cand).sum(),
        "reference_posinf": torch.isposinf(ref).sum(), "reference_neginf": torch.isneginf(ref).sum(),
        "candidate_posinf": torch.isposinf(cand).sum(), "candidate_neginf": torch.isneginf(cand).sum(),
        "nan_both": (torch.isnan(ref) & torch.isnan(cand)).sum(),
        "mismatched": (~finite & ~special_ok).sum(),
    }
    maxima = {"worst_off": ratio_max(allow_off), "worst_leg": ratio_max(allow_leg),
              "max_abs": torch.where(finite, diff, zero).max() if n else zero,
              "max_ref": torch.where(ref_finite, r64.abs(), zero).max() if n else zero}
    # one copy to the host: the int64 counts exactly, the float64 maxima exactly
    c = dict(zip(counts, (int(v) for v in torch.stack([v.reshape(()).long() for v in counts.values()]).tolist())))
    m = dict(zip(maxima, (float(v) for v in torch.stack(list(maxima.values())).tolist())))
    return {
        "bits": c["bits"], "official_fail": int(n - c["official_close"]), "stress_fail": int(n - c["stress_close"]),
        "legacy_fail": c["legacy_fail"],
        "worst_off": m["worst_off"] if n else None, "worst_leg": m["worst_leg"] if n else None,
        "max_abs": m["max_abs"] if c["n_finite"] else None, "max_ref": m["max_ref"] if c["n_ref_finite"] else None,
        "null_passes": bool(c["null_passes"]),
        "nonfinite": {k: c[k] for k in ("reference_nan", "candidate_nan", "reference_posinf", "reference_neginf",
                                        "candidate_posinf", "candidate_neginf", "nan_both", "mismatched")},
    }


def predicate_direction_witness(tol: Tolerance = Tolerance(1e-4, 1e-4)) -> dict:
    """A CPU witness that the argument order of ``torch.allclose`` matters: reference 0.0,
    candidate 1.00005e-4 (float32 and float64). With the candidate second the allowance is
    ``atol + rtol * 1.00005e-4`` and the pair passes; swapped, the allowance is ``atol`` and
    it fails. Returns the inputs and both verdicts per dtype."""
    import torch

    out = {"reference": 0.0, "candidate": 1.00005e-4, "atol": tol.atol, "rtol": tol.rtol,
           "torch_version": torch.__version__, "results": {}}
    for name, dtype in (("float32", torch.float32), ("float64", torch.float64)):
        r = torch.tensor([0.0], dtype=dtype)
        c = torch.tensor([1.00005e-4], dtype=dtype)
        out["results"][name] = {
            "allclose_reference_candidate": bool(torch.allclose(r, c, atol=tol.atol, rtol=tol.rtol)),
            "allclose_candidate_reference": bool(torch.allclose(c, r, atol=tol.atol, rtol=tol.rtol)),
        }
    return out


def legacy_margin_verdict(legacy_worst_ratio: float | None, max_abs_error: float | None,
                          tol: Tolerance) -> tuple[bool | None, str]:
    """What the official (candidate-scaled) verdict must be for a case of which only the
    legacy (reference-scaled) summary was kept.

    For one finite element with difference d and reference r, the candidate c satisfies
    |c| >= |r| - |d|, so with legacy ratio q = |d| / (atol + rtol |r|) the official ratio
    q' = |d| / (atol + rtol |c|) lies in [q / (1 + rtol q), q / (1 - rtol q)]. Hence all
    elements pass under both predicates if the case's worst legacy ratio is at most
    1 / (1 + rtol), and the worst element fails under both if that ratio exceeds
    1 / (1 - rtol); in between the saved numbers cannot decide. Independently, if the
    largest |d| is at most atol, every finite element passes the official predicate.

    Returns ``(verdict, reason)``; ``verdict`` is None when undecidable from the summary.
    Non-finite elements are outside this rule (the legacy helper counted NaN pairs as equal,
    the official predicate does not), so callers must say whether NaN could occur.
    """
    if max_abs_error is not None and max_abs_error <= tol.atol:
        return True, f"max |d| = {max_abs_error:.6g} <= atol = {tol.atol:g}"
    if legacy_worst_ratio is None:
        return None, "no legacy ratio saved"
    lo = 1.0 / (1.0 + tol.rtol)
    hi = 1.0 / (1.0 - tol.rtol) if tol.rtol < 1 else float("inf")
    if legacy_worst_ratio <= lo:
        return True, f"worst legacy ratio {legacy_worst_ratio:.6g} <= 1/(1+rtol) = {lo:.6g}"
    if legacy_worst_ratio > hi:
        return False, f"worst legacy ratio {legacy_worst_ratio:.6g} > 1/(1-rtol) = {hi:.6g}"
    return None, (f"worst legacy ratio {legacy_worst_ratio:.6g} lies in (1/(1+rtol), 1/(1-rtol)] = "
                  f"({lo:.6g}, {hi:.6g}]: the saved summary cannot decide")
