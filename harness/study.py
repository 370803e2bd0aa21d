"""Study definitions: YAML under ``manifests/``, schema-checked, with profiles.

A profile is a mapping of overrides applied to the base definition by a deep merge
(mappings merge key by key, any other value replaces). The base and the resolved study are
both validated against ``schemas/study.schema.json``.
"""
from __future__ import annotations

import copy
import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbrepro import manifests
from kbrepro.harness.checks import Tolerance
from kbrepro.harness.jsonio import dec_float
from kbrepro.harness.timing import TimingProtocol
from kbrepro.kernels.compile import CompileVariant
from kbrepro.errors import UnreadableInputError, UsageError

DEFAULT_STUDY = "study_fusion.yaml"


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


@dataclass(frozen=True)
class StudyConfig:
    """A resolved study. ``doc`` is the resolved definition (profile applied, ``profiles``
    removed, ``profile`` set); the typed fields are read from it. ``source_bytes`` is the raw
    YAML file, kept so the bundle can carry it unchanged."""

    doc: dict
    source_bytes: bytes
    source_name: str
    name: str
    profile: str
    tasks: tuple[int, ...]
    tolerance: Tolerance
    variants: tuple[CompileVariant, ...]

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.source_bytes).hexdigest()

    def variant(self, name: str) -> CompileVariant:
        for v in self.variants:
            if v.name == name:
                return v
        raise UsageError(f"the study has no variant {name!r}", f"variants: {[v.name for v in self.variants]}")

    def timing_protocol(self, mode: str, *, rounds: int | None = None) -> TimingProtocol:
        t = self.doc["timing"]
        return TimingProtocol(mode=mode, warmups=t["warmups"], rounds=rounds or t["rounds"],
                              invocations_per_pair=t["invocations_per_pair"], order_seed=t["order_seed"])

    def ftz_cost_protocol(self) -> TimingProtocol:
        f = self.doc["ftz_cost"]
        return TimingProtocol(mode=f["mode"], warmups=f["warmups"], rounds=f["rounds"],
                              invocations_per_pair=f["invocations_per_pair"],
                              order_seed=self.doc["timing"]["order_seed"])

    def extra(self, key: str, default=None):
        return self.doc.get("extras", {}).get(key, default)


def _problems(doc, what: str) -> None:
    from kbrepro import schemas

    found = schemas.validate(doc, "study")
    if found:
        lines = "\n".join(f"  {p}" for p in found[:20])
        raise UsageError(f"{what} is not a valid study definition:\n{lines}",
                         "fix the YAML; the schema is schemas/study.schema.json")


def load_study(path: str | Path | None = None, profile: str = "full") -> StudyConfig:
    """Load, validate and resolve a study YAML (default ``manifests/study_fusion.yaml``).

    Raises UnreadableInputError if the file cannot be read or parsed (also when it exceeds the
    bounds of :func:`harness.bounded.load_yaml` or uses anchors, aliases, merge keys or
    tags), UsageError if it or the resolved profile violates the schema, names an unknown
    profile, or is inconsistent (e.g. the FTZ-cost comparison names a variant that does not
    exist).
    """
    from kbrepro.harness import bounded

    p = Path(path) if path else manifests.path(DEFAULT_STUDY)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise UnreadableInputError(f"cannot read study {p}: {exc.strerror}", "check --study") from exc
    # bounded: a study YAML may come from a bundle (replay); no anchors, aliases, merge keys or tags
    base = bounded.load_yaml(raw, f"study {p.name}")
    _problems(base, f"study {p.name}")
    profiles = base.get("profiles", {"full": {}})
    if profile not in profiles:
        raise UsageError(f"study {p.name} has no profile {profile!r}", f"profiles: {', '.join(sorted(profiles))}")
    resolved = deep_merge({k: v for k, v in base.items() if k != "profiles"}, profiles[profile])
    resolved["profile"] = profile
    _problems(resolved, f"study {p.name} with profile {profile!r}")
    variants = tuple(CompileVariant(name=v["name"], route=v["route"], options=tuple(v["options"]),
                                    expected_ftz=bool(v["expected_ftz"])) for v in resolved["variants"])
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise UsageError(f"study {p.name}: variant names repeat", "give each variant a unique name")
    for v in resolved["ftz_cost"]["variants"]:
        if v not in names:
            raise UsageError(f"study {p.name}: ftz_cost names unknown variant {v!r}", f"variants: {names}")
    for v in values(resolved["witness"]["inputs"]):
        if not math.isfinite(v):
            raise UsageError("witness inputs must be finite", "use finite FP32 values such as -88.0")
    return StudyConfig(doc=resolved, source_bytes=raw, source_name=p.name, name=resolved["name"], profile=profile,
                       tasks=tuple(resolved["tasks"]),
                       tolerance=Tolerance(float(resolved["predicate"]["atol"]), float(resolved["predicate"]["rtol"])),
                       variants=variants)
