"""The named checks of timing protocol 2 (issue 27; candidates.json schema version 2): the
checks of :mod:`kbrepro.harness.cheats`, with ``timed_outputs_correct`` judging every timed
output held against eager's, ``host_clock_agrees`` the parent's clock over two request
lengths, ``discriminates`` a fact about the task at its inputs (never a catch, issue 28), and
one more check, ``timed_calls_consistent`` (docs/timing.md). Pure functions of typed records,
as the protocol-1 checks are; :func:`derive_any` picks the checks of a record's version.
"""
from __future__ import annotations

import statistics
from typing import Optional, Sequence

from kbrepro.harness.cheats import (CHECKS_V2, HOST_SLACK_FRACTION, HOST_SLACK_MS, MAIN_KINDS, CheckVerdict, _cases,
                                    derive, official_allclose, ran, timed_outputs_correct)
from kbrepro.model import protocol
from kbrepro.model.candidates import Block, Observations, Timing


def _nan_only(c) -> bool:
    """A case that fails only where the reference and the output are both NaN."""
    cmp = c.compare
    nf = getattr(cmp, "nonfinite", None)
    return (cmp is not None and not cmp.official.passed and nf is not None and nf.nan_both > 0
            and cmp.official.failing_count == nf.nan_both)


def official_allclose_v2(obs: Observations) -> CheckVerdict:
    """:func:`~kbrepro.harness.cheats.official_allclose`, where a case that fails only at NaN
    pairs (the reference NaN there, the output NaN at the same elements: ``log`` of the
    ``normal`` draw's negative inputs, KernelBench 1/98) is the task's, not a failure: KernelBench's
    predicate has ``equal_nan`` False, so there even the reference fails against itself. The
    verdict is None where no other main case passes (the task at these inputs)."""
    cases = _cases(obs, MAIN_KINDS)
    nan_only = [c for c in cases if _nan_only(c)]
    if not nan_only:
        return official_allclose(obs)
    rest = [c for c in cases if not _nan_only(c)]
    bad = [c.id for c in rest if not (c.compare is not None and c.compare.official.passed)]
    if bad:
        return CheckVerdict("official_allclose", False, f"{len(bad)} of {len(cases)} main case(s) fail the official "
                            f"check: {', '.join(bad[:4])}")
    ids = ", ".join(c.id for c in nan_only[:4])
    if not rest:
        return CheckVerdict("official_allclose", None, f"uninformative: every main case's reference is NaN where the "
                            f"output is, and the official check fails NaN pairs ({ids}; the task at these inputs)")
    return CheckVerdict("official_allclose", True, f"{len(rest)} main case(s) pass torch.allclose(reference, "
                        f"candidate); {len(nan_only)} fail only where the reference is NaN and so is the output ({ids}: "
                        "the task at these inputs)")


def discriminates_v2(obs: Observations, atol: float, rtol: float) -> CheckVerdict:
    """Protocol 2 (issue 28): whether the task's outputs at these inputs can tell a right answer
    from a wrong one, judged over every case of the main model on its own draw (seeds x
    distributions and the timing input) together: None, *uninformative*, where every reference
    is within atol of zero (an all-zero output passes, KernelBench issue #165) or where all of
    them are one constant within the allowance atol + rtol * |mid|; True otherwise. Which it is
    is a fact about the task and its inputs, not the candidate's doing, so it is never a catch:
    the verdict is PARTIAL and says so. A scalar output (a loss) is judged across its sets."""
    cases = [c for c in obs.cases if c.model == "main" and (c.kind in ("official", "normal", "normal_x100")
                                                          or c.id == "timing_input")]
    ranges = [c.reference_range for c in cases if None not in c.reference_range]
    if not cases:
        return CheckVerdict("discriminates", None, "no case of the task's own draw was run")
    if not ranges:
        return CheckVerdict("discriminates", None, "uninformative: no finite reference value")
    lo, hi = min(r[0] for r in ranges), max(r[1] for r in ranges)
    peak = max(abs(lo), abs(hi))
    if peak <= atol:
        return CheckVerdict("discriminates", None, f"uninformative: max |reference| = {peak:.3g} <= atol = {atol:g} "
                            "over every set: an all-zero output passes (the task at these inputs)")
    mid = (lo + hi) / 2
    if (hi - lo) / 2 <= atol + rtol * abs(mid):
        return CheckVerdict("discriminates", None, f"uninformative: every reference is the constant {mid:.6g} within "
                            "the allowance (the task at these inputs)")
    return CheckVerdict("discriminates", True, f"{len(ranges)} references of the task's own draw reach beyond atol and "
                        "are not one constant")


def timed_outputs_correct_v2(timing: Timing, blocks: Sequence[Block], atol: float, rtol: float) -> CheckVerdict:
    """Protocol 2: every timed output of every round, held by the parent against eager's
    output on the same set (``outputs.failing``; the recorded sample's raw checksums derived
    again with :func:`~kbrepro.model.protocol.held_row_agrees`), and the spot-checked per-call outputs, pass. Outputs
    in a reused buffer hold only their last writer's answer and count as aliased (the
    block-against-per-call check covers them); a sampled output that is not finite where its
    reference is not either cannot be judged (None)."""
    base = timed_outputs_correct(timing)
    held = [r.outputs for b in blocks for r in b.rounds if r.outputs is not None]
    if not held:
        return CheckVerdict("timed_outputs_correct", None, "no timed output was held against the reference")
    n = sum(h.n for h in held)
    rows = [protocol.held_row_agrees(row, atol, rtol) for h in held for row in h.sample]
    failing = max(sum(h.failing for h in held), rows.count(False))
    aliased = sum(h.aliased for h in held)
    if failing:
        return CheckVerdict("timed_outputs_correct", False, f"{failing} of {n} timed outputs differ from the "
                            "reference on their own inputs: the timed calls did not compute")
    if base.passed is False:
        return base
    if None in rows:
        return CheckVerdict("timed_outputs_correct", None, "a sampled timed output and its reference are not finite: it "
                            "cannot be judged")
    return CheckVerdict("timed_outputs_correct", True, f"all {n} timed outputs held against the reference on their "
                        f"own inputs" + (f" ({aliased} in a reused buffer)" if aliased else "") +
                        (f"; {base.detail}" if base.passed else ""))


def host_clock_agrees_v2(blocks: Sequence[Block], timing: Timing) -> CheckVerdict:
    """Protocol 2: no round claims more time than passed, the median shortfall per request
    stays within :data:`HOST_SLACK_MS` + :data:`HOST_SLACK_FRACTION` of the request, the
    parent's clock grows with the invocations (a slope at or below zero is no measurement), the
    candidate's reported time per invocation in the longer requests (median) is at least
    (1 - CLOCK_SLOPE_SLACK) of that slope over two request lengths (a timer short by 25% is
    caught however short the block's requests), and a short request (each block's, the clock's
    first length) spends no more time outside the candidate's timed region than the longer
    requests do, within ``SHORTFALL_SLACK_MS`` + ``SHORTFALL_SLACK_FRACTION`` of the short
    request (:mod:`kbrepro.model.protocol`): a timer short only on requests of the block's
    length is caught too. Before the slope rule held the longer requests alone, the median
    over both lengths let a timer reporting 0.75 of the truth pass 1 run in 3 at 0.868 of the
    slope (the short requests' fixed in-region cost, 0.14 ms over 22 invocations on the H200)."""
    for b in blocks:
        inv = b.protocol.invocations_per_pair
        for i, r in enumerate(b.rounds):
            t, h = r.times_ms.get("candidate"), r.host_ms.get("candidate")
            if t is not None and h is not None and t * inv > h * 1.001 + 0.01:
                return CheckVerdict("host_clock_agrees", False, f"block {b.id} round {i}: the candidate claims "
                                    f"{t * inv:.3f} ms, more than the {h:.3f} ms that passed")
        short, host = _block_outside(b)
        if short is not None and short > HOST_SLACK_MS + HOST_SLACK_FRACTION * host:
            return CheckVerdict("host_clock_agrees", False, f"block {b.id}: the parent's clock sees {short:.3f} ms "
                                f"more per request than the candidate reports (median; a request takes {host:.3f} ms): "
                                "work done outside its timed region")
    ck = timing.clock
    if ck is None or not blocks:
        return CheckVerdict("host_clock_agrees", None, "no clock over two request lengths")
    slope = protocol.clock_slope_ms(ck.n1, ck.host1_ms, ck.n2, ck.host2_ms)
    # the longer requests' report: a request's fixed cost inside the timed region (its first
    # launch) inflates a short request's time per invocation, and with it a uniform liar's
    reported = statistics.median(ck.reported2_ms)
    if slope <= 0:
        return CheckVerdict("host_clock_agrees", False, f"the parent's clock does not grow from {ck.n1} to {ck.n2} "
                            "invocations: no request was clocked as it ran")
    if reported < (1 - protocol.CLOCK_SLOPE_SLACK) * slope:
        return CheckVerdict("host_clock_agrees", False, f"the candidate reports {reported:.4g} ms per invocation; the "
                            f"parent's clock over {ck.n1} and {ck.n2} invocations gives {slope:.4g} ms: its timer is "
                            "not to be believed")
    long_out = protocol.outside_region_ms(ck.host2_ms, ck.reported2_ms, ck.n2)
    shorts = [(f"the clock's requests of {ck.n1} invocations", protocol.outside_region_ms(ck.host1_ms, ck.reported1_ms, ck.n1),
               statistics.median(ck.host1_ms))]
    shorts += [(f"block {b.id}", *_block_outside(b)) for b in blocks]
    for what, out, host in shorts:
        if out is not None and out > long_out + protocol.SHORTFALL_SLACK_MS + protocol.SHORTFALL_SLACK_FRACTION * host:
            return CheckVerdict("host_clock_agrees", False, f"{what} spend {out:.3f} ms outside the candidate's timed "
                                f"region (median), the clock's requests of {ck.n2} invocations {long_out:.3f} ms: its "
                                "timer reports less than passed on the shorter requests")
    return CheckVerdict("host_clock_agrees", True, f"the parent's clock over {ck.n1} and {ck.n2} invocations gives "
                        f"{slope:.4g} ms per invocation; the candidate reports {reported:.4g} ms")


def _block_outside(b: Block) -> tuple[float | None, float]:
    """A block's median time outside the candidate's timed region per request, and its median
    request (ms); (None, 0.0) where no round has both clocks."""
    inv = b.protocol.invocations_per_pair
    pairs = [(r.host_ms.get("candidate"), r.times_ms.get("candidate")) for r in b.rounds]
    pairs = [(h, t) for h, t in pairs if h is not None and t is not None]
    if not pairs:
        return None, 0.0
    return (protocol.outside_region_ms([h for h, _ in pairs], [t for _, t in pairs], inv),
            statistics.median(h for h, _ in pairs))


def timed_calls_consistent(obs: Observations, timing: Timing, blocks: Sequence[Block]) -> CheckVerdict:
    """Protocol 2: the warm block's time per invocation is not below the candidate's per-call
    time on fresh inputs by more than the launch overhead measured in this run explains
    (:func:`~kbrepro.model.protocol.calls_allowance_ms`: eager's, as the parent measured it):
    a candidate that only cheats when its calls run back to back shows a block far faster
    than its synchronised calls."""
    pc = timing.per_call
    if pc is None or not pc.eager_fresh or not blocks:
        return CheckVerdict("timed_calls_consistent", None, "no per-call times of the candidate and eager")
    warm = blocks[0]
    block_c = protocol.roofline_median_ms([r.times_ms["candidate"] for r in warm.rounds])
    block_e = protocol.roofline_median_ms([r.times_ms["eager"] for r in warm.rounds if "eager" in r.times_ms])
    call_c = statistics.median([t for r in pc.fresh for t in r.times_ms])
    call_e = statistics.median([t for r in pc.eager_fresh for t in r.times_ms])
    allow = protocol.calls_allowance_ms(call_e, block_e)
    ok = call_c - block_c <= allow
    return CheckVerdict("timed_calls_consistent", ok, f"block {block_c:.4g} ms per invocation, {call_c:.4g} ms per "
                        f"synchronised call (launch overhead allows {allow:.4g} ms)" +
                        ("" if ok else ": its back-to-back calls are faster than its calls can be"))


def derive_v2(obs: Observations, timing: Timing, blocks: Sequence[Block], atol: float,
              rtol: float, no_extra_shape: str = "", plain: Optional[str] = None) -> tuple[CheckVerdict, ...]:
    """Every check of :data:`CHECKS_V2`, in order, for a record of timing protocol 2.
    ``no_extra_shape``: the run's reason for checking no extra shape (its config), given as
    other_shapes_correct's detail where no extra-shape case ran; ``plain``: whether the
    candidate's file is plain PyTorch (:func:`kbrepro.harness.cheats.custom_kernel_ran`)."""
    first = ran(obs)
    if first.passed is False and not obs.cases:
        return (first,) + tuple(CheckVerdict(n, None, "the candidate did not run") for n in CHECKS_V2[1:])
    v1 = {v.name: v for v in derive(obs, timing, blocks, atol, rtol, plain)}
    v1["discriminates"] = discriminates_v2(obs, atol, rtol)
    v1["official_allclose"] = official_allclose_v2(obs)
    if blocks:
        v1["timed_outputs_correct"] = timed_outputs_correct_v2(timing, blocks, atol, rtol)
        v1["host_clock_agrees"] = host_clock_agrees_v2(blocks, timing)
    v1["timed_calls_consistent"] = timed_calls_consistent(obs, timing, blocks)
    if no_extra_shape and not any(c.kind == "extra_shape" for c in obs.cases):
        v1["other_shapes_correct"] = CheckVerdict("other_shapes_correct", None, f"no extra shape: {no_extra_shape}"[:400])
    return tuple(v1[n] for n in CHECKS_V2)


def derive_any(version: int, obs: Observations, timing: Timing, blocks: Sequence[Block], atol: float,
               rtol: float, no_extra_shape: str = "", plain: Optional[str] = None) -> tuple[CheckVerdict, ...]:
    """:func:`derive` for a record of schema version 1, :func:`derive_v2` for version 2.
    ``plain`` applies to version 2 only (a format-1 record's verdicts keep their rule)."""
    if version >= 2:
        return derive_v2(obs, timing, blocks, atol, rtol, no_extra_shape, plain)
    return derive(obs, timing, blocks, atol, rtol)


__all__ = ["derive_v2", "derive_any", "official_allclose_v2", "timed_outputs_correct_v2", "host_clock_agrees_v2", "timed_calls_consistent",
           "discriminates_v2"]
