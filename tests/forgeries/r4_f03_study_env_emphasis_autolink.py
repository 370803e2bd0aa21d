"""F03: a study bundle's environment value passes the inert-strings rule while it holds Markdown
emphasis ('_verified_') and an e-mail address (a GFM autolink on GitHub): bundle/verify/inert.py
lets single underscores through its _PLAIN fast path and its strict pattern lacks '@' (the
product's own kbrepro.inert treats '@' as an autolink), so REPORT.md and summary.txt re-render
byte for byte and the verdict is PASS. docs/trust.md: "no ... emphasis or autolink".

Run from the repository root:  .venv/bin/python repro/f03_study_env_emphasis_autolink.py"""
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from corpus import make_corpus as kit  # noqa: E402
from kbrepro.inert import is_inert  # noqa: E402

S8 = ROOT / "examples/formats/pointwise-fusion-ftz-full-format8.tar"
VALUE = "580.159.04 _verified_ - report issues to security@nvidia-audit.example"

good = kit.load_good(S8)
files = dict(good.files)
kit.edit_json(files, "data/environment.json", lambda d: d["fields"]["driver_version"].update(value=VALUE))
kit.trust_module().reforge(files)
with tempfile.TemporaryDirectory() as tmp:
    out = Path(tmp) / "forged.tar"
    out.write_bytes(kit.repack(good, files))
    p = subprocess.run([sys.executable, str(ROOT / "verify_bundle.py"), str(out)], capture_output=True, text=True,
                       cwd=ROOT, timeout=600)
    print(f"===== verify_bundle.py forged.tar -> exit {p.returncode}")
    print(p.stdout.splitlines()[-1])
    with tarfile.open(out) as tf:
        rep = tf.extractfile([m for m in tf if m.name.endswith("data/REPORT.md")][0]).read().decode()
        summ = tf.extractfile([m for m in tf if m.name.endswith("/summary.txt")][0]).read().decode()
line = next(ln for ln in rep.splitlines() if "nvidia-audit" in ln)
print("REPORT.md:", line[:260])
print("summary.txt:", next(ln for ln in summ.splitlines() if "nvidia-audit" in ln))
print("kbrepro.inert.is_inert(value) =", is_inert(VALUE))
ok = p.returncode == 0 and "_verified_" in line and "@nvidia-audit.example" in line and not is_inert(VALUE)
print(f"RESULT: exit {p.returncode}; REPORT.md/summary.txt carry emphasis and an e-mail autolink the product's own "
      "inertness rule refuses" + ("  -> ATTACK SUCCEEDED" if ok else "  -> attack refused"))
