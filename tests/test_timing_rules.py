"""CPU tests of the adaptive stopping rule, throttle flags and self-test bookkeeping."""
from __future__ import annotations

import numpy as np
import pytest

from kbrepro.harness.selftest import SelfTest, summarise
from kbrepro.harness.timing import AdaptiveRule, TimingProtocol, stopping_state, throttled


def _rounds(ratio, noise, n, seed=0):
    g = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        base = g.uniform(1.0, 1.2)
        out.append({"times_ms": {"a": base * ratio * (1 + g.normal(0, noise)), "b": base}})
    return out


def test_stops_when_the_interval_is_narrow_enough():
    rule = AdaptiveRule(target_rel_half_width=0.005, min_rounds=10, max_rounds=400, max_seconds=1e9, pairs=(("a", "b"),))
    stop, reason, widths = stopping_state(_rounds(0.8, 0.001, 20), rule, 0.0)
    assert stop and reason == "target_reached" and widths["a/b"] < 0.005


def test_keeps_going_while_noisy_and_respects_the_caps():
    rule = AdaptiveRule(target_rel_half_width=0.005, min_rounds=10, max_rounds=50, max_seconds=5.0, pairs=(("a", "b"),))
    noisy = _rounds(0.8, 0.05, 20)
    stop, reason, widths = stopping_state(noisy, rule, 0.1)
    assert not stop and widths["a/b"] > 0.005
    assert stopping_state(noisy, rule, 6.0)[:2] == (True, "max_seconds")
    assert stopping_state(_rounds(0.8, 0.05, 50), rule, 0.1)[:2] == (True, "max_rounds")
    # never before min_rounds, however narrow
    assert stopping_state(_rounds(0.8, 0.0, 5), rule, 0.0)[0] is False


def test_half_width_shrinks_like_one_over_sqrt_n():
    rule = AdaptiveRule(pairs=(("a", "b"),), max_seconds=1e9)
    w40 = stopping_state(_rounds(0.9, 0.02, 40, seed=1), rule, 0)[2]["a/b"]
    w360 = stopping_state(_rounds(0.9, 0.02, 360, seed=1), rule, 0)[2]["a/b"]
    assert 1.8 < w40 / w360 < 5.0  # sqrt(9) = 3, with bootstrap noise


def test_protocol_doc_records_the_rule_and_regime():
    p = TimingProtocol("graph", 8, 10, 5, 913, adaptive=AdaptiveRule(pairs=(("a", "b"),)), l2="cold")
    d = p.to_doc()
    assert d["adaptive"]["target_rel_half_width"] == 0.005 and d["l2"] == "cold"
    assert "adaptive" not in TimingProtocol("graph", 8, 25, 5, 913).to_doc()


def test_throttle_flag_uses_the_slowdown_bits_only():
    assert throttled({"clocks": {"throttle_reasons": 0x4}})      # SW power cap
    assert throttled({"clocks": {"throttle_reasons": 0x40}})     # HW thermal
    assert not throttled({"clocks": {"throttle_reasons": 0x1}})  # GPU idle
    assert not throttled({})


def test_selftest_bookkeeping():
    good = SelfTest("good_control", "ok", (), {"official_allclose": True, "bit_identity": True})
    caught = SelfTest("all_zero", "zeros", ("official_allclose",), {"official_allclose": False, "bit_identity": None})
    missed = SelfTest("mutates_input", "in place", ("input_unchanged",), {"input_unchanged": True})
    false_alarm = SelfTest("good_control", "ok", (), {"official_allclose": True, "input_unchanged": False})
    s = summarise([good, caught])
    assert s["all_as_expected"] is True
    assert s["tests"][1]["failed_checks"] == ["official_allclose"] and s["tests"][1]["caught"]
    assert summarise([missed])["all_as_expected"] is False
    assert summarise([false_alarm])["all_as_expected"] is False
    with pytest.raises(Exception):
        summarise([SelfTest("x", "y", ("a",), None)])
