"""F06: in a candidate bundle, environment.json's torch_version is never held against the torch
each candidate's own process recorded (observations.build.torch): the environment says torch
2.4.0+cu121 (or a JSON object) while both records say 2.11.0+cu130, and the verifier passes,
printing torch 2.4.0 in summary.txt. The same contradiction in a sharded bundle (a case that ran
under another torch than the environment, i.e. "a case from another run") passes too.
Control: a study bundle holds its environment's torch against its own evidence and fails.

Run from the repository root:  .venv/bin/python repro/f06_candidate_torch_contradicts_records.py"""
import copy
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
import forge_candidates as fc  # noqa: E402
from corpus import make_corpus as kit  # noqa: E402
from kbrepro.bundle import case_records  # noqa: E402
from kbrepro.harness import cases as hcases  # noqa: E402

Q7 = ROOT / "examples/formats/candidates-quick-format7.tar"
S8 = ROOT / "examples/formats/pointwise-fusion-ftz-full-format8.tar"


def env_torch(files, value):
    env = json.loads(files["results/environment.json"])
    env["fields"]["torch_version"]["value"] = value
    files["results/environment.json"] = (json.dumps(env, indent=2, sort_keys=True) + "\n").encode()


def sharded(doc):
    """The run recorded as sharded (as bundle/shard_merge.py merges it), each case on the environment's GPU."""
    for r in doc["candidates"]:
        f = case_records.record_case_fields(r, doc)[0]
        r["case"] = {"id": hcases.case_id(f), "bandwidth_gbps": doc["bandwidth"]["gbps"],
                     "bandwidth_block": copy.deepcopy(doc["bandwidth"]["block"])}
    doc["cases"] = [{"id": r["case"]["id"], "index": i, **case_records.record_case_fields(r, doc)[0],
                     "status": "done", "error": None,
                     "ran_on": {"host_sha256": "a" * 64, "engine": "submitit", "worker": "job1", "device": "cuda",
                                "gpu_name": "NVIDIA H200", "gpu_uuid_sha256": "b" * 64, "driver_version": "580.159.04",
                                "sm_clock_mhz": 1980, "memory_clock_mhz": 3201}} for i, r in enumerate(doc["candidates"])]


ATTACKS = {
    "environment torch 2.4.0+cu121, records 2.11.0+cu130": lambda d, f: env_torch(f, "2.4.0+cu121"),
    "environment torch a JSON object": lambda d, f: env_torch(f, {"version": "2.11"}),
    "sharded: case 2 ran under torch 2.5.1+cu121": lambda d, f: (sharded(d), d["candidates"][1]["observations"]["build"]
                                                                .update(torch="2.5.1+cu121")),
}


def verify(p):
    r = subprocess.run([sys.executable, str(ROOT / "verify_bundle.py"), str(p)], capture_output=True, text=True,
                       cwd=ROOT, timeout=600)
    return r.returncode, (r.stdout.splitlines() or [""])[-1]


rcs = {}
with tempfile.TemporaryDirectory() as tmp:
    for label, edit in ATTACKS.items():
        out = Path(tmp) / "forged.tar"
        fc.forge(Q7, edit, out)
        rcs[label], last = verify(out)
        with tarfile.open(out) as tf:
            summ = tf.extractfile([m for m in tf if m.name.endswith("/summary.txt")][0]).read().decode().splitlines()[1]
        doc = json.loads(fc.members(out)[1]["results/candidates.json"])
        print(f"===== {label}: exit {rcs[label]}  {last}")
        print(f"    summary.txt: {summ}")
        print(f"    records' build.torch: {[r['observations']['build']['torch'] for r in doc['candidates']]}")
    good = kit.load_good(S8)
    files = dict(good.files)
    kit.edit_json(files, "data/environment.json", lambda d: d["fields"]["torch_version"].update(value="2.4.0+cu121"))
    kit.trust_module().reforge(files)
    s = Path(tmp) / "study.tar"
    s.write_bytes(kit.repack(good, files))
    src, slast = verify(s)
    print(f"===== control: study bundle, environment torch 2.4.0+cu121: exit {src}  {slast}")
ok = all(v == 0 for v in rcs.values()) and src == 1
print(f"RESULT: candidate exits {list(rcs.values())}; study control exit {src}"
      + ("  -> ATTACK SUCCEEDED" if ok else "  -> attack refused"))
