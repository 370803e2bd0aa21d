"""Facts a study's records state that the verifier derives itself, with the product's own
rules, from the raw data beside them (DESIGN.md section 6, "Fail closed"); a stated value
that differs from the derived one fails, and evidence the engine always writes that is
missing or malformed fails too.

* **Self-tests** (``selftest.json``): the kernels, their descriptions and expected catches are
  the product's own table (:data:`harness.selftest.TABLE`), never the document's; which checks
  apply to a kernel follows from that table; the outcomes the engine derives from recorded
  details (bit identity from the bit count, the speed limit from the apparent bandwidth and
  the run's copy block, stream coverage from event and wall times) are derived again; and
  ``failed_checks``, ``caught``, ``as_expected`` and ``all_as_expected`` are what
  :func:`harness.selftest.summarise` gives for the recorded outcomes.
* **Adaptive stopping** (a block whose protocol has ``adaptive``): the stopping rule
  (:func:`harness.timing.stop_reason`, :func:`~harness.timing.within_target`,
  :func:`~harness.timing.pair_widths`) is replayed on the recorded rounds. At every check
  point before the last round the rule must go on; after the last round it must stop, for the
  stated reason, with the stated half-widths. The rule's elapsed time is not recorded: the
  sum of the block's timed intervals bounds it from below (:data:`ELAPSED_SLACK`), so a stop
  by ``max_seconds`` is refuted only where the target was reached first or the rounds
  could not have taken that long, and an early ``max_seconds`` only where the timed
  intervals alone exceed it. A rule larger than this verifier replays
  (:data:`REPLAY_MAX_DRAWS`, :data:`REPLAY_MAX_CHECKS`) is a problem.
* **Copy bandwidth and measurement floor**: each such block holds exactly the fields,
  arms and protocol the engine writes (:func:`harness.extras.copy_fields`,
  :func:`~harness.extras.floor_fields`); the study's extras say which must be there; the
  copy bandwidth is :func:`harness.extras.copy_gbps` of the raw block (used for the
  self-tests' speed limit; REPORT.md renders it, and the floor's medians, from the raw
  rounds with the same functions).
* **GEMM FLOPs** (``kind: gemm`` blocks): ``flops`` is :func:`harness.extras.gemm_flops` of
  the task's recorded input shape ``[B, K]`` (the timing input, which the GEMM is timed on)
  and the block's output shape ``[B, H]``, whose size must be the element count of the
  task's output on that input (which the GEMM's output becomes through the pointwise tail it
  feeds); REPORT.md's TFLOP/s is :func:`harness.extras.tflops` of that count and the
  block's median.

Pure functions of parsed documents, as :mod:`bundle.crosscheck` (which calls them): no I/O,
nothing raised for malformed input; each returns Problems (:mod:`bundle.evidence`).
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from kbrepro.model.documents import Records, Selftest
from kbrepro.model.timing_rules import COLD_WARM_FLOOR, COPY_PEAK_SLACK, gpu_l2_bytes, gpu_peak_gbps
from kbrepro.model.problems import Problem
from kbrepro.bundle.documents import DOC_PATHS
from kbrepro.bundle.evidence import as_dict, as_list, cut, is_int, number, problem
from kbrepro.errors import InvalidResultsError
from kbrepro.harness import extras, selftest, timing

TIMINGS = f"data/{DOC_PATHS['timings']}"
SELFTEST = f"data/{DOC_PATHS['selftest']}"
#: a stated float equals the derived one within this relative difference (the same code on the
#: same values; only the last bits of a float may differ between machines)
FLOAT_REL = 1e-9
#: the timed intervals are measured by CUDA events on the GPU's clock, the rule's elapsed time
#: on the host's: their sum, taken 1% lower, bounds the elapsed time from below whatever the
#: two clocks' rates
ELAPSED_SLACK = 0.99
#: the largest stopping rule this verifier replays (a bundle's rule is bounded like any parsed
#: input): resample draws of all pairs at the last round (the shipped studies': 12 x 1000 x 400)
#: and check points; a larger one is a problem, not minutes of bootstrap
REPLAY_MAX_DRAWS = 20_000_000
REPLAY_MAX_CHECKS = 1_000


def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= FLOAT_REL * max(abs(a), abs(b))


def _blocks(documents: Mapping[str, Any]) -> list[tuple[int, dict]]:
    return [(i, b) for i, b in enumerate(as_list(as_dict(documents.get("timings")).get("blocks")))
            if isinstance(b, dict)]


def document_problems(documents: Mapping[str, Any], records: Records) -> list[Problem]:
    """Tier 3 (documents): the copy and floor blocks' fields, every adaptive block's
    stopping decision, every GEMM block's FLOP count and the self-test document, each
    derived from the raw records (module docstring). ``documents``: name -> parsed
    document, whose timing blocks are compared whole with the JSON the engine writes and
    handed to the engine's own rule functions (:mod:`kbrepro.harness.timing`,
    :mod:`kbrepro.harness.extras`), which read that JSON; ``records``: the typed records
    (the self-tests are read from theirs). Returns Problems; raises nothing."""
    blocks = _blocks(documents)
    out = _engine_blocks(blocks)
    for i, b in blocks:
        out += _adaptive(i, b)
    out += _gemm(blocks, documents)
    out += _beyond_memory(blocks, records)
    out += _cold_floor(blocks)
    if records.selftest is not None:
        out += _selftest(records.selftest, blocks)
    return out


def study_problems(study, records: Records) -> list[Problem]:
    """Tier 3: the copy and floor blocks the study's extras make the engine write are there
    (``measurement_floor``: every :data:`harness.extras.FLOOR_BLOCKS`; ``roofline`` or
    ``self_test``: the copy block), and no other. ``study``: the judging
    :class:`harness.study.StudyConfig`; ``records``: the documents' typed records. Returns
    Problems; raises nothing."""
    ex = study.doc.get("extras", {}) or {}
    want = dict(extras.floor_fields()) if ex.get("measurement_floor") else {}
    if ex.get("roofline") or ex.get("self_test"):
        want[extras.COPY_ID] = extras.copy_fields()
    out = []
    blocks = records.timings.blocks if records.timings is not None else ()
    ids = [b.id for b in blocks]
    missing = [k for k in want if k not in ids]
    if missing:
        out.append(problem(TIMINGS, "$.blocks", f"the study measures {', '.join(missing)}; "
                           f"{'they are' if len(missing) > 1 else 'it is'} not recorded", expected=missing))
    for i, b in enumerate(blocks):
        if b.kind in ("floor", "copy") and b.id not in want:
            out.append(problem(TIMINGS, f"$.blocks[{i}]", f"block {cut(b.id)}: a {cut(b.kind)} block "
                               "the study does not measure"))
    return out


# ------------------------------------------------------------------ copy and floor blocks


def _engine_blocks(blocks: list[tuple[int, dict]]) -> list[Problem]:
    """Each floor or copy block holds exactly the fields (arms, protocol, bytes...) the
    engine writes, besides its rounds."""
    out = []
    own = {**extras.floor_fields(), extras.COPY_ID: extras.copy_fields()}
    for i, b in blocks:
        bid, kind = b.get("id"), b.get("kind")
        if kind not in ("floor", "copy") and bid not in own:
            continue
        want = own.get(bid) if isinstance(bid, str) else None
        if want is None or want["kind"] != kind:
            out.append(problem(TIMINGS, f"$.blocks[{i}].id", f"block {cut(bid)}: not a {cut(kind)} block the engine "
                               "writes", expected=sorted(k for k, v in own.items() if v["kind"] == kind), found=bid))
            continue
        got = {k: v for k, v in b.items() if k != "rounds"}
        keys = sorted(k for k in set(want) | set(got) if got.get(k) != want.get(k))
        if keys:
            out.append(problem(TIMINGS, f"$.blocks[{i}]", f"block {bid}: {', '.join(keys)} "
                               f"{'is' if len(keys) == 1 else 'are'} not what the engine writes",
                               expected={k: want.get(k) for k in keys},
                               found={k: got.get(k) for k in keys}))
    return out


def _copy_gbps(blocks: list[tuple[int, dict]]) -> tuple[float | None, list[Problem]]:
    """The run's copy bandwidth (GB/s), derived from its raw copy block, or None with the
    problem that stops it (no copy block, or one that gives no bandwidth)."""
    found = [(i, b) for i, b in blocks if b.get("kind") == "copy"]
    if len(found) != 1:
        return None, [problem(TIMINGS, "$.blocks", f"{len(found)} copy blocks: the self-tests' speed limit is "
                              "judged against the run's one copy block", expected=1, found=len(found))]
    i, b = found[0]
    try:
        gbps = extras.copy_gbps(b)
    except (KeyError, TypeError, ValueError, ArithmeticError) as exc:
        return None, [problem(TIMINGS, f"$.blocks[{i}]", f"block {cut(b.get('id'))}: gives no copy bandwidth "
                              f"({type(exc).__name__})")]
    if not (math.isfinite(gbps) and gbps > 0):
        return None, [problem(TIMINGS, f"$.blocks[{i}]", f"block {cut(b.get('id'))}: gives no copy bandwidth",
                              found=str(gbps))]
    return gbps, []


def _beyond_memory(blocks: list[tuple[int, dict]], records: Records) -> list[Problem]:
    """No arm of a block that records the bytes it moves (a tail, the copy block) moves them
    faster than the GPU's memory can (:func:`kbrepro.model.timing_rules.gpu_peak_gbps` of the
    GPU environment.json names, by compute capability for one not in the table, times
    ``COPY_PEAK_SLACK``): bytes / median ms per invocation. A block whose bytes could stay in
    the L2 (less than twice its size, the table's or else environment.json's) is not held to it."""
    env = records.environment
    if env is None:
        return []
    name, cc, l2 = env.value("gpu_name"), env.value("compute_capability"), env.value("l2_cache_bytes")
    if not isinstance(name, str):
        return []
    l2 = gpu_l2_bytes(name) or (l2 if is_int(l2) and l2 > 0 else None)
    peak = gpu_peak_gbps(name, cc if isinstance(cc, str) else None) * COPY_PEAK_SLACK
    out = []
    for i, b in blocks:
        nbytes = b.get("bytes_moved")
        if not is_int(nbytes) or nbytes <= 0 or b.get("skipped") is not None \
                or (b.get("kind") != "cold_l2" and (l2 is None or nbytes < 2 * l2)):
            continue
        for arm in as_list(b.get("arms")):
            med = _median_ms(b, arm)
            if med is None:
                continue
            gbps = nbytes / (med * 1e6)
            if gbps > peak:
                out.append(problem(TIMINGS, f"$.blocks[{i}]", f"block {cut(b.get('id'))}: {cut(arm)} moves "
                                   f"{nbytes} bytes at {gbps:.0f} GB/s, more than an {cut(name)} can "
                                   f"({peak:.0f} GB/s with {COPY_PEAK_SLACK - 1:.0%} slack)", expected=f"<= {peak:.0f}",
                                   found=round(gbps)))
    return out


def _median_ms(b: dict, arm: str) -> float | None:
    """The median (the upper one of an even count) of an arm's positive times in a block's
    rounds (ms per invocation), or None where it has none."""
    times = sorted(x for x in (number(as_dict(as_dict(r).get("times_ms")).get(arm)) for r in as_list(b.get("rounds")))
                   if x is not None and x > 0)
    return times[len(times) // 2] if times else None


def _cold_floor(blocks: list[tuple[int, dict]]) -> list[Problem]:
    """In a cold-L2 block every arm runs a flush of the L2 and then its call: its median is at
    least ``COLD_WARM_FLOOR`` of the block's flush alone (``l2_flush_only``) and of the same
    arm's median in the warm twin (the block of the id without ``.cold``), as for candidates
    (:data:`kbrepro.model.timing_rules.COLD_WARM_FLOOR`)."""
    by_id = {b.get("id"): b for _, b in blocks}
    out = []
    for i, b in blocks:
        bid = b.get("id")
        if b.get("kind") != "cold_l2" or b.get("skipped") is not None or not isinstance(bid, str):
            continue
        warm = by_id.get(bid[:-len(".cold")]) if bid.endswith(".cold") else None
        flush = _median_ms(b, "l2_flush_only")
        for arm in as_list(b.get("arms")):
            if arm == "l2_flush_only":
                continue
            mc = _median_ms(b, arm)
            floors = [(flush, "the flush alone in this block")]
            if isinstance(warm, dict):
                floors.append((_median_ms(warm, arm), f"its median in {cut(warm.get('id'))}"))
            for floor, what in floors:
                if mc is not None and floor is not None and mc < COLD_WARM_FLOOR * floor:
                    out.append(problem(TIMINGS, f"$.blocks[{i}]", f"block {cut(bid)}: {cut(arm)}'s median {mc:.4g} ms "
                                       f"is less than {COLD_WARM_FLOOR:g} of {what}, {floor:.4g} ms: a flush and a call "
                                       "are not faster than either", expected=f">= {COLD_WARM_FLOOR * floor:.4g}",
                                       found=mc))
    return out


# ------------------------------------------------------------------------- adaptive stopping


def _adaptive(i: int, b: dict) -> list[Problem]:
    """The outcome of an adaptive block against its rule, replayed on its rounds."""
    bid = cut(b.get("id"))
    rule_doc = as_dict(b.get("protocol")).get("adaptive")
    outcome = b.get("adaptive")
    rounds = as_list(b.get("rounds"))
    if rule_doc is None:
        return [] if outcome is None else [problem(TIMINGS, f"$.blocks[{i}].adaptive", f"block {bid}: an adaptive "
                                                   "outcome without an adaptive protocol")]
    if not rounds:
        return []  # a block without rounds is the documents' consistency check's
    try:
        rule = timing.AdaptiveRule.from_doc(rule_doc)
    except (ValueError, TypeError) as exc:
        return [problem(TIMINGS, f"$.blocks[{i}].protocol.adaptive", f"block {bid}: {exc}")]
    oc = as_dict(outcome)
    n = len(rounds)
    if not oc:
        return [problem(TIMINGS, f"$.blocks[{i}].adaptive", f"block {bid}: adaptive protocol without its outcome")]
    out = []
    if oc.get("rounds") != n:
        out.append(problem(TIMINGS, f"$.blocks[{i}].adaptive.rounds", f"block {bid}: the adaptive outcome's round "
                           "count differs from the rounds kept", expected=n, found=oc.get("rounds")))
    if not rule.min_rounds <= n <= rule.max_rounds:
        return out + [problem(TIMINGS, f"$.blocks[{i}].rounds", f"block {bid}: {n} rounds outside the adaptive "
                              f"rule's [{rule.min_rounds}, {rule.max_rounds}]",
                              expected=[rule.min_rounds, rule.max_rounds], found=n)]
    checks = sum(1 for k in range(1, n) if timing.is_check_point(k, rule))
    if len(rule.pairs) * rule.resamples * n > REPLAY_MAX_DRAWS or checks > REPLAY_MAX_CHECKS:
        return out + [problem(TIMINGS, f"$.blocks[{i}].protocol.adaptive", f"block {bid}: a stopping rule of "
                              f"{len(rule.pairs)} pairs x {rule.resamples} resamples x {n} rounds and {checks} check "
                              f"points is more than this verifier replays ({REPLAY_MAX_DRAWS} draws, "
                              f"{REPLAY_MAX_CHECKS} check points)")]
    try:
        return out + _replay(i, bid, b, rule, oc)
    except InvalidResultsError as exc:
        return out + [problem(TIMINGS, f"$.blocks[{i}].rounds", f"block {bid}: the stopping rule cannot be applied "
                              f"to its rounds: {exc.message}")]


def _timed_seconds(b: dict) -> list[float]:
    """Seconds of timed intervals before each round (index ``n``: the first ``n`` rounds):
    every arm's time per invocation times the invocations of a round (ms -> s)."""
    inv = as_dict(b.get("protocol")).get("invocations_per_pair")
    inv = inv if is_int(inv) and inv > 0 else 1
    acc = [0.0]
    for r in as_list(b.get("rounds")):
        acc.append(acc[-1] + sum(max(number(t) or 0.0, 0.0) for t in as_dict(as_dict(r).get("times_ms")).values())
                   * inv / 1e3)
    return acc


def _replay(i: int, bid: str, b: dict, rule: timing.AdaptiveRule, oc: dict) -> list[Problem]:
    rounds = b["rounds"]
    n = len(rounds)
    ratios = timing.pair_ratios(rounds, rule)
    whole = all(len(v) == n for v in ratios.values())

    def prefix(k: int) -> dict:
        return {p: v[:k] for p, v in ratios.items()} if whole else timing.pair_ratios(rounds[:k], rule)

    timed = _timed_seconds(b)
    widths = timing.pair_widths(ratios if whole else prefix(n), rule, n)
    out = []
    stated = as_dict(oc.get("rel_half_widths"))
    if sorted(stated) != sorted(widths) or not all(_close(number(stated[k]), widths[k]) for k in widths):
        keys = sorted(k for k in set(stated) | set(widths) if k not in stated or k not in widths
                      or not _close(number(stated[k]), widths[k]))
        out.append(problem(TIMINGS, f"$.blocks[{i}].adaptive.rel_half_widths", f"block {bid}: the half-widths of "
                           f"{', '.join(map(str, keys[:4]))} are not the ones the stopping rule derives from the "
                           f"rounds", expected={k: widths.get(k) for k in keys[:4]},
                           found={k: stated.get(k) for k in keys[:4]}))
    # the rule must have gone on at every check point before the last round: the widest pairs
    # at the end are tried first, and the one found over the target first at the next point
    first = sorted(widths, key=lambda k: -widths[k])
    for k in range(1, n):
        if not timing.is_check_point(k, rule):
            continue
        pre = prefix(k)

        def within(pre=pre, k=k) -> bool:
            over = timing.first_over_target(pre, rule, k, first)
            if over is not None:
                first[:] = [over] + [p for p in first if p != over]
            return over is None

        why = timing.stop_reason(k, rule, timed[k] * ELAPSED_SLACK, within)
        if why is not None:
            return out + [problem(TIMINGS, f"$.blocks[{i}].rounds", f"block {bid}: the stopping rule stops after {k} "
                                  f"rounds ({why}), yet the block holds {n}", expected=k, found=n)]
    # and stop after the last one, for the stated reason (the elapsed time lies between the
    # timed intervals' sum and any larger value: each end gives the reasons it can)
    can = set()
    if n >= rule.max_rounds or timing.is_check_point(n, rule):
        can = {timing.stop_reason(n, rule, e, lambda: all(w <= rule.target_rel_half_width for w in widths.values()))
               for e in (timed[n] * ELAPSED_SLACK, math.inf)} - {None}
    if oc.get("stop_reason") not in can:
        out.append(problem(TIMINGS, f"$.blocks[{i}].adaptive.stop_reason", f"block {bid}: stopped after {n} rounds by "
                           f"{cut(oc.get('stop_reason'))!r}; the stopping rule, applied to the recorded rounds, "
                           + (f"stops there only by {' or '.join(sorted(can))}" if can else "does not stop there"),
                           expected=sorted(can), found=oc.get("stop_reason")))
    return out


# ------------------------------------------------------------------------------------ GEMM


def _gemm(blocks: list[tuple[int, dict]], documents: Mapping[str, Any]) -> list[Problem]:
    """Every ``kind: gemm`` block's ``flops`` is :func:`harness.extras.gemm_flops` of its
    task's recorded input ``[B, K]`` and its own output ``[B, H]``, which holds as many
    elements as the task's output on that input."""
    out = []
    tasks = as_dict(as_dict(documents.get("correctness")).get("tasks"))
    for i, b in blocks:
        if b.get("kind") != "gemm":
            continue
        bid = cut(b.get("id"))
        x = as_list(as_dict(as_dict(tasks.get(str(b.get("task")))).get("timing_input")).get("shape"))
        y = as_list(b.get("shape"))
        if not (len(x) == 2 and len(y) == 2 and all(is_int(v) and v > 0 for v in x + y)):
            out.append(problem(TIMINGS, f"$.blocks[{i}].flops", f"block {bid}: its FLOP count cannot be derived: the "
                               "task's timing-input shape [B, K] or the block's output shape [B, H] is not recorded",
                               found=[x, y]))
            continue
        if y[0] != x[0]:
            out.append(problem(TIMINGS, f"$.blocks[{i}].shape", f"block {bid}: the GEMM's output has {y[0]} rows, "
                               f"the task's timing input {x[0]}", expected=x[0], found=y[0]))
            continue
        counts = {as_dict(c).get("element_count") for c in as_dict(as_dict(as_dict(tasks.get(str(b.get("task"))))
                                                                             .get("timing_input")).get("checks")).values()}
        if counts != {y[0] * y[1]}:
            out.append(problem(TIMINGS, f"$.blocks[{i}].shape", f"block {bid}: the GEMM's output {y[0]} x {y[1]} is "
                               "not the size of the task's output on the timing input, which it feeds",
                               expected=sorted(map(str, counts)), found=y[0] * y[1]))
            continue
        want = extras.gemm_flops(x[0], x[1], y[1])
        if b.get("flops") != want:
            out.append(problem(TIMINGS, f"$.blocks[{i}].flops", f"block {bid}: the FLOP count is not 2 B K H of the "
                               f"recorded shapes (B, K = {x[0]}, {x[1]}; H = {y[1]})", expected=want,
                               found=b.get("flops")))
    return out


# ------------------------------------------------------------------------------ self-tests


def _selftest(doc: Selftest, blocks: list[tuple[int, dict]]) -> list[Problem]:
    """The self-test document against the product's own table and rules."""
    out = []
    names = [r.name for r in doc.tests]
    own = [k.name for k in selftest.TABLE]
    if names != own:
        out.append(problem(SELFTEST, "$.tests", "the self-tests are not this verifier's table of known-bad kernels, "
                           "in order", expected=own, found=[cut(n) for n in names]))
    gbps, why = _copy_gbps(blocks)
    out += why
    table = {k.name: k for k in selftest.TABLE}
    derived = []
    for j, r in enumerate(doc.tests):
        spec = table.get(r.name)
        if spec is None:
            continue
        path = f"$.tests[{j}]"
        out += _selftest_checks(spec, r.checks, r.details or {}, gbps, path)
        derived.append((j, r, selftest.SelfTest(spec.name, spec.description, spec.expect_caught_by,
                                                dict(r.checks), dict(r.details) if r.details is not None else None)))
    summary = selftest.summarise([t for _, _, t in derived])
    for (j, r, _), want in zip(derived, summary["tests"]):
        for key in ("description", "expected", "failed_checks", "caught", "as_expected"):
            got = getattr(r, key)
            got = list(got) if isinstance(got, tuple) else got
            if got != want[key]:
                out.append(problem(SELFTEST, f"$.tests[{j}].{key}", f"self-test {want['name']}: {key} is not what "
                                   + ("this verifier's table says" if key in ("description", "expected") else
                                      "its recorded outcomes and this verifier's expectations give"),
                                   expected=want[key], found=got))
    if names == own and doc.all_as_expected != summary["all_as_expected"]:
        out.append(problem(SELFTEST, "$.all_as_expected", "all_as_expected is not what the recorded outcomes and "
                           "this verifier's expectations give", expected=summary["all_as_expected"],
                           found=doc.all_as_expected))
    return out


def _selftest_checks(spec: selftest.KnownKernel, checks: Mapping[str, bool | None], details: Mapping[str, Any],
                     gbps: float | None, path: str) -> list[Problem]:
    """Which checks a kernel has (all of them, None where one does not apply) and the
    outcomes the engine derives from recorded details, derived again."""
    out = []
    if sorted(checks) != sorted(selftest.CHECKS):
        return [problem(SELFTEST, f"{path}.checks", f"self-test {spec.name}: the checks are not the engine's",
                        expected=sorted(selftest.CHECKS), found=sorted(map(str, checks)))]
    na = {"bit_identity": not spec.promises_bits, "ftz_evidence": not spec.ftz_witnessed,
          "graph_replay_after_mutation": checks.get("capture_stream_guard") is False}
    for c in selftest.CHECKS:
        v = checks[c]
        if (v is None) != na.get(c, False):
            out.append(problem(SELFTEST, f"{path}.checks.{c}", f"self-test {spec.name}: {c} "
                               + ("does not apply to this kernel" if na.get(c) else "is a check the engine makes"),
                               expected=None if na.get(c) else "true or false", found=v))
    med, ev, wall = (number(details.get(k)) for k in ("median_ms", "events_ms_50_calls", "device_wall_ms_50_calls"))
    bits = details.get("bit_identical_count")
    if med is None or ev is None or wall is None or not is_int(bits):
        return out + [problem(SELFTEST, f"{path}.details", f"self-test {spec.name}: the details the engine records "
                              "(median_ms, events and wall ms of 50 calls, bit_identical_count) are missing")]
    apparent = selftest.apparent_gbps(med)
    if not _close(number(details.get("apparent_GBps")), None if math.isinf(apparent) else apparent):
        out.append(problem(SELFTEST, f"{path}.details.apparent_GBps", f"self-test {spec.name}: the apparent bandwidth "
                           "is not the timed bytes over the recorded median", expected=apparent,
                           found=details.get("apparent_GBps")))
    want = {"bit_identity": selftest.bits_check(spec, bits), "timed_stream_covers_work": selftest.covers(ev, wall)}
    if gbps is not None:
        want["physical_speed_limit"] = selftest.speed_check(med, gbps)
    for c, w in want.items():
        if checks[c] != w:
            out.append(problem(SELFTEST, f"{path}.checks.{c}", f"self-test {spec.name}: {c} does not follow from the "
                               "recorded details" + (" and the run's copy bandwidth" if c == "physical_speed_limit"
                                                     else ""), expected=w, found=checks[c]))
    return out
