"""On one GPU (the lead's H200): a candidate run sharded into cases (``--shards 1``: two case
processes, one after the other, on the one GPU) gives the same documents, apart from timings,
clocks, host and case fields, as the same candidates run unsharded; and each case records the
GPU it ran on (hashed UUID, driver, clocks). Needs a CUDA GPU with CuPy and a KernelBench
checkout at the pinned commit ($KBREPRO_KERNELBENCH or KernelBench/)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "examples"))
HERE = Path(__file__).resolve().parent / "gpu_candidates"


@pytest.mark.gpu
def test_sharded_over_two_processes_equals_the_unsharded_run(tmp_path):
    from kbrepro.harness.kernelbench import resolve_checkout

    import inductor_candidate as ic
    import shard_equivalence as se

    kb = resolve_checkout(None)
    if not (kb / "KernelBench" / "level1").is_dir():
        pytest.skip("no KernelBench checkout")
    task = (kb / "KernelBench" / "level1").glob("88_*.py").__next__().read_bytes()
    (tmp_path / "inductor_1_88.py").write_bytes(ic.candidate_source(task))
    items = [(HERE / "honest_gelu_triton.py", "1/88"), (tmp_path / "inductor_1_88.py", "1/88")]
    out = se.compare(tmp_path / "w", items, profile="quick", sizes={"batch_size": 1024}, shards=1, device="cuda")
    assert out["failed"] == [] and out["inputs_differ"] == []
    assert out["documents"] == {"results/candidates.json": [], "results/environment.json": []}, out["documents"]
    doc = json.loads((tmp_path / "w" / "sharded" / "results" / "candidates.json").read_bytes())
    ran = [c["ran_on"] for c in doc["cases"]]
    assert all(r["device"] == "cuda" and r["gpu_uuid_sha256"] and r["gpu_name"] for r in ran)
    assert len({r["gpu_uuid_sha256"] for r in ran}) == 1  # one GPU, two processes one after the other
    assert all(isinstance(r["sm_clock_mhz"], int) for r in ran), ran  # NVML (the nvml extra) found the GPU by UUID
