"""C04: the candidate's cold-L2 block times (and the parent's clock of those requests) multiplied by
0.1: K1e and K2e ("faster than eager with a cold L2") flip from fails to holds, PASS. The forged time
per invocation (about 0.005 ms) is below the time the recorded flush alone takes at the run's own
measured copy bandwidth (flush_bytes / bandwidth.gbps, about 0.03 ms) and below the candidate's own
warm-L2 time; no rule bounds the cold block.
Run: .venv/bin/python repro/c04_cold_block_faster_than_flush.py"""
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



def cold_fast(doc, files, k=0.1):
    for r in doc["candidates"]:
        for row in r["blocks"][1]["rounds"]:
            row["times_ms"]["candidate"] *= k
            row["host_ms"]["candidate"] *= k


if __name__ == "__main__":
    base = verify(Q7, "genuine bundle")
    doc = json.loads(fc.members(Q7)[1]["results/candidates.json"])
    cold_fast(doc, None)
    for r in doc["candidates"]:
        cold = statistics.median(x["times_ms"]["candidate"] for x in r["blocks"][1]["rounds"])
        warm = statistics.median(x["times_ms"]["candidate"] for x in r["blocks"][0]["rounds"])
        floor = r["blocks"][1]["flush_bytes"] / (doc["bandwidth"]["gbps"] * 1e9) * 1e3
        print(f"  {r['name']}: forged cold {cold:.4f} ms/inv; warm {warm:.4f} ms; flushing "
              f"{r['blocks'][1]['flush_bytes']} bytes at the run's {doc['bandwidth']['gbps']:.0f} GB/s takes {floor:.4f} ms")
    rc = forge_and_verify(cold_fast, "attack: cold block x0.1")
    print(f"\nRESULT: genuine exit {base} (K1e, K2e fail); forged exit {rc}" + ("  -> ATTACK SUCCEEDED" if rc == 0 else ""))
