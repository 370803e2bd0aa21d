"""S10 (S05 again): the study's physical bound (derived_facts._beyond_memory) returns no problem at
all when environment.json's gpu_name is null ("if not isinstance(name, str): return []"), and the
measured-evidence rule only asks the field to be present. Task 53's fused tails 4x faster (8.9
TB/s on an H200-class run) with gpu_name null (a reason given): PASS. With the name kept: refused.
Run: cd tests && python -m forgeries.r3_s10_tail_bound_gpu_name_null (held by tests/test_forgeries_round2.py)"""
from forgeries.round3 import TIMINGS, env_fields, tails_fast, forge_study as forge_and_verify


if __name__ == "__main__":
    a, _ = forge_and_verify([(TIMINGS, tails_fast)], "control: fused tails x0.25, NVIDIA H200 (refused)")
    b, vb = forge_and_verify([(TIMINGS, tails_fast), env_fields(lambda f: f["gpu_name"].update(value=None, reason="not read"))],
                             "attack: the same, gpu_name null")
    print(f"\nRESULT: control exit {a}; attack exit {b} [{vb}]" + ("  -> ATTACK SUCCEEDED" if a == 1 and b == 0 else ""))
