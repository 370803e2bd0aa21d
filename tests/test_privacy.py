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
