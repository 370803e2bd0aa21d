"""S11: the study's bound exempts a non-cold block whose bytes are under twice the L2, and the L2 of
a GPU without an L2-table entry is environment.json's word (or None, which exempts every non-cold
block). (a) GPU "NVIDIA GH200 480GB" (in the peak table, not the L2 table) with l2_cache_bytes
128 MiB: the 128 MiB tails count as "could stay in the L2"; (b) an unknown Hopper name with
l2_cache_bytes null: no non-cold block is bounded. Task 53's fused tails 4x faster (8.9 TB/s): PASS
both (S8 has no cold block, so the L2 value is compared with nothing).
Run: cd tests && python -m forgeries.r3_s11_tail_bound_l2_unknown (held by tests/test_forgeries_round2.py)"""
from forgeries.round3 import TIMINGS, env_fields, tails_fast, forge_study as forge_and_verify


if __name__ == "__main__":
    a, va = forge_and_verify([(TIMINGS, tails_fast), env_fields(lambda f: (f["gpu_name"].update(value="NVIDIA GH200 480GB"),
                                                                         f["l2_cache_bytes"].update(value=128 << 20)))],
                             "attack a: fused tails x0.25, GPU NVIDIA GH200 480GB, L2 128 MiB")
    b, vb = forge_and_verify([(TIMINGS, tails_fast), env_fields(lambda f: (f["gpu_name"].update(value="NVIDIA Hopper HBM3e"),
                                                                         f["l2_cache_bytes"].update(value=None, reason="not read")))],
                             "attack b: fused tails x0.25, unknown Hopper GPU, L2 null")
    print(f"\nRESULT: GH200+L2 128 MiB exit {a}; unknown GPU + L2 null exit {b}"
          + ("  -> ATTACK SUCCEEDED" if a == 0 or b == 0 else ""))
