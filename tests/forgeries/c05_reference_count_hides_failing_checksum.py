"""C05: the task (model_ex_add) returns one tensor, and the timing input's output digest says
(1, 128). Declaring reference_count = output_count = 2 on the timing_input case switches off the rule
that each held-output sample row's chunk has the output's element count; a row whose raw checksums
differ from the reference's by 500 (|y| sums about 136) is then judged to agree because its element
count is written as 2**30. timed_outputs_correct passes, PASS.
Run: cd tests && python -m forgeries.c05_reference_count_hides_failing_checksum (held by tests/test_forgeries_round2.py)"""
from forgeries.common import forge_and_verify


def case(doc, cid, i=0):
    return next(c for c in doc["candidates"][i]["observations"]["cases"] if c["id"] == cid)


def bad_row(doc):
    row = doc["candidates"][0]["blocks"][0]["rounds"][0]["outputs"]["sample"][0]
    row[3] = row[5] + 500.0   # candidate's weighted sum
    row[4] = row[6] + 500.0   # candidate's sum of |y|
    row[7] = 1 << 30          # the chunk's element count (the output has 128)


def control(doc, files):
    bad_row(doc)


def attack(doc, files):
    t = case(doc, "timing_input")
    t["reference_count"] = 2
    t["output_count"] = 2
    bad_row(doc)


if __name__ == "__main__":
    a = forge_and_verify(control, "control: the same row without reference_count 2 (refused)")
    b = forge_and_verify(attack, "attack: timing_input reference_count 2, failing row with 2**30 elements")
    print(f"\nRESULT: control exit {a}; attack exit {b}" + ("  -> ATTACK SUCCEEDED" if a == 1 and b == 0 else ""))
