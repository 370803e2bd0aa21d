"""C07: a load_inline candidate's build.ninja (the nvcc and host-compiler command lines: the flags in
effect, e.g. --use_fast_math) and its kernel sources (cuda.cu, main.cpp) marked "not copied" and
removed from the bag, the build record dropped and built_with emptied: PASS. Nothing explains why
they were not copied (copied_bytes 3.3 MB, far below the packer's 96 MiB cap); the bundle no longer
shows how the candidate was built or what its kernel is.
Run: .venv/bin/python repro/c07_build_files_uncopied.py"""
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



def uncopy(doc, files, suffixes):
    r = doc["candidates"][0]
    for pf in r["provenance"]["files"]:
        if pf["path"].endswith(suffixes):
            files.pop(pf.pop("bundle_path"))
            pf["copied"] = False
    r["provenance"]["builds"] = []
    r["provenance"]["built_with"] = []


if __name__ == "__main__":
    a = forge_and_verify(lambda d, f: uncopy(d, f, (".ninja",)), "attack 1: build.ninja not copied, build record dropped")
    b = forge_and_verify(lambda d, f: uncopy(d, f, (".ninja", ".cu", ".cpp")),
                         "attack 2: build.ninja, cuda.cu and main.cpp not copied, build record dropped")
    print(f"\nRESULT: exit {a} and {b}" + ("  -> ATTACK SUCCEEDED" if a == 0 or b == 0 else ""))
