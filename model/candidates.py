"""Typed, frozen records of ``results/candidates.json`` (schema ``kbrepro/candidates``, version 1).

What a KernelBench-candidate run records, as :mod:`kbrepro.harness.candidate` writes it: the
run's configuration, the observations of every checked call, the timing blocks, per-call
times and spot checks, the roofline inputs, the provenance of what the candidate built, and the
verdicts derived from them. Built once, strictly, by :func:`load` (the packer and the verifier
alike); a record that exists has every field of the right JSON type, finite and in range, and
no field it does not declare. Whether a record is *complete* for its run (every case a
checking pass records, every arm and block) and agrees with the other records is decided by
:mod:`kbrepro.model.candidate_rules`.

Units are in the field names (``_ms``, ``_s``, ``_gbps``: 1e9 bytes per second, ``bytes``).
Fields with a default were added by later versions of the product and are absent from
bundles written before them; a field without one is required in every bundle.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Iterator, Literal, Mapping, Optional, Tuple, Union

from kbrepro.model import strict
from kbrepro.model.strict import NONFINITE, Items, Num, Text

# ------------------------------------------------------------------------------- scalars
SHA256 = Annotated[str, Text(64, 64, r"[0-9a-f]{64}")]
SHA1 = Annotated[str, Text(40, 40, r"[0-9a-f]{40}")]
UTC = Annotated[str, Text(20, 20, r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")]
RELPATH = Annotated[str, Text(1, 400, r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*")]
#: a file path inside a build folder as recorded (may hold names a relpath does not allow)
BUILD_PATH = Annotated[str, Text(1, 400)]
NAME = Annotated[str, Text(1, 40, r"[A-Za-z][A-Za-z0-9_]{0,39}")]
IDENT = Annotated[str, Text(1, 64, r"[A-Za-z_][A-Za-z0-9_]{0,63}")]
CASE_ID = Annotated[str, Text(1, 40, r"[A-Za-z0-9_/.-]{1,40}")]
SHARD_ID = Annotated[str, Text(21, 21, r"c[0-9a-f]{20}")]
COUNT = Annotated[int, Num(ge=0, le=1 << 53)]
#: a process's thread count (it runs at least one)
THREADS = Annotated[int, Num(ge=1, le=1 << 20)]
POSITIVE = Annotated[int, Num(ge=1, le=1 << 53)]
#: bounds a run could reach: 100 days, and a timed request of 1e8 ms; 1 PB/s
SECONDS = Annotated[float, Num(ge=0, le=1e7)]
MS = Annotated[float, Num(ge=0, le=1e8)]
#: a measured time per invocation: at least 1 ns (a CUDA event's resolution is about 0.5 us per region)
POSITIVE_MS = Annotated[float, Num(ge=1e-6, le=1e8)]
GBPS = Annotated[float, Num(gt=0, le=1e6)]
TOL = Annotated[float, Num(ge=0, le=1)]
#: a float jsonio.enc_float may write as "nan", "inf" or "-inf"
ENC = Annotated[float, NONFINITE]
RATIO = Annotated[float, NONFINITE, Num(ge=0)]
SHORT = Annotated[str, Text(0, 400)]
LINE = Annotated[str, Text(1, 400)]
#: a tensor fingerprint (kbtask.fingerprint): dtype|shape|sums
DIGEST = Annotated[str, Text(1, 200, r"torch\.[a-z0-9]+\|\(([0-9]+(, [0-9]+)*,?)?\)\|[0-9a-f]{48}")]
DEVICE = Annotated[str, Text(1, 40, r"[a-z_]+(:[0-9]{1,3})?")]
LAYOUT = Literal["torch.strided", "torch.sparse_coo", "torch.sparse_csr", "torch.sparse_csc", "torch.sparse_bsr",
                 "torch.sparse_bsc", "torch._mkldnn", "torch.jagged"]
SIZES = Annotated[Mapping[Annotated[str, Text(1, 64, r"[A-Za-z_][A-Za-z0-9_]*")], int], Items(0, 32)]
ARM = Annotated[str, Text(1, 40, r"[a-z_]{1,40}")]

CASE_KINDS = ("official", "normal", "normal_x100", "same_buffers", "repeat", "poison", "profiled",
              "redrawn_weights", "extra_shape")
STAGES = ("build", "checking pass", "timing", "weights and shapes")


@dataclass(frozen=True)
class Flags:
    """The precision settings a process runs with (harness/isolate.py ``_flags``)."""

    allow_tf32_matmul: bool
    allow_tf32_cudnn: bool
    float32_matmul_precision: Literal["highest", "high", "medium"]
    allow_fp16_reduced_precision_reduction: bool
    allow_bf16_reduced_precision_reduction: bool
    cudnn_deterministic: bool
    cudnn_benchmark: bool


FLAGS = Flags


# ------------------------------------------------------------------------- check records
@dataclass(frozen=True)
class PredicateResult:
    """One predicate over one output: ``passed`` (JSON ``pass``), ``failing_count`` elements
    that fail it, ``worst_ratio`` = max |difference| / allowance over finite pairs, null where
    the output could not be compared (harness/checks.py)."""

    passed: bool = strict.field(json="pass")
    failing_count: COUNT = strict.field()
    worst_ratio: Optional[RATIO] = strict.field()

    def _invariants(self) -> Iterator[tuple[str, str]]:
        if self.passed and self.failing_count != 0:
            yield ".pass", f"is true with failing_count {self.failing_count} (a pass has no failing element)"
        if self.passed and (self.worst_ratio is None or self.worst_ratio > 1 + 1e-6):
            yield ".worst_ratio", f"is {self.worst_ratio} in a passing check (at most 1)"


@dataclass(frozen=True)
class StressResult:
    """The equal-NaN stress check: ``passed`` and ``failing_count``."""

    passed: bool = strict.field(json="pass")
    failing_count: COUNT = strict.field()

    def _invariants(self) -> Iterator[tuple[str, str]]:
        if self.passed != (self.failing_count == 0):
            yield ".pass", f"is {str(self.passed).lower()} with failing_count {self.failing_count}"


@dataclass(frozen=True)
class NonFinite:
    """Counts of non-finite values in the reference and the output (harness/checks.py)."""

    reference_nan: COUNT
    candidate_nan: COUNT
    reference_posinf: COUNT
    reference_neginf: COUNT
    candidate_posinf: COUNT
    candidate_neginf: COUNT
    nan_both: COUNT
    mismatched: COUNT


@dataclass(frozen=True)
class FullCompare:
    """``harness.checks.compare`` of an output of the reference's shape and dtype: every
    statistic, each key present (null only where no finite value exists)."""

    shape_match: Literal[True]
    element_count: COUNT
    bit_identical_count: COUNT
    official: PredicateResult
    legacy: PredicateResult
    equal_nan_stress: StressResult
    max_abs_error: Optional[RATIO]
    max_abs_reference: Optional[RATIO]
    nonfinite: NonFinite
    discriminating: bool
    null_candidate_passes: bool
    error = None

    def _invariants(self) -> Iterator[tuple[str, str]]:
        n = self.element_count
        for k, v in (("bit_identical_count", self.bit_identical_count), ("official.failing_count",
                     self.official.failing_count), ("legacy.failing_count", self.legacy.failing_count),
                     ("equal_nan_stress.failing_count", self.equal_nan_stress.failing_count)):
            if v > n:
                yield f".{k}", f"is {v}, more than the {n} elements"
        for k in ("official", "legacy"):
            r = getattr(self, k)
            if not r.passed and r.failing_count == 0:
                yield f".{k}.pass", "is false with no failing element"
            if r.worst_ratio is None and n:
                yield f".{k}.worst_ratio", "is null for a compared output"
        if self.bit_identical_count == n and n and (self.official.failing_count or (self.max_abs_error or 0) > 0):
            yield "", "every element is bit-identical, yet an element fails or differs"


@dataclass(frozen=True)
class MismatchCompare:
    """The record of an output that could not be compared element by element (another shape
    or dtype, or missing): both predicates fail on every reference element."""

    shape_match: Literal[False]
    element_count: COUNT
    bit_identical_count: Annotated[int, Num(ge=0, le=0)]
    official: PredicateResult
    legacy: PredicateResult
    reference_shape: Optional[Tuple[COUNT, ...]] = None
    candidate_shape: Optional[Tuple[COUNT, ...]] = None
    equal_nan_stress = max_abs_error = max_abs_reference = nonfinite = discriminating = None
    null_candidate_passes = error = None

    def _invariants(self) -> Iterator[tuple[str, str]]:
        for k in ("official", "legacy"):
            r = getattr(self, k)
            if r.passed or r.failing_count != self.element_count or r.worst_ratio is not None:
                yield f".{k}", "an output that could not be compared fails on every element, with no ratio"


@dataclass(frozen=True)
class FailedPredicate:
    passed: Literal[False] = strict.field(json="pass")


@dataclass(frozen=True)
class UnreadableCompare:
    """A spot-checked timed output the parent could not read back (``error``): failed."""

    shape_match: Literal[False]
    official: FailedPredicate
    error: Annotated[str, Text(0, 400)]
    element_count = bit_identical_count = legacy = equal_nan_stress = max_abs_error = max_abs_reference = None
    nonfinite = discriminating = null_candidate_passes = None


def _compare_kind(raw: dict):
    if raw.get("shape_match") is True:
        return FullCompare
    return UnreadableCompare if "error" in raw else MismatchCompare


Compare = Annotated[Union[FullCompare, MismatchCompare, UnreadableCompare],
                    strict.OneOf(_compare_kind, "comparison")]


# ---------------------------------------------------------------------------- the config
@dataclass(frozen=True)
class RunConfig:
    """``harness.candidate.CandidateConfig.to_doc()``: the profile's protocol, the user's sizes
    and extra shapes, and the limits (deadlines in s)."""

    profile: Literal["full", "quick"]
    seeds: Annotated[Tuple[int, ...], Items(1, 16)]
    distributions: Annotated[Tuple[Annotated[str, Text(1, 40, r"[a-z0-9_]+")], ...], Items(1, 16)]
    atol: TOL
    rtol: TOL
    warmups: COUNT
    rounds: POSITIVE
    invocations_per_pair: POSITIVE
    order_seed: int
    timing_seed: int
    baselines: Annotated[Tuple[ARM, ...], Items(0, 8)]
    cold_l2: bool
    cold_rounds: COUNT
    fresh_sets: POSITIVE
    fresh_rounds: POSITIVE
    poison_bytes: Annotated[Tuple[Annotated[int, Num(ge=0, le=255)], ...], Items(0, 8)]
    redrawn_seed: int
    extra_shapes: Annotated[Tuple[SIZES, ...], Items(0, 16)]
    sizes: SIZES
    build_timeout_s: Annotated[float, Num(gt=0)]
    call_timeout_s: Annotated[float, Num(gt=0)]
    budget_s: Optional[Annotated[float, Num(gt=0)]] = None


# ---------------------------------------------------------------------- the checking pass
@dataclass(frozen=True)
class Build:
    """The build request: the parent's clock (``host_s``), the child's own build time and what
    it reported (precision flags before the import and after the build, threads, torch)."""

    host_s: SECONDS
    build_s: Optional[SECONDS]
    flags_before: Optional[FLAGS]
    flags_after_build: Optional[FLAGS]
    threads: Optional[THREADS]
    torch: Optional[Annotated[str, Text(1, 80)]]


@dataclass(frozen=True)
class Output:
    """What the child said of a call's first output (null fields: it returned no tensor)."""

    type: Optional[Annotated[str, Text(1, 300)]]
    plain: Optional[bool]
    device: Optional[DEVICE]
    layout: Optional[LAYOUT]
    grad_fn: Optional[Annotated[str, Text(1, 300)]]
    digest: Optional[DIGEST]
    unreadable: Optional[SHORT] = None

    def _invariants(self) -> Iterator[tuple[str, str]]:
        if self.digest is not None and None in (self.type, self.plain, self.device, self.layout):
            yield "", "a tensor output (it has a digest) without its type, device or layout"


@dataclass(frozen=True)
class Case:
    """One checked call: its identity (``id``, ``kind``, input ``set``, ``model``), the parent's
    view (reference device and range over finite values, digests of its own draw, the host
    clock of the request), the child's report (digests before and after, threads, times,
    flags, output) and the parent's comparison."""

    id: CASE_ID
    kind: Literal[CASE_KINDS]
    set: CASE_ID
    model: Annotated[str, Text(1, 40, r"[A-Za-z0-9_]+")]
    reference_device: DEVICE
    reference_range: Tuple[Optional[float], Optional[float]]
    digests_parent: Annotated[Tuple[Optional[DIGEST], ...], Items(0, 64)]
    output: Output
    output_count: Annotated[int, Num(ge=0, le=16)]
    digests_before: Annotated[Tuple[Optional[DIGEST], ...], Items(0, 64)]
    digests_after: Annotated[Tuple[Optional[DIGEST], ...], Items(0, 64)]
    threads_before: THREADS
    threads_after: THREADS
    call_ms: POSITIVE_MS
    stream_wait_ms: MS
    device_wait_ms: MS
    flags_after_call: FLAGS
    host_ms: MS
    compare: Compare
    reference_count: Optional[Annotated[int, Num(ge=1, le=16)]] = None
    held_over: Optional[CASE_ID] = None
    poison_byte: Optional[Annotated[int, Num(ge=0, le=255)]] = None
    matches_other: Optional[Annotated[Tuple[CASE_ID, ...], Items(0, 64)]] = None

    def _invariants(self) -> Iterator[tuple[str, str]]:
        lo, hi = self.reference_range
        if (lo is None) != (hi is None) or (lo is not None and lo > hi):
            yield ".reference_range", "is not [min, max] of the reference's finite values"
        if self.call_ms + self.stream_wait_ms + self.device_wait_ms > self.host_ms + 1.0:
            yield "", "its call, stream and device times exceed the parent's clock of the request (host_ms)"
        if (self.kind == "poison") != (self.poison_byte is not None):
            yield ".poison_byte", "is set on a case that is not poisoned, or missing on one that is"


@dataclass(frozen=True)
class Kernel:
    """A kernel the profiled call launched: its (demangled) name and stream id."""

    name: Annotated[str, Text(1, 300)]
    stream: Optional[int]


@dataclass(frozen=True)
class Profile:
    """The profiled call's kernels after the harness's marker kernel, and the marker's stream."""

    kernels: Annotated[Tuple[Kernel, ...], Items(0, 5000)]
    marker_stream: Optional[int]


@dataclass(frozen=True)
class Observations:
    """What the checking pass observed; ``failure`` names the stage that stopped and why."""

    failure: Optional[Annotated[str, Text(1, 400)]]
    build: Optional[Build] = None
    cases: Annotated[Tuple[Case, ...], Items(0, 200)] = ()
    profile: Optional[Profile] = None
    extra_shapes: Optional[Annotated[Tuple[SIZES, ...], Items(0, 16)]] = None


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


@dataclass(frozen=True)
class Round:
    """One round: the arms in the order they ran, each arm's time per invocation (ms), and the
    parent's clock (ms) around each request it did not time itself (the candidate's)."""

    times_ms: Mapping[ARM, POSITIVE_MS]
    order: Annotated[Tuple[ARM, ...], Items(1, 8)] = ()
    host_ms: Mapping[ARM, MS] = strict.field(default_factory=dict)


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
    """Per-call times on fresh input sets and on one repeated set, and the spot checks."""

    fresh: Annotated[Tuple[CallRound, ...], Items(0, 1000)]
    repeat: Annotated[Tuple[CallRound, ...], Items(0, 1000)]
    spot_checks: Annotated[Tuple[SpotCheck, ...], Items(0, 1000)]
    sets_per_round: POSITIVE


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


# ----------------------------------------------------------------------------- provenance
@dataclass(frozen=True)
class ProvFile:
    """A file the candidate built: its path in the build folder, sha256 and size as packed
    (``built_sha256``: before scrubbing), whether it was copied and where in the bag."""

    path: BUILD_PATH
    sha256: SHA256
    bytes: COUNT
    copied: bool
    bundle_path: Optional[RELPATH] = None
    built_sha256: Optional[SHA256] = None
    scrubbed: Optional[bool] = None


@dataclass(frozen=True)
class NinjaBuild:
    """The command lines of one ``build.ninja`` torch wrote for a ``load_inline`` extension."""

    path: BUILD_PATH
    commands: Annotated[Tuple[Annotated[str, Text(0, 20000)], ...], Items(0, 64)]
    cxx: Optional[Annotated[str, Text(0, 20000)]] = None
    nvcc: Optional[Annotated[str, Text(0, 20000)]] = None
    cflags: Optional[Annotated[str, Text(0, 20000)]] = None
    post_cflags: Optional[Annotated[str, Text(0, 20000)]] = None
    cuda_cflags: Optional[Annotated[str, Text(0, 20000)]] = None
    cuda_post_cflags: Optional[Annotated[str, Text(0, 20000)]] = None
    cuda_dlink_post_cflags: Optional[Annotated[str, Text(0, 20000)]] = None
    ldflags: Optional[Annotated[str, Text(0, 20000)]] = None


@dataclass(frozen=True)
class Binary:
    """A built binary (``.so`` or ``.cubin``) and the FTZ evidence counted in its SASS."""

    file: BUILD_PATH
    sha256: SHA256
    sass_file: Optional[RELPATH] = None
    sass_sha256: Optional[SHA256] = None
    ftz_counts: Optional[Mapping[Annotated[str, Text(1, 40, r"[a-z0-9_]+")], COUNT]] = None
    sass_says_ftz: Optional[bool] = None
    elf: Optional[Annotated[Tuple[Annotated[str, Text(0, 400)], ...], Items(0, 50)]] = None
    sass: Optional[Literal[None]] = None
    reason: Optional[SHORT] = None


@dataclass(frozen=True)
class Provenance:
    """What the candidate built, as collected by the parent after its child ended."""

    files: Annotated[Tuple[ProvFile, ...], Items(0, 2000)]
    builds: Annotated[Tuple[NinjaBuild, ...], Items(0, 20)]
    binaries: Annotated[Tuple[Binary, ...], Items(0, 200)]
    versions: Mapping[Annotated[str, Text(1, 40, r"[a-z0-9_]+")], Optional[Annotated[str, Text(1, 200)]]]
    built_with: Annotated[Tuple[Literal["load_inline", "triton"], ...], Items(0, 2)]
    copied_bytes: Optional[COUNT] = None


# ------------------------------------------------------------------------------- records
@dataclass(frozen=True)
class Verdict:
    """A named check's verdict: True (behaves), False (caught) or None (cannot decide)."""

    name: IDENT
    passed: Optional[bool]
    detail: Annotated[str, Text(0, 1000)]


@dataclass(frozen=True)
class Stage:
    """A stage of the candidate's run and its wall time (s)."""

    name: Literal[STAGES]
    seconds: SECONDS


@dataclass(frozen=True)
class CaseRef:
    """The case of a sharded run a record came from, and the copy bandwidth its process measured."""

    id: SHARD_ID
    bandwidth_gbps: Optional[GBPS]
    bandwidth_block: Optional[CopyBlock] = None


@dataclass(frozen=True)
class CandidateRecord:
    """One candidate checked against one task."""

    name: NAME
    file: RELPATH
    source_sha256: SHA256
    task: RELPATH
    task_sha256: SHA256
    config: RunConfig
    stages: Annotated[Tuple[Stage, ...], Items(0, 20)]
    observations: Observations
    timing: Timing
    blocks: Annotated[Tuple[Block, ...], Items(0, 4)]
    verdicts: Annotated[Tuple[Verdict, ...], Items(0, 40)]
    provenance: Provenance
    seconds: SECONDS
    compile_seconds: Optional[SECONDS]
    case: Optional[CaseRef] = None


@dataclass(frozen=True)
class Predicate:
    """The official predicate and its tolerances: ``torch.allclose(reference, candidate)``."""

    official: Literal["allclose"]
    atol: TOL
    rtol: TOL
    argument_order: Tuple[Literal["reference"], Literal["candidate"]]
    relative_scale: Literal["candidate"]
    call: Literal["torch.allclose(reference, candidate, atol=atol, rtol=rtol)"]
    inequality: Literal["|reference - candidate| <= atol + rtol * |candidate|"]
    equal_nan: Literal[False]


@dataclass(frozen=True)
class KernelBenchRef:
    commit: SHA1
    repository: Optional[Annotated[str, Text(1, 200)]] = None


@dataclass(frozen=True)
class RanOn:
    """Where a case ran: hashed host and GPU UUID, never the raw values."""

    host_sha256: SHA256
    engine: Literal["local", "submitit", "ray"]
    worker: Optional[Annotated[str, Text(0, 120)]]
    device: Literal["cuda", "cpu"]
    gpu_name: Optional[Annotated[str, Text(0, 120)]]
    gpu_uuid_sha256: Optional[SHA256]
    driver_version: Optional[Annotated[str, Text(0, 120)]]
    sm_clock_mhz: Optional[Annotated[int, Num(ge=0, le=99999)]]
    memory_clock_mhz: Optional[Annotated[int, Num(ge=0, le=99999)]]


@dataclass(frozen=True)
class Variant:
    sizes: SIZES
    extra_shapes: Annotated[Tuple[SIZES, ...], Items(0, 16)]


@dataclass(frozen=True)
class ShardCase:
    """A case of a sharded run's plan, its status and where it ran."""

    id: SHARD_ID
    index: Annotated[int, Num(ge=0, le=255)]
    kind: Literal["kernelbench-candidate"]
    task: RELPATH
    task_sha256: SHA256
    candidate: NAME
    candidate_sha256: SHA256
    profile: Literal["full", "quick"]
    seeds: Annotated[Tuple[int, ...], Items(0, 64)]
    variant: Variant
    status: Literal["done", "failed"]
    error: Optional[Annotated[str, Text(0, 400)]]
    ran_on: Optional[RanOn]


@dataclass(frozen=True)
class CandidatesDoc:
    """``results/candidates.json``."""

    schema: Literal["kbrepro/candidates"]
    schema_version: Literal[1]
    kind: Literal["kernelbench-candidates"]
    profile: Literal["full", "quick"]
    started_utc: UTC
    finished_utc: UTC
    predicate: Predicate
    kernelbench: KernelBenchRef
    bandwidth: Bandwidth
    candidates: Annotated[Tuple[CandidateRecord, ...], Items(1, 256)]
    device: Literal["cuda", "cpu"] = "cuda"
    cases: Optional[Annotated[Tuple[ShardCase, ...], Items(1, 256)]] = None


def load(doc: object) -> tuple[Optional[CandidatesDoc], list]:
    """``(CandidatesDoc, [])`` for a parsed ``candidates.json``, else ``(None, problems)``
    (:class:`~kbrepro.model.problems.Problem`, codes ``model.*``)."""
    return strict.build(CandidatesDoc, doc)


__all__ = ["CandidatesDoc", "CandidateRecord", "Observations", "Case", "Compare", "PredicateResult", "Output",
           "FullCompare", "MismatchCompare", "UnreadableCompare", "NonFinite", "StressResult", "Build", "Profile", "Kernel", "Timing", "Baseline", "PerCall", "CallRound", "SpotCheck", "Roofline",
           "Block", "Round", "Protocol", "CopyBlock", "Bandwidth", "Provenance", "ProvFile", "Binary", "NinjaBuild",
           "Verdict", "Stage", "Flags", "CaseRef", "ShardCase", "RanOn", "RunConfig", "Predicate", "load", "CASE_KINDS",
           "STAGES"]
