"""Study definitions (study.yaml of a study folder: schema, profiles), the KernelBench lock
checks on our fixture tasks, and the commands that rewrite a study's lock from the pin
(``lock --study``) and the registry of shipped studies (``register-studies``)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kbrepro import manifests
from kbrepro.harness.kernelbench import KernelBenchCheckout, load_lock, resolve_checkout
from kbrepro.harness.study import deep_merge, default_study_path, find_study, load_study, registry
from kbrepro.studies.pointwise_fusion.tasks import spec
from kbrepro.errors import KernelBenchPinError, UnreadableInputError, UsageError

FIX = Path(__file__).resolve().parent / "fixtures"
ROOT = Path(__file__).resolve().parent.parent
PUBLISHED = default_study_path()
PIN = manifests.path("kernelbench.pin.json")
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "__init__.py")


def _copy_study(src: Path, dest: Path) -> Path:
    """A private copy of a study folder (without caches), to edit."""
    shutil.copytree(src, dest, ignore=_IGNORE)
    return dest


def _published_doc() -> dict:
    return yaml.safe_load((PUBLISHED / "study.yaml").read_text())


def test_full_profile_has_the_published_counts():
    s = load_study(None, "full")
    assert s.name == "pointwise-fusion-ftz" and s.folder == PUBLISHED
    assert s.tasks == (53, 81, 95) and s.task_keys == [(2, 53), (2, 81), (2, 95)]
    c = s.doc["correctness"]
    assert len(c["seeds"]) * len(c["distributions"]) * len(s.tasks) == 60
    assert (s.tolerance.atol, s.tolerance.rtol) == (1e-4, 1e-4)
    t = s.doc["timing"]
    assert (t["warmups"], t["rounds"], t["invocations_per_pair"], t["order_seed"], t["seed"]) == (8, 25, 5, 913, 42)
    f = s.custom("ftz_cost")
    assert (f["rounds"], f["invocations_per_pair"], f["mode"]) == (35, 10, "graph")
    assert [v.name for v in s.variants] == ["cupy_default", "nvrtc_ftz_false", "nvrtc_ftz_true"]
    assert s.doc["extra_shapes"][0]["size"]["batch"] == 128
    assert len(s.custom("boundary")["values"]) == 23


def test_quick_profile_overrides_only_what_it_names():
    q, f = load_study(None, "quick"), load_study(None, "full")
    assert q.doc["correctness"]["seeds"] == [0]
    assert q.doc["correctness"]["distributions"] == f.doc["correctness"]["distributions"]
    assert q.doc["timing"]["order_seed"] == 913 and q.doc["timing"]["rounds"] < 25
    assert q.profile == "quick" and "profiles" not in q.doc


def test_deep_merge():
    assert deep_merge({"a": {"b": 1, "c": 2}, "d": [1]}, {"a": {"b": 5}, "d": [2, 3]}) == {"a": {"b": 5, "c": 2}, "d": [2, 3]}


def _write(tmp_path, doc) -> Path:
    """A copy of the published study folder whose study.yaml is ``doc``; returns its study.yaml."""
    folder = tmp_path / "study"
    if not folder.is_dir():
        _copy_study(PUBLISHED, folder)
    p = folder / "study.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def test_the_published_study_loads_from_its_folder_or_its_study_yaml():
    a, b = load_study(PUBLISHED, "quick"), load_study(PUBLISHED / "study.yaml", "quick")
    assert a.doc == b.doc and a.sha256 == b.sha256 and a.folder == b.folder == PUBLISHED
    assert a.source_bytes == (PUBLISHED / "study.yaml").read_bytes()
    assert {"study.yaml", "binding.py", "claims.yaml", "kernelbench.lock.json", "fused_tails.cu"} <= set(a.files)
    assert a.claims_file == "claims.yaml" and a.lock_file == "kernelbench.lock.json"
    assert find_study(a.name) == PUBLISHED and find_study("no-such-study") is None


def test_study_schema_violations_are_reported_with_paths(tmp_path):
    def atol(doc):
        doc["predicate"]["atol"] = -1

    def task(doc):
        doc["tasks"] = [{"level": 2, "task": 53}, 12]

    def rounds(doc):
        del doc["timing"]["rounds"]

    # one error line: each violation alone is named with its path ...
    for edit, fragments in ((atol, ["$.predicate.atol"]), (task, ["$.tasks[1]"]), (rounds, ["$.timing", "rounds"])):
        doc = _published_doc()
        edit(doc)
        with pytest.raises(UsageError) as e:
            load_study(_write(tmp_path, doc))
        msg = str(e.value).splitlines()[0]
        assert all(f in msg for f in fragments) and "more)" not in msg, (fragments, msg)
    # ... and together the first by path, with the count of the others
    doc = _published_doc()
    for edit in (atol, task, rounds):
        edit(doc)
    with pytest.raises(UsageError) as e:
        load_study(_write(tmp_path, doc))
    msg = str(e.value).splitlines()[0]
    assert "$.predicate.atol" in msg and "(and 2 more)" in msg, msg


def test_profile_that_breaks_the_schema_is_refused(tmp_path):
    doc = _published_doc()
    doc["profiles"]["broken"] = {"timing": {"rounds": 0}}
    with pytest.raises(UsageError, match="broken"):
        load_study(_write(tmp_path, doc), "broken")
    with pytest.raises(UsageError, match="no profile"):
        load_study(_write(tmp_path, doc), "nope")


def test_custom_settings_are_checked_by_the_studys_own_schema(tmp_path):
    doc = _published_doc()
    doc["custom"]["ftz_cost"]["rounds"] = "many"
    with pytest.raises(UsageError, match=r"\$\.custom\.ftz_cost\.rounds"):
        load_study(_write(tmp_path, doc))


@pytest.mark.slow
def test_unknown_ftz_cost_variant(tmp_path):
    """The generic schema cannot know the published study's FTZ-cost setting; its binding's
    validate() refuses it when the binding is loaded, which the CLIs do before any GPU work."""
    doc = _published_doc()
    doc["custom"]["ftz_cost"]["variants"] = ["nvrtc_ftz_true", "ghost"]
    st = load_study(_write(tmp_path, doc))
    with pytest.raises(UsageError, match="custom.ftz_cost names variant 'ghost'"):
        st.binding()
    r = subprocess.run([sys.executable, "-m", "kbrepro.harness", "run", "--study", str(tmp_path / "study"),
                        "--profile", "quick", "--out", str(tmp_path / "o")], capture_output=True, text=True,
                       cwd=ROOT)
    assert r.returncode == 2 and "ghost" in r.stderr.splitlines()[0] and not (tmp_path / "o").exists()


def test_bad_or_missing_study_yaml(tmp_path):
    (tmp_path / "bad.yaml").write_text("a: [1, 2\n")
    with pytest.raises(UnreadableInputError):
        load_study(tmp_path / "bad.yaml")
    with pytest.raises(UnreadableInputError):
        load_study(tmp_path / "missing.yaml")


def test_project_pin_and_the_published_studys_lock_pin_the_upstream_commit():
    pin = load_lock(PIN)
    lock = load_lock(PUBLISHED / "kernelbench.lock.json")
    assert pin.commit == lock.commit == "423217d9fda91e0c2d67e4a43bf62f96f6d104f1"
    assert "LICENSE" in lock.files and lock.files["LICENSE"] == pin.files["LICENSE"]
    for t in (14, 51, 53, 81, 95):
        assert lock.task_path(2, t).startswith(f"KernelBench/level2/{t}_")
        assert lock.files[lock.task_path(2, t)] == pin.files[pin.task_path(2, t)]
    assert sorted(lock.files) == sorted([lock.task_path(2, t) for t in (14, 51, 53, 81, 95)] + ["LICENSE"])


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


# ---------------------------------------------------------------------------- lock --study, register-studies
def _harness(*args):
    from click.testing import CliRunner

    from kbrepro.harness.__main__ import cli

    try:
        runner = CliRunner(mix_stderr=False)  # click 8.1; 8.2 separates stderr always
    except TypeError:
        runner = CliRunner()
    return runner.invoke(cli, [str(a) for a in args])


@pytest.fixture()
def project(tmp_path, monkeypatch):
    """A private product tree: copies of the shipped study folders and of the registry, with
    the product pointed at it (``studies_root()`` and ``manifests.path``); the pin stays the
    product's."""
    from kbrepro.harness import kernelbench

    proj = tmp_path / "proj"
    for name, rec in registry().items():
        _copy_study(default_study_path().parent / rec["folder"], proj / "studies" / rec["folder"])
    (proj / "manifests").mkdir(parents=True)
    shutil.copy(manifests.path("studies.json"), proj / "manifests" / "studies.json")
    shutil.copy(PIN, proj / "manifests" / "kernelbench.pin.json")
    monkeypatch.setattr(kernelbench, "PROJECT_ROOT", proj)
    monkeypatch.setattr(manifests, "MANIFEST_DIR", proj / "manifests")
    return proj


@pytest.mark.parametrize("name", sorted(registry()))
@pytest.mark.parametrize("as_yaml", [False, True])
def test_lock_rewrites_each_shipped_studys_lock_byte_identically_from_the_pin(tmp_path, name, as_yaml):
    shipped = find_study(name)
    folder = _copy_study(shipped, tmp_path / shipped.name)
    (folder / "kernelbench.lock.json").write_text("{}\n")  # a damaged lock: the pin alone decides
    r = _harness("lock", "--study", folder / "study.yaml" if as_yaml else folder)
    assert r.exit_code == 0, (r.output, r.exception)
    assert (folder / "kernelbench.lock.json").read_bytes() == (shipped / "kernelbench.lock.json").read_bytes()
    pin = load_lock(PIN)
    n = len(load_lock(shipped / "kernelbench.lock.json").files)
    assert r.stdout.strip() == f"lock of study {name} written for KernelBench {pin.commit}: {n} files"


def test_lock_without_study_rewrites_the_published_studys_lock(project):
    lock = project / "studies" / PUBLISHED.name / "kernelbench.lock.json"
    good = lock.read_bytes()
    lock.write_text("{}\n")
    r = _harness("lock")
    assert r.exit_code == 0, (r.output, r.exception)
    assert lock.read_bytes() == good == (PUBLISHED / "kernelbench.lock.json").read_bytes()


def test_lock_lists_the_tasks_the_study_uses_with_the_pins_hashes(tmp_path):
    folder = _copy_study(find_study("layernorm-l1-40"), tmp_path / "ln")
    doc = yaml.safe_load((folder / "study.yaml").read_text())
    doc["tasks"].append({"level": 1, "task": 19})
    (folder / "study.yaml").write_text(yaml.safe_dump(doc))
    r = _harness("lock", "--study", folder)
    assert r.exit_code == 0, (r.output, r.exception)
    pin, lock = load_lock(PIN), load_lock(folder / "kernelbench.lock.json")
    assert lock.commit == pin.commit and lock.repository == pin.repository
    assert sorted(lock.files) == ["KernelBench/level1/19_ReLU.py", "KernelBench/level1/40_LayerNorm.py", "LICENSE"]
    assert all(lock.files[p] == pin.files[p] for p in lock.files)
    assert r.stdout.rstrip().endswith(": 3 files")


def test_lock_of_a_task_the_pin_does_not_hold_is_refused_and_writes_nothing(tmp_path):
    folder = _copy_study(find_study("layernorm-l1-40"), tmp_path / "ln")
    doc = yaml.safe_load((folder / "study.yaml").read_text())
    doc["tasks"].append({"level": 1, "task": 9999})
    (folder / "study.yaml").write_text(yaml.safe_dump(doc))
    before = (folder / "kernelbench.lock.json").read_bytes()
    r = _harness("lock", "--study", folder)
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.stderr.splitlines()[0] == "error: the KernelBench lock has no file for level 1 task 9999"
    assert (folder / "kernelbench.lock.json").read_bytes() == before


def test_register_studies_rewrites_the_registry_and_adds_a_folder(project):
    reg = project / "manifests" / "studies.json"
    shipped = reg.read_bytes()
    r = _harness("register-studies")
    assert r.exit_code == 0, (r.output, r.exception)
    assert reg.read_bytes() == shipped  # the shipped registry is what the folders give
    assert r.stdout.strip() == f"{len(registry())} studies registered: {', '.join(sorted(registry()))}"

    # an edited file of a shipped study is re-hashed
    claims = project / "studies" / "layernorm" / "claims.yaml"
    claims.write_text(claims.read_text() + "\n# edited\n")
    assert _harness("register-studies").exit_code == 0
    import hashlib

    assert registry()["layernorm-l1-40"]["files"]["claims.yaml"] == hashlib.sha256(claims.read_bytes()).hexdigest()
    assert registry()["layernorm-l1-40"]["files"]["claims.yaml"] != json.loads(shipped)["studies"][
        "layernorm-l1-40"]["files"]["claims.yaml"]

    # a new folder under studies/ is added under its study name
    new = _copy_study(project / "studies" / "layernorm", project / "studies" / "layernorm_copy")
    doc = yaml.safe_load((new / "study.yaml").read_text())
    doc["name"] = "layernorm-copy"
    (new / "study.yaml").write_text(yaml.safe_dump(doc))
    assert find_study("layernorm-copy") is None
    r = _harness("register-studies", "--add", new)
    assert r.exit_code == 0, (r.output, r.exception)
    assert find_study("layernorm-copy") == project / "studies" / "layernorm_copy"
    rec = registry()["layernorm-copy"]
    assert rec["folder"] == "layernorm_copy" and set(rec["files"]) == set(json.loads(shipped)["studies"][
        "layernorm-l1-40"]["files"])
    assert len(registry()) == len(json.loads(shipped)["studies"]) + 1


def test_register_studies_refuses_a_folder_outside_studies_or_a_name_taken(project, tmp_path):
    reg = project / "manifests" / "studies.json"
    before = reg.read_bytes()
    outside = _copy_study(project / "studies" / "layernorm", tmp_path / "elsewhere")
    r = _harness("register-studies", "--add", outside)
    assert r.exit_code == 2 and "not a folder directly under" in r.stderr.splitlines()[0]
    twin = _copy_study(project / "studies" / "layernorm", project / "studies" / "layernorm_twin")
    r = _harness("register-studies", "--add", twin)
    assert r.exit_code == 2 and "'layernorm-l1-40' is already registered" in r.stderr.splitlines()[0]
    assert reg.read_bytes() == before
