"""REPORT.md: the bundle's findings as Markdown tables a user can paste into a forum post.

Everything is derived from the documents (statistics are computed here, from raw samples);
the text holds no wall-clock time, so the same documents always give the same report.
"""
from __future__ import annotations

from typing import Mapping

from harness import stats
from harness.jsonio import dec_float


def _fmt(v, digits: int = 4) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e6):
        return f"{v:.3e}"
    return f"{v:.{digits}f}"


def _table(header: list[str], rows: list[list]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out) + "\n"


def _env(env: Mapping, key: str) -> str:
    f = (env or {}).get("fields", {}).get(key)
    if not f:
        return "n/a"
    v = f.get("value")
    if v is None:
        return "n/a"
    if isinstance(v, list):
        return ", ".join(f"{d.get('name')} {d.get('version')}" for d in v if isinstance(d, dict)) or "none"
    return str(v)


def claims_section(claims: Mapping) -> str:
    rows = []
    for c in claims.get("claims", []):
        nums = []
        for chk in c["checks"]:
            if chk["kind"] == "paired_ratio":
                for it in chk.get("items", [])[:6]:
                    if it.get("median_ratio") is not None:
                        nums.append(f"{it['block']} {it['numerator']}/{chk['denominator']} {it['median_ratio']:.3f} "
                                    f"[{_fmt(it['ci_low'], 3)}, {_fmt(it['ci_high'], 3)}] {it['verdict']}")
                if len(chk.get("items", [])) > 6:
                    nums.append(f"... {len(chk['items']) - 6} more")
            else:
                extra = {k: chk[k] for k in ("count", "mismatches", "unequal", "min_fraction", "max", "violations", "why")
                         if k in chk}
                nums.append(", ".join(f"{k}={_fmt(v) if not isinstance(v, str) else v}" for k, v in extra.items()))
        if c.get("why"):
            nums.insert(0, f"{c['why']} (measured: {c.get('measured_verdict')})")
        rows.append([c["id"], f"**{c['verdict']}**", c["sentence"], "<br>".join(n for n in nums if n)])
    s = claims.get("summary", {})
    head = ", ".join(f"{k}: {v}" for k, v in s.items())
    return ("## Claims\n\n" + f"Evaluated on {claims.get('evaluated_on')} data ({head}). Timing ratios are medians of "
            "per-round paired ratios with a bootstrap interval [low, high].\n\n"
            + _table(["id", "verdict", "claim", "numbers"], rows))


def compile_section(compile_doc: Mapping) -> str:
    rows = []
    for v in compile_doc.get("variants", []):
        ev = v.get("ftz_evidence", {})
        w = ev.get("witness") or {}
        ptx = ev.get("ptx") or {}
        sass = ev.get("sass") or {}
        rows.append([f"`{v['name']}`", v["route"], " ".join(f"`{o}`" for o in (v.get("effective_options") or [])) or "not recorded",
                     (v.get("cubin") or {}).get("sha256", "n/a")[:12], _fmt(w.get("flushes")),
                     _fmt(ptx.get("ftz_exact_f32")) if ptx else "n/a",
                     _fmt(sass.get("ftz_instructions")) if "ftz_instructions" in sass else "n/a",
                     _fmt(ev.get("expected")), f"**{_fmt(ev.get('agrees'))}**"])
    return ("## Compile variants and FTZ evidence\n\n"
            + _table(["variant", "route", "options in effect", "cubin sha256", "witness flushes", "PTX exact f32 .ftz",
                      "SASS .FTZ", "FTZ expected", "evidence agrees"], rows))


def witness_section(w: Mapping | None) -> str:
    if not w:
        return "## Minimal witness\n\nNot recorded in these results.\n"
    names = list(w["outputs"])
    rows = []
    for i, inp in enumerate(w["inputs"]):
        rows.append([_fmt(dec_float(inp["value"]))] + [f"{_fmt(dec_float(w['outputs'][n][i]['value']))} (`{w['outputs'][n][i]['bits']}`)"
                                                       for n in names])
    return (f"## Minimal witness (task {w['task']} tail)\n\n" + _table(["input"] + names, rows))


def correctness_section(c: Mapping) -> str:
    fp = c.get("full_program", [])
    variants = sorted({v for case in fp for v in case["checks"]})
    tasks = sorted({case["case"]["task"] for case in fp})
    rows = []
    for v in variants:
        for t in tasks:
            cs = [case["checks"][v] for case in fp if case["case"]["task"] == t and v in case["checks"]]
            if not cs:
                continue
            off = [x.get("official") for x in cs]
            passed = sum(1 for o in off if o and o.get("pass"))
            derived = any(o and o.get("derived_from") for o in off)
            bits = [x for x in cs if x.get("bit_identical_count") is not None and x.get("element_count")]
            ident = sum(1 for x in bits if x["bit_identical_count"] == x["element_count"])
            minfrac = min((x["bit_identical_count"] / x["element_count"] for x in bits), default=None)
            maxabs = max((dec_float(x["max_abs_error"]) for x in cs if x.get("max_abs_error") is not None), default=None)
            rows.append([f"`{v}`", t, f"{passed}/{len(cs)}" + (" (derived)" if derived else ""), f"{ident}/{len(bits)}",
                         _fmt(minfrac, 6), _fmt(maxabs)])
    p = c.get("predicate", {})
    out = ("## Full-program correctness\n\n"
           f"Official check: `torch.allclose(reference, candidate, atol={p.get('atol')}, rtol={p.get('rtol')})` "
           "(relative term scaled by the candidate). Bit identity: integer equality of the int32 views.\n\n"
           + _table(["variant", "task", "official pass", "bit-identical cases", "min bit-identical fraction", "max abs error"], rows))
    tv = c.get("tiny_value_controls", {})
    if tv:
        rows = []
        for t, d in sorted(tv.items()):
            for v, x in d["checks"].items():
                rows.append([t, f"`{v}`", f"{_fmt(x.get('bit_identical_count'))}/{_fmt(x.get('element_count'))}",
                             _fmt(dec_float(x["max_abs_error"]) if x.get("max_abs_error") is not None else None)])
            for k, x in (d.get("cross") or {}).items():
                rows.append([t, f"`{k}`", f"{_fmt(x.get('bit_identical_count'))}/{_fmt(x.get('element_count'))}",
                             _fmt(dec_float(x["max_abs_error"]) if x.get("max_abs_error") is not None else None)])
        out += "\n### Tiny-value controls (tails on subnormal-producing inputs)\n\n" + _table(
            ["task", "variant / pair", "bit-identical", "max abs error"], rows)
    return out


def timing_section(t: Mapping) -> str:
    out = ["## Timings (ms per invocation: median [q25, q75])\n"]
    by_kind: dict[str, list] = {}
    for b in t.get("blocks", []):
        by_kind.setdefault(b.get("kind", "study"), []).append(b)
    for kind, blocks in by_kind.items():
        rows = []
        for b in blocks:
            if not b.get("rounds"):
                rows.append([b["id"], b.get("skipped", "no rounds"), "", ""])
                continue
            cells = []
            for a in b["arms"]:
                s = stats.summary(stats.arm_samples(b, a))
                cells.append(f"{a}: {s['median_ms']:.4f} [{s['q25_ms']:.4f}, {s['q75_ms']:.4f}]")
            base = "eager" if "eager" in b["arms"] else ("eager_tail" if "eager_tail" in b["arms"] else None)
            ratios = []
            if base:
                for a in b["arms"]:
                    if a not in (base, "torchscript", "torchscript_tail", "l2_flush_only") and a in b["arms"]:
                        r = stats.paired_ratios(b, base, a)
                        if r:
                            ratios.append(f"{base}/{a} {stats.summary(r)['median_ms']:.3f}x")
            rows.append([b["id"], f"{b['protocol']['rounds']} rounds x {b['protocol']['invocations_per_pair']}",
                         "<br>".join(cells), "<br>".join(ratios)])
        out.append(f"### {kind}\n\n" + _table(["block", "protocol", "arms", "speed ratios (paired median)"], rows))
    return "\n".join(out)


def scout_section(s: Mapping | None) -> str:
    if not s:
        return ""
    rows = []
    for c in s.get("cases", []):
        for k, x in c["checks"].items():
            off, leg = x.get("official") or {}, x.get("legacy") or {}
            rows.append([c["case"]["task"], c["case"]["seed"], k, _fmt(off.get("pass")), _fmt(leg.get("pass")),
                         _fmt(off.get("failing_count")), _fmt(dec_float(x["max_abs_error"]) if x.get("max_abs_error") is not None else None)])
    return "## Task 14/51 scout\n\n" + _table(["task", "seed", "rewrite", "official pass", "legacy pass", "failing", "max abs error"], rows)


def render(meta: Mapping, documents: Mapping[str, Mapping], claims: Mapping | None, plots: list[str]) -> str:
    """REPORT.md text. ``meta`` is the bundle metadata (bundle.json)."""
    env = documents.get("environment", {})
    run = documents.get("run", {})
    kb = run.get("kernelbench", {})
    lines = [f"# {meta['name']}\n",
             f"Study `{meta['study']['name']}`, profile `{meta['study']['profile']}`, {meta['source']} results. "
             f"GPU {_env(env, 'gpu_name')} (CC {_env(env, 'compute_capability')}), driver {_env(env, 'driver_version')}, "
             f"torch {_env(env, 'torch_version')}, CUDA runtime {_env(env, 'cuda_runtime_version')}, NVRTC "
             f"{_env(env, 'nvrtc_version')}, CuPy {_env(env, 'cupy_distributions')}. KernelBench "
             f"`{kb.get('commit', 'n/a')}`. TF32 matmul {_env(env, 'tf32_matmul')}, cuDNN {_env(env, 'tf32_cudnn')}.\n"]
    if meta.get("notes"):
        lines.append("Notes:\n" + "".join(f"- {n}\n" for n in meta["notes"]))
    if claims:
        lines.append(claims_section(claims))
    if "compile" in documents:
        lines.append(compile_section(documents["compile"]))
    lines.append(witness_section(documents.get("witness")))
    if "correctness" in documents:
        lines.append(correctness_section(documents["correctness"]))
    if "timings" in documents:
        lines.append(timing_section(documents["timings"]))
    lines.append(scout_section(documents.get("scout")))
    if plots:
        lines.append("## Plots\n\n" + "".join(f"![{p}]({p})\n\n" for p in plots))
    else:
        lines.append("## Plots\n\nNo plots: matplotlib is not installed (pip install 'kbrepro[plots]').\n")
    return "\n".join(lines)
