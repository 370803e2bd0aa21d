"""The verifier's shared records and helpers: :class:`Tier` (one tier's status and problems,
each string from a bundle escaped and cut), :class:`Report`, :class:`Bundle` (what tiers 3 to 6
read), the studies this verifier ships (:func:`trusted_studies`), and :func:`guarded`, which
makes a check's defect a named problem. No check lives here.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Callable, Mapping

from kbrepro.bundle import kinds
from kbrepro.harness import bounded, plugin
from kbrepro.harness.kernelbench import load_lock, load_pin
from kbrepro.harness.study import registry, studies_root
from kbrepro.errors import ReproError
from kbrepro.model.documents import Records
from kbrepro.model.problems import TIER_CODES, Problem



LEVELS = {"fast": 2, "static": 5, "replay": 6, "auto": 6}


TIER_NAMES = ("archive", "manifest", "documents", "provenance", "claims", "replay")


#: at most this many problems are kept per file and tier (then one line says how many more)
MAX_PROBLEMS_PER_FILE = 200


#: strings from a bundle are cut to this many characters in messages
MAX_TEXT = 200






def safe_text(value, limit: int = MAX_TEXT) -> str:
    """``value`` as one printable ASCII line: control, non-ASCII and line-break characters
    escaped as Python's ``ascii()`` escapes them, cut to ``limit`` characters (with ``...``).
    Every string that comes from a bundle goes through this before it reaches a message."""
    s = str(value)
    if not (s.isascii() and s.isprintable()):
        s = ascii(s)[1:-1]
    return s if len(s) <= limit else s[: max(0, limit - 3)] + "..."


def _safe_value(v):
    """A problem's ``expected``/``found`` value, bounded: strings escaped and cut, large
    containers replaced by their cut JSON text."""
    if isinstance(v, str):
        return safe_text(v)
    if v is None or isinstance(v, (bool, int, float)):
        return v
    try:
        text = json.dumps(v, sort_keys=True, default=str)
    except (TypeError, ValueError, RecursionError):
        return safe_text(repr(v))
    if len(text) > 2 * MAX_TEXT or not text.isascii():
        return safe_text(text, 2 * MAX_TEXT)
    return v


@dataclass
class Tier:
    """One tier's result: its status, its problems (:class:`~kbrepro.model.problems.Problem`,
    each with the code of what it is), notes, seconds and details."""

    number: int
    name: str
    status: str = "PASS"  # PASS, FAIL, SKIP
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    details: dict = field(default_factory=dict)
    _per_file: dict = field(default_factory=dict, repr=False)
    _overflow: dict = field(default_factory=dict, repr=False)

    def fail(self, file: str | None, message: str, *, path: str | None = None, expected=None, found=None,
             code: str | None = None) -> None:
        """Record a problem: ``file`` relative to the bag root, ``path`` a JSON path, ``code``
        (default: the tier's own, :data:`~kbrepro.model.problems.TIER_CODES`); as :meth:`add`."""
        self.add(Problem(code or TIER_CODES[self.name], path, message, expected, found, file))

    def add(self, p: Problem) -> None:
        """Record the problem ``p`` a check found, failing the tier. Its strings are escaped and
        cut (:func:`safe_text`); past :data:`MAX_PROBLEMS_PER_FILE` problems of one file, one
        last problem counts the rest."""
        self.status = "FAIL"
        key = p.file or ""
        n = self._per_file.get(key, 0) + 1
        self._per_file[key] = n
        shown_file = None if p.file is None else safe_text(p.file)
        if n > MAX_PROBLEMS_PER_FILE:
            more = n - MAX_PROBLEMS_PER_FILE
            if key not in self._overflow:
                self._overflow[key] = len(self.problems)
                self.problems.append(p)
            self.problems[self._overflow[key]] = Problem(
                p.code, None, f"... and {more} more problem{'s' if more > 1 else ''} in this file", file=shown_file)
            return
        self.problems.append(Problem(p.code, None if p.path is None else safe_text(p.path),
                                     safe_text(p.message, 4 * MAX_TEXT),
                                     None if p.expected is None else _safe_value(p.expected),
                                     None if p.found is None else _safe_value(p.found), shown_file))


@dataclass
class Report:
    archive: str
    level: str
    tiers: list[Tier] = field(default_factory=list)
    digest: str | None = None
    bundle_name: str | None = None
    exit_code: int = 0
    verdict: str = "PASS"
    #: why the result is not a plain PASS: what rests on the author's definitions, not the verifier's
    partial: list[str] = field(default_factory=list)
    #: the archive's files as read and verified (path -> bytes; not in :meth:`to_doc`): what
    #: ``--show-report`` and ``--plots`` print and draw, never a second read of the archive
    files: Mapping[str, bytes] = field(default_factory=dict, repr=False)
    #: what the bundle's attestations are (:class:`bundle.attest.Attestation`), once tier 2 ran
    signature: object | None = None
    #: whether the payload is the one its manifests name (tier 2 before the attestations and
    #: ``--expect-digest``): where not, the digest identifies nothing (not in :meth:`to_doc`)
    payload_matches_manifests: bool = False

    def to_doc(self) -> dict:
        sig = self.signature
        extra = {} if sig is None else {"signature": {"signed": sig.signed, "keyid": sig.keyid, "checked": sig.checked,
                                                      "line": sig.line()}}
        return {"schema": "kbrepro/verification-report", "schema_version": 1, "archive": safe_text(self.archive),
                **extra, "level": self.level, "bundle_name": self.bundle_name, "digest": self.digest,
                "verdict": self.verdict, "exit_code": self.exit_code, "partial_reasons": list(self.partial),
                "tiers": [{"number": t.number, "name": t.name, "status": t.status, "seconds": round(t.seconds, 4),
                           "problems": [p.to_doc() for p in t.problems], "notes": t.notes, "details": t.details}
                          for t in self.tiers]}


#: where a bundle carries its study folder (every file of it), relative to the bag root
STUDY_PREFIX = "data/inputs/study/"


@dataclass(frozen=True)
class TrustedStudy:
    """A study this verifier ships (``manifests/studies.json``): its own folder's files,
    relative path -> bytes, read from the verifier's installation. ``intact``: the files
    still have the registry's hashes (an edited copy judges nothing)."""

    name: str
    folder: Path
    files: Mapping[str, bytes]
    intact: bool
    claims_file: str
    lock_file: str

    @property
    def study_raw(self) -> bytes:
        return self.files["study.yaml"]

    @property
    def claims_raw(self) -> bytes:
        return self.files[self.claims_file]


def trusted_studies() -> dict[str, TrustedStudy]:
    """The studies this verifier ships, by study name, read from its own ``studies/``
    folders and compared with the registry's per-file sha256; never from a bundle."""
    out = {}
    for name, rec in sorted(registry().items()):
        folder = studies_root() / rec["folder"]
        try:
            files = plugin.study_files(folder)
            doc = bounded.load_yaml(files["study.yaml"], "study.yaml")
            claims_file, lock_file = doc["claims"], doc["kernelbench"]["lock"]
        except (OSError, KeyError, TypeError, ReproError):
            continue
        intact = plugin.files_digest(files) == dict(rec.get("files") or {})
        out[name] = TrustedStudy(name, folder, MappingProxyType(dict(files)), intact, claims_file, lock_file)
    return out


def own_pin():
    """The verifier's KernelBench pin (``harness.kernelbench.load_pin``)."""
    return load_pin()


@dataclass
class Bundle:
    """A bundle that passed tiers 1-2: files by path relative to the bag root, extracted
    copy on disk, and parsed documents (filled by tier 3). ``trusted``: the verifier's own
    definition of the bundle's study, or None for a study it does not ship; ``own_study``:
    that definition resolved at the recorded profile; ``partial``: what rests on the
    author's definitions."""

    name: str
    files: dict[str, bytes]
    root: Path
    digest: str = ""
    documents: dict = field(default_factory=dict)
    #: name -> typed record of each valid document of ours (``bundle`` for bundle.json;
    #: :mod:`kbrepro.model.documents`), filled by tier 3 with ``documents``
    records: Records = field(default_factory=Records)
    meta: dict = field(default_factory=dict)
    kernel_source_known: bool = False
    trusted: TrustedStudy | None = None
    own_study: object | None = None
    author_study: object | None = None
    binding: object | None = None
    study_files: dict = field(default_factory=dict)
    partial: list[str] = field(default_factory=list)
    #: (name -> PNG, renderer versions) of renderings that passed their checks (tier 3)
    renderings: tuple | None = None
    #: the attestations read in tier 2 (:class:`bundle.attest.Attestation`)
    attestation: object | None = None
    #: whether --check-renderings asked for the renderings to be drawn again (tier 5 does it)
    renderings_drawn_again: bool = False
    #: a candidate bundle's typed records (:func:`kbrepro.bundle.candidate_records.load`), tier 3
    candidates: object | None = None

    @property
    def payload(self) -> dict[str, bytes]:
        """The payload files, path under ``data/`` -> bytes."""
        return {k[len("data/"):]: v for k, v in self.files.items() if k.startswith("data/")}

    @property
    def has_crate(self) -> bool:
        """Whether the bundle's format carries the RO-Crate file (and may carry attestations)."""
        return has_crate(bag_info(self.files.get("bag-info.txt", b"")))

    @property
    def study(self):
        """The study definition that judges the bundle: the verifier's own, else the author's."""
        return self.own_study if self.own_study is not None else self.author_study


def has_crate(info: Mapping) -> bool:
    """Whether the format bag-info.txt names (tier 1 accepted it) carries the RO-Crate file
    and may carry attestations: study format 4, candidate format 3, and later."""
    kind = kinds.BY_FORMAT.get(info.get("Bundle-Format"))
    v = info.get("Bundle-Format-Version") or ""
    return kind is not None and v.isdigit() and int(v) >= kind.crate_since


def bag_info(raw: bytes) -> dict:
    out = {}
    for line in raw.decode("utf-8", "replace").splitlines():
        if ":" in line and not line.startswith((" ", "\t")):
            k, v = line.split(":", 1)
            out[k.strip()] = v.strip()
    return out


def schema_problem(t: Tier, file: str, p: Problem) -> None:
    """A problem of :func:`bundle.validate.schema_problems` (file ``<name>.json``) as the
    tier's, of the bag file ``file``."""
    t.add(dataclasses.replace(p, file=file))


#: the longest string REPORT.md may show (longer ones push the report off screen)
MAX_SHOWN_CHARS = 1000


def judging_lock(b: Bundle):
    """The KernelBench lock that says which task files the bundle may carry: the verifier's
    own copy of its study's lock, else (a study it does not ship) the verifier's whole pin."""
    if b.trusted is not None:
        return load_lock(b.trusted.folder / b.trusted.lock_file)
    return own_pin()


def json_diffs(recorded, expected, path: str = "$", limit: int = 20) -> list[tuple[str, object, object]]:
    """Up to ``limit`` (JSON path, recorded, expected) triples where two JSON values differ."""
    out: list[tuple[str, object, object]] = []
    stack = [(path, recorded, expected)]
    while stack and len(out) < limit:
        p, a, e = stack.pop()
        if isinstance(a, dict) and isinstance(e, dict):
            for k in sorted(set(a) | set(e), reverse=True):
                kp = f"{p}.{k}" if str(k).isidentifier() else f"{p}[{json.dumps(str(k))}]"
                if k not in a:
                    out.append((kp, "(absent)", e[k]))
                elif k not in e:
                    out.append((kp, a[k], "(absent)"))
                else:
                    stack.append((kp, a[k], e[k]))
        elif isinstance(a, list) and isinstance(e, list):
            if len(a) != len(e):
                out.append((f"{p} (length)", len(a), len(e)))
            for i in range(min(len(a), len(e)) - 1, -1, -1):
                stack.append((f"{p}[{i}]", a[i], e[i]))
        elif type(a) is not type(e) or a != e:
            out.append((p, a, e))
    return out


def guarded(fn: Callable, b: Bundle, t: Tier) -> bool:
    """``fn(b, t)``, with a bound of a parser or evaluator hit (ReproError) or data of a shape
    no schema rule foresaw (TypeError, ValueError, KeyError, ...) made a named problem of the
    tier: the bundle is not what the packer writes (and a defect of ours shows here too,
    named, rather than as a traceback). Returns whether ``fn`` ran to its end."""
    try:
        fn(b, t)
    except ReproError as exc:
        t.fail(None, exc.message)
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, ArithmeticError, RecursionError) as exc:
        t.fail(None, f"the bundle's data broke this verifier's {fn.__name__}: {type(exc).__name__}: "
               f"{safe_text(str(exc), 160)}")
    else:
        return True
    return False
