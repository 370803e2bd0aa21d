"""S18 (C02b's study analogue): the L2 table rule (l2_problems) is applied to candidate bundles only.
In the extended study bundle (cold-L2 blocks) environment.json's l2_cache_bytes on the NVIDIA H200
set to 1, extras.l2_flush_bytes and every cold block's flush_bytes set to what the engine's rule
gives for it (1 MiB, the minimum): the "cold" blocks flush 1 MiB of a 60 MiB L2, PASS.
Run: cd tests && python -m forgeries.r3_s18_study_l2_one_byte (held by tests/test_forgeries_round2.py)"""


from kbrepro.harness import extras  # noqa: E402
from forgeries.round3 import ENV, EXT, TIMINGS, forge_study as forge_and_verify


def l2_one(doc):
    doc["fields"]["l2_cache_bytes"]["value"] = 1


def flush_small(doc):
    doc["extras"]["l2_flush_bytes"] = extras.flush_bytes(1)
    for b in doc["blocks"]:
        if b.get("flush_bytes") is not None:
            b["flush_bytes"] = extras.flush_bytes(1)
    print(f"  cold blocks now flush {extras.flush_bytes(1)} bytes")


if __name__ == "__main__":
    b, vb = forge_and_verify([(ENV, l2_one), (TIMINGS, flush_small)], "attack: NVIDIA H200 with L2 1 byte", example=EXT)
    print(f"\nRESULT: forged exit {b} [{vb}]" + ("  -> ATTACK SUCCEEDED" if b == 0 else ""))
