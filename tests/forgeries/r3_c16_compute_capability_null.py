"""C16 (C01 again): "a GPU not in the table is bounded by its compute capability's fastest, never by a
number the bundle chose". With compute_capability recorded null (a reason given) the bound falls
back to UNKNOWN_GPU_PEAK_GBPS, 8000 GB/s: a GPU named "NVIDIA Hopper HBM3e" (the round-2 reproducer's
name) with its compute capability nulled passes a copy block twice as fast as measured (8492 GB/s,
1.77x an H200), PASS. Same with compute capability 9.0 kept: refused. The cubins say sm_90a.
Run: cd tests && python -m forgeries.r3_c16_compute_capability_null (held by tests/test_forgeries_round2.py)"""


from kbrepro.model import protocol  # noqa: E402
from forgeries.round3 import env_edit, forge_candidates as forge_and_verify


def copy_scaled(doc, f=0.5):
    for row in doc["bandwidth"]["block"]["rounds"]:
        row["times_ms"] = {k: v * f for k, v in row["times_ms"].items()}
    blk = doc["bandwidth"]["block"]
    doc["bandwidth"]["gbps"] = protocol.copy_gbps(blk["bytes_moved"], [r["times_ms"] for r in blk["rounds"]], blk["arms"])
    for r in doc["candidates"]:
        r["timing"]["roofline"]["bandwidth_gbps"] = doc["bandwidth"]["gbps"]


def edit(cc_null):
    def e(doc, files):
        copy_scaled(doc)
        def f(fl):
            fl["gpu_name"].update(value="NVIDIA Hopper HBM3e")
            if cc_null:
                fl["compute_capability"].update(value=None, reason="not read")
        env_edit(files, f)
    return e


if __name__ == "__main__":
    a, _ = forge_and_verify(edit(False), "control: copy x2, unknown Hopper name, compute capability 9.0 (refused)")
    b, vb = forge_and_verify(edit(True), "attack: the same, compute capability null")
    print(f"\nRESULT: control exit {a}; attack exit {b} [{vb}]" + ("  -> ATTACK SUCCEEDED" if a == 1 and b == 0 else ""))
