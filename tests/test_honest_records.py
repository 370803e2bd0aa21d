"""Records an honest run writes are records the verifier's rules accept.

Each test runs a candidate through the engine on the CPU (harness/candidate.py), wraps its record
as bundle/candidates.py does, and holds it to every rule the packer and the verifier hold it to
(bundle/candidate_records.py: the typed records and their invariants, the completeness and
derivation rules, the derived verdicts). The harness ran honestly: a rule that refuses what it
wrote would fail an honest author's bundle (or call the record a forgery)."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from kbrepro.bundle import candidate_records
from kbrepro.harness import candidate as hc
from kbrepro.harness import jsonio
from kbrepro.harness.checks import PREDICATES

TASK = b'''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)
    def forward(self, x):
        return torch.relu(self.lin(x))

batch_size = 8
n = 16

def get_inputs():
    return [torch.rand(batch_size, n)]

def get_init_inputs():
    return [n]
'''


def _utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def held_to_rules(tmp: Path, task: bytes, src: bytes, profile: str = "quick", name: str = "c"):
    """``(record, problems)``: the CPU run of ``src`` on ``task`` and what the rules say of it."""
    cfg = hc.PROFILES[profile]
    started = _utc()
    rec = hc.run_candidate(hc.CandidateSpec(name, src, "task.py", task), cfg, tmp / name, device="cpu")
    rec.pop("provenance_dir")
    rec["file"] = f"inputs/candidates/{name}.py"
    doc = {"schema": "kbrepro/candidates", "schema_version": 2, "kind": "kernelbench-candidates", "profile": profile,
           "device": "cpu", "started_utc": started, "finished_utc": _utc(),
           "predicate": {"official": "allclose", **PREDICATES["allclose"], "atol": cfg.atol, "rtol": cfg.rtol},
           "kernelbench": {"commit": "0" * 40}, "bandwidth": {"gbps": None, "reason": "no GPU"}, "candidates": [rec]}
    loaded = candidate_records.load(json.loads(jsonio.dumps(doc)), {}, lambda r: task)
    return rec, [f"{p.path} {p.message}" for p in loaded.problems]


def _caught(rec) -> list[str]:
    return [v["name"] for v in rec["verdicts"] if v["passed"] is False]


def test_an_honest_candidate_of_either_profile_meets_every_rule(tmp_path):
    for profile in ("quick", "full"):
        rec, problems = held_to_rules(tmp_path, TASK, TASK.replace(b"class Model(", b"class ModelNew("), profile,
                                      name=profile)
        assert problems == [] and _caught(rec) == [], (profile, problems, rec["verdicts"])


# a candidate that computes on the tensor of its first call (as a CUDA graph captured on it whose
# inputs are never copied in): every later call answers the values now in that tensor
STALE_INPUT = TASK.replace(b"class Model(", b"class ModelNew(").replace(
    b"        return torch.relu(self.lin(x))",
    b"        if not hasattr(self, 'x0'):\n            self.x0 = x\n        return torch.relu(self.lin(self.x0))")


def test_a_quick_run_that_matches_the_same_buffers_reference_is_a_valid_record(tmp_path):
    """The quick profile has one seed: the same-buffers case is compared with the official draw
    of seed 1, kept under ``s1/official``, which is no case's id; the repeat, poisoned and
    profiled calls of this candidate answer that draw (written into its first tensor) and name
    it in ``matches_other``. The rule took that name for a forgery."""
    rec, problems = held_to_rules(tmp_path, TASK, STALE_INPUT)
    cases = rec["observations"]["cases"]
    assert any("s1/official" in (c.get("matches_other") or []) for c in cases), cases
    assert "s1/official" not in [c["id"] for c in cases]
    assert "follows_fresh_inputs" in _caught(rec)
    assert problems == [], problems
