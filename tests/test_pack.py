"""Bag layout and deterministic archives."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from kbrepro.bundle import pack
from kbrepro.errors import UsageError

PAYLOAD = {"results/a.json": b'{"a": 1}\n', "binaries/x.cubin": bytes(range(256)), "REPORT.md": b"# r\n"}


def _bag(payload=PAYLOAD, name="demo-bundle"):
    return pack.make_bag(name, payload, [("Bundle-Format", pack.FORMAT_NAME), ("Bundle-Format-Version", str(pack.FORMAT_VERSION))])


def test_tag_files_and_digest():
    bag = _bag()
    tags = bag.tag_files()
    assert tags["bagit.txt"] == b"BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n"
    lines = tags["manifest-sha256.txt"].decode().splitlines()
    assert [ln.split("  ")[1] for ln in lines] == sorted(f"data/{p}" for p in PAYLOAD)
    size = sum(len(v) for v in PAYLOAD.values())
    assert f"Payload-Oxum: {size}.{len(PAYLOAD)}" in tags["bag-info.txt"].decode()
    assert set(ln.split("  ")[1] for ln in tags["tagmanifest-sha256.txt"].decode().splitlines()) == \
        {"bagit.txt", "bag-info.txt", "manifest-sha256.txt"}
    changed = _bag({**PAYLOAD, "REPORT.md": b"# R\n"})
    assert changed.digest() != bag.digest()


def test_archive_is_deterministic_and_normalised(tmp_path):
    a = pack.tar_bytes(_bag())
    b = pack.tar_bytes(_bag(dict(reversed(list(PAYLOAD.items())))))
    assert a == b
    with tarfile.open(fileobj=io.BytesIO(a)) as tf:
        names = [m.name for m in tf]
        assert names == sorted(names)
        for m in tf:
            assert (m.uid, m.gid, m.uname, m.gname, m.mtime) == (0, 0, "", "", 0)
            assert m.mode == (0o755 if m.isdir() else 0o644)
            assert not m.pax_headers
    gz1, gz2 = pack.tar_bytes(_bag(), gzip_compress=True), pack.tar_bytes(_bag(), gzip_compress=True)
    assert gz1 == gz2 and gz1[4:8] == b"\x00\x00\x00\x00"  # gzip header mtime 0


def test_source_date_epoch_is_honoured(monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    with tarfile.open(fileobj=io.BytesIO(pack.tar_bytes(_bag()))) as tf:
        assert {m.mtime for m in tf} == {1700000000}


@pytest.mark.parametrize("bad", ["../x.json", "/abs.json", "a b.json", "dir/.hidden/x", "ü.json", "a//b"])
def test_unsafe_payload_names_are_refused(bad):
    with pytest.raises(UsageError):
        _bag({bad: b"x"})


def test_nfc_collision_is_refused():
    with pytest.raises(UsageError, match="NFC"):
        pack.check_names(["caf\u00e9.json", "cafe\u0301.json"])


def test_bad_bundle_name_and_suffix(tmp_path):
    with pytest.raises(UsageError):
        _bag(name="../evil")
    with pytest.raises(UsageError, match=".tar"):
        pack.write_archive(_bag(), tmp_path / "x.zip")


def test_umask_and_creation_order_do_not_change_the_bytes(tmp_path):
    """Write results in two orders under two umasks, pack each in a subprocess: same bytes."""
    root = Path(__file__).resolve().parent.parent
    script = (
        "import os, sys, pathlib\n"
        "from bundle import pack\n"
        "d = pathlib.Path(sys.argv[1]); order = sys.argv[2]\n"
        "names = ['results/a.json', 'binaries/x.cubin', 'REPORT.md']\n"
        "data = {'results/a.json': b'{}', 'binaries/x.cubin': b'\\x7fELF', 'REPORT.md': b'# r'}\n"
        "for n in (names if order == 'f' else names[::-1]):\n"
        "    p = d / n; p.parent.mkdir(parents=True, exist_ok=True); p.write_bytes(data[n])\n"
        "payload = {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob('*')) if p.is_file()}\n"
        "bag = pack.make_bag('b', payload, [('Bundle-Format', 'kbrepro-bundle')])\n"
        "pack.write_archive(bag, pathlib.Path(sys.argv[3]))\n")
    outs = []
    for umask, order in (("022", "f"), ("077", "r")):
        d = tmp_path / f"r{umask}"
        d.mkdir()
        out = tmp_path / f"{umask}.tar"
        subprocess.run(["sh", "-c", f'umask {umask} && exec "$0" -c "$1" "$2" "$3" "$4"', sys.executable, script,
                        str(d), order, str(out)], check=True, cwd=root,
                       env={**os.environ, "PYTHONPATH": str(root)})
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
