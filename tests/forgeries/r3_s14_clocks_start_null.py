"""S14 (S06 "every round's clocks deleted" again): the rule requires each round's NVML clocks only
where environment.json's clocks_start answered. Nulling clocks_start (reason "NVML not available")
while clocks_end, driver_version (NVML), power limit, ECC and persistence mode (all NVML) stay
recorded, and deleting every round's clocks (the throttling evidence): PASS. Control (clocks_start
kept): refused.
Run: cd tests && python -m forgeries.r3_s14_clocks_start_null (held by tests/test_forgeries_round2.py)"""
from forgeries.round3 import TIMINGS, env_fields, forge_study as forge_and_verify


def no_clocks(doc):
    for b in doc["blocks"]:
        for r in b["rounds"]:
            r.pop("clocks", None)


if __name__ == "__main__":
    a, _ = forge_and_verify([(TIMINGS, no_clocks)], "control: every round's clocks deleted (refused)")
    b, vb = forge_and_verify([(TIMINGS, no_clocks),
                              env_fields(lambda f: f["clocks_start"].update(value=None, reason="NVML not available"))],
                             "attack: the same, clocks_start null (clocks_end and NVML fields kept)")
    print(f"\nRESULT: control exit {a}; attack exit {b} [{vb}]" + ("  -> ATTACK SUCCEEDED" if a == 1 and b == 0 else ""))
