"""The predicate audit on the post's original files and on our own documents."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kbrepro.bundle import audit
from conftest import ROOT, SHARED_RUN


@pytest.mark.skipif(not SHARED_RUN.is_dir(), reason="../shared/data/h200-seed-run is not present")
def test_audit_of_the_posts_h200_files(tmp_path):
    files = audit.audit_path(SHARED_RUN)
    s = audit.summarise(files)
    assert s["files"] == 5
    assert s["saved_legacy_ratios"] == 200
    assert s["classification_changes"] == 0 and s["undecidable"] == 0
    assert s["nan_input_cases"] > 0          # NaN-holding controls are listed apart
    assert s["closest_legacy_distance"] > 0.9  # no saved ratio anywhere near 1
    out = tmp_path / "audit.json"
    r = subprocess.run([sys.executable, "-m", "kbrepro.bundle.audit", str(SHARED_RUN), "--json", str(out)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "classification changes 0" in r.stdout
    assert json.loads(out.read_text())["summary"]["files"] == 5


def test_audit_flags_a_case_in_the_undecidable_band_and_a_flip():
    doc = {"tasks": {"1": {"correctness": [
        {"pass": True, "max_budget_ratio": 0.99995, "max_abs": 1e-3, "bad_finite": 0, "bad_special": 0},
        {"pass": True, "max_budget_ratio": 0.2, "max_abs": 1e-6, "bad_finite": 0, "bad_special": 0},
    ]}}}
    fa = audit.audit_document(doc, "synthetic.json")
    assert [c.could_change for c in fa.cases] == [None, False]
    ours = {"schema": "kbrepro/correctness", "x": {"element_count": 2, "bit_identical_count": 1,
            "official": {"pass": True, "failing_count": 0, "worst_ratio": 0.99995},
            "legacy": {"pass": False, "failing_count": 1, "worst_ratio": 1.00005}}}
    fb = audit.audit_document(ours, "ours.json")
    assert fb.cases[0].could_change is True and fb.cases[0].official_source == "recorded"
