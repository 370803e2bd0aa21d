"""M01: inputs that make a verifier check raise (KeyError, StatisticsError); the crash is contained
as "the bundle's data broke this verifier's documents" (exit 1, FAIL, no traceback), so the verdict
is right, but the check that owns the evidence never names it. Only the document is replaced and the
manifests recomputed (the other derived files keep their bytes).
Run: .venv/bin/python repro/m01_contained_crashes.py"""
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

import dataclasses  # noqa: E402
import tarfile  # noqa: E402

from kbrepro.bundle import pack  # noqa: E402
from kbrepro.harness import jsonio  # noqa: E402


def manifests_only(edit, label):
    with tarfile.open(Q7) as tf:
        files = {m.name.split("/", 1)[1]: tf.extractfile(m).read() for m in tf if m.isfile()}
    info = files["bag-info.txt"].decode()
    name = info.split("External-Identifier: ", 1)[1].split("\n", 1)[0]
    payload = {k[len("data/"):]: v for k, v in files.items() if k.startswith("data/")}
    doc = json.loads(payload["results/candidates.json"])
    edit(doc)
    payload["results/candidates.json"] = jsonio.dumps(doc).encode()
    keys = [ln.split(": ", 1) for ln in info.splitlines() if ": " in ln]
    bag = pack.make_bag(name, payload, [(k, v) for k, v in keys if k in pack.BAG_INFO_KEYS])
    bag = dataclasses.replace(bag, summary=files.get("summary.txt", b""))
    with tempfile.TemporaryDirectory(prefix="kbrepro-redteam-") as tmp:
        out = Path(tmp) / "forged.tar"
        pack.write_archive(bag, out)
        return verify(out, label)


if __name__ == "__main__":
    a = manifests_only(lambda d: d["candidates"][0]["blocks"][0]["rounds"][3]["times_ms"].pop("candidate"),
                       "a round without the candidate's time")
    b = manifests_only(lambda d: d["candidates"][0]["timing"]["per_call"].update(fresh=[]),
                       "per_call.fresh emptied")
    print(f"\nRESULT: exit {a} and {b} (look for 'broke this verifier')")
