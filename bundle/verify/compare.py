"""Replay comparison, pure functions over recorded and replayed documents (tier 6): environment
rows, checks, FTZ and bit counts where the replay compiled the same cubin, timing ratios
against the tolerance and the clock's resolution, and claim verdict changes.
"""
from __future__ import annotations

import json
import re
import statistics
from typing import Mapping

from kbrepro.harness import fingerprint, stats
from kbrepro.model.problems import REPLAY, Problem
from kbrepro.model.replay_rules import claim_change



def environment_diff(recorded: Mapping, here: Mapping) -> list[dict]:
    """Field by field: recorded vs here, with ``bits`` True for fields that can change bits."""
    rows = []
    rf, hf = recorded.get("fields", {}), here.get("fields", {})
    for k in sorted(set(rf) | set(hf)):
        if k.startswith("clocks_"):
            continue
        a = (rf.get(k) or {}).get("value")
        c = (hf.get(k) or {}).get("value")
        rows.append({"field": k, "recorded": a, "here": c, "same": a == c, "bits": k in fingerprint.BIT_RELEVANT})
    return rows


def _check_index(doc) -> dict[str, dict]:
    """Every check-like object of a document (see :func:`bundle.validate._walk_checks`) by a
    key made of its identity, not its position: a list element that carries a ``case`` or a
    ``name`` is keyed by it, so a replay at another profile (fewer seeds) lines up."""
    out: dict[str, dict] = {}
    stack = [("", doc)]
    while stack:
        key, node = stack.pop()
        if isinstance(node, dict):
            if "element_count" in node and "official" in node and "bit_identical_count" in node:
                out[key] = node
                continue
            for k, v in node.items():
                stack.append((f"{key}.{k}", v))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                ident = None
                if isinstance(v, dict):
                    if isinstance(v.get("case"), dict):
                        ident = json.dumps(v["case"], sort_keys=True, separators=(",", ":"))
                    elif isinstance(v.get("name"), str):
                        ident = v["name"]
                stack.append((f"{key}[{ident if ident is not None else i}]", v))
    return out


PTX_HEADER = re.compile(rb"^(// Cuda compilation tools, release [^\n]*|\.target [^\n]*)$", re.MULTILINE)


def ptx_toolchain(ptx: bytes | None) -> tuple[str, ...] | None:
    """The compiler release and target lines of a PTX listing (``// Cuda compilation tools,
    release 13.0, V13.0.88``, ``.target sm_90``): which NVRTC made it, for which
    architecture, read from the bytes themselves. None without a listing."""
    if not ptx:
        return None
    found = tuple(m.decode("ascii", "replace") for m in PTX_HEADER.findall(ptx[:4096]))
    return found or None


def _ratio_ci(block: Mapping, num: str, den: str, boot: Mapping) -> dict:
    return stats.bootstrap_median_ci(stats.paired_ratios(block, num, den), level=boot["level"],
                                     resamples=boot["resamples"], seed=boot["seed"])


#: timing arms that measure a harness overhead alone (the cold-L2 regime's flush), never a baseline
FLUSH_ONLY_ARMS = ("l2_flush_only",)


#: microseconds below which two medians of one arm are not told apart: twice the resolution of
#: CUDA events ("around 0.5 microseconds", CUDA Runtime API, cudaEventElapsedTime)
TIME_RESOLUTION_US = 1.0


def _median_us(block: Mapping, arm: str) -> float | None:
    """The median over rounds of ``arm``'s per-call time (``times_ms``), in microseconds."""
    vals = [r["times_ms"][arm] for r in block.get("rounds", []) if isinstance(r.get("times_ms", {}).get(arm),
                                                                              (int, float))]
    return 1000.0 * statistics.median(vals) if vals else None


def _below_resolution(q: Mapping, tol: float) -> bool:
    """Whether a ratio that moved moved only by what the timer cannot resolve: the numerator
    arm's median by at most :data:`TIME_RESOLUTION_US`, the base's by at most that or ``tol``
    of itself (so that the ratio's change is not the base's)."""
    (a0, a1), (b0, b1) = q["numerator_us"], q["base_us"]
    if None in (a0, a1, b0, b1):
        return False
    return abs(a1 - a0) <= TIME_RESOLUTION_US and abs(b1 - b0) <= max(TIME_RESOLUTION_US, tol * b0)


def compare_replay(recorded: Mapping[str, Mapping], replayed: Mapping[str, Mapping], *, same_profile: bool,
                   ratio_tolerance: float, boot: Mapping, toolchains: Mapping[str, tuple] | None = None,
                   check_documents: tuple[str, ...] | None = None) -> tuple[list[Problem], dict]:
    """Compare recorded and replayed documents; returns ``(problems, details)``.

    Comparability comes from what the replay measured, not from the bundle's environment
    record: a variant whose replayed cubin is byte-identical to the bundled one ran the same
    binary, so its bit-identity counts and witness bits must match; a cubin that differs
    although the PTX headers name the same NVRTC release and target (``toolchains``: variant
    -> (recorded header, replayed header)) is a problem; one built by another NVRTC or for
    another architecture is reported as not comparable. Official/legacy verdicts and the
    witness's FTZ behaviour must match everywhere. Timing ratios (per-round paired ratios to
    the block's first arm, or in a cold-L2 block to the first arm after the flush-only one;
    median and bootstrap interval with ``boot``) fail when the two
    intervals, each widened by ``ratio_tolerance`` (relative), do not overlap. Recorded cases
    the replay did not reproduce are problems at the same profile and listed otherwise.
    ``check_documents``: the documents whose check records are compared case by case
    (default: every document but the run, environment, compile, timings and claims)."""
    problems: list[Problem] = []
    details: dict = {"cases_compared": 0}
    cubins, identical = [], {}
    r_comp = {v["name"]: v for v in (recorded.get("compile") or {}).get("variants", [])}
    p_comp = {v["name"]: v for v in (replayed.get("compile") or {}).get("variants", [])}
    for name in sorted(set(r_comp) | set(p_comp)):
        r, v = r_comp.get(name), p_comp.get(name)
        if r is None or v is None:
            problems.append(_problem(file="compile", path=name, message="variant compiled in only one of the runs",
                             expected=r is not None, found=v is not None))
            continue
        same = (r.get("cubin") or {}).get("sha256") == (v.get("cubin") or {}).get("sha256")
        identical[name] = same
        tc = (toolchains or {}).get(name)
        comparable = same or (tc is not None and tc[0] is not None and tc[0] == tc[1])
        cubins.append({"variant": name, "comparable": comparable, "same": same if comparable else None})
        if comparable and not same:
            problems.append(_problem(file="compile", path=name,
                             message="cubin differs although the PTX headers name the same NVRTC release and target",
                                     expected=(r.get("cubin") or {}).get("sha256"),
                                     found=(v.get("cubin") or {}).get("sha256")))
        rw = ((r.get("ftz_evidence") or {}).get("witness") or {}).get("flushes")
        pw = ((v.get("ftz_evidence") or {}).get("witness") or {}).get("flushes")
        if rw is not None and rw != pw:
            problems.append(_problem(file="compile", path=name, message="witness FTZ behaviour differs",
                             expected=rw, found=pw))
    details["cubins"] = cubins
    details["bits_required_for"] = sorted(n for n, same in identical.items() if same)
    not_replayed = []
    for doc in (check_documents if check_documents is not None else
                tuple(n for n in recorded if n not in ("claims", "timings", "compile", "environment", "run"))):
        rc, pc = _check_index(recorded.get(doc) or {}), _check_index(replayed.get(doc) or {})
        for key in sorted(rc):
            if key not in pc:
                not_replayed.append(f"{doc}{key}")
                continue
            a, b = rc[key], pc[key]
            details["cases_compared"] += 1
            for pred in ("official", "legacy", "equal_nan_stress"):
                if isinstance(a.get(pred), dict) and (a[pred]).get("pass") != (b.get(pred) or {}).get("pass"):
                    problems.append(_problem(file=doc, path=f"{key}.{pred}.pass", message="verdict differs",
                                     expected=a[pred].get("pass"), found=(b.get(pred) or {}).get("pass")))
            variant = key.rsplit(".", 1)[-1]
            if identical.get(variant) and a.get("bit_identical_count") != b.get("bit_identical_count"):
                problems.append(_problem(file=doc, path=f"{key}.bit_identical_count",
                                 message="bit-identity count differs although the replay ran a byte-identical cubin",
                                 expected=a.get("bit_identical_count"), found=b.get("bit_identical_count")))
        details.setdefault("replayed_only", 0)
        details["replayed_only"] += len(set(pc) - set(rc))
    details["not_replayed"] = len(not_replayed)
    if not_replayed:
        if same_profile:
            for k in not_replayed[:50]:
                problems.append(_problem(file=k.split("[", 1)[0].split(".", 1)[0], path=k,
                                 message="a recorded case the replay did not reproduce"))
            if len(not_replayed) > 50:
                problems.append(_problem(file=None, path=None,
                                 message=f"... and {len(not_replayed) - 50} more recorded cases not reproduced"))
        details["not_replayed_examples"] = not_replayed[:10]
    rw, pw = recorded.get("witness") or {}, replayed.get("witness") or {}
    for name, out in (rw.get("outputs") or {}).items():
        if name != "reference" and identical.get(name) and out != (pw.get("outputs") or {}).get(name):
            problems.append(_problem(file="witness", path=f"$.outputs.{name}",
                             message="witness bits differ although the replay ran a byte-identical cubin",
                             expected=out, found=(pw.get("outputs") or {}).get(name)))
    ratios = []
    rb = {b["id"]: b for b in (recorded.get("timings") or {}).get("blocks", []) if b.get("rounds")}
    pb = {b["id"]: b for b in (replayed.get("timings") or {}).get("blocks", []) if b.get("rounds")}
    missing_blocks = sorted(set(rb) - set(pb))
    if missing_blocks and same_profile:
        for bid in missing_blocks:
            problems.append(_problem(file="timings", path=bid, message="a recorded timing block the replay did not run"))
    details["timing_blocks_not_replayed"] = len(missing_blocks)
    tol = float(ratio_tolerance)
    for bid in sorted(set(rb) & set(pb)):
        r, b = rb[bid], pb[bid]
        arms = [a for a in r.get("arms", []) if a in b.get("arms", [])]
        # a cold-L2 block's first arm times the L2 flush alone: every other arm includes that
        # flush, so ratios to it measure the flush's noise; the base is the next arm (eager)
        if arms and arms[0] in FLUSH_ONLY_ARMS:
            arms = arms[1:]
        if len(arms) < 2:
            continue
        base = arms[0]
        for arm in arms[1:]:
            x, y = _ratio_ci(r, arm, base, boot), _ratio_ci(b, arm, base, boot)
            if x["median"] is None or y["median"] is None:
                continue
            lo_x = (x["ci_low"] if x["ci_low"] is not None else x["median"]) / (1 + tol)
            hi_x = (x["ci_high"] if x["ci_high"] is not None else x["median"]) * (1 + tol)
            lo_y = y["ci_low"] if y["ci_low"] is not None else y["median"]
            hi_y = y["ci_high"] if y["ci_high"] is not None else y["median"]
            ok = lo_y <= hi_x and hi_y >= lo_x
            flat = abs(y["median"] / x["median"] - 1) <= tol
            ratios.append({"block": bid, "ratio": f"{arm}/{base}", "recorded": x["median"],
                           "recorded_ci": [x["ci_low"], x["ci_high"]], "replayed": y["median"],
                           "replayed_ci": [y["ci_low"], y["ci_high"]], "within": ok, "within_flat_tolerance": flat,
                           "same_protocol": r.get("protocol") == b.get("protocol"), "mode": r.get("mode"),
                           "excused": None, "numerator_us": [_median_us(r, arm), _median_us(b, arm)],
                           "base_us": [_median_us(r, base), _median_us(b, base)],
                           "_x": x, "_y": y})
    by_key = {(q["block"], q["ratio"]): q for q in ratios}
    for q in ratios:  # first what no timer can resolve, then what the graph twin shows
        if not q["within"] and q["same_protocol"] and _below_resolution(q, tol):
            q["excused"] = (f"below the timer's resolution: the arm's median moved by "
                            f"{abs(q['numerator_us'][1] - q['numerator_us'][0]):.2f} us, the base's by "
                            f"{abs(q['base_us'][1] - q['base_us'][0]):.2f} us (CUDA events resolve about 0.5 us)")
    for q in ratios:
        if q["within"] or q["excused"]:
            continue
        if not q["same_protocol"]:
            q["excused"] = "the replay ran this block with another protocol (profile)"
        elif q["mode"] == "events" and ".events" in q["block"]:
            twin = by_key.get((q["block"].replace(".events", ".graph", 1), q["ratio"]))
            if twin is not None and (twin["within"] or (twin["excused"] or "").startswith("below the timer")):
                q["excused"] = ("host launch overhead: the CUDA-graph replay of the same arms, which removes it, "
                                "reproduces")
        if q["excused"] is None:
            x, y = q["_x"], q["_y"]
            problems.append(_problem(file="timings", path=f"{q['block']} {q['ratio']}",
                             message=f"timing ratio differs beyond both intervals and the {tol:.0%} tolerance",
                             expected=[x["ci_low"], x["median"], x["ci_high"]],
                             found=[y["ci_low"], y["median"], y["ci_high"]]))
    for q in ratios:
        q.pop("_x")
        q.pop("_y")
    details["timing_ratios"] = ratios
    details["timing_ratios_excused"] = sum(1 for q in ratios if q["excused"])
    details["timing_ratios_outside_tolerance"] = sum(1 for r in ratios if not r["within"])
    details["timing_ratios_outside_flat_tolerance"] = sum(1 for r in ratios if not r["within_flat_tolerance"])
    return problems, details


def _problem(file: str | None, path: str | None, message: str, expected=None, found=None) -> Problem:
    """A problem of the replay's comparison (code :data:`~kbrepro.model.problems.REPLAY`)."""
    return Problem(REPLAY, path, message, expected, found, file)


def claim_changes(recorded: Mapping[str, str], replayed: Mapping[str, str],
                  same_profile: bool) -> tuple[list[Problem], list[str]]:
    """Claims whose verdict changed on replay, judged by the one rule
    :func:`kbrepro.model.replay_rules.claim_change`: ``(problems, reported)``, the changes that
    contradict the recording and those only reported (one line each)."""
    problems, reported = [], []
    for cid in sorted(set(recorded) | set(replayed)):
        a, b = recorded.get(cid), replayed.get(cid)
        change = claim_change(a, b, same_profile)
        if change == "contradicts":
            problems.append(_problem(file="claims", path=cid, message=f"claim {cid}: recorded {a!r}, replayed {b!r}",
                            expected=a, found=b))
        elif change == "reported":
            reported.append(f"claim {cid}: recorded {a!r}, replayed {b!r}")
    return problems, reported
