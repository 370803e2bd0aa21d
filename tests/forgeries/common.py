"""What every forgery of the round shares: the verifier run on a forged bundle, and the two ways
to forge one with the project's own packer as a library (candidate bundles:
tests/forge_candidates.py; study bundles: the corpus kit, tests/corpus/make_corpus.py, with
claims, report, figure data and RO-Crate derived again from the edited records)."""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
import forge_candidates as fc  # noqa: E402  (the product's own packer as a library, its record checks off)
from corpus import make_corpus as kit  # noqa: E402  (the corpus kit: product packer as a library)

Q7 = ROOT / "examples/formats/candidates-quick-format7.tar"
S8 = ROOT / "examples/formats/pointwise-fusion-ftz-full-format8.tar"
TIMINGS, CORRECTNESS, RUN = "data/results/timings.json", "data/results/correctness.json", "data/results/run.json"


def env_edit(files, fn):
    """Edit results/environment.json of the results folder being re-packed (canonical form)."""
    env = json.loads(files["results/environment.json"])
    fn(env["fields"])
    files["results/environment.json"] = (json.dumps(env, indent=2, sort_keys=True) + "\n").encode()


def run_verifier(path, label) -> subprocess.CompletedProcess:
    """``verify_bundle.py path -v``, its output printed under ``label``."""
    p = subprocess.run([sys.executable, str(ROOT / "verify_bundle.py"), str(path), "-v"], capture_output=True,
                       text=True, cwd=ROOT)
    print(f"===== {label}: verify_bundle.py {Path(path).name} -v  -> exit {p.returncode}")
    print(p.stdout.rstrip())
    if p.stderr.strip():
        print("stderr:", p.stderr.strip()[-2000:])
    return p


def verify(path, label):
    """:func:`run_verifier`'s exit code."""
    return run_verifier(path, label).returncode


def forge_and_verify(edit, label, example=Q7, check=None, **kw):
    """A candidate bundle: ``edit(doc, files)`` on the example's results, packed again, verified
    (by ``check(path, label)``, :func:`verify` by default)."""
    with tempfile.TemporaryDirectory(prefix="kbrepro-redteam-") as tmp:
        out = Path(tmp) / "forged.tar"
        fc.forge(example, edit, out, **kw)
        return (check or verify)(out, label)


def forge_study(edits, label, example=S8, check=None):
    """A study bundle: ``edits`` [(bag path, fn(doc))] applied, claims.json, REPORT.md, the figures'
    data and the RO-Crate file derived again from the edited records (cases_trust.reforge), the
    manifests recomputed, verified (by ``check``, :func:`verify` by default)."""
    good = kit.load_good(example)
    files = dict(good.files)
    for rel, fn in edits:
        kit.edit_json(files, rel, fn)
    kit.trust_module().reforge(files)
    with tempfile.TemporaryDirectory(prefix="kbrepro-redteam-") as tmp:
        out = Path(tmp) / "forged.tar"
        out.write_bytes(kit.repack(good, files))
        return (check or verify)(out, label)
