"""Typed frozen records between the engine's stages (harness/records.py)."""
from __future__ import annotations

import dataclasses
import json
import tarfile
from pathlib import Path

import pytest

from kbrepro.harness.records import BlockKey, CompileRecord, FtzEvidence, WitnessVerdict, ftz_agrees

ROOT = Path(__file__).resolve().parent.parent


def _bundle_docs(name: str) -> list[dict]:
    out = []
    for tb in sorted((ROOT / "examples").glob("*.tar")) + [ROOT / "tests" / "fixtures" / "user-study-relu-quick.tar"]:
        with tarfile.open(tb) as tf:
            for m in tf:
                if m.name.endswith(f"data/results/{name}.json"):
                    out.append(json.load(tf.extractfile(m)))
    assert len(out) == 4
    return out


def test_every_committed_compile_record_round_trips_and_its_agrees_follows_from_the_evidence():
    n = 0
    for doc in _bundle_docs("compile"):
        for v in doc["variants"]:
            rec = CompileRecord.from_doc(v)
            assert rec.to_doc() == v
            assert rec.ftz_evidence.agrees is v["ftz_evidence"]["agrees"]
            n += 1
    assert n == 3 + 3 + 2 + 2


def test_the_witness_makes_a_new_record_and_the_old_one_is_unchanged():
    v = _bundle_docs("compile")[0]["variants"][0]
    rec = CompileRecord.from_doc(v)
    wrong = WitnessVerdict(task=1, discriminates=True, flushes=not rec.expected_ftz, bit_identical_to_reference=False)
    new = rec.with_witness(wrong)
    assert new is not rec and rec.to_doc() == v
    assert new.ftz_evidence.witness == wrong and new.ftz_evidence.agrees is False
    with pytest.raises(dataclasses.FrozenInstanceError):
        rec.name = "x"
    with pytest.raises(TypeError):
        rec.ftz_evidence.ptx["says_ftz"] = True  # read-only mapping


@pytest.mark.parametrize("witness, ptx, sass, want", [
    (None, None, None, None),
    (WitnessVerdict(1, True, True, False), None, None, True),
    (WitnessVerdict(1, False, False, False), None, None, None),  # cannot discriminate: says nothing
    (WitnessVerdict(1, True, None, False), {"says_ftz": True}, None, True),
    (WitnessVerdict(1, True, True, False), {"says_ftz": False}, None, False),
    (None, {"says_ftz": None}, {"says_ftz": True}, True),
    (None, None, {"unavailable": "no cuobjdump"}, None),
])
def test_agrees_is_the_shared_rule(witness, ptx, sass, want):
    ev = FtzEvidence(expected=True, ptx=ptx, sass=sass, witness=witness)
    assert ev.agrees is want
    assert ftz_agrees(True, ev.says) is want


def test_block_keys_give_the_committed_ids_and_are_hashable():
    seen = set()
    for doc in _bundle_docs("timings"):
        for b in doc["blocks"]:
            if b["kind"] not in ("study", "cold_l2", "extra_shape"):
                continue
            label = b["id"].split(".", 3)[3] if b["kind"] == "extra_shape" else ""
            key = BlockKey(b["task"], b["scope"], b["mode"], b["kind"], label)
            assert key.id == b["id"]
            seen.add(key)
    assert len(seen) > 20
    assert BlockKey(53, "tail", "events", "cold_l2").id == "53.tail.events.cold"
    assert {BlockKey(1, "full", "graph"): 1}[BlockKey(1, "full", "graph")] == 1
