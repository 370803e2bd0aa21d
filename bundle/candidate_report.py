"""The default claims and REPORT.md of a candidate bundle: functions of the results alone, so
the packer and the verifier write them with this one code and compare.

* :func:`default_claims`: per candidate (``K<n>a``...``K<n>f``) every check, correctness,
  faster than eager, faster than the fastest correct compiled baseline (those excluded as
  wrong named), faster with a cold L2, bit identity;
* :func:`render_report`: REPORT.md from the packed documents; every bundle string it shows
  passes the one inertness rule (:func:`kbrepro.inert.md`).
"""
from __future__ import annotations

import json
import statistics
from typing import Mapping

from kbrepro import inert
from kbrepro.bundle import kinds
from kbrepro.bundle.kinds import KIND
from kbrepro.errors import UsageError
from kbrepro.harness import jsonio, stats
from kbrepro.bundle import report

COMPILED = ("compile_default", "compile_max_autotune")


# ---------------------------------------------------------------------------------------------
# default claims


def _q(name: str) -> str:
    return f"candidates.candidates[?name=='{name}'] | [0]"


def best_compiled(record: Mapping) -> str | None:
    """The compiled baseline (``torch.compile`` default or max-autotune) with the lowest median
    time in the candidate's warm-L2 block, among those whose output passed the official check."""
    blocks = [b for b in record.get("blocks") or [] if isinstance(b, dict) and b.get("l2") == "warm"]
    base = (record.get("timing") or {}).get("baselines") or {}
    if not blocks:
        return None
    best = None
    for arm in COMPILED:
        if arm not in (blocks[0].get("arms") or []):
            continue
        if ((base.get(arm) or {}).get("compare") or {}).get("official", {}).get("pass") is not True:
            continue
        ts = [r["times_ms"][arm] for r in blocks[0].get("rounds") or [] if arm in (r.get("times_ms") or {})]
        if ts and (best is None or statistics.median(ts) < best[1]):
            best = (arm, statistics.median(ts))
    return best[0] if best else None


def excluded_compiled(record: Mapping) -> list[str]:
    """The compiled baselines that ran and whose output failed the official check (named in
    the claim that skips them)."""
    base = (record.get("timing") or {}).get("baselines") or {}
    return [a for a in COMPILED if isinstance(base.get(a), dict) and "skipped" not in base[a]
            and ((base[a].get("compare") or {}).get("official") or {}).get("pass") is not True]


def default_claims(doc: Mapping, format_version: int | None = None) -> dict:
    """The default claims spec (schemas/claims-spec.schema.json) of a ``candidates.json``
    document: per candidate (``K<i>``), in this order: (a) it passes every named check that can
    decide; (b) it passes the official check on every case, re-drawn weights and extra shapes
    included; (c) it is faster than eager PyTorch (warm L2, paired per-round ratios, 95%
    bootstrap interval of the median); (d) it is faster than the fastest correct compiled
    baseline; (e) the same against eager with a cold L2; (f) bit identity, phrased as the data
    say. (c) to (f) require (a) and (b): a speed-up of a candidate that was caught means nothing.
    ``format_version``: the candidate bundle format; from :data:`kinds.DECIDING_SINCE` on, (a)
    says how many of the checks decide, before it how many there are."""
    claims = []
    pred = doc.get("predicate") or {}
    atol, rtol = pred.get("atol"), pred.get("rtol")
    for i, rec in enumerate(doc.get("candidates") or []):
        n = rec["name"]
        k = f"K{i + 1}"
        q = _q(n)
        verdicts = [v for v in rec.get("verdicts") or [] if isinstance(v, dict)]
        deciding = isinstance(format_version, int) and format_version >= kinds.DECIDING_SINCE
        if deciding:
            undecided = sum(v.get("passed") is None for v in verdicts)
            counted = (f"{len(verdicts) - undecided} of its {len(verdicts)} checks decide here; the "
                       f"{undecided} that cannot {'is' if undecided == 1 else 'are'} listed, not counted" if undecided
                       else f"all {len(verdicts)} of its checks decide here")
        else:
            counted = f"{len(rec.get('verdicts') or [])} checks; one that cannot decide is listed, not counted"
        claims.append({"id": f"{k}a", "sentence": f"{n} passes every named check against cheating that can decide "
                       f"({counted}).",
                       "checks": [{"kind": "all_equal", "select": f"{q}.verdicts[?passed != null].passed",
                                   "equals": True}]})
        shapes = any(c.get("kind") == "extra_shape" for c in (rec.get("observations") or {}).get("cases") or []
                     if isinstance(c, dict))
        # (format 6 on: a candidate that never ran has no checked case to speak of)
        ran = not deciding or any(isinstance(c, dict) for c in (rec.get("observations") or {}).get("cases") or [])
        claims.append({"id": f"{k}b", "sentence": f"{n} passes torch.allclose(reference, candidate, atol={atol:g}, "
                       f"rtol={rtol:g}) on every case: seeds x input distributions, re-drawn weights"
                       + (" and extra shapes." if shapes else " (no extra shape: the candidate did not run)." if not ran
                          else " (no extra shape: the reference itself raised at every one tried, so none was "
                               "checked)." if (rec.get("config") or {}).get("no_extra_shape") else
                          " (no extra shape: the task has no batch size to vary)."),
                       "checks": [{"kind": "all_equal", "select": f"{q}.verdicts[?(name == 'official_allclose' || "
                                   "name == 'redrawn_weights_correct' || name == 'other_shapes_correct') && "
                                   "passed != null].passed", "equals": True}]})
        arms = set()
        for b in rec.get("blocks") or []:
            arms.update(b.get("arms") or [])
        req = [f"{k}a", f"{k}b"]
        if "eager" in arms:
            claims.append({"id": f"{k}c", "sentence": f"{n} is faster than the task's PyTorch model run eagerly "
                           "(warm L2).", "requires": req,
                           "checks": [{"kind": "paired_ratio", "blocks": f"{q}.blocks[?l2 == 'warm']",
                                       "numerators": ["candidate"], "denominator": "eager", "test": "faster"}]})
        best = best_compiled(rec)
        wrong = excluded_compiled(rec)
        if best:
            claims.append({"id": f"{k}d", "sentence": f"{n} is faster than torch.compile ({best.split('_', 1)[1]}), the "
                           "fastest correct compiled baseline on this GPU (warm L2)" + (
                               f"; excluded as wrong: {', '.join(wrong)}." if wrong else "."), "requires": req,
                           "checks": [{"kind": "paired_ratio", "blocks": f"{q}.blocks[?l2 == 'warm']",
                                       "numerators": ["candidate"], "denominator": best, "test": "faster"}]})
        if any(b.get("l2") == "cold" for b in rec.get("blocks") or []) and "eager" in arms:
            claims.append({"id": f"{k}e", "sentence": f"{n} is faster than eager PyTorch with a cold L2 (the flush "
                           "before every invocation is timed in both arms).", "requires": req,
                           "checks": [{"kind": "paired_ratio", "blocks": f"{q}.blocks[?l2 == 'cold']",
                                       "numerators": ["candidate"], "denominator": "eager", "test": "faster"}]})
        cases = [c for c in (rec.get("observations") or {}).get("cases") or [] if isinstance(c, dict)]
        same = bool(cases) and all((c.get("compare") or {}).get("bit_identical_count") ==
                                   (c.get("compare") or {}).get("element_count") for c in cases)
        sel = f"{q}.observations.cases[*].[compare.bit_identical_count == compare.element_count][]"
        claims.append({"id": f"{k}f", "requires": [f"{k}b"],
                       "sentence": f"{n} is bit-identical to PyTorch in every checked case." if same or not ran else
                       f"{n} is not bit-identical to PyTorch: at least one checked case differs in bits.",
                       "checks": [{"kind": "all_equal", "select": sel, "equals": True}] if same or not ran else
                       [{"kind": "compare", "select": f"[length({q}.observations.cases[?compare.bit_identical_count "
                                                      "!= compare.element_count])]", "op": ">=", "value": 1}]})
    return {"schema": "kbrepro/claims-spec", "schema_version": 1, "study": KIND,
            "bootstrap": {"level": 0.95, "resamples": 2000, "seed": 20261201}, "claims": claims}


def merge_claims(defaults: Mapping, extra: Mapping | None) -> dict:
    """The defaults, then the user's claims (ids must not collide). Raises UsageError."""
    spec = json.loads(json.dumps(defaults))
    if extra:
        ids = {c["id"] for c in spec["claims"]}
        clash = sorted(c["id"] for c in extra.get("claims", []) if c["id"] in ids)
        if clash:
            raise UsageError(f"claims {', '.join(clash)} of --claims collide with the default claims",
                             "give your claims other ids (the defaults are K<n><letter>)")
        spec["claims"] += list(extra.get("claims", []))
    return spec


def spec_yaml(spec: Mapping) -> bytes:
    """The claims spec as the bundle stores it (``inputs/claims.yaml``): canonical JSON, which
    is YAML, so that it reads back with the same parser as any claims file."""
    return jsonio.dumps(spec).encode()


# ---------------------------------------------------------------------------------------------
# the report


def _fmt(x, d: int = 4) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{d}g}"
    return str(x)


def _md(text) -> str:
    """A bundle string shown in REPORT.md: the one inertness rule (:func:`kbrepro.inert.md`)."""
    return inert.md(text)


#: a report of more candidates than this opens with a summary table and folds the claims and
#: each candidate's details (``<details>``); one of this many or fewer reads as before
FOLD_AT = 10


#: checks whose pass on a CPU run means nothing (what the check needs is not there), shown as
#: undecided in the report of a readable format; the recorded verdict is kept beside it
CPU_CANNOT_DECIDE = {"deterministic_under_poison": "no poisoned allocator",
                     "no_work_after_return": "no device streams to wait on",
                     "single_stream": "no profiler kernel list", "custom_kernel_ran": "no profiler kernel list"}


def conditions_lines(documents: Mapping[str, Mapping], readable: int = 1) -> list[str]:
    """What a reader must know before any number (:func:`kbrepro.bundle.report.run_conditions`), as Markdown
    paragraphs for the top of REPORT.md; none for a GPU run at the tasks' own sizes. ``readable``
    (:func:`kbrepro.bundle.report.readable`): from 2 on, a CPU run's sizes note speaks of its
    checks only (it has no timing)."""
    cpu, sized = report.run_conditions(documents)
    out = []
    if cpu:
        out += ["**Ran on a CPU** (`--device cpu`): correctness only. No timing, no profiler and no poisoned "
                "allocator ran, so the checks that need them are undecided, and nothing here says how fast a "
                "candidate is on a GPU.", ""]
    if sized:
        out += ["**Not at the tasks' own sizes** (`--size`): " + "; ".join(f"{report.md_cell(n)} at {report.md_cell(t)}"
                                                                        for n, t in sized)
                + (". Every check holds for these sizes only." if cpu and readable >= 2 else
                   ". Every check and timing holds for these sizes only."), ""]
    return out


def render_report(meta: Mapping, doc: Mapping, claims_doc: Mapping) -> str:
    """REPORT.md of a candidate bundle, from the packed documents only (the verifier renders
    it again and compares bytes). Over :data:`FOLD_AT` candidates (a level), a summary table
    comes first and the details are folded."""

    lines = [f"# {meta['name']}", "", f"KernelBench candidates, profile `{meta.get('profile')}`; KernelBench pinned at "
             f"`{(meta.get('kernelbench') or {}).get('commit')}`; official check `torch.allclose(reference, candidate, "
             f"atol={doc['predicate']['atol']:g}, rtol={doc['predicate']['rtol']:g})`.", ""]
    readable = report.readable(meta)
    if readable:  # where and at which sizes it ran, before any number
        lines += conditions_lines({"candidates": doc}, readable)
    caught = {r["name"]: [v["name"] for v in r.get("verdicts") or [] if v.get("passed") is False]
              for r in doc.get("candidates") or []}
    recs = doc.get("candidates") or []
    fold = len(recs) > FOLD_AT
    lines += ["## Verdict", ""]
    if fold:  # a level: one table first, every candidate's details folded below
        n_caught = sum(1 for r in recs if caught[r["name"]])
        lines += [f"{len(recs)} candidates: {len(recs) - n_caught} pass every check that can decide, {n_caught} caught.",
                  "", "| candidate | task | verdict | candidate / eager (warm L2, median) |", "|---|---|---|---|"]
        for r in recs:
            bad = caught[r["name"]]
            warm = next((b for b in r.get("blocks") or [] if b.get("l2") == "warm" and "eager" in (b.get("arms") or [])),
                        None)
            rs = stats.paired_ratios(warm, "candidate", "eager") if warm else []
            lines.append(f"| {r['name']} | {_md(r['task'])} | " + ("passes" if not bad else "**CAUGHT** by " + ", ".join(bad))
                         + f" | {_fmt(statistics.median(rs)) if rs else '-'} |")
    for r in recs if not fold else []:
        bad = caught[r["name"]]
        lines.append(f"- **{r['name']}** ({_md(r['task'])}): " + ("passes every check that can decide" if not bad else
                                                                 "CAUGHT by " + ", ".join(bad)))

    # the claims the product writes from the results are its own; any other came with --claims
    own = frozenset(c["id"] for c in default_claims(doc)["claims"])
    section = report.claims_section(claims_doc, own, readable, timed=doc.get("device", "cuda") != "cpu").rstrip("\n")
    if fold:
        counts = {}
        for c in claims_doc.get("claims") or []:
            counts[c.get("verdict")] = counts.get(c.get("verdict"), 0) + 1
        section = (f"<details><summary>Claims ({len(claims_doc.get('claims') or [])}: "
                   + ", ".join(f"{_md(k)} {v}" for k, v in sorted(counts.items(), key=lambda kv: str(kv[0])))
                   + ")</summary>\n\n" + section + "\n\n</details>")
    lines += ["", section]
    for r in recs:
        if fold:
            lines += ["", f"<details><summary>{r['name']}: " + ("passes every check that can decide"
                      if not caught[r["name"]] else "CAUGHT by " + ", ".join(caught[r["name"]])) + "</summary>"]
        lines += ["", f"## {r['name']}", "", f"Task `{r['task']}` (sha256 `{r['task_sha256'][:16]}...`); candidate "
                  f"sha256 `{r['source_sha256'][:16]}...`; compile {_fmt(r.get('compile_seconds'), 3)} s, whole "
                  f"check {_fmt(r.get('seconds'), 3)} s; built with {_md(', '.join((r.get('provenance') or {}).get('built_with') or [])) or 'nothing we could trace'}.",
                  "", "| check | verdict | detail |", "|---|---|---|"]
        cpu = readable and doc.get("device") == "cpu"
        for v in r.get("verdicts") or []:
            mark = {True: "pass", False: "**FAIL**", None: "undecided"}[v.get("passed")]
            detail = _md(v.get("detail", ""))
            if cpu and v.get("passed") is True and v["name"] in CPU_CANNOT_DECIDE:
                # (from the tidy words on, what the check recorded, which a CPU could not measure, is left out)
                mark, detail = "undecided on a CPU", f"a CPU run has {CPU_CANNOT_DECIDE[v['name']]}" + (
                    "" if readable >= 2 else f"; recorded: {detail}")
            lines.append(f"| {v['name']} | {mark} | {detail} |")
        skipped = {a: b.get("skipped") for a, b in ((r.get("timing") or {}).get("baselines") or {}).items()
                   if isinstance(b, dict) and b.get("skipped")}
        if skipped:
            lines += ["", "Baselines not timed: " + "; ".join(f"{_md(a)} ({_md(w)})" for a, w in sorted(skipped.items()))
                      + "."]
        for b in r.get("blocks") or []:
            lines += ["", f"Timing, {b.get('l2')} L2 ({len(b.get('rounds') or [])} rounds x "
                      f"{(b.get('protocol') or {}).get('invocations_per_pair')} invocations, CUDA events; median and IQR "
                      "in ms per invocation):", "", "| arm | median | IQR | candidate / arm |", "|---|---|---|---|"]
            for arm in b.get("arms") or []:
                s = stats.summary(stats.arm_samples(b, arm))
                ratio = "-"
                if arm != "candidate":
                    rs = stats.paired_ratios(b, "candidate", arm)
                    ratio = _fmt(statistics.median(rs)) if rs else "-"
                lines.append(f"| {arm} | {_fmt(s['median_ms'])} | {_fmt(s.get('iqr_ms'))} | {ratio} |")
        if fold:
            lines += ["", "</details>"]
    lines += where_cases_ran(doc)
    lines += ["", "What these checks cannot catch: docs/checks.md of kbrepro (Isolation; the limits of each timing "
              "protocol)." if readable
              else "What these checks cannot catch is listed in the README (section on candidates).", ""]
    return "\n".join(lines)


def where_cases_ran(doc: Mapping) -> list[str]:
    """REPORT.md's section "Where each case ran" for a sharded run (``doc`` holds ``cases``;
    none otherwise): one row per case in plan order: id, candidate, task, status, the host's
    and GPU's hashes (first 12 hex), GPU name, driver, SM / memory clocks (MHz) when the case
    started, the engine and its worker, and a failed case's error. Every value is made inert
    (:func:`_md`). The packer and the verifier render it with this one function."""
    cs = [c for c in doc.get("cases") or [] if isinstance(c, dict)]
    if not cs:
        return []

    def h(v):
        return f"`{str(v)[:12]}`" if isinstance(v, str) and v else "-"

    hosts = {(c.get("ran_on") or {}).get("host_sha256") for c in cs} - {None}
    gpus = {(c.get("ran_on") or {}).get("gpu_uuid_sha256") for c in cs} - {None}
    failed = [c for c in cs if c.get("status") != "done"]
    out = ["", "## Where each case ran", "",
           f"{len(cs)} cases (candidate x task x profile seeds x variant, each run in its own process), "
           f"{len(cs) - len(failed)} done, {len(failed)} failed; {len(hosts)} host(s), {len(gpus)} GPU(s). Hosts "
           "and GPUs are shown as the first 12 hex digits of the sha256 of their name and UUID.", "",
           "| case | candidate | task | status | host | GPU | GPU name | driver | SM / memory MHz | engine |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for c in cs:
        ro = c.get("ran_on") or {}
        clocks = "-" if ro.get("sm_clock_mhz") is None else f"{ro.get('sm_clock_mhz')} / {_fmt(ro.get('memory_clock_mhz'))}"
        status = "done" if c.get("status") == "done" else "**FAILED**"
        engine = _md(f"{ro.get('engine')} {ro.get('worker') or ''}".strip()) if ro else "-"
        out.append(f"| `{_md(c.get('id'))}` | {_md(c.get('candidate'))} | {_md(c.get('task'))} | {status} | "
                   f"{h(ro.get('host_sha256'))} | {h(ro.get('gpu_uuid_sha256'))} | {_md(ro.get('gpu_name') or '-')} | "
                   f"{_md(ro.get('driver_version') or '-')} | {clocks} | {engine} |")
    for c in failed:
        out += ["", f"Case `{_md(c.get('id'))}` ({_md(c.get('candidate'))}) failed: {_md(c.get('error'))}"]
    return out


__all__ = ["KIND", "COMPILED", "best_compiled", "excluded_compiled", "default_claims", "merge_claims", "spec_yaml",
           "render_report", "where_cases_ran"]
