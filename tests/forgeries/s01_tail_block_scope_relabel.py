"""S01: a study block's ``scope`` field is never held against its id. Five tail blocks
(53.tail.events, 53.tail.graph, 81.tail.events, 81.tail.graph, 95.tail.events) get scope "tailx" and
their two baseline arms renamed eager_tailx / torchscript_tailx (the arm rule is derived from the
block's own scope field). Claims C09-C11 select blocks by scope == 'tail', so those blocks drop out
silently: C10 ("speed-up over the eager tail lies in 2.8x to 5.5x": task 53 measures 1.65x) and C11
flip from fails to holds: 14 of 14 claims hold, PASS. No timing number was changed.
Run: .venv/bin/python repro/s01_tail_block_scope_relabel.py"""
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


IDS = {"53.tail.events", "53.tail.graph", "81.tail.events", "81.tail.graph", "95.tail.events"}


def relabel(doc, scope="tailx"):
    ren = {"eager_tail": "eager_" + scope, "torchscript_tail": "torchscript_" + scope}
    for b in doc["blocks"]:
        if b["id"] in IDS:
            b["scope"] = scope
            b["arms"] = [ren.get(a, a) for a in b["arms"]]
            for r in b["rounds"]:
                r["times_ms"] = {ren.get(k, k): v for k, v in r["times_ms"].items()}
                r["order"] = [ren.get(a, a) for a in r["order"]]


if __name__ == "__main__":
    a = verify(S8, "genuine study bundle (C10, C11 fail)")
    b = forge_and_verify([(TIMINGS, relabel)], "attack: five tail blocks relabelled scope 'tailx'")
    print(f"\nRESULT: genuine exit {a}; forged exit {b}" + ("  -> ATTACK SUCCEEDED" if b == 0 else ""))
