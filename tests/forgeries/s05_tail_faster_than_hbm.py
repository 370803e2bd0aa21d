"""S05: the study verifier has no physical bound on a timed tail: the three variants' times in
53.tail.events and 53.tail.graph multiplied by 0.25 give a fused tail that moves the block's
bytes_moved (134,217,728 B) in about 0.015 ms, 8.9 TB/s on a GPU recorded as an NVIDIA H200 (HBM
peak 4.8 TB/s; the candidate verifier's own table, model/timing_rules.py GPU_PEAK_GBPS, would refuse
it). PASS.
Run: cd tests && python -m forgeries.s05_tail_faster_than_hbm (held by tests/test_forgeries_round2.py)"""


import statistics  # noqa: E402
from forgeries.common import TIMINGS, forge_study


def fast(doc):
    for b in doc["blocks"]:
        if b["id"] in ("53.tail.events", "53.tail.graph"):
            for r in b["rounds"]:
                for a in ("cupy_default", "nvrtc_ftz_false", "nvrtc_ftz_true"):
                    r["times_ms"][a] *= 0.25
            t = statistics.median(r["times_ms"]["cupy_default"] for r in b["rounds"])
            print(f"  {b['id']}: cupy_default {t:.4f} ms for {b['bytes_moved']} bytes = "
                  f"{b['bytes_moved'] / (t * 1e-3) / 1e12:.1f} TB/s")


if __name__ == "__main__":
    rc = forge_study([(TIMINGS, fast)], "attack: fused tails 4x faster (beyond HBM)")
    print(f"\nRESULT: exit {rc}" + ("  -> ATTACK SUCCEEDED" if rc == 0 else ""))
