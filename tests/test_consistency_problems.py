"""bundle.validate.consistency_problems returns Problems (file, JSON path, message, code), which
the packer prints as one line each and the verifier files under the document's bag path: the
problem is never a string split apart again (issue 30)."""
from __future__ import annotations

import json
from pathlib import Path

from kbrepro.bundle import validate
from kbrepro.model.problems import CONTRADICTS, Problem

RESULTS = Path(__file__).resolve().parents[1] / "examples" / "results-full-h200"


def _documents() -> dict:
    return {p.stem: json.loads(p.read_text()) for p in RESULTS.glob("*.json")}


def test_the_committed_results_are_consistent():
    assert validate.consistency_problems(_documents(), {}, file_hashes=False) == []


def test_a_contradiction_names_its_file_path_and_what_contradicts_what():
    docs = _documents()
    blk = next(i for i, b in enumerate(docs["timings"]["blocks"]) if b.get("rounds") and not b["protocol"].get("adaptive"))
    docs["timings"]["blocks"][blk]["rounds"].pop()
    docs["run"]["status"] = "failed"
    got = validate.consistency_problems(docs, {}, file_hashes=False)
    assert all(isinstance(p, Problem) and p.code == CONTRADICTS for p in got)
    by_file = {p.file: p for p in got}
    assert by_file["timings.json"].path == f"$.blocks[{blk}].rounds"
    assert "rounds, protocol says" in by_file["timings.json"].message
    assert str(by_file["run.json"]) == "run.json: $.status: the run is 'failed'"
