"""Study YAML (schema, profiles) and the KernelBench lock checks, on our fixture tasks."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from kbrepro import manifests
from kbrepro.harness.kernelbench import KernelBenchCheckout, load_lock, resolve_checkout
from kbrepro.harness.study import deep_merge, load_study
from kbrepro.harness.tasks import spec
from kbrepro.errors import KernelBenchPinError, UnreadableInputError, UsageError

FIX = Path(__file__).resolve().parent / "fixtures"


def test_full_profile_has_the_published_counts():
    s = load_study(None, "full")
    assert s.tasks == (53, 81, 95)
    c = s.doc["correctness"]
    assert len(c["seeds"]) * len(c["distributions"]) * len(s.tasks) == 60
    assert (s.tolerance.atol, s.tolerance.rtol) == (1e-4, 1e-4)
    t = s.doc["timing"]
    assert (t["warmups"], t["rounds"], t["invocations_per_pair"], t["order_seed"], t["seed"]) == (8, 25, 5, 913, 42)
    f = s.doc["ftz_cost"]
    assert (f["rounds"], f["invocations_per_pair"], f["mode"]) == (35, 10, "graph")
    assert [v.name for v in s.variants] == ["cupy_default", "nvrtc_ftz_false", "nvrtc_ftz_true"]
    assert s.doc["extra_shapes"][0]["batch"] == 128
    assert len(s.doc["controls"]["boundary"]["values"]) == 23


def test_quick_profile_overrides_only_what_it_names():
    q, f = load_study(None, "quick"), load_study(None, "full")
    assert q.doc["correctness"]["seeds"] == [0]
    assert q.doc["correctness"]["distributions"] == f.doc["correctness"]["distributions"]
    assert q.doc["timing"]["order_seed"] == 913 and q.doc["timing"]["rounds"] < 25
    assert q.profile == "quick" and "profiles" not in q.doc


def test_deep_merge():
    assert deep_merge({"a": {"b": 1, "c": 2}, "d": [1]}, {"a": {"b": 5}, "d": [2, 3]}) == {"a": {"b": 5, "c": 2}, "d": [2, 3]}


def _write(tmp_path, doc) -> Path:
    p = tmp_path / "study.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def test_study_schema_violations_are_reported_with_paths(tmp_path):
    doc = yaml.safe_load(manifests.path("study_fusion.yaml").read_text())
    doc["predicate"]["atol"] = -1
    doc["tasks"] = [53, 12]
    del doc["timing"]["rounds"]
    with pytest.raises(UsageError) as e:
        load_study(_write(tmp_path, doc))
    msg = str(e.value)
    assert "$.predicate.atol" in msg and "$.tasks[1]" in msg and "$.timing" in msg and "rounds" in msg


def test_profile_that_breaks_the_schema_is_refused(tmp_path):
    doc = yaml.safe_load(manifests.path("study_fusion.yaml").read_text())
    doc["profiles"]["broken"] = {"timing": {"rounds": 0}}
    with pytest.raises(UsageError, match="broken"):
        load_study(_write(tmp_path, doc), "broken")
    with pytest.raises(UsageError, match="no profile"):
        load_study(_write(tmp_path, doc), "nope")


def test_unknown_ftz_cost_variant_and_bad_yaml(tmp_path):
    doc = yaml.safe_load(manifests.path("study_fusion.yaml").read_text())
    doc["ftz_cost"]["variants"] = ["nvrtc_ftz_true", "ghost"]
    with pytest.raises(UsageError, match="ghost"):
        load_study(_write(tmp_path, doc))
    (tmp_path / "bad.yaml").write_text("a: [1, 2\n")
    with pytest.raises(UnreadableInputError):
        load_study(tmp_path / "bad.yaml")
    with pytest.raises(UnreadableInputError):
        load_study(tmp_path / "missing.yaml")


def test_project_lock_pins_the_upstream_commit():
    lock = load_lock(manifests.path("kernelbench.lock.json"))
    assert lock.commit == "423217d9fda91e0c2d67e4a43bf62f96f6d104f1"
    assert "LICENSE" in lock.files
    for t in (14, 51, 53, 81, 95):
        assert lock.task_path(2, t).startswith(f"KernelBench/level2/{t}_")


@pytest.fixture()
def checkout(tmp_path):
    root = tmp_path / "kb"
    shutil.copytree(FIX / "kernelbench", root)
    return root, load_lock(FIX / "kernelbench.lock.json")


def test_fixture_checkout_verifies_and_loads(checkout):
    root, lock = checkout
    kb = KernelBenchCheckout(root, lock)
    kb.verify()
    assert kb.commit_verified_by == "file hashes"
    mod = kb.load_task(2, 81)
    model = mod.Model(*mod.get_init_inputs())
    x = mod.get_inputs()[0]
    z = spec(81).linear(model)(x)
    assert (spec(81).reference_tail(model, z) == model(x)).all()


@pytest.mark.parametrize("task", [53, 95])
def test_reference_tails_equal_the_task_forward(checkout, task):
    import torch

    root, lock = checkout
    mod = KernelBenchCheckout(root, lock).load_task(2, task)
    torch.manual_seed(3)
    model = mod.Model(*mod.get_init_inputs())
    x = mod.get_inputs()[0] * 50
    s = spec(task)
    out = s.reference_tail(model, s.linear(model)(x))
    assert torch.equal(out.view(torch.int32), model(x).view(torch.int32))
    init = s.init_at(list(mod.get_init_inputs()), 4, 6)
    assert init[:2] == [4, 6] and (task != 95 or init[2] == (6,))


def test_missing_checkout_says_how_to_fix(tmp_path, checkout):
    _, lock = checkout
    with pytest.raises(KernelBenchPinError) as e:
        KernelBenchCheckout(tmp_path / "nowhere", lock).verify()
    assert "git submodule update --init KernelBench" in str(e.value)
    assert e.value.exit_code == 3


def test_changed_or_missing_file_is_named(checkout):
    root, lock = checkout
    f = root / "KernelBench/level2/53_Fixture_Gemm_Scaling_Hardtanh_GELU.py"
    f.write_text(f.read_text().replace("0.5", "0.25"))
    (root / "LICENSE").unlink()
    with pytest.raises(KernelBenchPinError) as e:
        KernelBenchCheckout(root, lock).verify()
    assert "53_Fixture" in str(e.value) and "LICENSE is missing" in str(e.value)
    with pytest.raises(KernelBenchPinError):
        KernelBenchCheckout(root, lock).load_task(2, 53)


def test_other_commit_is_refused(checkout):
    root, lock = checkout
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e.invalid", "PATH": "/usr/bin:/bin"}
    subprocess.run(["git", "init", "-q", str(root)], check=True, env=env)
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True, env=env)
    subprocess.run(["git", "-C", str(root), "commit", "-qm", "x"], check=True, env=env)
    with pytest.raises(KernelBenchPinError, match="is at commit"):
        KernelBenchCheckout(root, lock).verify()


def test_unknown_task_in_lock():
    lock = load_lock(FIX / "kernelbench.lock.json")
    with pytest.raises(UsageError, match="task 14"):
        lock.task_path(2, 14)


def test_checkout_location_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("KBREPRO_KERNELBENCH", str(tmp_path / "env"))
    assert resolve_checkout(None) == (tmp_path / "env").resolve()
    assert resolve_checkout(str(tmp_path / "cli")) == (tmp_path / "cli").resolve()
    monkeypatch.delenv("KBREPRO_KERNELBENCH")
    assert resolve_checkout(None).name == "KernelBench"


def test_a_run_that_cannot_start_leaves_a_failed_record_and_its_log(tmp_path):
    import json

    import torch

    from kbrepro.harness.run import run_study
    from kbrepro.harness.study import load_study

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the run would start")
    with pytest.raises(Exception) as e:
        run_study(load_study(None, "quick"), tmp_path / "r")
    assert getattr(e.value, "exit_code", None) == 4
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    assert run["status"] == "failed" and run["failure"]["stage"] == "setup"
    log = (tmp_path / "r" / "logs" / "run.log").read_text()
    assert "stage setup failed" in log and "no CUDA GPU" in log
    assert not (tmp_path / "r" / "correctness.json").exists()
