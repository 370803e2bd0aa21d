"""REPORT.md sections of the pointwise-fusion study: tiny-value controls and the scout."""
from __future__ import annotations

from typing import Mapping

from kbrepro.harness.jsonio import dec_float
from kbrepro.harness.plugin import md_table


def _fmt(v) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, str):
        v = dec_float(v)
    if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e6):
        return f"{v:.3e}"
    return f"{v:.4f}"


def _err(x: Mapping):
    return dec_float(x["max_abs_error"]) if x.get("max_abs_error") is not None else None


def tiny_value_section(c: Mapping) -> str:
    tv = c.get("tiny_value_controls") or {}
    if not tv:
        return ""
    rows = []
    for t, d in sorted(tv.items()):
        for v, x in d["checks"].items():
            rows.append([t, f"`{v}`", f"{_fmt(x.get('bit_identical_count'))}/{_fmt(x.get('element_count'))}",
                         _fmt(_err(x))])
        for k, x in (d.get("cross") or {}).items():
            rows.append([t, f"`{k}`", f"{_fmt(x.get('bit_identical_count'))}/{_fmt(x.get('element_count'))}",
                         _fmt(_err(x))])
    return ("## Tiny-value controls (tails on subnormal-producing inputs)\n\n"
            + md_table(["task", "variant / pair", "bit-identical", "max abs error"], rows))


def scout_section(s: Mapping | None) -> str:
    if not s:
        return ""
    rows = []
    for c in s.get("cases", []):
        for k, x in c["checks"].items():
            off, leg = x.get("official") or {}, x.get("legacy") or {}
            rows.append([c["case"]["task"], c["case"]["seed"], k, _fmt(off.get("pass")), _fmt(leg.get("pass")),
                         _fmt(off.get("failing_count")), _fmt(_err(x))])
    return "## Task 14/51 scout\n\n" + md_table(["task", "seed", "rewrite", "official pass", "legacy pass", "failing",
                                                 "max abs error"], rows)


def sections(documents: Mapping[str, Mapping]) -> list[str]:
    return [s for s in (tiny_value_section(documents.get("correctness") or {}), scout_section(documents.get("scout")))
            if s]
