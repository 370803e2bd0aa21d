"""Import a published study's original output files as this product's result documents.

The pointwise-fusion post published five JSON files and a driver log; this module turns
them into ``run``, ``environment``, ``compile``, ``correctness``, ``timings`` and ``scout``
documents (``schemas/<name>.schema.json``), so they can be validated, packed and checked
like results this product measured. The originals travel unchanged beside them.

Post formats (``schemas/post-*.schema.json``, recognised by structure; the file name is
only a fallback so that a damaged file is still reported against the right format):

- ``post-fusion-results``: ``fusion_results.json`` (CuPy RawModule route, our variant
  ``cupy_default``) and ``fusion_preserve_denormals.json`` (explicit NVRTC
  ``--ftz=false``, our ``nvrtc_ftz_false``); which one a file is comes from its
  ``compiler_config``, not its name.
- ``post-fusion-controls``: ``fusion_controls.json`` (extra shape, tiny-value controls).
- ``post-fusion-ftz-cost``: ``fusion_ftz_cost.json`` (explicit ``--ftz=true`` versus
  ``--ftz=false``, paired graph timings).
- ``post-scout``: ``scout.json`` (task 14/51 rewrites).
- ``run_all.log``: start/end times, the version header and per-step wall times.

What the post kept is carried over, what it did not keep is null, and what is derived says
so. The post's checks are reference-scaled ("legacy"); the official (candidate-scaled,
``torch.allclose``) verdict is derived from the saved worst ratio and max |d| with
:func:`harness.checks.legacy_margin_verdict` and labelled ``derived_from``. It is not
derived for controls whose input holds NaN by construction (the boundary array and the
tiny-value array): ``allclose`` never counts a NaN pair close, so the margin rule does not
apply there, and those controls are decided by their legacy criterion.

Every original is parsed strictly (no NaN/Infinity tokens, no duplicate keys), validated
against its post schema and checked for internal consistency before conversion; every
produced document is validated against our schema. Problems raise
:class:`~kbrepro.errors.UnreadableInputError` (cannot read or parse, no post files) or
:class:`~kbrepro.errors.InvalidResultsError` (a schema or consistency violation; the
message lists every violation with its JSON path).
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from kbrepro import schemas

_SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"


def _study_schema(name: str) -> dict | None:
    """This study's own schema ``name`` (post formats, scout), or None if it has none."""
    p = _SCHEMA_DIR / f"{name}.schema.json"
    return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else None


def _validate(doc, name: str) -> list:
    """Violations of ``doc`` against this study's schema ``name`` or, failing that, the
    product's; for our correctness document also the study's sections schema."""
    own = _study_schema(name)
    if own is not None:
        return schemas.validate_with(doc, own, name)
    out = schemas.validate(doc, name)
    sections = _study_schema(f"{name}.sections")
    if sections is not None:
        out += schemas.validate_with(doc, sections, name)
    return out
from kbrepro.harness import jsonio
from kbrepro.harness.checks import LEGACY, OFFICIAL, PREDICATES, Tolerance, legacy_margin_verdict
from kbrepro.errors import InvalidResultsError, UnreadableInputError

POST_RESULTS = "post-fusion-results"
POST_CONTROLS = "post-fusion-controls"
POST_FTZ_COST = "post-fusion-ftz-cost"
POST_SCOUT = "post-scout"
POST_LOG = "post-run-log"
POST_FORMATS = (POST_RESULTS, POST_CONTROLS, POST_FTZ_COST, POST_SCOUT)

#: The post's file names and their formats (a fallback to structural recognition).
KNOWN_FILES = {
    "fusion_results.json": POST_RESULTS,
    "fusion_preserve_denormals.json": POST_RESULTS,
    "fusion_controls.json": POST_CONTROLS,
    "fusion_ftz_cost.json": POST_FTZ_COST,
    "scout.json": POST_SCOUT,
}
LOG_FILE = "run_all.log"

STUDY = {"name": "pointwise-fusion-ftz", "profile": "full"}
DOCUMENT_ORDER = ("run", "environment", "compile", "correctness", "timings", "scout")

#: The post's distribution names -> ours.
DISTRIBUTIONS = {"official_uniform": "official_uniform", "normal": "normal",
                 "scaled_100": "uniform_x100", "scaled_minus_100": "uniform_x_minus100"}
#: Our variants -> their fusion_controls.json tiny-value keys (reference: the PyTorch tail).
TINY_VARIANTS = {"cupy_default": "cupy_default_ftz_true", "nvrtc_ftz_true": "explicit_ftz_true",
                 "nvrtc_ftz_false": "explicit_ftz_false"}
#: The tiny-value control the compile records take their FTZ witness from.
WITNESS_TASK = 81
WITNESS_DERIVED_FROM = f"tiny_value_controls task {WITNESS_TASK} (no minimal witness in the source)"
#: Facts of the post's published scripts that its result files do not record.
POST_SCRIPT_FACTS = {
    "bench_warmups": 8, "bench_order_seed": 913, "bench_invocations": 5, "ftz_cost_invocations": 10,
    "timing_seed": 42, "extra_shape_seed": 371, "tiny_value_shape": [128, 1024],
}
NOT_RECORDED = "not recorded by the post's scripts"
DERIVED_NAN_CAVEAT = "NaN count not recorded by the source, the verdict assumes no NaN pair"

_HINT_RESTORE = ("the file is not an unmodified output of the post's scripts: restore the original "
                 "(compare its sha256 with the post's bundle manifest) and import again")


@dataclass(frozen=True)
class ImportedRun:
    """A published run converted to our documents.

    ``documents``: our document name (``run``, ``environment``, ``compile``,
    ``correctness``, ``timings``, ``scout``) -> document, each valid against its schema.
    ``originals``: original JSON file name -> its exact bytes (pack unchanged).
    ``log``: the bytes of ``run_all.log``, or None if the directory had none.
    ``notes``: what could not be carried over, or was derived rather than recorded.
    ``formats``: original file name -> its post format (``run_all.log`` -> ``post-run-log``).
    """

    documents: dict[str, dict]
    originals: dict[str, bytes]
    log: bytes | None
    notes: list[str]
    formats: dict[str, str] = field(default_factory=dict)


# ---------------------------------------------------------------------------- recognition
def recognise_document(doc: Any) -> str | None:
    """The format of a parsed JSON value by its structure: ``kbrepro/<name>`` for our own
    documents, one of :data:`POST_FORMATS`, or None."""
    if isinstance(doc, dict):
        if isinstance(doc.get("schema"), str) and doc["schema"].startswith("kbrepro/"):
            return doc["schema"]
        if "small_shapes" in doc or "tiny_value_controls" in doc:
            return POST_CONTROLS
        if "configs" in doc and "tasks" in doc:
            return POST_FTZ_COST
        if "tasks" in doc and ("compiler_config" in doc or "protocol" in doc):
            return POST_RESULTS
        return None
    if isinstance(doc, list) and doc and all(isinstance(x, dict) for x in doc) \
            and all({"task", "seed", "fp32"} <= set(x) for x in doc):
        return POST_SCOUT
    return None


def recognise(path) -> str | None:
    """Which format the JSON file at ``path`` is: ``post-fusion-results``,
    ``post-fusion-controls``, ``post-fusion-ftz-cost``, ``post-scout``, our own
    ``kbrepro/<name>``, or None if unknown or unreadable.

    Recognition is by structure (parsed leniently, so a file with a NaN token is still
    recognised and then refused with a precise message by the strict import). A file whose
    structure is not recognised but whose name is one of the post's file names is taken to
    be that format, so that importing it reports what is wrong with it."""
    p = Path(path)
    try:
        if not p.is_file():  # never open a FIFO or a device (it could block)
            return None
        data = p.read_bytes()
    except OSError:
        return None
    return recognise_bytes(data, p.name)


def recognise_bytes(data: bytes, name: str) -> str | None:
    """:func:`recognise` of bytes already read from a file called ``name``."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return KNOWN_FILES.get(name)
    return recognise_document(doc) or KNOWN_FILES.get(name)


def read_input_file(p: Path, what: str = "result file") -> bytes:
    """The bytes of ``p``, a readable regular file. Raises UnreadableInputError naming it if
    it is a folder, a FIFO or device, or cannot be read: an input is read or refused, never
    skipped."""
    from kbrepro.errors import check_input_file

    hint = "make it a readable file, or move it out of the folder"
    check_input_file(p, what, hint)
    try:
        return p.read_bytes()
    except OSError as exc:
        raise UnreadableInputError(f"cannot read {what} {p.name}: {(exc.strerror or type(exc).__name__).lower()}",
                                   hint) from exc


# ---------------------------------------------------------------------------- strict loading
def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _parse_strict(data: bytes, name: str) -> Any:
    """:func:`harness.jsonio.loads_strict`, with the JSON path of every non-finite token
    added to the message when the file parses leniently."""
    try:
        return jsonio.loads_strict(data, where=name)
    except UnreadableInputError as exc:
        where = ""
        try:
            paths = schemas.nonfinite_paths(json.loads(data.decode("utf-8")))
            if paths:
                shown = ", ".join(paths[:20]) + (f" and {len(paths) - 20} more" if len(paths) > 20 else "")
                where = f"; non-finite value(s) at {shown}"
        except (ValueError, UnicodeDecodeError, RecursionError):
            pass
        raise UnreadableInputError(
            f"{exc.message}{where}",
            "the post's scripts never write NaN/Infinity tokens into these files (or duplicate keys): "
            + _HINT_RESTORE) from exc


def _v(path: tuple, message: str, fmt: str) -> schemas.Violation:
    return schemas.Violation(schemas.json_path(path), message, fmt)


def _post_checks(doc: Any, fmt: str) -> Iterator[tuple[tuple, dict]]:
    """(path, check) for every check object in a validated post document."""
    if fmt == POST_RESULTS:
        for t, task in doc["tasks"].items():
            for i, c in enumerate(task["correctness"]):
                yield ("tasks", t, "correctness", i), c
            for i, c in enumerate(task["tail_controls"]):
                yield ("tasks", t, "tail_controls", i), c
            for k in ("timing_input_correctness", "torchscript_correctness", "torchscript_tail_correctness",
                      "graph_mutation_correctness"):
                yield ("tasks", t, k), task[k]
    elif fmt == POST_CONTROLS:
        for t, s in doc["small_shapes"].items():
            for k in ("cuda_correctness", "torchscript_correctness"):
                yield ("small_shapes", t, k), s[k]
        for t, s in doc["tiny_value_controls"].items():
            for k in ("cupy_default_ftz_true", "explicit_ftz_true", "explicit_true_vs_cupy_default",
                      "explicit_ftz_false"):
                yield ("tiny_value_controls", t, k), s[k]
    elif fmt == POST_FTZ_COST:
        for t, s in doc["tasks"].items():
            for k in ("True", "False"):
                yield ("tasks", t, "checks", k), s["checks"][k]


def _post_timings(doc: Any, fmt: str) -> Iterator[tuple[tuple, dict]]:
    """(path, timing block) for every timing block in a validated post document."""
    if fmt == POST_RESULTS:
        for t, task in doc["tasks"].items():
            for k, b in task["timings"].items():
                yield ("tasks", t, "timings", k), b
    elif fmt == POST_CONTROLS:
        for t, s in doc["small_shapes"].items():
            for k in ("events", "graph"):
                if k in s:
                    yield ("small_shapes", t, k), s[k]
    elif fmt == POST_FTZ_COST:
        for t, s in doc["tasks"].items():
            yield ("tasks", t, "graph"), s["graph"]


def consistency_violations(doc: Any, fmt: str) -> list[schemas.Violation]:
    """Internal contradictions of a schema-valid post document: counts out of range, a
    pass flag that disagrees with the failing counts, rounds that disagree with the saved
    samples or the protocol's round count, duplicate correctness cases."""
    out: list[schemas.Violation] = []
    for path, c in _post_checks(doc, fmt):
        if "shape_error" in c:
            continue
        n, bad = c["element_count"], c["bad_finite"] + c["bad_special"]
        if c["bit_equal_count"] > n:
            out.append(_v(path + ("bit_equal_count",), f"{c['bit_equal_count']} exceeds element_count {n}", fmt))
        if bad > n:
            out.append(_v(path, f"bad_finite + bad_special = {bad} exceeds element_count {n}", fmt))
        if c["pass"] != (bad == 0):
            out.append(_v(path + ("pass",), f"pass is {c['pass']} but bad_finite + bad_special = {bad}", fmt))
    for path, b in _post_timings(doc, fmt):
        arms = set(b["stats"])
        for i, r in enumerate(b["rounds"]):
            if set(r) != arms:
                out.append(_v(path + ("rounds", i), f"arms {sorted(r)} differ from the stats arms {sorted(arms)}", fmt))
        for arm, st in b["stats"].items():
            if sorted(r[arm] for r in b["rounds"] if arm in r) != st["samples_ms"]:
                out.append(_v(path + ("stats", arm, "samples_ms"),
                              "does not equal the sorted per-round times of this arm", fmt))
        if fmt == POST_RESULTS and len(b["rounds"]) != doc["protocol"]["rounds"]:
            out.append(_v(path + ("rounds",), f"{len(b['rounds'])} rounds, protocol.rounds is "
                                              f"{doc['protocol']['rounds']}", fmt))
    if fmt == POST_RESULTS:
        for t, task in doc["tasks"].items():
            seen = set()
            for i, c in enumerate(task["correctness"]):
                key = (c["seed"], c["distribution"])
                if key in seen:
                    out.append(_v(("tasks", t, "correctness", i), f"duplicate case seed {key[0]} {key[1]}", fmt))
                seen.add(key)
    if fmt == POST_SCOUT:
        for i, case in enumerate(doc):
            for k in ("fp32", "fp64"):
                s = case[k]
                if s["pass"] != (s["bad"] == 0):
                    out.append(_v((i, k, "pass"), f"pass is {s['pass']} but bad = {s['bad']}", fmt))
    return out


def _refuse(name: str, what: str, violations: list[schemas.Violation], hint: str) -> InvalidResultsError:
    lines = "\n".join(f"  {v.path}: {v.message}" for v in violations)
    return InvalidResultsError(f"{name} {what}: {len(violations)} violation(s):\n{lines}", hint)


def load_post_file(path, fmt: str | None = None) -> tuple[bytes, Any, str]:
    """Read, strictly parse and validate one post file. Returns ``(bytes, document,
    format)``. Raises UnreadableInputError (unreadable, not a regular file, not strict
    JSON, not a post format) or InvalidResultsError (schema or consistency violations, all
    listed)."""
    p = Path(path)
    data = read_input_file(p, "file")
    return load_post_bytes(data, p.name, fmt)


def load_post_bytes(data: bytes, name: str, fmt: str | None = None) -> tuple[bytes, Any, str]:
    """:func:`load_post_file` of bytes already read from a file called ``name``."""
    fmt = fmt or recognise_bytes(data, name)
    if fmt not in POST_FORMATS:
        raise UnreadableInputError(f"{name} is not one of the post's result formats ({', '.join(POST_FORMATS)})",
                                   "import the directory that holds the post's original output files")
    doc = _parse_strict(data, name)
    violations = _validate(doc, fmt)
    if violations:
        raise _refuse(name, f"does not match the post format {fmt}", violations, _HINT_RESTORE)
    violations = consistency_violations(doc, fmt)
    if violations:
        raise _refuse(name, f"contradicts itself ({fmt})", violations, _HINT_RESTORE)
    return data, doc, fmt


def results_variant(doc: dict) -> str:
    """Our variant name for a post-fusion-results document, from its compiler_config."""
    cc = doc["compiler_config"]
    if "route" in cc:
        return "cupy_default"
    if "--ftz=false" in cc["options"]:
        return "nvrtc_ftz_false"
    if "--ftz=true" in cc["options"]:
        return "nvrtc_ftz_true"
    raise InvalidResultsError(f"compiler_config names no --ftz option: {cc['options']}",
                              "only the post's CuPy-default and explicit --ftz=true/false routes can be imported")


# ---------------------------------------------------------------------------- log
@dataclass(frozen=True)
class LogSummary:
    """What ``run_all.log`` records: times, per-step wall times and the version header."""

    started_utc: str | None
    finished_utc: str | None
    failed_steps: int | None
    stages: list[dict]
    header: dict
    notes: list[str]


_UTC = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$")
_STEP = re.compile(r"^STEP\s+(\S+)\s+([0-9]+(?:\.[0-9]*)?)\s+rc=(-?[0-9]+)\s*$")
_START = re.compile(r"^run_all\.sh start\s+(\S+)(?:.*\bsteps:\s*(.*))?$")
_END = re.compile(r"^run_all\.sh end\s+(\S+)(?:.*\bfailed_steps=([0-9]+))?")


def parse_log(data: bytes) -> LogSummary:
    """Parse ``run_all.log``. Never raises on content: what cannot be read becomes a note."""
    text = data.decode("utf-8", errors="replace")
    lines = text.splitlines()
    notes: list[str] = []
    started = finished = None
    failed = None
    stages: list[dict] = []
    header: dict = {}
    header_lines: list[str] = []
    in_header = False
    for line in lines:
        s = line.strip()
        m = _START.match(s)
        if m:
            if _UTC.match(m.group(1)):
                started = m.group(1)
            else:
                notes.append(f"run_all.log start time {m.group(1)!r} is not a UTC timestamp; started_utc is null")
            if m.group(2):
                header["steps_planned"] = m.group(2).split()
            in_header = True
            continue
        if s.startswith("=== BEGIN"):
            in_header = False
        elif in_header:
            header_lines.append(s)
        m = _STEP.match(s)
        if m:
            stages.append({"name": m.group(1), "seconds": float(m.group(2)), "rc": int(m.group(3))})
            continue
        m = _END.match(s)
        if m:
            if _UTC.match(m.group(1)):
                finished = m.group(1)
            else:
                notes.append(f"run_all.log end time {m.group(1)!r} is not a UTC timestamp; finished_utc is null")
            failed = int(m.group(2)) if m.group(2) is not None else None
    if started is None and not any("start time" in n for n in notes):
        notes.append("run_all.log has no 'run_all.sh start' line; started_utc is null")
    if finished is None and not any("end time" in n for n in notes):
        notes.append("run_all.log has no 'run_all.sh end' line (the run may not have finished); finished_utc is null")
    for i, s in enumerate(header_lines):
        if s.lower().startswith("name,") and "driver_version" in s and i + 1 < len(header_lines):
            keys = [k.strip() for k in s.split(",")]
            vals = [v.strip() for v in header_lines[i + 1].split(",")]
            if len(keys) == len(vals):
                header["nvidia_smi"] = dict(zip(keys, vals))
        elif re.match(r"^Python\s+\S+$", s):
            header["python"] = s.split()[1]
        elif re.match(r"^[0-9a-f]{40}$", s):
            header["commit"] = s
        else:
            toks = s.split()
            if len(toks) == 3 and all(re.match(r"^[0-9]+\.[0-9]", t) for t in toks) and "versions" not in header:
                header["versions"] = dict(zip(("torch", "cupy", "numpy"), toks))
    for what in ("nvidia_smi", "versions", "python", "commit"):
        if what not in header:
            notes.append(f"run_all.log header has no {what.replace('_', '-')} line")
    return LogSummary(started, finished, failed, stages, header, notes)


# ---------------------------------------------------------------------------- conversion helpers
def _official(src: dict, tol: Tolerance, nan_input: str | None) -> dict | None:
    if nan_input is not None:
        return None
    if src["bad_special"] > 0:
        return {"pass": False, "failing_count": None, "worst_ratio": None,
                "derived_from": f"{src['bad_special']} non-finite pair(s) neither equal nor both NaN; "
                                "allclose fails on each"}
    verdict, reason = legacy_margin_verdict(src.get("max_budget_ratio"), src.get("max_abs"), tol)
    if verdict is None:
        return None
    return {"pass": verdict, "failing_count": 0 if verdict else None, "worst_ratio": None,
            "derived_from": f"{reason}; {DERIVED_NAN_CAVEAT}"}


def convert_check(src: dict, tol: Tolerance, nan_input: str | None = None) -> dict:
    """Our check dict for one post check (``defs.schema.json#/$defs/check``).

    ``nan_input``: set (to a description) when the input holds NaN by construction; then
    no official verdict is derived (null)."""
    imported = dict(src)
    if "shape_error" in src:
        return {"shape_match": False, "element_count": None, "bit_identical_count": None,
                "official": {"pass": False, "failing_count": None, "worst_ratio": None,
                             "derived_from": "the source recorded a shape mismatch"},
                "legacy": {"pass": False, "failing_count": None, "worst_ratio": None},
                "equal_nan_stress": None, "max_abs_error": None, "max_abs_reference": None, "nonfinite": None,
                "discriminating": None, "null_candidate_passes": None, "imported": imported}
    return {
        "element_count": src["element_count"],
        "bit_identical_count": src["bit_equal_count"],
        "official": _official(src, tol, nan_input),
        "legacy": {"pass": src["pass"], "failing_count": src["bad_finite"] + src["bad_special"],
                   "worst_ratio": jsonio.enc_float(src["max_budget_ratio"])},
        "equal_nan_stress": None,
        "max_abs_error": jsonio.enc_float(src["max_abs"]),
        "max_abs_reference": None,
        "nonfinite": None,
        "discriminating": None,
        "null_candidate_passes": None,
        "imported": imported,
    }


def convert_scout_summary(src: dict, tol: Tolerance) -> dict:
    """Our check dict for one scout summary (legacy inequality over all elements)."""
    verdict, reason = legacy_margin_verdict(src["max_budget_ratio"], src["max_abs"], tol)
    official = None if verdict is None else {
        "pass": verdict, "failing_count": 0 if verdict else None, "worst_ratio": None,
        "derived_from": f"{reason}; {DERIVED_NAN_CAVEAT}"}
    return {"element_count": None, "bit_identical_count": None, "official": official,
            "legacy": {"pass": src["pass"], "failing_count": src["bad"],
                       "worst_ratio": jsonio.enc_float(src["max_budget_ratio"])},
            "equal_nan_stress": None, "max_abs_error": jsonio.enc_float(src["max_abs"]),
            "max_abs_reference": None, "nonfinite": None, "discriminating": None,
            "null_candidate_passes": None, "imported": dict(src)}


def _timing_block(block_id: str, task: int, scope: str, mode: str, kind: str, protocol: dict, src: dict,
                  rename: dict, **extra) -> dict:
    def r(a):
        return rename.get(a, a)

    return {"id": block_id, "task": task, "scope": scope, "mode": mode, "kind": kind, **extra,
            "protocol": {"mode": mode, **protocol},
            "arms": [r(a) for a in src["stats"]],
            "rounds": [{"order": [r(a) for a in row], "times_ms": {r(a): float(v) for a, v in row.items()}}
                       for row in src["rounds"]]}


def _arch_of(options: list[str]) -> str | None:
    for o in options:
        m = re.match(r"^--gpu-architecture=(?:sm|compute)_([0-9]+)$", o)
        if m:
            return f"sm_{m.group(1)}"
    return None


def _capability(arch: str | None) -> str | None:
    if not arch:
        return None
    digits = arch.split("_", 1)[1]
    return f"{digits[:-1]}.{digits[-1]}" if len(digits) >= 2 else None


def _schema_allows(name: str, prop: str) -> bool:
    """Whether our schema ``name`` admits a top-level property ``prop``."""
    sch = _study_schema(name) or schemas.load(name)
    return prop in sch.get("properties", {}) or sch.get("additionalProperties", True) is not False


def _task_sort(keys) -> list[str]:
    return sorted(keys, key=int)


class _Importer:
    """Builds the documents of one directory; use :func:`import_post_run`."""

    def __init__(self, directory: Path):
        self.dir = directory
        self.files: dict[str, tuple[bytes, Any, str]] = {}   # name -> (bytes, doc, format)
        self.results: dict[str, tuple[str, dict]] = {}       # variant -> (file name, doc)
        self.controls: tuple[str, dict] | None = None
        self.ftz: tuple[str, dict] | None = None
        self.scout: tuple[str, list] | None = None
        self.log_bytes: bytes | None = None
        self.log: LogSummary | None = None
        self.notes: list[str] = []
        self.embedded_notes: set[str] = set()   # run notes that repeat another document's notes
        self.doc_notes: dict[str, list[str]] = {n: [] for n in DOCUMENT_ORDER}
        self.doc_sources: dict[str, list[str]] = {n: [] for n in DOCUMENT_ORDER}

    # ------------------------------------------------------------------ reading
    def read(self) -> None:
        from kbrepro.errors import check_input_dir

        hint = "give the directory that holds the post's original output files"
        check_input_dir(self.dir, "results folder", hint)
        try:
            entries = sorted(self.dir.iterdir())
        except OSError as exc:
            raise UnreadableInputError(f"cannot list {self.dir}: {(exc.strerror or '').lower()}", hint) from exc
        ignored = []
        for p in entries:
            if p.suffix.lower() != ".json":
                continue
            # every *.json entry may be one of the post's files (they are recognised by
            # structure): one that cannot be read is an error, not a silent omission
            data = read_input_file(p)
            fmt = recognise_bytes(data, p.name)
            if fmt is None or fmt.startswith("kbrepro/"):
                ignored.append(p.name + (f" ({fmt} document)" if fmt else ""))
                continue
            data, doc, fmt = load_post_bytes(data, p.name, fmt)
            self.files[p.name] = (data, doc, fmt)
            if fmt == POST_RESULTS:
                variant = results_variant(doc)
                if variant in self.results:
                    raise UnreadableInputError(
                        f"{self.results[variant][0]} and {p.name} are both {variant} results",
                        "keep one results file per compile route in the directory")
                self.results[variant] = (p.name, doc)
            else:
                slot = {POST_CONTROLS: "controls", POST_FTZ_COST: "ftz", POST_SCOUT: "scout"}[fmt]
                if getattr(self, slot) is not None:
                    raise UnreadableInputError(f"{getattr(self, slot)[0]} and {p.name} are both {fmt} files",
                                               "keep one file of each post format in the directory")
                setattr(self, slot, (p.name, doc))
        log = self.dir / LOG_FILE
        if any(p.name == LOG_FILE for p in entries):
            self.log_bytes = read_input_file(log, "run log")
            self.log = parse_log(self.log_bytes)
        if not self.files:
            expected = ", ".join(KNOWN_FILES)
            raise UnreadableInputError(
                f"{self.dir.name or self.dir} holds none of the post's result files (expected {expected}"
                f"{'; ' + LOG_FILE + ' alone is not enough' if self.log_bytes is not None else ''})",
                "give the directory that holds the post's original outputs; results this product measured "
                "are packed as they are, without import")
        if ignored:
            self.notes.append("ignored (not a post format): " + ", ".join(ignored))
        for variant in ("cupy_default", "nvrtc_ftz_false"):
            if variant not in self.results:
                self.notes.append(f"no post-fusion-results file for {variant}: its full-program cases, controls and "
                                  "timings are absent")
        for slot, name in (("controls", "fusion_controls.json"), ("ftz", "fusion_ftz_cost.json"),
                           ("scout", "scout.json")):
            if getattr(self, slot) is None:
                self.notes.append(f"no {KNOWN_FILES[name]} file ({name}): its content is absent")
        if self.log is None:
            self.notes.append(f"no {LOG_FILE}: start/end times and stage wall times are null/empty")
        else:
            self.notes.extend(self.log.notes)

    # ------------------------------------------------------------------ helpers
    def _use(self, doc: str, name: str | None) -> None:
        if name and name not in self.doc_sources[doc]:
            self.doc_sources[doc].append(name)

    def _note(self, doc: str, text: str) -> None:
        if text not in self.doc_notes[doc]:
            self.doc_notes[doc].append(text)

    def provenance(self, doc: str) -> dict:
        names = self.doc_sources[doc]
        notes = (self.notes if doc == "run" else []) + self.doc_notes[doc]
        fmts: list[str] = []
        files = {}
        for n in names:
            if n == LOG_FILE:
                fmt, data = POST_LOG, self.log_bytes
            else:
                data, _, fmt = self.files[n]
            files[n] = sha256_hex(data)
            if fmt not in fmts:
                fmts.append(fmt)
        return {"source_format": "+".join(fmts), "source_files": files, "notes": list(notes)}

    def tolerance(self) -> Tolerance:
        tols = {(d["protocol"]["atol"], d["protocol"]["rtol"]) for _, d in self.results.values()}
        if len(tols) > 1:
            raise InvalidResultsError(f"the results files disagree on the tolerance: {sorted(tols)}",
                                      "import files of one run only")
        if tols:
            atol, rtol = tols.pop()
            return Tolerance(float(atol), float(rtol))
        self._note("correctness", "tolerance not recorded by the files present; the post's check() hard-codes "
                                  "atol = rtol = 1e-4")
        return Tolerance(1e-4, 1e-4)

    def _first_results(self) -> tuple[str, dict] | None:
        for v in ("cupy_default", "nvrtc_ftz_false", "nvrtc_ftz_true"):
            if v in self.results:
                return self.results[v]
        return None

    def _configs(self) -> dict[str, list[tuple[str, dict]]]:
        """Every recorded explicit NVRTC configuration per our variant: (where, config)."""
        out: dict[str, list[tuple[str, dict]]] = {"nvrtc_ftz_false": [], "nvrtc_ftz_true": []}
        for variant, (name, doc) in self.results.items():
            if variant in out:
                out[variant].append((f"{name} compiler_config", doc["compiler_config"]))
        if self.ftz:
            name, doc = self.ftz
            out["nvrtc_ftz_true"].append((f"{name} configs.true", doc["configs"]["true"]))
            out["nvrtc_ftz_false"].append((f"{name} configs.false", doc["configs"]["false"]))
        if self.controls:
            name, doc = self.controls
            for t in _task_sort(doc["tiny_value_controls"]):
                tv = doc["tiny_value_controls"][t]
                out["nvrtc_ftz_false"].append((f"{name} tiny_value_controls.{t}.compile_config", tv["compile_config"]))
                out["nvrtc_ftz_true"].append((f"{name} tiny_value_controls.{t}.compile_config_true",
                                              tv["compile_config_true"]))
        return out

    # ------------------------------------------------------------------ documents
    def build(self) -> dict[str, dict]:
        tol = self.tolerance()
        docs = {}
        docs["environment"] = self.environment()
        compiled = self.compile(tol)
        if compiled["variants"]:
            docs["compile"] = compiled
        if self.results or self.controls:
            docs["correctness"] = self.correctness(tol)
        if self.results or self.controls or self.ftz:
            docs["timings"] = self.timings(tol)
        if self.scout:
            docs["scout"] = self.scout_doc(tol)
        docs = {"run": self.run(), **docs}
        for name, doc in docs.items():
            if name == "run":
                continue
            if _schema_allows(name, "provenance"):
                doc["provenance"] = self.provenance(name)
            else:
                prov = self.provenance(name)
                text = (f"{name}.json: its schema has no provenance field; it was built from "
                        + ", ".join(prov["source_files"])
                        + (" (" + "; ".join(prov["notes"]) + ")" if prov["notes"] else ""))
                self._note("run", text)
                self.embedded_notes.add(text)
        docs["run"]["imported"] = self.provenance("run")
        return {n: docs[n] for n in DOCUMENT_ORDER if n in docs}

    def run(self) -> dict:
        for n in self.files:
            self._use("run", n)
        if self.log_bytes is not None:
            self._use("run", LOG_FILE)
        doc = {"schema": "kbrepro/run", "schema_version": 1, "study": dict(STUDY), "status": "imported",
               "started_utc": self.log.started_utc if self.log else None,
               "finished_utc": self.log.finished_utc if self.log else None,
               "stages": [dict(s) for s in self.log.stages] if self.log else [], "failure": None}
        if self.log and self.log.started_utc and self.log.finished_utc:
            fmt = "%Y-%m-%dT%H:%M:%SZ"
            t0 = datetime.strptime(self.log.started_utc, fmt).replace(tzinfo=timezone.utc)
            t1 = datetime.strptime(self.log.finished_utc, fmt).replace(tzinfo=timezone.utc)
            if t1 >= t0:
                doc["wall_seconds"] = float((t1 - t0).total_seconds())
        if self.log:
            bad = [s["name"] for s in self.log.stages if s["rc"] != 0]
            if bad or (self.log.failed_steps or 0) > 0:
                doc["failure"] = {"stage": bad[0] if bad else None, "failed_steps": self.log.failed_steps,
                                  "error": "the post's run_all.sh reported failed step(s): " + ", ".join(bad)}
            planned = self.log.header.get("steps_planned")
            if planned:
                missing = [s for s in planned if s not in {st["name"] for st in self.log.stages}]
                if missing:
                    self._note("run", "run_all.log has no STEP line for: " + ", ".join(missing))
        commits = {name: d["commit"] for name, d in self.results.values()}
        if self.log and "commit" in self.log.header:
            commits[LOG_FILE] = self.log.header["commit"]
        distinct = set(commits.values())
        if len(distinct) > 1:
            raise InvalidResultsError("the files disagree on the KernelBench commit: "
                                      + ", ".join(f"{k}: {v}" for k, v in commits.items()),
                                      "import the files of one run only")
        if distinct:
            doc["kernelbench"] = {"commit": distinct.pop(), "verified_by": None}
            self._note("run", "the KernelBench checkout of the original run was not verified by this product "
                              "(kernelbench.verified_by is null)")
        first = self._first_results()
        if first:
            tf32 = first[1]["tf32"]
            doc["precision"] = {"allow_tf32_matmul": tf32, "allow_tf32_cudnn": tf32}
        if self.log:
            self._note("run", "the log lines other than its header, STEP and end lines are not converted; "
                              "the log is kept unchanged")
        return doc

    def environment(self) -> dict:
        f: dict[str, dict] = {}

        def put(key, value, source, reason=None):
            f[key] = {"value": value, "source": source,
                      "reason": reason if value is not None or reason else NOT_RECORDED}

        def absent(key, reason=NOT_RECORDED):
            f[key] = {"value": None, "source": "none", "reason": reason}

        first = self._first_results()
        hdr = self.log.header if self.log else {}
        smi = hdr.get("nvidia_smi", {})
        vers = hdr.get("versions", {})
        log_src = f"{LOG_FILE} header"
        if first:
            self._use("environment", first[0])
        if hdr:
            self._use("environment", LOG_FILE)

        def from_results(key, field_, how):
            if first is not None and first[1].get(field_) is not None:
                put(key, first[1][field_], f"{first[0]} {field_} ({how})")
                return True
            return False

        if not from_results("gpu_name", "gpu", "torch.cuda.get_device_name"):
            if smi.get("name"):
                put("gpu_name", smi["name"], f"{log_src} (nvidia-smi)")
            else:
                absent("gpu_name")
        configs = self._configs()
        explicit = next((c for v in ("nvrtc_ftz_false", "nvrtc_ftz_true") for c in configs[v]), None)
        arch = _arch_of(explicit[1]["options"]) if explicit else None
        if arch:
            name = explicit[0].split(" ", 1)[0]
            self._use("environment", name)
            put("compute_capability", _capability(arch),
                f"{explicit[0]}.options (--gpu-architecture={arch}, chosen from the device's compute capability)")
        else:
            absent("compute_capability")
        if smi.get("driver_version"):
            put("driver_version", smi["driver_version"], f"{log_src} (nvidia-smi)")
        else:
            absent("driver_version")
        absent("driver_cuda_version")
        absent("cuda_runtime_version", NOT_RECORDED + " (the files' 'cuda' field is torch.version.cuda, "
                                                      "recorded as torch_cuda_build)")
        if explicit:
            self._use("environment", explicit[0].split(" ", 1)[0])
            put("nvrtc_version", ".".join(str(x) for x in explicit[1]["nvrtc"]), f"{explicit[0]}.nvrtc")
        else:
            absent("nvrtc_version")
        if not from_results("torch_version", "torch", "torch.__version__"):
            if vers.get("torch"):
                put("torch_version", vers["torch"], log_src)
            else:
                absent("torch_version")
        if not from_results("torch_cuda_build", "cuda", "torch.version.cuda"):
            absent("torch_cuda_build")
        if vers.get("cupy"):
            put("cupy_distributions", [{"name": None, "version": vers["cupy"]}], f"{log_src} (CuPy version)",
                "the CuPy version is recorded, the distribution name (cupy-cuda12x, cupy-cuda13x, ...) is not")
        else:
            absent("cupy_distributions")
        absent("cupy_conflict")
        if vers.get("numpy"):
            put("numpy_version", vers["numpy"], log_src)
        else:
            absent("numpy_version")
        if not from_results("python_version", "python", "platform.python_version"):
            if hdr.get("python"):
                put("python_version", hdr["python"], log_src)
            else:
                absent("python_version")
        if first is not None:
            src = f"{first[0]} tf32 (the post's scripts set both TF32 switches off and record this constant)"
            put("tf32_matmul", first[1]["tf32"], src)
            put("tf32_cudnn", first[1]["tf32"], src)
        else:
            absent("tf32_matmul")
            absent("tf32_cudnn")
        absent("float32_matmul_precision")
        clocks = {}
        for key, out in (("clocks.current.sm [MHz]", "sm_clock_mhz"),
                         ("clocks.current.memory [MHz]", "memory_clock_mhz")):
            m = re.match(r"^([0-9]+)\s*MHz$", smi.get(key, ""))
            if m:
                clocks[out] = int(m.group(1))
        if clocks:
            put("clocks_start", clocks, f"{log_src} (nvidia-smi at the start of the run)",
                "only the SM and memory clocks were recorded")
        else:
            absent("clocks_start")
        for key in ("os", "cpu_model", "sm_count", "memory_bytes", "l2_cache_bytes", "gpu_uuid_sha256", "env",
                    "power_limit_w", "ecc_enabled", "mig_mode", "persistence_mode", "max_sm_clock_mhz"):
            absent(key)
        for key in ("product_version", "product_commit"):
            absent(key, "not applicable: the results were produced by the post's scripts, not by this product")
        # consistency between the files and the log header
        if first and vers.get("torch") and vers["torch"] != first[1]["torch"]:
            self._note("environment", f"{LOG_FILE} header torch {vers['torch']} differs from {first[0]} "
                                      f"{first[1]['torch']}; the file's value is used")
        if first and hdr.get("python") and hdr["python"] != first[1]["python"]:
            self._note("environment", f"{LOG_FILE} header Python {hdr['python']} differs from {first[0]} "
                                      f"{first[1]['python']}; the file's value is used")
        for name, d in self.results.values():
            for k in ("torch", "cuda", "gpu", "python", "tf32"):
                if first and d[k] != first[1][k]:
                    self._note("environment", f"{name} {k} = {d[k]!r} differs from {first[0]} ({first[1][k]!r})")
        nulls = [k for k, v in f.items() if v["value"] is None]
        if nulls:
            self._note("environment", "environment fields the post did not record (null, with a reason): "
                                      + ", ".join(nulls))
        return {"schema": "kbrepro/environment", "schema_version": 1, "fields": f}

    def compile(self, tol: Tolerance) -> dict:
        configs = self._configs()
        tiny = None
        if self.controls and str(WITNESS_TASK) in self.controls[1]["tiny_value_controls"]:
            tiny = self.controls[1]["tiny_value_controls"][str(WITNESS_TASK)]
            self._use("compile", self.controls[0])
        else:
            self._note("compile", f"no tiny-value control for task {WITNESS_TASK}: FTZ witnesses are null")
        self._note("compile", "the post's minimal FTZ witness (fusion_minimal_witness.json) is not among the "
                              "imported files; each witness is derived from the tiny-value control")
        self._note("compile", "no cubin, PTX or SASS was published: ptx/sass evidence is null and agreement "
                              "rests on the derived witness alone")

        def evidence(variant: str, expected: bool) -> dict:
            ev = {"expected": expected, "ptx": None, "sass": None, "witness": None, "agrees": None}
            if tiny is not None:
                c = tiny[TINY_VARIANTS[variant]]
                if "shape_error" not in c:
                    flushes = c["bit_equal_count"] < c["element_count"]
                    ev["witness"] = {"task": WITNESS_TASK, "flushes": flushes,
                                     "bit_identical_to_reference": c["bit_equal_count"] == c["element_count"],
                                     "bit_identical_count": c["bit_equal_count"], "element_count": c["element_count"],
                                     "derived_from": WITNESS_DERIVED_FROM}
                    ev["agrees"] = flushes == expected
            return ev

        variants = []
        source_sha = None
        if "cupy_default" in self.results or tiny is not None:
            route = None
            if "cupy_default" in self.results:
                name, d = self.results["cupy_default"]
                route = d["compiler_config"]["route"]
                self._use("compile", name)
            variants.append({
                "name": "cupy_default", "route": "cupy_rawmodule", "expected_ftz": True,
                "requested_options": None, "effective_options": None, "nvrtc_version": None, "arch": None,
                "source": None, "cubin": None, "cubin_complete": None, "ptx": None, "sass": None,
                "program_log": None, "our_cache": None, "route_as_recorded": route,
                "note": "the post recorded only the route name, not the options in effect",
                "ftz_evidence": evidence("cupy_default", True)})
            self._note("compile", "cupy_default: effective_options are null, the post recorded only the route name"
                                  + (f" ({route!r})" if route else ""))
        for variant, expected in (("nvrtc_ftz_false", False), ("nvrtc_ftz_true", True)):
            recorded = configs[variant]
            if not recorded:
                continue
            where, cfg = recorded[0]
            for w, c in recorded[1:]:
                if c != cfg:
                    self._note("compile", f"{variant}: {w} differs from {where}; the latter is used")
            for w, _ in recorded:
                self._use("compile", w.split(" ", 1)[0])
            source_sha = source_sha or cfg["source_sha256"]
            variants.append({
                "name": variant, "route": "nvrtc", "expected_ftz": expected,
                "requested_options": list(cfg["options"]), "effective_options": list(cfg["options"]),
                "nvrtc_version": list(cfg["nvrtc"]), "arch": _arch_of(cfg["options"]),
                "source": {"sha256": cfg["source_sha256"]},
                "cubin": None, "cubin_complete": None, "ptx": None, "sass": None, "program_log": None,
                "our_cache": None, "recorded_in": [w for w, _ in recorded],
                "ftz_evidence": evidence(variant, expected)})
        shas = {v["source"]["sha256"] for v in variants if v.get("source")}
        if len(shas) > 1:
            self._note("compile", "the explicit NVRTC variants name different source hashes: "
                                  + ", ".join(sorted(shas)))
        for v in variants:
            ev = v["ftz_evidence"]
            if ev["agrees"] is False:
                w = ev["witness"]
                self._note("compile", f"{v['name']}: expected FTZ {ev['expected']}, but the task-{WITNESS_TASK} "
                                      f"tiny-value control {'flushes' if w['flushes'] else 'does not flush'} "
                                      f"({w['bit_identical_count']}/{w['element_count']} bit-identical to PyTorch)")
        return {"schema": "kbrepro/compile", "schema_version": 1,
                "source": {"sha256": source_sha} if source_sha else None, "variants": variants}

    def correctness(self, tol: Tolerance) -> dict:
        full: dict[tuple, dict] = {}
        tasks: dict[str, dict] = {}
        for variant in ("cupy_default", "nvrtc_ftz_false", "nvrtc_ftz_true"):
            if variant not in self.results:
                continue
            name, d = self.results[variant]
            self._use("correctness", name)
            for t in d["tasks"]:
                task = d["tasks"][t]
                for c in task["correctness"]:
                    key = (int(t), c["seed"], DISTRIBUTIONS[c["distribution"]])
                    entry = full.setdefault(key, {"case": {"task": key[0], "seed": key[1], "distribution": key[2]},
                                                  "checks": {}})
                    entry["checks"][variant] = convert_check(c, tol)
                td = tasks.setdefault(t, {})
                controls = td.setdefault("tail_controls", [])
                for c in task["tail_controls"]:
                    ctl = next((x for x in controls if x["name"] == c["name"]), None)
                    if ctl is None:
                        ctl = {"name": c["name"], "criterion": "legacy", "checks": {}}
                        controls.append(ctl)
                    nan = ("boundary values include NaN by construction"
                           if c["name"] == "boundaries_and_nonfinite" else None)
                    ctl["checks"][variant] = convert_check(c, tol, nan_input=nan)
                ti = td.setdefault("timing_input", {"seed": POST_SCRIPT_FACTS["timing_seed"], "checks": {}})
                ti["checks"][variant] = convert_check(task["timing_input_correctness"], tol)
                gm = td.setdefault("graph_mutation", {"checks": {}})
                gm["checks"][variant] = convert_check(task["graph_mutation_correctness"], tol)
                runs = td.setdefault("torchscript_runs", {})
                runs[variant] = {"full": convert_check(task["torchscript_correctness"], tol),
                                 "tail": convert_check(task["torchscript_tail_correctness"], tol)}
                td.setdefault("torchscript", runs[variant])
                td.setdefault("eligible_for_timing", {})[variant] = task["eligible_for_timing"]
        for t, td in tasks.items():
            runs = td.get("torchscript_runs", {})
            imported = [{k: r[k]["imported"] for k in ("full", "tail")} for r in runs.values()]
            if len(runs) > 1 and any(x != imported[0] for x in imported[1:]):
                self._note("correctness", f"task {t}: the TorchScript checks of the two processes differ; "
                                          "torchscript holds the first (cupy_default), torchscript_runs both")
        full_program = sorted(full.values(), key=lambda e: e["case"]["task"])  # stable: file order per task
        for e in full_program:
            missing = [v for v in self.results if v not in e["checks"]]
            if missing:
                c = e["case"]
                self._note("correctness", f"task {c['task']} seed {c['seed']} {c['distribution']}: no "
                                          f"{', '.join(missing)} result")
        extra_shapes: list[dict] = []
        tiny_doc: dict[str, dict] = {}
        if self.controls:
            name, d = self.controls
            self._use("correctness", name)
            for t in d["small_shapes"]:
                s = d["small_shapes"][t]
                extra_shapes.append({"case": {"task": int(t), "seed": POST_SCRIPT_FACTS["extra_shape_seed"],
                                              "shape_B_K_H": list(s["shape_B_K_H"])},
                                     "checks": {"cupy_default": convert_check(s["cuda_correctness"], tol),
                                                "torchscript": convert_check(s["torchscript_correctness"], tol)}})
            nan = "the tiny-value domain includes NaN by construction"
            for t in d["tiny_value_controls"]:
                tv = d["tiny_value_controls"][t]
                entry = {"criterion": "legacy",
                         "checks": {v: convert_check(tv[k], tol, nan_input=nan) for v, k in TINY_VARIANTS.items()},
                         "cross": {"nvrtc_ftz_true_vs_cupy_default":
                                   convert_check(tv["explicit_true_vs_cupy_default"], tol, nan_input=nan)},
                         "domain": tv["domain"]}
                counts = {tv[k].get("element_count") for k in TINY_VARIANTS.values()}
                shape = POST_SCRIPT_FACTS["tiny_value_shape"]
                if counts == {shape[0] * shape[1]}:
                    entry = {"criterion": entry["criterion"], "shape": list(shape), **{k: v for k, v in entry.items()
                                                                                      if k != "criterion"}}
                else:
                    self._note("correctness", f"tiny-value control of task {t}: element counts "
                                              f"{sorted(map(str, counts))} "
                                              "do not match the post's 128 x 1024 array; shape omitted")
                tiny_doc[t] = entry
            self._note("correctness", "extra-shape seed 371 and timing-input seed 42 come from the post's published "
                                      "scripts; the result files do not record them")
        self._note("correctness", "the post's checks are reference-scaled (legacy): NaN counts, the equal-NaN "
                                  "stress check, max |reference|, non-finite counts and the discrimination flags "
                                  "were not recorded (null); the original fields are under each check's 'imported'")
        self._note("correctness", "official verdicts are derived from the saved worst legacy ratio and max |d| "
                                  "(harness.checks.legacy_margin_verdict) and labelled derived_from; none is "
                                  "derived for the boundary and tiny-value controls, whose inputs hold NaN by "
                                  "construction (allclose never counts a NaN pair close): their legacy criterion "
                                  "decides them")
        self._note("correctness", "full-program case shapes, the tail-control shapes and the graph-mutation "
                                  "parameters were not recorded by the post's files")
        self._note("correctness", "no predicate_direction witness: the source has none")
        return {"schema": "kbrepro/correctness", "schema_version": 1,
                "predicate": {"atol": tol.atol, "rtol": tol.rtol, "official": OFFICIAL, "legacy": LEGACY,
                              "definitions": PREDICATES},
                "full_program": full_program, "tasks": {t: tasks[t] for t in _task_sort(tasks)},
                "extra_shapes": extra_shapes, "tiny_value_controls": {t: tiny_doc[t] for t in _task_sort(tiny_doc)}}

    def timings(self, tol: Tolerance) -> dict:
        blocks: list[dict] = []
        extras: dict = {"protocol_as_recorded": {}, "module_import_seconds": {}}
        facts = POST_SCRIPT_FACTS
        for variant in ("cupy_default", "nvrtc_ftz_false", "nvrtc_ftz_true"):
            if variant not in self.results:
                continue
            name, d = self.results[variant]
            self._use("timings", name)
            stem = Path(name).stem
            p = d["protocol"]
            extras["protocol_as_recorded"][name] = dict(p)
            extras["module_import_seconds"][name] = d["module_import_seconds"]
            proto = {"warmups": p["warmups"], "rounds": p["rounds"],
                     "invocations_per_pair": p["repeats_per_event_pair"],
                     "order_seed": p["order_seed"]}
            for t in d["tasks"]:
                task = d["tasks"][t]
                if not task["timings"]:
                    self._note("timings", f"{name} task {t}: no timings (eligible_for_timing is "
                                          f"{task['eligible_for_timing']})")
                for key in ("full_events", "full_graph", "tail_events", "tail_graph"):
                    if key not in task["timings"]:
                        continue
                    scope, mode = key.split("_")
                    blocks.append(_timing_block(f"{t}.{scope}.{mode}@{stem}", int(t), scope, mode, "study", proto,
                                                task["timings"][key], {"cuda_tail": variant}))
        if self.controls:
            name, d = self.controls
            self._use("timings", name)
            stem = Path(name).stem
            for t in d["small_shapes"]:
                s = d["small_shapes"][t]
                bkh = list(s["shape_B_K_H"])
                for mode in ("events", "graph"):
                    if mode not in s:
                        self._note("timings", f"{name} task {t}: no {mode} timing of the extra shape")
                        continue
                    proto = {"warmups": facts["bench_warmups"], "rounds": len(s[mode]["rounds"]),
                             "invocations_per_pair": facts["bench_invocations"],
                             "order_seed": facts["bench_order_seed"]}
                    blocks.append(_timing_block(f"{t}.full.{mode}@{stem}", int(t), "full", mode, "extra_shape", proto,
                                                s[mode], {"cuda_tail": "cupy_default"},
                                                shape=[bkh[0], bkh[2]], shape_B_K_H=bkh))
        if self.ftz:
            name, d = self.ftz
            self._use("timings", name)
            stem = Path(name).stem
            for t in d["tasks"]:
                s = d["tasks"][t]
                proto = {"warmups": facts["bench_warmups"], "rounds": len(s["graph"]["rounds"]),
                         "invocations_per_pair": facts["ftz_cost_invocations"], "order_seed": facts["bench_order_seed"]}
                blocks.append(_timing_block(f"{t}.tail.graph@{stem}", int(t), "tail", "graph", "ftz_cost", proto,
                                            s["graph"], {"ftz_true": "nvrtc_ftz_true", "ftz_false": "nvrtc_ftz_false"},
                                            shape=list(s["shape"]),
                                            checks={"nvrtc_ftz_true": convert_check(s["checks"]["True"], tol),
                                                    "nvrtc_ftz_false": convert_check(s["checks"]["False"], tol)}))
        if self.controls or self.ftz:
            self._note("timings", "fusion_controls.json and fusion_ftz_cost.json do not record their timing "
                                  "protocol: warmups (8), invocations per event pair (5; 10 for the FTZ cost) and "
                                  "the order seed (913) come from the post's published scripts, rounds are counted")
        self._note("timings", "per-arm statistics (median, quartiles, min, max, sorted samples) are not stored; "
                              "they follow from the raw per-round samples, which are all kept")
        self._note("timings", "the shapes of the full-program and tail timing inputs were not recorded; "
                              "no per-round clocks were recorded")
        return {"schema": "kbrepro/timings", "schema_version": 1, "blocks": blocks, "extras": extras}

    def scout_doc(self, tol: Tolerance) -> dict:
        name, d = self.scout
        self._use("scout", name)
        rewrites = {14: "(x @ W.sum(0)).unsqueeze(1) * (scaling_factor / 2)",
                    51: "gelu((x @ W.mean(0) + b.mean() - subtract.mean()).unsqueeze(1)) + x"}
        cases = []
        for c in d:
            mins = {c["fp32"]["min_abs_ref"], c["fp64"]["min_abs_ref"]}
            if len(mins) > 1:
                self._note("scout", f"task {c['task']} seed {c['seed']}: fp32 and fp64 summaries record different "
                                    "min |reference|; the fp32 one is used")
            entry = {"case": {"task": c["task"], "seed": c["seed"]},
                     "checks": {"fp32": convert_scout_summary(c["fp32"], tol),
                                "fp64_accumulated": convert_scout_summary(c["fp64"], tol)},
                     "min_abs_reference": jsonio.enc_float(c["fp32"]["min_abs_ref"])}
            if c["task"] in rewrites:
                entry["rewrite"] = rewrites[c["task"]]
            cases.append(entry)
        self._note("scout", "the scout's summaries are the reference-scaled inequality over all elements; "
                            "element and bit-identity counts and input shapes were not recorded (null)")
        return {"schema": "kbrepro/scout", "schema_version": 1, "cases": cases,
                "description": "algebraic rewrites of tasks 14 and 51 that reassociate the GEMM reduction; "
                               "a numerical scout, not a fused kernel"}


def import_post_run(directory) -> ImportedRun:
    """Import the post's original outputs in ``directory`` (non-recursive).

    Returns an :class:`ImportedRun` whose documents each validate against our schema.
    Raises UnreadableInputError (directory missing, no post file in it, a file unreadable
    or not strict JSON, two files of one kind) or InvalidResultsError (a post file violates
    its schema or contradicts itself; the files disagree on the KernelBench commit or the
    tolerance; a produced document fails our schema), each with a hint."""
    imp = _Importer(Path(directory))
    imp.read()
    # a JSON round trip: no object shared between or inside documents, no constant of ours aliased
    documents = {n: json.loads(json.dumps(d, allow_nan=False)) for n, d in imp.build().items()}
    for name, doc in documents.items():
        violations = _validate(doc, name)
        if violations:
            raise _refuse(f"imported {name}.json", "does not match our schema", violations,
                          "this is a defect of the importer for this input: report it with the original files")
        try:
            jsonio.dumps(doc)
        except ValueError as exc:  # pragma: no cover - validate() already refuses non-finite floats
            raise InvalidResultsError(f"imported {name}.json is not strict JSON: {exc}",
                                      "report it with the original files") from exc
    notes: list[str] = []
    for n in imp.notes + [x for d in DOCUMENT_ORDER for x in imp.doc_notes[d]]:
        if n not in notes and n not in imp.embedded_notes:
            notes.append(n)
    formats = {n: fmt for n, (_, _, fmt) in imp.files.items()}
    if imp.log_bytes is not None:
        formats[LOG_FILE] = POST_LOG
    return ImportedRun(documents=documents, originals={n: b for n, (b, _, _) in imp.files.items()},
                       log=imp.log_bytes, notes=notes, formats=formats)


__all__ = ["ImportedRun", "LogSummary", "POST_FORMATS", "consistency_violations", "convert_check",
           "convert_scout_summary", "import_post_run", "load_post_bytes", "load_post_file", "parse_log", "read_input_file",
           "recognise", "recognise_bytes",
           "recognise_document", "results_variant"]
