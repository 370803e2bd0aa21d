"""Fingerprint without a GPU, and scrubbing of logs."""
from __future__ import annotations

import getpass
import json
import socket

from kbrepro import schemas
from kbrepro.bundle import scrub
from kbrepro.harness import fingerprint


def test_cpu_fingerprint_has_reasons_for_every_missing_field_and_validates():
    import torch

    fp = fingerprint.collect("start")
    assert schemas.validate(fp, "environment") == []
    f = fp["fields"]
    if not torch.cuda.is_available():
        assert f["gpu_name"]["value"] is None and "no CUDA GPU" in f["gpu_name"]["reason"]
    for k, v in f.items():
        assert v["value"] is not None or v["reason"], k
    text = json.dumps(fp)
    for word in (socket.gethostname(), getpass.getuser()):
        if len(word) >= 4 and word not in ("root", "localhost"):
            assert word not in text


def test_uuid_is_hashed():
    h = fingerprint.hash_uuid("GPU-12345678-1234-1234-1234-123456789abc")
    assert len(h) == 64 and "12345678" not in h


def test_scrub_removes_uuids_homes_and_install_paths():
    home, root = "/" + "home/alice/proj", "/" + "root/x"  # built here: no machine path in the source
    raw = (f"GPU-12345678-1234-1234-1234-123456789abc at {home} and {root} "
           "/opt/v/lib/python3.12/site-packages/cupy/x.py /tmp/tmpab12/k.cubin")
    out = scrub.scrub_text(raw)
    assert "12345678-1234" not in out and "alice" not in out and root not in out
    assert "<site-packages>/cupy/x.py" in out and "<tmp>" in out
    assert scrub.find_leaks(out) == []
    assert scrub.find_leaks(raw)


def test_no_committed_bundle_names_a_temporary_or_home_folder_of_the_machine_that_made_it():
    """Provenance binaries carry the paths they were built in; the packer overwrites them in
    place (bundle/scrub.py scrub_binary), text files are scrubbed as text."""
    import re
    import tarfile
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    leak = re.compile(rb"/(tmp|root|home)/[A-Za-z0-9_]")
    for tb in sorted((root / "examples").glob("*.tar")) + sorted((root / "tests" / "fixtures").glob("*.tar")):
        with tarfile.open(tb) as tf:
            hits = [m.name for m in tf if m.isfile() and leak.search(tf.extractfile(m).read())]
        assert hits == [], f"{tb.name}: {hits[:3]}"


def test_a_binary_is_scrubbed_in_place_with_fillers_of_the_same_length():
    from kbrepro.bundle import scrub

    # the folders are spelt in parts, so that this file names no machine path itself
    tmp, home = b"/" + b"tmp/", b"/" + b"root/"
    raw = b"\x7fELF\x00/data/run/work/c/build/x.cu\x00" + tmp + b"tmpab12/cuda_utils.c\x00" + home + b".cache/x\x00"
    out = scrub.scrub_binary(raw, ["/data/run/work/c"])
    assert len(out) == len(raw) and out.startswith(b"\x7fELF\x00<path>")
    assert b"/data/run" not in out and tmp not in out and home not in out and b"/build/x.cu" in out
