"""S04: an extra-shape timing block's shape fields are not held against its id or the study's size.
nvrtc_ftz_true fails the official check at task 53's extra shape (consistent check record); it stays
an arm of 53.full.{events,graph}.B128K1024H1024, which the arm rule refuses, unless the blocks'
shape_B_K_H / shape are rewritten to H = 4096: the rule then finds no matching correctness case and
skips the arms check, PASS.
Run: cd tests && python -m forgeries.s04_extra_shape_block_shape_relabel (held by tests/test_forgeries_round2.py)"""
from forgeries.common import CORRECTNESS, TIMINGS, forge_study


def fail_es(doc):
    ch = doc["extra_shapes"][0]["checks"]["nvrtc_ftz_true"]
    n, mar, mae = ch["element_count"], ch["max_abs_reference"], 2.0e-3
    ch["bit_identical_count"] = min(ch["bit_identical_count"], n - 40)
    ch["max_abs_error"] = mae
    lo, hi = mae / (1e-4 + 1e-4 * (mar + mae)), mae / 1e-4
    ch["official"] = {"pass": False, "failing_count": 40, "worst_ratio": (lo + hi) / 2}
    ch["legacy"] = {"pass": False, "failing_count": 40, "worst_ratio": max((mae / (1e-4 + 1e-4 * mar) + hi) / 2, 1.5)}
    ch["equal_nan_stress"] = {"pass": False, "failing_count": 40}


def shape(doc):
    for b in doc["blocks"]:
        if b["id"] in ("53.full.events.B128K1024H1024", "53.full.graph.B128K1024H1024"):
            b["shape_B_K_H"] = [128, 1024, 4096]
            b["shape"] = [128, 4096]


if __name__ == "__main__":
    a = forge_study([(CORRECTNESS, fail_es)], "control: a variant failing at the extra shape is still timed (refused)")
    b = forge_study([(CORRECTNESS, fail_es), (TIMINGS, shape)], "attack: the same, blocks' shape rewritten")
    print(f"\nRESULT: control exit {a}; attack exit {b}" + ("  -> ATTACK SUCCEEDED" if a != 0 and b == 0 else ""))
