"""verify: an untrusted archive -> tiered checks -> a verification report.

Tiers, cheapest first; each collects every problem (file, JSON path, expected, found):

1. ``archive``: member headers read as a stream; only regular files and folders, safe
   relative names under one top folder, no duplicates, size and count limits; BagIt and
   bundle format versions known.
2. ``manifest``: payload completeness (missing / extra files), every payload hash, the tag
   manifest over the tag files, Payload-Oxum; the bundle digest.
3. ``documents``: strict JSON, the verifier's own schemas, supported versions, consistency.
4. ``provenance``: KernelBench files against the verifier's own lock, kernel source against
   the compile records, cubins against their hashes, FTZ evidence against variant names
   (PTX and SASS recounted from the bundled listings).
5. ``claims``: re-evaluated from the recorded documents; recorded verdicts must follow.
6. ``replay``: the study rerun on this GPU with the verifier's own code, then compared.

Trust anchors are the verifier's own schemas, KernelBench lock and kernel source, never the
bundle's copies.
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import statistics
import tempfile
import time
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Callable, Mapping

from kbrepro import schemas
from kbrepro.bundle import archive as arc
from kbrepro.bundle import attest, crate, crosscheck, facts, kinds, pack, validate
from kbrepro.bundle import claims as claims_mod
from kbrepro.bundle import plots as plots_mod
from kbrepro.bundle import report as report_mod
from kbrepro.bundle.documents import DOC_NAME, DOC_PATHS, OUR_DOCUMENTS, REQUIRED, study_documents
from kbrepro.bundle.facts import CRATE_FILE
from kbrepro.harness import bounded, fingerprint, jsonio, plugin, stats
from kbrepro.harness.kernelbench import load_lock, load_pin
from kbrepro.harness.study import load_study, registry, studies_root
from kbrepro.harness.records import ftz_agrees
from kbrepro.kernels import compile as kc
from kbrepro.errors import (EnvironmentUnavailableError, ReproError, UnreadableInputError, UsageError)

LEVELS = {"fast": 2, "static": 5, "replay": 6, "auto": 6}
TIER_NAMES = ("archive", "manifest", "documents", "provenance", "claims", "replay")
_MANIFEST_LINE = re.compile(r"^([0-9a-f]{64})  (\S.*)$")


#: at most this many problems are kept per file and tier (then one line says how many more)
MAX_PROBLEMS_PER_FILE = 200
#: strings from a bundle are cut to this many characters in messages
MAX_TEXT = 200
EXIT_PARTIAL = 5
#: the largest result document the verifier parses (the committed extended timings.json is 2.3 MB)
MAX_DOCUMENT_BYTES = 16 * 1024 * 1024


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
    number: int
    name: str
    status: str = "PASS"  # PASS, FAIL, SKIP
    problems: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    details: dict = field(default_factory=dict)
    _per_file: dict = field(default_factory=dict, repr=False)
    _overflow: dict = field(default_factory=dict, repr=False)

    def fail(self, file: str | None, message: str, *, path: str | None = None, expected=None, found=None) -> None:
        """Record a problem: ``file`` relative to the bag root, ``path`` a JSON path. Strings are
        escaped and cut (:func:`safe_text`); past :data:`MAX_PROBLEMS_PER_FILE` problems of one
        file, one last problem counts the rest."""
        self.status = "FAIL"
        key = file or ""
        n = self._per_file.get(key, 0) + 1
        self._per_file[key] = n
        shown_file = None if file is None else safe_text(file)
        if n > MAX_PROBLEMS_PER_FILE:
            more = n - MAX_PROBLEMS_PER_FILE
            if key not in self._overflow:
                self._overflow[key] = {"file": shown_file, "path": None, "message": ""}
                self.problems.append(self._overflow[key])
            self._overflow[key]["message"] = f"... and {more} more problem{'s' if more > 1 else ''} in this file"
            return
        p = {"file": shown_file, "path": None if path is None else safe_text(path),
             "message": safe_text(message, 4 * MAX_TEXT)}
        if expected is not None:
            p["expected"] = _safe_value(expected)
        if found is not None:
            p["found"] = _safe_value(found)
        self.problems.append(p)


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

    def to_doc(self) -> dict:
        sig = self.signature
        extra = {} if sig is None else {"signature": {"signed": sig.signed, "keyid": sig.keyid, "checked": sig.checked,
                                                      "line": sig.line()}}
        return {"schema": "kbrepro/verification-report", "schema_version": 1, "archive": safe_text(self.archive),
                **extra, "level": self.level, "bundle_name": self.bundle_name, "digest": self.digest,
                "verdict": self.verdict, "exit_code": self.exit_code, "partial_reasons": list(self.partial),
                "tiers": [{"number": t.number, "name": t.name, "status": t.status, "seconds": round(t.seconds, 4),
                           "problems": t.problems, "notes": t.notes, "details": t.details}
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

    @property
    def payload(self) -> dict[str, bytes]:
        """The payload files, path under ``data/`` -> bytes."""
        return {k[len("data/"):]: v for k, v in self.files.items() if k.startswith("data/")}

    @property
    def has_crate(self) -> bool:
        """Whether the bundle's format carries the RO-Crate file (and may carry attestations)."""
        return has_crate(_bag_info(self.files.get("bag-info.txt", b"")))

    @property
    def study(self):
        """The study definition that judges the bundle: the verifier's own, else the author's."""
        return self.own_study if self.own_study is not None else self.author_study


# ---------------------------------------------------------------------------------- tiers


def _tier_archive(path: Path, t: Tier) -> arc.ArchiveContents:
    contents = arc.read_archive(path)
    for p in contents.problems:
        t.fail(p["file"], p["message"])
    if t.status == "FAIL":
        return contents
    bagit = contents.files.get("bagit.txt")
    if bagit is None:
        t.fail("bagit.txt", "missing: not a BagIt bag")
    elif bagit.decode("utf-8", "replace").splitlines()[:1] != ["BagIt-Version: 1.0"]:
        t.fail("bagit.txt", "unknown BagIt version", expected="BagIt-Version: 1.0",
               found=bagit.decode("utf-8", "replace").splitlines()[:1])
    info = _bag_info(contents.files.get("bag-info.txt", b""))
    formats = {pack.FORMAT_NAME: pack.FORMAT_VERSIONS, kinds.FORMAT: kinds.FORMAT_VERSIONS}
    fmt = info.get("Bundle-Format")
    if fmt not in formats:
        t.fail("bag-info.txt", "not a kbrepro bundle", expected=pack.FORMAT_NAME, found=fmt)
    elif info.get("Bundle-Format-Version") not in [str(v) for v in formats[fmt]]:
        t.fail("bag-info.txt", f"unknown bundle format version of {fmt}; this verifier reads version"
               f"{'s' if len(formats[fmt]) > 1 else ''} {', '.join(map(str, formats[fmt]))}",
               expected=", ".join(map(str, formats[fmt])), found=info.get("Bundle-Format-Version"))
    t.details.update(members=contents.members, bytes=contents.total_bytes, top=contents.top,
                     compressed=contents.compressed)
    return contents


def has_crate(info: Mapping) -> bool:
    """Whether the format bag-info.txt names (tier 1 accepted it) carries the RO-Crate file
    and may carry attestations: study format 4, candidate format 3, and later."""
    since = {pack.FORMAT_NAME: pack.CRATE_SINCE, kinds.FORMAT: kinds.CRATE_SINCE}.get(info.get("Bundle-Format"))
    v = info.get("Bundle-Format-Version") or ""
    return since is not None and v.isdigit() and int(v) >= since


def _bag_info(raw: bytes) -> dict:
    out = {}
    for line in raw.decode("utf-8", "replace").splitlines():
        if ":" in line and not line.startswith((" ", "\t")):
            k, v = line.split(":", 1)
            out[k.strip()] = v.strip()
    return out


def _parse_manifest(raw: bytes, file: str, t: Tier) -> dict[str, str]:
    out = {}
    for i, line in enumerate(raw.decode("utf-8", "replace").splitlines(), 1):
        m = _MANIFEST_LINE.match(line)
        if not m:
            t.fail(file, f"line {i} is not '<sha256>  <path>'", found=line[:120])
            continue
        if m.group(2) in out:
            t.fail(file, f"line {i}: {m.group(2)} listed twice")
        out[m.group(2)] = m.group(1)
    return out


def _rendering_name_ok(path: str) -> bool:
    """A file the renderings folder may hold: renderings.json or a PNG of a figure name."""
    name = path[len(f"{pack.RENDERINGS}/"):]
    return name == "renderings.json" or (name.endswith(".png") and bool(plots_mod.NAME_RE.match(name[:-4])))


def _tier_manifest(c: arc.ArchiveContents, t: Tier) -> str | None:
    files = c.files
    for tag in ("manifest-sha256.txt", "tagmanifest-sha256.txt", "bag-info.txt"):
        if tag not in files:
            t.fail(tag, "missing tag file")
    if t.status == "FAIL":
        return None
    manifest = _parse_manifest(files["manifest-sha256.txt"], "manifest-sha256.txt", t)
    payload = {p for p in files if p.startswith("data/")}
    for p in sorted(set(manifest) - payload):
        t.fail(p, "listed in manifest-sha256.txt but missing from the archive")
    for p in sorted(payload - set(manifest)):
        t.fail(p, "in the archive but not listed in manifest-sha256.txt (extra file)")
    for p in sorted(set(manifest) & payload):
        if c.sha256[p] != manifest[p]:
            t.fail(p, "sha256 differs from manifest-sha256.txt", expected=manifest[p], found=c.sha256[p])
    tagm = _parse_manifest(files["tagmanifest-sha256.txt"], "tagmanifest-sha256.txt", t)
    rend = f"{pack.RENDERINGS}/"
    tags = {p for p in files if not p.startswith(("data/", rend)) and p not in ("tagmanifest-sha256.txt", pack.SUMMARY)}
    for p in sorted(tags - set(tagm)):
        t.fail(p, "tag file not covered by tagmanifest-sha256.txt")
    for p in sorted(set(tagm) - set(files)):
        t.fail(p, "listed in tagmanifest-sha256.txt but missing")
    for p in sorted(set(tagm) & set(files)):
        if c.sha256[p] != tagm[p]:
            t.fail(p, "sha256 differs from tagmanifest-sha256.txt (a manifest was edited)", expected=tagm[p],
                   found=c.sha256[p])
    oxum = _bag_info(files["bag-info.txt"]).get("Payload-Oxum")
    actual = f"{sum(len(files[p]) for p in payload)}.{len(payload)}"
    if oxum != actual:
        t.fail("bag-info.txt", "Payload-Oxum does not match the payload", expected=actual, found=oxum)
    # exactly the bytes the packer writes (sorted lines, two spaces, LF only), so that the same
    # payload cannot carry two digests and BagIt tools read what the verifier reads
    want = "".join(f"{c.sha256[p]}  {p}\n" for p in sorted(payload)).encode("utf-8")
    if t.status == "PASS" and files["manifest-sha256.txt"] != want:
        t.fail("manifest-sha256.txt", "not in the packer's exact form (sorted, '<sha256>  <path>', LF line ends)")
    for p in sorted(p for p in files if p.startswith(rend)):
        if not _rendering_name_ok(p) or p in tagm:
            t.fail(p, "the renderings folder holds only <figure>.png and renderings.json, listed in no manifest")
    if pack.SUMMARY in tagm:
        t.fail(pack.SUMMARY, "summary.txt names the digest, so no manifest may list it")
    signable = has_crate(_bag_info(files["bag-info.txt"]))
    known_tags = ("bagit.txt", "bag-info.txt", "manifest-sha256.txt", "tagmanifest-sha256.txt", pack.SUMMARY) + \
        ((pack.ATTESTATIONS,) if signable else ())
    extra_tags = sorted(p for p in files if not p.startswith(("data/", rend)) and p not in known_tags)
    for p in extra_tags:
        t.fail(p, "a tag file the packer does not write" + ("" if p != pack.ATTESTATIONS else
                                                              " (bundles of this format are never signed)"))
    want_tags = "".join(f"{c.sha256[p]}  {p}\n" for p in sorted(("bag-info.txt", "bagit.txt", "manifest-sha256.txt",
                                                                  pack.ATTESTATIONS)) if p in files).encode("utf-8")
    if t.status == "PASS" and files["tagmanifest-sha256.txt"] != want_tags:
        t.fail("tagmanifest-sha256.txt", "not in the packer's exact form")
    if files.get("bagit.txt") != pack.BAGIT_TXT:
        t.fail("bagit.txt", "not the packer's bagit.txt")
    info_raw = files["bag-info.txt"]
    keys = [line.split(":", 1)[0] for line in info_raw.decode("utf-8", "replace").split("\n") if line]
    if b"\r" in info_raw or not info_raw.endswith(b"\n") or keys != list(BAG_INFO_KEYS):
        t.fail("bag-info.txt", "not in the packer's exact form (its fields, once each, in order, LF line ends)",
               expected=list(BAG_INFO_KEYS), found=keys[:12])
    else:  # and byte for byte as the packer writes the values it holds ("Key: value\n")
        parsed = _bag_info(info_raw)
        if "".join(f"{k}: {parsed.get(k, '')}\n" for k in BAG_INFO_KEYS).encode("utf-8") != info_raw:
            t.fail("bag-info.txt", "not in the packer's exact form (one space after each colon, no other spaces "
                   "around a value, UTF-8)")
    agent = _bag_info(info_raw).get("Bag-Software-Agent")
    if agent is not None and not re.fullmatch(r"kbrepro ([0-9][0-9A-Za-z.+-]{0,40}|unknown)", agent):
        t.fail("bag-info.txt", "Bag-Software-Agent is not the packer's 'kbrepro VERSION'", found=agent)
    digest = hashlib.sha256(files["tagmanifest-sha256.txt"]).hexdigest()
    t.details.update(payload_files=len(payload), digest=digest)
    return digest


def _tier_attestation(c: arc.ArchiveContents, t: Tier, public_key):
    """Tier 2, after the manifests: a signed bundle's attestations (:mod:`bundle.attest`):
    the envelopes in the packer's exact form, their signature with ``public_key`` (if given),
    their statements against the in-toto and SLSA field definitions, their subjects against
    the payload bytes in the archive (not against the manifest: an edit re-hashed into the
    manifests is still caught). Returns the :class:`~bundle.attest.Attestation`."""
    raw = c.files.get(pack.ATTESTATIONS) if has_crate(_bag_info(c.files.get("bag-info.txt", b""))) else None
    att = attest.read(raw, {p: c.sha256[p] for p in c.files if p.startswith("data/")}, public_key)
    for kind, msg in att.problems:
        t.fail(pack.ATTESTATIONS, msg)
    t.details["signature"] = att.line()
    return att


#: the fields the packers write into bag-info.txt, in order (pack.bag_info, then pack.Bag's Payload-Oxum)
BAG_INFO_KEYS = (*pack.BAG_INFO_KEYS, "Payload-Oxum")


def _schema_problem(t: Tier, file: str, p: str) -> None:
    """One ``"<name>.json: $.path: message"`` string of :mod:`bundle.validate` as a problem."""
    _, path, msg = (p.split(": ", 2) + ["", ""])[:3]
    t.fail(file, msg or p, path=path if path.startswith("$") else None)
    if path == "$.schema_version" and msg.startswith("unsupported version "):  # bundle.validate's own wording
        t.details["unknown_version"] = True


def _study_document_names(b: Bundle) -> list[str]:
    """The study's own document names: the verifier's binding's for a study it ships; for
    another study, the names bundle.json lists as ``kbrepro/<name>`` under ``results/``."""
    if b.binding is not None:
        return list(study_documents(b.binding))
    names = []
    for rel, schema in sorted((b.meta.get("documents") or {}).items()):
        n = str(schema).split("/", 1)[-1]
        if DOC_NAME.match(n) and n not in OUR_DOCUMENTS and n != "claims" and rel == f"results/{n}.json" \
                and str(schema) == f"kbrepro/{n}":
            names.append(n)
    return names


def _author_schemas(b: Bundle, t: Tier, names: list[str]) -> dict[str, list[dict]]:
    """For a study the verifier does not ship: each study document's schema is the author's
    ``schemas/<name>.schema.json`` of the bundled study folder (the result becomes partial)."""
    out: dict[str, list[dict]] = {}
    for n in names:
        rel = f"schemas/{n}.schema.json"
        raw = b.study_files.get(rel)
        if raw is None:
            t.fail(f"{STUDY_PREFIX}{rel}", f"the study document {n}.json has no schema in the bundled study folder")
            continue
        try:
            sch = jsonio.loads_strict(raw, rel, max_bytes=1024 * 1024)
        except UnreadableInputError as exc:
            t.fail(f"{STUDY_PREFIX}{rel}", exc.message)
            continue
        why = schemas.untrusted_schema_problems(sch)
        for w in why:
            t.fail(f"{STUDY_PREFIX}{rel}", f"the author's schema of {n}.json cannot judge anything: {w}")
        if not why:
            out[n] = [schemas.UntrustedSchema(sch)]
    if out:
        b.partial.append("the study's own documents (" + ", ".join(sorted(out)) + ") are judged by the author's "
                         "schemas only")
    return out


def _tier_documents(b: Bundle, t: Tier) -> None:
    raw = b.files.get("data/bundle.json")
    if raw is None:
        t.fail("data/bundle.json", "missing bundle metadata")
        return
    try:
        meta = jsonio.loads_strict(raw, "data/bundle.json")
    except UnreadableInputError as exc:
        t.fail("data/bundle.json", exc.message)
        return
    for p in validate.schema_problems("bundle", meta):
        _schema_problem(t, "data/bundle.json", p)
    if t.status == "FAIL":
        return
    b.meta = meta
    # which study judges the bundle is decided first: the schemas of its documents are the
    # verifier's own plus (for a study it ships) the study's, from the verifier's own folder
    try:
        run_doc = jsonio.loads_strict(b.files.get("data/results/run.json", b"{}"), "data/results/run.json",
                                      max_bytes=MAX_DOCUMENT_BYTES)
    except UnreadableInputError:
        run_doc = {}
    run_doc = run_doc if isinstance(run_doc, dict) else {}
    if not isinstance(run_doc.get("study", {}), dict) or not isinstance((run_doc.get("study") or {}).get("files", {}),
                                                                         dict):
        t.fail("data/results/run.json", "the run's study record is not an object with a files mapping", path="$.study")
        return
    _study_definition(b, t, run_doc)
    if t.status == "FAIL":
        return
    study_docs = _study_document_names(b)
    if b.own_study is not None:
        try:
            extra = validate.study_schemas(b.own_study, b.binding)
        except ReproError as exc:
            t.fail(None, f"this verifier's own study {b.own_study.name} is broken: {exc.message}")
            return
    else:
        extra = _author_schemas(b, t, study_docs)
    known = [*OUR_DOCUMENTS, *study_docs]
    # which document sits where, and which schema judges it, is the verifier's own table: the
    # bundle's list is compared with it, never used to pick a schema
    present = {n for n in known if f"data/{DOC_PATHS[n]}" in b.files}
    own_listing = {DOC_PATHS[n]: f"kbrepro/{n}" for n in sorted(present)}
    for rel, schema in sorted(meta["documents"].items()):
        if own_listing.get(rel) != schema:
            t.fail("data/bundle.json", f"lists {safe_text(rel)} as {safe_text(schema)}, which is not where this "
                   "verifier keeps that document" if rel not in own_listing else
                   f"lists {rel} as {safe_text(schema)}; this verifier reads it as {own_listing[rel]}",
                   path="$.documents", expected=own_listing.get(rel), found=schema)
    for rel in sorted(set(own_listing) - set(meta["documents"])):
        t.fail("data/bundle.json", f"{rel} is in the bag but not listed among its documents", path="$.documents")
    stray = sorted(p for p in b.files if p.startswith("data/results/") and p.endswith(".json")
                   and not p.startswith("data/results/originals/") and p[len("data/"):] not in own_listing)
    for p in stray:
        t.fail(p, "a results document this verifier does not know (not one of "
               + ", ".join(DOC_PATHS[n] for n in known) + ")")
    if meta.get("source") == "measured":
        for n in REQUIRED:
            if n not in present:
                t.fail(f"data/{DOC_PATHS[n]}", "a measured bundle must carry this document; it is missing")
    docs = {}
    for name in [n for n in known if n in present] + ["claims"]:
        rel = "claims.json" if name == "claims" else DOC_PATHS[name]
        data = b.files.get(f"data/{rel}")
        if data is None:
            t.fail(f"data/{rel}", "missing")
            continue
        try:
            doc = jsonio.loads_strict(data, f"data/{rel}", max_bytes=MAX_DOCUMENT_BYTES)
        except UnreadableInputError as exc:
            t.fail(f"data/{rel}", exc.message)
            continue
        if jsonio.dumps(doc).encode("ascii") != data:
            t.fail(f"data/{rel}", "not in the canonical JSON form the packer writes (sorted keys, two-space "
                   "indent, ASCII)")
            continue
        problems = validate.schema_problems(name, doc, extra)
        for p in problems:
            _schema_problem(t, f"data/{rel}", p)
        if not problems:
            docs[name] = doc
    if t.status == "FAIL":
        b.documents = docs
        return
    _layout(b, t, docs)
    _inert_strings(b, t, docs)
    if meta.get("source") == "imported":
        _imported(b, t, docs)
    else:
        _notes(b, t)
    files = {k[len("data/"):]: v for k, v in b.files.items() if k.startswith("data/")}
    results_docs = {n: d for n, d in docs.items() if n != "claims"}
    for p in validate.consistency_problems(results_docs, files, file_hashes=False):  # tier 4 checks the files
        doc_file, rest = p.split(": ", 1)
        path, _, msg = rest.partition(": ")
        t.fail("data/" + DOC_PATHS.get(doc_file[: -len(".json")], doc_file), msg or rest,
               path=path if path.startswith("$") else None)
    for p in crosscheck.document_problems(docs, b.files, meta, _bag_info(b.files.get("bag-info.txt", b""))):
        t.fail(p.get("file"), p["message"], path=p.get("path"), expected=p.get("expected"), found=p.get("found"))
    if b.study is not None:
        for p in crosscheck.study_problems(b.study, docs, b.binding):
            t.fail(p.get("file"), p["message"], path=p.get("path"), expected=p.get("expected"), found=p.get("found"))
    b.documents = docs
    t.details["documents"] = sorted(docs)


def crate_check(b: Bundle, t: Tier, docs: Mapping) -> None:
    """The bundle's RO-Crate file against the one this verifier writes from the documents
    (:mod:`bundle.crate`), for formats that carry one (older ones must not)."""
    rel = f"data/{CRATE_FILE}"
    if not b.has_crate:
        if rel in b.files:
            t.fail(rel, "bundles of this format carry no RO-Crate file")
        return
    payload = b.payload
    f = facts.bundle_facts(b.meta, docs, payload)
    problems = crate.problems(payload.get(CRATE_FILE), f)
    for msg in problems:
        t.fail(rel, f"the RO-Crate metadata does not describe this bundle: {msg}")
    t.details["ro_crate"] = "differs from the documents" if problems else "agrees with the documents"


def statements_check(b: Bundle, t: Tier, docs: Mapping, claims_doc: Mapping) -> None:
    """A signed bundle's statements against the ones this verifier derives from the documents
    and from the claims verdicts it evaluated itself (:mod:`bundle.attest`): a statement signed
    with a valid signature that says anything else (another study, profile, KernelBench commit,
    software version, verdict) fails here."""
    att = b.attestation
    if att is None or not att.signed or not att.statements:
        return
    if any(kind == "payload_altered" for kind, _ in att.problems):
        return  # tier 2 said it: the payload is not what was signed (its file digests would only repeat that)
    payload = b.payload
    f = facts.bundle_facts(b.meta, docs, payload)
    want = attest.statements(f, attest.verdicts_of(claims_doc), payload)
    for path, e, found in attest.disagreements(att.statements, want):
        t.fail(pack.ATTESTATIONS, "the signed statement disagrees with the documents (the verifier derives another "
               "value from them)", path=path, expected=e, found=found)
    if t.status == "PASS":
        t.notes.append(f"the signed provenance and test-result statements agree with the documents "
                       f"({att.line()})")


#: the notes the packer adds to an importer's notes, exactly (bundle.make._kernelbench_inputs, _sources_check)
_PACKER_NOTES = (
    re.compile(r"KernelBench task files not included \(no verified checkout at [A-Za-z0-9._-]{1,100}/\): the "
               r"imported results are packed with the lock only"),
    re.compile(r"the imported results compiled a source with sha256 [0-9a-f]{64}, which is none of study "
               r"[A-Za-z0-9._-]{1,100}'s files"),
)


def _imported(b: Bundle, t: Tier, docs: dict) -> None:
    """An imported bundle's documents are derived from the post's original files it carries:
    the verifier runs its own importer on those files (and the bundled log) and requires the
    same documents, byte for byte, and the same notes."""
    originals = sorted(p for p in b.files if p.startswith("data/results/originals/"))
    if not originals:
        t.fail("data/results/originals", "an imported bundle must carry the original files its documents come from")
        return
    if b.binding is None:
        # nothing of an import can be re-derived without an importer of the verifier's own, and
        # an import is held to fewer checks than a measured run: refused, not partial
        t.fail("data/bundle.json", "imported results of a study this verifier does not ship cannot be checked: the "
               "verifier has no importer of its own to re-derive the documents from the bundled originals",
               path="$.source", found="imported")
        return
    log_name = getattr(b.binding, "import_log_file", "run.log")
    work = Path(tempfile.mkdtemp(prefix="kbrepro-import-", dir=b.root.parent))
    try:
        for p in originals:
            name = p.rsplit("/", 1)[1]
            if name == log_name or "/" in p[len("data/results/originals/"):]:
                t.fail(p, "not an original result file of the post")
                continue
            (work / name).write_bytes(b.files[p])
        if "data/logs/run.log" in b.files:
            (work / log_name).write_bytes(b.files["data/logs/run.log"])
        try:
            imp = b.binding.import_originals(work)
        except ReproError as exc:
            t.fail("data/results/originals", f"this verifier's importer refuses the bundled originals: {exc.message}")
            return
        if imp is None:
            t.fail("data/results/originals", f"study {b.trusted.name} has no importer: its results cannot be imported")
            return
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for name in sorted(set(imp.documents) | {n for n in docs if n != "claims"}):
        rel = f"data/{DOC_PATHS.get(name, name + '.json')}"
        want, have = imp.documents.get(name), docs.get(name)
        if want is None:
            t.fail(rel, "this document does not follow from the bundled originals")
        elif have is None:
            t.fail(rel, "the bundled originals give this document; the bundle lacks it")
        elif jsonio.dumps(want) != jsonio.dumps(have):
            for path, a, e in _json_diffs(have, json.loads(jsonio.dumps(want)), limit=10):
                t.fail(rel, "differs from what this verifier's importer derives from the bundled originals", path=path,
                       expected=e, found=a)
    notes = list(b.meta.get("notes") or [])
    if notes[: len(imp.notes)] != list(imp.notes):
        t.fail("data/bundle.json", "the notes differ from the importer's notes on the bundled originals", path="$.notes")
    for i, n in enumerate(notes[len(imp.notes):], len(imp.notes)):
        if not any(r.fullmatch(n) for r in _PACKER_NOTES):
            t.fail("data/bundle.json", "a note neither the importer nor the packer writes", path=f"$.notes[{i}]", found=n)


#: what makes a string active in Markdown or HTML wherever REPORT.md shows it: the start of an
#: HTML tag or comment, a link or image, a code-span backtick (line breaks, control and bidi
#: characters are refused separately)
_MD_ACTIVE = re.compile(r"<[A-Za-z!/?]|\]\(|\]\[|\]:|!\[|`|&(#|[A-Za-z][A-Za-z0-9]*;)")
#: in the fields REPORT.md shows in its tables, header and notes, emphasis, strike-through and
#: autolinks too
_MD_STRICT = re.compile(r"\*|~~|__|https?://|www\.", re.IGNORECASE)
#: an environment value shown in REPORT.md's header: a conservative character set, bounded
_ENV_VALUE = re.compile(r"^[A-Za-z0-9 .,:;()+/=@#_-]{0,200}$")
#: the longest string REPORT.md may show (longer ones push the report off screen)
MAX_SHOWN_CHARS = 1000
_SCRUB_PLACEHOLDER = re.compile(r"<(site-packages|dist-packages|tmp|home|path|project)>")
#: where the engine writes those placeholders: compile options, Inductor's recorded environment
_SCRUBBED_FIELD = re.compile(r"(\.options|\.inductor\.settings\.env\.[A-Za-z_][A-Za-z0-9_]*$)")
#: fields REPORT.md never shows, whose product-written text holds formulas ('max |d| <= atol')
_UNSHOWN = re.compile(r"\.(derived_from|definitions|inequality|imported|program_log)(\.|\[|$)"
                      r"|^\$\.claims\[\d+\]\.checks\[\d+\]\.(select|blocks)$")
#: fields REPORT.md shows inside a table, where a '|' would split the cell
_IN_TABLE = re.compile(r"^\$\.(fields\.[^.]+\.value|variants\[\d+\]\.(name|route|effective_options)"
                       r"|claims\[\d+\]\.(id|sentence|why|verdict|measured_verdict|checks\[\d+\]\.(why|items))"
                       r"|blocks\[\d+\]\.(id|arms|skipped|adaptive|kind|mode|scope)|tests\[\d+\]"
                       r"|tasks\.[^.]+\.inductor\.settings)")


_SHOWN_META = re.compile(r"^\$\.(name|notes|study|source|kernelbench\.reason)")


#: strings no rule of :func:`_bad_chars` can refuse (and that pass ``_ENV_VALUE``): letters,
#: digits and ``.,:;()+/=-`` and single underscores, at most 200 characters, with neither
#: ``://`` nor ``www.`` in them; the common case, decided without the per-character scan
_PLAIN = re.compile(r"(?!.*(?:://|www\.))(?:[A-Za-z0-9 .,:;()+/=-]|_(?!_)){0,200}\Z", re.IGNORECASE | re.DOTALL)


def _bad_chars(text: str, in_table: bool, strict: bool | None = None) -> str | None:
    """Why ``text`` is not inert where REPORT.md shows it, or None."""
    if _PLAIN.match(text):
        return None

    for ch in text:
        cat = unicodedata.category(ch)
        if cat[0] == "C" or cat in ("Zl", "Zp"):
            return f"a control, format or line-break character (U+{ord(ch):04X})"
    m = _MD_ACTIVE.search(text)
    if m:
        return f"active Markdown/HTML ({m.group(0)!r})"
    if len(text) > MAX_SHOWN_CHARS:
        return f"{len(text)} characters, more than the {MAX_SHOWN_CHARS} a report line may show"
    if in_table if strict is None else strict:
        m = _MD_STRICT.search(text)
        if m:
            return f"Markdown emphasis or an autolink ({m.group(0)!r})"
    if in_table and "|" in text:
        return "a '|', which splits a table cell"
    return None


def _inert_strings(b: Bundle, t: Tier, docs: dict) -> None:
    """Every string of the documents, bundle.json and claims.json is inert where REPORT.md may
    show it: one line, no control or bidi characters, no HTML tag or comment, link, image or
    backtick, and no '|' in a table cell. Otherwise a GPU name holding a line break and an HTML
    comment opener re-renders byte for byte and hides the real claims table from a forum
    reader. Allowed beyond that: the scrubber's placeholders (``<site-packages>``...) in compile
    options (shown as code), and the sentences of the claims the verifier itself defines."""
    own_sentences: set[str] = set()
    for st in ([b.trusted] if b.trusted is not None else [x for x in trusted_studies().values() if x.intact]):
        own_sentences |= {c["sentence"] for c in claims_mod.parse_spec(st.claims_raw)["claims"]}
    roots = [("data/bundle.json", b.meta)] + [("data/claims.json" if n == "claims" else f"data/{DOC_PATHS[n]}", d)
                                              for n, d in docs.items()]
    plain_keys: dict = {}  # a key's _PLAIN verdict; keys repeat across records
    for file, root in roots:
        found = 0
        stack = [(None, "$", root)]  # (parent chain, key, node): a path is spelled only when needed
        while stack and found < 20:
            parent, key, node = stack.pop()
            if isinstance(node, dict):
                chain = (parent, key)
                for k, v in node.items():
                    plain = plain_keys.get(k)
                    if plain is None:
                        plain = plain_keys[k] = isinstance(k, str) and _PLAIN.match(k) is not None
                    if plain and not isinstance(v, (str, dict, list)):
                        continue  # a plain key of a number, bool or null: nothing to check, no path
                    why = None if plain else _bad_chars(str(k), True)
                    if why:
                        t.fail(file, f"a key holds {why}", path=_spelled(chain, k), found=str(k))
                        found += 1
                    stack.append((chain, k, v))
            elif isinstance(node, list):
                chain = (parent, key)
                stack.extend((chain, i, v) for i, v in enumerate(node) if isinstance(v, (str, dict, list)))
            elif isinstance(node, str):
                if _PLAIN.match(node):
                    continue  # inert wherever it is shown
                path = _spelled(parent, key)
                text = node
                if (file.endswith("compile.json") and "options" in path) or \
                        (file.endswith("correctness.json") and _SCRUBBED_FIELD.search(path)):
                    text = _SCRUB_PLACEHOLDER.sub("", text)
                if file == "data/environment.json" and re.match(r"^\$\.fields\.[^.]+\.value", path) and \
                        not _ENV_VALUE.match(node):
                    t.fail(file, "an environment value REPORT.md shows holds characters outside "
                           "[A-Za-z0-9 .,:;()+/=@#_-] or is longer than 200", path=path, found=node)
                    found += 1
                    continue
                shown = not _UNSHOWN.search(path) and not (file == "data/claims.json" and node in own_sentences)
                table = bool(_IN_TABLE.match(path))
                strict = table or (file == "data/bundle.json" and bool(_SHOWN_META.match(path)))
                why = _bad_chars(text, table, strict) if shown else \
                    _bad_chars(_MD_ACTIVE.sub("", text).replace("|", ""), False)
                if why:
                    t.fail(file, f"a string REPORT.md may show holds {why}", path=path, found=node)
                    found += 1


def _spelled(parent, key) -> str:
    """The JSONPath of ``key`` under the parent chain ``parent`` (nested ``(parent, key)``
    pairs from the root ``(None, "$")``): ``$.a[3].b``, ``$["odd key"]``."""
    parts = []
    while parent is not None:  # the root's own key is "$"
        parts.append(key)
        parent, key = parent
    return schemas.json_path(reversed(parts))


def _layout(b: Bundle, t: Tier, docs: dict) -> None:
    """The bag holds exactly the files the packer writes for these records: the documents, the
    binaries the compile records name, the inputs bundle.json names (KernelBench files of the
    study's lock, every file of the study folder, the claims file), the run log, the post's
    originals (imported results only) and the plots the packer renders for these documents
    (PNG). Anything else could be linked from a forum post as if verified."""
    meta = b.meta
    top = b.name
    if top != meta.get("name"):
        t.fail("data/bundle.json", "the archive's top folder is not the bundle's name", path="$.name",
               expected=meta.get("name"), found=top)
    allowed = {"data/bundle.json", "data/claims.json", "data/REPORT.md", "data/logs/run.log"}
    if b.has_crate:
        allowed.add(f"data/{CRATE_FILE}")
    allowed |= {f"data/{DOC_PATHS[n]}" for n in docs if n != "claims"}
    for v in (docs.get("compile") or {}).get("variants", []):
        for key in ("cubin", "cubin_complete", "ptx", "sass"):
            ref = v.get(key)
            if isinstance(ref, dict) and isinstance(ref.get("file"), str):
                allowed.add(f"data/{ref['file']}")
    kb = meta.get("kernelbench") or {}
    allowed.add("data/" + kb.get("lock_file", "inputs/kernelbench/kernelbench.lock.json"))
    allowed |= {f"data/inputs/kernelbench/{rel}" for rel in _judging_lock(b).files}
    allowed |= {f"{STUDY_PREFIX}{rel}" for rel in b.study_files}
    for ref in (meta.get("study") or {}, meta.get("claims") or {}):
        if ref.get("file"):
            allowed.add(f"data/{ref['file']}")
    if meta.get("source") == "imported":
        allowed |= {p for p in b.files if p.startswith("data/results/originals/") and p.count("/") == 3}
    # the documents' figures are checked here; the claims' figures in tier 5, against the
    # claims this verifier evaluates (the recorded claims only name the files allowed here)
    want = plots_mod.document_figures({n: d for n, d in docs.items() if n != "claims"})
    figs = _figures(docs, t)
    allowed |= {f"data/plots/{n}.json" for n in {**want, **figs}}
    for n, d in want.items():
        got = b.files.get(f"data/plots/{n}.json")
        if got is None:
            t.fail(f"data/plots/{n}.json", "the data of a figure the packer draws for these records is missing")
        elif got != jsonio.dumps(d).encode():
            t.fail(f"data/plots/{n}.json", "is not the figure data this verifier derives from the records")
    for p in sorted(set(b.files) - allowed):
        if p.startswith("data/"):
            t.fail(p, "a payload file the packer does not write for these records (not verified by anything)")
    _renderings(b, t, figs)


def _figures(docs: Mapping, t: Tier | None = None) -> dict:
    """The figures' data (:func:`bundle.plots.figure_data`) of the documents and the recorded
    claims, which tier 5 proves are the claims the data give."""
    own = {n: d for n, d in docs.items() if n != "claims"}
    try:
        return plots_mod.figure_data(own, docs.get("claims"))
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        # recorded claims of a shape the evaluator never writes: the claim figures they would
        # name are then files nothing allows
        if t is not None:
            t.fail("data/claims.json", "the recorded claims are not of the form the evaluator writes (their figures "
                   f"cannot be derived: {type(exc).__name__} {safe_text(str(exc), 80)})")
        return plots_mod.document_figures(own)


#: a version string in renderings.json's ``renderer``
_VERSION_RE = re.compile(r"^[0-9A-Za-z][0-9A-Za-z.+_-]{0,39}$")


def _renderings(b: Bundle, t: Tier, figures: Mapping) -> None:
    """The ``renderings/`` tag folder (outside the digest). None at all, or one PNG for every
    figure of these records, each a PNG exactly as the packer's renderer writes them
    (:func:`bundle.plots.png_problem` without inflating: chunks, CRCs, size bounds; the
    image data are inflated with ``--check-renderings``), and ``renderings.json`` byte-identical to the one the packer writes for these PNGs
    and the verified figure data (:func:`bundle.plots.renderings_doc`; the figure data files
    are verified against this verifier's own figures: tier 3 for the documents', tier 5 for
    the claims'). The pixels are compared only with ``--check-renderings``
    (:func:`_rendered_again`): drawing them takes seconds."""
    pre = f"{pack.RENDERINGS}/"
    pngs = {p[len(pre):-4]: b.files[p] for p in b.files if p.startswith(pre) and p.endswith(".png")}
    raw = b.files.get(f"{pre}renderings.json")
    if not pngs and raw is None:
        t.notes.append("no renderings in this bundle (packed without matplotlib, or with --no-plots); verify_bundle.py "
                       "X.tar --plots DIR draws the figures from their verified data")
        return
    if raw is None:
        t.fail(f"{pre}renderings.json", "the renderings are not described (renderings.json is missing)")
        return
    try:
        doc = jsonio.loads_strict(raw, "renderings.json")
    except ReproError as exc:
        t.fail(f"{pre}renderings.json", exc.message)
        return
    renderer = doc.get("renderer") if isinstance(doc, dict) else None
    if not isinstance(renderer, dict) or set(renderer) != {"matplotlib", "numpy", "freetype"} or not all(
            isinstance(v, str) and _VERSION_RE.match(v) for v in renderer.values()):
        t.fail(f"{pre}renderings.json", "its renderer is not the three versions the packer records (matplotlib, "
               "numpy, freetype)")
        return
    bad = False
    for n in sorted(set(figures) - set(pngs)):
        t.fail(f"{pre}{n}.png", "missing: a bundle with renderings has one for every figure of its records")
        bad = True
    for n, png in sorted(pngs.items()):
        why = "a rendering of no figure of these records" if n not in figures else \
            plots_mod.png_problem(png, inflate=False)
        if why:
            t.fail(f"{pre}{n}.png", why)
            bad = True
    if bad:
        return
    data = {n: b.files.get(f"data/plots/{n}.json", b"") for n in pngs}
    if raw != plots_mod.renderings_doc(pngs, data, renderer):
        t.fail(f"{pre}renderings.json", "is not the description the packer writes of these PNGs and the data they "
               "were drawn from (sha256, sizes, data files, exact form)")
        return
    b.renderings = (pngs, renderer)
    t.notes.append(f"{len(pngs)} renderings drawn by matplotlib {renderer['matplotlib']}: outside the digest, their "
                   "data are verified; their pixels are compared only with --check-renderings (--plots DIR draws "
                   "them here)")


def _rendered_again(b: Bundle, t: Tier) -> None:
    """``--check-renderings``: every figure drawn again here from its verified data and
    compared byte for byte with the bundle's PNG, where this machine's renderer versions
    (matplotlib, numpy, freetype) are the ones the bundle records (PNG bytes are
    deterministic for one set of versions; another set draws other bytes from the same
    data). A PNG that differs fails; other versions or no matplotlib make the result PARTIAL."""
    if b.renderings is None:
        if any(p.startswith(f"{pack.RENDERINGS}/") for p in b.files):
            b.partial.append("--check-renderings: the renderings failed their checks, so they were not drawn again")
        else:
            t.notes.append("--check-renderings: this bundle has no renderings")
        return
    pngs, renderer = b.renderings
    try:
        here = plots_mod.renderer_versions()
    except ImportError:
        b.partial.append("--check-renderings: matplotlib is not installed here, so the renderings' pixels were not "
                         "compared (pip install matplotlib)")
        return
    if here != renderer:
        b.partial.append("--check-renderings: the renderings were drawn with " + ", ".join(
            f"{k} {renderer[k]}" for k in sorted(renderer)) + "; this machine has " + ", ".join(
            f"{k} {here[k]}" for k in sorted(here)) + ", which draw other bytes: their pixels were not compared")
        return
    for n in sorted(pngs):
        why = plots_mod.png_problem(pngs[n])  # now its image data too
        if why:
            t.fail(f"{pack.RENDERINGS}/{n}.png", why)
        elif plots_mod.render(n, jsonio.loads_strict(b.files[f"data/plots/{n}.json"], n)) != pngs[n]:
            t.fail(f"{pack.RENDERINGS}/{n}.png", f"is not the figure these versions draw from data/plots/{n}.json "
                   "(this verifier drew it again): the picture does not show the verified data")
    if not t.problems:
        t.notes.append(f"--check-renderings: all {len(pngs)} renderings drawn again here from their verified data, "
                       "byte-identical")


def _notes(b: Bundle, t: Tier) -> None:
    """bundle.json's notes reach REPORT.md, so they are checked: a measured bundle's packer
    writes none."""
    notes = b.meta.get("notes") or []
    if b.meta.get("source") != "measured":
        return
    for i, n in enumerate(notes):
        t.fail("data/bundle.json", "the notes of a measured bundle are the packer's own; this one is not a note the "
               "packer writes", path=f"$.notes[{i}]", found=n)


def _judging_lock(b: Bundle):
    """The KernelBench lock that says which task files the bundle may carry: the verifier's
    own copy of its study's lock, else (a study it does not ship) the verifier's whole pin."""
    if b.trusted is not None:
        return load_lock(b.trusted.folder / b.trusted.lock_file)
    return own_pin()


#: a file name a bundled study folder may hold (no hidden files, bounded depth and length)
_STUDY_FILE = re.compile(r"^([A-Za-z0-9_][A-Za-z0-9._-]{0,80}/){0,3}[A-Za-z0-9_][A-Za-z0-9._-]{0,80}"
                         r"\.(yaml|yml|json|py|cu|cuh|h|hpp|md|txt)$")


def _study_definition(b: Bundle, t: Tier, run_doc: Mapping) -> None:
    """The bundled study folder (``data/inputs/study/``, every file of it), compared with
    the records and with the verifier's own folder of the study the run names, which then
    judges the bundle (its definition, claims, lock, schemas and binding); a study the
    verifier does not ship is judged by the author's definition and makes the result partial.
    The bundled files are never imported or executed here."""
    ref = b.meta.get("study") or {}
    rel = f"{STUDY_PREFIX}study.yaml"
    if ref.get("file") != "inputs/study/study.yaml":
        t.fail("data/bundle.json", "the study definition is not where the packer puts it", path="$.study.file",
               expected="inputs/study/study.yaml", found=ref.get("file"))
        return
    files = {p[len(STUDY_PREFIX):]: d for p, d in b.files.items() if p.startswith(STUDY_PREFIX)}
    for name in sorted(files):
        if not _STUDY_FILE.match(name):
            t.fail(f"{STUDY_PREFIX}{name}", "not a file name a study folder may hold (source, YAML, JSON, Python, "
                   "Markdown or text, at most three folders deep)")
    raw = files.get("study.yaml")
    if raw is None:
        t.fail(rel, "the study definition bundle.json names is missing")
        return
    b.study_files = files
    got = hashlib.sha256(raw).hexdigest()
    if ref.get("sha256") != got:
        t.fail(rel, "the study definition differs from the sha256 bundle.json records", expected=ref.get("sha256"),
               found=got)
    digest = plugin.files_digest(files)
    for what, recorded in (("bundle.json", ref.get("files")), ("run.json", (run_doc.get("study") or {}).get("files"))):
        if recorded is None and what == "run.json":
            continue
        if recorded != digest:
            bad = plugin.differing(digest, recorded or {})
            t.fail("data/bundle.json" if what == "bundle.json" else "data/results/run.json",
                   f"the bundled study files differ from the ones {what} records: "
                   + ", ".join(safe_text(x, 80) for x in bad[:8]), path="$.study.files")
    run_st = run_doc.get("study") or {}
    if run_st.get("sha256") not in (None, got):
        t.fail("data/results/run.json", "the run used another study definition than the bundled one",
               path="$.study.sha256", expected=got, found=run_st.get("sha256"))
    try:
        parsed = bounded.load_yaml(raw, rel)
    except ReproError as exc:
        t.fail(rel, exc.message)
        return
    name = run_st.get("name") or ref.get("name")
    profile = run_st.get("profile") or ref.get("profile")
    for what, value in (("bundle.json", ref.get("name")), ("the bundled study definition",
                                                          parsed.get("name") if isinstance(parsed, dict) else None)):
        if value != name:
            t.fail(rel, f"{what} names study {safe_text(value)!r}, run.json names {safe_text(name)!r}")
    if ref.get("profile") != profile:
        t.fail("data/bundle.json", "bundle.json and run.json name different profiles", path="$.study.profile",
               expected=profile, found=ref.get("profile"))
    if t.status == "FAIL":
        return
    studies = trusted_studies()
    trusted = studies.get(name)
    if trusted is None and isinstance(parsed, dict):
        bare = {k: v for k, v in parsed.items() if k not in ("name", "title")}
        for other in studies.values():
            theirs = bounded.load_yaml(other.study_raw, "study.yaml")
            same_rest = {k: v for k, v in files.items() if k != "study.yaml"} == \
                {k: v for k, v in other.files.items() if k != "study.yaml"}
            if same_rest and bare == {k: v for k, v in theirs.items() if k not in ("name", "title")}:
                t.fail(rel, f"the bundled study is this verifier's study {other.name!r} under another name "
                       f"({safe_text(name)!r}); it is judged as {other.name!r} and must carry that name",
                       expected=other.name, found=name)
                return
    if trusted is not None and not trusted.intact:
        t.notes.append(f"this verifier's own copy of study {trusted.name!r} differs from its registry "
                       "(manifests/studies.json): it judges nothing")
        b.partial.append(f"this verifier's own copy of study {safe_text(name)!r} was edited after it was registered")
        trusted = None
    if trusted is None:
        b.partial.append(f"study {safe_text(name)!r} is not one this verifier ships: its study definition and its "
                         "claims are the author's, checked for consistency with the data but not judged by the "
                         "verifier's own definitions")
        try:
            b.author_study = load_study(b.root / "data" / "inputs" / "study", profile, files=files, untrusted=True)
        except ReproError as exc:
            t.fail(rel, exc.message)
        t.details["study"] = {"name": name, "profile": profile, "judged_by": "author"}
        return
    diff = plugin.differing(files, trusted.files)
    if diff:
        first = diff[0]
        own, theirs = trusted.files.get(first), files.get(first)
        t.fail(f"{STUDY_PREFIX}{first}", f"the bundled folder of study {safe_text(name)!r} differs from this "
               "verifier's own in " + ", ".join(safe_text(x, 80) for x in diff[:8]) + "; a bundle cannot redefine a "
               "study the verifier ships (a bundle of an earlier version of the study is judged only by a verifier "
               "of that version)",
               expected=hashlib.sha256(own).hexdigest() if own is not None else "(no such file)",
               found=hashlib.sha256(theirs).hexdigest() if theirs is not None else "(no such file)")
        return
    try:
        b.own_study = load_study(trusted.folder, profile)
        b.binding = b.own_study.binding()
    except ReproError as exc:
        t.fail("data/results/run.json", f"profile {safe_text(profile)!r}: {exc.message}", path="$.study.profile")
        b.own_study = None
        return
    b.trusted = trusted
    t.details["study"] = {"name": name, "profile": profile, "judged_by": "verifier"}


def _tier_provenance(b: Bundle, t: Tier) -> None:
    pin = own_pin()
    kb = b.meta.get("kernelbench", {})
    lock_rel = "data/" + kb.get("lock_file", "inputs/kernelbench/kernelbench.lock.json")
    lock_raw = b.files.get(lock_rel)
    study_lock = b.study.lock_file if b.study is not None else None
    if lock_raw is None:
        t.fail(lock_rel, "the bundle carries no KernelBench lock")
    else:
        if study_lock is not None and b.study_files.get(study_lock) != lock_raw:
            t.fail(lock_rel, "the KernelBench lock differs from the study's own lock file "
                   f"({safe_text(study_lock)})")
        try:
            blk = jsonio.loads_strict(lock_raw, "kernelbench.lock.json")
        except UnreadableInputError as exc:
            blk = {}
            t.fail(lock_rel, exc.message)
        blk = blk if isinstance(blk, dict) else {}
        if blk.get("commit") != pin.commit:
            t.fail(lock_rel, "KernelBench commit differs from the verifier's pin", expected=pin.commit,
                   found=blk.get("commit"))
        for rel, h in sorted((blk.get("files") or {}).items()):
            if pin.files.get(rel) != h:
                t.fail(lock_rel, f"{safe_text(rel, 120)}: " + ("not a file of KernelBench at the pinned commit"
                       if rel not in pin.files else "hash differs from the verifier's pin"),
                       expected=pin.files.get(rel), found=h)
    run_kb = (b.documents.get("run") or {}).get("kernelbench") or {}
    if run_kb.get("commit") and run_kb["commit"] != pin.commit:
        t.fail("data/results/run.json", "the run used another KernelBench commit", path="$.kernelbench.commit",
               expected=pin.commit, found=run_kb["commit"])
    judging = _judging_lock(b)
    included = [p for p in b.files if p.startswith("data/inputs/kernelbench/") and p != lock_rel]
    for p in included:
        rel = p[len("data/inputs/kernelbench/"):]
        want = judging.files.get(rel) if rel in judging.files else None
        got = hashlib.sha256(b.files[p]).hexdigest()
        if want is None:
            t.fail(p, "KernelBench file not in the study's lock")
        elif want != got or pin.files.get(rel) != got:
            t.fail(p, "KernelBench file differs from the verifier's pin", expected=pin.files.get(rel), found=got)
    if not included:
        msg = "the bundle carries no KernelBench task files"
        if b.meta.get("source") == "measured":
            t.fail("data/inputs/kernelbench", msg + " although it was measured")
        else:
            t.notes.append(msg + f" ({safe_text(kb.get('reason') or 'imported results')})")
    comp = b.documents.get("compile") or {}
    sources = {}
    for i, v in enumerate(comp.get("variants", [])):
        src = v.get("source") or comp.get("source") or {}
        if src.get("file"):
            sources.setdefault(src["file"], set()).add(src.get("sha256"))
    known = bool(sources)
    for fname, shas in sorted(sources.items()):
        path = f"{STUDY_PREFIX}{fname}"
        data = b.study_files.get(fname)
        if data is None:
            if b.meta.get("source") == "measured":
                t.fail(path, "the kernel source the compile records name is not in the bundled study folder")
            known = False
            continue
        got = hashlib.sha256(data).hexdigest()
        if shas != {got}:
            if b.meta.get("source") == "measured":
                t.fail(path, "kernel source differs from the compile records", expected=sorted(map(str, shas)),
                       found=got)
            known = False
        if b.trusted is None or b.trusted.files.get(fname) != data:
            known = False
    if b.meta.get("source") == "measured" and not sources:
        t.fail("data/results/compile.json", "the compile records name no kernel source")
    if b.study is not None and b.meta.get("source") == "measured":
        # which file each variant compiles is the study definition's, not the record's
        for i, v in enumerate(comp.get("variants", [])):
            name = v.get("name")
            want = b.study.variant_sources.get(name)
            got = (v.get("source") or comp.get("source") or {}).get("file")
            if want is not None and got != want:
                t.fail("data/results/compile.json", f"{safe_text(name)}: the study compiles {want} for this variant; "
                       f"the record names {safe_text(got)}", path=f"$.variants[{i}].source.file", expected=want,
                       found=got)
            want_h = list(b.study.variant_headers.get(name, ()))
            got_h = [(h or {}).get("file") for h in (v.get("headers") or [])]
            if want is not None and got_h != want_h:
                t.fail("data/results/compile.json", f"{safe_text(name)}: the headers compiled are not the study's",
                       path=f"$.variants[{i}].headers", expected=want_h, found=got_h)
            for j, h in enumerate(v.get("headers") or []):
                data = b.study_files.get((h or {}).get("file"))
                if data is None or hashlib.sha256(data).hexdigest() != (h or {}).get("sha256"):
                    t.fail("data/results/compile.json", f"{safe_text(name)}: header {safe_text((h or {}).get('file'))} "
                           "differs from the bundled study file", path=f"$.variants[{i}].headers[{j}]")
        first = b.study.variant_sources.get(b.study.variants[0].name) if b.study.variants else None
        if first is not None and (comp.get("source") or {}).get("file") != first:
            t.fail("data/results/compile.json", f"the compile record's source is not the study's first variant's "
                   f"({first})", path="$.source.file", expected=first, found=(comp.get("source") or {}).get("file"))
    t.details["kernel_source_known"] = known
    b.kernel_source_known = known
    if sources and not known and b.trusted is not None and b.meta.get("source") == "measured":
        b.partial.append("a compiled kernel source is not this verifier's own copy of the study's")
    if not sources or (b.meta.get("source") == "imported" and not known):
        t.notes.append("the compiled kernel source is not in the bundle (imported results)")
        b.partial.append("no kernel source and no compiled binaries: the FTZ modes and results rest on the "
                         "numbers the post recorded, which only a replay can confirm")
    # which FTZ mode each variant must have is the verifier's own reading of its own study's
    # routes and options; the bundle's expected_ftz is compared with it, never used instead
    # (for a study the verifier does not ship, its own FTZ rule is applied to the author's
    # routes and options)
    own_ftz = None
    judge_study = b.own_study if b.own_study is not None else b.author_study
    if judge_study is not None:
        own_ftz = crosscheck.expected_ftz(judge_study)
        recorded_names = [v.get("name") for v in comp.get("variants", [])]
        for n in sorted(set(own_ftz) - set(recorded_names)):
            t.fail("data/results/compile.json", f"variant {n} of the study definition was not compiled",
                   path="$.variants")
    for i, v in enumerate(comp.get("variants", [])):
        name = v.get("name")
        if own_ftz is not None:
            if name not in own_ftz:
                t.fail("data/results/compile.json", f"variant {safe_text(name)!r} is not a variant of the "
                       "study definition", path=f"$.variants[{i}].name")
                continue
            if v.get("expected_ftz") is not own_ftz[name]:
                t.fail("data/results/compile.json", f"{name}: the record says the binary must have "
                       f"ftz={str(v.get('expected_ftz')).lower()}; "
                       + ("this verifier's study definition" if b.own_study is not None else
                          "this verifier's FTZ rule applied to the author's study definition")
                       + f" (route and options) gives ftz={str(own_ftz[name]).lower()}", path=f"$.variants[{i}].expected_ftz",
                       expected=own_ftz[name], found=v.get("expected_ftz"))
        for key in ("cubin", "cubin_complete", "ptx", "sass"):
            ref = v.get(key)
            if isinstance(ref, dict):
                data = b.files.get(f"data/{ref['file']}")
                if data is None:
                    t.fail(f"data/{ref['file']}", f"{name}: {key} named by the compile record is missing")
                elif hashlib.sha256(data).hexdigest() != ref["sha256"]:
                    t.fail(f"data/{ref['file']}", f"{name}: {key} does not match its recorded sha256",
                           expected=ref["sha256"], found=hashlib.sha256(data).hexdigest())
        ev = v.get("ftz_evidence") or {}
        expected = own_ftz[name] if own_ftz is not None else bool(v.get("expected_ftz"))
        says = {}
        w = ev.get("witness") or {}
        # a witness judges only where it discriminates and decided (harness.records.FtzEvidence)
        if w.get("discriminates") is not False and isinstance(w.get("flushes"), bool):
            says["witness"] = w["flushes"]
        ptx_ref = v.get("ptx")
        if isinstance(ptx_ref, dict) and f"data/{ptx_ref['file']}" in b.files:
            counts = kc.ptx_ftz_counts(b.files[f"data/{ptx_ref['file']}"])
            rec = ev.get("ptx") or {}
            if rec and any(rec.get(k) != counts[k] for k in counts):
                t.fail("data/results/compile.json", f"{name}: recorded PTX .ftz counts differ from the bundled PTX",
                       path=f"$.variants[{i}].ftz_evidence.ptx", expected=counts, found={k: rec.get(k) for k in counts})
            if kc.ptx_says_ftz(counts) is not None:
                says["ptx"] = kc.ptx_says_ftz(counts)
        sass_ref = v.get("sass")
        if isinstance(sass_ref, dict) and f"data/{sass_ref['file']}" in b.files:
            counts = kc.sass_ftz_counts(b.files[f"data/{sass_ref['file']}"].decode("utf-8", "replace"))
            if kc.sass_says_ftz(counts) is not None:
                says["sass"] = kc.sass_says_ftz(counts)
        agrees = ftz_agrees(expected, says)
        if not says:
            t.fail("data/results/compile.json", f"{name}: no FTZ evidence (no witness, PTX or SASS)",
                   path=f"$.variants[{i}].ftz_evidence")
        elif not agrees:
            derived = (w.get("derived_from") and f"; the witness is derived from {w['derived_from']}") or ""
            t.fail("data/results/compile.json",
                   f"{name}: FTZ evidence contradicts the variant (name promises ftz={str(expected).lower()}; "
                   + ", ".join(f"{k} says ftz={str(s).lower()}" for k, s in says.items()) + f"{derived}). The "
                   "binary that ran did not have the FTZ mode its name claims, so results labelled with this "
                   "variant do not show what they say (a known cause: NVRTC's compile cache, see docs/traps.md)",
                   path=f"$.variants[{i}].ftz_evidence", expected=expected, found=says)
        strict = b.meta.get("source") == "measured"  # a measured record's 'agrees' is the shared rule's, exactly
        if (ev.get("agrees") != agrees) if strict else (ev.get("agrees") is not None and agrees is not None
                                                         and ev["agrees"] != agrees):
            t.fail("data/results/compile.json", f"{name}: recorded 'agrees' does not follow from the evidence",
                   path=f"$.variants[{i}].ftz_evidence.agrees", expected=agrees, found=ev["agrees"])
    by_sha: dict[str, set] = {}
    for v in comp.get("variants", []):
        for key in ("cubin", "cubin_complete"):
            ref = v.get(key)
            if isinstance(ref, dict) and ref.get("sha256"):
                ftz = own_ftz.get(v.get("name"), bool(v.get("expected_ftz"))) if own_ftz else bool(v.get("expected_ftz"))
                by_sha.setdefault(ref["sha256"], set()).add((v.get("name"), ftz))
    for sha, owners in sorted(by_sha.items()):
        if len({ftz for _, ftz in owners}) > 1:
            t.fail("data/results/compile.json", "one cubin is recorded for variants that promise different FTZ modes: "
                   + ", ".join(sorted(f"{n} (ftz={str(f).lower()})" for n, f in owners)), found=sha)
    wit = b.documents.get("witness") or {}
    for i, v in enumerate(comp.get("variants", [])):
        rec_w = (v.get("ftz_evidence") or {}).get("witness") or {}
        doc_w = (wit.get("verdicts") or {}).get(v.get("name"))
        if wit and doc_w is None and rec_w:
            t.fail("data/results/witness.json", f"{v.get('name')}: no witness verdict for a compiled variant")
        elif doc_w is not None and rec_w and any(k in rec_w and rec_w[k] != doc_w.get(k)
                                                 for k in ("flushes", "bit_identical_to_reference")):
            t.fail("data/results/compile.json", f"{v.get('name')}: the compile record's witness differs from witness.json",
                   path=f"$.variants[{i}].ftz_evidence.witness", expected=doc_w, found=rec_w)
    checked = []
    if included:
        checked.append(f"KernelBench pin ({len(included)} files)")
    if sources:
        checked.append("kernel source" + ("" if b.kernel_source_known else " (not the verifier's own)"))
    n_bin = sum(1 for v in comp.get("variants", []) for k in ("cubin", "cubin_complete")
                if isinstance(v.get(k), dict))
    if n_bin:
        checked.append(f"{n_bin} cubins")
    if comp.get("variants"):
        checked.append("FTZ evidence" + ("" if n_bin else " (recorded numbers only)"))
    t.details["checked"] = checked
    for p in crosscheck.provenance_problems(b.documents, b.files, b.meta, b.binding):
        t.fail(p.get("file"), p["message"], path=p.get("path"), expected=p.get("expected"), found=p.get("found"))


def _json_diffs(recorded, expected, path: str = "$", limit: int = 20) -> list[tuple[str, object, object]]:
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


def _compare_specs(own: Mapping, theirs: Mapping, rel: str, t: Tier, b: Bundle) -> dict:
    """The spec that judges the bundle when the bundled claims spec is not byte-identical to
    the verifier's own: every claim the verifier defines must be defined identically (else a
    problem), and is judged by the verifier's definition; claims only the bundle defines are
    the author's (the result becomes partial). Returns the judging spec, claims in the
    bundled order followed by any the bundle left out."""
    if theirs.get("study") != own.get("study"):
        t.fail(rel, f"the claims spec is for study {safe_text(theirs.get('study'))!r}; this verifier's claims for "
               f"this study are for {own.get('study')!r}", expected=own.get("study"), found=theirs.get("study"))
    if theirs.get("bootstrap") != own.get("bootstrap"):
        t.fail(rel, "the bootstrap settings differ from this verifier's spec", path="$.bootstrap",
               expected=own.get("bootstrap"), found=theirs.get("bootstrap"))
    ours = {c["id"]: c for c in own["claims"]}
    mine = {c["id"]: c for c in theirs["claims"]}
    for cid, c in ours.items():
        th = mine.get(cid)
        if th is None:
            t.fail(rel, f"claim {cid} of this verifier's spec is missing from the bundle; the verifier judges it "
                   "anyway")
        elif th != c:
            fields = sorted(k for k in set(th) | set(c) if th.get(k) != c.get(k))
            t.fail(rel, f"claim {cid} is defined differently from this verifier's spec (fields: {', '.join(fields)}); "
                   "it is judged by the verifier's definition")
    extra = [c["id"] for c in theirs["claims"] if c["id"] not in ours]
    if extra:
        b.partial.append(f"claim{'s' if len(extra) > 1 else ''} {', '.join(safe_text(x) for x in extra[:20])} "
                         f"{'are' if len(extra) > 1 else 'is'} the author's definition{'s' if len(extra) > 1 else ''}, "
                         "not this verifier's: shown as the author's")
    judged = [ours.get(c["id"], c) for c in theirs["claims"]] + [c for c in own["claims"] if c["id"] not in mine]
    return {**own, "claims": judged}


def _tier_claims(b: Bundle, t: Tier) -> None:
    """Claims (:func:`_claims`), then what describes the bundle: its RO-Crate file and (signed
    bundles) its statements, against what the verifier derives from the checked documents.
    They come last, so that a document edit is reported by the check that owns it first."""
    _claims(b, t)
    crate_check(b, t, {n: d for n, d in b.documents.items() if n != "claims"})


def _claims(b: Bundle, t: Tier) -> None:
    """Claims judged by the verifier's own spec (the study's, for a study it ships), the
    recorded claims.json compared with the recomputation in full, and REPORT.md compared
    byte for byte with the report the verifier renders from the records."""
    spec_ref = b.meta.get("claims", {})
    rel = f"data/{spec_ref.get('file')}"
    raw = b.files.get(rel)
    if raw is None:
        t.fail(rel, "claims spec missing")
        return
    got = hashlib.sha256(raw).hexdigest()
    if spec_ref.get("sha256") != got:
        t.fail(rel, "claims spec differs from the sha256 bundle.json records", expected=spec_ref.get("sha256"), found=got)
    own_claims = b.study_files.get(b.study.claims_file) if b.study is not None else None
    if own_claims is not None and raw != own_claims:
        if b.trusted is None:
            b.partial.append(f"the claims evaluated ({safe_text(spec_ref.get('file'))}) are not the study folder's "
                             f"{safe_text(b.study.claims_file)}: the author chose them when packing")
        else:
            t.notes.append("the claims spec packed is not the study's own claims file; the verifier judges with its own")
    recorded = b.documents.get("claims") or {}
    if (recorded.get("spec") or {}).get("sha256") != got:
        t.fail("data/claims.json", "claims.json was evaluated from another claims spec",
               expected=got, found=(recorded.get("spec") or {}).get("sha256"))
    try:
        theirs = claims_mod.parse_spec(raw, rel)
    except ReproError as exc:
        t.fail(rel, exc.message)
        theirs = None
    if b.trusted is not None:
        own = claims_mod.parse_spec(b.trusted.claims_raw, "the verifier's claims spec")
        judge = own if theirs is None or raw == b.trusted.claims_raw else _compare_specs(own, theirs, rel, t, b)
        t.details["judged_by"] = "verifier"
    elif theirs is not None:
        judge = theirs
        t.details["judged_by"] = "author"
    else:
        return
    docs = {n: d for n, d in b.documents.items() if n != "claims"}
    try:
        expected = claims_mod.evaluate(judge, docs, source="recorded")
        expected["spec"] = {"file": spec_ref.get("file"), "sha256": got}
        claims_text = jsonio.dumps(expected)  # written once, compared and read back below
    except ReproError as exc:
        t.fail(rel, exc.message)
        return
    except (ValueError, TypeError, OverflowError) as exc:  # a value JSON cannot hold (the packer's too)
        t.fail(rel, f"the claims cannot be evaluated to a claims.json: {type(exc).__name__}: {safe_text(exc)}")
        return
    for msg in claims_mod.compare_verdicts(recorded, expected):
        t.fail("data/claims.json", msg)
    raw_claims = b.files.get("data/claims.json", b"")
    if claims_text.encode("ascii") != raw_claims:
        diffs = _json_diffs(recorded, expected)
        if not diffs:
            t.fail("data/claims.json", "claims.json is not in the canonical form the packer writes")
        for path, a, e in diffs:
            t.fail("data/claims.json", "differs from the verifier's evaluation of the data", path=path,
                   expected=e, found=a)
    own_ids = {c["id"] for c in (claims_mod.parse_spec(b.trusted.claims_raw)["claims"] if b.trusted else [])}
    verdicts = {c["id"]: c["verdict"] for c in expected["claims"]}
    t.details["verdicts"] = verdicts
    t.details["author_claims"] = [{"id": c["id"], "sentence": c["sentence"], "verdict": c["verdict"],
                                   "definition": next((x for x in (theirs or {}).get("claims", []) if x["id"] == c["id"]),
                                                      None)}
                                  for c in expected["claims"] if c["id"] not in own_ids]
    if b.trusted is None and expected["claims"]:
        b.partial.append("every claim is judged by the author's definitions (shown as the author's)")
    report = b.files.get("data/REPORT.md")
    if report is None:
        t.fail("data/REPORT.md", "the bundle has no REPORT.md")
    else:
        claims_now = json.loads(claims_text)
        # claims the bundle's spec adds to the study's own are marked as the author's (the
        # packer marks those its --claims added to the study folder's claims file)
        own_ids = claims_mod.own_ids(raw, b.trusted.claims_raw if b.trusted is not None else own_claims)
        got = b.files.get(pack.SUMMARY)
        if got is not None and got != report_mod.post_summary(b.meta, docs, claims_now, b.digest, own_ids).encode():
            t.fail(pack.SUMMARY, "is not the five-line summary this verifier writes from the records and the digest")
        figs = _figures({**docs, "claims": claims_now})
        plots = sorted(figs)
        for n, d in figs.items():
            if n.startswith("claim_") and b.files.get(f"data/plots/{n}.json") != jsonio.dumps(d).encode():
                t.fail(f"data/plots/{n}.json", "is not the figure data of the claims this verifier evaluates")
        try:
            if b.binding is not None:
                sections = list(b.binding.report_sections(b.own_study.doc, docs))
                want = report_mod.render(b.meta, docs, claims_now, plots, sections, own_ids).encode("utf-8")
            else:
                want = _author_sections_report(
                    b, t, report, report_mod.render(b.meta, docs, claims_now, plots, [], own_ids).encode("utf-8"),
                    report_mod.render(b.meta, docs, claims_now, plots, [_SECTIONS_MARK], own_ids).encode("utf-8"))
        except Exception as exc:  # the renderer meets documents that passed every check before it
            t.fail("data/REPORT.md", f"the verifier cannot render a report from these records: "
                   f"{type(exc).__name__}: {exc}")
            want = None
        if want is not None and want != report:
            got_lines, want_lines = report.split(b"\n"), want.split(b"\n")
            n = next((i for i, (x, y) in enumerate(zip(got_lines, want_lines)) if x != y),
                     min(len(got_lines), len(want_lines)))
            a = (want_lines[n] if n < len(want_lines) else b"(end of file)").decode("utf-8", "replace")
            g = (got_lines[n] if n < len(got_lines) else b"(end of file)").decode("utf-8", "replace")
            col = next((i for i, (x, y) in enumerate(zip(a, g)) if x != y), min(len(a), len(g)))
            start = max(0, col - 24)
            t.fail("data/REPORT.md", f"REPORT.md differs from the report the verifier renders from the records "
                   f"(first at line {n + 1}, column {col + 1})",
                   expected=("..." if start else "") + a[start:start + 120],
                   found=("..." if start else "") + g[start:start + 120])
    t.details["recomputed"] = expected
    statements_check(b, t, docs, expected)


#: the most characters of a binding's report sections accepted from a study the verifier does not ship
MAX_AUTHOR_SECTIONS = 64 * 1024
#: where the study's own sections go in a report the verifier renders for a study it does not ship
_SECTIONS_MARK = "\x00study-sections\x00"
#: what the author's sections of REPORT.md may not hold: any '<', '>' or square bracket (HTML,
#: links, images, link reference definitions that would turn bracketed text of the verifier's
#: own sections into links), entities, code fences (which would swallow what follows), any
#: URL scheme, 'www.' and '@' (GFM autolinks); control and bidi characters are refused apart.
#: Tables, headings, emphasis and inline code are allowed.
_AUTHOR_ACTIVE = re.compile(r"[<>\[\]@]|&(#|[A-Za-z][A-Za-z0-9]*;)|```|~~~|[A-Za-z][A-Za-z0-9+.-]*:/|www\.",
                            re.IGNORECASE)


def _author_sections_report(b: Bundle, t: Tier, report: bytes, bare: bytes, framed: bytes) -> bytes:
    """For a study the verifier does not ship, its binding's report sections cannot be
    re-rendered without running the author's code: every other byte of REPORT.md is the
    verifier's rendering (``framed`` holds :data:`_SECTIONS_MARK` where the sections go),
    and the author's sections between them must be inert Markdown. ``bare``: the rendering
    without sections. Returns the bytes REPORT.md must equal (the bundle's own sections in
    place when they pass)."""
    head, _, tail = framed.partition(_SECTIONS_MARK.encode())
    if report == bare:
        return bare
    if not (report.startswith(head) and report.endswith(tail) and len(report) > len(head) + len(tail)):
        return bare
    try:
        middle = report[len(head):len(report) - len(tail)].decode("utf-8")
    except UnicodeDecodeError:
        t.fail("data/REPORT.md", "the study's own report sections (the author's) are not valid UTF-8")
        return report
    if len(middle) > MAX_AUTHOR_SECTIONS:
        t.fail("data/REPORT.md", f"the study's own report sections (the author's) hold {len(middle)} characters, more "
               f"than the {MAX_AUTHOR_SECTIONS} this verifier shows")
        return report
    for i, line in enumerate(middle.split("\n")):
        bad = next((c for c in line if unicodedata.category(c)[0] == "C" or unicodedata.category(c) in ("Zl", "Zp")),
                   None)
        m = _AUTHOR_ACTIVE.search(line)
        if bad is not None or m is not None or len(line) > MAX_SHOWN_CHARS:
            t.fail("data/REPORT.md", "the study's own report sections (the author's) hold "
                   + (f"a control character (U+{ord(bad):04X})" if bad is not None else
                      f"active Markdown/HTML ({m.group(0)!r})" if m is not None else "an overlong line"),
                   found=line[:120])
            return report
    b.partial.append("REPORT.md's study sections (after the timings) are the author's rendering, checked to be "
                     "inert, not re-derived")
    return report


# ---------------------------------------------------------------------------------- replay


def environment_diff(recorded: Mapping, here: Mapping) -> list[dict]:
    """Field by field: recorded vs here, with ``bits`` True for fields that can change bits."""
    rows = []
    rf, hf = recorded.get("fields", {}), here.get("fields", {})
    for k in sorted(set(rf) | set(hf)):
        if k.startswith("clocks_"):
            continue
        a = (rf.get(k) or {}).get("value")
        c = (hf.get(k) or {}).get("value")
        rows.append({"field": k, "recorded": a, "here": c, "same": a == c, "bits": k in fingerprint.BIT_RELEVANT})
    return rows


def _check_index(doc) -> dict[str, dict]:
    """Every check-like object of a document (see :func:`bundle.validate._walk_checks`) by a
    key made of its identity, not its position: a list element that carries a ``case`` or a
    ``name`` is keyed by it, so a replay at another profile (fewer seeds) lines up."""
    out: dict[str, dict] = {}
    stack = [("", doc)]
    while stack:
        key, node = stack.pop()
        if isinstance(node, dict):
            if "element_count" in node and "official" in node and "bit_identical_count" in node:
                out[key] = node
                continue
            for k, v in node.items():
                stack.append((f"{key}.{k}", v))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                ident = None
                if isinstance(v, dict):
                    if isinstance(v.get("case"), dict):
                        ident = json.dumps(v["case"], sort_keys=True, separators=(",", ":"))
                    elif isinstance(v.get("name"), str):
                        ident = v["name"]
                stack.append((f"{key}[{ident if ident is not None else i}]", v))
    return out


PTX_HEADER = re.compile(rb"^(// Cuda compilation tools, release [^\n]*|\.target [^\n]*)$", re.MULTILINE)


def ptx_toolchain(ptx: bytes | None) -> tuple[str, ...] | None:
    """The compiler release and target lines of a PTX listing (``// Cuda compilation tools,
    release 13.0, V13.0.88``, ``.target sm_90``): which NVRTC made it, for which
    architecture, read from the bytes themselves. None without a listing."""
    if not ptx:
        return None
    found = tuple(m.decode("ascii", "replace") for m in PTX_HEADER.findall(ptx[:4096]))
    return found or None


def _ratio_ci(block: Mapping, num: str, den: str, boot: Mapping) -> dict:
    return stats.bootstrap_median_ci(stats.paired_ratios(block, num, den), level=boot["level"],
                                     resamples=boot["resamples"], seed=boot["seed"])


#: timing arms that measure a harness overhead alone (the cold-L2 regime's flush), never a baseline
FLUSH_ONLY_ARMS = ("l2_flush_only",)
#: microseconds below which two medians of one arm are not told apart: twice the resolution of
#: CUDA events ("around 0.5 microseconds", CUDA Runtime API, cudaEventElapsedTime)
TIME_RESOLUTION_US = 1.0


def _median_us(block: Mapping, arm: str) -> float | None:
    """The median over rounds of ``arm``'s per-call time (``times_ms``), in microseconds."""
    vals = [r["times_ms"][arm] for r in block.get("rounds", []) if isinstance(r.get("times_ms", {}).get(arm),
                                                                              (int, float))]
    return 1000.0 * statistics.median(vals) if vals else None


def _below_resolution(q: Mapping, tol: float) -> bool:
    """Whether a ratio that moved moved only by what the timer cannot resolve: the numerator
    arm's median by at most :data:`TIME_RESOLUTION_US`, the base's by at most that or ``tol``
    of itself (so that the ratio's change is not the base's)."""
    (a0, a1), (b0, b1) = q["numerator_us"], q["base_us"]
    if None in (a0, a1, b0, b1):
        return False
    return abs(a1 - a0) <= TIME_RESOLUTION_US and abs(b1 - b0) <= max(TIME_RESOLUTION_US, tol * b0)


def compare_replay(recorded: Mapping[str, Mapping], replayed: Mapping[str, Mapping], *, same_profile: bool,
                   ratio_tolerance: float, boot: Mapping, toolchains: Mapping[str, tuple] | None = None,
                   check_documents: tuple[str, ...] | None = None) -> tuple[list[dict], dict]:
    """Compare recorded and replayed documents; returns ``(problems, details)``.

    Comparability comes from what the replay measured, not from the bundle's environment
    record: a variant whose replayed cubin is byte-identical to the bundled one ran the same
    binary, so its bit-identity counts and witness bits must match; a cubin that differs
    although the PTX headers name the same NVRTC release and target (``toolchains``: variant
    -> (recorded header, replayed header)) is a problem; one built by another NVRTC or for
    another architecture is reported as not comparable. Official/legacy verdicts and the
    witness's FTZ behaviour must match everywhere. Timing ratios (per-round paired ratios to
    the block's first arm, or in a cold-L2 block to the first arm after the flush-only one;
    median and bootstrap interval with ``boot``) fail when the two
    intervals, each widened by ``ratio_tolerance`` (relative), do not overlap. Recorded cases
    the replay did not reproduce are problems at the same profile and listed otherwise.
    ``check_documents``: the documents whose check records are compared case by case
    (default: every document but the run, environment, compile, timings and claims)."""
    problems: list[dict] = []
    details: dict = {"cases_compared": 0}
    cubins, identical = [], {}
    r_comp = {v["name"]: v for v in (recorded.get("compile") or {}).get("variants", [])}
    p_comp = {v["name"]: v for v in (replayed.get("compile") or {}).get("variants", [])}
    for name in sorted(set(r_comp) | set(p_comp)):
        r, v = r_comp.get(name), p_comp.get(name)
        if r is None or v is None:
            problems.append({"file": "compile", "path": name, "message": "variant compiled in only one of the runs",
                             "expected": r is not None, "found": v is not None})
            continue
        same = (r.get("cubin") or {}).get("sha256") == (v.get("cubin") or {}).get("sha256")
        identical[name] = same
        tc = (toolchains or {}).get(name)
        comparable = same or (tc is not None and tc[0] is not None and tc[0] == tc[1])
        cubins.append({"variant": name, "comparable": comparable, "same": same if comparable else None})
        if comparable and not same:
            problems.append({"file": "compile", "path": name,
                             "message": "cubin differs although the PTX headers name the same NVRTC release and target",
                             "expected": (r.get("cubin") or {}).get("sha256"), "found": (v.get("cubin") or {}).get("sha256")})
        rw = ((r.get("ftz_evidence") or {}).get("witness") or {}).get("flushes")
        pw = ((v.get("ftz_evidence") or {}).get("witness") or {}).get("flushes")
        if rw is not None and rw != pw:
            problems.append({"file": "compile", "path": name, "message": "witness FTZ behaviour differs",
                             "expected": rw, "found": pw})
    details["cubins"] = cubins
    details["bits_required_for"] = sorted(n for n, same in identical.items() if same)
    not_replayed = []
    for doc in (check_documents if check_documents is not None else
                tuple(n for n in recorded if n not in ("claims", "timings", "compile", "environment", "run"))):
        rc, pc = _check_index(recorded.get(doc) or {}), _check_index(replayed.get(doc) or {})
        for key in sorted(rc):
            if key not in pc:
                not_replayed.append(f"{doc}{key}")
                continue
            a, b = rc[key], pc[key]
            details["cases_compared"] += 1
            for pred in ("official", "legacy", "equal_nan_stress"):
                if isinstance(a.get(pred), dict) and (a[pred]).get("pass") != (b.get(pred) or {}).get("pass"):
                    problems.append({"file": doc, "path": f"{key}.{pred}.pass", "message": "verdict differs",
                                     "expected": a[pred].get("pass"), "found": (b.get(pred) or {}).get("pass")})
            variant = key.rsplit(".", 1)[-1]
            if identical.get(variant) and a.get("bit_identical_count") != b.get("bit_identical_count"):
                problems.append({"file": doc, "path": f"{key}.bit_identical_count",
                                 "message": "bit-identity count differs although the replay ran a byte-identical cubin",
                                 "expected": a.get("bit_identical_count"), "found": b.get("bit_identical_count")})
        details.setdefault("replayed_only", 0)
        details["replayed_only"] += len(set(pc) - set(rc))
    details["not_replayed"] = len(not_replayed)
    if not_replayed:
        if same_profile:
            for k in not_replayed[:50]:
                problems.append({"file": k.split("[", 1)[0].split(".", 1)[0], "path": k,
                                 "message": "a recorded case the replay did not reproduce"})
            if len(not_replayed) > 50:
                problems.append({"file": None, "path": None,
                                 "message": f"... and {len(not_replayed) - 50} more recorded cases not reproduced"})
        details["not_replayed_examples"] = not_replayed[:10]
    rw, pw = recorded.get("witness") or {}, replayed.get("witness") or {}
    for name, out in (rw.get("outputs") or {}).items():
        if name != "reference" and identical.get(name) and out != (pw.get("outputs") or {}).get(name):
            problems.append({"file": "witness", "path": f"$.outputs.{name}",
                             "message": "witness bits differ although the replay ran a byte-identical cubin",
                             "expected": out, "found": (pw.get("outputs") or {}).get(name)})
    ratios = []
    rb = {b["id"]: b for b in (recorded.get("timings") or {}).get("blocks", []) if b.get("rounds")}
    pb = {b["id"]: b for b in (replayed.get("timings") or {}).get("blocks", []) if b.get("rounds")}
    missing_blocks = sorted(set(rb) - set(pb))
    if missing_blocks and same_profile:
        for bid in missing_blocks:
            problems.append({"file": "timings", "path": bid, "message": "a recorded timing block the replay did not run"})
    details["timing_blocks_not_replayed"] = len(missing_blocks)
    tol = float(ratio_tolerance)
    for bid in sorted(set(rb) & set(pb)):
        r, b = rb[bid], pb[bid]
        arms = [a for a in r.get("arms", []) if a in b.get("arms", [])]
        # a cold-L2 block's first arm times the L2 flush alone: every other arm includes that
        # flush, so ratios to it measure the flush's noise; the base is the next arm (eager)
        if arms and arms[0] in FLUSH_ONLY_ARMS:
            arms = arms[1:]
        if len(arms) < 2:
            continue
        base = arms[0]
        for arm in arms[1:]:
            x, y = _ratio_ci(r, arm, base, boot), _ratio_ci(b, arm, base, boot)
            if x["median"] is None or y["median"] is None:
                continue
            lo_x = (x["ci_low"] if x["ci_low"] is not None else x["median"]) / (1 + tol)
            hi_x = (x["ci_high"] if x["ci_high"] is not None else x["median"]) * (1 + tol)
            lo_y = y["ci_low"] if y["ci_low"] is not None else y["median"]
            hi_y = y["ci_high"] if y["ci_high"] is not None else y["median"]
            ok = lo_y <= hi_x and hi_y >= lo_x
            flat = abs(y["median"] / x["median"] - 1) <= tol
            ratios.append({"block": bid, "ratio": f"{arm}/{base}", "recorded": x["median"],
                           "recorded_ci": [x["ci_low"], x["ci_high"]], "replayed": y["median"],
                           "replayed_ci": [y["ci_low"], y["ci_high"]], "within": ok, "within_flat_tolerance": flat,
                           "same_protocol": r.get("protocol") == b.get("protocol"), "mode": r.get("mode"),
                           "excused": None, "numerator_us": [_median_us(r, arm), _median_us(b, arm)],
                           "base_us": [_median_us(r, base), _median_us(b, base)],
                           "_x": x, "_y": y})
    by_key = {(q["block"], q["ratio"]): q for q in ratios}
    for q in ratios:  # first what no timer can resolve, then what the graph twin shows
        if not q["within"] and q["same_protocol"] and _below_resolution(q, tol):
            q["excused"] = (f"below the timer's resolution: the arm's median moved by "
                            f"{abs(q['numerator_us'][1] - q['numerator_us'][0]):.2f} us, the base's by "
                            f"{abs(q['base_us'][1] - q['base_us'][0]):.2f} us (CUDA events resolve about 0.5 us)")
    for q in ratios:
        if q["within"] or q["excused"]:
            continue
        if not q["same_protocol"]:
            q["excused"] = "the replay ran this block with another protocol (profile)"
        elif q["mode"] == "events" and ".events" in q["block"]:
            twin = by_key.get((q["block"].replace(".events", ".graph", 1), q["ratio"]))
            if twin is not None and (twin["within"] or (twin["excused"] or "").startswith("below the timer")):
                q["excused"] = ("host launch overhead: the CUDA-graph replay of the same arms, which removes it, "
                                "reproduces")
        if q["excused"] is None:
            x, y = q["_x"], q["_y"]
            problems.append({"file": "timings", "path": f"{q['block']} {q['ratio']}",
                             "message": f"timing ratio differs beyond both intervals and the {tol:.0%} tolerance",
                             "expected": [x["ci_low"], x["median"], x["ci_high"]],
                             "found": [y["ci_low"], y["median"], y["ci_high"]]})
    for q in ratios:
        q.pop("_x")
        q.pop("_y")
    details["timing_ratios"] = ratios
    details["timing_ratios_excused"] = sum(1 for q in ratios if q["excused"])
    details["timing_ratios_outside_tolerance"] = sum(1 for r in ratios if not r["within"])
    details["timing_ratios_outside_flat_tolerance"] = sum(1 for r in ratios if not r["within_flat_tolerance"])
    return problems, details


def _claim_changes(recorded: Mapping[str, str], replayed: Mapping[str, str], same_profile: bool) -> list[dict]:
    """Claims whose verdict changed on replay: any change at the recorded profile; at
    another profile (fewer rounds, fewer cases) only a flip between holds and fails."""
    out = []
    for cid in sorted(set(recorded) | set(replayed)):
        a, b = recorded.get(cid), replayed.get(cid)
        if a == b:
            continue
        if same_profile or {a, b} == {"holds", "fails"}:
            out.append({"file": "claims", "path": cid, "message": f"claim {cid}: recorded {a!r}, replayed {b!r}",
                        "expected": a, "found": b})
    return out


def _tier_replay(b: Bundle, t: Tier, *, profile: str | None, trust: bool, kernelbench: str | None,
                 ratio_tolerance: float, keep: Path | None, progress: Callable | None) -> None:
    """The replay tier. For a study this verifier ships, the model builds of the replay start
    in worker processes before torch is imported (``harness.run.early_prefetch``; the replay
    closes them, and so does this function where the replay never starts)."""
    from kbrepro.harness.run import early_prefetch
    box = [None]
    if b.trusted is not None and b.kernel_source_known:
        recorded = ((b.documents.get("run") or {}).get("study") or {}).get("profile") or "full"
        try:
            box[0] = early_prefetch(load_study(b.trusted.folder, profile or recorded), kernelbench)
        except ReproError:  # the replay below reports it
            box[0] = None
    try:
        _replay(b, t, profile=profile, trust=trust, kernelbench=kernelbench, ratio_tolerance=ratio_tolerance,
                keep=keep, progress=progress, prefetcher=box)
    finally:
        if box[0] is not None:
            box[0].close()


def _replay(b: Bundle, t: Tier, *, profile: str | None, trust: bool, kernelbench: str | None,
            ratio_tolerance: float, keep: Path | None, progress: Callable | None, prefetcher: list) -> None:
    from kbrepro.process import deferred_sigint

    with deferred_sigint():  # a Ctrl-C inside torch's C++ import would abort
        import torch

    if not torch.cuda.is_available():
        raise EnvironmentUnavailableError("replay needs a CUDA GPU and none is visible",
                                          "run verify_bundle.py --level static on this machine, or replay on a GPU")
    try:
        import cupy  # noqa: F401
    except Exception as exc:
        raise EnvironmentUnavailableError(f"replay needs CuPy: {exc}", "pip install 'kbrepro[cuda12]' or '[cuda13]'") from exc
    from kbrepro.harness.run import run_study
    run = b.documents.get("run") or {}
    recorded_profile = run.get("study", {}).get("profile") or "full"
    prof = profile or recorded_profile
    # the study replayed is the verifier's own folder (definition, kernels, binding); a bundle's
    # own study folder runs only with --trust-bundle-code
    work = None
    if b.trusted is not None and b.kernel_source_known:
        study_folder = b.trusted.folder
    elif trust:
        work = Path(tempfile.mkdtemp(prefix="kbrepro-study-"))
        for rel, data in b.study_files.items():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / rel).write_bytes(data)
        study_folder = work
        t.notes.append("replaying the bundle's own study folder, its binding and kernels (--trust-bundle-code)")
    else:
        t.fail(None, "replay refused: " + ("the bundle's study is not one this verifier ships" if b.trusted is None
               else "the compiled kernel source is not this verifier's own") + "; pass --trust-bundle-code to run "
               "the bundle's study folder (its Python binding and kernels execute on this machine)")
        return
    try:
        study = load_study(study_folder, prof)
        binding = study.binding()
    except ReproError as exc:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
        t.fail(None, f"replay of study {safe_text(b.meta.get('study', {}).get('name'))!r} at profile "
               f"{safe_text(prof)!r} refused: {exc.message}")
        return
    out = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="kbrepro-replay-"))
    try:
        pf, prefetcher[0] = (prefetcher[0] if study.folder == getattr(b.trusted, "folder", None) else None), None
        run_study(study, out, kernelbench=kernelbench, progress=progress, binding=binding, prefetcher=pf)
        names = (*OUR_DOCUMENTS, *study_documents(binding))
        replayed = {n: jsonio.read_json(out / f"{n}.json") for n in names if (out / f"{n}.json").is_file()}
        toolchains = {}
        for v in (replayed.get("compile") or {}).get("variants", []):
            rec = next((r for r in (b.documents.get("compile") or {}).get("variants", []) if r.get("name") == v["name"]), {})
            rp = (rec.get("ptx") or {}).get("file")
            pp = (v.get("ptx") or {}).get("file")
            toolchains[v["name"]] = (ptx_toolchain(b.files.get(f"data/{rp}") if rp else None),
                                     ptx_toolchain((out / pp).read_bytes() if pp and (out / pp).is_file() else None))
    finally:
        if not keep:
            shutil.rmtree(out, ignore_errors=True)
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
    same_profile = prof == recorded_profile
    judge = claims_mod.parse_spec(b.trusted.claims_raw) if b.trusted is not None else \
        claims_mod.parse_spec(b.files[f"data/{b.meta['claims']['file']}"])
    env_rows = environment_diff(b.documents.get("environment", {}), replayed["environment"])
    problems, details = compare_replay(b.documents, replayed, same_profile=same_profile,
                                       ratio_tolerance=ratio_tolerance, boot=judge["bootstrap"], toolchains=toolchains,
                                       check_documents=("correctness", *study_documents(binding)))
    replay_claims = claims_mod.evaluate(judge, replayed, source="replayed on this GPU")
    recorded_claims = {c["id"]: c["verdict"] for c in (b.documents.get("claims") or {}).get("claims", [])}
    problems += _claim_changes(recorded_claims, {c["id"]: c["verdict"] for c in replay_claims["claims"]}, same_profile)
    for p in problems:
        t.fail(p["file"], p["message"], path=p.get("path"), expected=p.get("expected"), found=p.get("found"))
    details["claims"] = [{"id": c["id"], "recorded": recorded_claims.get(c["id"]), "replayed": c["verdict"],
                          "sentence": c["sentence"]} for c in replay_claims["claims"]]
    details["environment"] = env_rows
    details["profile"] = prof
    details["recorded_profile"] = recorded_profile
    t.details.update(details)
    if not same_profile:
        t.notes.append(f"replayed at profile {prof!r}, recorded at {recorded_profile!r}: recorded cases and blocks the "
                       "replay does not run are listed, not failed; claims fail only on a holds/fails flip")
    if any(not r["same"] and r["bits"] for r in env_rows):
        t.notes.append("the bundle's environment record differs from this machine in fields that can change bits; "
                       "bit counts are required to match only where the replay compiled a byte-identical cubin")


# ---------------------------------------------------------------------------------- driver


def _guarded(fn: Callable, b: Bundle, t: Tier) -> None:
    """``fn(b, t)``, with a bound of a parser or evaluator hit (ReproError) or data of a shape
    no schema rule foresaw (TypeError, ValueError, KeyError, ...) made a named problem of the
    tier: the bundle is not what the packer writes (and a defect of ours shows here too,
    named, rather than as a traceback)."""
    try:
        fn(b, t)
    except ReproError as exc:
        t.fail(None, exc.message)
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, ArithmeticError, RecursionError) as exc:
        t.fail(None, f"the bundle's data broke this verifier's {fn.__name__}: {type(exc).__name__}: "
               f"{safe_text(str(exc), 160)}")


def _candidate_tiers(b: Bundle, tier: Callable, last: int, level: str, *, trust: bool, kernelbench: str | None,
                     progress: Callable | None, ratio_tolerance: float = 0.05, prior_failure: bool = False) -> int:
    """Tiers 3-6 of a KernelBench-candidate bundle (:mod:`kbrepro.bundle.verify_candidate`);
    returns the exit code (0, or 1 when a tier failed; PARTIAL is decided by ``b.partial``)."""
    from kbrepro.bundle import verify_candidate as vc

    failed = False
    for n, fn in ((3, vc.tier_documents), (4, vc.tier_provenance), (5, vc.tier_claims)):
        t = tier(n)
        if failed:
            t.status = "SKIP"
            t.notes.append("an earlier tier failed")
            continue
        t0 = time.perf_counter()
        _guarded(fn, b, t)
        t.seconds = time.perf_counter() - t0
        failed |= t.status == "FAIL"
    if last >= 6:
        t = tier(6)
        if _replay_runs(t, level, failed or prior_failure):  # (a failed signature: never replayed)
            t0 = time.perf_counter()
            vc.tier_replay(b, t, trust=trust, kernelbench=kernelbench, ratio_tolerance=ratio_tolerance,
                             progress=progress)
            t.seconds = time.perf_counter() - t0
            failed |= t.status == "FAIL"
    return 1 if failed else 0


def _replay_runs(t: Tier, level: str, failed: bool) -> bool:
    """Whether tier 6 runs: a GPU is present (at ``auto`` its absence skips) and no earlier
    tier failed (an untrusted bundle is never replayed); otherwise ``t`` is marked SKIP."""
    from kbrepro.process import deferred_sigint

    with deferred_sigint():  # a Ctrl-C inside torch's C++ import would abort
        import torch

    if not torch.cuda.is_available() and level == "auto":
        t.status = "SKIP"
        t.notes.append("no CUDA GPU here; replay skipped (--level replay on a GPU machine runs it)")
        return False
    if failed:
        t.status = "SKIP"
        t.notes.append("earlier tiers failed; an untrusted bundle is not replayed")
        return False
    return True


def verify_archive(path: Path, *, level: str = "auto", profile: str | None = None, trust: bool = False,
                   kernelbench: str | None = None, ratio_tolerance: float = 0.05, expect_digest: str | None = None,
                   keep_extracted: Path | None = None, keep_replay: Path | None = None,
                   progress: Callable | None = None, check_renderings: bool = False, public_key=None) -> Report:
    """Run the tiers up to ``level`` (fast, static, replay, auto) on ``path``. With
    ``check_renderings``, the renderings' PNGs are drawn again from their verified data and
    compared byte for byte (:func:`_rendered_again`; seconds, with matplotlib).
    ``public_key`` (:class:`bundle.attest.PublicKey`, ``--public-key``): the key a signed
    bundle must be signed with (a bundle that is not signed then fails); without it a
    signature is read and its statements checked, but not the signature itself.

    Returns a :class:`Report` whose ``exit_code`` follows DESIGN.md section 6. Raises
    UsageError for a bad level, EnvironmentUnavailableError when ``level == "replay"`` and
    no GPU is present.
    """
    if level not in LEVELS:
        raise UsageError(f"unknown level {level!r}", f"use one of {', '.join(LEVELS)}")
    rep = Report(archive=Path(path).name, level=level)
    last = LEVELS[level]

    def tier(n: int) -> Tier:
        t = Tier(n, TIER_NAMES[n - 1])
        rep.tiers.append(t)
        return t

    partial: list[str] = []

    def finish(code: int) -> Report:
        rep.partial = list(dict.fromkeys(partial))
        if code == 0 and rep.partial:
            code = EXIT_PARTIAL
        rep.exit_code = code
        rep.verdict = "PASS" if code == 0 else "PARTIAL" if code == EXIT_PARTIAL else "FAIL"
        return rep

    if level == "replay":
        from kbrepro.process import deferred_sigint

        with deferred_sigint():  # a Ctrl-C inside torch's C++ import would abort
            import torch

        if not torch.cuda.is_available():
            raise EnvironmentUnavailableError("replay needs a CUDA GPU and none is visible",
                                              "run verify_bundle.py --level static on this machine, or replay on a GPU")
    if not Path(path).is_file():
        raise UnreadableInputError(f"no archive at {path}", "check the path of the bundle (.tar or .tar.gz)")
    t = tier(1)
    t0 = time.perf_counter()
    try:
        contents = _tier_archive(Path(path), t)
    except UnreadableInputError as exc:
        t.fail(Path(path).name, exc.message + (f" ({exc.hint})" if exc.hint else ""))
        t.seconds = time.perf_counter() - t0
        return finish(3)
    t.seconds = time.perf_counter() - t0
    if t.status == "FAIL":
        return finish(3)
    rep.bundle_name = contents.top
    rep.files = contents.files
    t = tier(2)
    t0 = time.perf_counter()
    rep.digest = _tier_manifest(contents, t)
    vouched = t.status == "PASS"  # the payload is the one the manifests and the digest name
    rep.signature = _tier_attestation(contents, t, public_key) if rep.digest is not None else None
    if expect_digest and rep.digest != expect_digest.lower():
        t.fail("tagmanifest-sha256.txt", "bundle digest differs from the one you expected", expected=expect_digest,
               found=rep.digest)
        vouched = False
    t.seconds = time.perf_counter() - t0
    failed = t.status == "FAIL"
    if last <= 2:
        if not failed:
            t.notes.append("--level fast checks the archive and its manifests only: the documents, the claims, "
                           "REPORT.md, summary.txt and renderings/ are not checked (use --level static)")
        return finish(1 if failed else 0)
    if not vouched:
        # the payload is not what its manifests (and so the digest) name: later tiers would judge
        # bytes nobody vouched for
        for n in range(3, last + 1):
            sk = tier(n)
            sk.status = "SKIP"
            sk.notes.append("the manifest tier failed: the payload is not the one the digest names")
        return finish(1)
    tmp = Path(keep_extracted) if keep_extracted else Path(tempfile.mkdtemp(prefix="kbrepro-verify-"))
    try:
        root = arc.extract_checked(Path(path), tmp, contents)
        b = Bundle(name=contents.top or "", files=contents.files, root=root, digest=rep.digest or "", partial=partial,
                   attestation=rep.signature)
        if _bag_info(contents.files.get("bag-info.txt", b"")).get("Bundle-Format") == kinds.FORMAT:
            code = _candidate_tiers(b, tier, last, level, trust=trust, kernelbench=kernelbench, progress=progress,
                                    ratio_tolerance=ratio_tolerance, prior_failure=failed)
            return finish(1 if failed or code else 0)
        t = tier(3)
        t0 = time.perf_counter()
        _guarded(_tier_documents, b, t)
        t.seconds = time.perf_counter() - t0
        if t.details.get("unknown_version"):
            return finish(3)
        failed |= t.status == "FAIL"
        if t.status == "FAIL":
            for n in (4, 5):
                tier(n).status = "SKIP"
            if last >= 6:
                tier(6).status = "SKIP"
            return finish(1)
        for n, fn in ((4, _tier_provenance), (5, _tier_claims)):
            t = tier(n)
            t0 = time.perf_counter()
            _guarded(fn, b, t)
            if n == 5 and check_renderings and not failed and t.status != "FAIL":
                _guarded(_rendered_again, b, t)
            t.seconds = time.perf_counter() - t0
            failed |= t.status == "FAIL"
        if last >= 6:
            t = tier(6)
            if _replay_runs(t, level, failed):
                t0 = time.perf_counter()
                _tier_replay(b, t, profile=profile, trust=trust, kernelbench=kernelbench,
                             ratio_tolerance=ratio_tolerance, keep=keep_replay, progress=progress)
                t.seconds = time.perf_counter() - t0
                failed |= t.status == "FAIL"
        return finish(1 if failed else 0)
    finally:
        if not keep_extracted:
            shutil.rmtree(tmp, ignore_errors=True)
