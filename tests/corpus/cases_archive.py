"""Corpus cases of the archive format: bytes the strict reader (bundle/archive.py) refuses.

Loaded by ``make_corpus.py`` (``EXTRA_MODULES``): ``NAMES`` lists the cases in build order
and ``build(g, kit)`` returns ``[(Case, archive bytes), ...]``. Every case fails in tier
``archive`` with exit code 3. Most are archives where GNU tar and a lax reader (Python's
``tarfile``) would see different members, so a verified ``REPORT.md`` could differ from
an extracted one; the others are departures from what ``bundle/pack.py`` writes.

The headers are built here byte by byte (:func:`header`, :func:`member`, :func:`finish`),
since ``tarfile`` refuses to write most of them; unmodified they reproduce the packer's
output (tests/test_archive_strict.py checks that).
"""
from __future__ import annotations

import gzip
import io
import zlib

from kbrepro.bundle import archive

BLOCK = 512
RECORD = 20 * BLOCK
GZ = ".tar.gz"  # file suffix of the gzip cases

NAMES = (
    "bad_checksum_hidden_member", "prefix_old_gnu_magic", "prefix_v7_magic", "member_after_end_blocks",
    "stray_bytes_after_end_blocks", "pax_header", "pax_headers_chained", "gnu_longname", "sparse_member",
    "casefold_duplicate", "size_base256", "size_claims_more_than_data", "members_out_of_order", "file_mode_0777",
    "uid_not_zero", "file_and_folder_same_name", "member_below_a_file", "name_with_escape_sequence",
    "gzip_trailing_garbage", "gzip_two_members", "gzip_bomb", "gzip_bad_crc", "gzip_header_with_file_name",
)


# ------------------------------------------------------------------------ raw tar writing


def _num(value: int, width: int) -> bytes:
    """A numeric field as tarfile writes it in ustar: zero-padded octal and a NUL."""
    return b"%0*o\x00" % (width - 1, value)


def split_name(name: bytes) -> tuple[bytes, bytes]:
    """(prefix, name) as tarfile's ustar writer splits a name longer than 100 bytes."""
    if len(name) <= 100:
        return b"", name
    parts = name.split(b"/")
    for i in range(1, len(parts)):
        prefix, rest = b"/".join(parts[:i]), b"/".join(parts[i:])
        if len(prefix) <= 155 and len(rest) <= 100:
            return prefix, rest
    raise ValueError(f"name too long for ustar: {name!r}")


def header(name: str | bytes, *, size: int = 0, typeflag: bytes = b"0", mode: int | None = None,
           mtime: int = 0, uid: int = 0, gid: int = 0, linkname: bytes = b"", magic: bytes = b"ustar\x0000",
           prefix: bytes | None = None, set_fields: dict[int, bytes] | None = None,
           bad_checksum: bool = False) -> bytes:
    """One 512-byte header block. Defaults are the packer's (mode 0644/0755 by typeflag);
    ``prefix`` None splits a long name as tarfile does; ``set_fields`` overwrites raw bytes
    at offsets (before the checksum is computed); ``bad_checksum`` stores checksum + 1."""
    nm = name.encode() if isinstance(name, str) else name
    if prefix is None:
        prefix, nm = split_name(nm)
    if mode is None:
        mode = 0o755 if typeflag == b"5" else 0o644
    b = bytearray(BLOCK)
    b[0:len(nm)] = nm
    b[100:108] = _num(mode, 8)
    b[108:116] = _num(uid, 8)
    b[116:124] = _num(gid, 8)
    b[124:136] = _num(size, 12)
    b[136:148] = _num(mtime, 12)
    b[156:157] = typeflag
    b[157:157 + len(linkname)] = linkname
    b[257:257 + len(magic)] = magic
    b[345:345 + len(prefix)] = prefix
    for off, raw in (set_fields or {}).items():
        b[off:off + len(raw)] = raw
    b[148:156] = b"        "
    chk = sum(b) + (1 if bad_checksum else 0)
    b[148:156] = b"%06o\x00 " % chk
    return bytes(b)


def pax_record(key: bytes, value: bytes) -> bytes:
    """One PAX record ``"LEN key=value\\n"``, LEN counting itself."""
    body = b" " + key + b"=" + value + b"\n"
    n = len(body) + 1
    while len(str(n)) + len(body) != n:
        n += 1
    return b"%d" % n + body


def pad(data: bytes) -> bytes:
    return data + bytes((-len(data)) % BLOCK)


def member(name: str, data: bytes | None, mtime: int = 0, **kw) -> bytes:
    """A member as the packer writes it: a folder if ``data`` is None (name gets its '/')."""
    if data is None:
        return header(name + "/", typeflag=b"5", mtime=mtime, **kw)
    return header(name, size=len(data), mtime=mtime, **kw) + pad(data)


def finish(body: bytes) -> bytes:
    """``body`` and the end: two zero blocks, then zeros to the 10240-byte record."""
    n = len(body) + 2 * BLOCK
    return body + bytes(2 * BLOCK + (-n) % RECORD)


def entries(top: str, files: dict[str, bytes]) -> list[tuple[str, bytes | None]]:
    """The packer's member list: every folder and file, sorted by path."""
    paths = {f"{top}/{p}": b for p, b in files.items()}
    dirs = {top}
    for p in paths:
        parts = p.split("/")
        dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))
    return sorted([(d, None) for d in dirs] + list(paths.items()), key=lambda e: e[0])


def tar(top: str, files: dict[str, bytes], mtime: int = 0, order=None, tweak=None) -> bytes:
    """The packer's archive of ``files``, members in ``order(list)`` if given; ``tweak(path,
    data)`` may return the bytes of a member to write instead (or None to keep it)."""
    ents = entries(top, files)
    if order is not None:
        ents = order(ents)
    body = []
    for path, data in ents:
        alt = tweak(path, data) if tweak else None
        body.append(alt if alt is not None else member(path, data, mtime))
    return finish(b"".join(body))


def body_end(raw: bytes) -> int:
    """Offset of the first end-of-archive block of a well-formed ustar archive."""
    off = 0
    while raw[off:off + BLOCK] != bytes(BLOCK):
        size = int(raw[off + 124:off + 135], 8)
        off += BLOCK + size + (-size) % BLOCK
    return off


def insert_at_end(raw: bytes, blob: bytes) -> bytes:
    """``blob`` placed after the last member, before the end-of-archive blocks."""
    return finish(raw[:body_end(raw)] + blob)


def gzip_packer(raw: bytes) -> bytes:
    """``raw`` compressed exactly as ``pack.tar_bytes(gzip_compress=True)`` does it."""
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=9) as gz:
        gz.write(raw)
    return out.getvalue()


_BOMB: dict = {}


def gzip_bomb(raw: bytes, inflated: int) -> bytes:
    """A packer-style gzip member of ``raw`` followed by zeros up to ``inflated`` bytes, with
    a valid CRC32 and ISIZE: about a thousandth of ``inflated`` on disk."""
    key = (hash(raw), inflated)
    if key in _BOMB:
        return _BOMB[key]
    mib = 1 << 20
    zero = bytes(mib)
    c = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    parts = [c.compress(raw), c.flush(zlib.Z_FULL_FLUSH)]
    first = c.compress(zero) + c.flush(zlib.Z_FULL_FLUSH)
    again = c.compress(zero) + c.flush(zlib.Z_FULL_FLUSH)
    again2 = c.compress(zero) + c.flush(zlib.Z_FULL_FLUSH)
    if again != again2:
        raise ValueError("zlib does not repeat a fully flushed block; cannot build the bomb cheaply")
    n = -(-(inflated - len(raw)) // mib)
    parts += [first, again * (n - 3), again, again2, c.flush()]
    crc = zlib.crc32(raw)
    for _ in range(n):
        crc = zlib.crc32(zero, crc)
    total = len(raw) + n * mib
    out = archive.GZIP_HEADER + b"".join(parts) + crc.to_bytes(4, "little") + (total & 0xFFFFFFFF).to_bytes(4, "little")
    _BOMB[key] = out
    return out


# --------------------------------------------------------------------------------- cases


def build(g, kit) -> list:
    top, f, t = g.top, g.files, g.mtime
    out = []

    def case(name, fragment, problem_file, description, suffix=".tar"):
        return kit.Case(name, f"{name}{suffix}", "archive", 3, "archive", fragment, problem_file, description)

    report = f"{top}/data/REPORT.md"
    evil = b"# REPORT\n\nEvery claim holds.\n"
    base = tar(top, f, t)
    if base != g.raw:
        raise ValueError("cases_archive: the raw writer does not reproduce the good bundle; adapt cases_archive.py")

    # 1. a header with a bad checksum, then a member only GNU tar (which skips the bad block) sees
    bad = header(report, size=len(evil), mtime=t, bad_checksum=True)
    hidden = member(f"{top}/data/zz-hidden.md", evil, t)
    out.append((case("bad_checksum_hidden_member", "header checksum is invalid", report,
                     "after the last member: a header block for data/REPORT.md with its checksum off by one, "
                     "its data, then a valid member data/zz-hidden.md (GNU tar skips the bad block and extracts "
                     "what follows; Python's tarfile stops there silently)"),
                insert_at_end(g.raw, bad + pad(evil) + hidden)))
    # 2./3. the prefix field under old-GNU and v7 magic: GNU tar ignores it there
    for name, magic, frag, label in (("prefix_old_gnu_magic", b"ustar  \x00", "old-GNU tar header", "old-GNU"),
                                     ("prefix_v7_magic", bytes(8), "v7 tar header", "v7")):
        blob = header(b"REPORT.md", size=len(evil), mtime=t, magic=magic,
                      prefix=f"{top}/data".encode()) + pad(evil)
        out.append((case(name, frag, "REPORT.md",
                         f"an extra member with {label} magic, name field REPORT.md and prefix field <top>/data "
                         "(a reader joining the prefix sees <top>/data/REPORT.md, GNU tar a top-level REPORT.md)"),
                    insert_at_end(g.raw, blob)))
    # 4./5. bytes after the end-of-archive blocks
    out.append((case("member_after_end_blocks", "after the end-of-archive blocks", "member_after_end_blocks.tar",
                     "the good archive followed by a whole member <top>/data/REPORT.md and its own end blocks "
                     "(read by GNU tar --ignore-zeros, ignored by tarfile)"),
                g.raw + finish(member(report, evil, t))))
    out.append((case("stray_bytes_after_end_blocks", "after the end-of-archive blocks",
                     "stray_bytes_after_end_blocks.tar", "the good archive followed by 6 stray bytes"),
                g.raw + b"stray\n"))
    # 6.-9. extension headers and sparse members
    pax = pax_record(b"path", report.encode() + b"-pax-name")
    pax_name = f"{top}/PaxHeaders.0/REPORT.md"
    out.append((case("pax_header", "PAX extended header", pax_name,
                     "a PAX 'x' header (path=<top>/data/REPORT.md-pax-name) before an extra member"),
                insert_at_end(g.raw, header(pax_name, size=len(pax), typeflag=b"x", mtime=t) + pad(pax)
                              + member(f"{top}/data/zz-extra.md", evil, t))))
    size_rec = pax_record(b"size", b"%d" % len(evil))
    chained = (header(pax_name, size=len(pax), typeflag=b"x", mtime=t) + pad(pax)
               + header(pax_name + "2", size=len(size_rec), typeflag=b"x", mtime=t) + pad(size_rec)
               + member(f"{top}/data/zz-extra.md", evil, t))
    out.append((case("pax_headers_chained", "PAX extended header", pax_name + "2",
                     "two PAX 'x' headers in a row (path=, then size=) before an extra member"),
                insert_at_end(g.raw, chained)))
    long_name = (report + "/" + "x" * 120).encode() + b"\x00"
    out.append((case("gnu_longname", "GNU long-name header", "././@LongLink",
                     "a GNU 'L' long-name header (a 130+ byte name) before an extra member"),
                insert_at_end(g.raw, header("././@LongLink", size=len(long_name), typeflag=b"L", mtime=t)
                              + pad(long_name) + member(f"{top}/data/zz-extra.md", evil, t))))
    out.append((case("sparse_member", "GNU sparse member", f"{top}/data/zz-sparse.bin",
                     "a GNU 'S' sparse member"),
                insert_at_end(g.raw, header(f"{top}/data/zz-sparse.bin", size=BLOCK, typeflag=b"S", mtime=t)
                              + bytes(BLOCK))))
    # 10. names that collide on a case-insensitive file system
    out.append((case("casefold_duplicate", "only in letter case", f"{top}/data/report.md",
                     "data/report.md beside data/REPORT.md (one file on a case-insensitive file system)"),
                tar(top, {**f, "data/report.md": evil}, t)))
    # 11./12. size fields
    bagit = f"{top}/bagit.txt"

    def b256(path, data):
        if path != bagit:
            return None
        return header(path, size=len(data), mtime=t,
                      set_fields={124: b"\x80" + bytes(7) + len(data).to_bytes(4, "big")}) + pad(data)

    out.append((case("size_base256", "base-256 number in the size field", bagit,
                     "bagit.txt's size written in GNU base-256 form (same value)"), tar(top, f, t, tweak=b256)))
    last = entries(top, f)[-1][0]
    claim = 100000

    def overclaim(path, data):
        return header(path, size=claim, mtime=t) + pad(data) if path == last else None

    out.append((case("size_claims_more_than_data", f"header claims {claim} bytes", last,
                     f"the last member's size field says {claim} bytes, more than the rest of the archive"),
                tar(top, f, t, tweak=overclaim)))
    # 13. order
    info = f"{top}/bag-info.txt"

    def swap(ents):
        i = [p for p, _ in ents].index(info)
        ents[i], ents[i + 1] = ents[i + 1], ents[i]
        return ents

    out.append((case("members_out_of_order", "out of order", info,
                     "bag-info.txt written after bagit.txt (the packer sorts: bag-info.txt first)"),
                tar(top, f, t, order=swap)))
    # 14./15. metadata the packer never writes
    out.append((case("file_mode_0777", "mode 0777", report, "data/REPORT.md with mode 0777"),
                tar(top, f, t, tweak=lambda p, d: member(p, d, t, mode=0o777) if p == report else None)))
    out.append((case("uid_not_zero", "uid/gid 1000/0", report, "data/REPORT.md owned by uid 1000"),
                tar(top, f, t, tweak=lambda p, d: member(p, d, t, uid=1000) if p == report else None)))
    # 16./17. name clashes between files and folders
    out.append((case("file_and_folder_same_name", "a file and a folder of the same name", report,
                     "a folder <top>/data/REPORT.md/ right after the file data/REPORT.md"),
                tar(top, f, t, tweak=lambda p, d: member(p, d, t) + member(p, None, t) if p == report else None)))
    out.append((case("member_below_a_file", "a member below the file", f"{report}/x.md",
                     "a member data/REPORT.md/x.md right after the file data/REPORT.md"),
                tar(top, f, t, tweak=lambda p, d: member(p, d, t) + member(p + "/x.md", evil, t)
                    if p == report else None)))
    # 18. a terminal escape sequence in a name: printed escaped
    esc = f"{top}/data/\x1b[2J\x1b[1;32mREPORT.md"
    out.append((case("name_with_escape_sequence", "unsafe member name", archive.show(esc),
                     "an extra member whose name holds ANSI escape sequences (clear screen, green)"),
                insert_at_end(g.raw, member(esc, evil, t))))
    # 19.-23. gzip
    gz = gzip_packer(g.raw)
    out.append((case("gzip_trailing_garbage", "trailing data after the gzip member", f"gzip_trailing_garbage{GZ}",
                     "the packer's .tar.gz followed by 16 bytes of text", GZ), gz + b"trailing garbage"))
    out.append((case("gzip_two_members", "a second gzip member", f"gzip_two_members{GZ}",
                     "the packer's .tar.gz followed by a second gzip member holding a tar with REPORT.md", GZ),
                gz + gzip_packer(finish(member(report, evil, t)))))
    out.append((case("gzip_bomb", "inflates past the limit", f"gzip_bomb{GZ}",
                     "a ~1 MB .tar.gz: the good archive then zeros, inflating past the reader's tar stream "
                     "limit (valid CRC32 and ISIZE)", GZ),
                gzip_bomb(g.raw, archive.MAX_TAR_BYTES + (16 << 20))))
    crc = int.from_bytes(gz[-8:-4], "little") ^ 1
    out.append((case("gzip_bad_crc", "gzip CRC32 mismatch", f"gzip_bad_crc{GZ}",
                     "the packer's .tar.gz with the lowest bit of its CRC32 flipped", GZ),
                gz[:-8] + crc.to_bytes(4, "little") + gz[-4:]))
    named = io.BytesIO()
    with gzip.GzipFile(filename="bundle.tar", mode="wb", fileobj=named, mtime=0, compresslevel=9) as z:
        z.write(g.raw)
    out.append((case("gzip_header_with_file_name", "is not the packer's", f"gzip_header_with_file_name{GZ}",
                     "the good archive gzipped with a file name in the gzip header (FNAME)", GZ), named.getvalue()))
    return out
