"""C06: a candidate that switches TF32 on (allow_tf32_matmul, float32_matmul_precision 'high') is
caught by precision_flags_unchanged; writing the same flags into flags_before (the child's state
before the import) makes the check pass, although environment.json of the same run records
tf32_matmul false and float32_matmul_precision 'highest'. The verifier never compares them. PASS.
Run: cd tests && python -m forgeries.c06_tf32_flags_on_from_start (held by tests/test_forgeries_round2.py)"""
from forgeries.common import forge_and_verify


def tf32(doc, with_before):
    r = doc["candidates"][0]
    b = r["observations"]["build"]
    flags = [b["flags_after_build"]] + [c["flags_after_call"] for c in r["observations"]["cases"]]
    if with_before:
        flags.append(b["flags_before"])
    for fl in flags:
        fl["allow_tf32_matmul"] = True
        fl["float32_matmul_precision"] = "high"


if __name__ == "__main__":
    a = forge_and_verify(lambda d, f: tf32(d, False), "control: TF32 switched on by the candidate (caught)")
    b = forge_and_verify(lambda d, f: tf32(d, True), "attack: TF32 'on from the start' (flags_before edited)")
    print(f"\nRESULT: control exit {a} (K1a fails: caught); attack exit {b}"
          + ("  -> ATTACK SUCCEEDED (candidate not caught)" if b == 0 else ""))
