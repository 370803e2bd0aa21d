"""S12: a GPU not in the table with compute_capability null is bounded by UNKNOWN_GPU_PEAK_GBPS
(8000 GB/s x 1.15 = 9200), not by Hopper's 4900 (the cubins are sm_90a, the compute capability
field merely nulled). Task 53's fused tails 4x faster (8.9 TB/s) on "NVIDIA Hopper HBM3e" with
compute capability null: PASS; with compute capability 9.0: refused.
Run: cd tests && python -m forgeries.r3_s12_tail_bound_cc_null (held by tests/test_forgeries_round2.py)"""
from forgeries.round3 import TIMINGS, env_fields, tails_fast, forge_study as forge_and_verify


def gpu(cc_null):
    def f(fl):
        fl["gpu_name"].update(value="NVIDIA Hopper HBM3e")
        if cc_null:
            fl["compute_capability"].update(value=None, reason="not read")
    return env_fields(f)


if __name__ == "__main__":
    a, _ = forge_and_verify([(TIMINGS, tails_fast), gpu(False)], "control: fused tails x0.25, unknown Hopper, cc 9.0 (refused)")
    b, vb = forge_and_verify([(TIMINGS, tails_fast), gpu(True)], "attack: the same, compute_capability null")
    print(f"\nRESULT: control exit {a}; attack exit {b} [{vb}]" + ("  -> ATTACK SUCCEEDED" if a == 1 and b == 0 else ""))
