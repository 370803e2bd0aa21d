"""REPORT.md: the bundle's findings as Markdown tables a user can paste into a forum post.

Everything is derived from the documents (statistics are computed here, from raw samples);
the text holds no wall-clock time, so the same documents always give the same report.
"""
from __future__ import annotations

from typing import Mapping

from kbrepro.bundle.wording import comparisons, difference, readable, slack
from kbrepro.harness import extras, stats
from kbrepro.harness.jsonio import dec_float
from kbrepro.harness.timing import throttled

#: the first study bundle format whose timing tables give the rounds each block holds (before
#: it, an adaptive block's protocol column gave the rule's minimum: "10 rounds" for a block
#: that ran 400); the verifier renders each format's own text
ROUNDS_HELD_SINCE = 5
#: from this study bundle format on, a timing block without an eager arm (ftz_cost: the two
#: NVRTC builds) gives its ratios to its first arm, and the table's header says "base", not
#: "eager" (format 6 headed an empty column "t(eager)" for such blocks)
RATIO_BASE_SINCE = 7


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
        return ", ".join(f"{d.get('name') or 'cupy (distribution not recorded)'} {d.get('version')}"
                         for d in v if isinstance(d, dict)) or "none"
    return str(v)


def md_cell(text) -> str:
    """``text`` safe inside one Markdown table cell: ``|`` escaped, line breaks and HTML tag
    brackets made inert (a claim sentence is the author's text)."""
    t = " ".join(str(text).split())
    return t.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


_WORST = {"fails": 0, "inconclusive": 1, "not_comparable": 2, "holds": 3}


def _ratio_items(c: Mapping, readable: bool = False) -> list[tuple[dict, dict]]:
    """(check, item) of every paired-ratio comparison of claim ``c``, worst first: failing,
    inconclusive, then those that hold only within the margin (literal reading not holding),
    then the rest; ``readable`` (:func:`readable`): within each, the nearest to failing its
    test first (:func:`slack`)."""
    out = [(chk, it) for chk in c.get("checks", []) if chk.get("kind") == "paired_ratio" for it in chk.get("items", [])]
    if readable:
        return sorted(out, key=lambda p: (_WORST.get(p[1]["verdict"], 4), p[1].get("literal") == "holds",
                                          slack(*p)))
    return sorted(out, key=lambda p: (_WORST.get(p[1]["verdict"], 4), p[1].get("literal") == "holds",
                                      p[1].get("resolved") == "none"))


def _test_words(chk: Mapping) -> str:
    t, m = chk.get("test"), chk.get("margin") or 0.0
    if t == "speedup_within" and chk.get("range"):
        a, b = chk["range"]
        return f"r in [{1 / b:.3g}, {1 / a:.3g}] (a speed-up of {a:g}x to {b:g}x)"
    return {"faster": "r < 1", "not_faster": f"r >= 1 - {m:g}", "not_slower": f"r <= 1 + {m:g}",
            "equivalent": f"1 - {m:g} <= r <= 1 + {m:g}"}.get(t, str(t))


def _cmp_text(chk: Mapping, it: Mapping) -> str:
    return (f"{it['block']} {it['numerator']}/{chk['denominator']} {_fmt(it.get('median_ratio'), 3)} "
            f"[{_fmt(it.get('ci_low'), 3)}, {_fmt(it.get('ci_high'), 3)}]")


def _decides(c: Mapping, readable: bool = False) -> str:
    """The strongest fact behind claim ``c``'s verdict, in one cell."""
    items = _ratio_items(c, readable)
    if not items:
        parts = []
        for chk in c.get("checks", []):
            extra = {k: chk[k] for k in ("count", "mismatches", "unequal", "min_fraction", "max", "violations", "why")
                     if k in chk}
            parts.append(", ".join(f"{k}={_fmt(v) if not isinstance(v, str) else v}" for k, v in extra.items()))
        return "; ".join(p for p in parts if p)
    chk, it = items[0]
    n = len(items)
    more = f" (worst of {n} comparisons)" if n > 1 else ""
    if it["verdict"] != "holds":
        return f"{it['verdict']}: {_cmp_text(chk, it)}, needs {_test_words(chk)}{more}"
    if it.get("literal") != "holds" and (chk.get("margin") or 0) > 0:
        return (f"holds only within the margin {chk['margin']:g}: {_cmp_text(chk, it)}, "
                f"{difference(it, chk['denominator'], readable)}{more}")
    return f"{_cmp_text(chk, it)}, {difference(it, chk['denominator'], readable)}{more}"


def author_note(c: Mapping) -> str:
    """What marks claim ``c`` as the author's own (defined when packing, not by the study or
    the product's default claims): the tests its own definition applies."""
    tests = "; ".join(dict.fromkeys(_test_words(chk) for chk in c.get("checks", []) if chk.get("test")))
    return f" *(the author's own claim, judged by its own definition{': ' + tests if tests else ''})*"


def author_ids(claims: Mapping | None, own_ids) -> list[str]:
    """The ids of ``claims`` that are not in ``own_ids`` (None: every claim is the study's)."""
    if own_ids is None:
        return []
    return [c["id"] for c in (claims or {}).get("claims", []) if c["id"] not in own_ids]


def claims_section(claims: Mapping, own_ids=None, readable: int = 0, timed: bool = True) -> str:
    """The claims table and the foldable comparisons. ``own_ids``: the ids the study (or the
    product's default claims) defines; any other claim is marked as the author's own;
    ``readable``: the words of :func:`readable` formats; ``timed``: the report holds timings
    (from level 2 a report without any, a CPU run's, does not explain the ratio convention)."""
    rows, details = [], []
    theirs = set(author_ids(claims, own_ids))
    for c in claims.get("claims", []):
        decide = _decides(c, readable)
        if c.get("why"):
            decide = f"{c['why']} (measured: {c.get('measured_verdict')}); {decide}"
        lit = c.get("literal_verdict", c["verdict"])
        rows.append([c["id"], f"**{c['verdict']}**", lit if lit == c["verdict"] else f"**{lit}**",
                     md_cell(c["sentence"]) + (" " + md_cell(author_note(c)) if c["id"] in theirs else ""),
                     md_cell(decide)])
        items = _ratio_items(c, readable)
        if items:
            details.append(f"**{c['id']}** ({comparisons(len(items)) if readable else f'{len(items)} comparisons'}, "
                           "worst first)\n\n" + _table(
                ["block", "a/b", "median r", "interval", "test", "verdict", "literal", "difference"],
                [[md_cell(it["block"]), md_cell(f"{it['numerator']}/{chk['denominator']}"),
                  _fmt(it.get("median_ratio"), 4), f"[{_fmt(it.get('ci_low'), 4)}, {_fmt(it.get('ci_high'), 4)}]",
                  md_cell(_test_words(chk)), it["verdict"], it.get("literal", "n/a"),
                  difference(it, chk["denominator"], readable)] for chk, it in items]))
    s = claims.get("summary", {})
    order = ("holds", "fails", "inconclusive", "not_comparable")  # the evaluator's order, whatever the key order
    head = ", ".join(f"{k}: {s[k]}" for k in sorted(s, key=lambda k: (order.index(k) if k in order else 9, k)))
    boot = claims.get("bootstrap") or {}
    convention = ("**One ratio convention throughout this report:** r = t(a) / t(b), the time of a over the time of b "
                  "in the same round (arms run interleaved), its median over rounds with the "
                  f"{boot.get('level', 0.95):.0%} bootstrap interval [low, high]; r < 1 means a is faster (a speed-up "
                  "of 3x is r = 0.333). ")
    if readable >= 2 and not timed and not details:
        convention = ""  # nothing in the report is a ratio of times
    text = ("## Claims\n\n" + f"Evaluated on {claims.get('evaluated_on')} data ({head}). " + convention +
            "*verdict* judges the claim with the margin its "
            "spec states before the data; *read literally* judges the same sentence with margin 0. *What decides it* "
            "names the worst comparison: where a claim holds only within its margin, it says which side is faster "
            "and by how much.\n\n" + (f"**{len(theirs)} of these claims are the author's own** (defined when packing, "
                                     "not by the study; marked in the table): the verifier judges them by their own "
                                     "definitions, so its result is PARTIAL.\n\n" if theirs else "") + _table(["id", "verdict", "read literally", "claim", "what decides it"], rows))
    if details:
        text += ("\n<details><summary>Every timing comparison of every claim</summary>\n\n" + "\n".join(details)
                 + "\n</details>\n")
    return text


def compile_section(compile_doc: Mapping) -> str:
    rows = []
    for v in compile_doc.get("variants", []):
        ev = v.get("ftz_evidence", {})
        w = ev.get("witness") or {}
        ptx = ev.get("ptx") or {}
        sass = ev.get("sass") or {}
        wf = _fmt(w.get("flushes")) + (" (derived)" if w.get("derived_from") else "")
        rows.append([f"`{v['name']}`", v["route"], " ".join(f"`{o}`" for o in (v.get("effective_options") or [])) or "not recorded",
                     (v.get("cubin") or {}).get("sha256", "n/a")[:12], wf,
                     f"{ptx.get('ftz_exact_f32')}/{ptx.get('f32_exact_ops')}" if ptx else "n/a",
                     f"{sass.get('fmul_ffma_ftz')}/{sass.get('fmul_ffma')}" if "fmul_ffma" in sass else "n/a",
                     _fmt(ev.get("expected")), f"**{_fmt(ev.get('agrees'))}**"])
    return ("## Compile variants and FTZ evidence\n\n"
            "Evidence of each binary's FTZ mode: the witness (does the binary's output follow the reference computed "
            "with denormals flushed? only where the witness discriminates), the PTX (non-approximate f32 instructions carrying `.ftz`, of all such instructions) and the SASS "
            "(FMUL/FFMA carrying `.FTZ`, of all FMUL/FFMA; other `.FTZ` instructions appear in both modes and do not "
            "decide). 'derived' marks a witness an importer derived from the author's files.\n\n"
            + _table(["variant", "route", "options in effect", "cubin sha256", "witness flushes", "PTX .ftz / f32 ops",
                      "SASS FMUL/FFMA .FTZ / all", "FTZ expected", "evidence agrees"], rows))


def witness_section(w: Mapping | None) -> str:
    if not w:
        return ("## FTZ witness\n\nNo witness was recorded in these results; the FTZ evidence rests on the PTX and "
                "SASS (and on what an importer derived).\n")
    names = list(w["outputs"])
    rows = []
    for i, inp in enumerate(w["inputs"]):
        rows.append([_fmt(dec_float(inp["value"]))] + [f"{_fmt(dec_float(w['outputs'][n][i]['value']))} (`{w['outputs'][n][i]['bits']}`)"
                                                       for n in names])
    rows = rows if len(rows) <= 16 else rows[:16]
    disc = ("The reference at these inputs depends on subnormal handling (elements "
            + ", ".join(str(i) for i in w.get("discriminating_elements", [])[:16]) + "), so the witness judges each binary."
            if w.get("discriminates") else "The reference at these inputs does not depend on subnormal handling: "
            "this witness cannot judge a binary's FTZ mode.")
    return (f"## FTZ witness (task {w['task']})\n\n{disc}\n\n" + _table(["input"] + names, rows))


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
            shapes = sorted({"x".join(map(str, case["case"]["shape"])) for case in fp if case["case"]["task"] == t
                             and isinstance(case["case"].get("shape"), list)})
            dists = sorted({str(case["case"].get("distribution")) for case in fp if case["case"]["task"] == t})
            seeds = len({case["case"].get("seed") for case in fp if case["case"]["task"] == t})
            rows.append([f"`{v}`", t, md_cell(", ".join(shapes) or "n/a"), md_cell(f"{seeds} seeds x {', '.join(dists)}"),
                         f"{passed}/{len(cs)}" + (" (derived)" if derived else ""), f"{ident}/{len(bits)}",
                         _fmt(minfrac, 6), _fmt(maxabs)])
    p = c.get("predicate", {})
    out = ("## Full-program correctness (float32)\n\n"
           f"Official check: `torch.allclose(reference, candidate, atol={p.get('atol')}, rtol={p.get('rtol')})` "
           "(relative term scaled by the candidate). Bit identity: integer equality of the int32 views.\n\n"
           + _table(["variant", "task", "input shape", "cases", "official pass", "bit-identical cases",
                     "min bit-identical fraction", "max abs error"], rows))
    return out


def timing_section(t: Mapping, bundle_format: int | None = None) -> str:
    """The timing tables, one per block kind. ``bundle_format``: the bundle's format version;
    from :data:`ROUNDS_HELD_SINCE` on, the protocol column gives the rounds the block holds
    (and an adaptive block its rule's bounds), before it the protocol's ``rounds``; from
    :data:`RATIO_BASE_SINCE` on, a block without an eager arm gives its ratios to its first arm."""
    out = ["## Timings (float32; ms per invocation: median [q25, q75]; CUDA events or CUDA-graph replay, as the "
           "block's mode says; arms interleaved in every round)\n"]
    by_kind: dict[str, list] = {}
    for b in t.get("blocks", []):
        by_kind.setdefault(b.get("kind", "study"), []).append(b)
    any_base = isinstance(bundle_format, int) and bundle_format >= RATIO_BASE_SINCE
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
            base = next((a for a in b["arms"] if a == "eager" or a.startswith("eager_")), None)
            if base is None and any_base:
                base = b["arms"][0]
            ratios = []
            if base:
                for a in b["arms"]:
                    if a != base and not a.startswith("torchscript") and a != "l2_flush_only":
                        r = stats.paired_ratios(b, a, base)
                        if r:
                            ratios.append(f"{a}/{base} {stats.summary(r)['median_ms']:.3f}")
            p = b.get("protocol") or {}
            shape = "x".join(str(d) for d in b["shape"]) if isinstance(b.get("shape"), list) else "n/a"
            rows.append([b["id"], shape, f"{_rounds_cell(b, bundle_format)} x {p.get('invocations_per_pair')} invocations, "
                         f"{p.get('warmups', 'n/a')} warm-ups, {p.get('mode', b.get('mode', 'n/a'))}",
                         "<br>".join(cells), "<br>".join(ratios)])
        out.append(f"### {kind}\n\n" + _table(["block", "input shape", "protocol", "arms",
                                                 "r = t(arm) / t(base) (paired median; base: the eager arm, else the "
                                                 "block's first)" if any_base else
                                                 "r = t(arm) / t(eager) (paired median)"], rows))
    return "\n".join(out)


def _rounds_cell(b: Mapping, bundle_format: int | None) -> str:
    p = b.get("protocol") or {}
    if not (isinstance(bundle_format, int) and bundle_format >= ROUNDS_HELD_SINCE):
        return f"{p.get('rounds')} rounds"
    ad = p.get("adaptive") or {}
    return f"{len(b['rounds'])} rounds" + (f" (adaptive, {ad.get('min_rounds')} to {ad.get('max_rounds')})" if ad else "")


def _paired(b: Mapping | None, num: str, den: str, sub: str | None = None) -> str:
    """Median paired ratio num/den with its bootstrap interval; with ``sub`` (the flush-only
    arm), that arm's time is subtracted from both, round by round."""
    r = []
    for row in (b or {}).get("rounds", []):
        t = row["times_ms"]
        if num in t and den in t:
            a, c = float(t[num]), float(t[den])
            if sub and sub in t:
                a, c = a - float(t[sub]), c - float(t[sub])
            if c > 0:
                r.append(a / c)
    if not r:
        return "n/a"
    ci = stats.bootstrap_median_ci(r, resamples=2000)
    lo = "n/a" if ci["ci_low"] is None else f"{ci['ci_low']:.3f}"
    hi = "n/a" if ci["ci_high"] is None else f"{ci['ci_high']:.3f}"
    return f"{ci['median']:.3f} [{lo}, {hi}]"


def _inductor_part(documents: Mapping[str, Mapping]) -> str:
    c = documents.get("correctness") or {}
    ind = {k: v.get("inductor") for k, v in (c.get("tasks") or {}).items() if v.get("inductor")}
    if not ind:
        return ""
    rows = []
    for task, rec in sorted(ind.items()):
        for part in [k for k in rec if k not in ("settings", "compile_seconds")]:
            chk = rec[part]
            rows.append([task, part, f"{rec['compile_seconds'][part]:.1f}", _fmt(chk["official"]["pass"]),
                         f"{chk['bit_identical_count']:,}/{chk['element_count']:,}"])
    w = (documents.get("witness") or {}).get("verdicts", {}).get("inductor")
    wit = "" if not w or w["flushes"] is None else (" FTZ witness: the Inductor program "
                                                    + ("flushes subnormals (FTZ)." if w["flushes"] else "keeps subnormals."))
    s = next(iter(ind.values()))["settings"]
    head = (f"torch {s.get('torch')}, Triton {s.get('triton')}, mode {s.get('mode')}, dynamic={s.get('dynamic')}. "
            "Compile time is measured apart, never inside a timing.")
    return ("### Inductor (torch.compile) baseline\n\n" + head + "\n\n"
            + _table(["task", "program", "compile s", "official pass", "bit-identical"], rows)
            + wit + "\n")


def _cold_part(blocks: list, flush_bytes: int) -> str:
    warm = {(b["task"], b["scope"], b["mode"]): b for b in blocks if b.get("kind") == "study" and b.get("rounds")}
    cold = {(b["task"], b["scope"], b["mode"]): b for b in blocks if b.get("kind") == "cold_l2" and b.get("rounds")}
    if not cold:
        return ""
    rows = []
    for key in sorted(cold):
        cb = cold[key]
        base = "eager" if key[1] == "full" else f"eager_{key[1]}"
        for arm in cb["arms"]:
            if arm in (base, "l2_flush_only"):
                continue
            rows.append([f"{key[0]} {key[1]} {key[2]}", arm, _paired(warm.get(key), arm, base),
                         _paired(cb, arm, base, sub="l2_flush_only")])
    return ("### Warm vs cold L2 (paired per-round ratio to eager, median [95% interval])\n\n"
            f"Cold: a write of {flush_bytes:,} bytes (at least 2 x L2) before every timed call; the flush-only "
            "arm's time is subtracted round by round.\n\n" + _table(["block", "arm", "warm", "cold"], rows))


def _roofline_part(blocks: list) -> str:
    copy = next((b for b in blocks if b.get("kind") == "copy" and b.get("rounds")), None)
    if not copy:
        return ""
    gbps = extras.copy_gbps(copy)
    rows = []
    for b in blocks:
        if b.get("kind") not in ("study", "cold_l2") or b.get("scope") == "full" or not b.get("bytes_moved"):
            continue
        flush = (stats.summary(stats.arm_samples(b, "l2_flush_only"))["median_ms"]
                 if "l2_flush_only" in b["arms"] else 0.0)
        for arm in b["arms"]:
            if arm == "l2_flush_only":
                continue
            med = stats.summary(stats.arm_samples(b, arm))["median_ms"] - flush
            if med <= 0:
                continue
            ach = b["bytes_moved"] / (med * 1e-3) / 1e9
            rows.append([b["id"], arm, f"{med:.4f}", f"{ach:.0f}", f"{ach / gbps:.2f}"])
    gem = []
    for b in blocks:
        if b.get("kind") == "gemm" and b.get("rounds"):
            med = stats.summary(stats.arm_samples(b, "gemm"))["median_ms"]
            gem.append([b["task"], b["mode"], f"{med:.3f}", f"{extras.tflops(b['flops'], med):.1f}"])
    return (f"### Roofline\n\nDevice copy bandwidth measured in this run: {gbps:.0f} GB/s (bytes read + written; "
            "the faster of cudaMemcpy and an elementwise copy kernel). "
            "Bytes moved per call are the least the scope must read and write (the study's binding gives them). "
            "Cold-L2 rows have the flush-only arm's median subtracted.\n\n"
            + _table(["block", "arm", "median ms", "GB/s", "fraction of copy bandwidth"], rows)
            + "\nGEMM alone (FP32, TF32 off):\n\n" + _table(["task", "mode", "median ms", "TFLOP/s"], gem))


def _misc_parts(blocks: list, selftest: Mapping | None) -> list[str]:
    out = []
    floor = [b for b in blocks if b.get("kind") == "floor" and b.get("rounds")]
    if floor:
        rows = [[b["id"], b["mode"], f"{stats.summary(stats.arm_samples(b, b['arms'][0]))['median_ms'] * 1e3:.2f}"]
                for b in floor]
        out.append("### Measurement floor\n\n" + _table(["what", "mode", "median microseconds per call"], rows))
    clocked = [r for b in blocks for r in b.get("rounds", []) if r.get("clocks")]
    if clocked:
        n_thr = sum(1 for r in clocked if throttled(r))
        sm = sorted({r["clocks"].get("sm_clock_mhz") for r in clocked if r["clocks"].get("sm_clock_mhz")})
        out.append(f"### Clocks\n\n{len(clocked)} rounds sampled through NVML; {n_thr} throttled (power, thermal or "
                   f"slowdown reasons); SM clocks seen: {', '.join(map(str, sm))} MHz. Throttled rounds are flagged in "
                   "timings.json (`clocks.throttle_reasons`); the paired ratios use every round, and pairing within a "
                   "round cancels a throttle that slows all arms of that round alike.\n")
    adaptive = [b for b in blocks if b.get("adaptive")]
    if adaptive:
        rows = []
        for b in adaptive:
            a = b["adaptive"]
            worst = max(a["rel_half_widths"].values(), default=float("nan"))
            rows.append([b["id"], a["rounds"], a["stop_reason"], f"{worst * 100:.2f}%"])
        out.append("### Adaptive stopping\n\nRounds continue until every paired ratio's interval half-width is "
                   "within the target, or a cap.\n\n" + _table(["block", "rounds", "stopped by", "widest half-width"], rows))
    if selftest:
        rows = [[r["name"], r["description"], ", ".join(r["expected"]) or "(none: must pass all)",
                 ", ".join(r["failed_checks"]) or "none", f"**{_fmt(r['as_expected'])}**"] for r in selftest["tests"]]
        out.append("### Self-tests\n\n" + _table(["kernel", "what is wrong", "expected to be caught by", "failed checks",
                                                  "as expected"], rows))
    return out


def extras_section(documents: Mapping[str, Mapping]) -> str:
    """Beyond the post: Inductor, cold vs warm L2, roofline, floor, clocks, adaptive stopping,
    self-tests. Empty when the run measured none of these."""
    t = documents.get("timings") or {}
    blocks = t.get("blocks", [])
    parts = [_inductor_part(documents), _cold_part(blocks, (t.get("extras") or {}).get("l2_flush_bytes", 0)),
             _roofline_part(blocks), *_misc_parts(blocks, documents.get("selftest"))]
    parts = [p for p in parts if p]
    return ("## Beyond the post\n\n" + "\n".join(parts)) if parts else ""


#: the heading above the sections a study's binding renders: a reader sees where the product's
#: own rendering stops (for a study the verifier does not ship, what follows is the author's)
STUDY_SECTIONS_HEADING = ("## Study sections\n\nRendered by the study's own binding (`binding.py` of its "
                          "folder) from the documents above. A verifier re-renders them only for a study it "
                          "ships; for any other study they are the author's text, not verified.\n")


def render(meta: Mapping, documents: Mapping[str, Mapping], claims: Mapping | None, plots: list[str],
           sections: list[str] | None = None, own_ids=None) -> str:
    """REPORT.md text. ``meta`` is the bundle metadata (bundle.json); ``sections``: the
    study binding's own Markdown sections (``StudyBinding.report_sections``), placed after
    the timings under :data:`STUDY_SECTIONS_HEADING`."""
    env = documents.get("environment", {})
    run = documents.get("run", {})
    kb = run.get("kernelbench", {})
    product = meta.get("product") or {}
    lines = [f"# {meta['name']}\n",
             f"Run {run.get('started_utc', 'n/a')} to {run.get('finished_utc', 'n/a')} (UTC), measured with kbrepro "
             f"{product.get('version') or 'n/a'} (commit {str(product.get('commit') or 'n/a')[:12]}).\n",
             f"Study `{meta['study']['name']}`, profile `{meta['study']['profile']}`, {meta['source']} results. "
             f"GPU {_env(env, 'gpu_name')} (CC {_env(env, 'compute_capability')}), driver {_env(env, 'driver_version')}, "
             f"torch {_env(env, 'torch_version')}, CUDA runtime {_env(env, 'cuda_runtime_version')}, NVRTC "
             f"{_env(env, 'nvrtc_version')}, CuPy {_env(env, 'cupy_distributions')}. KernelBench "
             f"`{kb.get('commit', 'n/a')}`. TF32 matmul {_env(env, 'tf32_matmul')}, cuDNN {_env(env, 'tf32_cudnn')}.\n"]
    if meta.get("notes"):
        lines.append("Notes:\n" + "".join(f"- {n}\n" for n in meta["notes"]))
    if claims:
        lines.append(claims_section(claims, own_ids, readable(meta)))
    if "compile" in documents:
        lines.append(compile_section(documents["compile"]))
    lines.append(witness_section(documents.get("witness")))
    if "correctness" in documents:
        lines.append(correctness_section(documents["correctness"]))
    if "timings" in documents:
        lines.append(timing_section(documents["timings"], meta.get("format_version")))
    if sections:
        lines.append(STUDY_SECTIONS_HEADING)
        lines += list(sections)
    lines.append(extras_section(documents))
    lines.append(figures_section(plots))
    return "\n".join(lines)


def figures_section(names: list[str]) -> str:
    """The figures of the bundle by name: each one's data is ``data/plots/<name>.json``, inside
    the digest; its PNG is ``renderings/<name>.png`` beside ``data/``, outside it (present when
    the packer had matplotlib; ``verify_bundle.py X.tar --plots DIR`` draws them again)."""
    if not names:
        return "## Figures\n\nNone: the documents hold no timing rounds, bit counts or timing claims.\n"
    return ("## Figures\n\nEach figure's numbers are `data/plots/<name>.json`, inside the bundle's digest; the "
            "picture is `renderings/<name>.png` beside `data/`, outside it (the same data drawn by another matplotlib "
            "give another PNG and the same digest; `verify_bundle.py X.tar --plots DIR` draws them on your machine).\n\n"
            + "".join(f"![{n}](../renderings/{n}.png)\n\n" for n in names))


def _size_text(v) -> str:
    if isinstance(v, list):
        return "(" + ",".join(str(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    return str(v)


def run_conditions(documents: Mapping[str, Mapping]) -> tuple[bool, list[tuple[str, str]]]:
    """Where and at which sizes a candidate run ran, from its ``candidates`` document: whether
    it ran on a CPU (``--device cpu``), and ``(candidate, "NAME=VALUE, ...")`` for every
    candidate checked at sizes other than its task's own (``--size``). A study's documents
    give ``(False, [])``."""
    doc = documents.get("candidates") or {}
    sized = []
    for r in doc.get("candidates") or []:
        sizes = (r.get("config") or {}).get("sizes") or {}
        if sizes:
            sized.append((str(r.get("name")), ", ".join(f"{k}={_size_text(v)}" for k, v in sorted(sizes.items()))))
    return doc.get("device") == "cpu", sized


def post_summary(meta: Mapping, documents: Mapping[str, Mapping], claims: Mapping | None, digest: str,
                 own_ids=None) -> str:
    """Five lines to paste into a forum post: the bundle and its digest; the GPU and toolchain;
    the claim verdicts (naming those that do not hold, and those that hold only within their
    margin); what a PASS means; how to check it. Derived from the records and the digest, so
    a verifier writes the same five lines itself. ``own_ids``: as for :func:`claims_section`;
    the author's own claims are named on the claims line."""
    env = documents.get("environment", {})
    cl = (claims or {}).get("claims", [])
    s = (claims or {}).get("summary", {})
    bad = [c["id"] for c in cl if c.get("verdict") != "holds"]
    margin = [c["id"] for c in cl if c.get("verdict") == "holds" and c.get("literal_verdict", "holds") != "holds"]
    theirs = author_ids(claims, own_ids)
    verdicts = ", ".join(f"{k.replace('_', ' ')} {s[k]}" for k in ("holds", "fails", "inconclusive", "not_comparable")
                         if k in s)
    name = meta.get("name", "bundle")
    where = (f"GPU {_env(env, 'gpu_name')} (CC {_env(env, 'compute_capability')}), driver "
             f"{_env(env, 'driver_version')}; torch {_env(env, 'torch_version')}, CUDA {_env(env, 'cuda_runtime_version')}, "
             f"NVRTC {_env(env, 'nvrtc_version')}")
    if readable(meta):
        cpu, sized = run_conditions(documents)
        if cpu:
            where = f"CPU run (--device cpu): correctness only, no timings; torch {_env(env, 'torch_version')}"
        if sized:
            where += f"; at sizes other than the tasks' own for {len(sized)} candidate{'s' if len(sized) > 1 else ''}"
    return "\n".join([
        f"kbrepro bundle {name}: digest sha256:{digest}",
        where,
        f"claims: {verdicts}" + (f"; not holding: {', '.join(bad)}" if bad else "")
        + (f"; holding only within their margin: {', '.join(margin)}" if margin else "")
        + (f"; the author's own claims: {', '.join(theirs)}" if theirs else ""),
        ("every verdict is derived again from the raw data by the verifier (static), the author's own claims by "
         "their own definitions (the verifier says PARTIAL)" if theirs else
         "every verdict is derived again from the raw data by the verifier (static)")
        + "; replay re-measures on your GPU",
        f"check: python verify_bundle.py {name}.tar --expect-digest {digest} (add --level replay on a GPU)",
    ]) + "\n"
