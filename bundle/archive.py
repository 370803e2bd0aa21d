"""Reading an untrusted bundle archive without extracting it first.

:func:`read_archive` parses the archive itself, 512-byte header by header, and accepts
exactly the format :func:`kbrepro.bundle.pack.tar_bytes` writes and nothing else:

- plain POSIX ustar headers (magic ``ustar\\0``, version ``00``) with a valid unsigned
  checksum, typeflag ``0`` (regular file) or ``5`` (folder) only: no PAX or GNU extension
  headers, no sparse members, links, devices or FIFOs, no old-GNU or v7 headers;
- numeric fields in the zero-padded octal form ``tarfile`` writes (no base-256), name and
  prefix fields NUL-terminated (or full) with only NULs after, the prefix joined per POSIX,
  an empty link name, modes 0644 (files) and 0755 (folders), uid/gid 0, empty owner names,
  zero data padding;
- members in the packer's order (sorted by path, every parent folder before its children),
  names relative, normalised, made of safe characters, under one top folder, unique (also
  after case folding), no file and folder of one name, nothing below a file;
- after the two zero end-of-archive blocks only zero bytes until the end of the file;
- for ``.tar.gz``: one gzip member whose header is the one ``gzip.GzipFile(filename="",
  mtime=0, compresslevel=9)`` writes, inflated in bounded chunks with its CRC32 and ISIZE
  checked, and nothing after it.

The reader does not use ``tarfile`` (so it behaves the same on every Python >= 3.10), reads
the archive once as a stream, counts sizes on bytes actually read, and keeps memory
proportional to the archive's content (bounded by the limits below). Regular members are
hashed (sha256) and kept in memory; nothing is written to disk.

:func:`extract_checked` then writes those already-hashed bytes (never the archive again)
into a fresh folder, creating every folder itself and opening every file with
``O_CREAT|O_EXCL|O_NOFOLLOW``, and re-hashes what it wrote.
"""
from __future__ import annotations

import hashlib
import os
import posixpath
import re
import stat
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from kbrepro.errors import UnreadableInputError
from kbrepro.model.problems import ARCHIVE, Problem

MAX_MEMBERS = 10000
MAX_MEMBER_BYTES = 128 * 1024 * 1024
MAX_TOTAL_BYTES = 256 * 1024 * 1024  # bundles are a few MB; bounds what a small .tar.gz may inflate to
#: problems kept per archive; the rest are counted in one final "... N more" problem
MAX_PROBLEMS = 200
#: characters of an archive-supplied string (a member name) shown in a message
MAX_SHOWN = 200
SAFE_NAME = re.compile(r"^[A-Za-z0-9._/-]+$")
#: one path component, as :func:`kbrepro.bundle.pack.check_names` allows it
SAFE_COMPONENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")

BLOCK = 512
RECORD = 20 * BLOCK  # tarfile pads the archive to a multiple of this
ZERO_BLOCK = bytes(BLOCK)
CHUNK = 1024 * 1024
ZERO_CHUNK = bytes(CHUNK)
#: a tar stream (the file, or the inflated gzip) never needs more than this: content,
#: a header and at most one block of padding per member, end blocks and record padding
MAX_TAR_BYTES = MAX_TOTAL_BYTES + 2 * BLOCK * (MAX_MEMBERS + 1) + 2 * RECORD
#: the archive file on disk, checked before reading (deflate can grow incompressible data)
MAX_FILE_BYTES = MAX_TAR_BYTES + MAX_TAR_BYTES // 64 + 65536
#: the 10-byte gzip header of ``gzip.GzipFile(filename="", mode="wb", mtime=0, compresslevel=9)``:
#: magic, deflate, no flags (no FNAME/FEXTRA/FCOMMENT/FHCRC), mtime 0, XFL 2 (best), OS 255
GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"

_OCT7 = re.compile(rb"[0-7]{7}\x00")
_OCT11 = re.compile(rb"[0-7]{11}\x00")
_CHKSUM = re.compile(rb"[0-7]{6}\x00 ")
_DEV_FIELDS = (b"0000000\x00" * 2, bytes(16))  # tarfile < 3.11.4 / 3.12 writes zeros, later NULs

#: typeflags the packer never writes, by what they are
_TYPE_NAMES = {
    b"\x00": "old-style regular file (typeflag NUL, not the packer's '0')",
    b"1": "hard link", b"2": "symbolic link", b"3": "character device", b"4": "block device",
    b"6": "FIFO", b"7": "contiguous file",
    b"x": "PAX extended header", b"g": "PAX global header", b"X": "old PAX/Solaris extended header",
    b"L": "GNU long-name header", b"K": "GNU long-link-name header", b"N": "old GNU long-name header",
    b"S": "GNU sparse member", b"D": "GNU dump-directory member", b"M": "GNU multi-volume continuation",
    b"V": "GNU volume label", b"A": "Solaris ACL header", b"E": "Solaris extended attribute header",
}


@dataclass
class ArchiveContents:
    """What the archive holds. ``files``: path relative to the top folder -> bytes;
    ``sha256``: same keys -> hex digest computed from the stream; ``dirs``: the folders'
    full member names (top folder included); ``problems``: every unsafe or malformed
    member, by name; ``members``: headers read; ``total_bytes``: member data bytes read."""

    top: str | None = None
    files: dict[str, bytes] = field(default_factory=dict)
    sha256: dict[str, str] = field(default_factory=dict)
    dirs: set[str] = field(default_factory=set)
    problems: list[Problem] = field(default_factory=list)
    members: int = 0
    total_bytes: int = 0
    compressed: bool = False
    dropped: int = 0  # problems past MAX_PROBLEMS, not kept


def show(s: str | bytes) -> str:
    """``s`` (from the archive) safe to print: control and non-ASCII characters escaped
    (``ascii()``-style), at most ``MAX_SHOWN`` characters."""
    if isinstance(s, (bytes, bytearray)):
        s = bytes(s).decode("utf-8", "surrogateescape")
    if not (s.isascii() and s.isprintable()) or "\\" in s:
        s = ascii(s)[1:-1]
    return s if len(s) <= MAX_SHOWN else s[:MAX_SHOWN] + f"...({len(s) - MAX_SHOWN} more characters)"


def _problem(out: ArchiveContents, name: str | bytes, message: str) -> None:
    if len(out.problems) >= MAX_PROBLEMS:
        out.dropped += 1
        return
    out.problems.append(Problem(ARCHIVE, None, message, file=show(name)))


def check_name(raw: str) -> str | None:
    """Why a member name (folders with their trailing '/') is unsafe, or None."""
    if not raw or "\x00" in raw:
        return "empty or NUL in name"
    if raw.startswith("/") or re.match(r"^[A-Za-z]:", raw) or "\\" in raw:
        return "absolute path or backslash"
    name = raw[:-1] if raw.endswith("/") else raw
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return "'..', '.' or empty path component"
    if posixpath.normpath(name) != name:
        return "name is not normalised"
    if not SAFE_NAME.match(name):
        return "characters outside [A-Za-z0-9._/-]"
    if not all(SAFE_COMPONENT.match(p) for p in parts):
        return "a path component does not start with a letter or digit, or is longer than 100 characters"
    if any(p.endswith(".") for p in parts):
        return "a path component ends in '.' (Windows strips it, so two names could extract to one file)"
    if any(_WINDOWS_RESERVED.match(p) for p in parts):
        return "a path component is a reserved device name on Windows (CON, PRN, AUX, NUL, COM1-9, LPT1-9)"
    return None


_WINDOWS_RESERVED = re.compile(r"^(CON|PRN|AUX|NUL|COM[0-9]|LPT[0-9])(\..*)?$", re.IGNORECASE)


class _Stop(Exception):
    """Reading cannot go on (the framing is lost or a limit is reached); ``message`` is the
    problem, ``name`` what it is about."""

    def __init__(self, name: str, message: str):
        super().__init__(message)
        self.name = name
        self.message = message


def _truncated(what: str) -> str:
    return f"the archive is corrupt or truncated: {what}"


# ------------------------------------------------------------------------------- streams


class _PlainStream:
    """The tar bytes of a plain ``.tar`` file."""

    def __init__(self, fh):
        self.fh = fh
        self.pos = 0

    def read(self, n: int) -> bytes:
        """Up to ``n`` bytes; fewer only at the end of the stream."""
        data = self.fh.read(n)
        self.pos += len(data)
        if self.pos > MAX_TAR_BYTES:
            raise _Stop("", f"the tar stream is longer than the limit of {MAX_TAR_BYTES} bytes")
        return data


class _GzipStream:
    """The tar bytes inside one gzip member, inflated in bounded chunks. The 10-byte header
    has already been read and checked."""

    def __init__(self, fh, archive: str):
        self.fh = fh
        self.archive = archive
        self.d = zlib.decompressobj(-zlib.MAX_WBITS)
        self.buf = b""  # inflated, not yet handed out from self.off on
        self.off = 0
        self.crc = 0
        self.inflated = 0

    def _inflate(self) -> bytes | None:
        """At most CHUNK more inflated bytes; None at the end of the deflate data."""
        while not self.d.eof:
            inp = self.d.unconsumed_tail
            if not inp:
                inp = self.fh.read(CHUNK // 4)
                if not inp:
                    raise _Stop(self.archive, _truncated("the gzip stream ends before its deflate data does"))
            try:
                out = self.d.decompress(inp, CHUNK)
            except zlib.error as exc:
                raise _Stop(self.archive, f"the gzip data is corrupt: {exc}") from None
            if not out:
                continue
            self.inflated += len(out)
            if self.inflated > MAX_TAR_BYTES:
                raise _Stop(self.archive, f"the gzip stream inflates past the limit of {MAX_TAR_BYTES} bytes "
                            "(a gzip bomb?); reading stopped there")
            self.crc = zlib.crc32(out, self.crc)
            return out
        return None

    def read(self, n: int) -> bytes:
        """Up to ``n`` bytes; fewer only at the end of the stream."""
        end = self.off + n
        if end <= len(self.buf):
            data = self.buf[self.off:end]
            self.off = end
            return data
        parts = [self.buf[self.off:]]
        have = len(parts[0])
        self.buf, self.off = b"", 0
        while have < n:
            out = self._inflate()
            if out is None:
                break
            need = n - have
            if len(out) > need:
                parts.append(out[:need])
                self.buf, self.off = out, need
                have = n
            else:
                parts.append(out)
                have += len(out)
        return b"".join(parts)

    def finish(self, out: ArchiveContents) -> None:
        """After the tar stream's end: the trailer (CRC32, ISIZE) and nothing after it."""
        if self.off < len(self.buf) or self._inflate() is not None:
            return  # the tar reader stopped before the end; it has said why
        tail = self.d.unused_data
        while len(tail) < 8:
            more = self.fh.read(8 - len(tail))
            if not more:
                _problem(out, self.archive, _truncated("the gzip stream ends without its CRC32/ISIZE trailer"))
                return
            tail += more
        crc, isize = int.from_bytes(tail[:4], "little"), int.from_bytes(tail[4:8], "little")
        if crc != self.crc:
            _problem(out, self.archive, f"gzip CRC32 mismatch: the trailer says {crc:08x}, the data give "
                     f"{self.crc:08x}")
        if isize != self.inflated & 0xFFFFFFFF:
            _problem(out, self.archive, f"gzip ISIZE mismatch: the trailer says {isize}, the data are "
                     f"{self.inflated} bytes")
        rest = tail[8:] + self.fh.read(CHUNK)
        if rest:
            more = self.fh.read(1) != b""
            what = (" (a second gzip member: the packer writes exactly one)" if rest[:2] == b"\x1f\x8b" else "")
            _problem(out, self.archive, f"{len(rest)}{'+' if more else ''} bytes of trailing data after the gzip "
                     f"member{what}")


# ------------------------------------------------------------------------------- headers


def _field_str(raw: bytes) -> tuple[bytes, bool]:
    """(text up to the first NUL, whether only NULs follow it)."""
    i = raw.find(b"\x00")
    if i < 0:
        return raw, True
    return raw[:i], raw.count(0, i) == len(raw) - i


def _magic_kind(hdr: bytes) -> str | None:
    """None for the packer's ustar magic, else what the header is."""
    magic = hdr[257:265]
    if magic == b"ustar\x0000":
        return None
    if magic == b"ustar  \x00":
        return "old-GNU tar header (magic 'ustar  ')"
    if magic.count(0) == 8:
        return "v7 tar header (no ustar magic)"
    if magic[:6] == b"ustar\x00":
        return f"ustar header of version {show(magic[6:8])!r} (the packer writes '00')"
    return f"unknown header magic {show(magic)!r}"


def _checksum_ok(hdr: bytes) -> bool:
    stored = hdr[148:156]
    if not _CHKSUM.fullmatch(stored):
        return False
    return int(stored[:6], 8) == sum(hdr) - sum(stored) + 8 * 32


class _Header:
    __slots__ = ("name", "isdir", "size", "problems")

    def __init__(self):
        self.name = ""      # the full name as GNU tar would read it (folders with their '/')
        self.isdir = False
        self.size = None    # None: the size field is unusable, the framing is lost
        self.problems: list[str] = []


def _number(raw: bytes, fieldname: str, h: _Header) -> int | None:
    pat = _OCT7 if len(raw) == 8 else _OCT11
    if pat.fullmatch(raw):
        return int(raw[:-1], 8)
    if raw[:1] and raw[0] & 0x80:
        h.problems.append(f"base-256 number in the {fieldname} field (a GNU extension); the packer writes octal")
    else:
        h.problems.append(f"{fieldname} field {show(raw)!r} is not in the packer's form "
                          f"({len(raw) - 1} octal digits and a NUL)")
    return None


def _parse_header(hdr: bytes) -> _Header:
    h = _Header()
    name_raw, name_ok = _field_str(hdr[0:100])
    prefix_raw, prefix_ok = _field_str(hdr[345:500])
    kind = _magic_kind(hdr)
    if kind is None:
        if prefix_raw:
            joined = prefix_raw + b"/" + name_raw
            if len(joined) <= 100:
                h.problems.append("the prefix field is used for a name that fits the name field "
                                  "(the packer splits only names longer than 100 bytes)")
        else:
            joined = name_raw
    else:
        joined = name_raw  # what GNU tar reads: it ignores the prefix field outside ustar magic
        h.problems.append(kind + (" whose prefix field (which GNU tar ignores there) is not empty"
                                  if hdr[345:500].count(0) != 155 else "")
                          + "; the packer writes POSIX ustar headers only")
    h.name = joined.decode("utf-8", "surrogateescape")
    if not name_ok or not prefix_ok:
        h.problems.append("bytes other than NUL after the NUL that ends the name or prefix field")
    size = _number(hdr[124:136], "size", h)
    mode = _number(hdr[100:108], "mode", h)
    uid = _number(hdr[108:116], "uid", h)
    gid = _number(hdr[116:124], "gid", h)
    _number(hdr[136:148], "mtime", h)
    h.size = size
    tf = hdr[156:157]
    link_raw, _ = _field_str(hdr[157:257])
    if tf == b"0":
        if h.name.endswith("/"):
            h.problems.append("a regular file whose name ends in '/'")
        want_mode = 0o644
    elif tf == b"5":
        h.isdir = True
        if not h.name.endswith("/"):
            h.problems.append("a folder whose name does not end in '/' (the packer writes 'name/')")
        if size:
            h.problems.append(f"a folder with size {size} (the packer writes 0)")
        want_mode = 0o755
    else:
        what = _TYPE_NAMES.get(tf, "member of an unknown type")
        target = f" -> {show(link_raw)}" if tf in (b"1", b"2") else ""
        h.problems.append(f"{what}{target} is not allowed (typeflag {show(tf)!r}); bundles hold regular files "
                          "and folders only")
        return h
    if hdr[157:257].count(0) != 100:
        h.problems.append(f"link name {show(link_raw)!r} set on a {'folder' if h.isdir else 'regular file'}")
    if mode is not None and mode != want_mode:
        h.problems.append(f"mode {mode:04o} (the packer writes {want_mode:04o} for "
                          f"{'folders' if h.isdir else 'files'})")
    if (uid, gid) != (0, 0) and uid is not None and gid is not None:
        h.problems.append(f"uid/gid {uid}/{gid} (the packer writes 0/0)")
    if hdr[265:329].count(0) != 64:
        h.problems.append(f"owner names {show(_field_str(hdr[265:297])[0])!r}/{show(_field_str(hdr[297:329])[0])!r} "
                          "(the packer writes empty ones)")
    if kind is None and hdr[329:345] not in _DEV_FIELDS:
        h.problems.append("device number fields set on a file or folder")
    if hdr[500:512].count(0) != 12:
        h.problems.append("non-zero bytes in the header's unused tail")
    return h


# -------------------------------------------------------------------------------- reader


class _Walk:
    """The packer's member rules, applied header by header."""

    def __init__(self, out: ArchiveContents):
        self.out = out
        self.kind: dict[str, bool] = {}      # name -> is a folder
        self.folded: dict[str, str] = {}     # casefold -> name
        self.prev: str | None = None

    def member(self, full: str, isdir: bool) -> str | None:
        """Why this (header-valid) member breaks the rules, or None."""
        why = check_name(full)
        if why:
            return f"unsafe member name: {why}"
        name = full[:-1] if isdir else full
        if name in self.kind:
            return ("duplicate member" if self.kind[name] == isdir
                    else "a file and a folder of the same name (duplicate member)")
        self.kind[name] = isdir
        other = self.folded.setdefault(name.casefold(), name)
        if other != name:
            return f"duplicate member after case folding: differs from {show(other)} only in letter case"
        top = name.split("/")[0]
        if self.out.top is None:
            self.out.top = top
        elif top != self.out.top:
            return f"outside the single top folder {self.out.top!r}"
        if "/" in name:
            parent = name.rsplit("/", 1)[0]
            p = self.kind.get(parent)
            if p is False:
                return f"a member below the file {show(parent)}"
            if p is None:
                return f"its folder {show(parent)} is not listed before it (the packer writes every parent first)"
        elif not isdir:
            return "a file in place of the top folder"
        prev, self.prev = self.prev, name
        if prev is not None and name < prev:
            return f"out of order: after {show(prev)}; the packer writes members sorted by name"
        return None


def _read_data(stream, size: int, name: str, out: ArchiveContents, keep: bool) -> bytes | None:
    """The member's data (if ``keep``) and its zero padding; limits counted on bytes read."""
    parts = []
    left = size
    got = 0
    while left:
        chunk = stream.read(min(left, CHUNK))
        got += len(chunk)
        if keep:
            out.total_bytes += len(chunk)
            if got > MAX_MEMBER_BYTES:
                raise _Stop(name, f"more than {MAX_MEMBER_BYTES} bytes: exceeds the per-file limit")
            if out.total_bytes > MAX_TOTAL_BYTES:
                raise _Stop(name, f"archive content exceeds {MAX_TOTAL_BYTES} bytes")
            parts.append(chunk)
        if len(chunk) < min(left, CHUNK):
            raise _Stop(name, _truncated(f"the member's header claims {size} bytes, the archive ends after {got}"))
        left -= len(chunk)
    pad = (-size) % BLOCK
    if pad:
        p = stream.read(pad)
        if len(p) < pad:
            raise _Stop(name, _truncated("the archive ends inside a member's padding"))
        if p.count(0) != pad:
            _problem(out, name, "non-zero padding bytes after the member's data")
    return b"".join(parts) if keep else None


def _after_end(stream, out: ArchiveContents, archive: str, offset: int) -> None:
    """The first zero block is read at ``offset``: a second one, then only zeros to the end."""
    second = stream.read(BLOCK)
    if len(second) < BLOCK:
        _problem(out, archive, _truncated("only one of the two end-of-archive blocks is there"))
        return
    pos = offset + 2 * BLOCK
    if second != ZERO_BLOCK:
        chunk = second
        pos -= BLOCK
    else:
        while True:
            chunk = stream.read(CHUNK)
            if not chunk:
                return
            if chunk != (ZERO_CHUNK if len(chunk) == CHUNK else bytes(len(chunk))):
                break
            pos += len(chunk)
    i = next(k for k, b in enumerate(chunk) if b)
    at = pos + i
    blk = (at // BLOCK) * BLOCK - pos
    what = ""
    if 0 <= blk and len(chunk) >= blk + BLOCK and _checksum_ok(chunk[blk:blk + BLOCK]):
        nm = _parse_header(chunk[blk:blk + BLOCK]).name
        what = f" (a hidden member header: {show(nm)})"
    _problem(out, archive, f"non-zero bytes at offset {at}, after the end-of-archive blocks{what}: GNU tar "
             "with --ignore-zeros would read them; the packer writes only zeros there")


def _walk_tar(stream, out: ArchiveContents, archive: str) -> None:
    walk = _Walk(out)
    offset = 0
    while True:
        hdr = stream.read(BLOCK)
        if len(hdr) < BLOCK:
            if offset == 0 and not hdr:
                raise UnreadableInputError(f"{archive} is an empty archive", "bundles are made by make_bundle.py")
            if offset == 0 and hdr.startswith(b"bundle digest (sha256 of "):
                raise UnreadableInputError(f"{archive} is the digest file beside a bundle, not the bundle",
                                           "verify the .tar beside it, and pass this file to --expect-digest")
            if offset == 0 and hdr[257:262] != b"ustar":  # shorter than one tar header
                raise UnreadableInputError(f"{archive} is not a tar archive: it is shorter than one tar header "
                                           f"({len(hdr)} bytes)", "bundles are .tar or .tar.gz files made by "
                                           "make_bundle.py")
            _problem(out, archive, _truncated("it ends without its end-of-archive blocks"
                                              + (" (inside a header block)" if hdr else "")))
            return
        if hdr == ZERO_BLOCK:
            if offset == 0:
                raise UnreadableInputError(f"{archive} is an empty archive", "bundles are made by make_bundle.py")
            _after_end(stream, out, archive, offset)
            return
        if not _checksum_ok(hdr):
            if offset == 0 and hdr[257:262] != b"ustar":
                raise UnreadableInputError(f"{archive} is not a tar archive: its first block is not a tar header",
                                           "bundles are .tar or .tar.gz files made by make_bundle.py")
            nm = _field_str(hdr[0:100])[0]
            raise _Stop(nm, f"header checksum is invalid at offset {offset}: GNU tar would skip this block and read "
                        "on, so the members after it cannot be trusted; reading stopped here")
        out.members += 1
        if out.members > MAX_MEMBERS:
            raise _Stop(archive, f"more than {MAX_MEMBERS} members")
        h = _parse_header(hdr)
        shown = h.name[:-1] if h.isdir and h.name.endswith("/") and len(h.name) > 1 else h.name
        for p in h.problems:
            _problem(out, shown, p)
        if h.size is None:
            raise _Stop(shown, f"the size field of the header at offset {offset} cannot be read, so the next "
                        "member cannot be found; reading stopped here")
        keep = False
        if not h.problems:
            why = walk.member(h.name, h.isdir)
            if why:
                _problem(out, shown, why)
            elif h.isdir:
                out.dirs.add(shown)
            else:
                keep = True
        if h.size > MAX_MEMBER_BYTES:
            raise _Stop(shown, f"the header claims {h.size} bytes: exceeds the per-file limit {MAX_MEMBER_BYTES}")
        data = _read_data(stream, h.size, shown, out, keep)
        if keep:
            rel = shown[len(out.top) + 1:]
            out.files[rel] = data
            out.sha256[rel] = hashlib.sha256(data).hexdigest()
        offset += BLOCK + h.size + (-h.size) % BLOCK
    # not reached


def _empty_folders(out: ArchiveContents) -> None:
    """The packer writes folders only as parents of files: an empty folder is not its output."""
    parents = {out.top}
    for rel in out.files:
        parts = rel.split("/")[:-1]
        parents.update(f"{out.top}/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1))
    for d in sorted(out.dirs - parents):
        _problem(out, d, "an empty folder (the packer writes folders only as parents of files)")


def read_archive(path: Path) -> ArchiveContents:
    """Read member headers and contents of ``path`` as a stream. Raises
    UnreadableInputError if the file cannot be read or is not a tar/tar.gz at all; every
    other problem is collected in ``problems`` (the caller decides: any problem is unsafe)."""
    path = Path(path)
    archive = path.name
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise UnreadableInputError(f"cannot read {path}: {exc.strerror}", "check the archive path") from exc
    try:
        with fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise UnreadableInputError(f"{archive} is not a regular file", "give the path of a .tar or .tar.gz")
            size = st.st_size
            if size > MAX_FILE_BYTES:
                raise UnreadableInputError(f"{archive} is {size} bytes, more than the limit of {MAX_FILE_BYTES}",
                                           "bundles are far smaller; do not trust this file")
            head = fh.read(10)
            out = ArchiveContents(compressed=head[:2] == b"\x1f\x8b")
            stream: _PlainStream | _GzipStream
            if out.compressed:
                if head != GZIP_HEADER:
                    _problem(out, archive, f"gzip header {show(head.hex())} is not the packer's "
                             f"({GZIP_HEADER.hex()}: no file name, extra field or comment, mtime 0); a bundle "
                             "gzipped after packing: gunzip it and verify the .tar (the bundle digest is the same)")
                    return out
                stream = _GzipStream(fh, archive)
            else:
                fh.seek(0)
                stream = _PlainStream(fh)
            try:
                _walk_tar(stream, out, archive)
                if isinstance(stream, _GzipStream):
                    stream.finish(out)
            except _Stop as stop:
                _problem(out, stop.name or archive, stop.message)
    except OSError as exc:
        raise UnreadableInputError(f"cannot read {path}: {exc.strerror or exc}", "check the archive path") from exc
    if out.top is not None and not out.problems:
        _empty_folders(out)
    if out.dropped:
        out.problems.append(Problem(ARCHIVE, None, f"... {out.dropped} more problems", file=archive))
    return out
