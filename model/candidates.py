"""Typed, frozen records of ``results/candidates.json`` (schema ``kbrepro/candidates``, versions 1 and 2).

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
from typing import Annotated, Iterator, Literal, Mapping, Optional, Tuple

from kbrepro.model import strict
from kbrepro.model.compare_records import (Compare, FullCompare, MismatchCompare, NonFinite,  # noqa: F401 (re-exported)
                                           PredicateResult, StressResult, UnreadableCompare)
from kbrepro.model.scalars import (ARM, BUILD_PATH, CASE_ID, CASE_KINDS, COUNT, DEVICE, DIGEST, FLAGS, GBPS,
                                   IDENT, LAYOUT, MS, NAME, POSITIVE, POSITIVE_MS, RELPATH, SECONDS, SHA1, SHA256,
                                   SHARD_ID, SHORT, SIZES, STAGES, THREADS, TOL, UTC, Flags)
from kbrepro.model.strict import Items, Num, Text
from kbrepro.model.timing_records import (Bandwidth, Baseline, Block, CallRound, Clock, CopyBlock,  # noqa: F401
                                          HeldOutputs, PerCall, Protocol, Roofline, Round, SpotCheck, Timing)


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
    #: why no extra shape was checked ("": one was; absent in records made before it existed):
    #: the reference itself raised at the default extra shape and at the fallback
    no_extra_shape: SHORT = ""


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
        if self.plain and self.type != "torch.Tensor":
            yield ".plain", f"is true for an output of type {self.type!r} (a plain tensor is a torch.Tensor)"


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
    host_ms: POSITIVE_MS
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
        if isinstance(self.compare, FullCompare):
            # a compared output was read back as a tensor: it has a digest, and every output was read
            if self.output.digest is None or not self.output_count or (
                    self.reference_count is not None and self.output_count != self.reference_count):
                yield ".compare", "compares element by element an output that was not read back as a tensor"


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
    #: 1: the timing protocol before issue 27; 2: every timed invocation on fresh inputs, every
    #: timed output held against eager's, the parent's clock over two lengths
    schema_version: Literal[1, 2]
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
           "Verdict", "Stage", "Flags", "Clock", "HeldOutputs", "CaseRef", "ShardCase", "RanOn", "RunConfig", "Predicate", "load", "CASE_KINDS",
           "STAGES"]
