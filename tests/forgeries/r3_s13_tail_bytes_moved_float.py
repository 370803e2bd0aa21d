"""S13: bytes_moved written as a JSON float (134217728.0) instead of an integer. The bytes-follow-from-
the-sizes check compares it with == (Python: 134217728.0 == 134217728) and the measured-evidence
rule accepts any number, but the physical bound skips a block whose bytes_moved is not an int
(is_int): task 53's fused tails 4x faster (8.9 TB/s on an NVIDIA H200) pass, PASS. ("JSON values
are compared as JSON".) Control with integer bytes: refused.
Run: cd tests && python -m forgeries.r3_s13_tail_bytes_moved_float (held by tests/test_forgeries_round2.py)"""
from forgeries.round3 import TIMINGS, tails_fast, forge_study as forge_and_verify


def as_float(doc):
    for b in doc["blocks"]:
        if b["id"] in ("53.tail.events", "53.tail.graph"):
            b["bytes_moved"] = float(b["bytes_moved"])


if __name__ == "__main__":
    a, _ = forge_and_verify([(TIMINGS, tails_fast)], "control: fused tails x0.25 (refused)")
    b, vb = forge_and_verify([(TIMINGS, lambda d: (tails_fast(d), as_float(d)))], "attack: the same, bytes_moved 134217728.0")
    print(f"\nRESULT: control exit {a}; attack exit {b} [{vb}]" + ("  -> ATTACK SUCCEEDED" if a == 1 and b == 0 else ""))
