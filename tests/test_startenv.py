"""What a process kbrepro starts inherits (harness/startenv.py): the environment kbrepro
started with, not what a library set in this process since (Inductor's TRITON_PTXAS_PATH
changed a Triton candidate's cubin on the H200, issue 15), plus what kbrepro sets on purpose."""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys

import pytest

import shard_runners
from kbrepro.harness import engines, isolate, startenv

LIB = "TRITON_TEST_SET_BY_A_LIBRARY"
OWN = "TRITON_TEST_SET_ON_PURPOSE"
FREE = "KBREPRO_TEST_NOT_A_TOOL_VARIABLE"
GONE = "TORCHINDUCTOR_TEST_REMOVED_BY_A_LIBRARY"


@pytest.fixture
def drift(monkeypatch):
    """A library's changes after start (one set, one removed) and one deliberate setting."""
    monkeypatch.setitem(startenv.AT_START, GONE, "was-here")
    monkeypatch.delenv(GONE, raising=False)
    monkeypatch.setenv(LIB, "/somewhere/ptxas")
    monkeypatch.delitem(startenv.AT_START, LIB, raising=False)
    monkeypatch.delitem(startenv.AT_START, OWN, raising=False)
    startenv.set_own(OWN, "1")
    yield
    startenv.AT_START.pop(OWN, None)
    os.environ.pop(OWN, None)


def _case(tmp_path, name="c0"):
    f = tmp_path / name
    f.mkdir()
    (f / "case.json").write_text(json.dumps({"names": [LIB, OWN, GONE, "KBREPRO_WORKER"]}))
    return f


def test_drifted_names_the_library_changes_and_not_the_deliberate_ones(drift, monkeypatch):
    monkeypatch.setenv(FREE, "passes")
    d = startenv.drifted()  # (an earlier test's torch.compile may have set TORCHINDUCTOR_CACHE_DIR: seen)
    assert {LIB, GONE} <= set(d) and OWN not in d and FREE not in d and d == sorted(d)
    env = startenv.child_env({"EXTRA": "x", GONE: None})
    assert LIB not in env and GONE not in env and env[OWN] == "1" and env["EXTRA"] == "x"
    assert env[FREE] == "passes"  # not a toolchain variable: inherited as it is now
    assert startenv.held("TRITON_PTXAS_PATH") and startenv.held("CUBLAS_WORKSPACE_CONFIG")
    assert not startenv.held("CUDA_VISIBLE_DEVICES") and not startenv.held("KBREPRO_DEBUG")


def test_a_subprocess_started_in_launching_gets_the_start_environment_and_ours_is_restored(drift):
    code = f"import os, json; print(json.dumps([os.environ.get(n) for n in ({LIB!r}, {OWN!r}, {GONE!r}, 'EXTRA')]))"
    with startenv.launching({"EXTRA": "x"}):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == [None, "1", "was-here", "x"]
    assert os.environ[LIB] == "/somewhere/ptxas" and GONE not in os.environ and "EXTRA" not in os.environ


def test_launching_restores_this_process_environment_when_the_start_fails(drift):
    with pytest.raises(RuntimeError):
        with startenv.launching({"EXTRA": "x"}):
            assert LIB not in os.environ
            raise RuntimeError("the start failed")
    assert os.environ[LIB] == "/somewhere/ptxas" and "EXTRA" not in os.environ


def test_start_with_env_spawns_a_process_without_the_library_changes(drift, tmp_path):
    f = _case(tmp_path)
    p = mp.get_context("spawn").Process(target=shard_runners.env_probe, args=(str(f),))
    isolate.start_with_env(p, {"KBREPRO_WORKER": "w1"})
    p.join(60)
    assert p.exitcode == 0
    assert json.loads((f / "env.json").read_text()) == {LIB: None, OWN: "1", GONE: "was-here", "KBREPRO_WORKER": "w1"}
    assert os.environ[LIB] == "/somewhere/ptxas" and "KBREPRO_WORKER" not in os.environ


def test_the_local_engine_case_process_gets_the_start_environment(drift, tmp_path):
    f = _case(tmp_path)
    out = engines.make_engine("local", shards=1, device="cpu").submit([f], shard_runners.env_probe)
    assert out[0].ok, out[0].error
    got = json.loads((f / "env.json").read_text())
    assert got[LIB] is None and got[OWN] == "1" and got[GONE] == "was-here" and got["KBREPRO_WORKER"] == "cpu0"


def test_a_submitit_local_job_gets_the_start_environment(drift, tmp_path):
    pytest.importorskip("submitit")
    import cloudpickle

    cloudpickle.register_pickle_by_value(shard_runners)  # the job process has no tests/ on its path
    f = _case(tmp_path)
    out = engines.make_engine("submitit", shards=1, device="cpu", opts={"cluster": "local"}).submit(
        [f], shard_runners.env_probe)
    assert out[0].ok, out[0].error
    got = json.loads((f / "env.json").read_text())
    assert got[LIB] is None and got[OWN] == "1" and got[GONE] == "was-here" and got["KBREPRO_WORKER"] == "submitit"


def _env_of(names):
    return [os.environ.get(n) for n in names]


def test_prefetch_workers_are_spawned_with_the_start_environment(drift):
    # the prefetcher's spawned workers inherited os.environ as it was (a library's TRITON_*,
    # TORCH_* ... included): the one kind of process kbrepro starts that skipped startenv
    from kbrepro.harness import prefetch

    src = b"import torch\nclass Model(torch.nn.Module):\n    pass\ndef get_init_inputs():\n    return []\n" \
          b"def get_inputs():\n    return []\n"
    with prefetch.Prefetcher([prefetch.Build(src=src, filename="tiny.py", seed=0)], workers=1) as pf:
        got = pf._pool.submit(_env_of, (LIB, OWN, GONE)).result(timeout=120)
    assert got == [None, "1", "was-here"]
    assert os.environ[LIB] == "/somewhere/ptxas" and GONE not in os.environ
