"""Replay comparison (bundle.verify.compare.compare_replay and the claim-change rule) on CPU.

The recorded side is the committed H200 run (examples/results-full-h200); the "replayed"
side is a copy of it, edited the way a replay on another machine (or a forged recording)
would differ. An identical replay must pass; each difference must be named.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from kbrepro.bundle import claims as claims_mod
from kbrepro.bundle.verify import compare as V

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "examples" / "results-full-h200"
NAMES = ("run", "environment", "compile", "witness", "correctness", "timings", "scout")


@pytest.fixture(scope="module")
def recorded():
    return {n: json.loads((RESULTS / f"{n}.json").read_text()) for n in NAMES}


@pytest.fixture(scope="module")
def boot():
    spec, _ = claims_mod.load_spec()
    return spec["bootstrap"]


def _ptx(name: str) -> bytes:
    return (RESULTS / "binaries" / f"{name}.ptx").read_bytes()


def _toolchains(rec, rep):
    return {v["name"]: (V.ptx_toolchain(_ptx(v["name"])), V.ptx_toolchain(_ptx(v["name"])))
            for v in rep["compile"]["variants"]}


def _compare(rec, rep, boot, same_profile=True, tol=0.05, toolchains=None):
    return V.compare_replay(rec, rep, same_profile=same_profile, ratio_tolerance=tol, boot=boot,
                            toolchains=toolchains if toolchains is not None else _toolchains(rec, rep))


def test_ptx_toolchain_reads_release_and_target():
    tc = V.ptx_toolchain(_ptx("nvrtc_ftz_false"))
    assert tc == ("// Cuda compilation tools, release 13.0, V13.0.88", ".target sm_90")
    assert V.ptx_toolchain(None) is None and V.ptx_toolchain(b"no header") is None


def test_identical_replay_passes(recorded, boot):
    problems, det = _compare(recorded, copy.deepcopy(recorded), boot)
    assert problems == []
    assert det["cases_compared"] > 200 and det["not_replayed"] == 0
    assert det["bits_required_for"] == ["cupy_default", "nvrtc_ftz_false", "nvrtc_ftz_true"]
    assert len(det["timing_ratios"]) == 75 and det["timing_ratios_outside_tolerance"] == 0


def _first_case(doc):
    return doc["correctness"]["full_program"][0]["checks"]["nvrtc_ftz_false"]


def test_changed_verdict_fails(recorded, boot):
    rep = copy.deepcopy(recorded)
    _first_case(rep)["official"]["pass"] = False
    problems, _ = _compare(recorded, rep, boot)
    assert [p.message for p in problems] == ["verdict differs"]
    assert problems[0].path.endswith(".nvrtc_ftz_false.official.pass")


def test_bit_count_must_match_only_with_a_byte_identical_cubin(recorded, boot):
    rep = copy.deepcopy(recorded)
    _first_case(rep)["bit_identical_count"] -= 1
    problems, _ = _compare(recorded, rep, boot)
    assert [p.message for p in problems] == ["bit-identity count differs although the replay ran a byte-identical cubin"]
    # another NVRTC built the replayed cubin (different PTX header): bits are not required, the cubin is not comparable
    other = copy.deepcopy(rep)
    for v in other["compile"]["variants"]:
        v["cubin"] = {**v["cubin"], "sha256": "0" * 64}
    tcs = {v["name"]: (V.ptx_toolchain(_ptx(v["name"])), ("// Cuda compilation tools, release 12.9, V12.9.1",
                                                          ".target sm_90")) for v in other["compile"]["variants"]}
    problems, det = _compare(recorded, other, boot, toolchains=tcs)
    assert problems == [] and det["bits_required_for"] == []
    assert all(c["same"] is None for c in det["cubins"])
    # the same NVRTC and target named in both PTX headers, yet another cubin: a problem
    problems, _ = _compare(recorded, other, boot)
    assert sum("cubin differs although the PTX headers name the same" in p.message for p in problems) == 3


def test_environment_record_does_not_excuse_bits(recorded, boot):
    """The bundle's own environment record saying 'another GPU' changes nothing: the decision
    rests on the cubins the replay compiled."""
    rec = copy.deepcopy(recorded)
    rec["environment"]["fields"]["gpu_name"]["value"] = "Some Other GPU"
    rep = copy.deepcopy(recorded)
    _first_case(rep)["bit_identical_count"] -= 1
    problems, _ = _compare(rec, rep, boot)
    assert any("byte-identical cubin" in p.message for p in problems)


def test_witness_flush_and_bits(recorded, boot):
    rep = copy.deepcopy(recorded)
    v = next(x for x in rep["compile"]["variants"] if x["name"] == "nvrtc_ftz_true")
    v["ftz_evidence"]["witness"]["flushes"] = False
    rep["witness"]["outputs"]["nvrtc_ftz_true"] = copy.deepcopy(rep["witness"]["outputs"]["reference"])
    msgs = sorted(p.message for p in _compare(recorded, rep, boot)[0])
    assert msgs == ["witness FTZ behaviour differs", "witness bits differ although the replay ran a byte-identical cubin"]


def _scale_arm(block, arm, factor):
    for r in block["rounds"]:
        r["times_ms"][arm] *= factor


def test_timing_ratio_beyond_intervals_and_tolerance_fails(recorded, boot):
    rep = copy.deepcopy(recorded)
    b = next(x for x in rep["timings"]["blocks"] if x["id"] == "81.tail.graph")
    _scale_arm(b, "nvrtc_ftz_false", 1.3)
    problems, det = _compare(recorded, rep, boot)
    assert [p.path for p in problems] == ["81.tail.graph nvrtc_ftz_false/eager_tail"]
    assert "beyond both intervals and the 5% tolerance" in problems[0].message
    # within the tolerance: 3% slower passes
    rep2 = copy.deepcopy(recorded)
    _scale_arm(next(x for x in rep2["timings"]["blocks"] if x["id"] == "81.tail.graph"), "nvrtc_ftz_false", 1.03)
    assert _compare(recorded, rep2, boot)[0] == []


def test_events_mode_difference_excused_only_when_the_graph_twin_reproduces(recorded, boot):
    rep = copy.deepcopy(recorded)
    _scale_arm(next(x for x in rep["timings"]["blocks"] if x["id"] == "53.tail.events"), "cupy_default", 1.5)
    problems, det = _compare(recorded, rep, boot)
    assert problems == []
    q = next(r for r in det["timing_ratios"] if r["block"] == "53.tail.events" and r["ratio"] == "cupy_default/eager_tail")
    assert not q["within"] and "host launch overhead" in q["excused"]
    _scale_arm(next(x for x in rep["timings"]["blocks"] if x["id"] == "53.tail.graph"), "cupy_default", 1.5)
    paths = sorted(p.path for p in _compare(recorded, rep, boot)[0])
    assert paths == ["53.tail.events cupy_default/eager_tail", "53.tail.graph cupy_default/eager_tail"]


def test_cases_not_reproduced(recorded, boot):
    rep = copy.deepcopy(recorded)
    del rep["correctness"]["full_program"][-1]
    rep["timings"]["blocks"] = rep["timings"]["blocks"][:-1]
    problems, det = _compare(recorded, rep, boot)
    msgs = [p.message for p in problems]
    assert msgs.count("a recorded case the replay did not reproduce") == 3  # one per variant
    assert "a recorded timing block the replay did not run" in msgs
    # at another profile the same gaps are listed, not failed
    problems, det = _compare(recorded, rep, boot, same_profile=False)
    assert problems == [] and det["not_replayed"] == 3 and det["timing_blocks_not_replayed"] == 1


def test_claim_changes():
    rec = {"C01": "holds", "C02": "holds", "C03": "fails", "C04": "inconclusive", "C05": "not_comparable"}
    assert V.claim_changes(rec, dict(rec), True) == ([], [])
    # a decided verdict turned into its opposite contradicts the recording at any profile; a
    # change to or from inconclusive is reported (the timing ratios are the replay's comparison
    # of the data); at the recorded profile a claim on one side only or not_comparable contradicts
    again = {"C01": "inconclusive", "C02": "fails", "C03": "fails", "C04": "holds", "C05": "holds"}
    problems, reported = V.claim_changes(rec, again, True)
    assert [p.path for p in problems] == ["C02", "C05"]
    assert reported == ["claim C01: recorded 'holds', replayed 'inconclusive'",
                        "claim C04: recorded 'inconclusive', replayed 'holds'"]
    problems, reported = V.claim_changes(rec, again, False)
    assert [p.path for p in problems] == ["C02"] and len(reported) == 3
    problems, _ = V.claim_changes(rec, {"C01": "holds", "C02": "holds", "C04": "inconclusive", "C05": "not_comparable"},
                                  True)
    assert [p.path for p in problems] == ["C03"]


def test_claim_change_rule_where_the_ratios_moved():
    from kbrepro.model.replay_rules import claim_change

    assert claim_change("holds", "inconclusive", True) == "reported"
    assert claim_change("holds", "inconclusive", True, ratios_reproduce=False) == "contradicts"
    assert claim_change("inconclusive", "fails", False, ratios_reproduce=False) == "reported"
    assert claim_change("holds", "fails", False) == "contradicts"
    assert claim_change(None, "holds", True) == "contradicts"


def _cold_pair(factor_flush: float, factor_kernel: float):
    """A cold-L2 block recorded and 'replayed': the flush-only arm scaled by
    ``factor_flush`` and the kernel arm by ``factor_kernel`` in the replay."""
    arms = ["l2_flush_only", "eager", "nvrtc_ftz_false"]
    base = {"l2_flush_only": 0.05, "eager": 5.0, "nvrtc_ftz_false": 4.0}
    rounds = [{"order": arms, "times_ms": {a: base[a] * (1 + 0.001 * ((i * 7 + j) % 5)) for j, a in enumerate(arms)}}
              for i in range(20)]
    rec = {"id": "1.full.graph.cold", "kind": "cold_l2", "task": 1, "scope": "full", "mode": "graph", "arms": arms,
           "protocol": {"mode": "graph"}, "rounds": rounds}
    rep = copy.deepcopy(rec)
    for r in rep["rounds"]:
        r["times_ms"]["l2_flush_only"] *= factor_flush
        r["times_ms"]["nvrtc_ftz_false"] *= factor_kernel
    return {"timings": {"blocks": [rec]}}, {"timings": {"blocks": [rep]}}


def test_a_cold_l2_block_is_compared_to_eager_not_to_the_flush_alone(boot):
    """Measured on an H200 replay of the extended bundle: the flush-only arm ran 15% faster
    while every arm that includes the flush kept its ratio to eager; ratios to the flush arm
    would have failed twelve blocks that reproduce."""
    rec, rep = _cold_pair(0.85, 1.0)
    problems, det = V.compare_replay(rec, rep, same_profile=True, ratio_tolerance=0.05, boot=boot)
    assert problems == [] and [q["ratio"] for q in det["timing_ratios"]] == ["nvrtc_ftz_false/eager"]
    rec, rep = _cold_pair(1.0, 1.2)
    problems, _ = V.compare_replay(rec, rep, same_profile=True, ratio_tolerance=0.05, boot=boot)
    assert [p.path for p in problems] == ["1.full.graph.cold nvrtc_ftz_false/eager"]


def _tiny_pair(shift_us: float):
    """Recorded and replayed events+graph blocks of a microsecond kernel (the LayerNorm
    study's extra shape on an H200: eager 559 us, the kernel 11.2 us in graph mode); the
    replay's kernel arm is ``shift_us`` slower, and in events mode the host launch overhead
    doubles (42 -> 101 us, as measured in a second replay)."""
    def block(mode, kernel_us, eager_us):
        arms = ["eager", "precise"]
        rounds = [{"order": arms, "times_ms": {"eager": eager_us / 1000 * (1 + 0.001 * (i % 3)),
                                               "precise": kernel_us / 1000 * (1 + 0.002 * (i % 4))}}
                  for i in range(25)]
        return {"id": f"40.full.{mode}.B4", "kind": "extra_shape", "task": 40, "scope": "full", "mode": mode,
                "arms": arms, "protocol": {"mode": mode}, "rounds": rounds}
    rec = {"timings": {"blocks": [block("events", 42.0, 553.0), block("graph", 11.2, 559.0)]}}
    rep = {"timings": {"blocks": [block("events", 101.0, 553.0), block("graph", 11.2 + shift_us, 559.0)]}}
    return rec, rep


def test_a_move_below_the_timers_resolution_is_listed_not_failed(boot):
    rec, rep = _tiny_pair(0.9)  # 8% of 11.2 us: beyond the 5% tolerance, within 1 us
    problems, det = V.compare_replay(rec, rep, same_profile=True, ratio_tolerance=0.05, boot=boot)
    assert problems == []
    by = {q["block"]: q for q in det["timing_ratios"]}
    assert not by["40.full.graph.B4"]["within"]
    assert by["40.full.graph.B4"]["excused"].startswith("below the timer's resolution: the arm's median moved by 0.9")
    assert by["40.full.events.B4"]["excused"].startswith("host launch overhead")
    rec, rep = _tiny_pair(3.0)  # 3 us is resolved: a real difference, and the events twin is not excused either
    problems, _ = V.compare_replay(rec, rep, same_profile=True, ratio_tolerance=0.05, boot=boot)
    assert sorted(p.path for p in problems) == ["40.full.events.B4 precise/eager", "40.full.graph.B4 precise/eager"]
