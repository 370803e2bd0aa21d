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

import functools

import math
import numbers
from typing import Mapping, Sequence

from kbrepro.errors import InvalidResultsError

DEFAULT_RESAMPLES = 10000
DEFAULT_LEVEL = 0.95
DEFAULT_SEED = 20261201
#: Bounds of :func:`bootstrap_median_ci`. The committed claims spec asks for 10 000
#: resamples; the extended profile's adaptive blocks stop at 400 rounds (10 000 x 400 =
#: 4 000 000 draws, about 0.35 s and 100 MB at the peak on a slow core). The bounds leave
#: 10x on resamples and 2.5x on draws per interval; an interval at the bound takes about
#: 0.8 s and 260 MB.
MAX_RESAMPLES = 100_000
MAX_DRAWS = 10_000_000


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


def _time_ms(block: Mapping, i: int, arm: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or v <= 0:
        raise InvalidResultsError(
            f"timing block {_block_id(block)}: round {i}: the {arm} time {str(v)[:40]} ms is not a positive finite "
            "number", "a timer that reports zero, a negative or a non-finite time is broken; the schema of "
            "timings.json refuses such times")
    return float(v)


def _block_id(block) -> str:
    bid = block.get("id") if isinstance(block, Mapping) else None
    return repr(bid)[:60] if bid is not None else "(no id)"


def paired_ratios(block: Mapping, numerator: str, denominator: str) -> list[float]:
    """Per-round ratios ``numerator / denominator`` from the rounds where both arms ran.

    Raises :class:`InvalidResultsError` if ``block`` is not shaped as a timing block
    (``rounds``: a list of objects with a ``times_ms`` object), if a time of either arm is
    not a positive finite number of milliseconds, or if a ratio is not positive and finite
    (it overflowed or underflowed): a ratio is never divided by zero.
    """
    rounds = block.get("rounds") if isinstance(block, Mapping) else None
    if not isinstance(rounds, list):
        raise InvalidResultsError(f"timing block {_block_id(block)} has no list of rounds",
                                  "select timing blocks (timings.blocks[...]) for a paired ratio")
    out = []
    for i, r in enumerate(rounds):
        t = r.get("times_ms") if isinstance(r, Mapping) else None
        if not isinstance(t, Mapping):
            raise InvalidResultsError(f"timing block {_block_id(block)}: round {i} has no times_ms object",
                                      "select timing blocks (timings.blocks[...]) for a paired ratio")
        if numerator in t and denominator in t:
            q = _time_ms(block, i, numerator, t[numerator]) / _time_ms(block, i, denominator, t[denominator])
            if not (math.isfinite(q) and q > 0):
                raise InvalidResultsError(f"timing block {_block_id(block)}: round {i}: the ratio {numerator}/"
                                          f"{denominator} is {q!r}, not a positive finite number",
                                          "times so far apart are not measurements of the same work")
            out.append(q)
    return out


def bootstrap_median_ci(values: Sequence[float], *, level: float = DEFAULT_LEVEL,
                        resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
                        max_draws: int | None = None) -> dict:
    """Median of ``values`` and its percentile-bootstrap confidence interval.

    Returns ``{"n", "median", "ci_low", "ci_high", "level", "resamples", "seed", "method"}``.
    With fewer than 2 values the interval is ``[-inf, inf]`` encoded as None bounds.

    The bootstrap draws ``resamples * len(values)`` indices at once (8 bytes each, three
    arrays of that size live at the peak), so their product is bounded by ``max_draws``
    (default :data:`MAX_DRAWS`). Raises :class:`InvalidResultsError` if a value is not
    finite, ``resamples`` is not an integer in [1, :data:`MAX_RESAMPLES`], ``level`` is not
    in (0, 1), ``seed`` is not a non-negative integer, or the product exceeds ``max_draws``.
    """
    import numpy as np

    max_draws = MAX_DRAWS if max_draws is None else max_draws
    if (isinstance(resamples, bool) or not isinstance(resamples, numbers.Integral)
            or not 1 <= resamples <= MAX_RESAMPLES):
        raise InvalidResultsError(f"bootstrap resamples {str(resamples)[:40]} is not an integer in "
                                  f"[1, {MAX_RESAMPLES}]", "use about 10000 resamples")
    if isinstance(level, bool) or not isinstance(level, numbers.Real) or not 0 < level < 1:
        raise InvalidResultsError(f"bootstrap level {str(level)[:40]} is not in (0, 1)", "use a level such as 0.95")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise InvalidResultsError(f"bootstrap seed {str(seed)[:40]} is not a non-negative integer",
                                  "use a seed such as 20261201")
    a = np.asarray(values, dtype=float)
    if a.ndim != 1 or not np.isfinite(a).all():
        raise InvalidResultsError("bootstrap values must be a sequence of finite numbers",
                                  "compute ratios with paired_ratios, which refuses non-finite times")
    if resamples * a.size > max_draws:
        raise InvalidResultsError(f"a bootstrap of {resamples} resamples of {a.size} values needs "
                                  f"{resamples * a.size} draws, more than the {max_draws} allowed",
                                  "use fewer resamples (about 10000 is enough for a 95% interval)")
    out = {"n": int(a.size), "level": level, "resamples": resamples, "seed": seed,
           "method": "percentile bootstrap of the median, numpy PCG64"}
    if a.size == 0:
        return {**out, "median": None, "ci_low": None, "ci_high": None}
    med = float(np.median(a))
    if a.size < 2:
        return {**out, "median": med, "ci_low": None, "ci_high": None}
    idx = _draws(int(a.size), int(resamples), int(seed))
    meds = _row_medians(a[idx])
    lo, hi = np.quantile(meds, [(1 - level) / 2, 1 - (1 - level) / 2])
    return {**out, "median": med, "ci_low": float(lo), "ci_high": float(hi)}


def _draws(n: int, resamples: int, seed: int):
    """The ``resamples`` x ``n`` resample indices PCG64(``seed``) draws: the same for every
    block of ``n`` rounds, so drawn once and kept (read-only) while they are small."""
    if resamples * n <= _CACHED_DRAWS_MAX:
        return _cached_draws(n, resamples, seed)
    import numpy as np

    return np.random.Generator(np.random.PCG64(seed)).integers(0, n, size=(resamples, n))


_CACHED_DRAWS_MAX = 1_000_000  # 8 MB of int64 each


@functools.lru_cache(maxsize=16)
def _cached_draws(n: int, resamples: int, seed: int):
    import numpy as np

    idx = np.random.Generator(np.random.PCG64(seed)).integers(0, n, size=(resamples, n))
    idx.setflags(write=False)
    return idx


def _row_medians(x):
    """Median of each row of a 2-D array (same values as ``numpy.median(x, axis=1)``, by
    partial sorting, several times faster for short rows). An array that owns its writable
    data (such as the fresh ``a[idx]`` of the bootstrap) is partitioned in place: its rows
    keep their values but not their order; any other input is copied first."""
    import numpy as np

    n = x.shape[1]
    k = n // 2
    p = np.array(x, dtype=float, copy=True) if not (isinstance(x, np.ndarray) and x.flags.writeable
                                                   and x.flags.owndata) else x
    if n % 2:
        p.partition(k, axis=1)  # in place: x is a fresh array (a[idx]); no second copy
        return p[:, k]
    p.partition([k - 1, k], axis=1)
    return (p[:, k - 1] + p[:, k]) / 2.0


def relative_half_width(ci: Mapping) -> float:
    """(ci_high - ci_low) / 2 / median, or inf if the interval is open."""
    if ci.get("ci_low") is None or ci.get("ci_high") is None or not ci.get("median"):
        return math.inf
    return (ci["ci_high"] - ci["ci_low"]) / 2 / abs(ci["median"])
