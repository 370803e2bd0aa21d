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

import numpy as np

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
    a = np.asarray(samples_ms, dtype=float)
    if a.size == 0:
        raise ValueError("no samples")
    with np.errstate(over="ignore", invalid="ignore"):  # values near the float limit: inf or NaN, no warning
        q25, med, q75 = (float(v) for v in np.percentile(a, [25, 50, 75]))
    return {"n": int(a.size), "median_ms": med, "q25_ms": q25, "q75_ms": q75, "iqr_ms": q75 - q25,
            "min_ms": float(a.min()), "max_ms": float(a.max())}


def arm_samples(block: Mapping, arm: str) -> list[float]:
    """Per-round samples (ms) of one arm of a timing block, in round order."""
    return [float(r["times_ms"][arm]) for r in block["rounds"] if arm in r["times_ms"]]


def _time_ms(block: Mapping, i: int, arm: str, v) -> float:
    if type(v) is float and 0 < v < math.inf:  # the common case, decided without the ABC checks below
        return v
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
        t = r.get("times_ms") if type(r) is dict or isinstance(r, Mapping) else None
        if not (type(t) is dict or isinstance(t, Mapping)):
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
    a = _bootstrap_values(values, level, resamples, seed, max_draws)
    out = {"n": int(a.size), "level": level, "resamples": resamples, "seed": seed,
           "method": "percentile bootstrap of the median, numpy PCG64"}
    if a.size == 0:
        return {**out, "median": None, "ci_low": None, "ci_high": None}
    med = float(np.median(a))
    if a.size < 2:
        return {**out, "median": med, "ci_low": None, "ci_high": None}
    idx = _draws(int(a.size), int(resamples), int(seed))
    meds = _resample_medians(a, idx)
    with np.errstate(over="ignore", invalid="ignore"):
        lo, hi = np.quantile(meds, [(1 - level) / 2, 1 - (1 - level) / 2])
    return {**out, "median": med, "ci_low": float(lo), "ci_high": float(hi)}


def _bootstrap_values(values, level, resamples, seed, max_draws):
    """``values`` as a 1-D float array after :func:`bootstrap_median_ci`'s checks (which
    raise :class:`InvalidResultsError`)."""
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
    return a


def half_width_exceeds(values: Sequence[float], limit: float, *, level: float = DEFAULT_LEVEL,
                       resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> bool:
    """Whether :func:`relative_half_width` of :func:`bootstrap_median_ci` (same ``values``,
    ``level``, ``resamples``, ``seed``) exceeds ``limit`` (a fraction): exactly that
    comparison, most often decided from a few of the resamples.

    Why a few can decide: ``numpy.quantile`` (linear) puts the interval's low end at or below
    the resample median of rank ``j = floor(v_low) + 1`` and its high end at or above the one
    of rank ``j' = floor(v_high)`` (``v``: its virtual index ``q (R - 1)``, ranks from 0,
    ``R`` resamples). If the first ``m`` resamples hold ``j + 1`` medians at most ``A`` and
    ``R - j'`` medians at least ``B``, so does the whole set: the interval spans at least
    ``B - A``, and ``(B - A) / 2 / |median|`` (the same float operations, which round
    monotonically) bounds the relative half-width from below. Where that bound does not
    exceed ``limit``, the full interval decides. Raises what :func:`bootstrap_median_ci`
    raises."""
    a = _bootstrap_values(values, level, resamples, seed, None)
    r = int(resamples)
    j_lo = math.floor((r - 1) * ((1 - level) / 2) + 1e-9) + 1
    j_hi = math.floor((r - 1) * (1 - (1 - level) / 2) - 1e-9)
    med = float(np.median(a)) if a.size >= 2 else 0.0
    for m in (f * max(j_lo + 1, r - j_hi) for f in SUBSET_FACTORS):
        if not (med and m < r and j_lo < j_hi):
            break
        sub = np.sort(_resample_medians(a, _draws_head(int(a.size), r, int(seed), m)))
        if (float(sub[m - (r - j_hi)]) - float(sub[j_lo])) / 2 / abs(med) > limit:
            return True
    return relative_half_width(bootstrap_median_ci(a, level=level, resamples=resamples, seed=seed)) > limit


#: the subsets :func:`half_width_exceeds` looks at before it computes the whole interval, as
#: multiples of the resamples beyond each end of the interval: with 4 its bound is about a
#: third of the half-width, with 16 about four fifths (at 95%, 1000 resamples: 104 and 416)
SUBSET_FACTORS = (4, 16)


def _draws(n: int, resamples: int, seed: int):
    """The ``resamples`` x ``n`` resample indices PCG64(``seed``) draws: the same for every
    block of ``n`` rounds, so drawn once and kept (read-only) while they are small."""
    if resamples * n <= _CACHED_DRAWS_MAX:
        return _cached_draws(n, resamples, seed)
    return np.random.Generator(np.random.PCG64(seed)).integers(0, n, size=(resamples, n))


_CACHED_DRAWS_MAX = 1_000_000  # 8 MB of int64 each


def _draws_head(n: int, resamples: int, seed: int, rows: int):
    """The first ``rows`` rows of :func:`_draws` (``rows <= resamples``), drawn alone where
    numpy's generator fills a matrix in order (a smaller draw is then a prefix of the larger
    one: :func:`_prefix_draws`), else cut from the whole draw."""
    if not _prefix_draws():
        return _draws(n, resamples, seed)[:rows]
    return np.random.Generator(np.random.PCG64(seed)).integers(0, n, size=(rows, n))


@functools.lru_cache(maxsize=1)
def _prefix_draws() -> bool:
    """Whether this numpy's PCG64 ``integers`` draws the first rows of a matrix as a draw of
    just those rows would (asked once, on a few shapes)."""
    def draw(n, rows, seed):
        return np.random.Generator(np.random.PCG64(seed)).integers(0, n, size=(rows, n))

    return all(np.array_equal(draw(n, 40, s)[:rows], draw(n, rows, s)) for n, rows, s in
               ((1, 3, 5), (7, 13, 0), (64, 5, 11), (401, 9, 400)))


@functools.lru_cache(maxsize=16)
def _cached_draws(n: int, resamples: int, seed: int):
    idx = np.random.Generator(np.random.PCG64(seed)).integers(0, n, size=(resamples, n))
    idx.setflags(write=False)
    return idx


def _resample_medians(a, idx):
    """Median of each resample ``a[idx[i]]`` (1-D float ``a``, 2-D integer ``idx``): the
    same values as ``numpy.median(a[idx], axis=1)``. Each row is drawn as the ranks of its
    values in ``a`` (int32: half the memory of the floats, and faster to select from) and
    partitioned in place about its middle; the middle rank (and, for an even row, the largest
    rank below it) is read back from ``a`` sorted: the k-th smallest rank is the k-th smallest
    value, and an even row averages the two middle values as ``numpy.median`` does."""
    n = a.shape[0]
    order = np.argsort(a, kind="stable")
    rank = np.empty(n, dtype=np.int32)
    rank[order] = np.arange(n, dtype=np.int32)
    r = rank[idx]  # a fresh array: partitioned in place
    k = n // 2
    r.partition(k, axis=1)
    s = a[order]
    if n % 2:
        return s[r[:, k]]
    return (s[r[:, :k].max(axis=1)] + s[r[:, k]]) / 2.0


def relative_half_width(ci: Mapping) -> float:
    """(ci_high - ci_low) / 2 / median, or inf if the interval is open."""
    if ci.get("ci_low") is None or ci.get("ci_high") is None or not ci.get("median"):
        return math.inf
    return (ci["ci_high"] - ci["ci_low"]) / 2 / abs(ci["median"])
