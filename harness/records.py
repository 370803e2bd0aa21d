"""Typed, frozen records passed between the engine's stages; dicts only at the JSON edge.

A compile stage produces one :class:`CompileRecord` per variant; the witness stage does not
edit it, it makes a new one (:meth:`CompileRecord.with_witness`) whose FTZ evidence holds
the witness verdict, and ``compile.json`` is rendered from the records (``to_doc``) each
time it is written. ``agrees`` is never stored in a record: it is derived from the evidence
by :func:`ftz_agrees`, the one rule the engine and the verifier share.

Every record has ``to_doc()`` (the JSON object of the documented schema, ``schemas/``) and
``from_doc()`` (raises KeyError/TypeError/ValueError on a malformed object; the verifier
validates against the schema first), and round-trips: ``from_doc(d).to_doc() == d``.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Mapping


def ftz_agrees(expected: bool, says: Mapping[str, bool]) -> bool | None:
    """Whether every piece of FTZ evidence (``says``: source -> says-FTZ, e.g. ``witness``,
    ``ptx``, ``sass``) matches the FTZ mode the variant promises; None without evidence."""
    return all(s == expected for s in says.values()) if says else None


def _frozen(m: Mapping | None) -> Mapping | None:
    return None if m is None else MappingProxyType(dict(m))


@dataclass(frozen=True)
class FileRef:
    """A file of the results folder: ``file`` (relative path), ``sha256`` (hex) and, where
    recorded, ``bytes`` (size) and further fields (``loaded_is_prefix``, ``note``, ``tool``)."""

    file: str
    sha256: str
    bytes: int | None = None
    extra: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def to_doc(self) -> dict:
        d = {"file": self.file, "sha256": self.sha256, **dict(self.extra)}
        if self.bytes is not None:
            d["bytes"] = self.bytes
        return d

    @classmethod
    def from_doc(cls, d: Mapping | None) -> "FileRef | None":
        if d is None:
            return None
        extra = {k: v for k, v in d.items() if k not in ("file", "sha256", "bytes")}
        return cls(d["file"], d["sha256"], d.get("bytes"), MappingProxyType(extra))


@dataclass(frozen=True)
class WitnessVerdict:
    """What the FTZ witness found for one binary: ``task`` (KernelBench task id),
    ``discriminates`` (the reference depends on subnormal handling at the witness input),
    ``flushes`` (True/False, None if undecided) and ``bit_identical_to_reference``."""

    task: int
    discriminates: bool
    flushes: bool | None
    bit_identical_to_reference: bool

    def to_doc(self) -> dict:
        return {"task": self.task, "discriminates": self.discriminates, "flushes": self.flushes,
                "bit_identical_to_reference": self.bit_identical_to_reference}

    @classmethod
    def from_doc(cls, d: Mapping | None) -> "WitnessVerdict | None":
        if d is None:
            return None
        return cls(int(d["task"]), bool(d["discriminates"]), d["flushes"], bool(d["bit_identical_to_reference"]))


@dataclass(frozen=True)
class FtzEvidence:
    """A binary's FTZ evidence: ``expected`` (the mode the variant promises), ``ptx`` and
    ``sass`` (the instruction counts of :func:`kernels.compile.ptx_ftz_counts` /
    ``sass_ftz_counts`` with ``says_ftz``, or for SASS ``{"unavailable": why}``), and the
    witness verdict. ``agrees`` follows from them (:func:`ftz_agrees`); a witness that does
    not discriminate says nothing."""

    expected: bool
    ptx: Mapping[str, Any] | None
    sass: Mapping[str, Any] | None
    witness: WitnessVerdict | None = None

    @property
    def says(self) -> dict[str, bool]:
        out = {}
        w = self.witness
        if w is not None and w.discriminates and w.flushes is not None:
            out["witness"] = w.flushes
        if self.ptx and self.ptx.get("says_ftz") is not None:
            out["ptx"] = self.ptx["says_ftz"]
        if self.sass and self.sass.get("says_ftz") is not None:
            out["sass"] = self.sass["says_ftz"]
        return out

    @property
    def agrees(self) -> bool | None:
        return ftz_agrees(self.expected, self.says)

    def to_doc(self) -> dict:
        return {"expected": self.expected, "ptx": None if self.ptx is None else dict(self.ptx),
                "sass": None if self.sass is None else dict(self.sass),
                "witness": None if self.witness is None else self.witness.to_doc(), "agrees": self.agrees}

    @classmethod
    def from_doc(cls, d: Mapping) -> "FtzEvidence":
        return cls(bool(d["expected"]), _frozen(d.get("ptx")), _frozen(d.get("sass")),
                   WitnessVerdict.from_doc(d.get("witness")))


@dataclass(frozen=True)
class CompileRecord:
    """One compiled variant, as ``compile.json`` records it: the variant (``name``,
    ``route``, ``expected_ftz``), the options requested and those NVRTC really received
    (scrubbed of install paths), NVRTC release and arch, the source and headers compiled,
    the binaries written (cubin, the complete cubin where CuPy truncated it, PTX, SASS), the
    program log, the caches, and the FTZ evidence."""

    name: str
    route: str
    expected_ftz: bool
    requested_options: tuple[str, ...]
    effective_options: tuple[str, ...]
    nvrtc_version: tuple[int, int]
    arch: str
    source: FileRef
    cubin: FileRef
    cubin_complete: FileRef | None
    ptx: FileRef | None
    sass: FileRef | None
    program_log: str
    our_cache: str
    nvrtc_cache_disabled_by: tuple[str, ...]
    ftz_evidence: FtzEvidence
    headers: tuple[FileRef, ...] | None = None

    def with_witness(self, verdict: WitnessVerdict) -> "CompileRecord":
        """The same record with the witness verdict in its FTZ evidence (a new record)."""
        return replace(self, ftz_evidence=replace(self.ftz_evidence, witness=verdict))

    def to_doc(self) -> dict:
        d = {"name": self.name, "route": self.route, "expected_ftz": self.expected_ftz,
             "requested_options": list(self.requested_options), "effective_options": list(self.effective_options),
             "nvrtc_version": list(self.nvrtc_version), "arch": self.arch, "source": self.source.to_doc(),
             "cubin": self.cubin.to_doc(),
             "cubin_complete": None if self.cubin_complete is None else self.cubin_complete.to_doc(),
             "ptx": None if self.ptx is None else self.ptx.to_doc(),
             "sass": None if self.sass is None else self.sass.to_doc(),
             "program_log": self.program_log, "our_cache": self.our_cache,
             "nvrtc_cache_disabled_by": list(self.nvrtc_cache_disabled_by),
             "ftz_evidence": self.ftz_evidence.to_doc()}
        if self.headers is not None:
            d["headers"] = [h.to_doc() for h in self.headers]
        return d

    @classmethod
    def from_doc(cls, d: Mapping) -> "CompileRecord":
        return cls(
            name=d["name"], route=d["route"], expected_ftz=bool(d["expected_ftz"]),
            requested_options=tuple(d["requested_options"]), effective_options=tuple(d["effective_options"]),
            nvrtc_version=tuple(d["nvrtc_version"]), arch=d["arch"], source=FileRef.from_doc(d["source"]),
            cubin=FileRef.from_doc(d["cubin"]), cubin_complete=FileRef.from_doc(d.get("cubin_complete")),
            ptx=FileRef.from_doc(d.get("ptx")), sass=FileRef.from_doc(d.get("sass")),
            program_log=d.get("program_log", ""), our_cache=d["our_cache"],
            nvrtc_cache_disabled_by=tuple(d["nvrtc_cache_disabled_by"]),
            ftz_evidence=FtzEvidence.from_doc(d["ftz_evidence"]),
            headers=None if d.get("headers") is None else tuple(FileRef.from_doc(h) for h in d["headers"]))


@dataclass(frozen=True)
class BlockKey:
    """The identity of a timing block, apart from its samples: ``task``, ``scope``
    (``full`` or a binding's scope), ``mode`` (``events``/``graph``), ``kind`` (``study``,
    ``cold_l2``, ``extra_shape``, or a probe's kind) and ``label`` (the extra shape's size
    label, or a probe's suffix; empty otherwise). Hashable; :attr:`id` is the string the
    documents carry (``53.tail.events``, ``53.full.graph.B128K1024H1024``, ``53.tail.events.cold``)."""

    task: int
    scope: str
    mode: str
    kind: str = "study"
    label: str = ""

    @property
    def id(self) -> str:
        base = f"{self.task}.{self.scope}.{self.mode}"
        if self.kind == "cold_l2":
            return base + ".cold"
        return f"{base}.{self.label}" if self.label else base


__all__ = ["ftz_agrees", "FileRef", "WitnessVerdict", "FtzEvidence", "CompileRecord", "BlockKey"]
