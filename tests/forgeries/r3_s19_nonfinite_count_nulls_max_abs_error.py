"""S19 (S02 again): a check record may leave max_abs_error / max_abs_reference null "where a
non-finite value left no finite pair"; the rule only asks that some non-finite count be > 0. Task
81's CuPy-default full-program case 22 made to differ by 5e-5 (5000 elements not bit-identical,
official still passes): C04 ("max |d| <= 1e-36") fails (control). The same record with
nonfinite.mismatched = 1 (a NaN/inf where the other side is finite, which allclose can never pass,
yet official pass true, failing_count 0) and max_abs_error null: the null drops out of C04's
JMESPath projection and C04 holds, PASS.
Run: cd tests && python -m forgeries.r3_s19_nonfinite_count_nulls_max_abs_error (held by tests/test_forgeries_round2.py)"""
from forgeries.round3 import CORRECTNESS, forge_study as forge_and_verify


def differ(null):
    def e(doc):
        ch = doc["full_program"][22]["checks"]["cupy_default"]
        assert doc["full_program"][22]["case"]["task"] == 81
        ch["bit_identical_count"] = ch["element_count"] - 5000
        ch["max_abs_error"] = 5e-5
        ch["official"]["worst_ratio"] = 0.4
        ch["legacy"]["worst_ratio"] = 0.4
        if null:
            ch["nonfinite"]["mismatched"] = 1
            ch["max_abs_error"] = None
    return (CORRECTNESS, e)


if __name__ == "__main__":
    a, va = forge_and_verify([differ(False)], "control: case 22 differs by 5e-5 (C04 fails)")
    b, vb = forge_and_verify([differ(True)], "attack: the same, mismatched 1 and max_abs_error null")
    print(f"\nRESULT: control exit {a} [{va}]; attack exit {b} [{vb}]"
          + ("  -> ATTACK SUCCEEDED" if "C04" in va and b == 0 and "C04" not in vb else ""))
