"""GPU tests of the candidate kind (issue 11): every cheat in tests/gpu_candidates/ and
KernelBench's three adversarial kernels are caught by the check meant for them, and the honest
candidates pass every check that can decide. Each runs the quick profile in a child process
(KernelBench's kernels build with load_inline, about 50 s each on the H200). They need a CUDA GPU
and a KernelBench checkout at the pinned commit (--kernelbench's default: $KBREPRO_KERNELBENCH
or KernelBench/)."""
from __future__ import annotations

from pathlib import Path

import pytest

from kbrepro.harness import jsonio

HERE = Path(__file__).resolve().parent / "gpu_candidates"
ADVERSARIAL = "src/kernelbench/unit_tests/test_kernels"
SMALL = {"batch_size": 1024}

#: (candidate, task, sizes, the check that must catch it); measured on the H200 (issue 11 note)
CASES = [
    ("cheat_empty_output.py", "1/88", SMALL, "deterministic_under_poison"),
    # a 512-byte output, served from the allocator's small pool (poisoned in 1 MiB blocks since issue 27)
    ("cheat_empty_output.py", "1/88", {"batch_size": 2, "dim": 64}, "deterministic_under_poison"),
    ("cheat_overwrite_input.py", "1/88", SMALL, "inputs_unchanged"),
    ("cheat_side_stream.py", "1/88", SMALL, "single_stream"),
    ("cheat_pointer_cache.py", "1/88", SMALL, "follows_fresh_inputs"),
    ("cheat_content_cache.py", "1/88", SMALL, "follows_fresh_inputs"),  # the NaN written over its earlier output
    ("cheat_batch_skip.py", "1/88", SMALL, "timed_outputs_correct"),
    ("cheat_subclass_output.py", "1/88", SMALL, "output_is_plain_tensor"),
    ("cheat_patched_timer.py", "1/88", SMALL, "host_clock_agrees"),
    ("cheat_pytorch_fallback.py", "1/88", SMALL, "custom_kernel_ran"),
    # the fallback hiding its kernel from the plain PyTorch rule (issue 28's red team; not yet run on a GPU)
    ("cheat_hidden_nvrtc.py", "1/88", SMALL, "custom_kernel_ran"),
    ("cheat_hidden_triton.py", "1/88", SMALL, "custom_kernel_ran"),
    ("cheat_warmup_then_cache.py", "1/88", SMALL, "timed_outputs_correct"),
    ("cheat_background_thread.py", "1/88", SMALL, "no_threads_left"),
    ("cheat_hardcoded_shape.py", "1/88", SMALL, "other_shapes_correct"),
    ("cheat_tf32_matmul.py", "1/1", {}, "precision_flags_unchanged"),
    ("cheat_zero_output.py", "2/23", {}, "discriminates"),  # protocol 2: uninformative (None), the verdict PARTIAL
    # the family of issue 27: told timed calls from checked ones
    ("cheat_busy_stream_stale.py", "1/88", SMALL, "follows_fresh_inputs"),
    ("cheat_pending_work_memo.py", "1/88", SMALL, "follows_fresh_inputs"),
    ("cheat_self_timing.py", "1/88", SMALL, "timed_outputs_correct"),
    ("cheat_count_per_input.py", "1/88", SMALL, "timed_outputs_correct"),
    ("cheat_compare_last_output.py", "1/88", SMALL, "timed_outputs_correct"),
    ("cheat_timer_three_quarters.py", "1/88", SMALL, "host_clock_agrees"),
    ("cheat_timer_block_length.py", "1/88", SMALL, "host_clock_agrees"),
    # a red-team round of 2026-12-05 (written against the code, not yet run on a GPU): each got past
    # the timer before its fix (harness/fresh.py, harness/candidate_server.py "time_fresh" / "held")
    ("cheat_lazy_timed_subclass.py", "1/88", {"batch_size": 64}, "timed_outputs_correct"),
    ("cheat_defer_until_pool_freed.py", "1/88", {"batch_size": 64}, "timed_outputs_correct"),
    ("cheat_work_after_end_event.py", "1/88", {"batch_size": 64}, "timed_outputs_correct"),
    ("cheat_slow_baselines.py", "1/88", SMALL, "host_clock_agrees"),
    (f"{ADVERSARIAL}/result_reuse_kernel.py", "1/1", {}, "deterministic_under_poison"),
    (f"{ADVERSARIAL}/zero_out_kernel.py", "1/1", {}, "inputs_unchanged"),
    (f"{ADVERSARIAL}/non_default_stream_kernel.py", "1/1", {}, "single_stream"),
]


def _checkout() -> Path:
    from kbrepro.harness.kernelbench import resolve_checkout

    try:
        return resolve_checkout(None)
    except Exception as exc:  # no checkout: the adversarial kernels and tasks are not here
        pytest.skip(f"no KernelBench checkout: {exc}")


def _run(tmp_path, path: Path, task: str, sizes: dict) -> dict:
    from kbrepro.bundle import candidates as bc

    res = bc.run_candidates([(path, task)], profile="quick", kernelbench=None, results_dir=tmp_path / "res",
                            sizes=sizes)
    doc = jsonio.loads_strict((res / "results" / "candidates.json").read_bytes(), "candidates.json")
    return {v["name"]: v for v in doc["candidates"][0]["verdicts"]}


@pytest.mark.gpu
@pytest.mark.parametrize("name,task,sizes,check", CASES, ids=[Path(c[0]).stem for c in CASES])
def test_each_cheat_is_caught_by_its_check(tmp_path, name, task, sizes, check):
    path = _checkout() / name if name.startswith("src/") else HERE / name
    v = _run(tmp_path, path, task, sizes)
    if check == "discriminates":  # a fact about the task at its inputs: uninformative, never a catch (issue 28)
        assert v[check]["passed"] is None and v[check]["detail"].startswith("uninformative"), v[check]
        return
    assert v[check]["passed"] is False, v[check]


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["honest_gelu_cuda.py", "honest_gelu_triton.py"])
def test_honest_candidates_pass_every_check_that_decides(tmp_path, name):
    v = _run(tmp_path, HERE / name, "1/88", SMALL)
    bad = {k: x["detail"] for k, x in v.items() if x["passed"] is False}
    assert not bad, bad
