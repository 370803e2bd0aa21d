"""S04: an extra-shape timing block's shape fields are not held against its id or the study's size.
nvrtc_ftz_true fails the official check at task 53's extra shape (consistent check record); it stays
an arm of 53.full.{events,graph}.B128K1024H1024, which the arm rule refuses, unless the blocks'
shape_B_K_H / shape are rewritten to H = 4096: the rule then finds no matching correctness case and
skips the arms check, PASS.
Run: .venv/bin/python repro/s04_extra_shape_block_shape_relabel.py"""
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
    a = forge_and_verify([(CORRECTNESS, fail_es)], "control: a variant failing at the extra shape is still timed (refused)")
    b = forge_and_verify([(CORRECTNESS, fail_es), (TIMINGS, shape)], "attack: the same, blocks' shape rewritten")
    print(f"\nRESULT: control exit {a}; attack exit {b}" + ("  -> ATTACK SUCCEEDED" if a != 0 and b == 0 else ""))
