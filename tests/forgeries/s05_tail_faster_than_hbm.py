"""S05: the study verifier has no physical bound on a timed tail: the three variants' times in
53.tail.events and 53.tail.graph multiplied by 0.25 give a fused tail that moves the block's
bytes_moved (134,217,728 B) in about 0.015 ms, 8.9 TB/s on a GPU recorded as an NVIDIA H200 (HBM
peak 4.8 TB/s; the candidate verifier's own table, model/timing_rules.py GPU_PEAK_GBPS, would refuse
it). PASS.
Run: .venv/bin/python repro/s05_tail_faster_than_hbm.py"""
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

import statistics  # noqa: E402


def fast(doc):
    for b in doc["blocks"]:
        if b["id"] in ("53.tail.events", "53.tail.graph"):
            for r in b["rounds"]:
                for a in ("cupy_default", "nvrtc_ftz_false", "nvrtc_ftz_true"):
                    r["times_ms"][a] *= 0.25
            t = statistics.median(r["times_ms"]["cupy_default"] for r in b["rounds"])
            print(f"  {b['id']}: cupy_default {t:.4f} ms for {b['bytes_moved']} bytes = "
                  f"{b['bytes_moved'] / (t * 1e-3) / 1e12:.1f} TB/s")


if __name__ == "__main__":
    rc = forge_and_verify([(TIMINGS, fast)], "attack: fused tails 4x faster (beyond HBM)")
    print(f"\nRESULT: exit {rc}" + ("  -> ATTACK SUCCEEDED" if rc == 0 else ""))
