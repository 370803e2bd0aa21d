"""The stage plan is written once (``model.study_rules.stage_plan``, issue 30): the engine runs
exactly its stages, in its order, and the verifier holds run.json to the same plan. The engine
runs on a GPU only; here its loop runs with every stage replaced by a recorder, so a change of
the engine's order is caught on the CPU, not only on the next GPU run."""
from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from kbrepro.harness import run as hrun
from kbrepro.harness.study import load_study
from kbrepro.model.study_rules import stage_plan

ROOT = Path(__file__).resolve().parent.parent


def _recorded_stages(example: str) -> list[str]:
    path = next((ROOT / "examples").glob(example))
    with tarfile.open(path) as tf:
        m = next(m for m in tf if m.name.endswith("/data/results/run.json"))
        return [s["name"] for s in json.loads(tf.extractfile(m).read())["stages"]]


@pytest.mark.parametrize("study,profile,example", [
    (None, "full", "pointwise-fusion-ftz-full-*.tar"),
    (None, "extended", "pointwise-fusion-ftz-extended-*.tar"),
    ("studies/layernorm", "full", "layernorm-l1-40-full-*.tar"),
])
def test_the_engine_runs_the_plan_the_verifier_expects(tmp_path, monkeypatch, study, profile, example):
    import torch

    cfg = load_study(str(ROOT / study) if study else None, profile)
    binding = cfg.binding()
    ran: list[str] = []
    run = object.__new__(hrun.StudyRun)
    run.study, run.binding, run.out, run.tol = cfg, binding, tmp_path, cfg.tolerance
    run.docs = {"run": {"stages": []}, "environment": {}}
    run.stages, run.current_stage, run.progress = [], None, hrun.Progress()
    for name in ("_setup", "_compile", "_witness", "_floor", "_copy_bandwidth", "_extra_shapes", "_self_test"):
        monkeypatch.setattr(run, name, lambda name=name: ran.append(name), raising=False)
    monkeypatch.setattr(run, "_task", lambda t: ran.append(f"task_{t}"), raising=False)
    own = binding.stage_names(cfg)
    monkeypatch.setattr(binding, "stages", lambda s: [(n, lambda ctx, n=n: ran.append(n)) for n in own],
                        raising=False)
    monkeypatch.setattr(hrun.fingerprint, "add_clocks", lambda env, when: env)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: 0)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda: 0)
    run._run_stages(0.0)
    plan = stage_plan(cfg.doc, cfg.tasks, own)
    assert [s["name"] for s in run.stages] == plan and len(ran) == len(plan)
    assert plan == _recorded_stages(example)  # what the engine wrote on the H200
    assert {"correctness", "timings"} <= set(run.docs)
