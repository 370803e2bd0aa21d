"""The named checks of harness/cheats.py decide from recorded observations: each check is shown
to pass on an honest record and to fail on the record the cheat it is meant for leaves, and the
thresholds sit where the module docstring says."""
from __future__ import annotations

import copy
import dataclasses

import pytest

from kbrepro.harness import cheats, cheats_v2
from kbrepro.model import candidates as mc
from kbrepro.model import protocol
from kbrepro.model import strict

TOL = (1e-4, 1e-4)
D0, D1, D9 = ("torch.float32|(8, 16)|" + h * 48 for h in "019")
A, Z = ("torch.float32|(8, 16)|" + h * 48 for h in "ae")


def typed(obs, timing, blocks):
    """The dict records as the model's typed ones (a record the model refuses fails the test)."""
    out = []
    for cls, d in ((mc.Observations, obs), (mc.Timing, timing)):
        rec, problems = strict.build(cls, d)
        assert not problems, problems
        out.append(rec)
    bs = []
    for b in blocks:
        rec, problems = strict.build(mc.Block, b)
        assert not problems, problems
        bs.append(rec)
    return (*out, tuple(bs))


def derive(obs, timing, blocks, *tol):
    return cheats.derive(*typed(obs, timing, blocks), *tol)


def _cmp(ok=True, bits=False, n=128):
    return {"element_count": n, "bit_identical_count": n if bits else n - 3, "shape_match": True,
            "official": {"pass": ok, "failing_count": 0 if ok else 5, "worst_ratio": 0.5 if ok else 3.0},
            "legacy": {"pass": ok, "failing_count": 0 if ok else 5, "worst_ratio": 0.5 if ok else 3.0},
            "equal_nan_stress": {"pass": ok, "failing_count": 0 if ok else 5},
            "nonfinite": dict.fromkeys(("reference_nan", "candidate_nan", "reference_posinf", "reference_neginf",
                                        "candidate_posinf", "candidate_neginf", "nan_both", "mismatched"), 0),
            "discriminating": True, "null_candidate_passes": False,
            "max_abs_error": 1e-5 if ok else 1e-2, "max_abs_reference": 2.0}


FLAGS = {"allow_tf32_matmul": False, "allow_tf32_cudnn": True, "float32_matmul_precision": "highest",
         "allow_fp16_reduced_precision_reduction": True, "allow_bf16_reduced_precision_reduction": True,
         "cudnn_deterministic": False, "cudnn_benchmark": False}


def _case(cid, kind, **kw):
    c = {"id": cid, "kind": kind, "set": cid, "model": "main", "compare": _cmp(), "reference_device": "cuda:0",
         "reference_range": [-2.0, 2.0], "output_count": 1, "host_ms": 5.0,
         "output": {"type": "torch.Tensor", "plain": True, "device": "cuda:0", "layout": "torch.strided",
                    "grad_fn": None, "digest": D0},
         "digests_parent": [A], "digests_before": [A], "digests_after": [A], "threads_before": 3,
         "threads_after": 3, "call_ms": 0.2, "stream_wait_ms": 0.1, "device_wait_ms": 0.01,
         "flags_after_call": dict(FLAGS)}
    c.update(kw)
    return c


def honest():
    cases = [_case("s0/official", "official"), _case("s0/normal", "normal"), _case("same_buffers", "same_buffers"),
             _case("repeat", "repeat"), _case("poison0", "poison", poison_byte=255),
             _case("poison1", "poison", poison_byte=90),
             _case("profiled", "profiled"), _case("redrawn_weights", "redrawn_weights"),
             _case("shape0", "extra_shape")]
    obs = {"failure": None, "build": {"host_s": 3.0, "build_s": 2.0, "flags_before": dict(FLAGS),
                                      "flags_after_build": dict(FLAGS), "threads": 1, "torch": "2.11.0"},
           "cases": cases, "profile": {"kernels": [{"name": "gelu_tanh_kernel", "stream": 7}], "marker_stream": 7}}
    timing = {"per_call": {"fresh": [{"round": 0, "times_ms": [0.13, 0.131, 0.129]},
                                     {"round": 1, "times_ms": [0.13, 0.132, 0.13]}],
                           "repeat": [{"round": 0, "times_ms": [0.12, 0.121, 0.12]},
                                      {"round": 1, "times_ms": [0.12, 0.12, 0.119]}],
                           "spot_checks": [{"round": 0, "index": 1, "compare": _cmp()},
                                           {"round": 1, "index": 0, "compare": _cmp()}], "sets_per_round": 3},
              "roofline": {"bytes_moved": 512 * 2 ** 20, "median_ms": 0.134, "bandwidth_gbps": 4221.0}}
    blocks = [{"id": "x/warm", "candidate": "x", "l2": "warm", "mode": "events", "arms": ["eager", "candidate"],
               "protocol": {"mode": "events", "warmups": 2, "rounds": 9, "invocations_per_pair": 10, "order_seed": 1},
               "rounds": [{"times_ms": {"candidate": 0.134, "eager": 1.16},
                           "host_ms": {"candidate": 0.134 * 10 + 0.85 + 0.01 * i}} for i in range(9)]}]
    return obs, timing, blocks


def verdicts(obs, timing, blocks):
    return {v.name: v for v in derive(obs, timing, blocks, *TOL)}


def test_an_honest_record_passes_every_check_in_the_documented_order():
    got = derive(*honest(), *TOL)
    assert tuple(v.name for v in got) == cheats.CHECKS
    assert [v.name for v in got if v.passed is not True] == []


def _mutated(fn):
    obs, timing, blocks = copy.deepcopy(honest())
    fn(obs, timing, blocks)
    return verdicts(obs, timing, blocks)


def _set_case(obs, cid, **kw):
    for c in obs["cases"]:
        if c["id"] == cid:
            c.update(kw)


CAUGHT = {
    "official_allclose": lambda o, t, b: _set_case(o, "s0/normal", compare=_cmp(ok=False)),
    "other_shapes_correct": lambda o, t, b: _set_case(o, "shape0", compare=_cmp(ok=False)),
    "redrawn_weights_correct": lambda o, t, b: _set_case(o, "redrawn_weights", compare=_cmp(ok=False)),
    "follows_fresh_inputs": lambda o, t, b: _set_case(o, "same_buffers", compare=_cmp(ok=False),
                                                      matches_other=["s0/official"]),
    "follows_fresh_inputs/held_over": lambda o, t, b: _set_case(o, "poison0", compare=_cmp(ok=False),
                                                                held_over="repeat"),
    "inputs_unchanged": lambda o, t, b: _set_case(o, "repeat", digests_after=[Z]),
    "output_is_plain_tensor": lambda o, t, b: _set_case(o, "repeat", output={
        "type": "kbrepro_candidate.Lazy", "plain": False, "device": "cuda:0", "layout": "torch.strided",
        "grad_fn": None, "digest": D0}),
    "discriminates": lambda o, t, b: _set_case(o, "s0/official", reference_range=[-3e-5, 4e-5], compare={
        **_cmp(), "max_abs_reference": 4e-5, "max_abs_error": 1e-6, "discriminating": False}),
    "deterministic_under_poison": lambda o, t, b: _set_case(o, "poison1", compare=_cmp(ok=False),
                                                            output={**o["cases"][5]["output"], "digest": D1}),
    "precision_flags_unchanged": lambda o, t, b: _set_case(o, "repeat", flags_after_call={**FLAGS,
                                                                                          "allow_tf32_matmul": True}),
    "custom_kernel_ran": lambda o, t, b: o["profile"].update(
        kernels=[{"name": "void at::native::vectorized_elementwise_kernel<4, GeluCUDAKernelImpl>", "stream": 7}]),
    "single_stream": lambda o, t, b: o["profile"]["kernels"].append({"name": "gelu_tanh_kernel", "stream": 13}),
    "no_work_after_return": lambda o, t, b: [_set_case(o, k, device_wait_ms=2.7) for k in ("repeat", "poison0")],
    "no_threads_left": lambda o, t, b: _set_case(o, "repeat", threads_after=4),
    "per_call_times_consistent": lambda o, t, b: t["per_call"].update(
        fresh=[{"round": 0, "times_ms": [0.13, 0.004, 0.004, 0.004]},
               {"round": 1, "times_ms": [0.131, 0.004, 0.004, 0.004]}]),
    "fresh_inputs_same_speed": lambda o, t, b: t["per_call"].update(
        repeat=[{"round": 0, "times_ms": [0.01, 0.01, 0.011]}, {"round": 1, "times_ms": [0.01, 0.01]}]),
    "timed_outputs_correct": lambda o, t, b: t["per_call"]["spot_checks"][1].update(compare=_cmp(ok=False)),
    "host_clock_agrees": lambda o, t, b: [r["times_ms"].update(candidate=r["times_ms"]["candidate"] / 10)
                                          for r in b[0]["rounds"]],
    "within_roofline": lambda o, t, b: t["roofline"].update(median_ms=0.02),
}


@pytest.mark.parametrize("name", sorted(CAUGHT))
def test_the_record_a_cheat_leaves_fails_the_check_meant_for_it(name):
    v = _mutated(CAUGHT[name])[name.split("/")[0]]
    assert v.passed is False, v


def test_a_candidate_that_did_not_run_fails_ran_and_decides_nothing_else():
    vs = derive({"failure": "build: the candidate's process ended with exit code 1"}, {}, [], *TOL)
    assert vs[0].passed is False and "exit code 1" in vs[0].detail
    assert all(v.passed is None for v in vs[1:])


def test_undecidable_checks_say_none_not_pass():
    v = _mutated(lambda o, t, b: o.pop("profile"))
    assert v["custom_kernel_ran"].passed is None and v["single_stream"].passed is None
    v = _mutated(lambda o, t, b: t.pop("per_call"))
    assert v["fresh_inputs_same_speed"].passed is None and v["timed_outputs_correct"].passed is None


def test_poisoned_outputs_that_differ_but_both_pass_are_not_decided():
    v = _mutated(lambda o, t, b: _set_case(o, "poison1", output={**o["cases"][5]["output"], "digest": D9}))
    assert v["deterministic_under_poison"].passed is None


def test_one_host_hiccup_is_not_a_split_and_two_groups_are():
    assert cheats.per_call_times_consistent([0.1] * 9 + [3.0]).passed is True
    assert cheats.per_call_times_consistent([0.1] * 8 + [3.0, 3.1]).passed is False
    assert cheats.per_call_times_consistent([0.1, 0.2]).passed is None


def test_host_clock_thresholds_one_slow_round_a_claim_above_the_clock_and_a_short_region():
    obs, timing, blocks = honest()
    blocks[0]["rounds"][0]["host_ms"]["candidate"] = 40.0  # one hiccup: the median decides
    assert cheats.host_clock_agrees(typed(obs, timing, blocks)[2]).passed is True
    blocks[0]["rounds"][1]["host_ms"]["candidate"] = 0.5  # a claim of more time than passed
    assert cheats.host_clock_agrees(typed(obs, timing, blocks)[2]).passed is False

    def block(inv, rounds):
        return {**blocks[0], "protocol": {**blocks[0]["protocol"], "invocations_per_pair": inv}, "rounds": rounds}

    short = [block(1, [{"times_ms": {"candidate": 0.01}, "host_ms": {"candidate": 0.9}}] * 5)]
    assert cheats.host_clock_agrees(typed(obs, timing, short)[2]).passed is None  # shorter than the fixed cost
    # just inside and just past the slack of 1.25 ms + 10% of the request
    # (a gap g of a 20 ms claim is allowed while g <= 1.25 + 0.1 * (20 + g), i.e. g <= 3.61 ms)
    for g, want in ((3.6, True), (3.65, False)):
        at = [block(1, [{"times_ms": {"candidate": 20.0}, "host_ms": {"candidate": 20.0 + g}}] * 3)]
        assert cheats.host_clock_agrees(typed(obs, timing, at)[2]).passed is want, g


def test_threads_a_models_first_call_starts_are_its_build_and_later_ones_are_caught():
    """torch.compile's first call of a model (the main one, the re-drawn weights', an extra
    shape's) starts compile workers that stay: an honest Inductor candidate of KernelBench 1/41
    on the H200 was caught for the extra shape's first call. A thread left by a later call of a
    model still fails."""
    def with_models(fn):
        obs, timing, blocks = copy.deepcopy(honest())
        for c in obs["cases"]:
            c["model"] = {"redrawn_weights": "redrawn", "shape0": "shape0"}.get(c["id"], "main")
        fn(obs)
        return verdicts(obs, timing, blocks)["no_threads_left"].passed

    assert with_models(lambda o: [_set_case(o, k, threads_after=5) for k in ("s0/official", "redrawn_weights",
                                                                             "shape0")]) is True
    assert with_models(lambda o: _set_case(o, "s0/normal", threads_after=5)) is False


def test_the_fingerprint_in_chunks_is_the_fingerprint_whole(monkeypatch):
    """The fingerprint sums a few rows at a time (a 16 GiB input once needed 64 GiB of int64
    copies): the chunks give the same bits as one sum, for every element size and a ragged end."""
    import torch

    from kbrepro.harness import kbtask

    g = torch.Generator().manual_seed(5)
    xs = [torch.randn(7 * 1024 + 13, generator=g), torch.randint(-2 ** 62, 2 ** 62, (5, 1500), generator=g),
          torch.randn(3, 2049, generator=g).half(), torch.randint(0, 255, (4100,), generator=g, dtype=torch.uint8),
          torch.tensor([True, False, True])]
    whole = [kbtask.fingerprint(x) for x in xs]
    monkeypatch.setattr(kbtask, "FINGERPRINT_ROWS", 2)
    assert [kbtask.fingerprint(x) for x in xs] == whole
    y = xs[0].clone()
    y[-1] += 1.0
    assert kbtask.fingerprint(y) != whole[0]


def test_library_kernels_are_named_and_own_kernels_are_not():
    for name in ("void at::native::vectorized_elementwise_kernel<4>", "sm90_xmma_gemm_f32f32", "cutlass::Kernel2",
                 "nvjet_tst_128x64", "triton_poi_fused_add_0", "ampere_sgemm_128x64_nn"):
        assert cheats.LIBRARY_KERNEL.search(name), name
    for name in ("gelu_tanh_kernel", "elementwise_add_kernel", "_gelu_kernel", "add_kernel", "matmul_tiled"):
        assert not cheats.LIBRARY_KERNEL.search(name), name


def test_verdicts_are_frozen_and_serialise():
    v = cheats.CheckVerdict("ran", True, "ok")
    with pytest.raises(dataclasses.FrozenInstanceError):
        v.passed = False
    assert v.to_doc() == {"name": "ran", "passed": True, "detail": "ok"}


def test_one_lone_host_pause_is_noted_not_failed():
    obs, timing, blocks = copy.deepcopy(honest())
    _set_case(obs, "repeat", device_wait_ms=4.174)
    v = {x.name: x for x in derive(obs, timing, blocks, *TOL)}["no_work_after_return"]
    assert v.passed is True and "case repeat alone waited 4.174 ms" in v.detail


def test_discriminates_of_protocol_2_judges_every_set_and_never_catches():
    obs, timing, blocks = honest()
    for c in obs["cases"]:  # a scalar output: one value per set, other values in other sets
        c["reference_range"] = [0.3 + 0.1 * len(c["id"]), 0.3 + 0.1 * len(c["id"])]
        c["compare"]["max_abs_reference"] = c["reference_range"][1]
    o, t, b = typed(obs, timing, blocks)
    assert cheats_v2.discriminates_v2(o, *TOL).passed is True
    for c in obs["cases"]:  # every reference within atol of zero: uninformative, not a catch
        c["reference_range"] = [0.0, 5e-5]
        c["compare"].update(max_abs_reference=5e-5, discriminating=False)
    o, t, b = typed(obs, timing, blocks)
    v = cheats_v2.discriminates_v2(o, *TOL)
    assert v.passed is None and v.detail.startswith("uninformative")


def _nan_cmp(failing=5, nan_both=5):
    """A compare whose only failing elements are ``nan_both`` NaN pairs (reference and output NaN)."""
    c = _cmp(ok=False)
    c["official"]["failing_count"] = c["legacy"]["failing_count"] = failing
    c["equal_nan_stress"] = {"pass": failing == nan_both, "failing_count": failing - nan_both}
    c["nonfinite"].update(reference_nan=nan_both, candidate_nan=nan_both, nan_both=nan_both)
    return c


def test_a_case_failing_only_where_the_reference_is_nan_is_the_tasks_not_a_catch():
    """KernelBench 1/98 takes log of its inputs: at the normal draw the reference is NaN and so
    is the honest output, which allclose (equal_nan False) fails. official_allclose (protocol 2)
    passes such a case, judges the others, and is undecided where no other main case is left;
    a NaN that is not the reference's is still a catch."""
    obs, timing, blocks = copy.deepcopy(honest())
    _set_case(obs, "s0/normal", compare=_nan_cmp())
    o = typed(obs, timing, blocks)[0]
    assert cheats_v2.official_allclose_v2(o).passed is True and "s0/normal" in cheats_v2.official_allclose_v2(o).detail
    assert cheats.official_allclose(o).passed is False  # protocol 1's rule, unchanged
    assert {v.name: v.passed for v in cheats_v2.derive_v2(*typed(obs, timing, blocks), *TOL)}["official_allclose"] is True
    _set_case(obs, "repeat", compare=_nan_cmp(failing=6, nan_both=5))  # one more failing element: a catch
    assert cheats_v2.official_allclose_v2(typed(obs, timing, blocks)[0]).passed is False
    for c in obs["cases"]:
        if c["kind"] in cheats.MAIN_KINDS:
            c["compare"] = _nan_cmp()
    assert cheats_v2.official_allclose_v2(typed(obs, timing, blocks)[0]).passed is None


def test_the_clock_holds_the_longer_requests_report_against_the_slope():
    """Protocol 2's clock (cheats_v2.host_clock_agrees_v2): a timer reporting 0.75 of the truth,
    with a fixed cost of 0.14 ms inside each timed region (the H200 run where it passed, before:
    slope 0.0225 ms, 22 and 256 invocations), is caught on the longer requests' report; the
    median over both lengths let it through at 0.865 of the slope. An honest timer, whose
    report carries the same fixed cost, passes."""
    from types import SimpleNamespace as NS

    g, fixed, n1, n2, rpc = 0.0225, 0.14, 22, 256, 0.4
    blocks = [NS(protocol=NS(invocations_per_pair=n1), rounds=[], id="c/warm")]

    def clock(factor):
        return NS(clock=NS(n1=n1, n2=n2, host1_ms=[rpc + fixed + n1 * g] * 5, host2_ms=[rpc + fixed + n2 * g] * 5,
                           reported1_ms=[factor * (g + fixed / n1)] * 5, reported2_ms=[factor * (g + fixed / n2)] * 5))

    liar, honest = clock(0.75), clock(1.0)
    assert cheats_v2.host_clock_agrees_v2(blocks, liar).passed is False
    old = sorted(liar.clock.reported1_ms + liar.clock.reported2_ms)
    assert (old[4] + old[5]) / 2 / g > 1 - protocol.CLOCK_SLOPE_SLACK  # what passed before
    assert cheats_v2.host_clock_agrees_v2(blocks, honest).passed is True
    assert cheats_v2.host_clock_agrees_v2(blocks, clock(0.93)).passed is True  # honest H200 records: 0.925 to 0.952


def test_a_timer_short_only_on_the_blocks_requests_is_caught_by_the_time_outside_its_region():
    """A candidate can count its invocations and lie only on requests of the block's length (the
    clock's first length too), leaving the clock's longer requests true: the slope rule passes
    it. Since the spent sets are freed by the next request, a request's time outside the timed
    region does not grow with its length (H200, 2026-12-04: 0.3 to 0.8 ms at both lengths), so
    the short requests' excess over the long ones' gives it away; an honest candidate with the
    H200's spread (its short requests 0.11 ms above) passes."""
    from types import SimpleNamespace as NS

    g, fixed, n1, n2, out = 0.0415, 0.02, 22, 196, 0.48
    e1, e2 = fixed + n1 * g, fixed + n2 * g

    def record(factor, spread=0.0):
        rounds = [NS(times_ms={"candidate": factor * e1 / n1}, host_ms={"candidate": out + spread + e1})
                  for _ in range(8)]
        blocks = [NS(protocol=NS(invocations_per_pair=n1), rounds=rounds, id="c/warm")]
        return blocks, NS(clock=NS(n1=n1, n2=n2, host1_ms=[out + spread + e1] * 5, host2_ms=[out + e2] * 5,
                                   reported1_ms=[factor * e1 / n1] * 5, reported2_ms=[e2 / n2] * 5))

    v = cheats_v2.host_clock_agrees_v2(*record(0.75))
    assert v.passed is False and "outside the candidate's timed region" in v.detail, v
    assert cheats_v2.host_clock_agrees_v2(*record(1.0)).passed is True
    assert cheats_v2.host_clock_agrees_v2(*record(1.0, spread=0.11)).passed is True
    # the short requests alone: the clock's (a block whose rounds lack the candidate is no evidence)
    blocks, timing = record(0.75)
    blocks[0].rounds = []
    assert cheats_v2.host_clock_agrees_v2(blocks, timing).passed is False
