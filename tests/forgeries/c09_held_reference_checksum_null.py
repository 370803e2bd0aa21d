"""C09: missing evidence makes a check undecided instead of failing. A held timed output whose
checksums are far off the reference's (a failing output) has the reference's checksum written as
null: timed_outputs_correct "cannot decide", the verdict is PARTIAL (exit 5) instead of FAIL, and
claim K1a ("passes every named check that can decide") holds.
Run: cd tests && python -m forgeries.c09_held_reference_checksum_null (held by tests/test_forgeries_round2.py)"""
from forgeries.common import forge_and_verify


def failing(doc, files, null_ref):
    row = doc["candidates"][0]["blocks"][0]["rounds"][0]["outputs"]["sample"][0]
    row[3] = row[5] + 50.0
    row[4] = row[6] + 50.0
    if null_ref:
        row[5] = None
        row[6] = None


if __name__ == "__main__":
    a = forge_and_verify(lambda d, f: failing(d, f, False), "control: a failing sampled output (refused)")
    b = forge_and_verify(lambda d, f: failing(d, f, True), "attack: the same row, the reference checksum null")
    print(f"\nRESULT: control exit {a}; attack exit {b}" + ("  -> ATTACK SUCCEEDED (undecided, not failed)" if b == 5 else ""))
