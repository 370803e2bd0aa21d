"""The timing records of a candidate run (:mod:`kbrepro.model.candidates`): blocks and rounds of
both timing protocols, the copy block, baselines, per-call times, spot checks, the clock over
two lengths and the roofline's inputs."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Iterator, Literal, Mapping, Optional, Tuple

from kbrepro.model import strict
from kbrepro.model.compare_records import Compare
from kbrepro.model.scalars import ARM, COUNT, GBPS, LINE, MS, NAME, POSITIVE, POSITIVE_MS, SECONDS, SHORT
from kbrepro.model.strict import Items, Num, Text


# --------------------------------------------------------------------------------- timing
@dataclass(frozen=True)
class Protocol:
    """How a block was timed (harness/timing.py): warmups, rounds, invocations per timed
    region, the seed of the shuffled arm order, and the L2 state (candidate blocks)."""

    mode: Literal["events", "graph"]
    warmups: COUNT
    rounds: POSITIVE
    invocations_per_pair: POSITIVE
    order_seed: Optional[int]
    l2: Optional[Literal["warm", "cold"]] = None
    #: protocol 2 (schema_version 2): every invocation on an input set of its own
    inputs: Optional[Literal["fresh"]] = None
    #: the eager arm's time per invocation (ms) the invocations per request were calibrated on
    calibration_ms: Optional[POSITIVE_MS] = None
    #: bytes of one invocation's inputs and output (the pool's cap on invocations per request)
    io_bytes: Optional[POSITIVE] = None
    #: the bytes a request's input sets could take (protocol.pool_bytes of the memory free at
    #: the timing stage's start); absent in records made before it was recorded (16 GiB)
    pool_bytes: Optional[Annotated[int, Num(ge=0, le=1 << 34)]] = None


#: a sampled timed output: invocation, the invocation whose answer its memory holds, chunk,
#: the candidate's weighted sum and sum of |y|, the reference's, the chunk's element count
#: (chunk -1 and nulls: the output's chunks are not the reference's)
SAMPLE_ROW = Tuple[COUNT, COUNT, Annotated[int, Num(ge=-1, le=1 << 40)], Optional[float], Optional[float],
                   Optional[float], Optional[float], COUNT]


@dataclass(frozen=True)
class HeldOutputs:
    """Protocol 2: every timed output of a round held against eager's on the same set
    (harness/candidate_timing.py): how many, how many share a reused buffer, how many fail,
    the worst deviation over the allowance, and a sample of raw checksums."""

    n: COUNT
    aliased: COUNT
    failing: COUNT
    worst: Annotated[float, Num(ge=0)]
    sample: Annotated[Tuple[SAMPLE_ROW, ...], Items(0, 16)]

    def _invariants(self) -> Iterator[tuple[str, str]]:
        if self.failing > self.n or self.aliased > self.n:
            yield "", "counts more failing or aliased outputs than outputs"
        if any(row[0] >= self.n or row[1] >= self.n or row[1] < row[0] for row in self.sample):
            yield ".sample", "names an invocation the round did not hold"


@dataclass(frozen=True)
class Round:
    """One round: the arms in the order they ran, each arm's time per invocation (ms), and the
    parent's clock (ms) around each request it did not time itself (the candidate's); in
    protocol 2 also the candidate's outputs held against eager's and the parent's time to
    checksum eager's outputs."""

    times_ms: Mapping[ARM, POSITIVE_MS]
    order: Annotated[Tuple[ARM, ...], Items(1, 8)] = ()
    host_ms: Mapping[ARM, MS] = strict.field(default_factory=dict)
    outputs: Optional[HeldOutputs] = None
    checksum_ms: Optional[MS] = None


@dataclass(frozen=True)
class Block:
    """A candidate's timing block: every arm once per round, shuffled (``id`` = name/l2)."""

    id: Annotated[str, Text(1, 80)]
    candidate: NAME
    l2: Literal["warm", "cold"]
    mode: Literal["events"]
    protocol: Protocol
    arms: Annotated[Tuple[ARM, ...], Items(1, 8)]
    rounds: Annotated[Tuple[Round, ...], Items(1, 2000)]
    flush_bytes: Optional[POSITIVE] = None


@dataclass(frozen=True)
class CopyBlock:
    """The device-to-device copy block (harness/extras.copy_bandwidth) the bandwidth is derived from."""

    id: Literal["copy.d2d"]
    task: Literal[0]
    scope: Literal["copy"]
    mode: Literal["graph"]
    kind: Literal["copy"]
    bytes_moved: POSITIVE
    protocol: Protocol
    arms: Annotated[Tuple[Literal["memcpy", "elementwise"], ...], Items(2, 2)]
    rounds: Annotated[Tuple[Round, ...], Items(1, 2000)]


@dataclass(frozen=True)
class Bandwidth:
    """The run's device copy bandwidth (GB/s) and the raw block it is derived from, or why
    there is none (``reason``: a CPU run)."""

    gbps: Optional[GBPS]
    block: Optional[CopyBlock] = None
    reason: Optional[SHORT] = None


@dataclass(frozen=True)
class Baseline:
    """A baseline arm: its build time and check, or why it was skipped."""

    build_s: Optional[SECONDS] = None
    compare: Optional[Compare] = None
    skipped: Optional[LINE] = None

    def _invariants(self) -> Iterator[tuple[str, str]]:
        if (self.skipped is None) == (self.compare is None) or (self.compare is None) != (self.build_s is None):
            yield "", "is neither a baseline that ran (build_s and compare) nor one that was skipped (skipped)"


@dataclass(frozen=True)
class CallRound:
    """One round of per-call times (ms, each call synchronised alone)."""

    round: COUNT
    times_ms: Annotated[Tuple[POSITIVE_MS, ...], Items(0, 1000)]


@dataclass(frozen=True)
class SpotCheck:
    """The timed output the parent picked after a fresh-input round (``index``), the call that
    wrote it (``written_by``) and its comparison with the parent's reference."""

    round: COUNT
    index: COUNT
    compare: Compare
    written_by: Optional[COUNT] = None


@dataclass(frozen=True)
class PerCall:
    """Per-call times on fresh input sets and on one repeated set, and the spot checks; in
    protocol 2 also eager's per-call times on the same fresh sets."""

    fresh: Annotated[Tuple[CallRound, ...], Items(0, 1000)]
    repeat: Annotated[Tuple[CallRound, ...], Items(0, 1000)]
    spot_checks: Annotated[Tuple[SpotCheck, ...], Items(0, 1000)]
    sets_per_round: POSITIVE
    eager_fresh: Annotated[Tuple[CallRound, ...], Items(0, 1000)] = ()


@dataclass(frozen=True)
class Clock:
    """Protocol 2: the parent's clock over candidate requests of two lengths, and what the
    candidate's timer reported for each (ms per invocation)."""

    n1: POSITIVE
    n2: POSITIVE
    host1_ms: Annotated[Tuple[MS, ...], Items(1, 64)]
    host2_ms: Annotated[Tuple[MS, ...], Items(1, 64)]
    reported1_ms: Annotated[Tuple[POSITIVE_MS, ...], Items(1, 64)]
    reported2_ms: Annotated[Tuple[POSITIVE_MS, ...], Items(1, 64)]

    def _invariants(self) -> Iterator[tuple[str, str]]:
        if self.n2 <= self.n1:
            yield ".n2", "is not longer than n1"
        if len(self.host1_ms) != len(self.reported1_ms) or len(self.host2_ms) != len(self.reported2_ms):
            yield "", "holds a host time without a reported time or the reverse"


@dataclass(frozen=True)
class Roofline:
    """The roofline check's inputs: bytes one call must move, the warm block's median time per
    invocation (ms) and the copy bandwidth (GB/s)."""

    bytes_moved: POSITIVE
    median_ms: POSITIVE_MS
    bandwidth_gbps: Optional[GBPS]


@dataclass(frozen=True)
class Timing:
    """A candidate's timing record (empty for a CPU run or one that stopped before timing)."""

    baselines: Annotated[Mapping[ARM, Baseline], Items(0, 8)] = strict.field(default_factory=dict)
    per_call: Optional[PerCall] = None
    roofline: Optional[Roofline] = None
    clock: Optional[Clock] = None
