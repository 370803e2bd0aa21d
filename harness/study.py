"""Study definitions: a study folder (``studies/<name>/study.yaml`` and its files), schema
checked, with profiles.

A profile is a mapping of overrides applied to the base definition by a deep merge
(mappings merge key by key, any other value replaces). The base and the resolved study are
both validated against ``schemas/study.schema.json``; the study's ``custom`` mapping also
against the folder's ``schemas/custom.schema.json`` where there is one. Every path in
``study.yaml`` (binding, claims, lock, sources, headers) is relative to the study folder.
"""
from __future__ import annotations

import copy
import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from kbrepro.harness.checks import Tolerance
from kbrepro.harness.jsonio import dec_float
from kbrepro.harness.timing import TimingProtocol
from kbrepro.kernels.compile import CompileVariant
from kbrepro.errors import UnreadableInputError, UsageError
from kbrepro import manifests, schemas
from kbrepro.harness import bounded, jsonio, plugin
from kbrepro.harness import kernelbench

STUDY_FILE = "study.yaml"
CUSTOM_SCHEMA = "schemas/custom.schema.json"


def studies_root() -> Path:
    """The product's own ``studies/`` folder."""
    return kernelbench.PROJECT_ROOT / "studies"


#: the study ``make_bundle.py`` runs when none is named: the published one
DEFAULT_STUDY_FOLDER = "pointwise_fusion"


def default_study_path() -> Path:
    return studies_root() / DEFAULT_STUDY_FOLDER


def deep_merge(base: Any, override: Any) -> Any:
    """``override`` applied onto ``base``: dicts merge recursively; other values replace."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for k, v in override.items():
            out[k] = deep_merge(base.get(k), v) if k in base else copy.deepcopy(v)
        return out
    return copy.deepcopy(override)


def values(seq) -> list[float]:
    """Study value lists (numbers or ``"inf"``/``"-inf"``/``"nan"``) as floats."""
    return [dec_float(v) if isinstance(v, str) else float(v) for v in seq]


def task_key(t: Mapping) -> tuple[int, int]:
    """``(level, task)`` of a ``{level, task}`` mapping."""
    return int(t["level"]), int(t["task"])


@dataclass(frozen=True)
class StudyConfig:
    """A resolved study.

    ``doc``: the resolved definition (profile applied, ``profiles`` removed, ``profile``
    set); ``source_bytes``: the raw ``study.yaml``; ``folder``: the study folder; ``files``:
    every file of the folder (relative POSIX path -> bytes, :func:`plugin.study_files`),
    which the bundle carries unchanged; ``tasks``: task ids in study order (unique across
    levels); ``task_levels``: id -> KernelBench level; ``variants``: compile variants."""

    doc: dict
    source_bytes: bytes
    source_name: str
    name: str
    profile: str
    tasks: tuple[int, ...]
    tolerance: Tolerance
    variants: tuple[CompileVariant, ...]
    folder: Path | None = None
    files: Mapping[str, bytes] = field(default_factory=dict)
    task_levels: Mapping[int, int] = field(default_factory=dict)
    variant_sources: Mapping[str, str] = field(default_factory=dict)
    variant_headers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.source_bytes).hexdigest()

    @property
    def task_keys(self) -> list[tuple[int, int]]:
        return [(self.task_levels[t], t) for t in self.tasks]

    @property
    def witness_task(self) -> tuple[int, int] | None:
        w = self.doc.get("witness")
        return task_key(w["task"]) if w else None

    @property
    def claims_file(self) -> str:
        return self.doc["claims"]

    @property
    def lock_file(self) -> str:
        return self.doc["kernelbench"]["lock"]

    def file(self, rel: str) -> bytes:
        """Bytes of one study file. Raises UsageError if the folder has no such file."""
        try:
            return self.files[rel]
        except KeyError:
            raise UsageError(f"study {self.name}: {rel} is not a file of the study folder",
                             "fix the path in study.yaml (paths are relative to the study folder)") from None

    def binding(self):
        """The study's :class:`~kbrepro.harness.plugin.StudyBinding` (imports its module).
        Raises UsageError if the study has no folder, its binding does not import, or the
        binding's :meth:`~kbrepro.harness.plugin.StudyBinding.validate` finds a problem in
        the resolved definition."""
        if self.folder is None:
            raise UsageError(f"study {self.name} has no folder to load its binding from",
                             "load the study from its folder")
        binding = plugin.load_binding(self.folder, self.doc["binding"])
        try:
            problems = list(binding.validate(self))
        except Exception as exc:  # a binding's own checks must not crash the loader
            problems = [f"its binding's validate() failed: {type(exc).__name__}: {exc}"]
        if problems:
            raise UsageError(f"study {self.name}: {problems[0]}" + (f" (and {len(problems) - 1} more)"
                                                                   if len(problems) > 1 else ""),
                             "fix study.yaml (the binding checks what the generic schema cannot)")
        return binding

    def variant(self, name: str) -> CompileVariant:
        for v in self.variants:
            if v.name == name:
                return v
        raise UsageError(f"the study has no variant {name!r}", f"variants: {[v.name for v in self.variants]}")

    def timing_protocol(self, mode: str, *, rounds: int | None = None) -> TimingProtocol:
        t = self.doc["timing"]
        return TimingProtocol(mode=mode, warmups=t["warmups"], rounds=rounds or t["rounds"],
                              invocations_per_pair=t["invocations_per_pair"], order_seed=t["order_seed"])

    def extra(self, key: str, default=None):
        return self.doc.get("extras", {}).get(key, default)

    def custom(self, key: str, default=None):
        return (self.doc.get("custom") or {}).get(key, default)


def _problems(doc, what: str, files: Mapping[str, bytes], untrusted: bool = False) -> None:
    found = [str(p) for p in schemas.validate(doc, "study")]
    if not found and isinstance(doc, dict) and CUSTOM_SCHEMA in files and "custom" in doc:
        try:
            custom = jsonio.loads_strict(files[CUSTOM_SCHEMA], where=CUSTOM_SCHEMA, max_bytes=1024 * 1024)
        except Exception as exc:
            raise UsageError(f"{what}: {CUSTOM_SCHEMA} is not valid JSON: {exc}", "fix the study's schema") from exc
        why = schemas.untrusted_schema_problems(custom) if untrusted else []
        if why:
            raise UsageError(f"{what}: {CUSTOM_SCHEMA} cannot be applied: {why[0]}",
                             "a study this verifier does not ship may use only plain JSON Schema keywords")
        apply = schemas.validate_untrusted if untrusted else schemas.validate_with
        found = [f"$.custom{p.path[1:]}: {p.message}" for p in apply(doc["custom"], custom, "custom")]
    if found:
        raise UsageError(f"{what} is not a valid study definition: {found[0]}"
                         + (f" (and {len(found) - 1} more)" if len(found) > 1 else ""),
                         "fix study.yaml; the schema is schemas/study.schema.json (custom: the study's "
                         f"{CUSTOM_SCHEMA})")


def _resolve_path(path: str | Path | None) -> tuple[Path, Path]:
    """(folder, study.yaml path) for a folder or a study.yaml path."""
    p = Path(path) if path else default_study_path()
    if p.is_dir():
        return p, p / STUDY_FILE
    if p.is_file() and p.suffix not in (".yaml", ".yml"):
        raise UsageError(f"{p} is neither a study folder nor a study.yaml",
                         "pass --study with a study folder (studies/<name>) or its study.yaml")
    return p.parent, p


def load_study(path: str | Path | None = None, profile: str = "full", *,
               files: Mapping[str, bytes] | None = None, untrusted: bool = False) -> StudyConfig:
    """Load, validate and resolve a study (default: the published study's folder).

    ``path``: a study folder or its ``study.yaml``. ``files``: the study's files when they
    come from elsewhere than the folder (a bundle's ``inputs/study/``); ``path`` then only
    names it. Raises UnreadableInputError if the file cannot be read or parsed (also when
    it exceeds the bounds of :func:`harness.bounded.load_yaml` or uses anchors, aliases,
    merge keys or tags), UsageError if it or the resolved profile violates the schema, names
    an unknown profile, or is inconsistent (a path that is not a file of the folder, a task
    id used at two levels, repeated variant names, a variant source not in ``sources``).
    ``untrusted``: the files are a stranger's (a bundle's study the verifier does not ship):
    its ``custom`` schema must pass :func:`kbrepro.schemas.untrusted_schema_problems`.
    """
    folder, yaml_path = _resolve_path(path)
    if files is None:
        try:
            raw = yaml_path.read_bytes()
        except OSError as exc:
            raise UnreadableInputError(f"cannot read study {yaml_path}: {exc.strerror}",
                                       "pass --study with a study folder (studies/<name>) or its study.yaml") from exc
        try:
            files = plugin.study_files(folder)
        except OSError as exc:
            raise UnreadableInputError(f"cannot read the study folder {folder}: {exc.strerror}",
                                       "make every file of the study folder readable") from exc
    else:
        if STUDY_FILE not in files:
            raise UsageError("the study's files hold no study.yaml", "the study folder needs its study.yaml")
        raw = files[STUDY_FILE]
    name = f"{folder.name}/{STUDY_FILE}"
    # bounded: a study YAML may come from a bundle (replay); no anchors, aliases, merge keys or tags
    base = bounded.load_yaml(raw, f"study {name}")
    _problems(base, f"study {name}", files, untrusted)
    profiles = base.get("profiles", {"full": {}})
    if profile not in profiles:
        raise UsageError(f"study {name} has no profile {profile!r}", f"profiles: {', '.join(sorted(profiles))}")
    resolved = deep_merge({k: v for k, v in base.items() if k != "profiles"}, profiles[profile])
    resolved["profile"] = profile
    _problems(resolved, f"study {name} with profile {profile!r}", files, untrusted)
    levels: dict[int, int] = {}
    for t in resolved["tasks"]:
        lv, tid = task_key(t)
        if tid in levels:
            raise UsageError(f"study {name}: task id {tid} appears twice", "give each task id once (ids must be unique)")
        levels[tid] = lv
    for rel in [resolved["binding"], resolved["claims"], resolved["kernelbench"]["lock"], *resolved["sources"]]:
        if rel not in files:
            raise UsageError(f"study {name}: {rel} is not a file of the study folder",
                             "paths in study.yaml are relative to the study folder")
    variants, sources, headers = [], {}, {}
    for v in resolved["variants"]:
        src = v.get("source", resolved["sources"][0])
        if src not in resolved["sources"]:
            raise UsageError(f"study {name}: variant {v['name']} compiles {src}, which is not in sources",
                             "list every compiled file under sources")
        hdrs = tuple(v.get("headers", ()))
        for h in hdrs:
            if h not in resolved["sources"]:
                raise UsageError(f"study {name}: variant {v['name']} includes {h}, which is not in sources",
                                 "list every header under sources")
        variants.append(CompileVariant(name=v["name"], route=v["route"], options=tuple(v["options"]),
                                       expected_ftz=bool(v["expected_ftz"])))
        sources[v["name"]] = src
        headers[v["name"]] = hdrs
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise UsageError(f"study {name}: variant names repeat", "give each variant a unique name")
    if resolved.get("witness"):
        for x in values(resolved["witness"]["inputs"]):
            if not math.isfinite(x):
                raise UsageError("witness inputs must be finite", "use finite FP32 values such as -88.0")
    return StudyConfig(doc=resolved, source_bytes=raw, source_name=STUDY_FILE, name=resolved["name"], profile=profile,
                       tasks=tuple(levels), task_levels=levels,
                       tolerance=Tolerance(float(resolved["predicate"]["atol"]), float(resolved["predicate"]["rtol"])),
                       variants=tuple(variants), folder=folder, files=dict(files),
                       variant_sources=sources, variant_headers=headers)


# ---------------------------------------------------------------------------- the registry
REGISTRY_FILE = "studies.json"


def check_claims_file(study: StudyConfig) -> None:
    """The study's claims file parses (bounded YAML) and satisfies ``schemas/claims-spec``.
    Raises UnreadableInputError or UsageError: called before a run, whose records hash the
    file, so that a typo is not found only when packing (the claims' JMESPath queries are
    compiled by the packer, ``bundle.claims``)."""
    doc = bounded.load_yaml(study.file(study.claims_file), f"study {study.name}: {study.claims_file}")
    bad = schemas.validate(doc, "claims-spec")
    if bad:
        raise UsageError(f"study {study.name}: {study.claims_file}: {bad[0].path}: {bad[0].message}"
                         + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""),
                         "fix the claims before the run: the run records the study's files, claims included")


def registry() -> dict[str, dict]:
    """The studies this product ships and trusts: study name -> ``{"folder", "files"}``
    (``files``: relative path -> sha256 of every file of the folder), from
    ``manifests/studies.json``. A folder under ``studies/`` that the registry does not list
    (e.g. one the scaffold wrote) is a user's study: runnable, never trusted by the verifier."""
    doc = jsonio.loads_strict(manifests.path(REGISTRY_FILE).read_bytes(), where=REGISTRY_FILE)
    return dict(doc["studies"])


def registry_doc(add: Sequence[str | Path] = ()) -> dict:
    """The registry as the shipped study folders give it now (``python -m kbrepro.harness
    register-studies`` writes it): every folder already listed, re-hashed, plus the folders
    ``add`` names (each a folder directly under ``studies/`` whose study.yaml loads). Raises
    UsageError for a folder outside ``studies/`` or a study name registered twice."""
    folders = {name: rec["folder"] for name, rec in registry().items()}
    root = studies_root().resolve()
    for f in add:
        folder = Path(f).resolve()
        if folder.parent != root:
            raise UsageError(f"{f} is not a folder directly under the product's studies/",
                             "move the study folder into studies/ first, then pass it to --add")
        try:
            st = load_study(folder, "full")
        except UnreadableInputError as exc:
            raise UsageError(f"--add {f}: {exc.message}", "pass --add with a study folder under studies/") from exc
        if st.name in folders and folders[st.name] != folder.name:
            raise UsageError(f"study name {st.name!r} is already registered for studies/{folders[st.name]}",
                             "give the study another name in its study.yaml")
        folders[st.name] = folder.name
    out = {}
    for name, rel in sorted(folders.items()):
        out[name] = {"folder": rel, "files": plugin.files_digest(plugin.study_files(studies_root() / rel))}
    return {"schema": "kbrepro/study-registry", "schema_version": 1, "studies": out}


def find_study(name: str) -> Path | None:
    """The folder of the shipped study ``name``, or None."""
    rec = registry().get(name)
    return studies_root() / rec["folder"] if rec else None
