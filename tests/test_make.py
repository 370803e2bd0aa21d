"""make_bundle.py: packing existing results (the post's H200 files and our own), determinism,
BagIt validity, and refusal of invalid results with their JSON paths."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import ROOT, SHARED_RUN

pytestmark = pytest.mark.skipif(not SHARED_RUN.is_dir(), reason="../shared/data/h200-seed-run is not present")


def _make(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "make_bundle.py", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_packing_the_post_files_twice_gives_identical_archives_that_bagit_validates(tmp_path):
    a, b = tmp_path / "A.tar", tmp_path / "B.tar"
    ra = _make("--from-results", str(SHARED_RUN), "--out", str(a))
    rb = _make("--from-results", str(SHARED_RUN), "--out", str(b))
    assert ra.returncode == 0, ra.stderr
    assert rb.returncode == 0, rb.stderr
    assert a.read_bytes() == b.read_bytes()
    digest = ra.stdout.split("digest:")[1].split()[0]
    assert (tmp_path / "A.tar.sha256-digest").read_text().split()[0] == digest
    import bagit

    ex = tmp_path / "x"
    with tarfile.open(a) as tf:
        tf.extractall(ex, filter="data")  # our own archive, in a test
    (top,) = list(ex.iterdir())
    bag = bagit.Bag(str(top))
    bag.validate()
    assert bag.info["Bundle-Format"] == "kbrepro-bundle"
    meta = json.loads((top / "data" / "bundle.json").read_text())
    assert meta["source"] == "imported"
    for orig in ("fusion_results.json", "fusion_preserve_denormals.json", "fusion_controls.json",
                 "fusion_ftz_cost.json", "scout.json"):
        assert (top / "data" / "results" / "originals" / orig).read_bytes() == (SHARED_RUN / orig).read_bytes()
    report = (top / "data" / "REPORT.md").read_text()
    assert "| C14 | **fails** |" in report


def _copy_post(tmp_path) -> Path:
    d = tmp_path / "post"
    shutil.copytree(SHARED_RUN, d)
    return d


@pytest.mark.parametrize("edit,fragment,code", [
    (lambda t: t.replace('"bit_equal_count": 16777216,', '"bit_equal_count": 16777216.0,', 1), "bit_equal_count", 1),
    # a NaN token is not JSON at all (RFC 8259): unreadable input, exit 3, still with its path
    (lambda t: t.replace('"max_abs": 0.0,', '"max_abs": NaN,', 1), "NaN", 3),
    (lambda t: t.replace('"element_count": 16777216,', '', 1), "element_count", 1),
])
def test_invalid_post_results_are_refused_with_their_path_and_nothing_is_written(tmp_path, edit, fragment, code):
    d = _copy_post(tmp_path)
    f = d / "fusion_results.json"
    f.write_text(edit(f.read_text()))
    out = tmp_path / "never.tar"
    r = _make("--from-results", str(d), "--out", str(out))
    assert r.returncode == code, r.stderr
    assert "$.tasks" in r.stderr and fragment in r.stderr
    assert not out.exists() and not list(tmp_path.glob("*.tar*"))


def test_our_own_results_with_problems_are_refused_with_paths(tmp_path):
    src = ROOT / "tests" / "fixtures" / "results-quick-h200"
    if not src.is_dir():
        pytest.skip("no own-format fixture results")
    d = tmp_path / "r"
    shutil.copytree(src, d)
    doc = json.loads((d / "correctness.json").read_text())
    first = doc["full_program"][0]["checks"]
    v = next(iter(first))
    first[v]["element_count"] = float(first[v]["element_count"])
    del first[v]["official"]
    (d / "correctness.json").write_text(json.dumps(doc))
    (d / "witness.json").write_text((d / "witness.json").read_text().replace('"task": 81', '"task": NaN'))
    r = _make("--from-results", str(d), "--out", str(tmp_path / "x.tar"))
    assert r.returncode in (1, 3), r.stderr
    assert not (tmp_path / "x.tar").exists()
    assert "$.full_program[0].checks" in r.stderr or "witness.json" in r.stderr


def test_no_gpu_default_run_stops_at_once_and_names_the_alternatives():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    r = _make()
    assert r.returncode == 4
    assert "--from-results" in r.stderr and "verify_bundle.py" in r.stderr


def test_usage_errors_exit_2(tmp_path):
    assert _make("--bogus").returncode == 2
    r = _make("--from-results", str(SHARED_RUN), "--out", str(tmp_path / "x.zip"))
    assert r.returncode == 2 and ".tar" in r.stderr
    r = _make("--from-results", str(tmp_path / "missing"))
    assert r.returncode == 3 and "does not exist" in r.stderr
    (tmp_path / "empty").mkdir()
    r = _make("--from-results", str(tmp_path / "empty"))
    assert r.returncode == 3


def test_our_own_quick_results_pack_and_verify_end_to_end(tmp_path):
    """The real quick-profile results of an H200 run: pack twice (identical), verify statically."""
    src = ROOT / "tests" / "fixtures" / "results-quick-h200"
    a, b = tmp_path / "q1.tar", tmp_path / "q2.tar"
    assert _make("--from-results", str(src), "--out", str(a)).returncode == 0
    assert _make("--from-results", str(src), "--out", str(b)).returncode == 0
    assert a.read_bytes() == b.read_bytes()
    r = subprocess.run([sys.executable, "verify_bundle.py", str(a), "--level", "static", "--json",
                        str(tmp_path / "rep.json")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads((tmp_path / "rep.json").read_text())
    assert [(t["name"], t["status"]) for t in rep["tiers"]] == [
        ("archive", "PASS"), ("manifest", "PASS"), ("documents", "PASS"), ("provenance", "PASS"), ("claims", "PASS")]
