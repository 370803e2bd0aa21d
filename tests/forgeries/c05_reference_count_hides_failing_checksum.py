"""C05: the task (model_ex_add) returns one tensor, and the timing input's output digest says
(1, 128). Declaring reference_count = output_count = 2 on the timing_input case switches off the rule
that each held-output sample row's chunk has the output's element count; a row whose raw checksums
differ from the reference's by 500 (|y| sums about 136) is then judged to agree because its element
count is written as 2**30. timed_outputs_correct passes, PASS.
Run: .venv/bin/python repro/c05_reference_count_hides_failing_checksum.py"""
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
