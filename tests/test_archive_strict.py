"""The strict archive reader (bundle/archive.py): it accepts exactly what bundle/pack.py
writes and nothing else, without tarfile, and what it reads is what GNU tar extracts.

Archives are built byte by byte with the raw writer of tests/corpus/cases_archive.py
(``header``, ``member``, ``finish``, ``tar``), which reproduces the packer's output and can
also write what tarfile refuses to.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import os
import random
import shutil
import stat
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from corpus import cases_archive as ca
from kbrepro.bundle import archive, extract, pack
from kbrepro.errors import UnreadableInputError

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.tar"))
TOP = "demo"
FILES = {"bag-info.txt": b"Bundle-Format: kbrepro-bundle\n", "bagit.txt": pack.BAGIT_TXT,
         "data/REPORT.md": b"# report\n", "data/results/a.json": b'{"a": 1}\n'}
EVIL = b"# forged\n"


def _bag(payload=None, name="demo-bundle"):
    payload = payload or {"results/a.json": b'{"a": 1}\n', "binaries/x.cubin": bytes(range(256)) * 3,
                          "REPORT.md": b"# r\n"}
    return pack.make_bag(name, payload, [("Bundle-Format", pack.FORMAT_NAME), ("Bundle-Format-Version", str(pack.FORMAT_VERSION))])


def _read(tmp_path, data: bytes, name="a.tar") -> archive.ArchiveContents:
    p = tmp_path / name
    p.write_bytes(data)
    return archive.read_archive(p)


def _msgs(c) -> list[str]:
    return [p.message for p in c.problems]


def _has(c, fragment, file=None) -> bool:
    return any(fragment in p.message and (file is None or p.file == file) for p in c.problems)


def _good(**kw) -> bytes:
    return ca.tar(TOP, FILES, **kw)


def _with(tweaks: dict) -> bytes:
    """The good archive with members (by full path) written as ``tweaks[path](path, data)``."""
    return ca.tar(TOP, FILES, tweak=lambda p, d: tweaks[p](p, d) if p in tweaks else None)


# ------------------------------------------------------------------------ the packer's output


def test_raw_writer_reproduces_the_packer():
    bag = _bag()
    packed = pack.tar_bytes(bag)
    dev = packed[329:345]  # NULs on Python >= 3.11.4/3.12, "0000000\0" twice before
    ours = ca.tar(bag.name, bag.members(), tweak=lambda p, d: ca.member(p, d, set_fields={329: dev}))
    assert ours == packed


@pytest.mark.parametrize("gz", [False, True])
def test_packer_output_is_accepted(tmp_path, gz, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1764551405")
    long_dir = "d" * 60
    payload = {f"{long_dir}/{'f' * 60}.json": b"{}\n", f"{long_dir}/sub/{'g' * 99}": b"x" * 1000,
               "REPORT.md": b"# r\n", "empty.txt": b""}
    bag = _bag(payload, name="b" * 40)
    data = pack.tar_bytes(bag, gzip_compress=gz)
    # the long names really use the ustar prefix field
    raw = gzip.decompress(data) if gz else data
    assert any(raw[off + 345] != 0 for off in range(0, len(raw) - 1024, 512)
               if raw[off + 257:off + 263] == b"ustar\x00")
    c = _read(tmp_path, data, "x.tar.gz" if gz else "x.tar")
    assert c.problems == []
    assert c.compressed is gz
    assert c.top == bag.name
    assert c.files == bag.members()
    assert c.sha256 == {k: hashlib.sha256(v).hexdigest() for k, v in bag.members().items()}
    assert f"{bag.name}/data/{long_dir}/sub" in c.dirs and bag.name in c.dirs
    assert c.total_bytes == sum(map(len, bag.members().values()))
    assert c.members == len(c.files) + len(c.dirs)


def test_write_archive_tar_gz_is_accepted(tmp_path):
    out = tmp_path / "b.tar.gz"
    pack.write_archive(_bag(), out)
    c = archive.read_archive(out)
    assert c.problems == [] and c.compressed and c.files == _bag().members()


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_committed_examples_are_accepted(path):
    c = archive.read_archive(path)
    assert c.problems == []
    assert "tagmanifest-sha256.txt" in c.files and "data/REPORT.md" in c.files


def test_reader_does_not_need_tarfile(tmp_path):
    """Read and extract with ``import tarfile`` made impossible: no Python-version dependence
    on tarfile's filters."""
    arc = tmp_path / "b.tar"
    pack.write_archive(_bag(), arc)
    script = ("import sys; sys.modules['tarfile'] = None\n"
              "from pathlib import Path\n"
              "from kbrepro.bundle import archive, extract\n"
              "c = archive.read_archive(Path(sys.argv[1]))\n"
              "assert c.problems == [], c.problems\n"
              "root = extract.extract_checked(Path(sys.argv[1]), Path(sys.argv[2]), c)\n"
              "print(len(c.files), (root / 'data/REPORT.md').read_bytes() == c.files['data/REPORT.md'])\n")
    p = subprocess.run([sys.executable, "-c", script, str(arc), str(tmp_path / "x")], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == [str(len(_bag().members())), "True"]


def test_any_valid_octal_mtime_is_accepted(tmp_path):
    for mtime in (0, 1764551405, 0o77777777777):
        c = _read(tmp_path, ca.tar(TOP, FILES, mtime=mtime))
        assert c.problems == [], mtime


def test_name_of_exactly_100_and_prefix_of_exactly_155_bytes(tmp_path):
    top = "t" * 60
    dirpath = f"{top}/" + "p" * 94  # 155 bytes: fills the prefix field (no NUL)
    leaf = "n" * 100                # fills the name field (no NUL)
    files = {f"{dirpath[len(top) + 1:]}/{leaf}": b"x", "bagit.txt": b"b"}
    data = ca.tar(top, files)
    off = [i for i in range(0, len(data), 512) if data[i:i + 100] == leaf.encode()]
    assert off and data[off[0] + 345:off[0] + 500] == dirpath.encode()
    c = _read(tmp_path, data)
    assert c.problems == [] and c.files[f"{dirpath[len(top) + 1:]}/{leaf}"] == b"x"


# ---------------------------------------------------------------------------------- headers


def test_bad_checksum_stops_and_hides_nothing(tmp_path):
    data = ca.insert_at_end(_good(), ca.header(f"{TOP}/data/x.md", size=len(EVIL), bad_checksum=True)
                            + ca.pad(EVIL) + ca.member(f"{TOP}/data/zz.md", EVIL))
    c = _read(tmp_path, data)
    assert _has(c, "header checksum is invalid", f"{TOP}/data/x.md")
    assert "data/zz.md" not in c.files


def test_checksum_must_be_unsigned_and_in_tarfiles_form(tmp_path):
    blk = bytearray(ca.header(f"{TOP}/data/zz\xff.md".encode("latin-1"), size=0))
    signed = sum(b - 256 if b > 127 else b for b in blk[:148] + b" " * 8 + blk[156:])
    blk[148:156] = b"%06o\x00 " % (signed & 0o777777)
    c = _read(tmp_path, ca.insert_at_end(_good(), bytes(blk)))
    assert _has(c, "header checksum is invalid")
    # the right value, but written as 7 digits and a NUL (GNU tar's form): not the packer's
    blk = bytearray(ca.header(f"{TOP}/data/zz.md"))
    value = int(blk[148:154], 8)
    blk[148:156] = b"%07o\x00" % value
    c = _read(tmp_path, ca.insert_at_end(_good(), bytes(blk)))
    assert _has(c, "header checksum is invalid")


def test_not_a_tar_empty_and_not_a_file(tmp_path):
    with pytest.raises(UnreadableInputError, match="is not a tar archive"):
        _read(tmp_path, random.Random(1).randbytes(4096))
    with pytest.raises(UnreadableInputError, match="empty archive"):
        _read(tmp_path, b"")
    with pytest.raises(UnreadableInputError, match="empty archive"):
        _read(tmp_path, bytes(10240))
    with pytest.raises(UnreadableInputError, match="cannot read"):
        archive.read_archive(tmp_path / "missing.tar")
    with pytest.raises(UnreadableInputError, match="cannot read"):
        archive.read_archive(tmp_path)  # a folder
    if Path("/dev/null").exists():
        with pytest.raises(UnreadableInputError, match="not a regular file"):
            archive.read_archive(Path("/dev/null"))


@pytest.mark.parametrize("magic,fragment", [
    (b"ustar  \x00", "old-GNU tar header"), (bytes(8), "v7 tar header"),
    (b"ustar\x00 \x00", "ustar header of version"), (b"ustaR\x0000", "unknown header magic")])
def test_only_posix_ustar_magic(tmp_path, magic, fragment):
    blob = ca.header(b"REPORT.md", size=len(EVIL), magic=magic, prefix=f"{TOP}/data".encode()) + ca.pad(EVIL)
    c = _read(tmp_path, ca.insert_at_end(_good(), blob))
    assert _has(c, fragment)
    if magic in (b"ustar  \x00", bytes(8)):  # named as GNU tar reads it: the prefix ignored
        assert _has(c, "prefix field (which GNU tar ignores there) is not empty", "REPORT.md")


TYPES = {b"x": "PAX extended header", b"g": "PAX global header", b"L": "GNU long-name header",
         b"K": "GNU long-link-name header", b"S": "GNU sparse member", b"1": "hard link -> target",
         b"2": "symbolic link -> target", b"3": "character device", b"4": "block device", b"6": "FIFO",
         b"7": "contiguous file", b"\x00": "typeflag NUL", b"D": "GNU dump-directory", b"M": "multi-volume",
         b"V": "volume label", b"N": "old GNU long-name", b"X": "old PAX", b"A": "Solaris ACL",
         b"E": "Solaris extended attribute", b"Z": "unknown type", b"\xff": "unknown type"}


@pytest.mark.parametrize("tf", list(TYPES), ids=lambda t: repr(t))
def test_only_file_and_folder_typeflags(tmp_path, tf):
    blob = ca.header(f"{TOP}/data/zz", size=512, typeflag=tf, linkname=b"target") + bytes(512)
    blob += ca.member(f"{TOP}/zzz", EVIL)
    c = _read(tmp_path, ca.insert_at_end(_good(), blob))
    assert _has(c, TYPES[tf], f"{TOP}/data/zz")
    assert _has(c, "is not allowed (typeflag")
    assert "data/zz" not in c.files
    # reading went on past the member's data: the next member was seen (and is fine)
    assert c.files.get("zzz") == EVIL


@pytest.mark.parametrize("offset,raw,fragment", [
    (124, b"\x80" + bytes(7) + (9).to_bytes(4, "big"), "base-256 number in the size field"),
    (108, b"\x80" + bytes(6) + b"\x01", "base-256 number in the uid field"),
    (124, b"00000000011 ", "size field"),
    (124, b" 0000000011\x00", "size field"),
    (100, b"000644 \x00", "mode field"),
    (100, b"0000644 ", "mode field"),
    (136, b"0000000008\x00\x00", "mtime field"),
    (116, b"00000000", "gid field"),
])
def test_numeric_fields_in_the_packers_octal_form(tmp_path, offset, raw, fragment):
    rep = f"{TOP}/data/REPORT.md"
    data = _with({rep: lambda p, d: ca.header(p, size=len(d), set_fields={offset: raw}) + ca.pad(d)})
    c = _read(tmp_path, data)
    assert _has(c, fragment, rep)
    assert "data/REPORT.md" not in c.files
    if offset == 124:  # the framing is lost: reading stops
        assert _has(c, "cannot be read, so the next member cannot be found", rep)


def test_name_and_prefix_fields(tmp_path):
    rep = f"{TOP}/data/REPORT.md"
    junk_name = _with({rep: lambda p, d: ca.header(p, size=len(d), set_fields={60: b"junk"}) + ca.pad(d)})
    c = _read(tmp_path, junk_name)
    assert _has(c, "bytes other than NUL after the NUL", rep)
    junk_prefix = _with({rep: lambda p, d: ca.header(b"REPORT.md", size=len(d), prefix=f"{TOP}/data".encode(),
                                                     set_fields={345 + 100: b"junk"}) + ca.pad(d)})
    c = _read(tmp_path, junk_prefix)
    assert _has(c, "bytes other than NUL after the NUL")
    # a prefix for a short name: tarfile never splits names of 100 bytes or less
    short = _with({rep: lambda p, d: ca.header(b"REPORT.md", size=len(d), prefix=f"{TOP}/data".encode()) + ca.pad(d)})
    c = _read(tmp_path, short)
    assert _has(c, "the prefix field is used for a name that fits", rep)


def test_prefix_is_joined_per_posix(tmp_path):
    top = "t" * 70
    rel = "data/" + "q" * 40 + "/r.json"
    data = ca.tar(top, {rel: b"{}", "bagit.txt": b"b"})
    c = _read(tmp_path, data)
    assert c.problems == [] and c.files[rel] == b"{}"
    # the same member with the prefix split elsewhere (older tarfile: longest prefix) is read the same
    full = f"{top}/{rel}".encode()
    alt = ca.tar(top, {rel: b"{}", "bagit.txt": b"b"},
                 tweak=lambda p, d: (ca.header(b"r.json", size=2, prefix=full[:-len(b"/r.json")]) + ca.pad(d))
                 if p == full.decode() else None)
    assert alt != data
    c = _read(tmp_path, alt)
    assert c.problems == [] and c.files[rel] == b"{}"


@pytest.mark.parametrize("kw,fragment", [
    ({"mode": 0o755}, "mode 0755 (the packer writes 0644 for files)"),
    ({"mode": 0o4644}, "mode 4644"),
    ({"uid": 1}, "uid/gid 1/0"),
    ({"gid": 1000}, "uid/gid 0/1000"),
    ({"linkname": b"elsewhere"}, "link name 'elsewhere' set on a regular file"),
    ({"set_fields": {265: b"root"}}, "owner names 'root'/''"),
    ({"set_fields": {297: b"wheel"}}, "owner names ''/'wheel'"),
    ({"set_fields": {329: b"0000001\x00"}}, "device number fields"),
    ({"set_fields": {505: b"\x01"}}, "header's unused tail"),
])
def test_file_metadata_is_the_packers(tmp_path, kw, fragment):
    rep = f"{TOP}/data/REPORT.md"
    c = _read(tmp_path, _with({rep: lambda p, d: ca.member(p, d, **kw)}))
    assert _has(c, fragment, rep), _msgs(c)
    assert "data/REPORT.md" not in c.files


def test_device_fields_of_both_python_generations_are_accepted(tmp_path):
    old = ca.tar(TOP, FILES, tweak=lambda p, d: ca.member(p, d, set_fields={329: b"0000000\x00" * 2}))
    assert old != _good()
    assert _read(tmp_path, old).problems == []


def test_folder_metadata(tmp_path):
    d = f"{TOP}/data"
    c = _read(tmp_path, _with({d: lambda p, _: ca.header(p + "/", typeflag=b"5", mode=0o644)}))
    assert _has(c, "mode 0644 (the packer writes 0755 for folders)", d)
    c = _read(tmp_path, _with({d: lambda p, _: ca.header(p, typeflag=b"5")}))
    assert _has(c, "a folder whose name does not end in '/'")
    c = _read(tmp_path, _with({d: lambda p, _: ca.header(p + "/", typeflag=b"5", size=512) + bytes(512)}))
    assert _has(c, "a folder with size 512", d)
    rep = f"{TOP}/data/REPORT.md"
    c = _read(tmp_path, _with({rep: lambda p, dd: ca.header(p + "/", size=len(dd)) + ca.pad(dd)}))
    assert _has(c, "a regular file whose name ends in '/'")


def test_data_padding_must_be_zero(tmp_path):
    rep = f"{TOP}/data/REPORT.md"
    c = _read(tmp_path, _with({rep: lambda p, d: ca.header(p, size=len(d)) + d + b"\x01" * (512 - len(d))}))
    assert _has(c, "non-zero padding bytes", rep)


# ------------------------------------------------------------------------------------ names


@pytest.mark.parametrize("name,fragment", [
    ("../escape.json", "'..', '.' or empty path component"), ("/abs/x.json", "absolute path"),
    (f"{TOP}/data\\x.json", "absolute path or backslash"), (f"{TOP}/data/a b.json", "characters outside"),
    (f"{TOP}/data/./x.json", "'..', '.' or empty"), (f"{TOP}/data//x.json", "empty path component"),
    (f"{TOP}/data/-x.json", "does not start with a letter or digit"),
    (f"{TOP}/data/.hidden", "does not start with a letter or digit"),
    (f"{TOP}/data/caf\u00e9.json", "characters outside"), ("C:/x.json", "absolute path"),
])
def test_unsafe_names(tmp_path, name, fragment):
    c = _read(tmp_path, ca.insert_at_end(_good(), ca.member(name, EVIL)))
    assert any(m.startswith("unsafe member name: ") and fragment in m for m in _msgs(c)), _msgs(c)
    assert len(c.files) == len(FILES)


def test_names_from_the_archive_are_printed_escaped_and_cut(tmp_path):
    nasty = f"{TOP}/data/\x1b]0;pwned\x07\x1b[2J" + "\u202e" + "z" * 30
    c = _read(tmp_path, ca.insert_at_end(_good(), ca.member(nasty, EVIL)))
    assert c.problems
    for p in c.problems:
        assert p.file.isascii() and p.file.isprintable() and p.message.isprintable()
    assert any(p.file == f"{TOP}/data/\\x1b]0;pwned\\x07\\x1b[2J\\u202e" + "z" * 30 for p in c.problems)
    assert len(archive.show("\x1b" * 1000)) < 260
    assert archive.show(b"ok/name.txt") == "ok/name.txt"


def test_member_order_and_parents(tmp_path):
    def swap(a, b):
        def order(ents):
            names = [p for p, _ in ents]
            i, j = names.index(a), names.index(b)
            ents[i], ents[j] = ents[j], ents[i]
            return ents
        return order

    c = _read(tmp_path, ca.tar(TOP, FILES, order=swap(f"{TOP}/bag-info.txt", f"{TOP}/bagit.txt")))
    assert _has(c, "out of order: after demo/bagit.txt", f"{TOP}/bag-info.txt")
    # a file before its folder
    c = _read(tmp_path, ca.tar(TOP, FILES, order=swap(f"{TOP}/data", f"{TOP}/data/REPORT.md")))
    assert _has(c, "its folder demo/data is not listed before it", f"{TOP}/data/REPORT.md")
    # a folder left out
    c = _read(tmp_path, ca.tar(TOP, FILES, order=lambda e: [x for x in e if x[0] != f"{TOP}/data/results"]))
    assert _has(c, "its folder demo/data/results is not listed", f"{TOP}/data/results/a.json")
    # the top folder left out
    c = _read(tmp_path, ca.tar(TOP, FILES, order=lambda e: e[1:]))
    assert _has(c, "its folder demo is not listed")


def test_duplicates_casefold_file_and_folder_below_a_file(tmp_path):
    rep = f"{TOP}/data/REPORT.md"
    c = _read(tmp_path, _with({rep: lambda p, d: ca.member(p, d) + ca.member(p, EVIL)}))
    assert _has(c, "duplicate member", rep) and c.files["data/REPORT.md"] == FILES["data/REPORT.md"]
    c = _read(tmp_path, ca.tar(TOP, {**FILES, "data/report.md": EVIL}))
    assert _has(c, "differs from demo/data/REPORT.md only in letter case", f"{TOP}/data/report.md")
    c = _read(tmp_path, ca.tar(TOP, {**FILES, "Data/x.md": EVIL}))
    assert _has(c, "only in letter case", f"{TOP}/data")  # 'Data' sorts first: 'data' is the second
    c = _read(tmp_path, _with({rep: lambda p, d: ca.member(p, d) + ca.member(p, None)}))
    assert _has(c, "a file and a folder of the same name", rep)
    c = _read(tmp_path, _with({rep: lambda p, d: ca.member(p, d) + ca.member(p + "/x.md", EVIL)}))
    assert _has(c, "a member below the file demo/data/REPORT.md", rep + "/x.md")


def test_one_top_folder_no_top_level_file_no_empty_folder(tmp_path):
    c = _read(tmp_path, ca.finish(ca.member(TOP, None) + ca.member(f"{TOP}/a.txt", b"a")
                                  + ca.member("other", None) + ca.member("other/b.txt", b"b")))
    assert _has(c, "outside the single top folder 'demo'", "other")
    c = _read(tmp_path, ca.finish(ca.member("loose.txt", b"a")))
    assert _has(c, "a file in place of the top folder", "loose.txt")
    last = f"{TOP}/data/results/a.json"
    c = _read(tmp_path, ca.tar(TOP, FILES, tweak=lambda p, d: ca.member(p, d) + ca.member(f"{TOP}/data/results/z", None)
                               if p == last else None))
    assert _msgs(c) == ["an empty folder (the packer writes folders only as parents of files)"]
    assert c.problems[0].file == f"{TOP}/data/results/z"


# ---------------------------------------------------------------------------- end of archive


def test_end_of_archive(tmp_path):
    good = _good()
    end = ca.body_end(good)
    assert _read(tmp_path, good).problems == []
    assert _read(tmp_path, good + bytes(10240)).problems == []  # more zeros: still only zeros
    for cut, fragment in ((end, "ends without its end-of-archive blocks"),
                          (end + 512, "only one of the two end-of-archive blocks"),
                          (end - 512 + 100, "corrupt or truncated"),
                          (100 + 512, "inside a header block")):
        c = _read(tmp_path, good[:cut])
        assert _has(c, fragment), (cut, _msgs(c))
        assert _has(c, "corrupt or truncated")
    # cut inside a member's data: the member is not kept
    rep_off = good.index(f"{TOP}/data/REPORT.md".encode())
    c = _read(tmp_path, good[:rep_off + 512 + 3])
    assert _has(c, "the member's header claims 9 bytes, the archive ends after 3") and "data/REPORT.md" not in c.files
    c = _read(tmp_path, good + ca.finish(ca.member(f"{TOP}/data/REPORT.md", EVIL)))
    assert _has(c, "after the end-of-archive blocks (a hidden member header: demo/data/REPORT.md)")
    c = _read(tmp_path, good + b"x")
    assert _has(c, f"non-zero bytes at offset {len(good)}, after the end-of-archive blocks")
    c = _read(tmp_path, good[:end + 512] + b"\x01" + good[end + 513:])
    assert _has(c, f"non-zero bytes at offset {end + 512}")


# ------------------------------------------------------------------------------------- gzip


def test_gzip_variants(tmp_path):
    raw = _good()
    gz = ca.gzip_packer(raw)
    assert gz[:10] == archive.GZIP_HEADER
    assert _read(tmp_path, gz, "a.tar.gz").problems == []
    c = _read(tmp_path, gz + b"junk", "a.tar.gz")
    assert _msgs(c) == ["4 bytes of trailing data after the gzip member"]
    c = _read(tmp_path, gz + gzip.compress(b"x"), "a.tar.gz")
    assert _has(c, "a second gzip member")
    bad_crc = gz[:-8] + bytes([gz[-8] ^ 1]) + gz[-7:]
    assert _has(_read(tmp_path, bad_crc, "a.tar.gz"), "gzip CRC32 mismatch")
    bad_isize = gz[:-4] + (len(raw) + 1).to_bytes(4, "little")
    assert _has(_read(tmp_path, bad_isize, "a.tar.gz"), "gzip ISIZE mismatch")
    assert _has(_read(tmp_path, gz[:-4], "a.tar.gz"), "without its CRC32/ISIZE trailer")
    assert _has(_read(tmp_path, gz[: len(gz) // 2], "a.tar.gz"), "corrupt or truncated")
    corrupt = gz[:10] + b"\xff" * 16 + gz[26:]
    assert _has(_read(tmp_path, corrupt, "a.tar.gz"), "the gzip data is corrupt")
    for head, label in ((gzip.compress(raw, mtime=0)[:10], "gzip.compress"),
                        (archive.GZIP_HEADER[:4] + b"\x01\x00\x00\x00" + archive.GZIP_HEADER[8:], "mtime"),
                        (archive.GZIP_HEADER[:8] + b"\x00\xff", "xfl")):
        if head == archive.GZIP_HEADER:
            continue
        c = _read(tmp_path, head + gz[10:], "a.tar.gz")
        assert _has(c, "is not the packer's"), label
    named = io.BytesIO()
    with gzip.GzipFile(filename="x.tar", mode="wb", fileobj=named, mtime=0, compresslevel=9) as z:
        z.write(raw)
    assert _has(_read(tmp_path, named.getvalue(), "a.tar.gz"), "is not the packer's")


def test_gzip_bomb_stops_at_the_limit_in_bounded_memory(tmp_path, monkeypatch):
    monkeypatch.setattr(archive, "MAX_TAR_BYTES", 8 << 20)
    bomb = ca.gzip_bomb(_good(), 64 << 20)
    assert len(bomb) < 100_000
    tracemalloc.start()
    try:
        c = _read(tmp_path, bomb, "bomb.tar.gz")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert _has(c, f"inflates past the limit of {8 << 20} bytes")
    assert peak < 6 << 20, peak


def test_corpus_bomb_is_small_on_disk_and_claims_more_than_the_limit():
    bomb = ca.gzip_bomb(_good(), archive.MAX_TAR_BYTES + (16 << 20))
    assert len(bomb) < 2_000_000
    assert int.from_bytes(bomb[-4:], "little") > archive.MAX_TAR_BYTES  # ISIZE: < 4 GiB, no wrap


# ----------------------------------------------------------------------------------- limits


def test_limits(tmp_path, monkeypatch):
    good = _good()
    monkeypatch.setattr(archive, "MAX_MEMBERS", 4)
    assert _has(_read(tmp_path, good), "more than 4 members")
    monkeypatch.undo()
    monkeypatch.setattr(archive, "MAX_MEMBER_BYTES", 8)
    c = _read(tmp_path, good)
    assert _has(c, "exceeds the per-file limit", f"{TOP}/bag-info.txt")
    monkeypatch.undo()
    monkeypatch.setattr(archive, "MAX_TOTAL_BYTES", 40)
    assert _has(_read(tmp_path, good), "archive content exceeds 40 bytes")
    monkeypatch.undo()
    monkeypatch.setattr(archive, "MAX_FILE_BYTES", len(good) - 1)
    with pytest.raises(UnreadableInputError, match=f"more than the limit of {len(good) - 1}"):
        _read(tmp_path, good)


def test_sizes_are_counted_on_bytes_read_not_claims(tmp_path):
    """A header claiming 8 GiB in a 10 KiB file: no allocation of the claim, a truncation."""
    blob = ca.header(f"{TOP}/zzz", size=archive.MAX_MEMBER_BYTES)
    tracemalloc.start()
    try:
        c = _read(tmp_path, ca.insert_at_end(_good(), blob))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert _has(c, f"the member's header claims {archive.MAX_MEMBER_BYTES} bytes, the archive ends after")
    assert c.total_bytes < 20000 and peak < 4 << 20
    c = _read(tmp_path, ca.insert_at_end(_good(), ca.header(f"{TOP}/zzz", size=0o77777777777)))
    assert _has(c, "exceeds the per-file limit", f"{TOP}/zzz")


def test_problem_count_is_capped(tmp_path, monkeypatch):
    monkeypatch.setattr(archive, "MAX_PROBLEMS", 5)
    blob = b"".join(ca.member(f"../x{i}", b"") for i in range(12))
    c = _read(tmp_path, ca.insert_at_end(_good(), blob))
    assert len(c.problems) == 6
    assert c.problems[-1].message == "... 7 more problems"


# ------------------------------------------------------------------------------- extraction


def test_extract_checked_writes_the_hashed_bytes(tmp_path):
    arc = tmp_path / "b.tar"
    pack.write_archive(_bag(), arc)
    c = archive.read_archive(arc)
    old = os.umask(0o077)
    try:
        root = extract.extract_checked(arc, tmp_path / "x", c)
    finally:
        os.umask(old)
    assert root == tmp_path / "x" / "demo-bundle"
    written = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert written == _bag().members()
    for p in [root, *root.rglob("*")]:
        mode = stat.S_IMODE(p.lstat().st_mode)
        assert mode == (0o755 if p.is_dir() else 0o644), p
    assert sorted(x.name for x in (tmp_path / "x").iterdir()) == ["demo-bundle"]


def test_extract_checked_refuses(tmp_path):
    arc = tmp_path / "b.tar"
    pack.write_archive(_bag(), arc)
    c = archive.read_archive(arc)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "f").write_text("x")
    with pytest.raises(UnreadableInputError, match="not empty"):
        extract.extract_checked(arc, busy, c)
    bad = archive.read_archive(arc)
    bad.files["data/REPORT.md"] = b"changed"
    with pytest.raises(UnreadableInputError, match="changed in memory"):
        extract.extract_checked(arc, tmp_path / "y", bad)
    esc = archive.read_archive(arc)
    esc.files["../../escaped.txt"] = b"x"
    esc.sha256["../../escaped.txt"] = hashlib.sha256(b"x").hexdigest()
    with pytest.raises(UnreadableInputError, match="unsafe name"):
        extract.extract_checked(arc, tmp_path / "z" / "d", esc)
    assert not (tmp_path / "escaped.txt").exists() and not (tmp_path / "z" / "escaped.txt").exists()
    probs = archive.read_archive(arc)
    probs.problems.append({"file": "x", "path": None, "message": "m"})
    with pytest.raises(UnreadableInputError, match="did not pass"):
        extract.extract_checked(arc, tmp_path / "w", probs)


def test_extract_checked_does_not_follow_a_planted_symlink(tmp_path, monkeypatch):
    """A symlink appearing where a file is about to be created is not followed (O_NOFOLLOW
    with O_EXCL): extraction fails and the target stays untouched."""
    arc = tmp_path / "b.tar"
    pack.write_archive(_bag(), arc)
    c = archive.read_archive(arc)
    target = tmp_path / "target.txt"
    target.write_bytes(b"untouched")
    real_mkdir = os.mkdir

    def mkdir(path, mode=0o777, *, dir_fd=None):
        real_mkdir(path, mode, dir_fd=dir_fd)
        if path == "data":  # plant <root>/data/REPORT.md -> target
            os.symlink(target, "data/REPORT.md", dir_fd=dir_fd)

    monkeypatch.setattr(os, "mkdir", mkdir)
    with pytest.raises(UnreadableInputError, match="extraction refused"):
        extract.extract_checked(arc, tmp_path / "x", c)
    assert target.read_bytes() == b"untouched"


# ---------------------------------------------------------------------- GNU tar cross-check

GNU_TAR = shutil.which("tar")
if GNU_TAR:
    _v = subprocess.run([GNU_TAR, "--version"], capture_output=True, text=True).stdout
    GNU_TAR = GNU_TAR if "GNU tar" in _v else None
needs_tar = pytest.mark.skipif(GNU_TAR is None, reason="GNU tar is not on PATH")


def _gnu_view(path: Path, tmp: Path) -> tuple[list[str], dict[str, bytes]]:
    """What GNU tar lists and extracts from ``path``."""
    names = subprocess.run([GNU_TAR, "-tf", str(path)], capture_output=True, text=True, check=True).stdout.splitlines()
    out = tmp / "gnu"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    subprocess.run([GNU_TAR, "-xf", str(path), "-C", str(out)], capture_output=True, check=True)
    files = {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    return names, files


def _our_view(c: archive.ArchiveContents) -> tuple[list[str], dict[str, bytes]]:
    names = sorted([d + "/" for d in c.dirs] + [f"{c.top}/{rel}" for rel in c.files])
    return names, {f"{c.top}/{rel}": b for rel, b in c.files.items()}


def _assert_same_as_gnu_tar(path: Path, tmp: Path) -> None:
    c = archive.read_archive(path)
    assert c.problems == []
    names, files = _gnu_view(path, tmp)
    ours_names, ours_files = _our_view(c)
    assert sorted(names) == ours_names and names == sorted(names, key=lambda n: n.rstrip("/"))
    assert files == ours_files


@needs_tar
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_gnu_tar_sees_what_we_read_in_the_examples(path, tmp_path):
    _assert_same_as_gnu_tar(path, tmp_path)


@needs_tar
@pytest.mark.parametrize("suffix", [".tar", ".tar.gz"])
def test_gnu_tar_sees_what_we_read_in_packer_output(tmp_path, suffix):
    payload = {f"{'d' * 90}/{'f' * 99}": b"long\n", "REPORT.md": b"# r\n", "e/empty": b""}
    out = tmp_path / f"b{suffix}"
    pack.write_archive(_bag(payload, name="b" * 50), out)
    _assert_same_as_gnu_tar(out, tmp_path)


@needs_tar
def test_mutations_we_accept_read_the_same_in_gnu_tar(tmp_path):
    """Random single-byte changes of a small packer archive: every one our reader accepts is
    an archive in which GNU tar lists and extracts exactly what we read."""
    good = pack.tar_bytes(_bag({"a/" + "x" * 95 + "/b.json": b"{}\n", "REPORT.md": b"# r\n"}, name="m" * 40))
    rng = random.Random(20261201)
    headers = [off for off in range(0, ca.body_end(good), 512) if good[off + 257:off + 262] == b"ustar"]
    data_or_mtime = [h + 136 + k for h in headers for k in range(11)]
    data_or_mtime += [h + 512 + k for h in headers for k in range(int(good[h + 124:h + 135], 8))]
    accepted = rejected = 0
    for i in range(300):
        off = (rng.randrange(len(good)), rng.choice(headers) + rng.randrange(512), rng.choice(data_or_mtime))[i % 3]
        data = bytearray(good)
        data[off] = rng.choice([0, 0x20, 0x30, 0x37, 0x38, 0x61, 0x80, 0xff, data[off] ^ 1])
        if bytes(data) == good:
            continue
        path = tmp_path / "m.tar"
        path.write_bytes(bytes(data))
        try:
            c = archive.read_archive(path)
        except UnreadableInputError:
            rejected += 1
            continue
        if c.problems:
            rejected += 1
            continue
        accepted += 1
        names, files = _gnu_view(path, tmp_path)
        assert (sorted(names), files) == _our_view(c), off
    assert rejected > 50 and accepted > 25
