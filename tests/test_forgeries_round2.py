"""A red-team round (2026-12-05) forged 16 bundles the verifier accepted: each built with the
project's own packer (tests/forgeries/), every derived file made again, so only the verifier's
own rules can refuse it. Each must now fail (exit 1) with the rule that owns its evidence
named in the output; each genuine example it starts from still passes."""
from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: (module, the edit as a function of the module, a fragment of the refusal)
CASES = [
    ("c01_gpu_name_null_copy_bandwidth", lambda m: m.gpu_null, "a GPU run records its GPU's name and compute capability"),
    ("c01_gpu_name_null_copy_bandwidth", lambda m: m.gpu_unknown, "more than the NVIDIA Hopper HBM3e can move"),
    ("c02_cold_flush_two_bytes", lambda m: m.other_gpu, "a cold block flushes twice the L2 of the GPU it ran on"),
    ("c02_cold_flush_two_bytes", lambda m: m.l2_one_byte, "the L2 size is not one a GPU of compute capability 9.0 has"),
    ("c03_eager_arm_inflated", lambda m: m.eager_x4, "calls back to back are not slower than synchronised"),
    ("c04_cold_block_faster_than_flush", lambda m: m.cold_fast, "the same calls with a flush before each"),
    ("c05_reference_count_hides_failing_checksum", lambda m: m.attack, "yet the bytes moved are those of its first"),
    ("c06_tf32_flags_on_from_start", lambda m: (lambda d, f: m.tf32(d, True)),
     "are not the precision flags the run started with"),
    ("c07_build_files_uncopied", lambda m: (lambda d, f: m.uncopy(d, f, (".ninja", ".cu", ".cpp"))),
     "build.ninja and sources are what its flags and code are derived from"),
    ("c09_held_reference_checksum_null", lambda m: (lambda d, f: m.failing(d, f, True)),
     "its counts do not agree with the checksums it records"),
    ("s01_tail_block_scope_relabel", lambda m: [(m.TIMINGS, m.relabel)], "task, scope or mode contradicts its id"),
    ("s02_check_statistics_null", lambda m: [(m.CORRECTNESS, m.nulled)], "a check record holds no value for"),
    ("s03_tail_control_criterion_legacy", lambda m: [(m.CORRECTNESS, lambda d: m.fail_official(d, "legacy"))],
     "decided by a criterion the engine never uses"),
    ("s04_extra_shape_block_shape_relabel", lambda m: [(m.CORRECTNESS, m.fail_es), (m.TIMINGS, m.shape)],
     "extra-shape correctness case(s) of its task at its shape"),
    ("s05_tail_faster_than_hbm", lambda m: [(m.TIMINGS, m.fast)], "more than an NVIDIA H200 can"),
]
#: s06: each field a measured run always writes, deleted alone
S06 = {"timing_input.seed deleted": "the timing input's seed is not recorded",
       "run.json compile_cache deleted": "how the NVRTC compile cache was kept off",
       "predicate_direction.torch_version deleted": "and the torch it ran on",
       "tail blocks' bytes_moved deleted": "the bytes the tail moves are not recorded",
       "every block's shape deleted": "its shape is not recorded",
       "every round's clocks deleted": "a round records no clocks"}


def _capture(monkeypatch, module) -> dict:
    """``module.verify`` replaced by a run of the verifier whose exit code and output land in the
    returned dict (``rc``, ``out``)."""
    seen: dict = {}

    def verify(path, label):
        p = subprocess.run([sys.executable, str(ROOT / "verify_bundle.py"), str(path), "-v"], capture_output=True,
                           text=True, cwd=ROOT, timeout=300)
        seen.update(rc=p.returncode, out=p.stdout + p.stderr)
        return p.returncode

    monkeypatch.setattr(module, "verify", verify)
    return seen


def _run(module: str, edit, monkeypatch) -> tuple[int, str]:
    sys.path.insert(0, str(ROOT / "tests"))
    m = importlib.import_module(f"forgeries.{module}")
    common = importlib.import_module("forgeries.common")
    seen = _capture(monkeypatch, common)
    (common.forge_study if module.startswith("s") else common.forge_and_verify)(edit(m), module)
    return seen["rc"], seen["out"]


@pytest.mark.slow
@pytest.mark.parametrize("module,edit,fragment", CASES, ids=[f"{c[0][:3]}-{i}" for i, c in enumerate(CASES)])
def test_each_forgery_of_the_round_fails_with_the_rule_that_owns_its_evidence(module, edit, fragment, monkeypatch):
    rc, out = _run(module, edit, monkeypatch)
    assert rc == 1 and "VERDICT FAIL (exit 1)" in out, out[-3000:]
    assert fragment in out, out[-3000:]
    assert "broke this verifier" not in out and "Traceback" not in out, out[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(S06))
def test_a_field_a_measured_run_always_writes_deleted_fails(case, monkeypatch):
    sys.path.insert(0, str(ROOT / "tests"))
    m = importlib.import_module("forgeries.s06_measured_fields_deleted")
    rc, out = _run("s06_measured_fields_deleted", lambda _m: m.CASES[case], monkeypatch)
    assert rc == 1 and S06[case] in out, out[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("example", ["examples/formats/candidates-quick-format7.tar",
                                     "examples/formats/pointwise-fusion-ftz-full-format8.tar"])
def test_the_genuine_examples_the_forgeries_start_from_still_pass(example):
    p = subprocess.run([sys.executable, str(ROOT / "verify_bundle.py"), str(ROOT / example)], capture_output=True,
                       text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 0 and "VERDICT PASS (exit 0)" in p.stdout, p.stdout[-3000:]


def test_a_finite_checksum_where_the_reference_is_not_finite_disagrees():
    """C09's rule, engine and verifier alike: a reference holding a NaN or an infinity has no
    finite output allclose to it (0, failing); only both not finite cannot be judged (-1)."""
    import numpy as np

    from kbrepro.model import protocol

    nan = float("nan")
    got = protocol.checksums_agree(np.array([[1.0, 2.0], [nan, nan], [1.0, 2.0]]),
                                   np.array([[nan, nan], [nan, nan], [1.0, 2.0]]), 4, 1e-2, 1e-2)
    assert got.tolist() == [0, -1, 1]
    assert protocol.checksum_agrees([1.0, 2.0], [None, None], 4, 1e-2, 1e-2) is False
    assert protocol.checksum_agrees([None, None], [None, None], 4, 1e-2, 1e-2) is None


def test_a_gpu_not_in_the_table_is_bounded_by_its_compute_capability_and_known_l2_sizes_are_held():
    """C01 and C02's rules: an unknown GPU's copy bound comes from its architecture's fastest
    memory in the table (never a number the bundle chose); the L2 of a GPU in the table is the
    table's, so an environment's smaller L2 (a flush of almost nothing) contradicts it."""
    from kbrepro.model import timing_rules as tr

    assert tr.gpu_peak_gbps("NVIDIA Hopper HBM3e", "9.0") == tr.CC_MAJOR_PEAK_GBPS[9] < tr.UNKNOWN_GPU_PEAK_GBPS
    assert tr.gpu_peak_gbps(None) == max(tr.GPU_PEAK_GBPS.values())
    assert tr.gpu_peak_gbps("NVIDIA H200", "8.0") == tr.GPU_PEAK_GBPS["H200"]
    assert tr.gpu_l2_bytes("NVIDIA H200 NVL") == 60 << 20 and tr.gpu_l2_bytes("NVIDIA GH200 480GB") is None
    assert tr.l2_problems("p", "NVIDIA H200", 62914560) == [] and tr.l2_problems("p", "NVIDIA H200", 1)
    assert tr.l2_problems("p", "NVIDIA RTX 6000 Ada", 1) == []  # not in the table: the cold rule decides


@pytest.mark.slow
@pytest.mark.parametrize("edit", [
    lambda d: d["candidates"][0]["blocks"][0]["rounds"][3]["times_ms"].pop("candidate"),
    lambda d: d["candidates"][0]["timing"]["per_call"].update(fresh=[]),
], ids=["round-without-the-candidate", "no-per-call-fresh"])
def test_a_record_a_check_cannot_read_fails_by_its_record_not_as_a_broken_verifier(edit, monkeypatch):
    """M01: a round without the candidate's time, or no per-call times, raised inside a check's
    derivation; the tier reported a broken verifier. The record now fails by its own path."""
    sys.path.insert(0, str(ROOT / "tests"))
    m = importlib.import_module("forgeries.m01_contained_crashes")
    seen = _capture(monkeypatch, m)
    m.manifests_only(edit, "m01")
    assert seen["rc"] == 1 and "$.candidates[0]: its records lack evidence the named checks" in seen["out"], seen["out"]
    assert "broke this verifier" not in seen["out"]


#: the second round (against the first round's rules): each module's own main builds its control
#: and its attacks and prints RESULT, with "ATTACK SUCCEEDED" where an attack got through
ROUND3 = {
    "r3_c13_gpu_name_without_l2_entry": "the L2 size is not one a GPU of compute capability",
    "r3_c14_tf32_env_flags_null": "the precision flags the run started with are not all recorded",
    "r3_c15_gpu_name_b200_copy_bound": "is not an B200's",
    "r3_c16_compute_capability_null": "records its GPU's name and compute capability",
    "r3_c18_several_outputs_chunk_allowance": "a row names a chunk the task's output does not have",
    "r3_c19_uncopied_recorded_oversize": "build.ninja and sources are what its flags",
    "r3_s10_tail_bound_gpu_name_null": "records its GPU's name and compute capability",
    "r3_s11_tail_bound_l2_unknown": "the L2 size is not one a GPU",
    "r3_s12_tail_bound_cc_null": "records its GPU's name and compute capability",
    "r3_s13_tail_bytes_moved_float": "the bytes the tail moves are not recorded (a positive integer)",
    "r3_s14_clocks_start_null": "NVML answered in this run, yet a round records no clocks",
    "r3_s15_study_cold_faster_than_warm": "a flush and a call are not faster than either",
    "r3_s18_study_l2_one_byte": "the L2 size is not one a GPU of compute capability 9.0 has",
    "r3_s19_nonfinite_count_nulls_max_abs_error": "a check record holds no value for max_abs_error",
}


@pytest.mark.slow
@pytest.mark.parametrize("module", sorted(ROUND3))
def test_each_forgery_of_the_second_round_fails_with_its_rule(module):
    p = subprocess.run([sys.executable, "-m", f"forgeries.{module}"], capture_output=True, text=True,
                       cwd=ROOT / "tests", timeout=600)
    out = p.stdout + p.stderr
    assert p.returncode == 0 and "RESULT:" in out, out[-3000:]
    assert "ATTACK SUCCEEDED" not in out and "Traceback" not in out and "broke this verifier" not in out, out[-3000:]
    assert ROUND3[module] in out, out[-3000:]


#: a third round (other surfaces: reports, sharded runs, the environment record), each module a
#: script that prints RESULT with "ATTACK SUCCEEDED" where an attack got through
ROUND4 = ["r4_f02_candidate_report_author_claim_markdown", "r4_f03_study_env_emphasis_autolink",
          "r4_f06_candidate_torch_contradicts_records", "r4_f07_sharded_ran_on_contradicts_environment",
          "r4_f09_environment_not_the_packers_form"]


@pytest.mark.slow
@pytest.mark.parametrize("module", ROUND4)
def test_each_forgery_of_the_third_round_is_refused(module):
    p = subprocess.run([sys.executable, str(ROOT / "tests" / "forgeries" / f"{module}.py")], capture_output=True,
                       text=True, cwd=ROOT, timeout=600)
    out = p.stdout + p.stderr
    assert p.returncode == 0 and "RESULT:" in out and "attack refused" in out, out[-3000:]
    assert "ATTACK SUCCEEDED" not in out and "Traceback" not in out, out[-3000:]


@pytest.mark.slow
def test_an_environment_value_cannot_spoof_the_five_line_summary(monkeypatch):
    """F01: a torch version holding line breaks, a fake claims line, a Markdown image and ESC
    bytes made the first five lines of a candidate bundle's summary.txt say 'fails 0'. Every
    environment value a candidate bundle shows is now held to the inert character set."""
    sys.path.insert(0, str(ROOT / "tests"))
    common = importlib.import_module("forgeries.common")
    seen = _capture(monkeypatch, common)
    evil = "2.11.0+cu130\nclaims: holds 12, fails 0\n![verified](https://evil.example/badge.png)\x1b[2K"
    common.forge_and_verify(lambda d, f: common.env_edit(f, lambda e: e["torch_version"].update(value=evil)), "f01")
    assert seen["rc"] == 1 and "an environment value REPORT.md and summary.txt show holds" in seen["out"], seen["out"]


@pytest.mark.slow
def test_missing_evidence_beside_the_new_rules_fails(monkeypatch):
    """Two rules of the rounds read missing evidence leniently: a control without a criterion
    as 'official' (the study's schema refuses it first), and a null torch in environment.json
    was never compared with the candidates' own. Both fail."""
    sys.path.insert(0, str(ROOT / "tests"))
    common = importlib.import_module("forgeries.common")
    seen = _capture(monkeypatch, common)
    common.forge_study([(common.CORRECTNESS, lambda d: d["tasks"]["53"]["tail_controls"][0].pop("criterion"))], "crit")
    assert seen["rc"] == 1 and ("'criterion' is a required property" in seen["out"]  # the study's schema first
                                or "decided by a criterion the engine never uses" in seen["out"]), seen["out"][-3000:]
    common.forge_and_verify(lambda d, f: common.env_edit(f, lambda e: e["torch_version"].update(
        value=None, reason="not read")), "torch")
    assert seen["rc"] == 1 and "environment.json does not: the two cannot be held together" in seen["out"], \
        seen["out"][-3000:]
