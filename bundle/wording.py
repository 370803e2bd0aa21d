"""Numbers and differences in a person's words for REPORT.md and summary.txt (issue 31), and
which bundle formats use them (:func:`readable`); the formats before keep the words they were
packed with, so the verifier renders each format's own text."""
from __future__ import annotations

from typing import Mapping

from kbrepro.bundle import kinds


def readable(meta: Mapping) -> int:
    """The level of words the report of the bundle ``meta`` describes is written in (true from 1
    on): 0, the words of the first formats; 1 from :attr:`kbrepro.bundle.kinds.BundleKind.readable_since`
    on (a difference as a person writes it: "2.0x slower", "30x faster", "faster by 3.1 to
    4.2 %", "1 comparison"; a CPU run and sizes other than the task's own said first); 2 from
    :attr:`~kbrepro.bundle.kinds.BundleKind.tidy_since` on (an interval whose two ends read the
    same as one value, "faster by 42 %"; the ratio convention explained only where a claim
    compares times; a CPU run's sizes note without "timing"). Earlier formats keep the words
    they were packed with, so the verifier renders each format's own text."""
    kind = kinds.BY_FORMAT.get(meta.get("format"))
    v = meta.get("format_version")
    if kind is None or type(v) is not int:
        return 0
    return (v >= kind.readable_since) + (v >= kind.tidy_since)


def _pct(x: float) -> str:
    return f"{abs(x - 1) * 100:.2g}"


#: from this factor on a difference is written as a factor ("2.0x slower"), below it in percent
FACTOR_FROM = 1.5


def _percent(p: float) -> str:
    """A percentage as a person writes it: never an exponent (86 or 100, not 1e+02)."""
    return f"{p:.0f}" if p >= 10 else f"{p:.1f}" if p >= 1 else f"{p:.2f}"


def _times(x: float) -> str:
    """A factor as a person writes it: 2.0x, 30x."""
    return f"{x:.1f}x" if x < 10 else f"{x:.0f}x"


def _span(a: str, b: str, unit: str = "", tidy: bool = True) -> str:
    """``a to b`` (with ``unit``); ``tidy``: ``a`` alone where the two ends read the same."""
    return f"{a}{unit}" if tidy and a == b else f"{a} to {b}{unit}"


def difference(it: Mapping, den: str, readable: int = 0) -> str:
    """The difference an interval resolves, in words (the ratio's convention: t(a) / t(b)).
    ``readable`` (:func:`readable`): from 1 on, a factor from :data:`FACTOR_FROM` on ("a 1.9x
    to 2.1x slower", "a 30x to 33x faster"), else the time saved or added in percent without
    exponent; from 2 on, one value where the two ends read the same ("a faster by 42 %")."""
    res, lo, hi = it.get("resolved"), it.get("ci_low"), it.get("ci_high")
    a = it["numerator"]
    if readable and res in ("numerator_faster", "numerator_slower") and lo and hi and lo > 0:
        tidy = readable >= 2
        if res == "numerator_faster":
            if 1 / lo >= FACTOR_FROM:
                return f"{a} {_span(_times(1 / hi), _times(1 / lo), tidy=tidy)} faster"
            return f"{a} faster by {_span(_percent((1 - hi) * 100), _percent((1 - lo) * 100), ' %', tidy)}"
        if hi >= FACTOR_FROM:
            return f"{a} {_span(_times(lo), _times(hi), tidy=tidy)} slower"
        return f"{a} slower by {_span(_percent((lo - 1) * 100), _percent((hi - 1) * 100), ' %', tidy)}"
    if res == "numerator_faster":
        return f"{a} faster by {_pct(hi)} to {_pct(lo)} %"
    if res == "numerator_slower":
        return f"{a} slower by {_pct(lo)} to {_pct(hi)} %"
    return "no resolved difference" if res == "none" else "no interval"


def comparisons(n: int) -> str:
    return f"{n} comparison{'' if n == 1 else 's'}"


def slack(chk: Mapping, it: Mapping) -> float:
    """How far a comparison's interval stays inside its claim's test (less: nearer to failing),
    in the ratio's units; 0 where the test or the interval is not known."""
    lo, hi, m = it.get("ci_low"), it.get("ci_high"), chk.get("margin") or 0.0
    if not isinstance(lo, (int, float)) or not isinstance(hi, (int, float)):
        return 0.0
    t = chk.get("test")
    if t == "faster":
        return 1 - hi
    if t == "not_slower":
        return 1 + m - hi
    if t == "not_faster":
        return lo - (1 - m)
    if t == "equivalent":
        return min(1 + m - hi, lo - (1 - m))
    if t == "speedup_within" and chk.get("range"):
        a, b = chk["range"]
        return min(1 / a - hi, lo - 1 / b)
    return 0.0


__all__ = ["readable", "difference", "comparisons", "slack", "FACTOR_FROM"]
