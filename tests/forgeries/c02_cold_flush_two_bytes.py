"""C02: a cold-L2 timing block whose flush before every invocation is 2 bytes passes, (a) when the
run is recorded as sharded and its case's ran_on names another GPU than environment.json's (the
verifier then accepts any even flush size), (b) when environment.json says the H200's L2 is 1 byte.
Run: .venv/bin/python repro/c02_cold_flush_two_bytes.py"""
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

from kbrepro.bundle import case_records  # noqa: E402
from kbrepro.harness import cases as hcases  # noqa: E402


def sharded(doc, gpu):
    for r in doc["candidates"]:
        fields = case_records.record_case_fields(r, doc)[0]
        r["case"] = {"id": hcases.case_id(fields), "bandwidth_gbps": doc["bandwidth"]["gbps"],
                     "bandwidth_block": copy.deepcopy(doc["bandwidth"]["block"])}
    doc["cases"] = [{"id": r["case"]["id"], "index": i, **case_records.record_case_fields(r, doc)[0],
                     "status": "done", "error": None,
                     "ran_on": {"host_sha256": "a" * 64, "engine": "local", "worker": None, "device": "cuda",
                                "gpu_name": gpu, "gpu_uuid_sha256": "b" * 64, "driver_version": "580.159.04",
                                "sm_clock_mhz": 1980, "memory_clock_mhz": 3201}}
                    for i, r in enumerate(doc["candidates"])]


def flush2(doc):
    for r in doc["candidates"]:
        r["blocks"][1]["flush_bytes"] = 2


def control(doc, files):
    sharded(doc, "NVIDIA H200")
    flush2(doc)


def other_gpu(doc, files):
    sharded(doc, "NVIDIA H200 NVL")
    flush2(doc)


def l2_one_byte(doc, files):
    env_edit(files, lambda f: f["l2_cache_bytes"].update(value=1))
    flush2(doc)


if __name__ == "__main__":
    a = forge_and_verify(control, "control: sharded, ran_on = environment's GPU, flush 2 bytes (refused)")
    b = forge_and_verify(other_gpu, "attack a: sharded, ran_on 'NVIDIA H200 NVL', flush 2 bytes")
    c = forge_and_verify(l2_one_byte, "attack b: environment l2_cache_bytes 1 on an NVIDIA H200, flush 2 bytes")
    print(f"\nRESULT: control exit {a}; other GPU exit {b}; L2 = 1 byte exit {c}"
          + ("  -> ATTACK SUCCEEDED" if a == 1 and (b == 0 or c == 0) else ""))
