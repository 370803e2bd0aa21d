"""C03: the eager arm's times in both timing blocks multiplied by 4: the four failing speed claims
(K1c, K1e, K2c, K2e) now hold, PASS. The same bundle's raw eager per-call times on the same fresh
sets (timing.per_call.eager_fresh) and the eager calibration contradict the edit: eager back to back
would now be slower than eager synchronised call by call, which the verifier treats as launch
overhead max(per-call - block, 0) instead of a contradiction.
Run: cd tests && python -m forgeries.c03_eager_arm_inflated (held by tests/test_forgeries_round2.py)"""
import json
import statistics
from forgeries.common import Q7, fc, forge_and_verify, verify


def eager_x4(doc, files):
    for r in doc["candidates"]:
        for b in r["blocks"]:
            for row in b["rounds"]:
                row["times_ms"]["eager"] *= 4


def show(doc):
    for r in doc["candidates"]:
        b = r["blocks"][0]
        e = statistics.median(x["times_ms"]["eager"] for x in b["rounds"])
        pc = statistics.median(t for x in r["timing"]["per_call"]["eager_fresh"] for t in x["times_ms"])
        print(f"  {r['name']}: warm block eager {e:.4f} ms/invocation; eager per-call (synchronised, same sets) "
              f"{pc:.4f} ms; calibration {b['protocol']['calibration_ms']:.4f} ms")


if __name__ == "__main__":
    base = verify(Q7, "genuine bundle")
    doc = json.loads(fc.members(Q7)[1]["results/candidates.json"])
    print("genuine:"); show(doc)
    eager_x4(doc, None)
    print("forged:"); show(doc)
    rc = forge_and_verify(eager_x4, "attack: eager arm x4")
    print(f"\nRESULT: genuine exit {base} (K1c, K1e, K2c, K2e fail); forged exit {rc}"
          + ("  -> ATTACK SUCCEEDED" if rc == 0 else ""))
