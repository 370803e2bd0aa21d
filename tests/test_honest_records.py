"""Records an honest run writes are records the verifier's rules accept.

Each test runs a candidate through the engine on the CPU (harness/candidate.py), wraps its record
as bundle/candidates.py does, and holds it to every rule the packer and the verifier hold it to
(bundle/candidate_records.py: the typed records and their invariants, the completeness and
derivation rules, the derived verdicts). The harness ran honestly: a rule that refuses what it
wrote would fail an honest author's bundle (or call the record a forgery)."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from kbrepro.bundle import candidate_records
from kbrepro.harness import candidate as hc
from kbrepro.harness import jsonio
from kbrepro.harness.checks import PREDICATES

from test_candidate import TASK  # noqa: E402 (tests/ is on the path; the same small task)


def _utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def held_to_rules(tmp: Path, task: bytes, src: bytes, profile: str = "quick", name: str = "c"):
    """``(record, problems)``: the CPU run of ``src`` on ``task`` and what the rules say of it."""
    cfg = hc.PROFILES[profile]
    started = _utc()
    rec = hc.run_candidate(hc.CandidateSpec(name, src, "task.py", task), cfg, tmp / name, device="cpu")
    rec.pop("provenance_dir")
    rec["file"] = f"inputs/candidates/{name}.py"
    doc = {"schema": "kbrepro/candidates", "schema_version": 2, "kind": "kernelbench-candidates", "profile": profile,
           "device": "cpu", "started_utc": started, "finished_utc": _utc(),
           "predicate": {"official": "allclose", **PREDICATES["allclose"], "atol": cfg.atol, "rtol": cfg.rtol},
           "kernelbench": {"commit": "0" * 40}, "bandwidth": {"gbps": None, "reason": "no GPU"}, "candidates": [rec]}
    loaded = candidate_records.load(json.loads(jsonio.dumps(doc)), {}, lambda r: task)
    return rec, [f"{p.path} {p.message}" for p in loaded.problems]


def _caught(rec) -> list[str]:
    return [v["name"] for v in rec["verdicts"] if v["passed"] is False]


@pytest.mark.slow
def test_an_honest_candidate_of_either_profile_meets_every_rule(tmp_path):
    for profile in ("quick", "full"):
        rec, problems = held_to_rules(tmp_path, TASK, TASK.replace(b"class Model(", b"class ModelNew("), profile,
                                      name=profile)
        assert problems == [] and _caught(rec) == [], (profile, problems, rec["verdicts"])


# a candidate that computes on the tensor of its first call (as a CUDA graph captured on it whose
# inputs are never copied in): every later call answers the values now in that tensor
STALE_INPUT = TASK.replace(b"class Model(", b"class ModelNew(").replace(
    b"        return torch.relu(self.lin(x))",
    b"        if not hasattr(self, 'x0'):\n            self.x0 = x\n        return torch.relu(self.lin(self.x0))")


def test_a_quick_run_that_matches_the_same_buffers_reference_is_a_valid_record(tmp_path):
    """The quick profile has one seed: the same-buffers case is compared with the official draw
    of seed 1, kept under ``s1/official``, which is no case's id; the repeat, poisoned and
    profiled calls of this candidate answer that draw (written into its first tensor) and name
    it in ``matches_other``. The rule took that name for a forgery."""
    rec, problems = held_to_rules(tmp_path, TASK, STALE_INPUT)
    cases = rec["observations"]["cases"]
    assert any("s1/official" in (c.get("matches_other") or []) for c in cases), cases
    assert "s1/official" not in [c["id"] for c in cases]
    assert "follows_fresh_inputs" in _caught(rec)
    assert problems == [], problems


# --------------------------------------------- GPU records: the committed format-4 example
ROOT = Path(__file__).resolve().parent.parent
GPU_EXAMPLE = ROOT / "examples" / "formats" / "candidates-quick-format4.tar"


def _example_payload() -> dict[str, bytes]:
    import tarfile

    with tarfile.open(GPU_EXAMPLE) as tf:
        files = {m.name.split("/", 1)[1]: tf.extractfile(m).read() for m in tf if m.isfile()}
    return {k[len("data/"):]: v for k, v in files.items() if k.startswith("data/")}


def _rules_of(doc: dict, payload: dict, i: int = 0) -> list[str]:
    from kbrepro.harness import cheats
    from kbrepro.model import candidate_rules as rules
    from kbrepro.model import candidates as mc

    typed, problems = mc.load(json.loads(jsonio.dumps(doc)))
    assert typed is not None, problems
    rec = typed.candidates[i]
    env = json.loads(payload["results/environment.json"])["fields"]
    ev = rules.Evidence(payload[f"inputs/kernelbench/{rec.task}"], payload, env["l2_cache_bytes"]["value"],
                        env["gpu_name"]["value"])
    custom = {v.name: v.passed for v in rec.verdicts}.get("custom_kernel_ran")
    return [f"{p.path} {p.message}" for p in rules.record_problems(typed, i, ev, cheats.custom_kernels(rec.observations),
                                                                   custom)]


def test_a_timed_candidate_whose_output_has_another_shape_is_a_valid_record():
    """A candidate whose output has the reference's elements in another shape (``(128,)`` for
    ``(1, 128)``) fails its checks yet runs through every stage, the timing stage too: its timing
    input's comparison is a mismatch (harness.checks.compare), and the roofline's bytes are the
    reference's (harness/candidate_timing.py). The rule demanded a compared output to derive them
    from and called the record incomplete."""
    import torch

    from kbrepro.harness import kbtask
    from kbrepro.harness.checks import Tolerance, compare

    payload = _example_payload()
    doc = json.loads(payload["results/candidates.json"])
    assert _rules_of(doc, payload) == []
    rec = doc["candidates"][0]
    case = next(c for c in rec["observations"]["cases"] if c["id"] == "timing_input")
    ref = torch.randn(1, 128)
    out = ref.reshape(128)
    case["compare"] = json.loads(jsonio.dumps(compare(ref, out, Tolerance(1e-4, 1e-4))))
    case["output"]["digest"] = kbtask.fingerprint(out)
    assert case["compare"]["shape_match"] is False
    assert _rules_of(doc, payload) == []
    rec["timing"]["roofline"]["bytes_moved"] += 4  # not the bytes of any output of 128 elements
    assert any("roofline.bytes_moved" in p for p in _rules_of(doc, payload))


def _as_shards(doc: dict, gpus: list[str]) -> None:
    """``doc`` as bundle/shard.py merges the cases of a plan, one candidate a case, each run on
    ``gpus[i]`` (its ``ran_on``) with the document's copy block as its own."""
    cases = []
    for i, (rec, gpu) in enumerate(zip(doc["candidates"], gpus)):
        cid = f"c{i:020x}"
        rec["case"] = {"id": cid, "bandwidth_gbps": doc["bandwidth"]["gbps"],
                       "bandwidth_block": json.loads(json.dumps(doc["bandwidth"]["block"]))}
        cfg = rec["config"]
        cases.append({"id": cid, "index": i, "kind": "kernelbench-candidate", "task": rec["task"],
                      "task_sha256": rec["task_sha256"], "candidate": rec["name"],
                      "candidate_sha256": rec["source_sha256"], "profile": doc["profile"], "seeds": cfg["seeds"],
                      "variant": {"sizes": cfg["sizes"], "extra_shapes": cfg["extra_shapes"]}, "status": "done",
                      "error": None, "ran_on": {"host_sha256": "0" * 64, "engine": "submitit", "worker": str(i),
                                                "device": "cuda", "gpu_name": gpu, "gpu_uuid_sha256": None,
                                                "driver_version": None, "sm_clock_mhz": None, "memory_clock_mhz": None}})
    doc["cases"] = cases


def test_a_sharded_run_whose_cases_ran_on_two_gpu_models_is_a_valid_record():
    """The cases of a sharded plan may run on different GPUs (a cluster's partition); the merged
    environment record is the first finished case's (bundle/shard.py). A case on an H200 flushes
    twice the H200's L2 and copies faster than an H100 can: the rules held it to the first
    case's H100 and called its flush and its copy bandwidth impossible."""
    from kbrepro.model import protocol

    payload = _example_payload()
    doc = json.loads(payload["results/candidates.json"])
    env = json.loads(payload["results/environment.json"])
    h100_l2 = 50 * 1024 * 1024
    env["fields"]["gpu_name"]["value"] = "NVIDIA H100 80GB HBM3"
    env["fields"]["l2_cache_bytes"]["value"] = h100_l2
    payload["results/environment.json"] = jsonio.dumps(env).encode()
    _as_shards(doc, ["NVIDIA H100 80GB HBM3", "NVIDIA H200"])
    first = doc["candidates"][0]  # the environment's case: an H100's L2 and copy bandwidth
    blk = first["case"]["bandwidth_block"]
    for r in blk["rounds"]:
        r["times_ms"] = {k: v * 1.5 for k, v in r["times_ms"].items()}
    gbps = protocol.copy_gbps(blk["bytes_moved"], [r["times_ms"] for r in blk["rounds"]], blk["arms"])
    first["case"]["bandwidth_gbps"] = first["timing"]["roofline"]["bandwidth_gbps"] = gbps
    doc["bandwidth"] = {"gbps": gbps, "block": json.loads(json.dumps(blk))}
    first["blocks"][1]["flush_bytes"] = 2 * h100_l2
    assert _rules_of(doc, payload, 0) == []
    from kbrepro.model import candidate_rules as rules
    from kbrepro.model import candidates as mc

    typed, _ = mc.load(json.loads(jsonio.dumps(doc)))
    assert [f"{p.path} {p.message}" for p in rules.document_problems(typed, "NVIDIA H100 80GB HBM3", "9.0", h100_l2)] == []
    assert _rules_of(doc, payload, 1) == []
    doc["candidates"][1]["blocks"][1]["flush_bytes"] += 1  # not twice an L2 size
    assert any("flush_bytes" in p for p in _rules_of(doc, payload, 1))


def test_an_extra_shape_that_changes_no_size_is_refused_before_the_run(tmp_path):
    """``--extra-shape batch_size=2`` on a run at batch_size 2 checks the main shape again; the
    rules refuse the record it makes (config.extra_shapes "changes no size of the run"), so an
    honest author learnt it only once the run was over: the run refuses it before it starts."""
    from kbrepro.bundle import candidates as bc
    from kbrepro.errors import UsageError

    from test_candidate import LN_HONEST, SIZES, _kernelbench

    kb = _kernelbench(tmp_path)
    (tmp_path / "ln.py").write_bytes(LN_HONEST)
    with pytest.raises(UsageError, match="changes no size"):
        bc.run_candidates([(tmp_path / "ln.py", "1/40")], profile="quick", kernelbench=str(kb),
                          results_dir=tmp_path / "res", sizes=SIZES, extra_shapes=({"batch_size": SIZES["batch_size"]},),
                          device="cpu")
    assert not (tmp_path / "res" / "results").exists()
