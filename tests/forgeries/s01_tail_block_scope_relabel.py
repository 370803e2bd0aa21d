"""S01: a study block's ``scope`` field is never held against its id. Five tail blocks
(53.tail.events, 53.tail.graph, 81.tail.events, 81.tail.graph, 95.tail.events) get scope "tailx" and
their two baseline arms renamed eager_tailx / torchscript_tailx (the arm rule is derived from the
block's own scope field). Claims C09-C11 select blocks by scope == 'tail', so those blocks drop out
silently: C10 ("speed-up over the eager tail lies in 2.8x to 5.5x": task 53 measures 1.65x) and C11
flip from fails to holds: 14 of 14 claims hold, PASS. No timing number was changed.
Run: cd tests && python -m forgeries.s01_tail_block_scope_relabel (held by tests/test_forgeries_round2.py)"""
from forgeries.common import S8, TIMINGS, forge_study, verify


IDS = {"53.tail.events", "53.tail.graph", "81.tail.events", "81.tail.graph", "95.tail.events"}


def relabel(doc, scope="tailx"):
    ren = {"eager_tail": "eager_" + scope, "torchscript_tail": "torchscript_" + scope}
    for b in doc["blocks"]:
        if b["id"] in IDS:
            b["scope"] = scope
            b["arms"] = [ren.get(a, a) for a in b["arms"]]
            for r in b["rounds"]:
                r["times_ms"] = {ren.get(k, k): v for k, v in r["times_ms"].items()}
                r["order"] = [ren.get(a, a) for a in r["order"]]


if __name__ == "__main__":
    a = verify(S8, "genuine study bundle (C10, C11 fail)")
    b = forge_study([(TIMINGS, relabel)], "attack: five tail blocks relabelled scope 'tailx'")
    print(f"\nRESULT: genuine exit {a}; forged exit {b}" + ("  -> ATTACK SUCCEEDED" if b == 0 else ""))
