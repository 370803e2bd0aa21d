"""Completeness and derivation rules over a candidate run's typed records: fail closed.

:mod:`kbrepro.model.candidates` decides that each field has its type and range; this module
decides that the records are *complete* for the kind of run they describe and *agree* with one
another and with what the verifier derives from the raw data with its own code:

* the configuration is the profile's protocol, the stages and the failure name the same stop,
  and the cases are exactly the ones a checking pass of that protocol records up to that stop;
* every case's inputs have the dtypes and shapes the pinned task gives at the run's sizes
  (:mod:`kbrepro.model.task_inputs`), and its summary fields agree with its raw ones
  (``reference_range`` with ``max_abs_reference`` and ``discriminating``);
* a GPU run holds a profiled call, every baseline, block, arm, round, per-call and spot-check
  record its protocol writes; the arm order of every round is the seeded shuffle; the
  invocations per request follow the calibration rule; the roofline's bytes, time and
  bandwidth are the ones derived from the shapes, the warm block and the raw copy block;
* a custom kernel that a passing ``custom_kernel_ran`` names is defined by a bundled binary.

Each rule returns :class:`~kbrepro.model.problems.Problem` records (codes ``record.*``); the
verifier fails the documents tier on any of them, the packer refuses to pack. "Cannot decide"
is left to the named checks, only where the run kind says why (a CPU run has no timing).
"""
from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping, Optional, Sequence

from kbrepro.model import problems as P
from kbrepro.model import protocol
from kbrepro.model.candidates import CandidateRecord, CandidatesDoc, Case, CopyBlock
from kbrepro.model.problems import Problem
from kbrepro.model.task_inputs import Undecidable, input_specs, parse_digest, size_globals

#: relative difference under which a stated float equals the derived one (the engine computes
#: it with the same rule; only the last bits of a float may differ)
FLOAT_REL = 1e-9
#: how far the eager calibration of invocations per request may be from the eager arm's
#: median in the same block (a factor): the calibration is one region of the profile's
#: invocations, the block's rounds are regions of the calibrated count
CALIBRATION_FACTOR = 2.0


#: the memory bandwidth (GB/s) a copy can at most reach on a GPU, by the name the environment
#: records (vendors' datasheets: HBM/GDDR peak), and on a GPU not in the table; a measured copy
#: bandwidth above COPY_PEAK_SLACK times it is not a measurement
GPU_PEAK_GBPS = {"H200": 4800.0, "H100 SXM": 3350.0, "H100 NVL": 3900.0, "H100 PCIe": 2000.0, "H100": 3350.0,
                 "H20": 4000.0, "GH200": 4900.0, "B200": 8000.0, "B100": 8000.0, "GB200": 8000.0,
                 "A100-SXM4-80GB": 2039.0, "A100 80GB PCIe": 1935.0, "A100": 2039.0, "L40S": 864.0, "L40": 864.0,
                 "L4": 300.0, "A10G": 600.0, "A10": 600.0, "V100": 900.0, "T4": 320.0, "RTX 4090": 1008.0,
                 "RTX 3090": 936.0, "RTX 5090": 1792.0, "MI300X": 5300.0, "MI250X": 3277.0}
UNKNOWN_GPU_PEAK_GBPS = 12000.0
COPY_PEAK_SLACK = 1.15


def gpu_peak_gbps(gpu_name: Optional[str]) -> float:
    """The peak of :data:`GPU_PEAK_GBPS` whose key the GPU's name contains (the longest key
    first), else :data:`UNKNOWN_GPU_PEAK_GBPS`."""
    for key in sorted(GPU_PEAK_GBPS, key=len, reverse=True):
        if gpu_name and key.lower() in gpu_name.lower():
            return GPU_PEAK_GBPS[key]
    return UNKNOWN_GPU_PEAK_GBPS


@dataclass(frozen=True)
class Evidence:
    """What the rules read beside a record: the pinned task's source (None where the verifier
    already failed it), the payload (bundle path under ``data/`` -> bytes: SASS listings and
    binaries), and what environment.json states of the machine (its L2 size and GPU name:
    held against the records, never used in their place)."""

    task_src: Optional[bytes]
    files: Mapping[str, bytes]
    l2_cache_bytes: Optional[int]
    gpu_name: Optional[str]


def _close(a: float, b: float, rel: float = FLOAT_REL) -> bool:
    return math.isfinite(a) and math.isfinite(b) and abs(a - b) <= rel * max(abs(a), abs(b))


def _p(code: str, path: str, msg: str, expected=None, found=None) -> Problem:
    return Problem(code, path, msg, expected, found)


def derived_gbps(block: CopyBlock) -> Optional[float]:
    """The copy bandwidth (GB/s) of a raw copy block, by :func:`protocol.copy_gbps`; None for a
    block that is not complete (:func:`copy_block_problems`)."""
    if copy_block_problems(block, "$"):
        return None
    gbps = protocol.copy_gbps(block.bytes_moved, [r.times_ms for r in block.rounds], block.arms)
    return gbps if math.isfinite(gbps) else None


def copy_block_problems(block: CopyBlock, at: str) -> list[Problem]:
    """A copy block is what harness.extras.copy_bandwidth writes: its protocol
    (graph replays, :data:`protocol.COPY_PROTOCOL`), both arms in every round in the seeded
    order, as many rounds as the protocol says."""
    out = []
    want = protocol.COPY_PROTOCOL
    pr = block.protocol
    if (pr.mode, pr.warmups, pr.rounds, pr.invocations_per_pair, pr.order_seed) != want or \
            len(block.rounds) != pr.rounds or sorted(block.arms) != ["elementwise", "memcpy"]:
        out.append(_p(P.CONTRADICTS, f"{at}.protocol", "is not the copy block's protocol", list(want),
                      [pr.mode, pr.warmups, pr.rounds, pr.invocations_per_pair, pr.order_seed]))
        return out
    for k, (row, order) in enumerate(zip(block.rounds, _order(block.arms, pr.order_seed, pr.rounds))):
        if list(row.order) != order or sorted(row.times_ms) != sorted(block.arms) or row.host_ms:
            out.append(_p(P.INCOMPLETE, f"{at}.rounds[{k}]", "does not time both copies once in the seeded order"))
            break
    return out


def document_problems(doc: CandidatesDoc, gpu_name: Optional[str] = None) -> list[Problem]:
    """Rules over the whole document: the predicate is the profile's; the run ends after it
    starts; the run's copy bandwidth is derived from its raw block (a GPU run always measures
    it; a CPU run never) and is one the GPU the environment names can reach
    (:func:`gpu_peak_gbps`); a sharded run's cases ran on the document's device."""
    out: list[Problem] = []
    if doc.finished_utc < doc.started_utc:
        out.append(_p(P.CONTRADICTS, "$.finished_utc", "is before started_utc"))
    for j, c in enumerate(doc.cases or ()):
        if c.ran_on is not None and c.ran_on.device != doc.device:
            out.append(_p(P.CONTRADICTS, f"$.cases[{j}].ran_on.device", "is not the run's device", doc.device,
                          c.ran_on.device))
    peak = gpu_peak_gbps(gpu_name) * COPY_PEAK_SLACK
    blocks = [("$.bandwidth.block", doc.bandwidth.block)] + [(f"$.candidates[{i}].case.bandwidth_block", r.case.bandwidth_block)
                                                             for i, r in enumerate(doc.candidates) if r.case]
    for path, blk in blocks:
        g = derived_gbps(blk) if blk is not None else None
        if g is not None and g > peak:
            out.append(_p(P.CONTRADICTS, path, f"gives a copy bandwidth of {g:.0f} GB/s, more than the "
                          f"{gpu_name or 'unnamed GPU'} can move ({peak:.0f} GB/s with {COPY_PEAK_SLACK - 1:.0%} slack)"))
    base = protocol.PROFILES[doc.profile]
    if doc.predicate.atol != base.atol or doc.predicate.rtol != base.rtol:
        out.append(_p(P.CONTRADICTS, "$.predicate", f"atol/rtol are not the {doc.profile} profile's "
                      f"{base.atol:g}/{base.rtol:g}"))
    bw = doc.bandwidth
    if doc.device == "cuda":
        if bw.gbps is None or bw.block is None:
            out.append(_p(P.INCOMPLETE, "$.bandwidth", "a GPU run measures the copy bandwidth: the raw copy block and "
                          "its GB/s are missing"))
        else:
            out += copy_block_problems(bw.block, "$.bandwidth.block")
            want = derived_gbps(bw.block)
            if want is not None and not _close(bw.gbps, want):
                out.append(_p(P.DERIVED, "$.bandwidth.gbps", "is not the bandwidth of its raw copy block", want, bw.gbps))
    elif bw.gbps is not None or bw.block is not None:
        out.append(_p(P.CONTRADICTS, "$.bandwidth", "a CPU run measures no copy bandwidth"))
    return out


def _variant_sizes(rec: CandidateRecord, case: Case, shapes: Sequence[Mapping[str, int]]) -> Optional[dict]:
    sizes = dict(rec.config.sizes)
    if case.kind == "extra_shape":
        m = re.fullmatch(r"shape(\d+)", case.id)
        if not m or int(m.group(1)) >= len(shapes):
            return None
        sizes.update(shapes[int(m.group(1))])
    return sizes


def _specs(task_src: bytes, sizes: Mapping[str, int], cache: dict) -> tuple:
    key = tuple(sorted(sizes.items()))
    if key not in cache:
        cache[key] = input_specs(task_src, sizes)
    return cache[key]


def _stage_problems(rec: CandidateRecord, at: str, cuda: bool) -> Iterator[Problem]:
    names = [s.name for s in rec.stages]
    order = [s for s in protocol.STAGES if cuda or s != "timing"]
    if names != order[:len(names)]:
        yield _p(P.CONTRADICTS, f"{at}.stages", f"are not the run's stages in order ({', '.join(order)})",
                 order, names)
        return
    failure = rec.observations.failure
    if failure is None and names != order:
        yield _p(P.INCOMPLETE, f"{at}.stages", "a run without a failure ran every stage", order, names)
    if failure is not None:
        if not names or not failure.startswith(f"{names[-1]}: "):
            yield _p(P.CONTRADICTS, f"{at}.observations.failure", "does not name the stage the run stopped in "
                     f"({names[-1] if names else 'none ran'})")


#: slack of the wall-clock inequalities (s): clocks are read at different points of one request
_CLOCK_SLACK_S = 1e-3


def _clock_problems(rec: CandidateRecord, at: str) -> Iterator[Problem]:
    """The parent's wall clocks nest: a stage lasts at least as long as the requests it made
    (the build's own clock, each case's ``host_ms``, each timed request's), and the whole run
    at least as long as its stages."""
    inner = {"build": rec.observations.build.host_s if rec.observations.build else 0.0,
             "checking pass": 0.0, "timing": 0.0, "weights and shapes": 0.0}
    stage_of = {"timing_input": "timing", "redrawn_weights": "weights and shapes"}
    for c in rec.observations.cases:
        st = stage_of.get(c.id, "weights and shapes" if c.kind == "extra_shape" else "checking pass")
        inner[st] += c.host_ms / 1e3
    inner["timing"] += sum(r.host_ms.get("candidate", 0.0) for b in rec.blocks for r in b.rounds) / 1e3
    for j, s in enumerate(rec.stages):
        if s.seconds + _CLOCK_SLACK_S < inner[s.name]:
            yield _p(P.CONTRADICTS, f"{at}.stages[{j}].seconds", f"is shorter than the {inner[s.name]:.3f} s its "
                     "requests took by the parent's clock", None, s.seconds)
    total = sum(s.seconds for s in rec.stages)
    if rec.seconds + _CLOCK_SLACK_S < total:
        yield _p(P.CONTRADICTS, f"{at}.seconds", f"is shorter than its stages ({total:.3f} s)", None, rec.seconds)


def _case_problems(rec: CandidateRecord, at: str, cuda: bool, shapes: list) -> Iterator[Problem]:
    cfg = protocol.PROFILES[rec.config.profile]
    want = protocol.expected_cases(cfg, len(shapes), cuda)
    got = [(c.id, c.kind) for c in rec.observations.cases]
    names = [s.name for s in rec.stages]
    failure = rec.observations.failure
    # where the cases must have got to, given the stage that stopped: every case of the stages
    # that finished
    through = {"build": 0, "checking pass": want.index(("profiled", "profiled")) + 1}
    through["timing"] = through["checking pass"] + (1 if cuda else 0)
    done = [n for n in names if failure is None or not failure.startswith(f"{n}: ")]
    least = max([through.get(n, 0) for n in done] + [0]) if failure is not None else len(want)
    upto = {"build": 0, "checking pass": through["checking pass"], "timing": through["timing"],
            "weights and shapes": len(want)}
    most = upto.get(names[-1], len(want)) if failure is not None and names else len(want)
    if failure is None and got != want:
        yield _p(P.INCOMPLETE, f"{at}.observations.cases", f"are not the cases a complete checking pass of this "
                 f"profile records ({len(got)} recorded, {len(want)} expected)")
        return
    if failure is not None and (got != want[:len(got)] or not least <= len(got) <= most):
        yield _p(P.INCOMPLETE, f"{at}.observations.cases", f"are not the cases a checking pass records up to the "
                 f"stage it stopped in ({len(got)} recorded, {least} to {most} expected)")
        return
    ids = [c.id for c in rec.observations.cases]
    poison = [c for c in rec.observations.cases if c.kind == "poison"]
    for j, c in enumerate(rec.observations.cases):
        if (c.set, c.model) != protocol.case_set_and_model(cfg, c.id):
            yield _p(P.CONTRADICTS, f"{at}.observations.cases[{j}]", "its input set and model are not the ones the "
                     "protocol calls for this case", list(protocol.case_set_and_model(cfg, c.id)), [c.set, c.model])
        if c.held_over is not None and c.held_over not in ids[:j]:
            yield _p(P.CONTRADICTS, f"{at}.observations.cases[{j}].held_over", "names no earlier case")
        if c.matches_other is not None and not set(c.matches_other) <= set(ids) - {c.id}:
            yield _p(P.CONTRADICTS, f"{at}.observations.cases[{j}].matches_other", "names a case that is not another case")
        if len(c.digests_before) != len(c.digests_parent) or len(c.digests_after) != len(c.digests_parent):
            yield _p(P.INCOMPLETE, f"{at}.observations.cases[{j}]", "its child and parent digests are not one per input")
    for i, c in enumerate(poison):
        if c.poison_byte is not None and c.poison_byte != cfg.poison_bytes[i]:
            yield _p(P.CONTRADICTS, f"{at}.observations.cases", f"poisoned case {c.id} names another byte than the "
                     "profile's", cfg.poison_bytes[i], c.poison_byte)


def _reference_facts(cm) -> Optional[tuple]:
    """What a full comparison says of its reference alone (the same for every output compared
    with that reference): element count, max |reference|, the reference's non-finite counts."""
    if not cm.shape_match:
        return None
    nf = cm.nonfinite
    return cm.element_count, cm.max_abs_reference, nf.reference_nan, nf.reference_posinf, nf.reference_neginf


def _flag_problems(cm, path: str, atol: float) -> Iterator[Problem]:
    """A full comparison's flags are functions of its reference: ``discriminating`` is whether
    max |reference| exceeds atol; ``null_candidate_passes`` whether every reference value is
    finite and within atol of zero (``torch.isclose(reference, 0)``, harness/checks.py)."""
    if not cm.shape_match:
        return
    nf = cm.nonfinite
    finite = nf.reference_nan + nf.reference_posinf + nf.reference_neginf == 0
    m = cm.max_abs_reference
    if cm.discriminating != (m is not None and m > atol):
        yield _p(P.CONTRADICTS, f"{path}.discriminating", "is not whether max |reference| exceeds atol")
    if cm.null_candidate_passes != (finite and (m is None or m <= atol)):
        yield _p(P.CONTRADICTS, f"{path}.null_candidate_passes", "is not whether every reference value is finite and "
                 "within atol of zero")


def _reference_key(cfg, case_id: str) -> str:
    """Which reference a case was compared with (harness/candidate.py): the first set's for
    its own case, the repeat, the poisoned and the profiled calls; the timing input's for
    the timing input and every baseline; its own for the others."""
    first = f"s{cfg.seeds[0]}/{cfg.distributions[0]}"
    if case_id == first or case_id in ("repeat", "profiled") or case_id.startswith("poison"):
        return first
    return "timing" if case_id == "timing_input" else case_id


def _summary_problems(rec: CandidateRecord, at: str, atol: float) -> Iterator[Problem]:
    """Summary fields against raw ones: a case's reference range against the largest
    |reference|; every comparison's flags against its reference (:func:`_flag_problems`); and
    every comparison with one reference (cases of one set, the baselines and the timing input)
    saying the same of it."""
    cfg = protocol.PROFILES[rec.config.profile]
    facts: dict = {}

    def same(key: str, cm, path: str) -> Iterator[Problem]:
        f = _reference_facts(cm)
        if f is None:
            return
        if key in facts and facts[key][0] != f:
            yield _p(P.CONTRADICTS, path, f"says other things of its reference than {facts[key][1]}, compared with the "
                     "same reference")
        facts.setdefault(key, (f, path))

    for j, c in enumerate(rec.observations.cases):
        cm = c.compare
        cp = f"{at}.observations.cases[{j}].compare"
        yield from _flag_problems(cm, cp, atol)
        single = (c.reference_count or 1) == 1 or cm.official.passed  # the record's compare is the first output's
        if single:
            yield from same(_reference_key(cfg, c.id), cm, cp)
        lo, hi = c.reference_range
        if single and cm.max_abs_reference is not None and lo is not None:
            peak = max(abs(lo), abs(hi))
            if not _close(peak, cm.max_abs_reference, 1e-12) and not (peak == cm.max_abs_reference == 0):
                yield _p(P.CONTRADICTS, f"{at}.observations.cases[{j}].reference_range",
                         "its largest |value| is not the comparison's max_abs_reference", cm.max_abs_reference, peak)
        if single and lo is None and cm.max_abs_reference is not None:
            yield _p(P.CONTRADICTS, f"{at}.observations.cases[{j}].reference_range",
                     "says the reference has no finite value, its comparison says it has")
        spec = parse_digest(c.output.digest) if c.output.digest else None
        if single and spec is not None and cm.shape_match and cm.element_count is not None:
            n = 1
            for d in spec.shape:
                n *= d
            if n != cm.element_count:
                yield _p(P.CONTRADICTS, f"{at}.observations.cases[{j}].output.digest",
                         "the output's shape does not hold the compared element count", cm.element_count, n)
    for name, b in rec.timing.baselines.items():
        if b.compare is not None:
            bp = f"{at}.timing.baselines.{name}.compare"
            yield from _flag_problems(b.compare, bp, atol)
            yield from same("timing", b.compare, bp)
    for j, sc in enumerate(rec.timing.per_call.spot_checks if rec.timing.per_call else ()):
        yield from _flag_problems(sc.compare, f"{at}.timing.per_call.spot_checks[{j}].compare", atol)


def _input_problems(rec: CandidateRecord, at: str, task_src: Optional[bytes], shapes: list,
                    cache: dict) -> Iterator[Problem]:
    if task_src is None:
        return
    for j, c in enumerate(rec.observations.cases):
        sizes = _variant_sizes(rec, c, shapes)
        if sizes is None:
            yield _p(P.CONTRADICTS, f"{at}.observations.cases[{j}].id", "names no extra shape of the run")
            continue
        try:
            specs = _specs(task_src, sizes, cache)
        except Undecidable as exc:
            yield _p(P.INCOMPLETE, f"{at}.task", f"the inputs of the task cannot be derived from its source ({exc}): "
                     "its recorded shapes cannot be checked")
            return
        want = [s.digest_prefix() if s else None for s in specs]
        got = [None if d is None else "|".join(d.split("|")[:2]) for d in c.digests_parent]
        if want != got:
            yield _p(P.DERIVED, f"{at}.observations.cases[{j}].digests_parent", "the recorded inputs are not the ones "
                     "the task gives at the run's sizes", want, got)


def _order(arms: Sequence[str], seed: int, rounds: int) -> list[list[str]]:
    rng = random.Random(seed)
    out = []
    for _ in range(rounds):
        order = list(arms)
        rng.shuffle(order)
        out.append(order)
    return out


def _block_problems(rec: CandidateRecord, at: str, gbps: Optional[float], task_src: Optional[bytes],
                    cache: dict, l2_cache_bytes: Optional[int]) -> Iterator[Problem]:
    cfg = protocol.PROFILES[rec.config.profile]
    timing = rec.timing
    if rec.observations.profile is None or rec.observations.profile.marker_stream is None:
        yield _p(P.INCOMPLETE, f"{at}.observations.profile", "a GPU run profiles one call (its kernels and the marker's "
                 "stream)")
    if sorted(timing.baselines) != sorted(cfg.baselines):
        yield _p(P.INCOMPLETE, f"{at}.timing.baselines", "are not the profile's baselines", list(cfg.baselines),
                 sorted(timing.baselines))
        return
    ran = [a for a in cfg.baselines if timing.baselines[a].skipped is None]
    if "eager" not in ran:  # the task's own model: every reference of the checking pass came from it
        yield _p(P.CONTRADICTS, f"{at}.timing.baselines.eager", "is skipped, yet the checking pass compared every "
                 "output with that very model's")
        return
    arms = [*ran, "candidate"]
    want = [("warm", cfg.rounds)] + ([("cold", cfg.cold_rounds)] if cfg.cold_l2 else [])
    got = [(b.l2, len(b.rounds)) for b in rec.blocks]
    if got != want:
        yield _p(P.INCOMPLETE, f"{at}.blocks", f"are not the profile's timing blocks ({want})", None, got)
        return
    for j, b in enumerate(rec.blocks):
        bp = f"{at}.blocks[{j}]"
        seed = cfg.order_seed + (1 if b.l2 == "cold" else 0)
        if list(b.arms) != arms or b.id != f"{rec.name}/{b.l2}" or b.candidate != rec.name:
            yield _p(P.INCOMPLETE, f"{bp}.arms", f"are not the baselines that ran and the candidate: {arms}")
            continue
        pr = b.protocol
        if (pr.mode, pr.warmups, pr.rounds, pr.order_seed, pr.l2) != ("events", cfg.warmups, len(b.rounds), seed, b.l2):
            yield _p(P.CONTRADICTS, f"{bp}.protocol", "is not the profile's protocol for this block")
        want_flush = None if b.l2 == "warm" else (2 * l2_cache_bytes if l2_cache_bytes else -1)
        if b.flush_bytes != want_flush:
            yield _p(P.DERIVED, f"{bp}.flush_bytes", "a cold block flushes twice the L2 the environment records, a "
                     "warm one does not flush", want_flush, b.flush_bytes)
        broken = next((k for k, (row, order) in enumerate(zip(b.rounds, _order(arms, seed, len(b.rounds))))
                       if list(row.order) != order or sorted(row.times_ms) != sorted(arms)
                       or list(row.host_ms) != ["candidate"]), None)
        if broken is not None:
            yield _p(P.INCOMPLETE, f"{bp}.rounds[{broken}]", "does not time every arm once in the seeded order and "
                     "clock the candidate")
            return  # the derivations below read every arm of every round
        inv = pr.invocations_per_pair
        eager = protocol.roofline_median_ms([r.times_ms["eager"] for r in b.rounds])
        # inv = the rule for a calibration e within CALIBRATION_FACTOR of the eager arm's median
        lo = protocol.invocations_per_request(cfg.invocations_per_pair, eager * CALIBRATION_FACTOR)
        hi = protocol.invocations_per_request(cfg.invocations_per_pair, eager / CALIBRATION_FACTOR)
        if not lo <= inv <= hi:
            yield _p(P.DERIVED, f"{bp}.protocol.invocations_per_pair", "is not what the calibration rule gives for "
                     f"the eager arm's {eager:.4g} ms (ceil({protocol.TARGET_REQUEST_MS:g} ms / eager) between "
                     f"{cfg.invocations_per_pair} and {protocol.MAX_INVOCATIONS}, the calibration within a factor "
                     f"{CALIBRATION_FACTOR:g})", [lo, hi], inv)
    pc = timing.per_call
    if pc is None:
        yield _p(P.INCOMPLETE, f"{at}.timing.per_call", "a GPU run times the candidate call by call")
    else:
        for key in ("fresh", "repeat"):
            rows = getattr(pc, key)
            if len(rows) != cfg.fresh_rounds or any(len(r.times_ms) != cfg.fresh_sets for r in rows) \
                    or [r.round for r in rows] != list(range(len(rows))):
                yield _p(P.INCOMPLETE, f"{at}.timing.per_call.{key}", f"is not {cfg.fresh_rounds} rounds of "
                         f"{cfg.fresh_sets} calls")
        if len(pc.spot_checks) != cfg.fresh_rounds or pc.sets_per_round != cfg.fresh_sets or any(
                s.round != i or s.index >= cfg.fresh_sets for i, s in enumerate(pc.spot_checks)):
            yield _p(P.INCOMPLETE, f"{at}.timing.per_call.spot_checks", f"is not one check per round of "
                     f"{cfg.fresh_sets} calls")
    roof = timing.roofline
    if roof is None:
        yield _p(P.INCOMPLETE, f"{at}.timing.roofline", "a GPU run holds its time against the copy bandwidth")
        return
    med = protocol.roofline_median_ms([r.times_ms["candidate"] for r in rec.blocks[0].rounds])
    if not _close(roof.median_ms, med):
        yield _p(P.DERIVED, f"{at}.timing.roofline.median_ms", "is not the warm block's median", med, roof.median_ms)
    if gbps is None or roof.bandwidth_gbps is None or not _close(roof.bandwidth_gbps, gbps):
        yield _p(P.DERIVED, f"{at}.timing.roofline.bandwidth_gbps", "is not the copy bandwidth derived from the raw "
                 "copy block of the process that ran it", gbps, roof.bandwidth_gbps)
    tcase = next((c for c in rec.observations.cases if c.id == "timing_input"), None)
    if tcase is None or task_src is None:
        return
    try:
        specs = _specs(task_src, dict(rec.config.sizes), cache)
    except Undecidable:
        return  # reported by the input rule
    out = parse_digest(tcase.output.digest) if tcase.output.digest else None
    if out is None or not tcase.compare.shape_match:
        yield _p(P.INCOMPLETE, f"{at}.observations.cases", "the timing input's output has no recorded dtype and shape "
                 "to derive the bytes moved from")
        return
    n_in = [s.nbytes for s in specs if s is not None]
    want = protocol.bytes_moved(n_in, [out.nbytes])
    if (tcase.reference_count or 1) == 1 and roof.bytes_moved != want or roof.bytes_moved < want:
        yield _p(P.DERIVED, f"{at}.timing.roofline.bytes_moved", "is not the bytes of the task's inputs and output at "
                 "the run's sizes", want, roof.bytes_moved)


_UTC_SLACK_S = 5.0


def _utc_s(utc: str) -> int:
    """Seconds of a ``YYYY-MM-DDTHH:MM:SSZ`` stamp (the model's pattern) since 1970."""
    import calendar
    import time as _time

    return calendar.timegm(_time.strptime(utc, "%Y-%m-%dT%H:%M:%SZ"))


def _provenance_file(rec: CandidateRecord, path: str):
    return next((f for f in rec.provenance.files if f.path == path), None)


def _binary_problems(rec: CandidateRecord, at: str, files: Mapping[str, bytes]) -> Iterator[Problem]:
    """Every binary the record describes is a copied provenance file with that hash (as
    built), and its SASS listing lies in the candidate's own sass/ folder."""
    for j, b in enumerate(rec.provenance.binaries):
        f = _provenance_file(rec, b.file)
        if f is None or not f.copied or b.sha256 not in (f.sha256, f.built_sha256):
            yield _p(P.CONTRADICTS, f"{at}.provenance.binaries[{j}].file", "is not a bundled provenance file with "
                     "this hash: a binary nobody can inspect", None, b.file)
        if b.sass_file is not None and not b.sass_file.startswith(f"provenance/{rec.name}/sass/"):
            yield _p(P.CONTRADICTS, f"{at}.provenance.binaries[{j}].sass_file", f"lies outside provenance/{rec.name}/sass/")


def _binaries_with_sass(rec: CandidateRecord, files: Mapping[str, bytes]) -> list[tuple[frozenset, bytes]]:
    """``(functions its SASS listing defines, the binary's bytes)`` per bundled binary."""
    out = []
    for b in rec.provenance.binaries:
        f = _provenance_file(rec, b.file)
        if b.sass_file is None or f is None or f.bundle_path is None:
            continue
        sass = files.get(b.sass_file, b"").decode("utf-8", "replace")
        out.append((sass_functions([sass]), files.get(f.bundle_path, b"")))
    return out


def _in_binary(function: str, data: bytes) -> bool:
    """The kernel's symbol name is in the binary's bytes (its ELF string table)."""
    return function.encode("ascii", "replace") in data


def kernel_base_name(profiled: str) -> str:
    """The identifier a profiler's (demangled) kernel name defines: ``void ns::k<4>(float*)``
    gives ``k``."""
    s = profiled.split("(", 1)[0].strip()
    depth, out = 0, []
    for ch in s:  # drop template arguments
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    s = "".join(out).split()[-1] if "".join(out).split() else ""
    return s.rsplit("::", 1)[-1]


def defines(functions: Iterable[str], profiled: str) -> bool:
    """Whether a binary whose SASS lists ``functions`` (mangled or plain names) defines the
    kernel the profiler named ``profiled``: the plain name, or its Itanium-mangled source name
    (``<length><name>``) inside a mangled one."""
    base = kernel_base_name(profiled)
    if not base:
        return False
    mangled = f"{len(base)}{base}"
    return any(f == base or (f.startswith("_Z") and mangled in f) for f in functions)


_SASS_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)\s*$", re.MULTILINE)


def sass_functions(sass_texts: Iterable[str]) -> frozenset[str]:
    """The kernel names cuobjdump's SASS listings define (``Function : name`` lines)."""
    out: set[str] = set()
    for t in sass_texts:
        out.update(_SASS_FUNCTION.findall(t))
    return frozenset(out)


def record_problems(doc: CandidatesDoc, i: int, ev: Evidence, custom: Sequence[str],
                    custom_passed: Optional[bool]) -> list[Problem]:
    """Every rule of the module docstring for the record ``doc.candidates[i]``, with the
    :class:`Evidence` beside it; ``custom``: the custom kernels its profiled call launched, and
    ``custom_passed`` the derived verdict of ``custom_kernel_ran``."""
    rec = doc.candidates[i]
    at = f"$.candidates[{i}]"
    out: list[Problem] = []
    base = protocol.PROFILES[doc.profile]
    own = base.to_doc()
    cfg = rec.config
    for k, v in own.items():
        if k in protocol.USER_FIELDS or k in protocol.LIMIT_FIELDS:
            continue
        got = getattr(cfg, k)
        if (list(got) if isinstance(got, tuple) else got) != v:
            out.append(_p(P.CONTRADICTS, f"{at}.config.{k}", f"is not the {doc.profile} profile's", v, got))
    if out:
        return out
    cuda = doc.device == "cuda"
    task_src = ev.task_src
    out += _stage_problems(rec, at, cuda)
    span = (_utc_s(doc.finished_utc) - _utc_s(doc.started_utc)) if doc.finished_utc >= doc.started_utc else 0
    if rec.seconds > span + _UTC_SLACK_S:
        out.append(_p(P.CONTRADICTS, f"{at}.seconds", f"is longer than the run ({span} s from started_utc to "
                      "finished_utc)", None, rec.seconds))
    devices = {c.reference_device for c in rec.observations.cases}
    if len(devices) > 1 or any(not d.startswith(doc.device) for d in devices):
        out.append(_p(P.CONTRADICTS, f"{at}.observations.cases", "the references are not all on the run's device",
                      doc.device, sorted(devices)))
    glob = size_globals(task_src) if task_src is not None else None
    if glob is not None:
        unknown = sorted(set(cfg.sizes) - set(glob))
        for extra in cfg.extra_shapes:
            unknown += sorted(set(extra) - set(glob))
        if unknown:
            out.append(_p(P.CONTRADICTS, f"{at}.config.sizes", f"names {', '.join(unknown[:4])}, not a size of the task"))
            return out
    shapes = [dict(s) for s in cfg.extra_shapes]
    if not shapes and glob is not None:
        shapes = protocol.default_extra_shapes({**glob, **dict(cfg.sizes)})
    if glob is not None:
        run_sizes = {**glob, **dict(cfg.sizes)}
        for j, x in enumerate(shapes):
            if not x or all(run_sizes.get(k) == v for k, v in x.items()):
                out.append(_p(P.CONTRADICTS, f"{at}.config.extra_shapes[{j}]", "changes no size of the run: it checks "
                              "the main shape again, not another one", None, x))
    obs = rec.observations
    if obs.extra_shapes is not None and [dict(s) for s in obs.extra_shapes] != shapes:
        out.append(_p(P.DERIVED, f"{at}.observations.extra_shapes", "are not the extra shapes the configuration and the "
                      "task give", shapes, [dict(s) for s in obs.extra_shapes]))
    if obs.failure is None and obs.extra_shapes is None:
        out.append(_p(P.INCOMPLETE, f"{at}.observations.extra_shapes", "a complete run records its extra shapes"))
    out += _case_problems(rec, at, cuda, shapes)
    if out:
        return out
    if rec.compile_seconds != (obs.build.host_s if obs.build else None):
        out.append(_p(P.DERIVED, f"{at}.compile_seconds", "is not the build's own time (observations.build.host_s)"))
    cache: dict = {}
    out += _clock_problems(rec, at)
    out += _summary_problems(rec, at, doc.predicate.atol)
    out += _input_problems(rec, at, task_src, shapes, cache)
    out += _binary_problems(rec, at, ev.files)
    built = sorted({"load_inline" for _ in rec.provenance.builds} | {
        "triton" for f in rec.provenance.files if f.path.startswith("triton/") and f.path.endswith(".cubin")})
    if list(rec.provenance.built_with) != built:
        out.append(_p(P.DERIVED, f"{at}.provenance.built_with", "is not what its provenance files show", built,
                      list(rec.provenance.built_with)))
    if obs.failure is None:
        if obs.build is None or not obs.build.flags_before or not obs.build.flags_after_build:
            out.append(_p(P.INCOMPLETE, f"{at}.observations.build", "a build records the precision flags before the "
                          "import and after the build"))
    if not cuda:
        if rec.blocks or rec.timing.per_call is not None or rec.timing.roofline is not None or rec.timing.baselines \
                or obs.profile is not None:
            out.append(_p(P.CONTRADICTS, f"{at}.timing", "a CPU run has no timing and no profiled call"))
        return out
    if custom_passed and not any(defines(fns, n) and any(_in_binary(f, data) for f in fns if defines([f], n))
                                 for fns, data in _binaries_with_sass(rec, ev.files) for n in custom):
        out.append(_p(P.CONTRADICTS, f"{at}.observations.profile.kernels", "custom_kernel_ran passes on a kernel no "
                      "bundled binary defines", None, list(custom)[:3]))
    timed = obs.failure is None or any(s.name == "weights and shapes" for s in rec.stages)
    if not timed:
        return out
    if rec.case is not None:
        blk = rec.case.bandwidth_block
        gbps = derived_gbps(blk) if blk is not None else None
        if gbps is None or rec.case.bandwidth_gbps is None or not _close(gbps, rec.case.bandwidth_gbps):
            out.append(_p(P.DERIVED, f"{at}.case.bandwidth_gbps", "is not the bandwidth of the case's own raw copy block",
                          gbps, rec.case.bandwidth_gbps))
    else:
        gbps = derived_gbps(doc.bandwidth.block) if doc.bandwidth.block is not None else None
    out += _block_problems(rec, at, gbps, task_src, cache, ev.l2_cache_bytes)
    return out


__all__ = ["Evidence", "gpu_peak_gbps", "document_problems", "record_problems", "derived_gbps", "sass_functions", "defines", "kernel_base_name"]
