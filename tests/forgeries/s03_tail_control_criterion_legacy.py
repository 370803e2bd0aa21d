"""S03: the criterion of the "actual_linear_output" tail control is not checked (only the boundary
control's is). CuPy-default's check on task 53's actual_linear_output records a failure of the
official predicate (1 element, worst ratio 1.2; legacy passes, arithmetic consistent); its criterion
rewritten from "official" (what the engine's harness.run.criterion gives for a NaN-free input) to
"legacy": C07 ("the tail controls ... all pass") holds and task 53 stays eligible for timing
(eligibility is derived with the record's own criterion), PASS.
Run: .venv/bin/python repro/s03_tail_control_criterion_legacy.py"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from corpus import make_corpus as kit  # noqa: E402  (the corpus kit: product packer as a library)

S8 = ROOT / "examples/formats/pointwise-fusion-ftz-full-format8.tar"
TIMINGS, CORRECTNESS, RUN = "data/results/timings.json", "data/results/correctness.json", "data/results/run.json"


def verify(path, label):
    p = subprocess.run([sys.executable, str(ROOT / "verify_bundle.py"), str(path), "-v"], capture_output=True,
                       text=True, cwd=ROOT)
    print(f"===== {label}: verify_bundle.py {Path(path).name} -v  -> exit {p.returncode}")
    print(p.stdout.rstrip())
    if p.stderr.strip():
        print("stderr:", p.stderr.strip()[-2000:])
    return p.returncode


def forge_and_verify(edits, label, example=S8):
    """Apply ``edits`` [(bag path, fn(doc))], recompute claims.json, REPORT.md, the figures' data and
    the RO-Crate file from the edited records (cases_trust.reforge), recompute the manifests, verify."""
    good = kit.load_good(example)
    files = dict(good.files)
    for rel, fn in edits:
        kit.edit_json(files, rel, fn)
    kit.trust_module().reforge(files)
    with tempfile.TemporaryDirectory(prefix="kbrepro-redteam-") as tmp:
        out = Path(tmp) / "forged.tar"
        out.write_bytes(kit.repack(good, files))
        return verify(out, label)



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
    a = forge_and_verify([(CORRECTNESS, lambda d: fail_official(d, "official"))],
                         "control: the failure with the criterion 'official' (refused)")
    b = forge_and_verify([(CORRECTNESS, lambda d: fail_official(d, "legacy"))],
                         "attack: the same failure, criterion rewritten to 'legacy'")
    print(f"\nRESULT: control exit {a}; attack exit {b}" + ("  -> ATTACK SUCCEEDED" if a != 0 and b == 0 else ""))
