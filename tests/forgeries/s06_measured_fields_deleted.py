"""S06: fields a measured run always records, and which a cross-check reads, may be deleted: the
check then quietly does not run. Each deletion below verifies PASS (exit 0): the timing input's seed
(checked against the study only "if 'seed' in ti"), run.json compile_cache (the CUDA_CACHE_DISABLE
cross-check with environment.json and every compile variant, the NVRTC-cache trap of docs/traps.md),
the predicate witness's torch_version (checked against environment.json), the tail blocks'
bytes_moved, every block's shape, every round's NVML clocks (throttle evidence).
Run: cd tests && python -m forgeries.s06_measured_fields_deleted (held by tests/test_forgeries_round2.py)"""
from forgeries.common import CORRECTNESS, RUN, TIMINGS, forge_study


CASES = {
    "timing_input.seed deleted": [(CORRECTNESS, lambda d: [t["timing_input"].pop("seed") for t in d["tasks"].values()])],
    "run.json compile_cache deleted": [(RUN, lambda d: d.pop("compile_cache"))],
    "predicate_direction.torch_version deleted": [(CORRECTNESS, lambda d: d["predicate_direction"].pop("torch_version"))],
    "tail blocks' bytes_moved deleted": [(TIMINGS, lambda d: [b.pop("bytes_moved", None) for b in d["blocks"]])],
    "every block's shape deleted": [(TIMINGS, lambda d: [b.pop("shape", None) for b in d["blocks"]])],
    "every round's clocks deleted": [(TIMINGS, lambda d: [r.pop("clocks", None) for b in d["blocks"] for r in b["rounds"]])],
}

if __name__ == "__main__":
    res = {k: forge_study(v, k) for k, v in CASES.items()}
    print("\nRESULT: " + "; ".join(f"{k}: exit {v}" for k, v in res.items()))
