"""Bag layout and deterministic archive.

A bundle is a BagIt bag (RFC 8493) inside a tar with one top-level folder::

    <name>/bagit.txt                 BagIt declaration
    <name>/bag-info.txt              metadata, with Payload-Oxum
    <name>/manifest-sha256.txt       sha256, two spaces, path: every payload file
    <name>/tagmanifest-sha256.txt    the same for every tag file, manifests included
    <name>/attestations.intoto.jsonl signed in-toto statements (signed bundles only; bundle.attest)
    <name>/data/...                  payload (from format 4 with data/ro-crate-metadata.json, bundle.crate)

The **bundle digest** is the sha256 of ``tagmanifest-sha256.txt``: it covers the payload
manifest, so it changes with any payload byte.

Determinism: members sorted by path, directories included, mtime ``SOURCE_DATE_EPOCH`` or
0, uid/gid 0, empty owner names, modes 0644 (files) and 0755 (folders), plain USTAR headers
(no PAX or GNU extension records, so names must fit USTAR's 100+155 byte fields), and for
``.tar.gz`` a gzip header with mtime 0 and no file name. Packing the same payload twice
gives the same bytes, whatever the umask or the order files were created in.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import os
import re
import tarfile
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from kbrepro.harness.jsonio import atomic_write_bytes
from kbrepro.errors import UsageError
from kbrepro.harness.fingerprint import product_version

FORMAT_NAME = "kbrepro-bundle"
#: the study bundle format this packer writes: 4 adds the RO-Crate metadata file to the payload
#: and, when signed, the attestation tag file; 5 gives in REPORT.md's timing tables the rounds
#: each block holds (``report.ROUNDS_HELD_SINCE``); 6 writes differences as a person does
#: ("2.0x slower", "1 comparison": ``report.readable``); 7 gives the ratios of a timing block
#: without an eager arm to its first arm (``report.RATIO_BASE_SINCE``); 8 writes an interval whose
#: two ends read the same as one value ("faster by 42 %", not "by 42 to 42 %"), and its claims
#: section explains the ratio convention only where a claim compares times (``TIDY_SINCE``)
FORMAT_VERSION = 8
#: every study bundle format the verifier reads (3: before RO-Crate and signing; the committed
#: examples are format 3, and ``make_bundle.py --bundle-format 3`` still writes it)
FORMAT_VERSIONS = (3, 4, 5, 6, 7, 8)
#: the first study bundle format whose REPORT.md and summary.txt use ``report.readable``'s words
READABLE_SINCE = 6
#: the first study bundle format whose report words are :func:`kbrepro.bundle.wording.readable`'s
#: level 2 (one value where an interval's two ends read the same)
TIDY_SINCE = 8
#: the suffix of the file beside an archive that holds its bundle digest (``x.tar.sha256-digest``)
DIGEST_SUFFIX = ".sha256-digest"
#: the first study format with an RO-Crate metadata file and optional signatures
CRATE_SINCE = 4
BAGIT_TXT = b"BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n"
TAG_FILES = ("bagit.txt", "bag-info.txt", "manifest-sha256.txt")
RENDERINGS = "renderings"
#: the signed attestations of a bundle (a tag file, listed in the tag manifest: the digest covers it)
ATTESTATIONS = "attestations.intoto.jsonl"
SUMMARY = "summary.txt"
SAFE_COMPONENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$")
MAX_MEMBERS = 10000


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_names(paths) -> None:
    """Refuse payload paths outside the safe set: each component must match
    ``[A-Za-z0-9][A-Za-z0-9._-]*`` (no ``..``, no absolute paths, no spaces, ASCII only), and
    no two paths may collide after Unicode NFC normalisation. Raises UsageError naming them."""
    seen: dict[str, str] = {}
    bad = []
    for p in paths:
        norm = unicodedata.normalize("NFC", p)
        if norm in seen and seen[norm] != p:
            raise UsageError(f"payload names {seen[norm]!r} and {p!r} collide after Unicode NFC normalisation",
                             "rename one of the files")
        seen[norm] = p
        parts = p.split("/")
        if p.startswith("/") or any(not SAFE_COMPONENT.match(c) or c in (".", "..") for c in parts):
            bad.append(p)
    if bad:
        raise UsageError("payload file names outside the safe set [A-Za-z0-9._-]: " + ", ".join(map(repr, bad[:10])),
                         "rename the files; bundles carry only plain relative names")


@dataclass(frozen=True)
class Bag:
    """A bag in memory: ``name`` (top folder), ``payload`` (path under ``data/`` -> bytes)
    and ``info`` (bag-info.txt fields, in order). :meth:`tag_files` renders the tag files."""

    name: str
    payload: Mapping[str, bytes]
    info: tuple[tuple[str, str], ...]
    #: the ``renderings/`` tag folder (file name -> bytes): figures drawn from payload data,
    #: listed in no manifest, so that the digest does not depend on the library that drew them
    renderings: Mapping[str, bytes] = field(default_factory=dict)
    #: ``summary.txt``: five lines for a forum post, naming the digest (so listed in no
    #: manifest; a verifier writes it again and compares)
    summary: bytes = b""
    #: ``attestations.intoto.jsonl``: the DSSE envelopes of a signed bundle (empty: unsigned)
    attestations: bytes = b""

    def manifest(self) -> bytes:
        lines = [f"{sha256_hex(self.payload[p])}  data/{p}\n" for p in sorted(self.payload)]
        return "".join(lines).encode("utf-8")

    def bag_info(self) -> bytes:
        octets = sum(len(b) for b in self.payload.values())
        fields = [*self.info, ("Payload-Oxum", f"{octets}.{len(self.payload)}")]
        return "".join(f"{k}: {v}\n" for k, v in fields).encode("utf-8")

    def tag_files(self) -> dict[str, bytes]:
        tags = {"bagit.txt": BAGIT_TXT, "bag-info.txt": self.bag_info(), "manifest-sha256.txt": self.manifest()}
        if self.attestations:
            tags[ATTESTATIONS] = self.attestations
        tags["tagmanifest-sha256.txt"] = "".join(f"{sha256_hex(tags[t])}  {t}\n" for t in sorted(tags)).encode()
        return tags

    def digest(self) -> str:
        """sha256 of tagmanifest-sha256.txt: the bundle's short id."""
        return sha256_hex(self.tag_files()["tagmanifest-sha256.txt"])

    def members(self) -> dict[str, bytes]:
        """Every file of the bag, path relative to the top folder -> bytes."""
        out = {f"data/{p}": b for p, b in self.payload.items()}
        out.update(self.tag_files())
        out.update({f"{RENDERINGS}/{p}": b for p, b in self.renderings.items()})
        if self.summary:
            out[SUMMARY] = self.summary
        return out


#: the bag-info.txt fields the packers write, in this order (the verifier requires exactly these)
BAG_INFO_KEYS = ("Bag-Software-Agent", "External-Identifier", "Bundle-Format", "Bundle-Format-Version", "Study",
                 "Source")


def bag_info(name: str, fmt: str, version: int, study: str, source: str) -> list[tuple[str, str]]:
    """The bag-info.txt fields of a bundle, in :data:`BAG_INFO_KEYS` order (Payload-Oxum is
    added by :class:`Bag`)."""
    return list(zip(BAG_INFO_KEYS, (f"kbrepro {product_version() or 'unknown'}", name, fmt, str(version), study,
                                    source)))


def make_bag(name: str, payload: Mapping[str, bytes], info: list[tuple[str, str]],
             renderings: Mapping[str, bytes] | None = None) -> Bag:
    """Build a :class:`Bag`; checks the bundle name and every payload and rendering path."""
    if not NAME_RE.match(name):
        raise UsageError(f"bundle name {name!r} is not allowed", "use letters, digits, '.', '_' and '-' (max 80)")
    check_names(list(payload))
    if len(payload) + 8 > MAX_MEMBERS:
        raise UsageError(f"{len(payload)} payload files exceed the limit of {MAX_MEMBERS}", "pack fewer files")
    check_names(list(renderings or {}))
    if any("/" in p for p in renderings or {}):
        raise UsageError("renderings are files of one folder", "report this as a bug")
    return Bag(name=name, payload=dict(payload), info=tuple(info), renderings=dict(renderings or {}))


def source_date_epoch() -> int:
    """``SOURCE_DATE_EPOCH`` if set to an integer, else 0 (reproducible-builds.org spec)."""
    v = os.environ.get("SOURCE_DATE_EPOCH", "")
    return int(v) if v.isdigit() else 0


def _tarinfo(name: str, size: int | None, mtime: int) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.mtime = mtime
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    if size is None:
        ti.type = tarfile.DIRTYPE
        ti.mode = 0o755
        ti.size = 0
    else:
        ti.type = tarfile.REGTYPE
        ti.mode = 0o644
        ti.size = size
    return ti


def tar_bytes(bag: Bag, *, gzip_compress: bool = False, mtime: int | None = None) -> bytes:
    """The archive bytes of ``bag`` (USTAR, deterministic; gzip with header mtime 0 if asked).
    Raises UsageError if a path does not fit a USTAR header."""
    mtime = source_date_epoch() if mtime is None else mtime
    files = {f"{bag.name}/{p}": b for p, b in bag.members().items()}
    dirs = {bag.name}
    for p in files:
        parts = p.split("/")
        for i in range(1, len(parts)):
            dirs.add("/".join(parts[:i]))
    entries = sorted([(d, None) for d in dirs] + [(p, b) for p, b in files.items()], key=lambda e: e[0])
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for path, data in entries:
            ti = _tarinfo(path + ("/" if data is None else ""), None if data is None else len(data), mtime)
            try:
                tf.addfile(ti, None if data is None else io.BytesIO(data))
            except ValueError as exc:
                raise UsageError(f"path too long for a plain tar header: {path}", "shorten the bundle or file name") from exc
    raw = buf.getvalue()
    if not gzip_compress:
        return raw
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=9) as gz:
        gz.write(raw)
    return out.getvalue()


def archive_bytes(bag: Bag, out: Path) -> bytes:
    """The archive of ``bag`` for the file name ``out``: gzip-compressed for ``.tar.gz``/``.tgz``,
    plain for ``.tar``. Raises UsageError for another suffix."""
    name = Path(out).name
    if name.endswith(".tar.gz") or name.endswith(".tgz"):
        return tar_bytes(bag, gzip_compress=True)
    if name.endswith(".tar"):
        return tar_bytes(bag)
    raise UsageError(f"archive name {name!r} must end in .tar or .tar.gz", "pass --out NAME.tar")


def write_archive(bag: Bag, out: Path) -> int:
    """Write ``bag`` to ``out`` (``.tar`` or ``.tar.gz``) atomically; returns the size in bytes.
    Raises UsageError for another suffix."""
    data = archive_bytes(bag, out)
    atomic_write_bytes(Path(out), data)
    return len(data)
