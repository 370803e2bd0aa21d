"""bundle/derived_facts.py: the facts a study bundle states that the verifier derives itself
(self-test expectations and outcomes, adaptive stopping, copy and floor blocks, GEMM FLOPs),
on minimal edits of the committed extended example's documents; the shared rules they call
(harness.selftest, harness.timing, harness.extras); and REPORT.md's rounds from format 5."""
from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest

from kbrepro.bundle import derived_facts as df
from kbrepro.bundle import pack, report
from kbrepro.bundle.verify.checklist import verify_archive
from kbrepro.harness import extras, selftest, stats, timing
from test_crosscheck import EXTENDED, FULL, edited, read_tar, records


#: the adaptive blocks the edits below touch; the others are left out of the ``extended``
#: fixture (each adaptive block is replayed whole, which takes up to a tenth of a second)
TOUCHED = ("53.tail.events", "53.tail.graph", "53.full.graph.cold", "81.full.graph", "81.tail.graph", "95.full.events")


@pytest.fixture(scope="module")
def whole():
    if EXTENDED is None:
        pytest.skip("no examples/*-extended-*.tar")
    return read_tar(EXTENDED)


@pytest.fixture(scope="module")
def extended(whole):
    """The extended example with only the adaptive blocks of :data:`TOUCHED`."""
    return edited(whole, lambda c: c.docs["timings"].update(blocks=[
        b for b in c.docs["timings"]["blocks"] if "adaptive" not in b or b["id"] in TOUCHED]))


def _messages(b, study=False) -> list[str]:
    out = df.document_problems(b.docs, records(b)) + (df.study_problems(b.study, records(b)) if study else [])
    return [p.message for p in out]


def _block(c, bid):
    return next(b for b in c.docs["timings"]["blocks"] if b["id"] == bid)


def _test(c, name):
    return next(t for t in c.docs["selftest"]["tests"] if t["name"] == name)


def test_the_extended_example_states_only_what_the_verifier_derives(whole, extended):
    assert df.document_problems(whole.docs, records(whole)) == [] and df.study_problems(whole.study, records(whole)) == []
    kinds = {b["kind"] for b in whole.docs["timings"]["blocks"]}
    assert {"floor", "copy", "gemm", "cold_l2"} <= kinds and "selftest" in whole.docs
    assert sum(1 for b in whole.docs["timings"]["blocks"] if b.get("adaptive")) == 21
    assert sum(1 for b in extended.docs["timings"]["blocks"] if b.get("adaptive")) == len(TOUCHED)


# ------------------------------------------------------------------------------ self-tests


def _uncaught_fast_math(c):
    t = _test(c, "fast_math_twin")
    t["checks"]["ftz_evidence"], t["failed_checks"], t["caught"] = True, [], False


SELFTEST_EDITS = {
    "as expected": (_uncaught_fast_math, "fast_math_twin: as_expected is not what its recorded outcomes"),
    "all as expected": (lambda c: c.docs["selftest"].update(all_as_expected=False), "all_as_expected is not"),
    "expectation": (lambda c: _test(c, "side_stream").update(expected=["physical_speed_limit"]),
                    "side_stream: expected is not what this verifier's table says"),
    "description": (lambda c: _test(c, "all_zero").update(description="returns ones"),
                    "all_zero: description is not what this verifier's table says"),
    "test dropped": (lambda c: c.docs["selftest"]["tests"].pop(3), "not this verifier's table of known-bad kernels"),
    "tests reordered": (lambda c: c.docs["selftest"]["tests"].reverse(), "in order"),
    "failed order": (lambda c: _test(c, "all_zero")["failed_checks"].reverse(), "all_zero: failed_checks is not"),
    "caught": (lambda c: _test(c, "good_control").update(caught=True), "good_control: caught is not"),
    "check dropped": (lambda c: _test(c, "mutates_input")["checks"].pop("poisoned_rerun"),
                      "mutates_input: the checks are not the engine's"),
    "not applicable made true": (lambda c: _test(c, "all_zero")["checks"].update(bit_identity=True),
                                 "all_zero: bit_identity does not apply to this kernel"),
    "applicable made null": (lambda c: _test(c, "good_control")["checks"].update(ftz_evidence=None),
                             "good_control: ftz_evidence is a check the engine makes"),
    "bits": (lambda c: _test(c, "good_control")["details"].update(bit_identical_count=8388607),
             "good_control: bit_identity does not follow from the recorded details"),
    "coverage": (lambda c: _test(c, "side_stream")["checks"].update(timed_stream_covers_work=True),
                 "side_stream: timed_stream_covers_work does not follow"),
    "speed limit": (lambda c: _test(c, "unwritten_output")["checks"].update(physical_speed_limit=True),
                    "unwritten_output: physical_speed_limit does not follow from the recorded details and the run's"),
    "apparent bandwidth": (lambda c: _test(c, "good_control")["details"].update(apparent_GBps=100.0),
                           "good_control: the apparent bandwidth is not"),
    "details missing": (lambda c: _test(c, "side_stream").pop("details"), "side_stream: the details the engine"),
    "no copy block": (lambda c: c.docs["timings"].update(blocks=[b for b in c.docs["timings"]["blocks"]
                                                                 if b["kind"] != "copy"]),
                      "0 copy blocks: the self-tests' speed limit is judged against the run's one copy block"),
}


@pytest.mark.parametrize("edit", sorted(SELFTEST_EDITS))
def test_a_selftest_fact_that_does_not_follow_fails(extended, edit):
    fn, fragment = SELFTEST_EDITS[edit]
    found = _messages(edited(extended, fn))
    assert any(fragment in m for m in found), found


def test_the_selftest_table_is_the_engines_and_summarise_orders_failures_as_the_run_does():
    assert [k.name for k in selftest.TABLE][0] == "good_control" and not selftest.TABLE[0].expect_caught_by
    assert sorted(selftest.RUN_ORDER) == sorted(selftest.CHECKS)
    assert all(set(k.expect_caught_by) <= set(selftest.CHECKS) for k in selftest.TABLE)
    checks = {c: c in ("physical_speed_limit", "official_allclose") and False for c in sorted(selftest.CHECKS)}
    doc = selftest.summarise([selftest.SelfTest("all_zero", "zeros", ("official_allclose",), checks)])
    assert doc["tests"][0]["failed_checks"] == list(selftest.RUN_ORDER)  # every check False, in the run's order
    assert selftest.speed_check(0.2, None) is None and selftest.speed_check(0.2, 4000.0) is True
    assert selftest.apparent_gbps(0.0) == math.inf and selftest.covers(8.0, 10.0) and not selftest.covers(7.9, 10.0)


# ------------------------------------------------------------------------------ adaptive


def _scaled(c, bid, factor):
    for r in _block(c, bid)["rounds"]:
        r["times_ms"] = {a: t * factor for a, t in r["times_ms"].items()}


ADAPTIVE_EDITS = {
    "reason": (lambda c: _block(c, "53.tail.graph")["adaptive"].update(stop_reason="max_rounds"),
               "53.tail.graph: stopped after 55 rounds by 'max_rounds'; the stopping rule, applied to the recorded "
               "rounds, stops there only by max_seconds or target_reached"),
    "max seconds as target": (lambda c: _block(c, "53.full.graph.cold")["adaptive"].update(stop_reason="target_reached"),
                              "53.full.graph.cold: stopped after 40 rounds by 'target_reached'; the stopping rule, "
                              "applied to the recorded rounds, stops there only by max_seconds"),
    "width": (lambda c: _block(c, "81.full.graph")["adaptive"]["rel_half_widths"].update({"cupy_default/eager": 0.001}),
              "81.full.graph: the half-widths of cupy_default/eager are not the ones the stopping rule derives"),
    "width dropped": (lambda c: _block(c, "81.full.graph")["adaptive"]["rel_half_widths"].pop("cupy_default/eager"),
                      "81.full.graph: the half-widths of cupy_default/eager are not"),
    "outcome dropped": (lambda c: _block(c, "95.full.events").pop("adaptive"),
                        "95.full.events: adaptive protocol without its outcome"),
    "outcome without rule": (lambda c: _block(c, "53.gemm.graph").update(adaptive={"rounds": 25}),
                             "53.gemm.graph: an adaptive outcome without an adaptive protocol"),
    "round count": (lambda c: _block(c, "95.full.events")["adaptive"].update(rounds=20),
                    "the adaptive outcome's round count differs from the rounds kept"),
    "rule malformed": (lambda c: _block(c, "95.full.events")["protocol"]["adaptive"].update(pairs="all"),
                       "95.full.events: the adaptive rule's pairs are not a list"),
    "rule field missing": (lambda c: _block(c, "95.full.events")["protocol"]["adaptive"].pop("check_every"),
                           "95.full.events: the adaptive rule has the fields"),
    "too few rounds": (lambda c: _block(c, "95.full.events")["rounds"].pop(),
                       "95.full.events: 9 rounds outside the adaptive rule's [10, 400]"),
    "timed past max_seconds": (lambda c: _scaled(c, "53.tail.events", 300.0),
                               "53.tail.events: the stopping rule stops after 10 rounds (max_seconds), yet the block "
                               "holds 400"),
    "rule too large": (lambda c: _block(c, "53.tail.events")["protocol"]["adaptive"].update(resamples=10000),
                       "53.tail.events: a stopping rule of 9 pairs x 10000 resamples x 400 rounds and 78 check points "
                       "is more than this verifier replays"),
    "no check point": (lambda c: (_block(c, "81.tail.graph")["rounds"].pop(),
                                  _block(c, "81.tail.graph")["adaptive"].update(rounds=79)),
                       "81.tail.graph: stopped after 79 rounds by 'target_reached'; the stopping rule, applied to the "
                       "recorded rounds, does not stop there"),
}


@pytest.mark.parametrize("edit", sorted(ADAPTIVE_EDITS))
def test_an_adaptive_outcome_that_does_not_follow_fails(extended, edit):
    fn, fragment = ADAPTIVE_EDITS[edit]
    found = _messages(edited(extended, fn))
    assert any(fragment in m for m in found), found


def test_the_adaptive_rule_reads_back_what_the_protocol_records_and_its_lazy_test_is_exact():
    rule = timing.AdaptiveRule(max_seconds=6.0, pairs=(("a", "b"), ("c", "b")))
    doc = json.loads(json.dumps(timing.TimingProtocol("graph", 8, 10, 5, 913, adaptive=rule).to_doc()))
    assert timing.AdaptiveRule.from_doc(doc["adaptive"]) == rule
    for bad in ({**doc["adaptive"], "min_rounds": 0}, {**doc["adaptive"], "max_rounds": 5},
                {**doc["adaptive"], "max_seconds": True}, {**doc["adaptive"], "extra": 1}, [1]):
        with pytest.raises(ValueError):
            timing.AdaptiveRule.from_doc(bad)
    assert [n for n in range(30) if timing.is_check_point(n, rule)] == [10, 15, 20, 25]
    g = np.random.default_rng(5)
    for n in (10, 15, 40, 120):
        for noise in (0.001, 0.004, 0.01, 0.05):
            rounds = [{"times_ms": {"a": 0.8 * (1 + g.normal(0, noise)), "b": 1.0, "c": 1.0 + g.normal(0, noise) ** 2}}
                      for _ in range(n)]
            ratios = timing.pair_ratios(rounds, rule)
            widths = timing.pair_widths(ratios, rule, n)
            assert timing.within_target(ratios, rule, n) == all(w <= rule.target_rel_half_width for w in widths.values())
            assert timing.stopping_state(rounds, rule, 0.0)[2] == widths
    assert timing.stop_reason(400, rule, 99.0, lambda: True) == "max_rounds"
    assert timing.stop_reason(12, rule, 6.0, lambda: True) == "max_seconds"
    assert timing.stop_reason(9, rule, 0.0, lambda: True) is None
    assert timing.stop_reason(10, timing.AdaptiveRule(), 0.0, lambda: False) == "no_pairs"


def test_half_width_exceeds_decides_most_intervals_from_a_few_resamples(monkeypatch):
    g = np.random.default_rng(2)
    values = list(1 + g.normal(0, 0.05, 400))  # a half-width of about 0.6%, 12 times the limit
    calls = []
    monkeypatch.setattr(stats, "bootstrap_median_ci", lambda *a, **k: calls.append(1))
    assert stats.half_width_exceeds(values, 0.0005, resamples=1000, seed=400) and calls == []


# ------------------------------------------------------------------------ copy and floor


ENGINE_BLOCK_EDITS = {
    "copy bytes": (lambda c: _block(c, "copy.d2d").update(bytes_moved=1 << 32),
                   "block copy.d2d: bytes_moved is not what the engine writes"),
    "copy arms": (lambda c: _block(c, "copy.d2d").update(arms=["elementwise", "memcpy"]),
                  "block copy.d2d: arms is not what the engine writes"),
    "copy extra field": (lambda c: _block(c, "copy.d2d").update(gbps=9999.0),
                         "block copy.d2d: gbps is not what the engine writes"),
    "floor protocol": (lambda c: _block(c, "floor.empty_event_pair")["protocol"].update(warmups=0),
                       "block floor.empty_event_pair: protocol is not what the engine writes"),
    "floor mode": (lambda c: _block(c, "floor.empty_kernel.graph").update(mode="events"),
                   "block floor.empty_kernel.graph: mode is not what the engine writes"),
    "floor id": (lambda c: _block(c, "floor.empty_kernel.graph").update(id="floor.empty_kernel.warm"),
                 "block floor.empty_kernel.warm: not a floor block the engine writes"),
}


@pytest.mark.parametrize("edit", sorted(ENGINE_BLOCK_EDITS))
def test_a_copy_or_floor_block_the_engine_does_not_write_fails(extended, edit):
    fn, fragment = ENGINE_BLOCK_EDITS[edit]
    found = _messages(edited(extended, fn), study=True)
    assert any(fragment in m for m in found), found


def test_the_study_says_which_copy_and_floor_blocks_must_be_there(extended):
    dropped = edited(extended, lambda c: c.docs["timings"].update(
        blocks=[b for b in c.docs["timings"]["blocks"] if b["kind"] not in ("floor", "copy")]))
    (p,) = [p for p in df.study_problems(dropped.study, records(dropped))]
    assert p.expected == ["floor.empty_event_pair", "floor.empty_kernel.events", "floor.empty_kernel.graph",
                             "copy.d2d"]
    if FULL is not None:  # the full profile measures neither: a floor block there is a forgery
        full = read_tar(FULL)
        floor = copy.deepcopy(_block(extended, "floor.empty_event_pair"))
        more = edited(full, lambda c: c.docs["timings"]["blocks"].append(floor))
        assert any("a floor block the study does not measure" in p.message
                   for p in df.study_problems(more.study, records(more)))


def test_the_engines_copy_and_floor_fields_are_the_committed_examples(extended):
    fields = {**extras.floor_fields(), extras.COPY_ID: extras.copy_fields()}
    blocks = {b["id"]: b for b in extended.docs["timings"]["blocks"] if b["kind"] in ("floor", "copy")}
    assert sorted(blocks) == sorted(fields)
    for bid, want in fields.items():
        assert {k: v for k, v in blocks[bid].items() if k != "rounds"} == want
    assert round(extras.copy_gbps(blocks["copy.d2d"])) == 4232


def test_measurement_floor_writes_the_fields_the_verifier_expects(monkeypatch):
    import torch

    calls = []

    def fake_run_block(arms, proto, clocks=None, flush=None):
        calls.append(list(arms))
        return {"protocol": proto.to_doc(), "arms": list(arms), "rounds": []}

    def fake_kernel():
        calls.append("compiled")
        return lambda: None

    monkeypatch.setattr(extras, "run_block", fake_run_block)
    monkeypatch.setattr(extras, "empty_kernel", fake_kernel)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    blocks = extras.measurement_floor(None)
    assert [{k: v for k, v in b.items() if k != "rounds"} for b in blocks] == list(extras.floor_fields().values())
    assert calls == [["empty_event_pair"], "compiled", ["empty_kernel"], ["empty_kernel"]]  # compiled once, after


# ------------------------------------------------------------------------------------ GEMM


GEMM_EDITS = {
    "flops": (lambda c: _block(c, "95.gemm.graph").update(flops=1), "95.gemm.graph: the FLOP count is not 2 B K H"),
    "rows": (lambda c: _block(c, "95.gemm.graph").update(shape=[512, 8192]),
             "95.gemm.graph: the GEMM's output has 512 rows, the task's timing input 1024"),
    "width": (lambda c: _block(c, "95.gemm.graph").update(shape=[1024, 4096], flops=2 * 1024 * 8192 * 4096),
              "95.gemm.graph: the GEMM's output 1024 x 4096 is not the size of the task's output"),
    "no input shape": (lambda c: c.docs["correctness"]["tasks"]["95"]["timing_input"].pop("shape"),
                       "95.gemm.events: its FLOP count cannot be derived"),
}


@pytest.mark.parametrize("edit", sorted(GEMM_EDITS))
def test_a_gemm_flop_count_that_does_not_follow_from_the_shapes_fails(extended, edit):
    fn, fragment = GEMM_EDITS[edit]
    found = _messages(edited(extended, fn))
    assert any(fragment in m for m in found), found


def test_gemm_flops_and_rate():
    assert extras.gemm_flops(2048, 8192, 8192) == 274877906944
    assert extras.tflops(274877906944, 5.4396) == pytest.approx(50.53, abs=0.01)


# ------------------------------------------------------------------- REPORT.md's rounds


def test_from_format_5_the_timing_tables_give_the_rounds_each_block_holds(whole):
    t = whole.docs["timings"]
    old, new = report.timing_section(t, 3), report.timing_section(t, pack.FORMAT_VERSION)
    assert "| 53.tail.events | 2048x8192 | 10 rounds x 5 invocations" in old  # the format 3 text, kept
    assert "| 53.tail.events | 2048x8192 | 400 rounds (adaptive, 10 to 400) x 5 invocations" in new
    assert "| 53.tail.graph | 2048x8192 | 55 rounds (adaptive, 10 to 400) x 5 invocations" in new
    assert "| 53.gemm.events | 2048x8192 | 25 rounds x 5 invocations" in new  # not adaptive: the same
    assert report.timing_section(t, 4) == old


@pytest.mark.slow
def test_the_extended_example_as_format_5_passes(tmp_path):
    """Repacked as format 5 (bundle.json, bag-info, an RO-Crate file, REPORT.md rendered as its
    packer renders it), the committed extended example verifies PASS."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent / "corpus"))
    import make_corpus as mc

    cd = next(m for m in mc._EXTRA if m.__name__.endswith("cases_derived"))
    ext = mc.load_good(cd.extended_example())
    f = dict(ext.files)
    info = cd._as_format_5(f, ext.info())
    cd._trust().reforge(f)
    assert b"400 rounds (adaptive, 10 to 400)" in f["data/REPORT.md"]
    payload = {p[len("data/"):]: b for p, b in f.items() if p.startswith("data/")}
    rend = {p[len("renderings/"):]: b for p, b in f.items() if p.startswith("renderings/")}
    bag = mc.with_summary(pack.make_bag(ext.top, payload, info, renderings=rend))
    out = tmp_path / "f5.tar"
    out.write_bytes(pack.tar_bytes(bag, mtime=ext.mtime))
    rep = verify_archive(out, level="static")
    assert rep.verdict == "PASS", [p for t in rep.tiers for p in t.problems][:5]
