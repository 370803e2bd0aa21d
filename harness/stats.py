"""Statistics of timing samples, derived when presenting (never stored instead of samples).

* Quartiles: ``numpy.percentile`` with the default ``linear`` method (Hyndman & Fan 1996,
  definition 7). IQR = q75 - q25.
* Paired ratios: rounds interleave the arms, so round ``i`` gives one ratio
  ``t_a[i] / t_b[i]``; pairing removes drift common to both arms within a round.
* Confidence interval of the median paired ratio: percentile bootstrap (Efron & Tibshirani,
  *An Introduction to the Bootstrap*, 1993, ch. 13) with a seeded ``numpy`` PCG64 generator,
  ``resamples`` draws of the rounds with replacement.
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

DEFAULT_RESAMPLES = 10000
DEFAULT_LEVEL = 0.95
DEFAULT_SEED = 20261201


def summary(samples_ms: Sequence[float]) -> dict:
    """``{"n", "median_ms", "q25_ms", "q75_ms", "iqr_ms", "min_ms", "max_ms"}`` of samples
    (milliseconds). Raises ValueError on an empty sequence."""
    import numpy as np

    a = np.asarray(samples_ms, dtype=float)
    if a.size == 0:
        raise ValueError("no samples")
    q25, med, q75 = (float(v) for v in np.percentile(a, [25, 50, 75]))
    return {"n": int(a.size), "median_ms": med, "q25_ms": q25, "q75_ms": q75, "iqr_ms": q75 - q25,
            "min_ms": float(a.min()), "max_ms": float(a.max())}


def arm_samples(block: Mapping, arm: str) -> list[float]:
    """Per-round samples (ms) of one arm of a timing block, in round order."""
    return [float(r["times_ms"][arm]) for r in block["rounds"] if arm in r["times_ms"]]


def paired_ratios(block: Mapping, numerator: str, denominator: str) -> list[float]:
    """Per-round ratios ``numerator / denominator`` from the rounds where both arms ran."""
    out = []
    for r in block["rounds"]:
        t = r["times_ms"]
        if numerator in t and denominator in t and float(t[denominator]) > 0:
            out.append(float(t[numerator]) / float(t[denominator]))
    return out


def bootstrap_median_ci(values: Sequence[float], *, level: float = DEFAULT_LEVEL,
                        resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> dict:
    """Median of ``values`` and its percentile-bootstrap confidence interval.

    Returns ``{"n", "median", "ci_low", "ci_high", "level", "resamples", "seed", "method"}``.
    With fewer than 2 values the interval is ``[-inf, inf]`` encoded as None bounds.
    """
    import numpy as np

    a = np.asarray(values, dtype=float)
    out = {"n": int(a.size), "level": level, "resamples": resamples, "seed": seed,
           "method": "percentile bootstrap of the median, numpy PCG64"}
    if a.size == 0:
        return {**out, "median": None, "ci_low": None, "ci_high": None}
    med = float(np.median(a))
    if a.size < 2:
        return {**out, "median": med, "ci_low": None, "ci_high": None}
    rng = np.random.Generator(np.random.PCG64(seed))
    idx = rng.integers(0, a.size, size=(resamples, a.size))
    meds = _row_medians(a[idx])
    lo, hi = np.quantile(meds, [(1 - level) / 2, 1 - (1 - level) / 2])
    return {**out, "median": med, "ci_low": float(lo), "ci_high": float(hi)}


def _row_medians(x):
    """Median of each row of a 2-D array (same values as ``numpy.median(x, axis=1)``, by
    partial sorting, several times faster for short rows)."""
    import numpy as np

    n = x.shape[1]
    k = n // 2
    if n % 2:
        return np.partition(x, k, axis=1)[:, k]
    p = np.partition(x, [k - 1, k], axis=1)
    return (p[:, k - 1] + p[:, k]) / 2.0


def relative_half_width(ci: Mapping) -> float:
    """(ci_high - ci_low) / 2 / median, or inf if the interval is open."""
    if ci.get("ci_low") is None or ci.get("ci_high") is None or not ci.get("median"):
        return math.inf
    return (ci["ci_high"] - ci["ci_low"]) / 2 / abs(ci["median"])
