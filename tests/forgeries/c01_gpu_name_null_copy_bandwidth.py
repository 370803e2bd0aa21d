"""C01: the copy-bandwidth plausibility check is skipped when environment.json's GPU name is null
(or a name not in the verifier's peak table, although compute capability 9.0, 132 SMs, 141 GB and
sm_90a cubins say Hopper): a raw copy block 2.5x faster than an H200 can move passes.
Run: cd tests && python -m forgeries.c01_gpu_name_null_copy_bandwidth (held by tests/test_forgeries_round2.py)"""


from kbrepro.model import protocol  # noqa: E402
from forgeries.common import env_edit, forge_and_verify


def copy_scaled(doc, f=0.4):
    """The run's raw copy block made 2.5x faster, every value derived from it with it."""
    for row in doc["bandwidth"]["block"]["rounds"]:
        row["times_ms"] = {k: v * f for k, v in row["times_ms"].items()}
    blk = doc["bandwidth"]["block"]
    doc["bandwidth"]["gbps"] = protocol.copy_gbps(blk["bytes_moved"], [r["times_ms"] for r in blk["rounds"]],
                                                  blk["arms"])
    for r in doc["candidates"]:
        r["timing"]["roofline"]["bandwidth_gbps"] = doc["bandwidth"]["gbps"]


def control(doc, files):
    copy_scaled(doc)


def gpu_null(doc, files):
    copy_scaled(doc)
    env_edit(files, lambda f: f["gpu_name"].update(value=None, reason="not recorded"))


def gpu_unknown(doc, files):
    copy_scaled(doc)
    env_edit(files, lambda f: f["gpu_name"].update(value="NVIDIA Hopper HBM3e"))


if __name__ == "__main__":
    a = forge_and_verify(control, "control: copy 2.5x faster, gpu_name NVIDIA H200 (refused)")
    b = forge_and_verify(gpu_null, "attack 1: same copy block, gpu_name null")
    c = forge_and_verify(gpu_unknown, "attack 2: same copy block, gpu_name 'NVIDIA Hopper HBM3e'")
    print(f"\nRESULT: control exit {a}; gpu_name null exit {b}; unknown name exit {c}"
          + ("  -> ATTACK SUCCEEDED" if a == 1 and (b == 0 or c == 0) else ""))
