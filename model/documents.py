"""The documents registry and the typed, frozen records of a study bundle's documents.

One table, :data:`REGISTRY`, says for every document the product writes or reads: its name,
where it lies in the bag, which schema judges it (``schemas/<schema>.schema.json``, and the
document's own ``schema`` field ``kbrepro/<schema>``), whether a measured bundle must carry it,
and the record type it is read into. :func:`kbrepro.bundle.documents.load` is the one loader:
strict JSON, the canonical form, the schema, then the record (:func:`kbrepro.model.strict.build`).
A record that exists is valid; the checks after it read typed fields, never ``.get`` on a dict.

A record is built only after the document passed its schema, so its annotations follow the
schema: where the schema leaves an object open (``additionalProperties`` allowed), the record
is open too (``_open = True``: a key it does not declare is not a problem) and where the
schema leaves a value's shape to the study (a binding's ``details``, a provenance block),
the field is ``Any``. A new document is one record class here and one :class:`Document` line in
:data:`REGISTRY`.

Units are in the field names (``_seconds``, ``_ms``, ``_bytes``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, Mapping, Optional, Tuple

from kbrepro.model.scalars import COUNT, ENC, POSITIVE_MS, RELPATH, SECONDS, SHA1, SHA256, UTC
from kbrepro.model.strict import Num



# ------------------------------------------------------------------------ bundle.json
@dataclass(frozen=True)
class MetaStudy:
    """Which study judged the run: its name and profile (null for an imported post), the study
    file and the sha256 of every file of its folder."""

    _open: ClassVar[bool] = True
    name: Optional[str]
    profile: Optional[str]
    file: RELPATH
    sha256: SHA256
    files: Mapping[RELPATH, SHA256]


@dataclass(frozen=True)
class FileRef:
    """A bundled file and its sha256 (``bytes`` where recorded)."""

    _open: ClassVar[bool] = True
    file: RELPATH
    sha256: SHA256
    bytes: Optional[COUNT] = None


@dataclass(frozen=True)
class CompleteCubinRef(FileRef):
    """The complete cubin (every kernel of the module) and whether the loaded cubin is its prefix."""

    loaded_is_prefix: Optional[bool] = None


@dataclass(frozen=True)
class MetaKernelBench:
    _open: ClassVar[bool] = True
    commit: SHA1
    lock_file: RELPATH
    files_included: bool
    reason: Optional[str] = None
    files: Optional[Tuple[str, ...]] = None


@dataclass(frozen=True)
class Product:
    _open: ClassVar[bool] = True
    version: Optional[str] = None
    commit: Optional[str] = None


@dataclass(frozen=True)
class BundleMeta:
    """``data/bundle.json``: the format, the bundle's name and source, the study, the claims
    spec, the KernelBench pin, the product, the documents listed (bag path -> schema name)."""

    schema: Literal["kbrepro/bundle"]
    schema_version: Literal[2]
    format: Literal["kbrepro-bundle"]
    format_version: int
    name: str
    source: Literal["measured", "imported"]
    study: MetaStudy
    claims: FileRef
    kernelbench: MetaKernelBench
    product: Product
    documents: Mapping[RELPATH, str]
    notes: Tuple[str, ...]


# --------------------------------------------------------------------------- run.json
@dataclass(frozen=True)
class RunStudy:
    _open: ClassVar[bool] = True
    name: str
    profile: str
    source_name: Optional[str] = None
    sha256: Optional[SHA256] = None
    resolved: Optional[Mapping[str, Any]] = None


@dataclass(frozen=True)
class Stage:
    _open: ClassVar[bool] = True
    name: str
    seconds: SECONDS


@dataclass(frozen=True)
class RunKernelBench:
    _open: ClassVar[bool] = True
    commit: SHA1
    repository: Optional[str] = None
    verified_by: Optional[str] = None
    files: Optional[Tuple[str, ...]] = None


@dataclass(frozen=True)
class Run:
    """``results/run.json``: what was run, when (UTC), how long each stage took (s, at most
    1e7: 100 days, model/scalars.py), its status."""

    _open: ClassVar[bool] = True
    schema: Literal["kbrepro/run"]
    schema_version: Literal[1]
    study: RunStudy
    status: Literal["running", "complete", "failed", "imported"]
    started_utc: Optional[UTC]
    stages: Tuple[Stage, ...]
    finished_utc: Optional[UTC] = None
    wall_seconds: Optional[SECONDS] = None
    failure: Optional[Mapping[str, Any]] = None
    imported: Any = None
    kernelbench: Optional[RunKernelBench] = None
    compile_cache: Optional[Mapping[str, Any]] = None
    precision: Optional[Mapping[str, Any]] = None
    peak_gpu_memory_bytes: Optional[Mapping[str, COUNT]] = None


# ------------------------------------------------------------------- environment.json
@dataclass(frozen=True)
class EnvField:
    """One fingerprint field: its value (any JSON), where it came from, and why it is null."""

    value: Any
    source: str
    reason: Optional[str]


@dataclass(frozen=True)
class Environment:
    """``environment.json``: every field of the environment fingerprint with its source."""

    schema: Literal["kbrepro/environment"]
    schema_version: Literal[1]
    fields: Mapping[str, EnvField]
    provenance: Any = None

    def value(self, name: str) -> Any:
        """The field's value, None where the field is absent or null."""
        f = self.fields.get(name)
        return None if f is None else f.value


# ----------------------------------------------------------------------- compile.json
@dataclass(frozen=True)
class WitnessEvidence:
    """What the FTZ witness found for one binary (harness/records.py ``WitnessVerdict``): the
    task, whether the reference discriminates there, whether the binary flushes (null:
    undecided); an imported record may lack a field and says what it was ``derived_from``."""

    _open: ClassVar[bool] = True
    task: Optional[int] = None
    discriminates: Optional[bool] = None
    flushes: Optional[bool] = None
    bit_identical_to_reference: Optional[bool] = None
    derived_from: Optional[str] = None


@dataclass(frozen=True)
class FtzEvidence:
    """A variant's FTZ evidence: the mode its route and options give, the witness's verdict,
    the PTX and SASS counts, and whether they agree with the mode (null: nothing decided)."""

    _open: ClassVar[bool] = True
    expected: bool
    witness: Optional[WitnessEvidence]
    agrees: Optional[bool]
    ptx: Optional[Mapping[str, Any]] = None
    sass: Optional[Mapping[str, Any]] = None


@dataclass(frozen=True)
class Variant:
    """A compiled variant: its route, the options really in effect, its binaries and its FTZ evidence."""

    _open: ClassVar[bool] = True
    name: str
    route: Literal["nvrtc", "cupy_rawmodule"]
    expected_ftz: bool
    effective_options: Optional[Tuple[str, ...]]
    ftz_evidence: FtzEvidence
    requested_options: Optional[Tuple[str, ...]] = None
    nvrtc_version: Optional[Tuple[int, ...]] = None
    arch: Optional[str] = None
    source: Optional[Mapping[str, Any]] = None
    cubin: Optional[FileRef] = None
    cubin_complete: Optional[CompleteCubinRef] = None
    ptx: Optional[FileRef] = None
    sass: Optional[FileRef] = None
    program_log: Optional[str] = None
    our_cache: Optional[Literal["hit", "miss", "disabled"]] = None
    nvrtc_cache_disabled_by: Tuple[str, ...] = ()
    headers: Optional[Tuple[FileRef, ...]] = None


@dataclass(frozen=True)
class Compile:
    """``results/compile.json``: the kernel source and one record per compiled variant."""

    _open: ClassVar[bool] = True
    schema: Literal["kbrepro/compile"]
    schema_version: Literal[1]
    source: Optional[Mapping[str, Any]]
    variants: Tuple[Variant, ...]
    provenance: Any = None


# ----------------------------------------------------------------------- timings.json
@dataclass(frozen=True)
class Protocol:
    """A block's timing protocol (harness/timing.py): mode, warm-ups, rounds, invocations per
    arm and round, the seed of the arm order; the optional parts of later protocols."""

    mode: Literal["events", "graph"]
    warmups: COUNT
    rounds: COUNT
    invocations_per_pair: Annotated[int, Num(ge=1)]
    order_seed: Optional[int]
    adaptive: Optional[Mapping[str, Any]] = None
    l2: Optional[Literal["warm", "cold"]] = None
    inputs: Optional[Literal["fresh"]] = None
    calibration_ms: Optional[Annotated[float, Num(gt=0)]] = None
    io_bytes: Optional[Annotated[int, Num(ge=1)]] = None
    pool_bytes: Optional[Annotated[int, Num(ge=0, le=17179869184)]] = None

    def to_doc(self) -> dict:
        """The protocol as its JSON object: the required fields, and the optional ones that are
        present (defs.schema.json allows null only for ``order_seed``, so an absent optional
        field and a None one are the same)."""
        required = ("mode", "warmups", "rounds", "invocations_per_pair", "order_seed")
        out = {}
        for k in self.__dataclass_fields__:
            v = getattr(self, k)
            if k in required or v is not None:
                out[k] = dict(v) if isinstance(v, Mapping) else v
        return out


@dataclass(frozen=True)
class Round:
    """One round: the arms' order and each arm's time per invocation (ms; positive, as
    timings.schema.json says: a zero time is a broken timer, and a ratio's denominator; and
    within 1 ns to 1e8 ms, the bounds of a candidate's times, model/scalars.py)."""

    times_ms: Mapping[str, POSITIVE_MS]
    order: Optional[Tuple[str, ...]] = None
    clocks: Optional[Mapping[str, Any]] = None


@dataclass(frozen=True)
class TimingBlock:
    """A timing block: the arms of one task and scope timed interleaved, every raw round kept."""

    _open: ClassVar[bool] = True
    id: str
    task: int
    scope: str
    mode: Literal["events", "graph"]
    kind: str
    protocol: Protocol
    arms: Tuple[str, ...]
    rounds: Tuple[Round, ...]
    shape: Optional[Tuple[COUNT, ...]] = None
    shape_B_K_H: Optional[Tuple[COUNT, ...]] = None
    checks: Optional[Mapping[str, Any]] = None
    skipped: Optional[str] = None
    l2: Optional[Literal["warm", "cold"]] = None
    flush_bytes: Optional[COUNT] = None
    adaptive: Optional[Mapping[str, Any]] = None


@dataclass(frozen=True)
class Timings:
    """``results/timings.json``: the timing blocks (ms per invocation) and a study's extras."""

    _open: ClassVar[bool] = True
    schema: Literal["kbrepro/timings"]
    schema_version: Literal[1]
    blocks: Tuple[TimingBlock, ...]
    provenance: Any = None
    extras: Optional[Mapping[str, Any]] = None


# ------------------------------------------------------- witness, correctness, selftest
@dataclass(frozen=True)
class ValueRecord:
    """A float32 value and its bits (``0x`` and 8 hex digits)."""

    value: ENC
    bits: str


@dataclass(frozen=True)
class ReferenceCpu:
    """The witness's reference computed on the CPU with denormals kept and flushed
    (``torch.set_flush_denormal(True)``), one value per output element."""

    keep: Tuple[ValueRecord, ...]
    flush: Tuple[ValueRecord, ...]
    flush_supported: Optional[bool] = None


@dataclass(frozen=True)
class Witness:
    """``results/witness.json``: the minimal FTZ witness, its inputs, each binary's outputs and
    verdicts, and the reference on the CPU with denormals kept and flushed."""

    _open: ClassVar[bool] = True
    schema: Literal["kbrepro/witness"]
    schema_version: Literal[1]
    task: int
    inputs: Tuple[ValueRecord, ...]
    outputs: Mapping[str, Tuple[ValueRecord, ...]]
    verdicts: Mapping[str, Mapping[str, Any]]
    reference_cpu: ReferenceCpu
    discriminates: bool
    discriminating_elements: Tuple[COUNT, ...]
    provenance: Any = None
    description: Optional[str] = None


@dataclass(frozen=True)
class Predicate:
    """The correctness predicate: its tolerances (atol, rtol: absolute and relative, of the
    inequality ``|reference - candidate| <= atol + rtol * |candidate|``), the official and the
    legacy predicate's names and their definitions (argument order, inequality, scale)."""

    _open: ClassVar[bool] = True
    atol: Annotated[float, Num(ge=0)]
    rtol: Annotated[float, Num(ge=0)]
    official: Literal["allclose"]
    legacy: Literal["legacy_reference_scaled"]
    definitions: Optional[Mapping[str, Any]] = None


@dataclass(frozen=True)
class DirectionResult:
    _open: ClassVar[bool] = True
    allclose_reference_candidate: bool
    allclose_candidate_reference: bool


@dataclass(frozen=True)
class PredicateDirection:
    """The predicate-direction witness: one reference and one candidate value (numbers, or the
    encoded non-finite strings) and what ``allclose`` gives in each argument order, per dtype."""

    _open: ClassVar[bool] = True
    reference: Any
    candidate: Any
    results: Mapping[str, DirectionResult]
    atol: Any = None
    rtol: Any = None
    torch_version: Any = None


#: a check's record is :func:`kbrepro.harness.checks.compare`'s output (defs.schema.json's
#: ``check``); ``checks``: variant name -> check
ChecksByVariant = Mapping[str, Mapping[str, Any]]


@dataclass(frozen=True)
class ProgramCase:
    """Which input a full-program case drew: the task, the seed, the distribution, the shape."""

    task: int
    seed: int
    distribution: Literal["official_uniform", "normal", "uniform_x100", "uniform_x_minus100"]
    shape: Optional[Tuple[COUNT, ...]] = None


@dataclass(frozen=True)
class FullProgramCase:
    """One full-program correctness case: its input and every variant's check on it."""

    case: ProgramCase
    checks: ChecksByVariant


@dataclass(frozen=True)
class ExtraShapeCase:
    """A correctness case at an extra shape (the case's keys are the study's: task, seed, size)."""

    _open: ClassVar[bool] = True
    case: Mapping[str, Any]
    checks: ChecksByVariant


@dataclass(frozen=True)
class Correctness:
    """``results/correctness.json``: the predicate, the full-program cases, the per-task
    controls (task number as a string -> sections; their shapes are the study's, read
    through :mod:`kbrepro.bundle.crosscheck.study`), the extra-shape cases."""

    _open: ClassVar[bool] = True
    schema: Literal["kbrepro/correctness"]
    schema_version: Literal[1]
    predicate: Predicate
    full_program: Tuple[FullProgramCase, ...]
    tasks: Mapping[str, Mapping[str, Any]]
    provenance: Any = None
    extra_shapes: Optional[Tuple[ExtraShapeCase, ...]] = None
    predicate_direction: Optional[PredicateDirection] = None


@dataclass(frozen=True)
class SelftestResult:
    """One known-bad kernel: the checks expected to catch it, those that failed, whether it
    was caught as expected, and every named check's verdict (null: did not decide)."""

    name: str
    description: str
    expected: Tuple[str, ...]
    failed_checks: Tuple[str, ...]
    caught: bool
    as_expected: bool
    checks: Mapping[str, Optional[bool]]
    details: Optional[Mapping[str, Any]] = None


@dataclass(frozen=True)
class Selftest:
    """``results/selftest.json``: the self-tests of the checks on known-bad kernels."""

    schema: Literal["kbrepro/selftest"]
    schema_version: Literal[1]
    all_as_expected: bool
    tests: Tuple[SelftestResult, ...]


# ------------------------------------------------------------------------- claims.json
Verdict = Literal["holds", "fails", "inconclusive", "not_comparable"]


@dataclass(frozen=True)
class ClaimCheck:
    _open: ClassVar[bool] = True
    kind: str
    verdict: Verdict
    literal_verdict: Optional[Verdict] = None
    items: Optional[Tuple[Mapping[str, Any], ...]] = None


@dataclass(frozen=True)
class Claim:
    _open: ClassVar[bool] = True
    id: str
    sentence: str
    verdict: Verdict
    checks: Tuple[ClaimCheck, ...]
    literal_verdict: Optional[Verdict] = None


@dataclass(frozen=True)
class Claims:
    """``claims.json``: each claim's verdict and the numbers it was decided on."""

    _open: ClassVar[bool] = True
    schema: Literal["kbrepro/claims"]
    schema_version: Literal[1]
    study: str
    evaluated_on: str
    claims: Tuple[Claim, ...]
    summary: Mapping[str, COUNT]
    bootstrap: Optional[Mapping[str, Any]] = None
    spec: Optional[Mapping[str, Any]] = None


# ----------------------------------------------------------------- a bundle's records
@dataclass(frozen=True)
class Records:
    """The typed records of one study bundle's documents (None: the bundle has no valid one),
    as :func:`kbrepro.bundle.documents.load` built them; what the checks after tier 3's gate read."""

    bundle: Optional[BundleMeta] = None
    run: Optional[Run] = None
    environment: Optional[Environment] = None
    compile: Optional[Compile] = None
    witness: Optional[Witness] = None
    correctness: Optional[Correctness] = None
    timings: Optional[Timings] = None
    selftest: Optional[Selftest] = None
    claims: Optional[Claims] = None


# ------------------------------------------------------------------------ the registry
@dataclass(frozen=True)
class Document:
    """One line of the registry: a document's name, its bag path, the schema that judges it,
    whether a measured bundle must carry it, and its record type (None: a study's own
    document, read by its schema alone)."""

    name: str
    bag_path: str
    schema: str
    record: Optional[type]
    required: bool = False


REGISTRY: Tuple[Document, ...] = (
    Document("run", "data/results/run.json", "run", Run, required=True),
    Document("environment", "data/environment.json", "environment", Environment, required=True),
    Document("compile", "data/results/compile.json", "compile", Compile, required=True),
    Document("witness", "data/results/witness.json", "witness", Witness),
    Document("correctness", "data/results/correctness.json", "correctness", Correctness, required=True),
    Document("timings", "data/results/timings.json", "timings", Timings, required=True),
    Document("selftest", "data/results/selftest.json", "selftest", Selftest),
    Document("claims", "data/claims.json", "claims", Claims),
    Document("bundle", "data/bundle.json", "bundle", BundleMeta),
)
BY_NAME: Mapping[str, Document] = {d.name: d for d in REGISTRY}
#: the result documents the engine writes for any study (``bundle.json`` and ``claims.json``
#: are the packer's)
RESULT_DOCUMENTS: Tuple[str, ...] = tuple(d.name for d in REGISTRY if d.name not in ("claims", "bundle"))


def study_document(name: str) -> Document:
    """The registry line of a study's own document ``name`` (``data/results/<name>.json``,
    judged by the study's schema, read by it alone)."""
    return Document(name, f"data/results/{name}.json", name, None)


__all__ = ["Records", "REGISTRY", "BY_NAME", "RESULT_DOCUMENTS", "Document", "study_document", "BundleMeta", "Run",
           "Environment", "Compile", "Variant", "Timings", "TimingBlock", "Protocol", "Round", "Witness",
           "Correctness", "Selftest", "Claims", "Claim", "EnvField", "FileRef", "Stage"]
