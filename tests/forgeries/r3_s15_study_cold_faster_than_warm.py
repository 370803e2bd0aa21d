"""S15: "a cold-L2 median is not below 0.9 of the warm one" (trust.md) is a candidate rule only. In
the extended study bundle the fused variants' times in 53.tail.events.cold x0.28: the cold tail
(120 MiB flush + tail) now takes 0.030 ms, less than the same block's l2_flush_only arm (0.042 ms,
the flush alone) and less than the warm tail (0.067 ms); 4.5 TB/s stays under the H200 bound.
PASS.
Run: cd tests && python -m forgeries.r3_s15_study_cold_faster_than_warm (held by tests/test_forgeries_round2.py)"""
import statistics
from forgeries.round3 import EXT, TIMINGS, forge_study as forge_and_verify


def cold_fast(doc, f=0.28):
    for b in doc["blocks"]:
        if b["id"] == "53.tail.events.cold":
            for r in b["rounds"]:
                for a in ("cupy_default", "nvrtc_ftz_false", "nvrtc_ftz_true"):
                    r["times_ms"][a] *= f
            med = {a: statistics.median(r["times_ms"][a] for r in b["rounds"]) for a in b["arms"]}
            print(f"  53.tail.events.cold: l2_flush_only {med['l2_flush_only']:.4f} ms, cupy_default (flush + tail) "
                  f"{med['cupy_default']:.4f} ms")
        if b["id"] == "53.tail.events":
            print(f"  53.tail.events (warm): cupy_default {statistics.median(r['times_ms']['cupy_default'] for r in b['rounds']):.4f} ms")


if __name__ == "__main__":
    b, vb = forge_and_verify([(TIMINGS, cold_fast)], "attack: cold tail faster than the flush alone", example=EXT)
    print(f"\nRESULT: forged exit {b} [{vb}]" + ("  -> ATTACK SUCCEEDED" if b == 0 else ""))
