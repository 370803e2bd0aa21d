"""S02: in a measured study bundle a correctness check record may hold null statistics: only the
presence of the keys is required (bundle/verify/measured.py CHECK_KEYS), and every arithmetic rule
skips a null. CuPy-default's check of full-program case 22 keeps "pass": true with its
failing_count, worst ratios, legacy and equal-NaN counts, max |reference|, non-finite counts and
flags all null: the verdict C02 reads ("every CuPy-default case passes the official check") rests on
nothing the verifier can derive, PASS.
Run: .venv/bin/python repro/s02_check_statistics_null.py"""
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



def nulled(doc):
    ch = doc["full_program"][22]["checks"]["cupy_default"]
    ch["official"] = {"pass": True, "failing_count": None, "worst_ratio": None}
    ch["legacy"] = {"pass": True, "failing_count": None, "worst_ratio": None}
    ch["equal_nan_stress"] = {"pass": True, "failing_count": None}
    for k in ("max_abs_reference", "nonfinite", "discriminating", "null_candidate_passes"):
        ch[k] = None


if __name__ == "__main__":
    rc = forge_and_verify([(CORRECTNESS, nulled)], "attack: a check record with pass true and null statistics")
    print(f"\nRESULT: exit {rc}" + ("  -> ATTACK SUCCEEDED" if rc == 0 else ""))
