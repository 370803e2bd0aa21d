"""C18 (C05 at the boundary): model_ex_add returns one tensor of 128 elements (its digest says
(1, 128)). Declaring reference_count = output_count = 2 on the timing input and adding 512 bytes to
bytes_moved and io_bytes satisfies "a reference said to return several outputs moves more than its
first output's bytes"; the held-output rows' element count is then only held to <= 65536, not to
the output's 128. A sampled row whose candidate checksums differ from the reference's by 6.4 (|y|
sums about 136; allclose allows 0.027 for 128 elements) written with 65536 elements is judged to
agree: timed_outputs_correct passes, PASS. The control (same row, one output) is refused.
Run: cd tests && python -m forgeries.r3_c18_several_outputs_chunk_allowance (held by tests/test_forgeries_round2.py)"""
from forgeries.round3 import forge_candidates as forge_and_verify


def bad_row(doc):
    row = doc["candidates"][0]["blocks"][0]["rounds"][0]["outputs"]["sample"][0]
    row[3] = row[5] + 6.4
    row[4] = row[6] + 6.4
    row[7] = 65536


def control(doc, files):
    bad_row(doc)


def attack(doc, files):
    r = doc["candidates"][0]
    t = next(c for c in r["observations"]["cases"] if c["id"] == "timing_input")
    t["reference_count"] = 2
    t["output_count"] = 2
    r["timing"]["roofline"]["bytes_moved"] += 512
    for b in r["blocks"]:
        b["protocol"]["io_bytes"] += 512
    bad_row(doc)


if __name__ == "__main__":
    a, _ = forge_and_verify(control, "control: a failing timed output, one output (refused)")
    b, vb = forge_and_verify(attack, "attack: the same row, reference_count 2, bytes + 512")
    print(f"\nRESULT: control exit {a}; attack exit {b} [{vb}]" + ("  -> ATTACK SUCCEEDED" if a == 1 and b == 0 else ""))
