"""S02: in a measured study bundle a correctness check record may hold null statistics: only the
presence of the keys is required (bundle/verify/measured.py CHECK_KEYS), and every arithmetic rule
skips a null. CuPy-default's check of full-program case 22 keeps "pass": true with its
failing_count, worst ratios, legacy and equal-NaN counts, max |reference|, non-finite counts and
flags all null: the verdict C02 reads ("every CuPy-default case passes the official check") rests on
nothing the verifier can derive, PASS.
Run: cd tests && python -m forgeries.s02_check_statistics_null (held by tests/test_forgeries_round2.py)"""
from forgeries.common import CORRECTNESS, forge_study


def nulled(doc):
    ch = doc["full_program"][22]["checks"]["cupy_default"]
    ch["official"] = {"pass": True, "failing_count": None, "worst_ratio": None}
    ch["legacy"] = {"pass": True, "failing_count": None, "worst_ratio": None}
    ch["equal_nan_stress"] = {"pass": True, "failing_count": None}
    for k in ("max_abs_reference", "nonfinite", "discriminating", "null_candidate_passes"):
        ch[k] = None


if __name__ == "__main__":
    rc = forge_study([(CORRECTNESS, nulled)], "attack: a check record with pass true and null statistics")
    print(f"\nRESULT: exit {rc}" + ("  -> ATTACK SUCCEEDED" if rc == 0 else ""))
