"""Rules over a candidate's timing records (DESIGN.md section 7a): the copy block and the
bandwidth derived from it, the timing blocks of both protocols (arms, rounds in the seeded
order, the invocation calibration, the cold flush, protocol 2's held outputs) and protocol 2's
clock over two lengths and eager per-call times. :mod:`kbrepro.model.candidate_rules` calls them;
each returns :class:`~kbrepro.model.problems.Problem` records.
"""
from __future__ import annotations

import math
import random
import re
import statistics
from typing import Iterable, Iterator, Mapping, Optional, Sequence

from kbrepro.model import problems as P
from kbrepro.model import protocol
from kbrepro.model.candidates import CandidateRecord, CopyBlock
from kbrepro.model.problems import Problem
from kbrepro.model.sizes import SizeValue
from kbrepro.model.task_inputs import ELEMENT_BYTES, Undecidable, input_specs, parse_digest


#: relative difference under which a stated float equals the derived one (the engine computes
#: it with the same rule; only the last bits of a float may differ)
FLOAT_REL = 1e-9
#: how far the eager calibration of invocations per request may be from the eager arm's
#: median in the same block (a factor): the calibration is one region of the profile's
#: invocations, the block's rounds are regions of the calibrated count
CALIBRATION_FACTOR = 2.0
#: protocol 2 states its calibration (eager on the profile's few invocations, first calls and
#: launch overhead in them): held within this factor of the block's eager median
CALIBRATION_FACTOR_V2 = 4.0


#: the memory bandwidth (GB/s) a copy can at most reach on a GPU, by the name the environment
#: records (vendors' datasheets: HBM/GDDR peak), and on a GPU not in the table; a measured copy
#: bandwidth above COPY_PEAK_SLACK times it is not a measurement
GPU_PEAK_GBPS = {"H200": 4800.0, "H100 SXM": 3350.0, "H100 NVL": 3900.0, "H100 PCIe": 2000.0, "H100": 3350.0,
                 "H20": 4000.0, "GH200": 4900.0, "B200": 8000.0, "B100": 8000.0, "GB200": 8000.0,
                 "A100-SXM4-80GB": 2039.0, "A100 80GB PCIe": 1935.0, "A100": 2039.0, "L40S": 864.0, "L40": 864.0,
                 "L4": 300.0, "A10G": 600.0, "A10": 600.0, "V100": 900.0, "T4": 320.0, "RTX 4090": 1008.0,
                 "RTX 3090": 936.0, "RTX 5090": 1792.0, "MI300X": 5300.0, "MI250X": 3277.0}
#: a GPU not in the table: the fastest memory of any GPU of its compute capability's major
#: version in the table (Volta 7, Ampere/Ada 8, Hopper 9, Blackwell 10 and 12), else of any GPU
#: in the table (a bound from the table, never a number the bundle chose)
CC_MAJOR_PEAK_GBPS = {7: 900.0, 8: 2039.0, 9: 4900.0, 10: 8000.0, 12: 1792.0}
UNKNOWN_GPU_PEAK_GBPS = max(GPU_PEAK_GBPS.values())
COPY_PEAK_SLACK = 1.15
#: a cold-L2 median may be this fraction of the same arm's warm median, at least (noise; the
#: flush only adds time)
COLD_WARM_FLOOR = 0.9
#: eager's warm median may be this multiple of its per-call median on the fresh sets, at most
#: (plus EAGER_BLOCK_SLACK_MS); measured ratios 0.33 to 0.44 (candidates-quick-format7.tar)
EAGER_BLOCK_SLACK = 1.25
EAGER_BLOCK_SLACK_MS = 0.002
#: the L2 size (bytes) torch reports, by the GPU's table key (measured on the H200, 60 MiB:
#: ../shared/H200-FACTS.md; NVIDIA's Hopper datasheets: H100 50 MiB); a GPU not here has no
#: known L2 beside the environment's word
GPU_L2_BYTES = {"H200": 60 << 20, "H100 SXM": 50 << 20, "H100 NVL": 50 << 20, "H100 PCIe": 50 << 20, "H100": 50 << 20}


def gpu_key(gpu_name: Optional[str]) -> Optional[str]:
    """The key of :data:`GPU_PEAK_GBPS` the GPU's name contains (the longest key first: "GH200"
    before "H200"), or None for a GPU not in the table."""
    for key in sorted(GPU_PEAK_GBPS, key=len, reverse=True):
        if gpu_name and key.lower() in gpu_name.lower():
            return key
    return None


def gpu_peak_gbps(gpu_name: Optional[str], compute_capability: Optional[str] = None) -> float:
    """The peak memory bandwidth (GB/s) of :data:`GPU_PEAK_GBPS` for the GPU's name; for a name
    not in the table, :data:`CC_MAJOR_PEAK_GBPS` of its compute capability (``"9.0"``) where
    known, else :data:`UNKNOWN_GPU_PEAK_GBPS`."""
    key = gpu_key(gpu_name)
    if key is not None:
        return GPU_PEAK_GBPS[key]
    m = _CC.match(compute_capability) if isinstance(compute_capability, str) else None
    return CC_MAJOR_PEAK_GBPS.get(int(m.group(1)), UNKNOWN_GPU_PEAK_GBPS) if m else UNKNOWN_GPU_PEAK_GBPS


def gpu_l2_bytes(gpu_name: Optional[str]) -> Optional[int]:
    """The L2 size (bytes) of :data:`GPU_L2_BYTES` for the GPU's name, or None where unknown."""
    return GPU_L2_BYTES.get(gpu_key(gpu_name) or "")


def l2_problems(path: str, gpu_name: Optional[str], l2_cache_bytes: Optional[int]) -> list[Problem]:
    """The environment's L2 size against :data:`GPU_L2_BYTES` for its GPU (a cold block's flush
    is twice it: a smaller one leaves the L2 warm)."""
    want = gpu_l2_bytes(gpu_name)
    if want is not None and l2_cache_bytes is not None and l2_cache_bytes != want:
        return [_p(P.CONTRADICTS, path, f"is not the L2 size of an {gpu_name}", want, l2_cache_bytes)]
    return []


#: the compute capability of each GPU of :data:`GPU_PEAK_GBPS` (NVIDIA's CUDA GPU list; the AMD
#: entries have none)
GPU_CC = {"H200": "9.0", "H100 SXM": "9.0", "H100 NVL": "9.0", "H100 PCIe": "9.0", "H100": "9.0", "H20": "9.0",
          "GH200": "9.0", "B200": "10.0", "B100": "10.0", "GB200": "10.0", "A100-SXM4-80GB": "8.0",
          "A100 80GB PCIe": "8.0", "A100": "8.0", "L40S": "8.9", "L40": "8.9", "L4": "8.9", "A10G": "8.6",
          "A10": "8.6", "V100": "7.0", "T4": "7.5", "RTX 4090": "8.9", "RTX 3090": "8.6", "RTX 5090": "12.0"}
#: the L2 sizes (bytes) a GPU of a compute capability's major version has, at least and at most
#: (T4's 4 MiB to L40S's 96 MiB; Hopper 50 to 60 MiB; Blackwell at most 128 MiB): an L2 outside
#: them is not a measurement, and a cold block's flush of twice it proves nothing
L2_RANGE = {7: (4 << 20, 6 << 20), 8: (2 << 20, 96 << 20), 9: (50 << 20, 60 << 20), 10: (64 << 20, 128 << 20),
            12: (32 << 20, 128 << 20)}
L2_RANGE_ANY = (2 << 20, 128 << 20)
_CC = re.compile(r"^([0-9]{1,2})\.([0-9])$", re.ASCII)
_SASS_ARCH = re.compile(r"arch = sm_([0-9]{1,2}?)([0-9])[af]?\b", re.ASCII)


def sass_archs(listings: Iterable[str]) -> frozenset[str]:
    """The compute capabilities (``"9.0"``) the ``arch = sm_90a`` lines of cuobjdump's SASS
    listings name."""
    return frozenset(f"{m.group(1)}.{m.group(2)}" for t in listings for m in _SASS_ARCH.finditer(t))


def gpu_problems(path: str, gpu_name, compute_capability, l2_cache_bytes, archs: Iterable[str] = ()) -> list[Problem]:
    """What environment.json says of a GPU run's GPU, held together and against the binaries:
    its name and compute capability recorded (the copy bound and the L2 follow from them); the
    compute capability the table's for a GPU in :data:`GPU_CC`, and among those the bundled SASS
    listings were built for (``archs``, where any); the L2 an integer in :data:`L2_RANGE` of its
    architecture and, for a GPU in :data:`GPU_L2_BYTES`, the table's. ``path`` names the
    environment document in the problems."""
    out = []
    if not isinstance(gpu_name, str) or not gpu_name or not isinstance(compute_capability, str) \
            or not _CC.match(compute_capability):
        return [_p(P.INCOMPLETE, path, "a GPU run records its GPU's name and compute capability: the copy bound "
                   "and the L2 its cold blocks flush follow from them", None, [gpu_name, compute_capability])]
    key = gpu_key(gpu_name)
    if key in GPU_CC and GPU_CC[key] != compute_capability:
        out.append(_p(P.CONTRADICTS, path, f"compute capability {compute_capability} is not an {key}'s",
                      GPU_CC[key], compute_capability))
    archs = sorted(set(archs))
    if archs and compute_capability not in archs:
        out.append(_p(P.CONTRADICTS, path, "the compute capability is none the bundled binaries' SASS was built for",
                      archs, compute_capability))
    lo, hi = L2_RANGE.get(int(compute_capability.split(".")[0]), L2_RANGE_ANY)
    if "AMD" in gpu_name.upper():  # ROCm reports its own architecture numbers: only any GPU's range
        lo, hi = 1 << 20, L2_RANGE_ANY[1]
    if type(l2_cache_bytes) is not int or not lo <= l2_cache_bytes <= hi:
        out.append(_p(P.CONTRADICTS, path, f"the L2 size is not one a GPU of compute capability {compute_capability} "
                      "has", [lo, hi], l2_cache_bytes))
    else:
        out += l2_problems(path, gpu_name, l2_cache_bytes)
    return out


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


def _specs(task_src: bytes, sizes: Mapping[str, SizeValue], cache: dict) -> tuple:
    key = tuple(sorted(sizes.items()))
    if key not in cache:
        cache[key] = input_specs(task_src, sizes)
    return cache[key]


def arm_orders(arms: Sequence[str], seed: int) -> Iterator[list[str]]:
    """The order the arms of a timing block run in, round after round: ``arms`` shuffled by one
    ``random.Random(seed)``, once per round. The one copy of the rule: the engine times in these
    orders (``harness/timing.py``), the verifier holds every recorded round to them (a study's
    blocks in ``bundle/crosscheck/documents.py``, a candidate's here)."""
    rng = random.Random(seed)
    while True:
        order = list(arms)
        rng.shuffle(order)
        yield order


def _order(arms: Sequence[str], seed: int, rounds: int) -> list[list[str]]:
    orders = arm_orders(arms, seed)
    return [next(orders) for _ in range(rounds)]


def block_problems(rec: CandidateRecord, at: str, gbps: Optional[float], task_src: Optional[bytes],
                    cache: dict, l2_cache_bytes: Optional[int], version: int = 1) -> Iterator[Problem]:
    cfg = protocol.PROFILES[rec.config.profile]
    timing = rec.timing
    fresh = version >= 2
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
        seed = protocol.block_order_seed(cfg.order_seed, b.l2)
        if list(b.arms) != arms or b.id != f"{rec.name}/{b.l2}" or b.candidate != rec.name:
            yield _p(P.INCOMPLETE, f"{bp}.arms", f"are not the baselines that ran and the candidate: {arms}")
            continue
        pr = b.protocol
        # protocol 2 warms up on sets of its own, as many as the pool holds (at least one)
        warmups = protocol.invocations_with_pool(max(1, cfg.warmups), pr.io_bytes or 1, pr.pool_bytes) \
            if pr.inputs == "fresh" and pr.io_bytes is not None and pr.pool_bytes is not None else cfg.warmups
        if (pr.mode, pr.warmups, pr.rounds, pr.order_seed, pr.l2) != ("events", warmups, len(b.rounds), seed, b.l2):
            yield _p(P.CONTRADICTS, f"{bp}.protocol", "is not the profile's protocol for this block")
        if pr.pool_bytes != rec.blocks[0].protocol.pool_bytes:
            yield _p(P.CONTRADICTS, f"{bp}.protocol.pool_bytes", "differs from the warm block's: both come from the "
                     "memory free when the timing stage began", rec.blocks[0].protocol.pool_bytes, pr.pool_bytes)
        want_flush = None if b.l2 == "warm" else (2 * l2_cache_bytes if l2_cache_bytes else -1)
        if b.flush_bytes != want_flush:
            yield _p(P.DERIVED, f"{bp}.flush_bytes", "a cold block flushes twice the L2 of the GPU it ran on, a warm one "
                     "does not flush" + ("" if l2_cache_bytes else ": that L2 size is not known here, so the flush "
                                         "cannot be derived"), want_flush, b.flush_bytes)
        broken = next((k for k, (row, order) in enumerate(zip(b.rounds, _order(arms, seed, len(b.rounds))))
                       if list(row.order) != order or sorted(row.times_ms) != sorted(arms)
                       or list(row.host_ms) != ["candidate"]), None)
        if broken is not None:
            yield _p(P.INCOMPLETE, f"{bp}.rounds[{broken}]", "does not time every arm once in the seeded order and "
                     "clock the candidate")
            return  # the derivations below read every arm of every round
        inv = pr.invocations_per_pair
        eager = protocol.roofline_median_ms([r.times_ms["eager"] for r in b.rounds])
        if fresh != (pr.inputs == "fresh") or fresh != (pr.calibration_ms is not None) or \
                fresh != (pr.io_bytes is not None) or any(fresh != (r.outputs is not None) or fresh != (
                    r.checksum_ms is not None) for r in b.rounds):
            yield _p(P.INCOMPLETE, f"{bp}.protocol", f"is not timing protocol {version}'s: "
                     + ("every invocation on fresh inputs, its calibration, its bytes and every round's held outputs"
                        if fresh else "no field of protocol 2"))
            return
        # inv = the rule for a calibration e within CALIBRATION_FACTOR of the eager arm's median
        # (protocol 2 states e and is held to the rule exactly; its e is held to the factor)
        e = pr.calibration_ms if fresh else eager
        lo = protocol.invocations_per_request(cfg.invocations_per_pair, e * (1 if fresh else CALIBRATION_FACTOR))
        hi = protocol.invocations_per_request(cfg.invocations_per_pair, e / (1 if fresh else CALIBRATION_FACTOR))
        if fresh:
            lo, hi = (protocol.invocations_with_pool(x, pr.io_bytes, pr.pool_bytes) for x in (lo, hi))
        if not lo <= inv <= hi or fresh and not eager / CALIBRATION_FACTOR_V2 <= e <= eager * CALIBRATION_FACTOR_V2:
            yield _p(P.DERIVED, f"{bp}.protocol.invocations_per_pair", "is not what the calibration rule gives for "
                     f"the eager arm's {e:.4g} ms (ceil({protocol.TARGET_REQUEST_MS:g} ms / eager) between "
                     f"{cfg.invocations_per_pair} and {protocol.MAX_INVOCATIONS}, the calibration within a factor "
                     f"{CALIBRATION_FACTOR_V2 if fresh else CALIBRATION_FACTOR:g} of the block's eager median "
                     f"{eager:.4g} ms)", [lo, hi], inv)
        if fresh:
            roof = timing.roofline
            if roof is not None and pr.io_bytes != roof.bytes_moved:
                yield _p(P.DERIVED, f"{bp}.protocol.io_bytes", "is not the bytes of one invocation's inputs and "
                         "output", roof.bytes_moved, pr.io_bytes)
            yield from _held_problems(rec, b, bp, inv, cache, task_src)
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
    yield from _cold_floor_problems(rec, at)
    if fresh:
        yield from _clock_record_problems(rec, at, cfg)
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
    cm, single = tcase.compare, (tcase.reference_count or 1) == 1
    out = parse_digest(tcase.output.digest) if tcase.output.digest else None
    n_in = [s.nbytes for s in specs if s is not None]
    if not cm.shape_match and cm.element_count is not None:
        # an output that could not be compared (another shape or dtype, or none) still ran through the
        # timing stage: the bytes are the reference's, its element count (recorded) times an element size
        sizes = sorted(set(ELEMENT_BYTES.values()))
        wants = [protocol.bytes_moved(n_in, [cm.element_count * e]) for e in sizes]
        if single and roof.bytes_moved not in wants or roof.bytes_moved < wants[0]:
            yield _p(P.DERIVED, f"{at}.timing.roofline.bytes_moved", "is not the bytes of the task's inputs and an "
                     f"output of the reference's {cm.element_count} elements at the run's sizes", wants, roof.bytes_moved)
        return
    if out is None or not cm.shape_match:
        yield _p(P.INCOMPLETE, f"{at}.observations.cases", "the timing input's output has no recorded dtype and shape "
                 "to derive the bytes moved from")
        return
    want = protocol.bytes_moved(n_in, [out.nbytes])
    if single and roof.bytes_moved != want or roof.bytes_moved < want:
        yield _p(P.DERIVED, f"{at}.timing.roofline.bytes_moved", "is not the bytes of the task's inputs and output at "
                 "the run's sizes", want, roof.bytes_moved)
    elif not single and out.nbytes and roof.bytes_moved == want:
        # a reference of several outputs moves more than its first output's bytes: the count
        # is the bundle's word, held against the bytes (it relaxes the held-output chunk rule)
        yield _p(P.CONTRADICTS, f"{at}.observations.cases", f"the timing input's reference returns "
                 f"{tcase.reference_count} outputs, yet the bytes moved are those of its first alone", f"> {want}",
                 roof.bytes_moved)


def _cold_floor_problems(rec: CandidateRecord, at: str) -> Iterator[Problem]:
    """Each arm's cold-L2 median (ms per invocation) is at least :data:`COLD_WARM_FLOOR` of its
    warm median: the cold region runs the same calls on the same kind of fresh sets plus a flush
    of the L2 before each (measured on the H200: 0.045 ms cold against 0.036 ms warm,
    examples/formats/candidates-quick-format7.tar); a cold time made smaller is below it."""
    if len(rec.blocks) != 2:
        return
    warm, cold = rec.blocks
    for arm in cold.arms:
        w = [r.times_ms.get(arm) for r in warm.rounds]
        c = [r.times_ms.get(arm) for r in cold.rounds]
        if not w or not c or None in w or None in c:
            continue
        mw, mc = statistics.median(w), statistics.median(c)
        if mc < COLD_WARM_FLOOR * mw:
            yield _p(P.CONTRADICTS, f"{at}.blocks[1]", f"{arm}'s cold-L2 median {mc:.4g} ms is less than "
                     f"{COLD_WARM_FLOOR:g} of its warm median {mw:.4g} ms: the same calls with a flush before each "
                     "are not faster", f">= {COLD_WARM_FLOOR * mw:.4g}", mc)


def _chunk_sizes(numel: int) -> list:
    """The element counts of an output's checksum chunks (harness/fresh.py)."""
    m = protocol.CHECKSUM_CHUNK
    k, rest = divmod(numel, m)
    return [m] * k + ([rest] if rest or not numel else [])


def _held_problems(rec: CandidateRecord, b, bp: str, inv: int, cache: dict,
                   task_src: Optional[bytes]) -> Iterator[Problem]:
    """Protocol 2's held outputs of a block, against what they must be: one per invocation;
    each sample row's chunk and element count those of the task's output (one output); the
    counts agreeing with the rows derived again (a row that fails is counted, every counted
    failure up to 8 is a row, an output of a reused buffer is counted aliased); the worst
    deviation 0 exactly when nothing fails; and, up to the first round with a failure, the
    passing rows the ones the seeded draw picks (harness/candidate_timing.py)."""
    atol, rtol = rec.config.atol, rec.config.rtol
    tcase = next((c for c in rec.observations.cases if c.id == "timing_input"), None)
    out = parse_digest(tcase.output.digest) if tcase is not None and tcase.output.digest else None
    sizes = None
    single = (tcase.reference_count or 1) == 1 if tcase is not None else True
    if out is not None:  # the first output's chunks come first, whatever follows (harness/fresh.py checksums)
        n = 1
        for d in out.shape:
            n *= d
        sizes = _chunk_sizes(n)
    cfg = protocol.PROFILES[rec.config.profile]
    pick = random.Random(protocol.spot_check_seed(cfg.order_seed, b.l2))
    seeded = True
    for k, row in enumerate(b.rounds):
        h, rp = row.outputs, f"{bp}.rounds[{k}].outputs"
        if h.n != inv:
            yield _p(P.INCOMPLETE, f"{rp}.n", "does not hold every invocation's output", inv, h.n)
            return
        for x in h.sample:
            if x[2] >= 0 and not 0 <= x[7] <= protocol.CHECKSUM_CHUNK:  # whatever the output count: a chunk's size
                yield _p(P.CONTRADICTS, f"{rp}.sample", "a row's element count is not a checksum chunk's (at most "
                         f"{protocol.CHECKSUM_CHUNK})", f"<= {protocol.CHECKSUM_CHUNK}", x[7])
                return
            if x[2] >= 0 and sizes is not None and ((single and x[2] >= len(sizes))
                                                     or (x[2] < len(sizes) and x[7] != sizes[x[2]])):
                yield _p(P.CONTRADICTS, f"{rp}.sample", "a row names a chunk the task's output does not have",
                         sizes[:4], [x[2], x[7]])
                return
        agree = [(x, protocol.held_row_agrees(x, atol, rtol)) for x in h.sample]
        bad = [x for x, ok in agree if ok is False]
        aliased = sum(1 for x in h.sample if x[1] != x[0])
        if len(bad) > h.failing or len(bad) < min(h.failing, 8) or aliased > h.aliased or \
                (h.failing == 0) != (h.worst == 0) or (h.failing and h.worst <= 1):
            yield _p(P.CONTRADICTS, rp, "its counts do not agree with the checksums it records (failing, worst, "
                     "aliased)", None, [h.failing, h.worst, h.aliased])
            return
        if h.failing:
            seeded = False
        if seeded:
            want = sorted(pick.sample(range(h.n), min(2, h.n)))
            got = sorted(x[0] for x, ok in agree if ok is not False)
            if got != want:
                yield _p(P.DERIVED, f"{rp}.sample", "its passing rows are not the ones the seeded draw picks", want, got)
                return


def _clock_record_problems(rec: CandidateRecord, at: str, cfg) -> Iterator[Problem]:
    """Protocol 2: eager's per-call times on the fresh sets, and the clock over two lengths of
    the lengths the rule gives (n1 the warm block's, n2 from its median reported time)."""
    pc = rec.timing.per_call
    if pc is not None and (len(pc.eager_fresh) != cfg.fresh_rounds or any(
            len(r.times_ms) != cfg.fresh_sets for r in pc.eager_fresh)
            or [r.round for r in pc.eager_fresh] != list(range(len(pc.eager_fresh)))):
        yield _p(P.INCOMPLETE, f"{at}.timing.per_call.eager_fresh", f"is not {cfg.fresh_rounds} rounds of "
                 f"{cfg.fresh_sets} eager calls on the fresh sets")
    elif pc is not None and pc.eager_fresh and all(r.times_ms.get("eager") is not None for r in rec.blocks[0].rounds):
        # eager back to back on fresh sets is not slower than eager one synchronised call at a time
        percall = statistics.median(t for r in pc.eager_fresh for t in r.times_ms)
        block = statistics.median(r.times_ms["eager"] for r in rec.blocks[0].rounds)
        if block > EAGER_BLOCK_SLACK * percall + EAGER_BLOCK_SLACK_MS:
            yield _p(P.CONTRADICTS, f"{at}.blocks[0]", f"eager's warm median {block:.4g} ms per invocation is more "
                     f"than its per-call median on the fresh sets ({percall:.4g} ms, with {EAGER_BLOCK_SLACK:g}x and "
                     f"{EAGER_BLOCK_SLACK_MS:g} ms of slack): calls back to back are not slower than synchronised",
                     f"<= {EAGER_BLOCK_SLACK * percall + EAGER_BLOCK_SLACK_MS:.4g}", block)
    ck = rec.timing.clock
    if ck is None:
        yield _p(P.INCOMPLETE, f"{at}.timing.clock", "a run of timing protocol 2 clocks the candidate over two lengths")
        return
    warm = rec.blocks[0]
    n1 = warm.protocol.invocations_per_pair
    med = protocol.roofline_median_ms([r.times_ms["candidate"] for r in warm.rounds])
    n2 = max(n1 + 1, min(protocol.clock_extra_invocations(n1, med),
                         protocol.invocations_with_pool(protocol.MAX_CLOCK_INVOCATIONS, warm.protocol.io_bytes or 1,
                                                        warm.protocol.pool_bytes)))
    if (ck.n1, ck.n2) != (n1, n2) or not len(ck.host1_ms) == len(ck.host2_ms) == protocol.CLOCK_REPEATS:
        yield _p(P.DERIVED, f"{at}.timing.clock", "its lengths or repeats are not the rule's", [n1, n2, protocol.CLOCK_REPEATS],
                 [ck.n1, ck.n2, len(ck.host1_ms)])
    rep1, blk = protocol.roofline_median_ms(ck.reported1_ms), med
    if not blk / protocol.CLOCK_BLOCK_FACTOR <= rep1 <= blk * protocol.CLOCK_BLOCK_FACTOR:
        yield _p(P.CONTRADICTS, f"{at}.timing.clock.reported1_ms", "the candidate's times in requests of the block's "
                 "length are not its times in the block", blk, rep1)
    for key, n, hosts, reps in (("1", ck.n1, ck.host1_ms, ck.reported1_ms), ("2", ck.n2, ck.host2_ms, ck.reported2_ms)):
        if any(t * n > h * 1.001 + 0.01 for t, h in zip(reps, hosts)):
            yield _p(P.CONTRADICTS, f"{at}.timing.clock.reported{key}_ms", "claims more time than the parent's clock saw")


__all__ = ["FLOAT_REL", "CALIBRATION_FACTOR", "CALIBRATION_FACTOR_V2", "GPU_PEAK_GBPS", "GPU_L2_BYTES", "gpu_key", "gpu_peak_gbps", "gpu_l2_bytes", "l2_problems", "GPU_CC", "L2_RANGE", "sass_archs", "gpu_problems", "derived_gbps",
           "copy_block_problems", "block_problems"]
