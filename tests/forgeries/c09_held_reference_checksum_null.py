"""C09: missing evidence makes a check undecided instead of failing. A held timed output whose
checksums are far off the reference's (a failing output) has the reference's checksum written as
null: timed_outputs_correct "cannot decide", the verdict is PARTIAL (exit 5) instead of FAIL, and
claim K1a ("passes every named check that can decide") holds.
Run: .venv/bin/python repro/c09_held_reference_checksum_null.py"""
import copy
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
import forge_candidates as fc  # noqa: E402  (the product's own packer as a library, its record checks off)

Q7 = ROOT / "examples/formats/candidates-quick-format7.tar"


def env_edit(files, fn):
    """Edit results/environment.json of the results folder being re-packed (canonical form)."""
    env = json.loads(files["results/environment.json"])
    fn(env["fields"])
    files["results/environment.json"] = (json.dumps(env, indent=2, sort_keys=True) + "\n").encode()


def verify(path, label):
    p = subprocess.run([sys.executable, str(ROOT / "verify_bundle.py"), str(path), "-v"], capture_output=True,
                       text=True, cwd=ROOT)
    print(f"===== {label}: verify_bundle.py {Path(path).name} -v  -> exit {p.returncode}")
    print(p.stdout.rstrip())
    if p.stderr.strip():
        print("stderr:", p.stderr.strip()[-2000:])
    return p.returncode


def forge_and_verify(edit, label, example=Q7, **kw):
    with tempfile.TemporaryDirectory(prefix="kbrepro-redteam-") as tmp:
        out = Path(tmp) / "forged.tar"
        fc.forge(example, edit, out, **kw)
        return verify(out, label)



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
