"""F07: a sharded candidate bundle whose every case says (ran_on) it ran on an "NVIDIA H100 NVL"
with driver 535.54.03 passes, while environment.json - which the merge takes from the first
finished case, i.e. written by the very process whose ran_on this is - says NVIDIA H200, driver
580.159.04, L2 60 MiB, and summary.txt tells the reader "GPU NVIDIA H200". The verifier then holds
every case's cold-L2 flush to the H100 NVL's L2 (100 MiB), so cold blocks that flushed less than
twice the L2 of the GPU the bundle names (120 MiB) pass; the GPU UUID hash and driver of ran_on
are never compared with the environment either.
Control: the same 100 MiB flush with ran_on naming the environment's GPU fails (flush rule).

Run from the repository root:  .venv/bin/python repro/f07_sharded_ran_on_contradicts_environment.py"""
import copy
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
import forge_candidates as fc  # noqa: E402
from kbrepro.bundle import case_records  # noqa: E402
from kbrepro.harness import cases as hcases  # noqa: E402

Q7 = ROOT / "examples/formats/candidates-quick-format7.tar"


def sharded(doc, gpu, driver):
    for r in doc["candidates"]:
        f = case_records.record_case_fields(r, doc)[0]
        r["case"] = {"id": hcases.case_id(f), "bandwidth_gbps": doc["bandwidth"]["gbps"],
                     "bandwidth_block": copy.deepcopy(doc["bandwidth"]["block"])}
        r["blocks"][1]["flush_bytes"] = 2 * (50 << 20)  # twice an H100's L2, not an H200's
    doc["cases"] = [{"id": r["case"]["id"], "index": i, **case_records.record_case_fields(r, doc)[0],
                     "status": "done", "error": None,
                     "ran_on": {"host_sha256": "a" * 64, "engine": "local", "worker": f"gpu{i}", "device": "cuda",
                                "gpu_name": gpu, "gpu_uuid_sha256": "c" * 64, "driver_version": driver,
                                "sm_clock_mhz": 1785, "memory_clock_mhz": 2619}} for i, r in enumerate(doc["candidates"])]


def verify(p):
    r = subprocess.run([sys.executable, str(ROOT / "verify_bundle.py"), str(p)], capture_output=True, text=True,
                       cwd=ROOT, timeout=600)
    return r.returncode, [ln for ln in r.stdout.splitlines() if ln.startswith(("VERDICT", "    - "))][:3]


with tempfile.TemporaryDirectory() as tmp:
    out = Path(tmp) / "forged.tar"
    fc.forge(Q7, lambda d, f: sharded(d, "NVIDIA H100 NVL", "535.54.03"), out)
    rc, lines = verify(out)
    with tarfile.open(out) as tf:
        summ = tf.extractfile([m for m in tf if m.name.endswith("/summary.txt")][0]).read().decode().splitlines()[1]
        rep = tf.extractfile([m for m in tf if m.name.endswith("data/REPORT.md")][0]).read().decode()
    print(f"===== every case ran_on NVIDIA H100 NVL / driver 535, cold flush 100 MiB: exit {rc} {lines}")
    print("    summary.txt:", summ)
    print("    REPORT.md:", rep[rep.index("## Where each case ran"):].splitlines()[2][:160])
    ctl = Path(tmp) / "control.tar"
    fc.forge(Q7, lambda d, f: sharded(d, "NVIDIA H200", "580.159.04"), ctl)
    crc, clines = verify(ctl)
    print(f"===== control: ran_on NVIDIA H200 (the environment's GPU), same flush: exit {crc} {clines}")
ok = rc == 0 and crc == 1
print(f"RESULT: ran_on contradicting environment.json -> exit {rc}; control exit {crc}"
      + ("  -> ATTACK SUCCEEDED" if ok else "  -> attack refused"))
