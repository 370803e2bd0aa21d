"""C15 (C01 again, by a name that matches another table key): the copy-bandwidth bound is taken from
the GPU name alone; nothing holds the name against compute_capability (9.0), sm_count (132),
memory_bytes (141 GB) or the sm_90a cubins. Renaming the H200 run's GPU "NVIDIA B200" (peak 8000
GB/s, no L2 entry) lets a raw copy block twice as fast as the run measured (8492 GB/s, 1.77x an
H200's 4800) pass, together with a 2-byte cold flush, PASS. The control (NVIDIA H200) is refused.
Run: cd tests && python -m forgeries.r3_c15_gpu_name_b200_copy_bound (held by tests/test_forgeries_round2.py)"""


from kbrepro.model import protocol  # noqa: E402
from forgeries.round3 import env_edit, forge_candidates as forge_and_verify


def copy_scaled(doc, f=0.5):
    for row in doc["bandwidth"]["block"]["rounds"]:
        row["times_ms"] = {k: v * f for k, v in row["times_ms"].items()}
    blk = doc["bandwidth"]["block"]
    doc["bandwidth"]["gbps"] = protocol.copy_gbps(blk["bytes_moved"], [r["times_ms"] for r in blk["rounds"]], blk["arms"])
    for r in doc["candidates"]:
        r["timing"]["roofline"]["bandwidth_gbps"] = doc["bandwidth"]["gbps"]
    print(f"  copy bandwidth now {doc['bandwidth']['gbps']:.0f} GB/s")


def named(gpu, l2):
    def edit(doc, files):
        copy_scaled(doc)
        env_edit(files, lambda f: (f["gpu_name"].update(value=gpu), f["l2_cache_bytes"].update(value=l2)))
        for r in doc["candidates"]:
            r["blocks"][1]["flush_bytes"] = 2 * l2
    return edit


if __name__ == "__main__":
    a, _ = forge_and_verify(named("NVIDIA H200", 62914560), "control: copy x2 on an NVIDIA H200 (refused)")
    b, vb = forge_and_verify(named("NVIDIA B200", 1), "attack: the same copy block, GPU named NVIDIA B200, L2 1 byte")
    print(f"\nRESULT: control exit {a}; attack exit {b} [{vb}]" + ("  -> ATTACK SUCCEEDED" if a == 1 and b == 0 else ""))
