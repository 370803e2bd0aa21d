"""Tuple-valued size globals (``input_shape = (32768,)``, ``kernel_size = (5, 7)``) end to end:
the one ``--size`` parser, the schemas and the typed model, the run's and the child's rule
(a value of the kind of the task's own), and a CPU run of a pinned task at a tuple size,
packed and verified; a record that states an int where the task has a tuple is a
verification problem, not a crash."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kbrepro import schemas
from kbrepro.bundle import candidates as bc
from kbrepro.errors import UsageError
from kbrepro.harness import cases as hcases
from kbrepro.model import protocol, strict
from kbrepro.model import sizes as msizes
from kbrepro.model import task_inputs as ti
from kbrepro.model.scalars import SIZES

from test_cli_misuse import cli, one_error  # noqa: E402 (tests/ is on the path)

TUPLE_TASK = b'''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim
    def forward(self, x):
        return torch.cumsum(x, dim=self.dim)

batch_size = 8
input_shape = (32,)
kernel_size = (5, 7)
dim = 1

def get_inputs():
    return [torch.rand(batch_size, *input_shape)]

def get_init_inputs():
    return [dim]
'''


@pytest.mark.parametrize("text,want", [("8", 8), ("(4096,)", (4096,)), ("4096,", (4096,)), ("(5,7)", (5, 7)),
                                       ("5,7", (5, 7)), (" ( 5 , 7 ) ", (5, 7)), ("1,2,3,4,5,6,7,8", tuple(range(1, 9)))])
def test_a_value_is_an_int_or_a_tuple_of_ints(text, want):
    got = msizes.parse_value(text)
    assert got == want and type(got) is type(want)


@pytest.mark.parametrize("text,fragment", [("(4096)", "one-entry tuple is written (4096,)"), ("0", "zero or less"),
                                           ("-3", "zero or less"), ("5,0", "zero or less"), ("()", "is not"),
                                           ("", "empty"), ("x", "is not"), ("5,,7", "is not"), ("(5,7", "is not"),
                                           ("1e3", "is not"), ("[5, 7]", "is not"), ("__import__('os')", "is not"),
                                           ("1,2,3,4,5,6,7,8,9", "more than 8"), ("99999999", "over")])
def test_a_malformed_value_says_why(text, fragment):
    with pytest.raises(ValueError) as e:
        msizes.parse_value(text)
    assert fragment in str(e.value)


def test_the_option_parser_reads_pairs_and_refuses_each_mistake_as_a_usage_error():
    assert bc.parse_size_options(["input_shape=(64,)", "batch_size=3", "kernel_size=5,7"]) == {
        "input_shape": (64,), "batch_size": 3, "kernel_size": (5, 7)}
    assert bc.parse_extra_shape("kernel_size=5,7,batch_size=2") == {"kernel_size": (5, 7), "batch_size": 2}
    assert bc.parse_extra_shape("input_shape=(64,),batch_size=2") == {"input_shape": (64,), "batch_size": 2}
    for items, fragment in [(["a=1", "a=2"], "a is given twice"), (["a"], "no NAME="), (["1a=3"], "no NAME="),
                            (["a=0"], "zero or less"), (["a=(4,)x"], "is not")]:
        with pytest.raises(UsageError) as e:
            bc.parse_size_options(items)
        assert fragment in e.value.message and "--size" in e.value.message and "\n" not in e.value.message
        assert "input_shape=(4096,)" in e.value.hint


@pytest.mark.parametrize("args,fragment", [
    (["--size", "input_shape=(4096)"], "one-entry tuple"),
    (["--size", "kernel_size=5,0"], "zero or less"),
    (["--extra-shape", "kernel_size=(5,7),batch_size=-1"], "--extra-shape"),
])
def test_make_bundle_refuses_a_malformed_tuple_first(tmp_path, monkeypatch, args, fragment):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.py").write_text("class ModelNew: pass\n")
    one_error(cli("make", "--candidate", tmp_path / "c.py", "--task", "1/56", *args), 2, fragment)


def test_size_globals_hold_tuples_and_the_sweep_reduces_tuple_entries_too():
    g = ti.size_globals(TUPLE_TASK)
    assert g == {"batch_size": 8, "input_shape": (32,), "kernel_size": (5, 7), "dim": 1}
    assert ti.reduced_sizes(TUPLE_TASK, batch=2, plain=4) == {"batch_size": 2, "input_shape": (4,),
                                                               "kernel_size": (4, 4)}
    assert ti.reduced_sizes(TUPLE_TASK, batch=2, plain=64) == {"batch_size": 2}
    assert ti.input_specs(TUPLE_TASK, {"input_shape": (3,)})[0].shape == (8, 3)
    assert msizes.is_size((1,)) and not msizes.is_size(()) and not msizes.is_size([1]) and not msizes.is_size((True,))


def test_a_value_of_another_kind_than_the_tasks_is_refused_by_the_one_rule():
    g = ti.size_globals(TUPLE_TASK)
    assert protocol.shape_problems(g, {"input_shape": (64,), "kernel_size": (3, 3)}, [{"batch_size": 4}]) == []
    for sizes, shapes, j, fragment in [
            ({"input_shape": 64}, [], None, "an integer, where the task's input_shape is (32,), a tuple of 1 integer"),
            ({"kernel_size": (5,)}, [], None, "a tuple of 1 integer, where the task's kernel_size is (5, 7)"),
            ({"batch_size": (4,)}, [], None, "where the task's batch_size is 8, an integer"),
            ({"input_shape": (0,)}, [], None, "is not a positive integer"),
            ({}, [{"kernel_size": 3}], 0, "kernel_size to 3"),
            ({}, [{"input_shape": (32,)}], 0, "changes no size")]:
        bad = protocol.shape_problems(g, sizes, shapes)
        assert bad and bad[0][0] == j and fragment in bad[0][1], (sizes, bad)


def test_the_child_applies_a_json_array_as_the_tuple_and_refuses_another_kind():
    pytest.importorskip("torch")
    from kbrepro.harness import kbtask

    task = kbtask.load_task(TUPLE_TASK)
    kbtask.apply_overrides(task, {"input_shape": [3], "batch_size": 2})  # as a JSON request carries it
    assert task.input_shape == (3,) and tuple(task.get_inputs()[0].shape) == (2, 3)
    ns = {"input_shape": (32,), "kernel_size": (5, 7), "batch_size": 8}
    assert sorted(kbtask.follow_sizes(ns, task)) == ["batch_size", "input_shape"] and ns["input_shape"] == (3,)
    for bad, fragment in [({"input_shape": 3}, "an integer"), ({"kernel_size": (1, 2, 3)}, "a tuple of 3"),
                          ({"nope": 1}, "no size global")]:
        with pytest.raises(ValueError, match=fragment):
            kbtask.apply_overrides(task, bad)


def test_documents_hold_tuples_as_arrays_and_old_integer_documents_stay_valid():
    case = hcases.Case(task="KernelBench/level1/89_cumsum.py", task_sha256="0" * 64, candidate="c",
                       candidate_sha256="1" * 64, profile="quick", seeds=(0,),
                       sizes=(("batch_size", 4), ("input_shape", (64,))), extra_shapes=((("kernel_size", (3, 5)),),))
    doc = json.loads(json.dumps(case.to_doc()))
    assert doc["variant"] == {"sizes": {"batch_size": 4, "input_shape": [64]}, "extra_shapes": [{"kernel_size": [3, 5]}]}
    assert schemas.validate(doc, "case") == []
    back = hcases.case_from_doc(doc)
    assert back == case and back.id == case.id and hash(back)
    old = hcases.Case(task=case.task, task_sha256=case.task_sha256, candidate="c", candidate_sha256="1" * 64,
                      profile="quick", seeds=(0,), sizes=(("batch_size", 4),))
    assert schemas.validate(json.loads(json.dumps(old.to_doc())), "case") == []
    for wrong in ([], list(range(1, 10)), ["4"], [4.5], "4"):
        bad = json.loads(json.dumps(doc))
        bad["variant"]["sizes"]["input_shape"] = wrong
        assert schemas.validate(bad, "case"), wrong
    got, problems = strict.build(SIZES, {"a": 4, "b": [5, 7]})
    assert problems == [] and dict(got) == {"a": 4, "b": (5, 7)} and hash(tuple(got.items()))
    for wrong in ({"b": []}, {"b": list(range(9))}, {"b": ["5"]}, {"b": [[5]]}):
        assert strict.build(SIZES, wrong)[1], wrong
    cfg = protocol.CandidateConfig(sizes=(("input_shape", (64,)),), extra_shapes=((("batch_size", 2),),))
    assert cfg.to_doc()["sizes"] == {"input_shape": [64]} and cfg.to_doc()["extra_shapes"] == [{"batch_size": 2}]


# ---------------------------------------------------------------- a pinned task, run on the CPU
TASK = "1/89"
RUN_SIZES = {"batch_size": 4, "input_shape": (64,)}


def _checkout() -> Path:
    from kbrepro.harness.kernelbench import resolve_checkout

    kb = resolve_checkout(None)
    if not (kb / "KernelBench" / "level1" / "89_cumsum.py").is_file():
        pytest.skip(f"no KernelBench checkout at {kb}")
    return kb


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    pytest.importorskip("torch")
    kb = _checkout()
    d = tmp_path_factory.mktemp("tuple")
    cand = d / "cumsum_ref.py"
    cand.write_bytes((kb / "KernelBench" / "level1" / "89_cumsum.py").read_bytes() + b"\nModelNew = Model\n")
    res = bc.run_candidates([(cand, TASK)], profile="quick", kernelbench=None, results_dir=d / "res",
                            sizes={"batch_size": 4, "input_shape": [64]}, device="cpu")  # a list: as a replay passes it
    return d, res


@pytest.fixture(scope="module")
def packed(run):
    """The run packed (every test that reads the bundle gets it, in any order or worker)."""
    d, res = run
    return bc.pack_results(res, d / "b.tar")


def test_a_tuple_size_runs_is_recorded_as_an_array_and_packs_and_verifies(run, packed):
    from kbrepro.bundle.verify.checklist import verify_archive

    d, res = run
    doc = json.loads((res / "results" / "candidates.json").read_bytes())
    rec = doc["candidates"][0]
    assert rec["config"]["sizes"] == {"batch_size": 4, "input_shape": [64]}
    assert rec["observations"]["failure"] is None and rec["observations"]["extra_shapes"] == [{"batch_size": 2}]
    assert rec["observations"]["cases"][0]["digests_parent"][0].startswith("torch.float32|(4, 64)|")
    caught = {v["name"]: v["detail"] for v in rec["verdicts"] if v["passed"] is False}
    assert not caught, caught
    rep = verify_archive(packed.path, level="static")
    assert rep.verdict == "PARTIAL" and all(t.status != "FAIL" for t in rep.tiers), \
        [p for t in rep.tiers for p in t.problems]


@pytest.mark.parametrize("sizes,fragment", [({"batch_size": 4, "input_shape": 64}, "sets input_shape to 64, an integer"),
                                            ({"batch_size": [4], "input_shape": [64]}, "sets batch_size to (4,)")])
def test_a_record_of_another_kind_of_size_than_the_tasks_fails_verification(packed, tmp_path, sizes, fragment):
    from kbrepro.bundle.verify.checklist import verify_archive
    from test_candidate import _edit_doc, _repack

    edit = _edit_doc("results/candidates.json", lambda doc: doc["candidates"][0]["config"].update(sizes=sizes))
    rep = verify_archive(_repack(packed.path, tmp_path / "t.tar", edit), level="static")
    assert rep.verdict == "FAIL"
    assert any(fragment in p.message for t in rep.tiers for p in t.problems), \
        [p for t in rep.tiers for p in t.problems]


def test_a_run_refuses_a_size_of_another_kind_before_it_starts(tmp_path):
    pytest.importorskip("torch")
    _checkout()
    (tmp_path / "c.py").write_text("class ModelNew: pass\n")
    with pytest.raises(UsageError) as e:
        bc.run_candidates([(tmp_path / "c.py", TASK)], profile="quick", kernelbench=None, results_dir=tmp_path / "r",
                          sizes={"input_shape": 64}, device="cpu")
    assert e.value.message.startswith("--size sets input_shape to 64, an integer, where the task's input_shape is "
                                      "(32768,)") and "kernel_size=5,7" in e.value.hint
    with pytest.raises(UsageError, match="--extra-shape input_shape=\\(1, 2\\) sets input_shape"):
        bc.run_candidates([(tmp_path / "c.py", TASK)], profile="quick", kernelbench=None, results_dir=tmp_path / "r",
                          extra_shapes=({"input_shape": (1, 2)},), device="cpu")


def test_shard_plan_refuses_sizes_the_tasks_refuse_before_it_writes_a_case(tmp_path):
    """``shard plan`` holds sizes to the run's one rule (bundle/candidates.py: task_configs): a
    size no task names, or of another kind than the task's value, is a usage error at plan time,
    not a failed case at run time."""
    from kbrepro.bundle import shard

    _checkout()
    (tmp_path / "c.py").write_text("class ModelNew: pass\n")
    for sizes, fragment in (({"nosuch": 64}, "--size names nosuch, not a size of the task"),
                            ({"input_shape": 64}, "an integer, where the task's input_shape is")):
        with pytest.raises(UsageError, match=fragment):
            shard.plan_folder([(tmp_path / "c.py", TASK)], profile="quick", kernelbench=None,
                              results_dir=tmp_path / "plan", device="cpu", engine="local", sizes=sizes)
        assert not (tmp_path / "plan").exists()
