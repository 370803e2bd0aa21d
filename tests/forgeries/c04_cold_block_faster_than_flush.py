"""C04: the candidate's cold-L2 block times (and the parent's clock of those requests) multiplied by
0.1: K1e and K2e ("faster than eager with a cold L2") flip from fails to holds, PASS. The forged time
per invocation (about 0.005 ms) is below the time the recorded flush alone takes at the run's own
measured copy bandwidth (flush_bytes / bandwidth.gbps, about 0.03 ms) and below the candidate's own
warm-L2 time; no rule bounds the cold block.
Run: cd tests && python -m forgeries.c04_cold_block_faster_than_flush (held by tests/test_forgeries_round2.py)"""
import json
import statistics
from forgeries.common import Q7, fc, forge_and_verify, verify


def cold_fast(doc, files, k=0.1):
    for r in doc["candidates"]:
        for row in r["blocks"][1]["rounds"]:
            row["times_ms"]["candidate"] *= k
            row["host_ms"]["candidate"] *= k


if __name__ == "__main__":
    base = verify(Q7, "genuine bundle")
    doc = json.loads(fc.members(Q7)[1]["results/candidates.json"])
    cold_fast(doc, None)
    for r in doc["candidates"]:
        cold = statistics.median(x["times_ms"]["candidate"] for x in r["blocks"][1]["rounds"])
        warm = statistics.median(x["times_ms"]["candidate"] for x in r["blocks"][0]["rounds"])
        floor = r["blocks"][1]["flush_bytes"] / (doc["bandwidth"]["gbps"] * 1e9) * 1e3
        print(f"  {r['name']}: forged cold {cold:.4f} ms/inv; warm {warm:.4f} ms; flushing "
              f"{r['blocks'][1]['flush_bytes']} bytes at the run's {doc['bandwidth']['gbps']:.0f} GB/s takes {floor:.4f} ms")
    rc = forge_and_verify(cold_fast, "attack: cold block x0.1")
    print(f"\nRESULT: genuine exit {base} (K1e, K2e fail); forged exit {rc}" + ("  -> ATTACK SUCCEEDED" if rc == 0 else ""))
