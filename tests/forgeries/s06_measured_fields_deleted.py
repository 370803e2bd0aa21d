"""S06: fields a measured run always records, and which a cross-check reads, may be deleted: the
check then quietly does not run. Each deletion below verifies PASS (exit 0): the timing input's seed
(checked against the study only "if 'seed' in ti"), run.json compile_cache (the CUDA_CACHE_DISABLE
cross-check with environment.json and every compile variant, the NVRTC-cache trap of docs/traps.md),
the predicate witness's torch_version (checked against environment.json), the tail blocks'
bytes_moved, every block's shape, every round's NVML clocks (throttle evidence).
Run: .venv/bin/python repro/s06_measured_fields_deleted.py"""
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


CASES = {
    "timing_input.seed deleted": [(CORRECTNESS, lambda d: [t["timing_input"].pop("seed") for t in d["tasks"].values()])],
    "run.json compile_cache deleted": [(RUN, lambda d: d.pop("compile_cache"))],
    "predicate_direction.torch_version deleted": [(CORRECTNESS, lambda d: d["predicate_direction"].pop("torch_version"))],
    "tail blocks' bytes_moved deleted": [(TIMINGS, lambda d: [b.pop("bytes_moved", None) for b in d["blocks"]])],
    "every block's shape deleted": [(TIMINGS, lambda d: [b.pop("shape", None) for b in d["blocks"]])],
    "every round's clocks deleted": [(TIMINGS, lambda d: [r.pop("clocks", None) for b in d["blocks"] for r in b["rounds"]])],
}

if __name__ == "__main__":
    res = {k: forge_and_verify(v, k) for k, v in CASES.items()}
    print("\nRESULT: " + "; ".join(f"{k}: exit {v}" for k, v in res.items()))
