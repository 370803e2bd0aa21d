"""Blame where it belongs (issue 28): what the task's own reference cannot do is found before
any candidate runs. Sizes at which the reference raises, or an extra shape the user gave at which
it raises, are a usage error; where it raises at the default extra shape (BatchNorm in training
mode at a batch of one), the fallback shape is checked instead and written into the record's
configuration, which the verifier's rules accept."""
from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from kbrepro.bundle import candidate_report as cr  # noqa: E402
from kbrepro.bundle import candidates as bc  # noqa: E402
from kbrepro.bundle.verify.checklist import verify_archive  # noqa: E402
from kbrepro.errors import UsageError  # noqa: E402
from kbrepro.harness import candidate as hc  # noqa: E402
from kbrepro.harness import jsonio, kbtask  # noqa: E402
from kbrepro.model import protocol  # noqa: E402

from conftest import kernelbench_from_example  # noqa: E402 (tests/ is on the path)

BN_TASK = b'''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)
        self.bn = nn.BatchNorm1d(n)
    def forward(self, x):
        return self.bn(self.lin(x))

batch_size = 2
n = 8

def get_inputs():
    return [torch.rand(batch_size, n)]

def get_init_inputs():
    return [n]
'''

#: a task whose model raises whenever n is not 8
PICKY_TASK = BN_TASK.replace(b"        return self.bn(self.lin(x))",
                             b"        assert x.shape[1] == 8, 'n must be 8'\n        return self.bn(self.lin(x))")


def test_the_reference_raising_at_the_default_extra_shape_takes_the_fallback_shape():
    said = []
    cfg = hc.task_config(BN_TASK, "bn.py", protocol.PROFILES["quick"], "cpu", said.append)
    assert cfg.extra_shapes == ((("batch_size", 3),),)
    assert "batch_size=1" in said[0] and "Expected more than 1 value per channel" in said[0]
    assert protocol.shape_problems(kbtask.size_globals(kbtask.load_task(BN_TASK)), {}, [{"batch_size": 3}]) == []
    big = hc.with_overrides(protocol.PROFILES["quick"], sizes=(("batch_size", 4),))
    assert hc.task_config(BN_TASK, "bn.py", big, "cpu") is big  # batch 2 runs: the default stays


def test_sizes_or_a_given_extra_shape_at_which_the_reference_raises_are_a_usage_error():
    quick = protocol.PROFILES["quick"]
    with pytest.raises(UsageError, match="raises at n=9: AssertionError: n must be 8") as e:
        hc.task_config(PICKY_TASK, "picky.py", hc.with_overrides(quick, sizes=(("n", 9),)), "cpu")
    assert "--size" in e.value.hint
    with pytest.raises(UsageError, match="--extra-shape batch_size=1: the reference of bn.py raises there"):
        hc.task_config(BN_TASK, "bn.py", hc.with_overrides(quick, extra_shapes=((("batch_size", 1),),)), "cpu")


#: the batch tied to a fixed width (KernelBench 1/100: targets of batch_size broadcast against
#: predictions of 8 columns): the reference runs only where batch_size is 8
TIED_TASK = b'''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, predictions, targets):
        return torch.mean(torch.clamp(1 - predictions * targets, min=0))

batch_size = 8
input_shape = (8,)

def get_inputs():
    return [torch.rand(batch_size, *input_shape), torch.randint(0, 2, (batch_size,)).float() * 2 - 1]

def get_init_inputs():
    return []
'''


def test_no_extra_shape_the_reference_runs_at_is_left_out_with_a_note_never_a_catch(tmp_path):
    """Where the reference raises at the default extra shape and at the fallback alike, no extra
    shape is checked: the reason is recorded (config.no_extra_shape), other_shapes_correct cannot
    decide and says why (a PARTIAL, never a catch), and the verifier's rules accept the record; a
    note where the default runs, or beside a shape the user gave, is a contradiction. A shape the
    user gave at which the reference raises stays a usage error."""
    from kbrepro.bundle import candidate_records
    from kbrepro.model import candidates as mc

    said = []
    cfg = hc.task_config(TIED_TASK, "tied.py", protocol.PROFILES["quick"], "cpu", said.append)
    assert cfg.extra_shapes == () and "batch_size=4; batch_size=9" in cfg.no_extra_shape
    assert "--extra-shape" in said[0]
    spec = hc.CandidateSpec("c", TIED_TASK + b"\nModelNew = Model\n", "tied.py", TIED_TASK)
    rec = hc.run_candidate(spec, cfg, tmp_path / "w", device="cpu")
    verdicts = {v["name"]: (v["passed"], v["detail"]) for v in rec["verdicts"]}
    assert not [k for k, (p, _) in verdicts.items() if p is False], verdicts
    assert verdicts["other_shapes_correct"][0] is None and "no extra shape: the reference raises" in \
        verdicts["other_shapes_correct"][1]
    assert rec["observations"]["extra_shapes"] == [] and rec["config"]["no_extra_shape"] == cfg.no_extra_shape
    rec.pop("provenance_dir")
    rec["file"] = "inputs/candidates/c.py"
    doc = {"schema": "kbrepro/candidates", "schema_version": 2, "kind": "kernelbench-candidates", "profile": "quick",
           "device": "cpu", "started_utc": "2026-12-04T00:00:00Z", "finished_utc": "2026-12-04T01:00:00Z",
           "predicate": {"official": "allclose", "atol": cfg.atol, "rtol": cfg.rtol},
           "kernelbench": {"commit": "0" * 40}, "bandwidth": {"gbps": None, "reason": "no GPU"}, "candidates": [rec]}

    def problems(d, task=TIED_TASK):
        return [f"{p.path} {p.message}" for p in candidate_records.load(json.loads(jsonio.dumps(d)), {},
                                                                        lambda r: task).problems]

    from kbrepro.harness.checks import PREDICATES
    doc["predicate"].update(PREDICATES["allclose"])
    assert problems(doc) == []
    # the note on a task with no extra shape to leave out (no batch_size), or beside a shape the
    # user gave: a contradiction (where the default would have run, only a replay can tell: the
    # static verdict is then PARTIAL, never PASS)
    nobatch = TIED_TASK.replace(b"batch_size", b"rows")
    assert any("config.no_extra_shape" in p for p in problems(doc, nobatch))
    given = copy.deepcopy(doc)
    given["candidates"][0]["config"]["extra_shapes"] = [{"batch_size": 4}]
    assert any("config.no_extra_shape" in p for p in problems(given))
    assert mc.load(json.loads(jsonio.dumps(doc)))[0].candidates[0].config.no_extra_shape == cfg.no_extra_shape
    # the run's word that the reference raised keeps the check undecided: PARTIAL, never PASS
    from kbrepro.bundle.verify.candidate import undecided

    loaded = candidate_records.load(json.loads(jsonio.dumps(doc)), {}, lambda r: TIED_TASK)
    assert any(n == "c" and why.startswith("other_shapes_correct cannot decide (no extra shape: the reference raises")
               for n, why in undecided(loaded))
    blank = copy.deepcopy(doc)
    blank["candidates"][0]["config"]["no_extra_shape"] = " "
    assert any("config.no_extra_shape" in p for p in problems(blank))
    with pytest.raises(UsageError, match="--extra-shape batch_size=4: the reference of tied.py raises there"):
        hc.task_config(TIED_TASK, "tied.py", hc.with_overrides(protocol.PROFILES["quick"],
                                                               extra_shapes=((("batch_size", 4),),)), "cpu")


def test_the_reference_error_is_one_line_and_none_where_it_runs():
    assert kbtask.reference_error(BN_TASK, {}, 0, "cpu") is None
    err = kbtask.reference_error(PICKY_TASK, {"n": 3}, 0, "cpu")
    assert err == "AssertionError: n must be 8"
    assert kbtask.reference_error(b"this is not python", {}, 0, "cpu") == "NameError: name 'this' is not defined"


def test_a_report_of_a_level_opens_with_a_table_and_folds_the_details():
    """REPORT.md of more than FOLD_AT candidates: a summary table first (one row each, the
    caught ones named), claims and each candidate's details folded; FOLD_AT or fewer read as
    before (the committed bundles' reports are unchanged)."""
    (b,) = (Path(__file__).resolve().parent.parent / "examples").glob("candidates-quick-*.tar")
    with tarfile.open(b) as tf:
        get = {m.name.split("/", 1)[1]: m for m in tf if m.isfile()}
        doc, meta, claims_doc, report = (tf.extractfile(get[k]).read() for k in (
            "data/results/candidates.json", "data/bundle.json", "data/claims.json", "data/REPORT.md"))
    doc, meta, claims_doc = json.loads(doc), json.loads(meta), json.loads(claims_doc)
    assert cr.render_report(meta, doc, claims_doc) == report.decode()
    rec = doc["candidates"][1]
    many = dict(doc, candidates=[dict(copy.deepcopy(rec), name=f"c{i:02d}") for i in range(cr.FOLD_AT + 1)])
    many["candidates"][3]["verdicts"][0]["passed"] = False
    text = cr.render_report(meta, many, claims_doc)
    head = text.split("<details>")[0]
    assert f"{cr.FOLD_AT + 1} candidates: {cr.FOLD_AT} pass every check that can decide, 1 caught." in head
    assert "| c03 | src/kernelbench/prompts/model_ex_add.py | **CAUGHT** by ran |" in head
    assert len(re.findall(r"^\| c\d\d \|", head, re.M)) == cr.FOLD_AT + 1 and "## c00" not in head
    assert text.count("<details><summary>c") == cr.FOLD_AT + 1 and "<details><summary>Claims (" in text
    assert text.count("<details>") == text.count("</details>")


def test_our_code_raising_is_a_harness_error_never_the_candidates_failure(tmp_path, monkeypatch):
    """What raises in the parent's own code (here the reference's range, read for every case)
    stops the run as a HarnessError (exit code 6): no record, no verdict blames the candidate.
    Before, a TypeError or ValueError of ours was recorded as "caught by ran: a malformed
    reply"."""
    from kbrepro.errors import HarnessError
    from kbrepro.harness import candidate_calls

    def boom(ref):
        raise TypeError("a bug of ours")

    monkeypatch.setattr(candidate_calls, "ref_range", boom)
    spec = hc.CandidateSpec("c", BN_TASK + b"\nModelNew = Model\n", "bn.py", BN_TASK)
    with pytest.raises(HarnessError, match="harness error in the checking pass stage of c: TypeError: a bug of ours") as e:
        hc.run_candidate(spec, protocol.PROFILES["quick"], tmp_path / "w", device="cpu")
    assert e.value.exit_code == 6 and "not blamed" in e.value.hint


def test_a_package_the_task_imports_is_named_with_its_install_command():
    from kbrepro.errors import EnvironmentUnavailableError

    task = b"import kbrepro_no_such_package_28\n" + BN_TASK
    with pytest.raises(EnvironmentUnavailableError, match="t.py imports kbrepro_no_such_package_28, which is not "
                       "installed here") as e:
        hc.task_config(task, "t.py", protocol.PROFILES["quick"], "cpu")
    assert e.value.hint.startswith("pip install kbrepro_no_such_package_28") and e.value.exit_code == 4


def test_every_package_a_pinned_task_imports_installs_with_the_project():
    """einops (level 3, tasks 48 and 49) is a dependency: the tasks of levels 1 to 3 at the pin
    import nothing else outside torch, numpy and the standard library."""
    text = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    deps = text.split("dependencies = [", 1)[1].split("]", 1)[0]
    assert re.search(r'^\s*"einops>=', deps, re.M)


def test_a_candidate_folder_pairs_files_with_tasks_and_refuses_other_names(tmp_path):
    for n in ("2_39_gemm.py", "1_19.py", "1_100.py", "notes.txt"):
        (tmp_path / n).write_text("x")
    assert [(p.name, t) for p, t in bc.candidates_in(tmp_path)] == [("1_19.py", "1/19"), ("1_100.py", "1/100"),
                                                                     ("2_39_gemm.py", "2/39")]
    (tmp_path / "my_kernel.py").write_text("x")
    with pytest.raises(UsageError, match="not named <level>_<task>"):
        bc.candidates_in(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UsageError, match="no candidate file"):
        bc.candidates_in(empty)


@pytest.mark.slow
def test_over_several_tasks_a_size_applies_to_the_tasks_that_name_it(tmp_path):
    """A level run with --size: each record's configuration holds the sizes its task names (the
    verifier's rule), the run checks each task at them, and a size no task names is refused."""
    kb = kernelbench_from_example(tmp_path, "layernorm-l1-40-full-*.tar", "candidates-full-*.tar")
    items = []
    for rel, task in (("KernelBench/level1/40_LayerNorm.py", "1/40"), ("KernelBench/level1/88_MinGPTNewGelu.py", "1/88")):
        f = tmp_path / f"ref_{task.replace('/', '_')}.py"
        f.write_bytes((kb / rel).read_bytes() + b"\nModelNew = Model\n")
        items.append((f, task))
    sizes = {"batch_size": 2, "features": 4, "dim1": 8, "dim2": 8, "dim": 64}
    res = bc.run_candidates(items, profile="quick", kernelbench=str(kb), results_dir=tmp_path / "res", sizes=sizes,
                            device="cpu")
    doc = jsonio.loads_strict((res / "results" / "candidates.json").read_bytes(), "candidates.json")
    assert [c["config"]["sizes"] for c in doc["candidates"]] == [
        {"batch_size": 2, "dim1": 8, "dim2": 8, "features": 4}, {"batch_size": 2, "dim": 64}]
    assert all(v["passed"] is not False for c in doc["candidates"] for v in c["verdicts"])
    made = bc.pack_results(res, tmp_path / "b.tar")
    assert verify_archive(made.path, level="static").verdict in ("PASS", "PARTIAL")
    with pytest.raises(UsageError, match="--size heads: no task of the run has such a size"):
        bc.run_candidates(items, profile="quick", kernelbench=str(kb), results_dir=tmp_path / "res2",
                          sizes={**sizes, "heads": 2}, device="cpu")


def test_the_candidate_folder_cli_refuses_mixed_options_and_odd_names(tmp_path):
    root = Path(__file__).resolve().parent.parent
    (tmp_path / "1_19.py").write_text("x")
    for args, fragment in (
            (["--candidate-dir", tmp_path, "--candidate", tmp_path / "1_19.py"], "--candidate-dir names the candidates"),
            (["--candidate-dir", tmp_path / "nope"], "--candidate-dir")):
        p = subprocess.run([sys.executable, str(root / "make_bundle.py"), *map(str, args)], capture_output=True,
                           text=True, timeout=120)
        assert p.returncode in (2, 3) and fragment in p.stderr and "Traceback" not in p.stderr, p.stderr
    (tmp_path / "mine.py").write_text("x")
    p = subprocess.run([sys.executable, str(root / "make_bundle.py"), "--candidate-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "not named <level>_<task>[_name].py: mine.py" in p.stderr, p.stderr


def test_a_case_of_several_outputs_is_recorded_by_its_worst_one():
    """An output failing only at NaN pairs must not stand for a wrong other output (a red-team
    helper's finding: the first failing output was recorded, and protocol 2 passes a NaN-only
    case)."""
    from kbrepro.harness.candidate_calls import worst_compare
    from kbrepro.harness.checks import Tolerance, compare

    tol = Tolerance(1e-4, 1e-4)
    nan = float("nan")
    ref0, ref1 = torch.tensor([nan, 1.0, 2.0]), torch.tensor([1.0, 2.0, 3.0])
    cmps = [compare(ref0, ref0.clone(), tol), compare(ref1, torch.tensor([100.0, 200.0, 300.0]), tol)]
    assert worst_compare(cmps) is cmps[1]
    assert worst_compare(cmps[::-1]) is cmps[1]
    ok = compare(ref1, ref1.clone(), tol)
    assert worst_compare([ok, cmps[0]]) is cmps[0] and worst_compare([ok, ok]) is ok
    odd = compare(ref1, torch.tensor([[1.0, 2.0, 3.0]]), tol)  # another shape: no NaN counts
    assert worst_compare([cmps[0], odd]) is odd


GLOBAL_TASK = b'''import torch
import torch.nn as nn

class Model(nn.Module):
    """Reads the module's batch_size in __init__, as KernelBench 3/33 (VanillaRNN) does."""
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(2 * n, n)
        self.hidden = torch.ones((batch_size, n))
    def forward(self, x):
        return self.lin(torch.cat((x, self.hidden.to(x.device)), dim=1))

batch_size = 2
n = 8

def get_inputs():
    return [torch.rand(batch_size, n)]

def get_init_inputs():
    return [n]
'''


def test_a_candidates_copy_of_the_task_sizes_follows_the_runs_sizes(tmp_path):
    """The reference as candidate for a task whose Model reads the module's batch_size: with
    --size batch_size=3 and at the other shapes, the candidate's own copy of batch_size reads
    what the task's reads, so the honest candidate passes (the CPU sweep accused 3/33 before:
    its copy kept 256)."""
    cfg = hc.with_overrides(protocol.PROFILES["quick"], sizes=(("batch_size", 3),))
    spec = hc.CandidateSpec("c", GLOBAL_TASK + b"\nModelNew = Model\n", "g.py", GLOBAL_TASK)
    rec = hc.run_candidate(spec, hc.task_config(GLOBAL_TASK, "g.py", cfg, "cpu"), tmp_path / "w", device="cpu")
    verdicts = {v["name"]: v["passed"] for v in rec["verdicts"]}
    assert verdicts["ran"] is True and verdicts["other_shapes_correct"] is True, rec["verdicts"]
    assert not [k for k, v in verdicts.items() if v is False]
    ns = {"batch_size": 256, "n": 8, "other": 1.5}
    task = kbtask.load_task(GLOBAL_TASK)
    kbtask.apply_overrides(task, {"batch_size": 5})
    assert kbtask.follow_sizes(ns, task) == ["batch_size"] and ns == {"batch_size": 5, "n": 8, "other": 1.5}


DROPOUT_TASK = b'''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)
        self.drop = nn.Dropout(0.5)
    def forward(self, x):
        return self.drop(self.lin(x))

batch_size = 4
n = 16

def get_inputs():
    return [torch.rand(batch_size, n)]

def get_init_inputs():
    return [n]
'''


@pytest.mark.slow
def test_a_task_whose_reference_draws_random_numbers_passes_its_own_reference(tmp_path):
    """Dropout in training mode (KernelBench 2/66): the parent's reference and the candidate's
    call on the same set start from the same random state (protocol.call_rng_seed), so the
    reference as candidate passes every check that decides (before: caught by official_allclose
    and deterministic_under_poison); a candidate that skips the dropout is still caught."""
    spec = hc.CandidateSpec("d", DROPOUT_TASK + b"\nModelNew = Model\n", "d.py", DROPOUT_TASK)
    cfg = hc.task_config(DROPOUT_TASK, "d.py", protocol.PROFILES["quick"], "cpu")
    rec = hc.run_candidate(spec, cfg, tmp_path / "w", device="cpu")
    verdicts = {v["name"]: v["passed"] for v in rec["verdicts"]}
    assert not [k for k, v in verdicts.items() if v is False], rec["verdicts"]
    assert verdicts["official_allclose"] is True
    lazy = DROPOUT_TASK + b"\nclass ModelNew(Model):\n    def forward(self, x):\n        return self.lin(x)\n"
    rec = hc.run_candidate(hc.CandidateSpec("l", lazy, "l.py", DROPOUT_TASK), cfg, tmp_path / "l", device="cpu")
    assert {v["name"]: v["passed"] for v in rec["verdicts"]}["official_allclose"] is False
    seeds = {protocol.call_rng_seed(t) for t in ("s0/official", "s0/normal", "timing_input", "shape0")}
    assert len(seeds) == 4 and all(0 <= s < 1 << 56 for s in seeds)
    # only such a task's calls are seeded: for any other, the random state tells no call from another
    from kbrepro.harness.candidate_calls import draws_random

    xs = [torch.rand(4, 16)]
    torch.manual_seed(0)
    drop = kbtask.build_model(kbtask.load_task(DROPOUT_TASK), kbtask.load_task(DROPOUT_TASK).Model, 0, "cpu")
    assert draws_random(drop, xs) is True
    assert draws_random(drop.lin, xs) is False
    drop.gen = (i for i in range(3))  # a generator: deepcopy refuses it, the model itself is judged
    assert draws_random(drop, xs) is True


FIRST_CALL_RANDOM_TASK = DROPOUT_TASK.replace(b'''        self.drop = nn.Dropout(0.5)
    def forward(self, x):
        return self.drop(self.lin(x))''', b'''        self.h = None
    def forward(self, x):
        if self.h is None:
            self.h = torch.randn(x.shape[1])
        return self.lin(x) + self.h''')

LINEAR_TASK = DROPOUT_TASK.replace(b"        return self.drop(self.lin(x))", b"        return self.lin(x)")


@pytest.mark.slow
def test_a_forward_random_on_its_first_call_only_and_shapes_one_after_another(tmp_path):
    """Two findings of a red-team pass. A forward that draws random numbers on its first call
    only is judged random on copies of the parent's model (judging it on the model itself
    spent that first call in the parent only); extra shapes given one after another reach the
    child each on the run's sizes, never on an earlier shape's (the child applied each on top
    of the last: the reference was caught at the second shape)."""
    spec = hc.CandidateSpec("f", FIRST_CALL_RANDOM_TASK + b"\nModelNew = Model\n", "f.py", FIRST_CALL_RANDOM_TASK)
    rec = hc.run_candidate(spec, hc.task_config(FIRST_CALL_RANDOM_TASK, "f.py", protocol.PROFILES["quick"], "cpu"),
                           tmp_path / "f", device="cpu")
    assert not [v for v in rec["verdicts"] if v["passed"] is False], rec["verdicts"]
    cfg = hc.with_overrides(protocol.PROFILES["quick"], extra_shapes=((("batch_size", 2),), (("n", 8),)))
    spec = hc.CandidateSpec("s", LINEAR_TASK + b"\nModelNew = Model\n", "s.py", LINEAR_TASK)
    rec = hc.run_candidate(spec, hc.task_config(LINEAR_TASK, "s.py", cfg, "cpu"), tmp_path / "s", device="cpu")
    verdicts = {v["name"]: v["passed"] for v in rec["verdicts"]}
    assert verdicts["other_shapes_correct"] is True and not [k for k, v in verdicts.items() if v is False], rec["verdicts"]


def test_inductors_long_binary_names_fit_a_bundle():
    """torch.compile's Triton binaries are named after every fused op: a path component of a
    bundle holds at most 100 characters, so a longer one keeps its head and a digest of itself
    (the same wherever derived: the packer's bundle path is the verifier's). An honest Inductor
    candidate of 1/41 on the H200 could not be packed before."""
    from kbrepro.bundle.pack import SAFE_COMPONENT
    from kbrepro.model.provenance_rules import fit_component

    name = "triton_poi_fused_max_pool2d_with_indices_unsqueeze_0" * 2 + ".cubin"
    path = f"triton/5P7SBCX2AEWFPM5EIVCKJVQTLCDHAAARHSOHBAFLAHJHHBHMWI3A/{name}"
    got = bc.safe_relpath(path)
    assert got == bc.safe_relpath(path) and got.split("/")[0] == "triton"
    assert all(SAFE_COMPONENT.match(p) for p in got.split("/")) and len(got.split("/")[-1]) == 100
    assert bc.safe_relpath(path.replace("_0.cubin", "_1.cubin")) != got  # the digest tells them apart
    assert fit_component("short.cubin") == "short.cubin" and len(fit_component("x" * 300, 95)) == 95


def test_the_reference_running_out_of_memory_is_the_machines_fact_not_the_tasks():
    """An out-of-memory error of the reference at the sizes or at an extra shape is exit 4 with
    its next step: before, it left the extra shape out as if the task raised there. The host's
    MemoryError reads as every host allocation failure does (tests/test_host_memory.py)."""
    from kbrepro.errors import EnvironmentUnavailableError

    hungry = BN_TASK.replace(b"        return self.bn(self.lin(x))",
                             b"        if x.shape[0] != 2:\n            raise MemoryError()\n        return self.bn(self.lin(x))")
    with pytest.raises(EnvironmentUnavailableError, match="out of memory at these sizes: the reference of task h.py at batch_size=1: MemoryError") as e:
        hc.task_config(hungry, "h.py", protocol.PROFILES["quick"], "cpu")
    assert e.value.exit_code == 4 and "--size" in e.value.hint
