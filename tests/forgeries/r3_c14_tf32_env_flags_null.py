"""C14 (C06 again): the flags-before rule compares flags_before with environment.json's tf32_matmul,
tf32_cudnn and float32_matmul_precision only where those values are a bool or a string; recorded
null ("not read", a reason given) they are not compared. A candidate that switched TF32 on
(allow_tf32_matmul true, float32_matmul_precision 'high' after the build and after every call) with
flags_before edited to the same and the two environment fields nulled: precision_flags_unchanged
passes, PASS. The control (environment values kept) is refused.
Run: cd tests && python -m forgeries.r3_c14_tf32_env_flags_null (held by tests/test_forgeries_round2.py)"""
from forgeries.round3 import env_edit, forge_candidates as forge_and_verify


def tf32(env_null):
    def edit(doc, files):
        if env_null:
            env_edit(files, lambda f: [f[k].update(value=None, reason="not read")
                                       for k in ("tf32_matmul", "float32_matmul_precision")])
        r = doc["candidates"][0]
        b = r["observations"]["build"]
        for fl in [b["flags_after_build"], b["flags_before"]] + [c["flags_after_call"] for c in r["observations"]["cases"]]:
            fl["allow_tf32_matmul"] = True
            fl["float32_matmul_precision"] = "high"
    return edit


if __name__ == "__main__":
    a, _ = forge_and_verify(tf32(False), "control: TF32 on from the start, environment values kept (refused)")
    b, vb = forge_and_verify(tf32(True), "attack: the same, environment's tf32_matmul and float32_matmul_precision null")
    print(f"\nRESULT: control exit {a}; attack exit {b} [{vb}]" + ("  -> ATTACK SUCCEEDED" if a == 1 and b == 0 else ""))
