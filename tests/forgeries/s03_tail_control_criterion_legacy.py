"""S03: the criterion of the "actual_linear_output" tail control is not checked (only the boundary
control's is). CuPy-default's check on task 53's actual_linear_output records a failure of the
official predicate (1 element, worst ratio 1.2; legacy passes, arithmetic consistent); its criterion
rewritten from "official" (what the engine's harness.run.criterion gives for a NaN-free input) to
"legacy": C07 ("the tail controls ... all pass") holds and task 53 stays eligible for timing
(eligibility is derived with the record's own criterion), PASS.
Run: cd tests && python -m forgeries.s03_tail_control_criterion_legacy (held by tests/test_forgeries_round2.py)"""
from forgeries.common import CORRECTNESS, forge_study


def fail_official(doc, criterion):
    ctl = doc["tasks"]["53"]["tail_controls"][1]
    assert ctl["name"] == "actual_linear_output"
    ctl["criterion"] = criterion
    ch = ctl["checks"]["cupy_default"]
    ch["bit_identical_count"] = ch["element_count"] - 1
    ch["max_abs_error"] = 1.5e-4
    ch["official"] = {"pass": False, "failing_count": 1, "worst_ratio": 1.2}
    ch["legacy"] = {"pass": True, "failing_count": 0, "worst_ratio": 0.95}
    ch["equal_nan_stress"] = {"pass": False, "failing_count": 1}


if __name__ == "__main__":
    a = forge_study([(CORRECTNESS, lambda d: fail_official(d, "official"))],
                         "control: the failure with the criterion 'official' (refused)")
    b = forge_study([(CORRECTNESS, lambda d: fail_official(d, "legacy"))],
                         "attack: the same failure, criterion rewritten to 'legacy'")
    print(f"\nRESULT: control exit {a}; attack exit {b}" + ("  -> ATTACK SUCCEEDED" if a != 0 and b == 0 else ""))
