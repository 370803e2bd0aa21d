"""The candidate protocol: the profiles, and the rules the engine applies and the verifier
derives again from the raw records (one copy of each, DESIGN.md section 2).

* :class:`CandidateConfig` and :data:`PROFILES`: how a candidate is checked and timed;
* :func:`expected_cases`: the cases a complete checking pass records, in order;
* :func:`default_extra_shapes`: the extra shape checked when the user names none;
* :func:`invocations_per_request`: invocations per timed request, from the eager calibration;
* :func:`copy_gbps`: the device copy bandwidth of a copy block (bytes read + written / the
  faster arm's median);
* :func:`roofline_median_ms`: the roofline's time, the median of the warm block's candidate times;
* :func:`bytes_moved`: what one call must move at least (every input read, every output
  written once), the roofline's numerator.
"""
from __future__ import annotations

import hashlib
import math
import statistics
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Sequence

import numpy as np

from kbrepro.model import sizes as msizes

#: input distributions of the checking pass (harness.kbtask.draw_inputs)
DISTRIBUTIONS = ("official", "normal", "normal_x100")
#: baselines timed against the candidate, in this order (names of timing arms)
BASELINES = ("eager", "torchscript", "compile_default", "compile_max_autotune")
#: a timed region of the eager baseline lasts at least this long (ms), up to MAX_INVOCATIONS calls
TARGET_REQUEST_MS = 4.0
MAX_INVOCATIONS = 1000
#: the stages of a candidate's run, in order (a failure names the one that stopped)
STAGES = ("build", "checking pass", "timing", "weights and shapes")


@dataclass(frozen=True)
class CandidateConfig:
    """How one candidate is checked and timed. Times in ms, sizes in bytes, limits in s."""

    profile: str = "full"
    seeds: tuple = (0, 1)
    distributions: tuple = DISTRIBUTIONS
    atol: float = 1e-4
    rtol: float = 1e-4
    warmups: int = 5
    rounds: int = 30
    invocations_per_pair: int = 10
    order_seed: int = 20261201
    timing_seed: int = 42
    baselines: tuple = BASELINES
    cold_l2: bool = True
    cold_rounds: int = 15
    fresh_sets: int = 4
    fresh_rounds: int = 5
    poison_bytes: tuple = (0xFF, 0x5A)
    redrawn_seed: int = 1234
    extra_shapes: tuple = ()       # tuple of ((name, value), ...) overrides; () = the default rule
    sizes: tuple = ()              # ((name, value), ...): the task's size globals for the whole run
    #                                (each value an int or a tuple of ints: model/sizes.py)
    #: why no extra shape is checked ("" where one is): the reference itself raises at the
    #: default extra shape and at the fallback (harness/candidate.py: task_config)
    no_extra_shape: str = ""
    build_timeout_s: float = 900.0
    call_timeout_s: float = 300.0
    budget_s: float = 3600.0       # the whole candidate: every request's deadline stops here

    def to_doc(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["extra_shapes"] = [msizes.to_json(dict(s)) for s in self.extra_shapes]
        d["sizes"] = msizes.to_json(dict(self.sizes))
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


PROFILES = {
    "full": CandidateConfig(),
    "quick": CandidateConfig(profile="quick", seeds=(0,), distributions=("official", "normal"), warmups=2, rounds=8,
                             invocations_per_pair=5, baselines=("eager", "torchscript", "compile_default"),
                             cold_rounds=5, fresh_sets=3, fresh_rounds=3),
}
#: configuration fields the user sets (not the protocol) and limits that bound a run without
#: changing what it measures
USER_FIELDS = ("sizes", "extra_shapes", "no_extra_shape")
LIMIT_FIELDS = ("build_timeout_s", "call_timeout_s", "budget_s")


#: the copy block's protocol (harness.extras.copy_bandwidth): mode, warmups, rounds, invocations
#: per timed region, order seed
COPY_PROTOCOL = ("graph", 3, 15, 5, 1)


def expected_cases(cfg: CandidateConfig, n_extra_shapes: int, cuda: bool = True) -> list[tuple[str, str]]:
    """The ``(id, kind)`` of every case a complete checking pass of ``cfg`` records, in order
    (harness/candidate.py: seeds x distributions, same buffers, repeat, poisoned calls, the
    profiled call, the timing input (a GPU run only), re-drawn weights, extra shapes)."""
    out = [(f"s{s}/{d}", d) for s in cfg.seeds for d in cfg.distributions]
    out += [("same_buffers", "same_buffers"), ("repeat", "repeat")]
    out += [(f"poison{i}", "poison") for i in range(len(cfg.poison_bytes))]
    out += [("profiled", "profiled")] + ([("timing_input", "official")] if cuda else [])
    out += [("redrawn_weights", "redrawn_weights")]
    out += [(f"shape{i}", "extra_shape") for i in range(n_extra_shapes)]
    return out


def case_set_and_model(cfg: CandidateConfig, case_id: str) -> tuple[str, str]:
    """The input set a case's call reads and the model it calls (harness/candidate.py): a seed
    x distribution case its own set; same buffers the first set (new values written into its
    tensors); repeat, poisoned and profiled calls the repeat set; the timing input its own; the
    re-drawn weights and each extra shape their own set and model."""
    if case_id == "same_buffers":
        return f"s{cfg.seeds[0]}/{cfg.distributions[0]}", "main"
    if case_id == "repeat" or case_id == "profiled" or case_id.startswith("poison"):
        return "repeat", "main"
    if case_id == "timing_input":
        return "timing", "main"
    if case_id == "redrawn_weights":
        return "redrawn", "redrawn"
    if case_id.startswith("shape"):
        return case_id, case_id
    return case_id, "main"


def same_buffers_reference(cfg: CandidateConfig) -> str:
    """The key of the reference the same-buffers case is compared with (harness/candidate_calls.py):
    the official draw of the second seed, or of the first seed + 1 where the profile has one seed
    (the quick profile), which is then no case's id. A failing case's ``matches_other`` may name it
    from the same-buffers case on."""
    return f"s{cfg.seeds[1] if len(cfg.seeds) > 1 else cfg.seeds[0] + 1}/official"


def default_extra_shapes(size_globals: Mapping[str, msizes.SizeValue]) -> list[dict]:
    """The extra shape checked when none is given: half the batch (``batch_size // 2``) where
    the task's batch size (after the run's overrides) is an integer of at least 2; none
    otherwise. Only ``batch_size`` is varied: a tuple-valued global that holds a batch-like
    dimension (``input_shape = (batch_size, 3, 224, 224)``) follows ``batch_size`` where the
    task derives it from it, and is otherwise left at the run's value."""
    b = size_globals.get("batch_size", 0)
    return [{"batch_size": b // 2}] if isinstance(b, int) and b >= 2 else []


def checked_extra_shapes(given: Sequence[Mapping], no_extra_shape: str, run_sizes: Mapping) -> list[dict]:
    """The extra shapes a run checks: the ones ``given`` (the user's, or the fallback the run
    took), else none where the run left them out (``no_extra_shape``: the reference raised at
    every one tried), else :func:`default_extra_shapes` of ``run_sizes`` (the task's sizes with
    the run's applied). The one copy of the rule: the engine runs these, the verifier expects them."""
    if given:
        return [dict(s) for s in given]
    return [] if no_extra_shape else default_extra_shapes(run_sizes)


def fallback_extra_shapes(size_globals: Mapping[str, msizes.SizeValue]) -> list[dict]:
    """The extra shape tried when the reference itself raises at :func:`default_extra_shapes`'
    (BatchNorm in training mode at a batch of one): one more than the run's batch
    (``batch_size + 1``) where the batch is at least 2; none otherwise. The run records the one
    it takes in ``config.extra_shapes``, as if the user had given it."""
    b = size_globals.get("batch_size", 0)
    return [{"batch_size": b + 1}] if isinstance(b, int) and b >= 2 else []


def requested_extra_shapes(recorded: Sequence[Mapping], run_sizes: Optional[Mapping]) -> list[list[dict]]:
    """The extra shapes a run may have been asked for, given those its record holds
    (``config.extra_shapes``) and its task's sizes with the run's applied (``run_sizes``, None
    where unknown): the recorded ones, and also none where they are the run's own
    :func:`fallback_extra_shapes` (the run took them itself: a sharded case planned with no
    extra shape records them). The one copy of the rule a case id is derived by."""
    out = [[dict(s) for s in recorded]]
    if recorded and run_sizes is not None and out[0] == fallback_extra_shapes(run_sizes):
        out.append([])
    return out


def shape_problems(size_globals: Mapping[str, msizes.SizeValue], sizes: Mapping[str, msizes.SizeValue],
                   extra_shapes: Sequence[Mapping[str, msizes.SizeValue]]) -> list[tuple[Optional[int], str]]:
    """What is wrong with a run's size overrides against its task's module-level sizes
    ``size_globals`` (ints and tuples of ints): ``(j, reason)`` pairs, ``j`` the extra shape's
    index or None for the sizes. A size the task does not name is refused, then a value that is
    not a size or not of the kind of the task's own (an int for a tuple, a tuple of another
    length: :func:`kbrepro.model.sizes.value_problem`); either way nothing else is judged. An
    extra shape that changes no size of the run (``sizes`` applied) checks the main shape
    again, not another one. The one copy of this rule: the run refuses such a request before it
    starts, and the verifier refuses a record that holds one."""
    unknown = sorted(set(sizes) - set(size_globals))
    for extra in extra_shapes:
        unknown += sorted(set(extra) - set(size_globals))
    if unknown:
        return [(None, f"names {', '.join(unknown[:4])}, not a size of the task")]
    for j, given in [(None, sizes)] + list(enumerate(extra_shapes)):
        for k, v in sorted(given.items()):
            why = msizes.value_problem(k, v, size_globals[k])
            if why:
                return [(j, why)]
    run_sizes = {**size_globals, **dict(sizes)}
    return [(j, "changes no size of the run: it checks the main shape again, not another one")
            for j, x in enumerate(extra_shapes) if not x or all(run_sizes.get(k) == v for k, v in x.items())]


def invocations_per_request(profile_invocations: int, eager_ms: Optional[float]) -> int:
    """Invocations per timed request: at least the profile's, and enough that eager PyTorch
    (``eager_ms`` per invocation, timed by the parent; None where eager did not run) fills
    :data:`TARGET_REQUEST_MS`, at most :data:`MAX_INVOCATIONS`."""
    if eager_ms is None:
        return profile_invocations
    return max(profile_invocations, min(MAX_INVOCATIONS, math.ceil(TARGET_REQUEST_MS / max(eager_ms, 1e-4))))


def _median(xs: Sequence[float]) -> float:
    """The median (the mean of the two middle values of an even count), as numpy's 50th
    percentile gives it up to the last bit (the engine's before this rule was written once)."""
    v = sorted(float(x) for x in xs)
    if not v:
        raise ValueError("no samples")
    m = len(v) // 2
    return v[m] if len(v) % 2 else v[m - 1] + (v[m] - v[m - 1]) * 0.5


def copy_gbps(bytes_moved: int, rounds: Iterable[Mapping[str, float]], arms: Sequence[str]) -> float:
    """Copy bandwidth in GB/s (1e9 bytes per second) of a copy block: ``bytes_moved`` (read +
    written) over the faster arm's median time per invocation (ms). ``rounds``: each round's
    ``times_ms`` mapping. Raises ValueError where an arm has no time."""
    best = min(_median([float(r[a]) for r in rounds if a in r]) for a in arms)
    return bytes_moved / (best * 1e-3) / 1e9


def roofline_median_ms(candidate_times_ms: Sequence[float]) -> float:
    """The roofline's time: the median (``statistics.median``) of the candidate's per-round
    times per invocation (ms) in its warm-L2 block."""
    return statistics.median(candidate_times_ms)


# ------------------------------------------------ timed invocations on fresh inputs (issue 27)
#: the most bytes of input sets a timed request may hold at once (the invocations per request
#: are capped so that every invocation has a set of its own)
POOL_BYTES_MAX = 16 << 30
#: the share of the GPU memory free at the timing stage's start (both processes' caches
#: emptied) that one request's input sets may take: the parent's arms and the candidate's child
#: hold a request's sets in turn, each beside the timing input and its own model, and a block's
#: held outputs stay until its round ends (issue 28: KernelBench 1/4's 8 GiB inputs ran the
#: H200 out of memory under a cap that ignored what was free)
POOL_FREE_SHARE = 0.25
#: a checksum chunk holds at most this many output elements. With weights uniform in [-1, 1], a
#: stale or partly computed output's weighted sum differs from the right one's by about
#: 0.8 sqrt(m) sigma over a chunk of m elements, while the allowance of allclose grows as
#: m (atol + rtol E|y|), about 1.5e-4 m at the default tolerance for outputs of unit scale:
#: at m = 2**16 that is 205 sigma against 10, so an output of another input set fails for any
#: sigma above about 0.05 (a smaller sigma is within what allclose itself lets through)
CHECKSUM_CHUNK = 1 << 16
#: the relative error of a float32 tree reduction of one chunk (log2(m) ulps, with room)
CHECKSUM_FLOAT_SLACK = 1e-5
#: the parent's clock over requests of two lengths: the longer one adds at least this many ms
#: of the candidate's own reported time; the candidate's reported time per invocation may be
#: at most CLOCK_SLOPE_SLACK short of the slope
CLOCK_EXTRA_MS = 8.0
CLOCK_SLOPE_SLACK = 0.15
CLOCK_REPEATS = 5
#: the most invocations of the clock's longer request
MAX_CLOCK_INVOCATIONS = 20000
#: the time a request spends outside the candidate's timed region (the parent's clock minus the
#: candidate's report) is the same at any length once nothing in it grows with the length (the
#: spent input sets are freed by the next request): a short request's (a block's, the clock's
#: first length; median) may exceed the clock's longer requests' (median) by at most
#: SHORTFALL_SLACK_MS plus SHORTFALL_SLACK_FRACTION of the short request. On the H200 honest
#: candidates stay 0.11 ms or less above it; a timer that reports 0.75 of the truth only on the
#: block's requests is 0.25 of their region above it
SHORTFALL_SLACK_MS = 0.15
SHORTFALL_SLACK_FRACTION = 0.05
#: how far a block's time per invocation may fall below the candidate's per-call time on fresh
#: inputs: the launch overhead measured in the run (eager's per-call minus its block time, or
#: the candidate's own host time per checked call, the larger), times this factor, plus
#: CALLS_SLACK_MS
CALLS_OVERHEAD_FACTOR = 1.5
CALLS_SLACK_MS = 0.25
#: the clock's requests of n1 invocations and the warm block's requests (also n1) report times
#: per invocation within this factor of each other
CLOCK_BLOCK_FACTOR = 2.0


def block_order_seed(order_seed: int, l2: str) -> int:
    """The seed of a candidate timing block's arm order (:func:`kbrepro.model.timing_rules.arm_orders`):
    the profile's ``order_seed`` for the warm-L2 block, one more for the cold one."""
    return order_seed + (1 if l2 == "cold" else 0)


def spot_check_seed(order_seed: int, l2: str) -> int:
    """The seed of the draw that picks which timed outputs of a candidate block are held against
    the reference (protocol 1's spot checks, protocol 2's chunks): ``order_seed`` + 2 warm, + 3 cold."""
    return order_seed + (3 if l2 == "cold" else 2)


def call_rng_seed(tag: str) -> int:
    """The seed of torch's generators right before a model call whose answer is checked: the
    parent's reference on a set and the candidate's call on the same values (``tag`` names the
    reference: the case's set, ``timing_input``, ...) start from the same random state, so a
    task whose forward draws random numbers (dropout in training mode, KernelBench 2/66) answers
    the same in both processes when computed the same way (issue 28). A timed request seeds
    with its pool seed, once before its region (each call of a per-call request with the pool
    seed plus its index). The first 7 bytes of SHA-256 of ``tag``, as an integer."""
    return int.from_bytes(hashlib.sha256(tag.encode()).digest()[:7], "big")


def pool_seed(timing_seed: int, l2: str, round_index: int) -> int:
    """The seed of a timed request's input sets (the same in every arm of a round): the task's
    own ``get_inputs()`` drawn once per invocation, one after another, on the device after
    ``torch.manual_seed`` of it (harness/fresh.py)."""
    tag = sum((i + 1) * ord(ch) for i, ch in enumerate(l2))
    return (timing_seed * 1_000_003 + tag * 100_003 + round_index * 10_007) % (1 << 62)


def pool_bytes(free_bytes: int) -> int:
    """The bytes one timed request's input sets may hold (the ``pool_bytes`` a block records):
    :data:`POOL_FREE_SHARE` of ``free_bytes`` (the device memory free when the timing stage
    starts, ``torch.cuda.mem_get_info``), at most :data:`POOL_BYTES_MAX`."""
    return max(0, min(POOL_BYTES_MAX, int(max(0, free_bytes) * POOL_FREE_SHARE)))


def invocations_with_pool(calibrated: int, input_bytes: int, budget: Optional[int] = None) -> int:
    """Invocations per request once every invocation has an input set of its own: the
    calibrated count, capped so that the sets fit ``budget`` bytes (a block's recorded
    ``pool_bytes``; None, in a record made before it was recorded: :data:`POOL_BYTES_MAX`), at
    least 1. Raises ValueError for a budget above :data:`POOL_BYTES_MAX` or below 0."""
    cap = POOL_BYTES_MAX if budget is None else int(budget)
    if not 0 <= cap <= POOL_BYTES_MAX:
        raise ValueError(f"a pool of {cap} bytes is outside 0 to {POOL_BYTES_MAX}")
    return max(1, min(calibrated, cap // max(input_bytes, 1)))


def checksum_chunks(numel: int) -> int:
    """How many chunks an output of ``numel`` elements is checksummed in."""
    return max(1, -(-numel // CHECKSUM_CHUNK))


def checksum_agrees(cand: Sequence[Optional[float]], ref: Sequence[Optional[float]], elements: int, atol: float,
                    rtol: float) -> Optional[bool]:
    """Whether a timed output's checksum of one chunk (``(weighted sum, sum of |y|)``, weights in
    [-1, 1] drawn after the output existed) can come from an output allclose to the
    reference's: :func:`checksums_agree` of one chunk (None for a missing value is NaN), as
    True, False, or None where neither checksum is finite."""
    got = int(checksums_agree(np.array([_or_nan(cand[0]), _or_nan(cand[1])], dtype=np.float64),
                              np.array([_or_nan(ref[0]), _or_nan(ref[1])], dtype=np.float64), elements, atol, rtol))
    return None if got < 0 else bool(got)


def _or_nan(v) -> float:
    return math.nan if v is None else float(v)


def checksums_agree(cand, ref, elements, atol: float, rtol: float):
    """The rule of :func:`checksum_agrees` over arrays: ``cand`` and ``ref`` float64 of shape
    ``(..., 2)`` (weighted sum, sum of |y|), ``elements`` the chunks' element counts
    (broadcast against ``(...)``). Returns int8 ``(...)``: 1 where ``|sw_c - sw_r|`` and
    ``|sum|y_c| - sum|y_r||`` are both at most ``m atol + rtol sum|y_c|`` (the allowance of
    ``torch.allclose(reference, candidate)`` summed over the chunk's ``m`` elements) plus the
    float32 reduction's slack ``CHECKSUM_FLOAT_SLACK (sum|y_c| + sum|y_r|)``; 0 where not or
    where the candidate's checksum is not finite, or is finite where the reference's is not (a
    reference holding a NaN or infinity has no finite output allclose to it); -1 where both are
    not finite (nothing to hold the output against). Both sums are held: ``||c| - |r|| <= |c - r| <=
    atol + rtol |c|`` element by element, so a weighted sum cancelled by huge elements
    (weights are known to the candidate's process once drawn) shows in the sum of |y|."""
    sc, ac, sr, ar = cand[..., 0], cand[..., 1], ref[..., 0], ref[..., 1]
    with np.errstate(invalid="ignore", over="ignore"):
        allow = elements * atol + rtol * ac + CHECKSUM_FLOAT_SLACK * (ac + ar)
        agree = (np.abs(sc - sr) <= allow) & (np.abs(ac - ar) <= allow)
    out = np.where(np.isfinite(sc) & np.isfinite(ac) & agree, 1, 0).astype(np.int8)
    # a reference that is not finite holds a NaN or an infinity: an output allclose to it holds
    # one too, so a finite candidate checksum there disagrees (0); only both not finite is -1
    out[~(np.isfinite(sr) & np.isfinite(ar)) & ~(np.isfinite(sc) & np.isfinite(ac))] = -1
    return out


def held_row_agrees(row: Sequence, atol: float, rtol: float) -> Optional[bool]:
    """One recorded sample row of a round's held outputs (``[invocation, written_by, chunk,
    sum_c, abs_c, sum_r, abs_r, elements]``), derived again: False for an output whose chunks
    are not the reference's (chunk -1), None where neither checksum is finite, else
    :func:`checksum_agrees`."""
    if row[2] < 0:
        return False
    return checksum_agrees(row[3:5], row[5:7], row[7], atol, rtol)


def clock_slope_ms(n1: int, hosts1: Sequence[float], n2: int, hosts2: Sequence[float]) -> float:
    """The parent's clock per invocation: the median host time of requests of ``n2``
    invocations minus that of ``n1``, over ``n2 - n1`` (the fixed cost of a request cancels)."""
    return (statistics.median(hosts2) - statistics.median(hosts1)) / (n2 - n1)


def outside_region_ms(host_ms: Sequence[float], reported_ms: Sequence[float], n: int) -> float:
    """The median time (ms) requests of ``n`` invocations spent outside the candidate's timed
    region: the parent's clock of each request minus ``n`` times the candidate's reported time
    per invocation."""
    return statistics.median(h - r * n for h, r in zip(host_ms, reported_ms))


def clock_extra_invocations(n1: int, reported_ms: float) -> int:
    """The longer request's length: ``n1`` plus enough invocations to add
    :data:`CLOCK_EXTRA_MS` of the candidate's own reported time (at least ``n1``)."""
    return n1 + max(n1, math.ceil(CLOCK_EXTRA_MS / max(reported_ms, 1e-6)))


def calls_allowance_ms(eager_percall_ms: float, eager_block_ms: float) -> float:
    """How much faster a block's time per invocation may be than the per-call time on fresh
    inputs: the launch overhead the parent measured in this run on eager PyTorch (per-call
    minus block time, at most twice the block time plus 0.1 ms), times
    :data:`CALLS_OVERHEAD_FACTOR`, plus :data:`CALLS_SLACK_MS` (a candidate's own launch
    overhead; nothing the candidate reports enters)."""
    overhead = min(max(eager_percall_ms - eager_block_ms, 0.0), 2 * eager_block_ms + 0.1)
    return CALLS_OVERHEAD_FACTOR * overhead + CALLS_SLACK_MS


def bytes_moved(input_bytes: Iterable[int], output_bytes: Iterable[int]) -> int:
    """The bytes one call must move at least: every input read once, every output written once."""
    return sum(input_bytes) + sum(output_bytes)


__all__ = ["CandidateConfig", "PROFILES", "BASELINES", "DISTRIBUTIONS", "STAGES", "TARGET_REQUEST_MS",
           "MAX_INVOCATIONS", "COPY_PROTOCOL", "expected_cases", "case_set_and_model", "same_buffers_reference", "default_extra_shapes", "checked_extra_shapes", "fallback_extra_shapes", "requested_extra_shapes", "shape_problems", "invocations_per_request", "copy_gbps",
           "roofline_median_ms", "bytes_moved", "pool_seed", "pool_bytes", "invocations_with_pool", "checksum_chunks",
           "checksum_agrees", "checksums_agree", "clock_slope_ms", "outside_region_ms", "call_rng_seed", "clock_extra_invocations", "calls_allowance_ms", "USER_FIELDS", "LIMIT_FIELDS"]
