"""F09: environment.json is accepted with fields the packer never writes and with values of the
wrong JSON type, in both bundle kinds: an extra field "verified_by" ("replayed PASS on 8 H200s by
NVIDIA"), sm_count "132" (a string), memory_bytes 1 and driver_version 580 (an integer) on an
NVIDIA H200. docs/trust.md: the bag holds "exactly what the packer writes for its records ... in
the packer's exact forms", and "JSON values are compared as JSON"; sm_count and memory_bytes also
go into the signed SLSA statement's internalParameters.gpu of a signed bundle.
(Type of each value and the packer's field set are never checked; the GPU table holds name, CC and
L2 only.)

Run from the repository root:  .venv/bin/python repro/f09_environment_not_the_packers_form.py"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
import forge_candidates as fc  # noqa: E402
from corpus import make_corpus as kit  # noqa: E402

Q7 = ROOT / "examples/formats/candidates-quick-format7.tar"
S8 = ROOT / "examples/formats/pointwise-fusion-ftz-full-format8.tar"


def fields(f):
    f["verified_by"] = {"reason": None, "source": "NVIDIA", "value": "replayed PASS on 8 H200s by NVIDIA"}
    f["sm_count"]["value"] = "132"
    f["memory_bytes"]["value"] = 1
    f["driver_version"]["value"] = 580


def verify(p):
    r = subprocess.run([sys.executable, str(ROOT / "verify_bundle.py"), str(p)], capture_output=True, text=True,
                       cwd=ROOT, timeout=600)
    return r.returncode, r.stdout.splitlines()[-1]


def cand(doc, files):
    env = json.loads(files["results/environment.json"])
    fields(env["fields"])
    files["results/environment.json"] = (json.dumps(env, indent=2, sort_keys=True) + "\n").encode()


with tempfile.TemporaryDirectory() as tmp:
    a = Path(tmp) / "c.tar"
    fc.forge(Q7, cand, a)
    rc1, l1 = verify(a)
    good = kit.load_good(S8)
    files = dict(good.files)
    kit.edit_json(files, "data/environment.json", lambda d: fields(d["fields"]))
    kit.trust_module().reforge(files)
    b = Path(tmp) / "s.tar"
    b.write_bytes(kit.repack(good, files))
    rc2, l2 = verify(b)
print("candidate bundle:", rc1, l1)
print("study bundle:    ", rc2, l2)
ok = rc1 == 0 and rc2 == 0
print(f"RESULT: candidate exit {rc1}, study exit {rc2} with an unwritten field and mistyped GPU facts"
      + ("  -> ATTACK SUCCEEDED" if ok else "  -> attack refused"))
