"""C06: a candidate that switches TF32 on (allow_tf32_matmul, float32_matmul_precision 'high') is
caught by precision_flags_unchanged; writing the same flags into flags_before (the child's state
before the import) makes the check pass, although environment.json of the same run records
tf32_matmul false and float32_matmul_precision 'highest'. The verifier never compares them. PASS.
Run: .venv/bin/python repro/c06_tf32_flags_on_from_start.py"""
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



def tf32(doc, with_before):
    r = doc["candidates"][0]
    b = r["observations"]["build"]
    flags = [b["flags_after_build"]] + [c["flags_after_call"] for c in r["observations"]["cases"]]
    if with_before:
        flags.append(b["flags_before"])
    for fl in flags:
        fl["allow_tf32_matmul"] = True
        fl["float32_matmul_precision"] = "high"


if __name__ == "__main__":
    a = forge_and_verify(lambda d, f: tf32(d, False), "control: TF32 switched on by the candidate (caught)")
    b = forge_and_verify(lambda d, f: tf32(d, True), "attack: TF32 'on from the start' (flags_before edited)")
    print(f"\nRESULT: control exit {a} (K1a fails: caught); attack exit {b}"
          + ("  -> ATTACK SUCCEEDED (candidate not caught)" if b == 0 else ""))
