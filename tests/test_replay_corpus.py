"""Forgeries only a replay can catch (tests/corpus/replay_cases.py).

On CPU: every forgery passes the static tiers (exit 0): consistency alone cannot expose it.
On a GPU (marker ``gpu``): ``verify_bundle.py --level replay`` fails each one in the replay
tier with exit 1 and its named message, while the honest bundle it was made from replays
with exit 0.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
QUICK = ROOT / "tests" / "fixtures" / "results-quick-h200"


def _replay_cases():
    spec = importlib.util.spec_from_file_location("kbrepro_replay_cases", ROOT / "tests" / "corpus" / "replay_cases.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


RC = _replay_cases()


def _kernelbench(tmp: Path) -> Path:
    env = os.environ.get("KBREPRO_KERNELBENCH")
    if env and Path(env).is_dir():
        return Path(env)
    from conftest import kernelbench_from_example

    return kernelbench_from_example(tmp)


def _verify(archive: Path, tmp: Path, tag: str, *args: str) -> tuple[int, dict | None, str]:
    report = tmp / f"report-{tag}.json"
    p = subprocess.run([sys.executable, str(ROOT / "verify_bundle.py"), str(archive), *args, "--json", str(report)],
                       cwd=ROOT, capture_output=True, text=True, timeout=900)
    doc = json.loads(report.read_text()) if report.exists() else None
    return p.returncode, doc, p.stdout + p.stderr


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from kbrepro.bundle import make

    tmp = tmp_path_factory.mktemp("replay-corpus")
    good = tmp / "quick.tar"
    make.make_from_results(QUICK, good, kernelbench=str(_kernelbench(tmp)), with_plots=False)
    cases = RC.build(good, tmp / "cases")
    return {"good": good, "tmp": tmp, "cases": {c.name: c for c in cases}}


def test_five_forgeries_are_built(corpus):
    assert len(corpus["cases"]) >= 5
    for name in corpus["cases"]:
        assert (corpus["tmp"] / "cases" / f"{name}.tar").read_bytes() != corpus["good"].read_bytes()


@pytest.mark.parametrize("name", [c.name for c in RC.CASES])
def test_forgery_passes_every_static_tier(corpus, name):
    code, doc, out = _verify(corpus["tmp"] / "cases" / f"{name}.tar", corpus["tmp"], name, "--level", "static")
    assert code == 0, out
    assert [t["status"] for t in doc["tiers"]] == ["PASS"] * 5


@pytest.mark.gpu
def test_honest_quick_bundle_replays(corpus):
    code, doc, out = _verify(corpus["good"], corpus["tmp"], "good-replay", "--level", "replay")
    assert code == 0, out
    assert doc["tiers"][-1]["name"] == "replay" and doc["tiers"][-1]["status"] == "PASS"


@pytest.mark.gpu
@pytest.mark.parametrize("name", [c.name for c in RC.CASES])
def test_forgery_fails_replay(corpus, name):
    case = corpus["cases"][name]
    code, doc, out = _verify(corpus["tmp"] / "cases" / f"{name}.tar", corpus["tmp"], f"{name}-replay",
                             "--level", "replay")
    assert code == 1, out
    assert [t["name"] for t in doc["tiers"] if t["status"] == "FAIL"] == ["replay"], out
    assert any(case.fragment in p["message"] for p in doc["tiers"][-1]["problems"]), doc["tiers"][-1]["problems"]
