"""Sharding on CPU: case ids, the pure merge, the engines (local processes, submitit's
LocalExecutor, Ray's absence), a crash in one case leaving the others intact, a sharded
candidate run equal to an unsharded one apart from timings and host fields, its bundle
verified and refused once its cases are tampered with, and the command line."""
from __future__ import annotations

import json
import os
import random
import sys
import tarfile
from pathlib import Path

import pytest

import shard_runners
from conftest import kernelbench_from_example
from kbrepro.bundle import candidates as bc
from kbrepro.bundle import case_records, pack, shard, shard_merge
from kbrepro.bundle.verify.checklist import verify_archive
from kbrepro.bundle.verify.core import bag_info
from kbrepro.errors import EnvironmentUnavailableError, InvalidResultsError, UnreadableInputError, UsageError
from kbrepro.harness import cases as hcases
from kbrepro.harness import engines, jsonio
from kbrepro.model import protocol

ROOT = Path(__file__).resolve().parent.parent
SHA_A, SHA_B = "a" * 64, "b" * 64


def _case(**kw):
    base = dict(task="KernelBench/level1/40_LayerNorm.py", task_sha256=SHA_A, candidate="mine", candidate_sha256=SHA_B,
                profile="quick", seeds=(0,), sizes=(("batch_size", 2),), extra_shapes=())
    base.update(kw)
    return hcases.Case(**base)


# ---------------------------------------------------------------------------------------------
# cases


def test_a_case_id_is_the_digest_of_its_fields_stable_and_changed_by_each_field():
    c = _case()
    # pinned: the id must not change between processes, machines or releases of this code
    assert c.id == "c" + __import__("hashlib").sha256(json.dumps(c.fields(), sort_keys=True, separators=(",", ":"))
                                                     .encode()).hexdigest()[:20]
    assert c.id == _case(index=7).id  # the place in the plan is not the identity
    others = [_case(task="KernelBench/level1/19_ReLU.py"), _case(task_sha256="c" * 64), _case(candidate="other"),
              _case(candidate_sha256="d" * 64), _case(profile="full"), _case(seeds=(0, 1)),
              _case(sizes=(("batch_size", 4),)), _case(extra_shapes=((("batch_size", 1),),))]
    ids = {o.id for o in others}
    assert len(ids) == len(others) and c.id not in ids
    again = hcases.case_from_doc(json.loads(json.dumps(c.to_doc())))
    assert again == c and again.id == c.id


def test_an_edited_case_json_is_refused():
    doc = _case().to_doc()
    doc["task_sha256"] = "e" * 64  # the id no longer is the digest of the fields
    with pytest.raises(UnreadableInputError, match="not the digest"):
        hcases.case_from_doc(doc)
    with pytest.raises(UnreadableInputError, match="not a case"):
        hcases.case_from_doc({**_case().to_doc(), "seeds": "zero"})


def test_ran_on_on_cpu_hashes_the_host_and_says_none_for_the_gpu():
    ro = hcases.ran_on("cpu", "local", "cpu0", host="example-host")
    assert list(ro) == list(hcases.RAN_ON_KEYS) and hcases.check_ran_on(ro) == []
    assert ro["host_sha256"] == hcases.hash_host("example-host") != hcases.hash_host("other-host")
    assert "example-host" not in json.dumps(ro)
    assert ro["gpu_uuid_sha256"] is None and ro["sm_clock_mhz"] is None and ro["device"] == "cpu"
    assert hcases.check_ran_on({**ro, "sm_clock_mhz": "fast"}) and hcases.check_ran_on({**ro, "engine": "mine"})


# ---------------------------------------------------------------------------------------------
# merging (pure)


def _result(case, *, status="done", gbps=None, start="2026-12-01T10:00:00Z", end="2026-12-01T10:05:00Z", extra=None):
    rec = {"name": case.candidate, "task": case.task, "task_sha256": case.task_sha256,
           "source_sha256": case.candidate_sha256, "file": f"inputs/candidates/{case.candidate}.py",
           "config": {"seeds": list(case.seeds), "sizes": dict(case.sizes), "extra_shapes": []}}
    doc = {"schema": "kbrepro/candidates", "schema_version": 1, "kind": "kernelbench-candidates", "profile": case.profile,
           "device": "cpu", "predicate": {"atol": 1e-4}, "kernelbench": {"commit": "0" * 40}, "started_utc": start,
           "finished_utc": end, "bandwidth": {"gbps": gbps}, "candidates": [rec]}
    files = {"results/candidates.json": jsonio.dumps(doc).encode(), "results/environment.json": b'{"env": 1}',
             f"inputs/candidates/{case.candidate}.py": case.candidate.encode(), "inputs/kernelbench/LICENSE": b"MIT",
             **(extra or {})}
    ran = hcases.ran_on("cpu", "local", "cpu0", host="h")
    if status != "done":
        return shard_merge.CaseResult(case, status, "RuntimeError: boom", ran, {})
    return shard_merge.CaseResult(case, "done", None, ran, files)


def _plan(n=4):
    return [_case(candidate=f"k{i}", candidate_sha256=f"{i:x}" * 64, index=i) for i in range(n)]


def test_merge_is_pure_and_its_order_is_the_plans_not_the_completion_order():
    plan = _plan(4)
    results = [_result(plan[0], gbps=10.0, end="2026-12-01T11:00:00Z"), _result(plan[1], status="failed"),
               _result(plan[2], gbps=20.0, start="2026-12-01T09:00:00Z"), _result(plan[3], gbps=30.0)]
    first, failed = shard_merge.merge_cases(results)
    for seed in range(5):
        shuffled = results[:]
        random.Random(seed).shuffle(shuffled)
        again, failed2 = shard_merge.merge_cases(shuffled)
        assert again == first and failed2 == failed
    doc = json.loads(first["results/candidates.json"])
    assert [r["name"] for r in doc["candidates"]] == ["k0", "k2", "k3"]
    assert [r["case"]["bandwidth_gbps"] for r in doc["candidates"]] == [10.0, 20.0, 30.0]
    assert [(c["candidate"], c["status"]) for c in doc["cases"]] == [("k0", "done"), ("k1", "failed"), ("k2", "done"),
                                                                     ("k3", "done")]
    assert doc["cases"][1]["error"] == "RuntimeError: boom" and failed == [
        {"id": plan[1].id, "candidate": "k1", "task": plan[1].task, "error": "RuntimeError: boom"}]
    assert (doc["started_utc"], doc["finished_utc"]) == ("2026-12-01T09:00:00Z", "2026-12-01T11:00:00Z")
    assert "inputs/candidates/k1.py" not in first and first["inputs/candidates/k2.py"] == b"k2"
    assert case_records.case_problems(doc) == []


def test_merge_refuses_cases_that_disagree_and_a_plan_where_nothing_finished():
    plan = _plan(2)
    clash = _result(plan[1], extra={"inputs/kernelbench/LICENSE": b"another licence"})
    with pytest.raises(InvalidResultsError, match="different bytes"):
        shard_merge.merge_cases([_result(plan[0]), clash])
    with pytest.raises(InvalidResultsError, match="none of the 2 cases finished"):
        shard_merge.merge_cases([_result(plan[0], status="failed"), _result(plan[1], status="failed")])
    with pytest.raises(UsageError, match="share a plan index"):
        shard_merge.merge_cases([_result(plan[0]), _result(plan[0])])
    other = _result(plan[1])
    doc = json.loads(other.files["results/candidates.json"])
    doc["candidates"][0]["source_sha256"] = "f" * 64  # the result is not of the case's candidate
    bad = shard_merge.CaseResult(other.case, "done", None, None, {**other.files,
                                                            "results/candidates.json": jsonio.dumps(doc).encode()})
    with pytest.raises(InvalidResultsError, match="not of the case's candidate"):
        shard_merge.merge_cases([_result(plan[0]), bad])


def test_case_problems_recompute_every_id_and_never_believe_the_list():
    plan = _plan(3)
    files, _ = shard_merge.merge_cases([_result(c) for c in plan])
    doc = json.loads(files["results/candidates.json"])
    assert case_records.case_problems(doc) == []

    def problems(edit):
        d = json.loads(json.dumps(doc))
        edit(d)
        return " ".join(m for _, m in case_records.case_problems(d))

    assert "not the digest of the case's fields" in problems(lambda d: d["cases"][0].update(id="c" + "0" * 20))
    # the list and the record edited together: the record's own fields still decide
    def forge(d):
        d["candidates"][1]["source_sha256"] = "9" * 64
    assert "not the digest of the record's own" in problems(forge)
    assert "more than once" in problems(lambda d: d["cases"].append(dict(d["cases"][0], index=3)))
    assert "each exactly once, in plan order" in problems(lambda d: d["candidates"].reverse()) or \
        "names no done case" in problems(lambda d: d["candidates"].reverse())
    assert "names no done case" in problems(lambda d: d["cases"][2].update(status="failed", error="x"))
    assert "carries no error" in problems(lambda d: d["cases"][2].update(error="x"))
    assert "missing" in problems(lambda d: d["candidates"][0].pop("case"))
    assert "lists no cases" in problems(lambda d: d.pop("cases"))
    assert "not a value of its type" in problems(lambda d: d["cases"][0]["ran_on"].update(gpu_uuid_sha256="raw-uuid"))


def test_comparable_drops_timings_hosts_and_case_fields_only():
    a = {"cases": [1], "started_utc": "x", "candidates": [{"case": {"id": "c"}, "seconds": 3.0, "name": "k",
                                                            "verdicts": [{"detail": "built in 3.0 s; 9 checked calls"}],
                                                            "observations": {"cases": [{"call_ms": 1.0, "bits": 5}]}}]}
    b = {"candidates": [{"name": "k", "verdicts": [{"detail": "built in 7.25 s; 9 checked calls"}],
                         "observations": {"cases": [{"call_ms": 2.0, "bits": 5}]}}]}
    assert case_records.differences(a, b) == []
    b["candidates"][0]["observations"]["cases"][0]["bits"] = 6
    assert case_records.differences(a, b) == ["$.candidates[0].observations.cases[0].bits: 5 against 6"]


def test_comparable_drops_the_host_clock_and_thread_counts():
    """Seen on the H200: a sharded and an unsharded run of the same candidates differ in the
    parent's clock record (its invocation counts follow from the measured times), in the
    child's thread counts around a call, and in the counts a verdict's detail quotes."""
    def rec(n1, threads, detail):
        return {"candidates": [{"timing": {"clock": {"n1": n1, "n2": 10 * n1}},
                                "verdicts": [{"name": "host_clock_agrees", "passed": True, "detail": detail}],
                                "observations": {"cases": [{"threads_before": threads, "threads_after": threads,
                                                            "bits": 5}]}}]}
    a = rec(16, 4, "the parent's clock over 16 and 151 invocations gives 0.042 ms per invocation")
    b = rec(15, 3, "the parent's clock over 19 and 239 invocations gives 0.041 ms per invocation")
    assert case_records.differences(a, b) == []
    b["candidates"][0]["verdicts"][0]["passed"] = False
    assert case_records.differences(a, b) == ["$.candidates[0].verdicts[0].passed: true against false"]


def test_comparable_compares_a_host_binary_by_its_sass_and_a_cubin_by_its_bytes():
    def prov(so, cubin, sass, built):
        return {"candidates": [{"name": "k", "provenance": {
            "copied_bytes": built, "files": [{"path": "triton/H/launcher.so", "sha256": so, "built_sha256": built},
                                             {"path": "triton/H/k.cubin", "sha256": cubin}],
            "binaries": [{"file": "triton/H/launcher.so", "sha256": so, "sass_sha256": sass},
                         {"file": "triton/H/k.cubin", "sha256": cubin, "sass_sha256": sass}]}}]}

    assert case_records.differences(prov("a", "c", "s", 1), prov("b", "c", "s", 2)) == []
    assert case_records.differences(prov("a", "c", "s", 1), prov("a", "d", "s", 1)) == [
        "$.candidates[0].provenance.binaries[1].sha256: \"c\" against \"d\"",
        "$.candidates[0].provenance.files[1].sha256: \"c\" against \"d\""]
    assert len(case_records.differences(prov("a", "c", "s", 1), prov("a", "c", "t", 1))) == 2  # the SASS: both entries
    assert case_records.differences({"detail": "2.72e+03 GB/s against 1.2e-05 s"}, {"detail": "2.03e+03 GB/s against 9 s"}) == []


# ---------------------------------------------------------------------------------------------
# engines


def _toy_folders(root: Path, dos: list[str]) -> list[str]:
    out = []
    for i, do in enumerate(dos):
        f = root / "cases" / f"c{i}"
        f.mkdir(parents=True)
        (f / "case.json").write_text(json.dumps({"n": i, "do": do}))
        out.append(str(f))
    return out


def test_local_engine_a_crash_fails_its_case_only_and_each_case_has_its_own_process(tmp_path):
    folders = _toy_folders(tmp_path, ["ok", "raise", "exit", "kill", "ok"])
    out = engines.make_engine("local", shards=2, device="cpu").submit(folders, shard_runners.toy)
    assert [o.ok for o in out] == [True, False, False, False, True]
    assert out[1].error == "ValueError: this case is broken on two lines"
    assert "exited with code 7" in out[2].error and "killed by signal 9" in out[3].error
    done = [json.loads((Path(f) / "out.txt").read_text()) for f in (folders[0], folders[4])]
    assert [d["n2"] for d in done] == [0, 16]
    assert done[0]["pid"] != done[1]["pid"] != os.getpid()
    assert all(d["cvd"] == "" and d["worker"].startswith("cpu") for d in done)  # no GPU handed to a CPU case
    # the folder alone tells the outcome, whichever engine ran it
    assert [hcases.case_status(f) for f in folders] == ["done", "failed", "failed", "failed", "done"]
    assert "killed by signal 9" in json.loads((Path(folders[3]) / "error.json").read_text())["message"]


def test_local_engine_kills_a_case_that_runs_past_its_timeout_and_runs_the_rest(tmp_path):
    import time

    folders = _toy_folders(tmp_path, ["hang", "ok"])
    t0 = time.time()
    out = engines.make_engine("local", shards=1, device="cpu", opts={"timeout_min": 0.05}).submit(
        folders, shard_runners.toy)
    assert time.time() - t0 < 60
    assert [o.ok for o in out] == [False, True]
    assert out[0].error == "the case ran longer than timeout_min=0.05 and was killed"
    with pytest.raises(UsageError, match="timeout_min=-1"):
        engines.make_engine("local", shards=1, device="cpu", opts={"timeout_min": -1})


def test_local_engine_gives_each_slot_its_own_gpu_and_refuses_more_shards_than_gpus(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    e = engines.make_engine("local", shards=2, device="cuda")
    assert [s["CUDA_VISIBLE_DEVICES"] for s in e.slots] == ["3", "5"]
    with pytest.raises(UsageError, match="--shards 3 with 2 GPU") as ei:
        engines.make_engine("local", shards=3, device="cuda")
    assert "--shards 2 or fewer" in ei.value.hint
    e = engines.make_engine("local", shards=1, device="cuda", opts={"gpus": "5"})
    assert [s["CUDA_VISIBLE_DEVICES"] for s in e.slots] == ["5"]
    # the slot's GPU is the case process's whole view: run a toy case "on" GPU 5 (no CUDA is touched)
    (f,) = _toy_folders(tmp_path, ["ok"])
    assert e.submit([f], shard_runners.toy)[0].ok
    assert json.loads((Path(f) / "out.txt").read_text())["cvd"] == "5"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(EnvironmentUnavailableError, match="no CUDA GPU"):
        engines.make_engine("local", shards=1, device="cuda")


def test_odd_gpus_and_timeouts_are_refused_and_no_two_slots_share_a_gpu(monkeypatch):
    for opts, fragment in (({"gpus": "0,0"}, "names a GPU twice"), ({"gpus": "abc"}, "not a GPU index or UUID"),
                           ({"gpus": 1.5}, "not a GPU index or UUID"), ({"timeout_min": float("nan")}, "positive"),
                           ({"timeout_min": float("inf")}, "positive")):
        with pytest.raises(UsageError, match=fragment):
            engines.make_engine("local", shards=2, device="cuda", opts=opts)
    with pytest.raises(UsageError, match="with --device cpu"):
        engines.make_engine("local", shards=1, device="cpu", opts={"gpus": 0})
    # GPUs given by UUID (as Slurm and containers set CUDA_VISIBLE_DEVICES): the worker name,
    # which ran_on records, never carries the raw UUID
    uuids = ["GPU-" + "0f1e2d3c-aaaa-bbbb-cccc-ddddeeeeff0" + str(i) for i in range(2)]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", ",".join(uuids))
    e = engines.make_engine("local", shards=2, device="cuda")
    assert [s["CUDA_VISIBLE_DEVICES"] for s in e.slots] == uuids
    assert [s["KBREPRO_WORKER"] for s in e.slots] == ["gpu-slot0", "gpu-slot1"]


def test_ran_on_text_is_plain_and_never_a_raw_uuid():
    ro = hcases.ran_on("cpu", "local", "gpuGPU-0f1e2d3c-aaaa-bbbb-cccc-ddddeeeeffff | **x**", host="h")
    assert "0f1e2d3c" not in ro["worker"] and "|" not in ro["worker"] and "*" not in ro["worker"]
    assert hcases.check_ran_on(ro) == []
    for k, v, fragment in (("worker", "GPU-0f1e2d3c-aaaa-bbbb-cccc-ddddeeeeffff", "raw GPU UUID"),
                           ("gpu_name", "**FAILED**", "not a value of its type"),
                           ("driver_version", "<b>580</b>", "not a value of its type")):
        assert any(fragment in p for p in hcases.check_ran_on({**ro, k: v})), (k, v)
    assert hcases.check_ran_on({**ro, "gpu_name": "NVIDIA A100-SXM4-80GB", "driver_version": "580.65.06",
                                "worker": "job 1234_5"}) == []


def test_engine_options_and_missing_packages_are_clear_errors(monkeypatch):
    assert engines.parse_opts(["timeout_min=60", "slurm_partition=gpu", "x=1.5", "y=true"]) == {
        "timeout_min": 60, "slurm_partition": "gpu", "x": 1.5, "y": True}
    for bad in (["nokey"], ["=1"], ["a=1", "a=2"]):
        with pytest.raises(UsageError, match="KEY=VALUE"):
            engines.parse_opts(bad)
    with pytest.raises(UsageError, match="unknown engine"):
        engines.make_engine("dask", shards=1, device="cpu")
    with pytest.raises(UsageError, match="takes no option"):
        engines.make_engine("local", shards=1, device="cpu", opts={"slurm_partition": "gpu"})
    with pytest.raises(UsageError, match="positive"):
        engines.make_engine("local", shards=0, device="cpu")
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed (it is optional)
    with pytest.raises(EnvironmentUnavailableError) as ei:
        engines.make_engine("ray", shards=1, device="cpu")
    assert ei.value.exit_code == 4 and ei.value.hint == "pip install 'kbrepro[ray]'"
    monkeypatch.setitem(sys.modules, "submitit", None)
    with pytest.raises(EnvironmentUnavailableError) as ei:
        engines.make_engine("submitit", shards=1, device="cpu", opts={"cluster": "local"})
    assert ei.value.hint == "pip install 'kbrepro[cluster]'"


def test_submitit_refuses_a_parameter_its_executor_does_not_take(tmp_path):
    pytest.importorskip("submitit")
    e = engines.make_engine("submitit", shards=None, device="cpu", opts={"cluster": "local", "no_such_param": 1})
    with pytest.raises(UsageError, match="refuses the parameters"):
        e.executor(str(tmp_path / "log"))
    with pytest.raises(UsageError, match="cluster=mars"):
        engines.make_engine("submitit", shards=None, device="cpu", opts={"cluster": "mars"})


def test_submitit_local_executor_runs_the_cases_and_a_crash_fails_its_case_only(tmp_path):
    pytest.importorskip("submitit")
    import cloudpickle

    cloudpickle.register_pickle_by_value(shard_runners)  # the job process has no tests/ on its path
    folders = _toy_folders(tmp_path, ["ok", "raise", "ok"])
    e = engines.make_engine("submitit", shards=None, device="cpu", opts={"cluster": "local", "timeout_min": 5})
    out = e.submit(folders, shard_runners.toy)
    assert [o.ok for o in out] == [True, False, True]
    assert out[1].error == "ValueError: this case is broken on two lines"
    assert json.loads((Path(folders[2]) / "out.txt").read_text())["n2"] == 4
    assert (tmp_path / "submitit").is_dir()  # submitit's own logs, beside the cases


# ---------------------------------------------------------------------------------------------
# a real sharded candidate run (CPU), merged, packed, verified


LN = b'''import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)
    def forward(self, x):
        d = tuple(range(-len(self.ln.normalized_shape), 0))
        m = x.mean(dim=d, keepdim=True)
        v = ((x - m) ** 2).mean(dim=d, keepdim=True)
        return (x - m) / torch.sqrt(v + self.ln.eps) * self.ln.weight + self.ln.bias
'''
LN_B = LN.replace(b"return (x - m)", b"y = x - m\n        return y")
SIZES = {"batch_size": 2, "features": 4, "dim1": 8, "dim2": 8}


def _kb(dest: Path) -> Path:
    return kernelbench_from_example(dest, "layernorm-l1-40-full-*.tar")


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    d = tmp_path_factory.mktemp("shard")
    kb = _kb(d)
    for n, src in (("a", LN), ("b", LN_B), ("c", LN)):
        (d / f"{n}.py").write_bytes(src)
    items = [(d / "a.py", "1/40"), (d / "b.py", "1/40"), (d / "c.py", "1/40")]
    res, failed = shard.run_sharded(items, profile="quick", kernelbench=str(kb), results_dir=d / "res",
                                    engine=engines.make_engine("local", shards=2, device="cpu"), device="cpu",
                                    sizes=SIZES, runner=shard_runners.crash_candidate_c)
    plain = bc.run_candidates(items[:2], profile="quick", kernelbench=str(kb), results_dir=d / "plain", sizes=SIZES,
                              device="cpu")
    return d, kb, res, failed, plain


@pytest.mark.slow
def test_a_crash_in_one_case_leaves_the_others_intact(sharded):
    d, _, res, failed, _ = sharded
    assert [(f["candidate"], f["error"].split(":")[0]) for f in failed] == [("c", "CaseDied")]
    assert "killed by signal 9" in failed[0]["error"]
    doc = json.loads((res / "results" / "candidates.json").read_bytes())
    assert [r["name"] for r in doc["candidates"]] == ["a", "b"]
    assert [c["status"] for c in doc["cases"]] == ["done", "done", "failed"]
    assert all(c["ran_on"]["engine"] == "local" and c["ran_on"]["device"] == "cpu" for c in doc["cases"][:2])
    assert {c["ran_on"]["worker"] for c in doc["cases"][:2]} <= {"cpu0", "cpu1"}
    assert not (res / "inputs" / "candidates" / "c.py").exists()  # a failed case contributes nothing
    assert case_records.case_problems(doc) == []


@pytest.mark.slow
def test_the_sharded_documents_equal_the_unsharded_ones_apart_from_timings_and_hosts(sharded):
    _, _, res, _, plain = sharded
    a = json.loads((res / "results" / "candidates.json").read_bytes())
    b = json.loads((plain / "results" / "candidates.json").read_bytes())
    assert case_records.differences(a, b) == []
    assert a["cases"] and "cases" not in b  # what differs is only what comparable() drops
    for rel in ("inputs/candidates/a.py", "inputs/candidates/b.py", "inputs/kernelbench/LICENSE",
                "inputs/kernelbench/KernelBench/level1/40_LayerNorm.py"):
        assert (res / rel).read_bytes() == (plain / rel).read_bytes()


def _members(path: Path):
    with tarfile.open(path) as tf:
        files = {m.name.split("/", 1)[1]: tf.extractfile(m).read() for m in tf if m.isfile()}
    info = bag_info(files["bag-info.txt"])
    return info["External-Identifier"], {k[5:]: v for k, v in files.items() if k.startswith("data/")}, info


def _repack(src: Path, dst: Path, edit) -> Path:
    name, payload, info = _members(src)
    edit(payload)
    bag = pack.make_bag(name, payload, [(k, info[k]) for k in pack.BAG_INFO_KEYS])
    pack.write_archive(bag, dst)
    return dst


@pytest.fixture(scope="module")
def packed(sharded):
    d, _, res, _, _ = sharded
    with pytest.raises(InvalidResultsError, match="1 case\\(s\\) failed") as ei:
        bc.pack_results(res, d / "refused.tar")
    assert "run-case" in ei.value.hint and not (d / "refused.tar").exists()
    return bc.pack_results(res, d / "s.tar", allow_failing=True)


@pytest.mark.slow
def test_the_sharded_bundle_verifies_and_reports_where_each_case_ran(packed):
    rep = verify_archive(packed.path, level="static")
    assert rep.verdict == "PARTIAL" and not [p for t in rep.tiers for p in t.problems]  # PARTIAL: a CPU run
    assert any("1 of 3 cases failed" in n for t in rep.tiers for n in t.notes)
    _, payload, _ = _members(packed.path)
    report = payload["REPORT.md"].decode()
    sec = report[report.index("## Where each case ran"):]
    assert "3 cases" in sec and "2 done, 1 failed" in sec and "**FAILED**" in sec and "killed by signal 9" in sec
    host = json.loads(payload["results/candidates.json"])["cases"][0]["ran_on"]["host_sha256"]
    assert f"`{host[:12]}`" in sec
    import socket

    assert socket.gethostname() not in json.dumps(json.loads(payload["results/candidates.json"])["cases"])


def _edit_doc(fn):
    def edit(payload):
        doc = json.loads(payload["results/candidates.json"])
        fn(doc)
        payload["results/candidates.json"] = jsonio.dumps(doc).encode()
    return edit


@pytest.mark.parametrize("what,edit,fragment", [
    ("a case id that is not its digest", lambda d: d["cases"][0].update(id="c" + "1" * 20), "not the digest"),
    ("a record moved to another case", lambda d: d["candidates"][0]["case"].update(id=d["cases"][1]["id"]),
     "not the digest of the record's own"),
    ("a failed case hidden as done", lambda d: d["cases"][2].update(status="done", error=None),
     "each exactly once, in plan order"),
    ("a case listed twice", lambda d: d["cases"].append(dict(d["cases"][0], index=3)), "more than once"),
    ("Markdown in ran_on", lambda d: d["cases"][0]["ran_on"].update(gpu_name="**FAILED**"), "not a value of its type"),
    ("a raw GPU UUID in ran_on", lambda d: d["cases"][0]["ran_on"].update(worker="GPU-0f1e2d3c-aaaa-bbbb-cccc-dd"),
     "raw GPU UUID"),
])
@pytest.mark.slow
def test_a_bundle_whose_cases_were_tampered_with_fails(packed, tmp_path, what, edit, fragment):
    bad = _repack(packed.path, tmp_path / "bad.tar", _edit_doc(edit))
    rep = verify_archive(bad, level="static")
    msgs = " ".join(p.message for t in rep.tiers for p in t.problems)
    assert rep.verdict == "FAIL" and fragment in msgs, (what, msgs)


@pytest.mark.slow
def test_from_results_merges_unmerged_cases_in_memory_to_the_same_bundle(sharded, packed, tmp_path):
    import shutil

    d, _, res, _, _ = sharded
    copy = tmp_path / "res"
    shutil.copytree(res / "cases", copy / "cases")
    shutil.copy(res / shard_merge.PLAN, copy / shard_merge.PLAN)
    assert not (copy / "results").exists()  # as a Slurm run leaves it: cases only
    again = bc.pack_results(copy, tmp_path / "again.tar", allow_failing=True, name=packed.name)
    assert again.digest == packed.digest
    assert not (copy / "results").exists()  # merged in memory, nothing written into the results folder


# ---------------------------------------------------------------------------------------------
# the command line


from test_cli_misuse import cli, one_error  # noqa: E402


@pytest.mark.parametrize("args,code,fragment", [
    (["--shards", "2"], 2, "does not apply to a study run"),
    (["--engine", "submitit", "--study", "studies/layernorm"], 2, "does not apply to a study run"),
    (["--candidate", "{c}", "--task", "1/40", "--engine-opt", "timeout_min=5"], 2, "--engine-opt without --engine"),
    (["--candidate", "{c}", "--task", "1/40", "--shards", "0"], 2, "not a positive number"),
    (["--candidate", "{c}", "--task", "1/40", "--engine", "local", "--engine-opt", "bad"], 2, "KEY=VALUE"),
    (["--candidate", "{c}", "--task", "1/40", "--engine", "ray"], 4, "ray package is not installed"),
    (["--candidate", "{c}", "--task", "1/40", "--engine", "dask"], 2, "dask"),
    (["--candidate", "{c}", "--task", "1/40", "--shards", "3", "--device", "cpu", "--engine", "submitit",
      "--engine-opt", "cluster=mars"], 2, "cluster=mars"),
])
def test_each_sharding_mistake_is_one_line_with_its_exit_code(tmp_path, monkeypatch, args, code, fragment):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "ray", None)
    (tmp_path / "mine.py").write_text("import torch.nn as nn\n")
    one_error(cli("make", *[a.replace("{c}", str(tmp_path / "mine.py")) for a in args]), code, fragment)
    assert not (tmp_path / "results").exists()


def test_more_shards_than_gpus_is_refused_before_any_work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.py").write_text("import torch.nn as nn\n")
    res = cli("make", "--candidate", tmp_path / "mine.py", "--task", "1/40", "--shards", "2",
              env={"CUDA_VISIBLE_DEVICES": "0"})
    line = one_error(res, 2, "--shards 2 with 1 GPU(s)")
    assert "no two may share one" in line and "--shards 1 or fewer" in res.err
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_from_results_takes_no_sharding_option(sharded, tmp_path):
    _, _, res, _, _ = sharded
    one_error(cli("make", "--from-results", res, "--shards", "2", "--out", tmp_path / "x.tar"), 2, "does not apply to packing")


@pytest.mark.slow
def test_make_bundle_shards_a_cpu_run_end_to_end(sharded, tmp_path, monkeypatch):
    d, kb, _, _, _ = sharded
    monkeypatch.chdir(tmp_path)
    args = ["--candidate", d / "a.py", "--candidate", d / "b.py", "--task", "1/40", "--profile", "quick",
            "--device", "cpu", "--shards", "2", "--kernelbench", kb, "--results-dir", tmp_path / "r",
            "--out", tmp_path / "x.tar"] + [a for k, v in SIZES.items() for a in ("--size", f"{k}={v}")]
    res = cli("make", *args)
    assert res.code == 0, (res.out, res.err)
    assert "digest:" in res.out and "2 case(s), 2 to run on engine local" in res.err
    assert sorted(p.name for p in (tmp_path / "r" / "cases").iterdir()) == sorted(
        json.loads((tmp_path / "r" / shard_merge.PLAN).read_text())["cases"])
    rep = verify_archive(tmp_path / "x.tar", level="static")
    assert rep.verdict == "PARTIAL" and not [p for t in rep.tiers for p in t.problems]


@pytest.mark.slow
def test_a_results_folder_whose_plan_or_cases_were_edited_is_refused(sharded, tmp_path):
    import shutil

    _, _, res, _, _ = sharded
    copy = tmp_path / "res"
    shutil.copytree(res / "cases", copy / "cases")
    plan = json.loads((res / shard_merge.PLAN).read_text())
    (copy / shard_merge.PLAN).write_text(json.dumps({**plan, "cases": plan["cases"][:1] * 2}))
    with pytest.raises(UnreadableInputError, match="not a shard plan"):
        bc.pack_results(copy, tmp_path / "x.tar", allow_failing=True)
    (copy / shard_merge.PLAN).write_text(json.dumps(plan))
    case = copy / "cases" / plan["cases"][0] / "case.json"
    doc = json.loads(case.read_text())
    case.write_text(json.dumps({**doc, "profile": "full"}))  # the id no longer is the digest of the fields
    with pytest.raises(UnreadableInputError, match="not the digest of its fields"):
        bc.pack_results(copy, tmp_path / "x.tar", allow_failing=True)
    assert not (tmp_path / "x.tar").exists()


@pytest.mark.slow
def test_a_second_run_on_one_results_folder_is_refused_while_the_first_runs(sharded, tmp_path):
    import fcntl
    import shutil

    _, _, res, _, _ = sharded
    copy = tmp_path / "res"
    shutil.copytree(res / "cases", copy / "cases")
    shutil.copy(res / shard_merge.PLAN, copy / shard_merge.PLAN)

    class NoEngine(engines.Engine):
        name = "local"

        def submit(self, folders, runner):
            raise AssertionError("a second run must not run any case")

    with open(copy / shard_merge.LOCK, "w") as held:  # the first run, as it holds the folder
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(UsageError, match="another run is running the cases"):
            shard.run_plan(copy, NoEngine())
        one_error(cli("shard", "merge", copy), 2, "another run is running the cases")
        case0 = copy / "cases" / json.loads((copy / shard_merge.PLAN).read_text())["cases"][0]
        one_error(cli("shard", "run-case", case0), 2, "another run is running the cases")  # nor one case by hand
        with pytest.raises(UsageError, match="still being written"):  # nor packed while its cases are written
            bc.pack_results(copy, tmp_path / "x.tar", allow_failing=True)
    (copy / "cases" / json.loads((copy / shard_merge.PLAN).read_text())["cases"][0] / hcases.DONE).rename(tmp_path / "d")
    with pytest.raises(InvalidResultsError, match="has not finished"):  # a half-written case: not done, said so
        bc.pack_results(copy, tmp_path / "x.tar")
    (tmp_path / "d").rename(copy / "cases" / json.loads((copy / shard_merge.PLAN).read_text())["cases"][0] / hcases.DONE)
    assert not (tmp_path / "x.tar").exists() and not (copy / "results").exists()  # nothing merged or written

    class Idle(engines.Engine):
        name = "local"

        def submit(self, folders, runner):
            return []

    assert [f["candidate"] for f in shard.run_plan(copy, Idle())[1]] == ["c"]  # released: the next run runs


@pytest.mark.slow
def test_a_long_study_runs_in_slices_plan_then_run_some_cases_at_a_time(sharded, tmp_path, monkeypatch):
    d, kb, _, _, _ = sharded
    monkeypatch.chdir(tmp_path)
    r = tmp_path / "r"
    sizes = [a for k, v in SIZES.items() for a in ("--size", f"{k}={v}")]
    res = cli("shard", "plan", "--candidate", d / "a.py", "--candidate", d / "b.py", "--task", "1/40", "--profile",
              "quick", "--device", "cpu", "--kernelbench", kb, "--results-dir", r, *sizes)
    assert res.code == 0 and "planned 2 case(s)" in res.out, res.err
    assert not (r / "results").exists()
    one_error(cli("shard", "run", r, "--max-cases", "0"), 2, "--max-cases 0")
    first = cli("shard", "run", r, "--max-cases", "1")
    assert first.code == 0 and "cases not done: 1" in first.out and "2 case(s), 1 to run" in first.err, first.err
    again = cli("shard", "run", r, "--engine-opt", "timeout_min=30")
    assert again.code == 0 and "cases not done: 0" in again.out and "2 case(s), 1 to run" in again.err, again.err
    made = bc.pack_results(r, tmp_path / "x.tar")
    rep = verify_archive(made.path, level="static")
    assert rep.verdict == "PARTIAL" and not [p for t in rep.tiers for p in t.problems]
    doc = json.loads((r / "results" / "candidates.json").read_bytes())
    assert [c["status"] for c in doc["cases"]] == ["done", "done"] and [x["name"] for x in doc["candidates"]] == ["a", "b"]
    one_error(cli("shard", "run", tmp_path), 2, "holds no shard.json")


def test_a_record_whose_run_took_the_fallback_extra_shape_still_names_its_planned_case():
    """A case planned with no extra shape whose run found the reference raising at half the
    batch (BatchNorm in training mode at a batch of one, KernelBench 3/24 at its own batch of 2
    on the H200) records the fallback it took; its id is still derived, and no other shape is."""
    plan = _plan(2)
    files, _ = shard_merge.merge_cases([_result(c) for c in plan])
    doc = json.loads(files["results/candidates.json"])
    task = {"KernelBench/level1/40_LayerNorm.py": b"batch_size = 16\nfeatures = 8\n"}.get
    assert protocol.requested_extra_shapes([{"batch_size": 3}], {"batch_size": 2}) == [[{"batch_size": 3}], []]
    assert protocol.requested_extra_shapes([{"batch_size": 1}], {"batch_size": 2}) == [[{"batch_size": 1}]]
    assert protocol.requested_extra_shapes([{"batch_size": 3}], None) == [[{"batch_size": 3}]]
    doc["candidates"][1]["config"]["extra_shapes"] = [{"batch_size": 3}]  # batch 2 (the run's size) + 1
    assert case_records.case_problems(doc, task) == []
    assert "not the digest of the record's own" in " ".join(m for _, m in case_records.case_problems(doc))
    doc["candidates"][1]["config"]["extra_shapes"] = [{"batch_size": 5}]  # not the fallback: another variant
    assert "not the digest of the record's own" in " ".join(m for _, m in case_records.case_problems(doc, task))


@pytest.mark.slow
def test_the_packer_refuses_records_that_name_another_case(sharded):
    """What the verifier fails (a record whose case id its own fields do not give), the packer
    refuses: before, such a folder packed and then failed its own verification."""
    _, _, res, _, _ = sharded
    files = {str(p.relative_to(res)): p.read_bytes() for p in res.rglob("*") if p.is_file()
             and p.relative_to(res).parts[0] in ("inputs", "results")}
    doc = json.loads(files["results/candidates.json"])
    bc.build_payload(dict(files))  # the folder as the run wrote it packs
    with pytest.raises(InvalidResultsError, match="is not the file candidate a ran with"):  # an edited candidate file
        bc.build_payload({**files, "inputs/candidates/a.py": files["inputs/candidates/a.py"] + b"# edited\n"})
    a, b = doc["candidates"][0]["case"]["id"], doc["candidates"][1]["case"]["id"]
    doc["candidates"][0]["case"]["id"], doc["candidates"][1]["case"]["id"] = b, a
    files["results/candidates.json"] = jsonio.dumps(doc).encode()
    with pytest.raises(InvalidResultsError, match="cases of the sharded run do not match its records"):
        bc.build_payload(files)
