"""C13 (C02b again): the L2 table (GPU_L2_BYTES) has only H200 and H100 entries, while the peak table
has many more keys. A GPU name that matches a peak-table key without an L2 entry ("NVIDIA H20",
"NVIDIA GH200 480GB", both Hopper, cc 9.0, sm_90a cubins as recorded) lets environment.json say the
L2 is 1 byte: every cold-L2 block then "flushes" 2 bytes before each invocation, PASS. The control
(the same with the real name NVIDIA H200) is refused.
Run: cd tests && python -m forgeries.r3_c13_gpu_name_without_l2_entry (held by tests/test_forgeries_round2.py)"""
from forgeries.round3 import env_edit, forge_candidates as forge_and_verify


def named(gpu):
    def edit(doc, files):
        env_edit(files, lambda f: (f["gpu_name"].update(value=gpu), f["l2_cache_bytes"].update(value=1)))
        for r in doc["candidates"]:
            r["blocks"][1]["flush_bytes"] = 2
    return edit


if __name__ == "__main__":
    a, _ = forge_and_verify(named("NVIDIA H200"), "control: NVIDIA H200, L2 1 byte, flush 2 bytes (refused)")
    b, vb = forge_and_verify(named("NVIDIA H20"), "attack 1: NVIDIA H20, L2 1 byte, flush 2 bytes")
    c, vc = forge_and_verify(named("NVIDIA GH200 480GB"), "attack 2: NVIDIA GH200 480GB, L2 1 byte, flush 2 bytes")
    print(f"\nRESULT: control exit {a}; H20 exit {b}; GH200 exit {c}"
          + ("  -> ATTACK SUCCEEDED" if a == 1 and (b == 0 or c == 0) else ""))
