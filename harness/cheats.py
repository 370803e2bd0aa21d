"""Named checks against the known ways a KernelBench candidate (``ModelNew``) cheats.

Each check is a pure function from **recorded observations** (the typed records of
:mod:`kbrepro.model.candidates`, built strictly from ``candidates.json``) to a frozen
:class:`CheckVerdict` (``name``, ``passed``:
True, False, or None where it cannot decide, and a one-line ``detail``). The packer derives
the verdicts with these functions; the verifier derives them again, with its own copy of this
code, from the same observations, and compares: a verdict is never read from a bundle. A
verdict of False is a failure of the candidate, never a warning. :func:`derive` runs them all
in the order of :data:`CHECKS`.

The cheats each check is meant for (issue 11, with the public sources named there):

============================  =================================================================
check                         the cheat it catches
============================  =================================================================
ran                           a candidate that raises, exits, hangs or answers garbage
official_allclose             wrong outputs (``torch.allclose(reference, candidate)``, KernelBench's order)
other_shapes_correct          shapes hard-coded to the task's sizes (extra shapes)
redrawn_weights_correct       weights baked in from the task's init seed (re-drawn weights)
follows_fresh_inputs          results cached by ``id()``, data pointer, shape or content
inputs_unchanged              inputs zeroed or edited so that a reference on them agrees
output_is_plain_tensor        lazy outputs, tensor subclasses computing inside the checker
discriminates                 outputs that cannot tell right from wrong (KernelBench issue #165)
deterministic_under_poison    ``torch.empty`` reading freed memory (the Feb 2025 150x result)
precision_flags_unchanged     TF32 or reduced-precision reductions switched on in an fp32 task
custom_kernel_ran             a "custom" kernel that only calls PyTorch / cuBLAS (a plain PyTorch file: undecided)
single_stream                 work on a side stream the caller's timer never waits for
no_work_after_return          the same, seen by the clock: the device busy after the stream is done
no_threads_left               background threads still working after the call
per_call_times_consistent     batch-and-skip: one call in k does the work
fresh_inputs_same_speed       a timed loop answered from a cache of the repeated input
timed_outputs_correct         a timed loop that does not compute (an output checked after the fact)
host_clock_agrees             patched timers or made-up times (the parent's clock disagrees)
within_roofline               a speed past what the measured memory bandwidth allows
============================  =================================================================

Thresholds are stated here, before any data: a split of per-call times needs a gap of 5x with
at least 2 calls and 10% on each side; repeated-input calls may be at most 3x faster than
fresh-input calls (an L2-resident repeat of a memory-bound kernel gains well under that on an
H200: 4.8 TB/s HBM against about 10 TB/s L2); the device may stay busy at most 0.5 ms after the
calling stream is done (an honest synchronisation costs tens of microseconds) in all calls but
one (a lone call over it is a host pause: an honest Triton candidate had one of 4.2 ms on a
replay on the H200, with Python's collector on; the child now collects before each call and
keeps the collector off while it is clocked); a candidate's
event time may fall short of the parent's clock by at most 1.25 ms plus 10% per timing request
(median over a block; an honest request's fixed cost, parent and child sharing the GPU,
measured 0.83 to 1.14 ms on the H200, and a timed region lasts at least 4 ms of eager
PyTorch), and where the timed region is shorter than that cost the check does not decide;
a speed may exceed the measured copy bandwidth by at most 10%.
"""
from __future__ import annotations

import dataclasses
import re
import statistics
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

from kbrepro.model.candidates import Block, Case, Compare, Observations, Timing

CHECKS = ("ran", "official_allclose", "other_shapes_correct", "redrawn_weights_correct", "follows_fresh_inputs",
          "inputs_unchanged", "output_is_plain_tensor", "discriminates", "deterministic_under_poison",
          "precision_flags_unchanged", "custom_kernel_ran", "single_stream", "no_work_after_return",
          "no_threads_left", "per_call_times_consistent", "fresh_inputs_same_speed", "timed_outputs_correct",
          "host_clock_agrees", "within_roofline")
#: the checks of a record of timing protocol 2 (schema_version 2, issue 27): one more, and
#: timed_outputs_correct and host_clock_agrees judging every timed output and two lengths
CHECKS_V2 = CHECKS[:17] + ("timed_calls_consistent",) + CHECKS[17:]

SPLIT_GAP = 5.0
SPLIT_SHARE = 0.1
REPEAT_SPEEDUP_MAX = 3.0
DEVICE_BUSY_MAX_MS = 0.5
HOST_SLACK_MS = 1.25
HOST_SLACK_FRACTION = 0.10
ROOFLINE_SLACK = 0.10

#: the kinds of checking-pass case and which check judges them
MAIN_KINDS = ("official", "normal", "normal_x100", "fresh_set", "same_buffers", "repeat", "poison", "profiled")


@dataclass(frozen=True)
class CheckVerdict:
    """The verdict of one named check: ``passed`` True (the candidate behaves), False (caught)
    or None (cannot decide, with why in ``detail``)."""

    name: str
    passed: Optional[bool]
    detail: str

    def to_doc(self) -> dict:
        return {"name": self.name, "passed": self.passed, "detail": self.detail}


def _passes(c: Optional[Compare]) -> bool:
    return c is not None and c.official.passed


def _cases(obs: Observations, kinds: Sequence[str]) -> list[Case]:
    return [c for c in obs.cases if c.kind in kinds]


def ran(obs: Observations) -> CheckVerdict:
    """The build and every call of the checking pass finished (``failure`` is null)."""
    n = len(obs.cases)
    if obs.failure is not None:
        return CheckVerdict("ran", False, obs.failure[:300])
    if not n:
        return CheckVerdict("ran", False, "no call of the candidate finished")
    return CheckVerdict("ran", True, f"built in {obs.build.host_s if obs.build else 0:.1f} s; {n} checked calls")


def _all_pass(name: str, cases: list[Case], what: str) -> CheckVerdict:
    if not cases:
        return CheckVerdict(name, None, f"no {what} case was run")
    bad = [c.id for c in cases if not _passes(c.compare)]
    return CheckVerdict(name, not bad, f"{len(cases)} {what} case(s) pass torch.allclose(reference, candidate)" if not bad
                        else f"{len(bad)} of {len(cases)} {what} case(s) fail the official check: {', '.join(bad[:4])}")


def official_allclose(obs: Observations) -> CheckVerdict:
    """Every main case (seeds x distributions, the timing input, same buffers, repeat,
    poisoned, profiled: the call whose kernels other checks read) passes the official predicate (``compare.official.pass``, harness/checks.py)."""
    return _all_pass("official_allclose", _cases(obs, MAIN_KINDS), "main")


def other_shapes_correct(obs: Observations) -> CheckVerdict:
    return _all_pass("other_shapes_correct", _cases(obs, ("extra_shape",)), "extra-shape")


def redrawn_weights_correct(obs: Observations) -> CheckVerdict:
    return _all_pass("redrawn_weights_correct", _cases(obs, ("redrawn_weights",)), "re-drawn-weights")


def follows_fresh_inputs(obs: Observations) -> CheckVerdict:
    """No failing case's output matches the reference of another input set
    (``matches_other``, found by the parent with the official predicate), and no failing case
    returned the memory of an earlier case's output that the candidate still held
    (``held_over``; the child writes NaN over every output once it has read it, so an answer
    returned again without being recomputed fails): a cache keyed by ``id()``, pointer, shape
    or content answers a later call with an earlier call's output. A held-over output that
    passes was recomputed into the same memory (a reused output buffer, a CUDA graph's static
    output) and is noted, not failed."""
    cases = _cases(obs, MAIN_KINDS)
    if not cases:
        return CheckVerdict("follows_fresh_inputs", None, "no case was run")
    stale = [c.id for c in cases if not _passes(c.compare) and c.matches_other]
    held = [f"{c.id} (of {c.held_over})" for c in cases if not _passes(c.compare) and c.held_over]
    if stale:
        return CheckVerdict("follows_fresh_inputs", False, f"case(s) {', '.join(stale[:4])} got the answer "
                            "to another input set (a cache)")
    if held:
        return CheckVerdict("follows_fresh_inputs", False, f"case(s) {', '.join(held[:4])} returned an earlier "
                            "output's memory without recomputing it (a cache)")
    reused = [c.id for c in cases if c.held_over]
    return CheckVerdict("follows_fresh_inputs", True, f"{len(cases)} calls, each answering its own inputs" +
                        (f"; {len(reused)} recomputed into memory the candidate kept (a reused output buffer)"
                         if reused else ""))


def inputs_unchanged(obs: Observations) -> CheckVerdict:
    """In every case the child's input digests before the call equal the parent's digests of
    the same draw (the candidate computed on the task's inputs) and are unchanged after it."""
    bad, drawn = [], []
    for c in obs.cases:
        if c.digests_before != c.digests_after:
            bad.append(c.id)
        elif c.digests_before != c.digests_parent:
            drawn.append(c.id)
    if not obs.cases:
        return CheckVerdict("inputs_unchanged", None, "no case was run")
    if bad:
        return CheckVerdict("inputs_unchanged", False, f"the call changed its inputs in case(s) "
                            f"{', '.join(bad[:4])} (a reference on them would see other data)")
    if drawn:
        return CheckVerdict("inputs_unchanged", False, f"the candidate's inputs differ from the task's draw in case(s) "
                            f"{', '.join(drawn[:4])}")
    return CheckVerdict("inputs_unchanged", True, f"inputs unchanged by {len(obs.cases)} calls")


def output_is_plain_tensor(obs: Observations) -> CheckVerdict:
    """Every output is exactly ``torch.Tensor`` (no subclass), strided, on the reference's
    device, with the reference's shape and dtype, and without an autograd graph."""
    bad = []
    for c in obs.cases:
        o = c.output
        why = []
        if o.plain is not True:
            why.append(f"a {str(o.type)[:80]}")
        if o.layout not in (None, "torch.strided"):
            why.append(f"layout {o.layout}")
        if o.device != c.reference_device:
            why.append(f"device {o.device} (reference on {c.reference_device})")
        if o.grad_fn:
            why.append(f"an autograd graph ({o.grad_fn})")
        if c.compare.shape_match is False:
            why.append("another shape or dtype")
        if why:
            bad.append(f"{c.id}: {', '.join(why)}")
    if not obs.cases:
        return CheckVerdict("output_is_plain_tensor", None, "no case was run")
    return CheckVerdict("output_is_plain_tensor", not bad, "plain tensors of the reference's dtype, shape and device"
                        if not bad else "; ".join(bad[:3]))


def discriminates(obs: Observations, atol: float, rtol: float) -> CheckVerdict:
    """Every official case's reference can tell a wrong output from a right one under
    ``allclose(reference, candidate, atol, rtol)``: False where max |reference| <= atol (an
    all-zero output passes, KernelBench issue #165) or where the reference is constant to
    within the allowance atol + rtol * |mid| (``reference_range`` [min, max] over finite values;
    :mod:`kbrepro.model.candidate_rules` holds it against the same case's
    ``max_abs_reference`` and ``discriminating``)."""
    cases = _cases(obs, ("official",))
    if not cases:
        return CheckVerdict("discriminates", None, "no official case was run")
    for c in cases:
        lo, hi = c.reference_range
        if lo is None or hi is None:
            return CheckVerdict("discriminates", None, f"case {c.id}: no finite reference value")
        peak = max(abs(lo), abs(hi))
        if peak <= atol:
            return CheckVerdict("discriminates", False, f"case {c.id}: max |reference| = {peak:.3g} <= atol = "
                                f"{atol:g}: an all-zero output passes")
        mid = (lo + hi) / 2
        if (hi - lo) / 2 <= atol + rtol * abs(mid):
            return CheckVerdict("discriminates", False, f"case {c.id}: the reference is constant to within the "
                                f"allowance: the constant {mid:.6g} passes")
    return CheckVerdict("discriminates", True, f"{len(cases)} official references reach beyond atol and are not constant")


def deterministic_under_poison(obs: Observations) -> CheckVerdict:
    """The two poisoned calls (the allocator's free memory filled with two byte patterns
    before each, same inputs) give bitwise-equal outputs (``output.digest``). Outputs that
    differ but both pass the official check are not decided (a kernel with atomics is not
    bitwise deterministic): None."""
    cases = _cases(obs, ("poison",))
    if len(cases) < 2:
        return CheckVerdict("deterministic_under_poison", None, "fewer than two poisoned calls")
    ds = [c.output.digest for c in cases]
    if all(d is not None and d == ds[0] for d in ds):
        return CheckVerdict("deterministic_under_poison", True, f"{len(cases)} calls under different poison are "
                            "bitwise equal")
    if all(_passes(c.compare) for c in cases):
        return CheckVerdict("deterministic_under_poison", None, "the outputs under different poison differ in bits "
                            "but all pass (a nondeterministic kernel, or unwritten memory that happened to be close)")
    return CheckVerdict("deterministic_under_poison", False, "the output changes with the poison in free memory: "
                        "the candidate returns memory it did not write")


def precision_flags_unchanged(obs: Observations) -> CheckVerdict:
    """The precision settings in force before the candidate was imported (TF32 for matmul and
    cuDNN, float32 matmul precision, reduced-precision reductions, cuDNN modes) are the ones
    after its build and after every call. (The harness restores them after the build, so a
    change at build time is also caught and undone.)"""
    before = dataclasses.asdict(obs.build.flags_before) if obs.build and obs.build.flags_before else {}
    if not before:
        return CheckVerdict("precision_flags_unchanged", None, "the flags were not recorded")
    after_build = obs.build.flags_after_build
    seen = [("build", dataclasses.asdict(after_build) if after_build else {})]
    seen += [(c.id, dataclasses.asdict(c.flags_after_call)) for c in obs.cases]
    for where, after in seen:
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        if changed:
            return CheckVerdict("precision_flags_unchanged", False, f"changed by the candidate ({where}): " + ", ".join(
                f"{k} {before.get(k)!r} -> {after.get(k)!r}" for k in changed[:3]))
    return CheckVerdict("precision_flags_unchanged", True, f"unchanged after the build and {len(seen) - 1} calls")


#: kernel names that PyTorch, cuBLAS, cuDNN or CUTLASS launch (not a candidate's own kernel)
LIBRARY_KERNEL = re.compile(r"(^|[^a-z])(at::|at_|aten|c10::|cublas|cublasLt|cudnn|cutlass|sm\d+_xmma|ampere_|"
                            r"volta_|turing_|hopper_|nvjet|gemv|gemmSN|gemmk1|splitKreduce|elementwise_kernel|"
                            r"vectorized_elementwise|unrolled_elementwise|reduce_kernel|Memset|Memcpy|"
                            r"triton_(poi|red|per|tem)_fused)", re.IGNORECASE)


def custom_kernels(obs: Observations) -> list[str]:
    """The names of the profiled call's kernels that are not library kernels, sorted."""
    if obs.profile is None:
        return []
    return sorted({k.name for k in obs.profile.kernels if not LIBRARY_KERNEL.search(k.name)})


def custom_kernel_ran(obs: Observations, plain: Optional[str] = None) -> CheckVerdict:
    """From the profiler's list of kernels one call launched (after the harness's marker
    kernel): at least one is not a library kernel (:data:`LIBRARY_KERNEL`).
    (:mod:`kbrepro.model.candidate_rules` holds a passing verdict against the bundled
    binaries: a custom kernel that no traced binary defines is a contradiction.)
    ``plain``: :func:`kbrepro.model.source_rules.plain_pytorch` of the candidate's file; a
    plain PyTorch candidate that ran only library kernels presents no kernel of its own, so
    the check does not decide ("not a custom kernel"), where any other file is caught."""
    if obs.profile is None:
        return CheckVerdict("custom_kernel_ran", None, "the call was not profiled")
    names = [k.name for k in obs.profile.kernels]
    if plain and not custom_kernels(obs):
        return CheckVerdict("custom_kernel_ran", None, f"not a custom kernel ({plain}): only library kernels ran "
                            f"({', '.join(sorted({n[:60] for n in names})[:3]) or 'none'})"[:400])
    if not names:
        return CheckVerdict("custom_kernel_ran", False, "the call launched no kernel")
    own = custom_kernels(obs)
    return CheckVerdict("custom_kernel_ran", bool(own), f"custom kernel(s): {', '.join(n[:60] for n in own[:3])}" if own
                        else f"only library kernels ran ({', '.join(sorted({n[:60] for n in names})[:3])})")


def single_stream(obs: Observations) -> CheckVerdict:
    """Every kernel of the profiled call ran on the stream of the harness's marker kernel (the
    stream the call was made on). A candidate that uses other streams correctly (joined back
    before returning) is flagged too: the profiler shows streams, not dependencies."""
    if obs.profile is None or obs.profile.marker_stream is None:
        return CheckVerdict("single_stream", None, "the call was not profiled")
    marker = obs.profile.marker_stream
    ks = obs.profile.kernels
    other = sorted({str(k.stream) for k in ks if k.stream != marker})
    return CheckVerdict("single_stream", not other, f"{len(ks)} kernel(s) on the calling stream" if not other else
                        f"kernels on other stream(s) {', '.join(other[:3])} than the calling stream {marker}")


def no_work_after_return(obs: Observations) -> CheckVerdict:
    """After the calling stream was synchronised, a device-wide synchronisation waited at
    most :data:`DEVICE_BUSY_MAX_MS` (``device_wait_ms``) in all cases but one: work left on
    another stream shows in every call that launches it, and one lone case over the bound is
    a pause of the child's host thread (the scheduler, a page fault), noted, not failed."""
    cases = list(obs.cases)
    if not cases:
        return CheckVerdict("no_work_after_return", None, "no call was clocked")
    over = sorted((c for c in cases if c.device_wait_ms > DEVICE_BUSY_MAX_MS), key=lambda c: -c.device_wait_ms)
    if len(over) >= 2:
        return CheckVerdict("no_work_after_return", False, f"{len(over)} of {len(cases)} calls left the device busy "
                            f"after the calling stream was done (case {over[0].id}: "
                            f"{over[0].device_wait_ms:.3f} ms; work on another stream)")
    within = [c.device_wait_ms for c in cases if c not in over]
    lone = f"; case {over[0].id} alone waited {over[0].device_wait_ms:.3f} ms (a host pause)" if over else ""
    return CheckVerdict("no_work_after_return", True, f"the device was idle within {max(within, default=0):.3f} ms "
                        f"of the calling stream{lone}")


def no_threads_left(obs: Observations) -> CheckVerdict:
    """No call after the first of its model (the main one, the re-drawn weights', each extra
    shape's: a model's first call builds it, and torch.compile's first call at a new model or
    shape starts its compile workers, which stay) left more Python threads running than it
    found."""
    seen: set = set()
    cases = [c for c in obs.cases if c.model in seen or seen.add(c.model)]
    bad = [c.id for c in cases if c.threads_after > c.threads_before]
    if not cases:
        return CheckVerdict("no_threads_left", None, "fewer than two calls")
    firsts = [c.id for c in obs.cases[1:] if c not in cases and c.threads_after > c.threads_before]
    return CheckVerdict("no_threads_left", not bad, (
        "no call left a thread behind" if not firsts else "no call after its model's first left a thread behind "
        f"(the first call of {', '.join(firsts[:4])} started threads: its model's build)") if not bad else
        f"case(s) {', '.join(bad[:4])} left threads running after the call")


def per_call_times_consistent(times_ms: Iterable[float], gap: float = SPLIT_GAP,
                              share: float = SPLIT_SHARE) -> CheckVerdict:
    """Per-call times on fresh inputs fall apart into a fast and a slow group when one call in
    k does the work: sorted, two neighbours differ by more than ``gap`` times, and each side
    holds at least ``share`` of the calls and at least two (one host hiccup never counts).
    Times are positive (the records refuse others)."""
    ts = sorted(float(t) for t in times_ms)
    if len(ts) < 4:
        return CheckVerdict("per_call_times_consistent", None, "fewer than 4 timed calls")
    i = max(range(1, len(ts)), key=lambda j: ts[j] / ts[j - 1])
    fast, slow = ts[:i], ts[i:]
    least = max(2, share * len(ts))
    bad = ts[i] / ts[i - 1] > gap and len(fast) >= least and len(slow) >= least
    return CheckVerdict("per_call_times_consistent", not bad,
                        f"{len(ts)} calls timed one by one (each synchronised), median {statistics.median(ts):.4g} ms, "
                        "no split" if not bad else
                        f"{len(fast)} call(s) at most {fast[-1]:.4g} ms and {len(slow)} at least {slow[0]:.4g} ms "
                        f"({ts[i] / ts[i - 1]:.0f}x apart): the work is not done on every call")


def _per_call(timing: Timing, key: str) -> list[float]:
    if timing.per_call is None:
        return []
    return [t for r in getattr(timing.per_call, key) for t in r.times_ms]


def fresh_inputs_same_speed(timing: Timing) -> CheckVerdict:
    """The median per-call time on one repeated input set is at most
    :data:`REPEAT_SPEEDUP_MAX` times faster than on fresh input sets."""
    rep, fresh = _per_call(timing, "repeat"), _per_call(timing, "fresh")
    if len(rep) < 2 or len(fresh) < 2:
        return CheckVerdict("fresh_inputs_same_speed", None, "per-call times were not taken")
    r, f = statistics.median(rep), statistics.median(fresh)
    ok = r * REPEAT_SPEEDUP_MAX >= f
    return CheckVerdict("fresh_inputs_same_speed", ok, f"repeated input {r:.4g} ms, fresh inputs {f:.4g} ms per call "
                        "(each call timed and synchronised alone)"
                        + ("" if ok else ": a repeated input is answered from a cache"))


def timed_outputs_correct(timing: Timing) -> CheckVerdict:
    """The outputs the parent picked after each fresh-input timing round (the candidate could
    not know which) pass the official check."""
    spots = list(timing.per_call.spot_checks) if timing.per_call is not None else []
    if not spots:
        return CheckVerdict("timed_outputs_correct", None, "no timed output was checked")
    bad = [s.round for s in spots if not _passes(s.compare)]
    return CheckVerdict("timed_outputs_correct", not bad, f"{len(spots)} timed output(s) picked after the fact pass"
                        if not bad else f"the timed output of round(s) {bad[:4]} is wrong: the timed calls did not compute")


def host_clock_agrees(blocks: Sequence[Block], arm: str = "candidate") -> CheckVerdict:
    """The candidate's reported event time for each timing request (per-invocation time x
    invocations) against the parent's own clock around that request (``host_ms``): no round
    may claim more time than passed, and the median shortfall over a block's rounds may be at
    most :data:`HOST_SLACK_MS` plus :data:`HOST_SLACK_FRACTION` of the median request (the
    pipe, the JSON and the synchronisations of an honest request; one slow round is a host
    hiccup, a patched timer or a forged reply is short in every round)."""
    n, worst, undecided = 0, None, []
    for b in blocks:
        inv = b.protocol.invocations_per_pair
        shorts, hosts = [], []
        for i, r in enumerate(b.rounds):
            t, h = r.times_ms.get(arm), r.host_ms.get(arm)
            if t is None or h is None:
                continue
            claimed = t * inv
            if claimed > h * 1.001 + 0.01:
                return CheckVerdict("host_clock_agrees", False, f"block {b.id} round {i}: the candidate claims "
                                    f"{claimed:.3f} ms, more than the {h:.3f} ms that passed")
            shorts.append(h - claimed)
            hosts.append(h)
        if not shorts:
            continue
        n += len(shorts)
        short, host = statistics.median(shorts), statistics.median(hosts)
        claimed = host - short
        if short > HOST_SLACK_MS + HOST_SLACK_FRACTION * host:
            return CheckVerdict("host_clock_agrees", False, f"block {b.id}: the candidate's times fall short of "
                                f"the parent's clock by {short:.3f} ms per request (median of {len(shorts)}; a request "
                                f"takes {host:.3f} ms): its timer or its reply is not to be believed")
        if claimed < short and claimed < 0.25 * host:
            undecided.append(b.id)
        worst = short if worst is None else max(worst, short)
    if undecided:
        return CheckVerdict("host_clock_agrees", None, f"block(s) {', '.join(undecided[:2])}: the timed region is "
                            "shorter than a request's fixed cost, so the parent's clock cannot confirm the times")
    if not n:
        return CheckVerdict("host_clock_agrees", None, "no round carries the parent's clock")
    return CheckVerdict("host_clock_agrees", True, f"{n} requests; the median gap to the parent's clock at most "
                        f"{worst:.3f} ms per request")


def within_roofline(bytes_moved: Optional[int], median_ms: Optional[float], bandwidth_gbps: Optional[float],
                    slack: float = ROOFLINE_SLACK) -> CheckVerdict:
    """A call that must move ``bytes_moved`` bytes (every input read and the output written
    once) cannot take less than bytes / bandwidth (device copy bandwidth measured in the same
    run, GB/s = 1e9 B/s)."""
    if not (bytes_moved and median_ms and bandwidth_gbps):
        return CheckVerdict("within_roofline", None, "bytes moved, time or bandwidth not measured")
    gbps = bytes_moved / (median_ms * 1e-3) / 1e9
    ok = gbps <= (1 + slack) * bandwidth_gbps
    return CheckVerdict("within_roofline", ok, f"{gbps:.3g} GB/s against the measured {bandwidth_gbps:.0f} GB/s"
                        + ("" if ok else ": faster than memory allows, so not all the work ran in the timed call"))


def derive(obs: Observations, timing: Timing, blocks: Sequence[Block], atol: float,
           rtol: float, plain: Optional[str] = None) -> tuple[CheckVerdict, ...]:
    """Every check of :data:`CHECKS`, in order, from one candidate's typed observations
    ``obs``, its ``timing`` record (per-call times, spot checks, bytes moved, bandwidth,
    median) and its timing ``blocks``; ``plain``: whether its file is plain PyTorch
    (:func:`custom_kernel_ran`). A candidate that did not run gets ``ran`` False and None
    elsewhere."""
    first = ran(obs)
    if first.passed is False and not obs.cases:
        return (first,) + tuple(CheckVerdict(n, None, "the candidate did not run") for n in CHECKS[1:])
    roof = timing.roofline
    out = [first, official_allclose(obs), other_shapes_correct(obs), redrawn_weights_correct(obs),
           follows_fresh_inputs(obs), inputs_unchanged(obs), output_is_plain_tensor(obs),
           discriminates(obs, atol, rtol), deterministic_under_poison(obs), precision_flags_unchanged(obs),
           custom_kernel_ran(obs, plain), single_stream(obs), no_work_after_return(obs), no_threads_left(obs),
           per_call_times_consistent(_per_call(timing, "fresh")), fresh_inputs_same_speed(timing),
           timed_outputs_correct(timing), host_clock_agrees(blocks),
           within_roofline(roof.bytes_moved if roof else None, roof.median_ms if roof else None,
                           roof.bandwidth_gbps if roof else None)]
    assert tuple(v.name for v in out) == CHECKS
    return tuple(out)


__all__ = ["CheckVerdict", "CHECKS", "CHECKS_V2", "derive", "LIBRARY_KERNEL", "custom_kernels", *CHECKS]
