"""Imported bundles (the post's original files) are re-derived by the verifier's own importer.

Needs the post's H200 files in ``../shared/data/h200-seed-run`` beside the checkout (skipped,
saying so, where they are absent) and the pinned KernelBench files, taken from the example
bundle.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED_RUN = ROOT.parent / "shared" / "data" / "h200-seed-run"


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"kbrepro_corpus_{name}", ROOT / "tests" / "corpus" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _kernelbench(tmp: Path) -> Path:
    from conftest import kernelbench_from_example

    return kernelbench_from_example(tmp)


def _verify(archive: Path, tmp: Path, tag: str) -> tuple[int, dict]:
    report = tmp / f"{tag}.json"
    p = subprocess.run([sys.executable, str(ROOT / "verify_bundle.py"), str(archive), "--level", "static", "--json",
                        str(report)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    return p.returncode, json.loads(report.read_text())


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    if not SHARED_RUN.is_dir():
        pytest.skip("the post's original files are not in ../shared/data/h200-seed-run")
    from kbrepro.bundle import make

    tmp = tmp_path_factory.mktemp("imported")
    out = tmp / "imported.tar"
    make.make_from_results(SHARED_RUN, out, kernelbench=str(_kernelbench(tmp)), with_plots=False)
    return tmp, out


@pytest.mark.slow
def test_imported_bundle_fails_only_on_the_ftz_contradiction(imported):
    tmp, out = imported
    code, doc = _verify(out, tmp, "honest")
    assert code == 1
    failing = {t["name"]: t["problems"] for t in doc["tiers"] if t["status"] == "FAIL"}
    assert list(failing) == ["provenance"]
    assert all("nvrtc_ftz_true: FTZ evidence contradicts the variant" in p["message"] for p in failing["provenance"])


def _forge(tmp: Path, out: Path, name: str, mutate) -> Path:
    mc = _module("make_corpus")
    trust = _module("cases_trust")
    g = mc.load_good(out)
    f = dict(g.files)
    mutate(f)
    trust.reforge(f)
    payload = {p[len("data/"):]: b for p, b in f.items() if p.startswith("data/")}
    from kbrepro.bundle import pack

    dest = tmp / f"{name}.tar"
    dest.write_bytes(pack.tar_bytes(pack.make_bag(g.top, payload, g.info()), mtime=g.mtime))
    return dest


def test_a_converted_document_edited_consistently_is_caught(imported):
    """The forger edits the converted timings (every derived file re-made with the product's
    code): only re-deriving the document from the bundled originals exposes it."""
    tmp, out = imported
    from kbrepro.harness import jsonio

    def mutate(f):
        rel = "data/results/timings.json"
        doc = jsonio.loads_strict(f[rel], rel)
        for b in doc["blocks"]:
            for r in b.get("rounds", []):
                if "nvrtc_ftz_false" in r["times_ms"]:
                    r["times_ms"]["nvrtc_ftz_false"] *= 0.5
        f[rel] = jsonio.dumps(doc).encode("ascii")

    code, doc = _verify(_forge(tmp, out, "timings", mutate), tmp, "timings")
    assert code == 1
    docs_tier = next(t for t in doc["tiers"] if t["name"] == "documents")
    assert docs_tier["status"] == "FAIL"
    assert any(p["file"] == "data/results/timings.json"
               and "differs from what this verifier's importer derives from the bundled originals" in p["message"]
               for p in docs_tier["problems"])


def test_an_injected_note_is_caught(imported):
    tmp, out = imported
    from kbrepro.harness import jsonio

    def mutate(f):
        meta = jsonio.loads_strict(f["data/bundle.json"], "bundle.json")
        meta["notes"].append("All claims were independently reproduced.")
        f["data/bundle.json"] = jsonio.dumps(meta).encode("ascii")

    code, doc = _verify(_forge(tmp, out, "note", mutate), tmp, "note")
    docs_tier = next(t for t in doc["tiers"] if t["name"] == "documents")
    assert code == 1 and any("a note neither the importer nor the packer writes" in p["message"]
                             for p in docs_tier["problems"])
    assert hashlib.sha256(out.read_bytes()).hexdigest()  # the honest bundle is untouched
