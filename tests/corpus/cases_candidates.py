"""The corpus of forged candidate bundles (issue 26): one or more cases per class of the red
team's attack on static verification, each built from a committed GPU example with the
product's own packer as a library (tests/forge_candidates.py: every derived file agrees with
the edit), each with the exit code, the first failing tier and a fragment of the problem
(JSON path and message) the verifier must report.

Classes (the issue's numbering): 1 a field that switches a check off; 2 a check input believed,
not derived; 3 evidence that cannot be read; 4 a summary field over the raw one; 5 records that
contradict each other; 7 what a reader sees (REPORT.md as an older packer wrote it).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable

from kbrepro.bundle import shard
from kbrepro.harness import cases as hcases

QUICK = "candidates-quick-20261201T153437.tar"
FULL = "candidates-full-20261201T175531.tar"


@dataclass(frozen=True)
class CandidateCase:
    """``name``; ``cls`` (the issue's class); ``example`` (file in examples/); ``edit(doc,
    files)``; ``tier`` (first failing tier); ``fragment`` (in ``path + " " + message`` of a
    problem of that tier); ``exit_code``; ``description``."""

    name: str
    cls: int
    example: str
    edit: Callable
    tier: str
    fragment: str
    description: str
    exit_code: int = 1


def _c(doc, i=0):
    return doc["candidates"][i]


def _case(doc, cid, i=0):
    return next(c for c in _c(doc, i)["observations"]["cases"] if c["id"] == cid)


def _stop_in(doc, stage, keep_cases, i=0):
    """The record as a run that stopped in ``stage`` would look, keeping ``keep_cases`` cases."""
    r = _c(doc, i)
    names = [s["name"] for s in r["stages"]]
    r["stages"] = r["stages"][:names.index(stage) + 1]
    r["observations"]["cases"] = r["observations"]["cases"][:keep_cases]
    r["observations"]["failure"] = f"{stage}: the candidate's process ended with exit code 1"


def _drop_compile_arm(doc, files):
    """The red team's attack: a failure (so no completeness check ran) and the torch.compile
    arm deleted (so 'faster than torch.compile' is no longer judged)."""
    r = _c(doc)
    r["observations"]["failure"] = "weights and shapes: the candidate's process ended with exit code 1"
    for b in r["blocks"]:
        b["arms"].remove("compile_default")
        for row in b["rounds"]:
            row["times_ms"].pop("compile_default")
            row["order"].remove("compile_default")
    r["timing"]["baselines"].pop("compile_default")


def _sharded(doc, with_block: bool):
    for r in doc["candidates"]:
        fields = shard.record_case_fields(r, doc)
        r["case"] = {"id": hcases.case_id(fields), "bandwidth_gbps": doc["bandwidth"]["gbps"]}
        if with_block:
            r["case"]["bandwidth_block"] = copy.deepcopy(doc["bandwidth"]["block"])
    doc["cases"] = [{"id": r["case"]["id"], "index": i, **shard.record_case_fields(r, doc), "status": "done",
                     "error": None, "ran_on": None} for i, r in enumerate(doc["candidates"])]


def _forged_block_gbps(doc, files):
    _sharded(doc, True)
    blk = _c(doc)["case"]["bandwidth_block"]
    for row in blk["rounds"]:  # a slower copy: a lower bandwidth, so a faster candidate fits under the roofline
        row["times_ms"] = {k: v * 3 for k, v in row["times_ms"].items()}


def _kernel_in_no_binary(doc, files):
    """A 'custom' kernel that only PyTorch ran, renamed in the profile."""
    for k in _c(doc)["observations"]["profile"]["kernels"]:
        k["name"] = "my_fused_gelu_kernel(float const*, float*, int)"


def _case_of_other_inputs(doc, files):
    c = _case(doc, "s0/normal")
    c["digests_parent"] = [d.replace("(1, 128)", "(1, 4096)") for d in c["digests_parent"]]
    c["digests_before"] = list(c["digests_parent"])
    c["digests_after"] = list(c["digests_parent"])


def _sizes_claimed(doc, files):
    for r in doc["candidates"]:
        r["config"]["sizes"] = {"batch_size": 4096}


CASES = (
    # 1: a field that switches a check off
    CandidateCase("c1_empty_failure", 1, QUICK, lambda d, f: _c(d)["observations"].update(failure=""), "documents",
                  "observations.failure holds 0 characters", "an empty failure string (read as no failure by ran, as a "
                  "stop by the completeness check)"),
    CandidateCase("c1_failure_hides_deleted_arm", 1, QUICK, _drop_compile_arm, "documents", "timing.baselines",
                  "a failure in the last stage and the torch.compile arm deleted from every block"),
    CandidateCase("c1_failure_hides_dropped_case", 1, QUICK,
                  lambda d, f: _stop_in(d, "weights and shapes", 4), "documents", "observations.cases",
                  "a failing case dropped behind a failure in a later stage"),
    CandidateCase("c1_failure_names_no_stage", 1, QUICK,
                  lambda d, f: _c(d)["observations"].update(failure="the candidate stopped"), "documents",
                  "does not name the stage", "a failure that names no stage of the run"),
    # 2: a check input believed, not derived
    CandidateCase("c2_bandwidth_edited", 2, QUICK, lambda d, f: d["bandwidth"].update(gbps=d["bandwidth"]["gbps"] * 10),
                  "documents", "$.bandwidth.gbps is not the bandwidth of its raw copy block",
                  "the run's bandwidth raised tenfold (its raw block unchanged)"),
    CandidateCase("c2_roofline_bandwidth_edited", 2, QUICK,
                  lambda d, f: _c(d)["timing"]["roofline"].update(bandwidth_gbps=1e5), "documents",
                  "roofline.bandwidth_gbps", "the roofline's bandwidth edited"),
    CandidateCase("c2_bytes_moved_edited", 2, QUICK, lambda d, f: _c(d)["timing"]["roofline"].update(bytes_moved=64),
                  "documents", "roofline.bytes_moved is not the bytes of the task's inputs and output",
                  "the bytes a call moves cut to 64"),
    CandidateCase("c2_null_bandwidth_gpu_run", 2, QUICK, lambda d, f: [d["bandwidth"].update(gbps=None),
                                                                       d["bandwidth"].pop("block")],
                  "documents", "a GPU run measures the copy bandwidth", "no bandwidth on a GPU run"),
    CandidateCase("c2_sharded_bandwidth_without_block", 2, QUICK, lambda d, f: _sharded(d, False), "documents",
                  "case.bandwidth_gbps is not the bandwidth of the case's own raw copy block",
                  "a sharded run's per-case bandwidth with no block behind it"),
    CandidateCase("c2_sharded_block_forged", 2, QUICK, _forged_block_gbps, "documents",
                  "case.bandwidth_gbps is not the bandwidth", "a case's copy block slowed, its stated bandwidth kept"),
    CandidateCase("c2_invocations_raised", 2, QUICK, lambda d, f: [b["protocol"].update(invocations_per_pair=999)
                                                                   for b in _c(d)["blocks"]],
                  "documents", "protocol.invocations_per_pair", "invocations per request raised (hides a patched timer)"),
    CandidateCase("c2_roofline_median_edited", 2, QUICK,
                  lambda d, f: _c(d)["timing"]["roofline"].update(median_ms=1.0), "documents",
                  "roofline.median_ms is not the warm block's median", "the roofline's time edited"),
    # 3: evidence that cannot be read
    CandidateCase("c3_kernel_name_list", 3, QUICK,
                  lambda d, f: _c(d)["observations"]["profile"]["kernels"][0].update(name=["add_kernel"]), "documents",
                  "kernels[0].name is an array, not a string", "a kernel name written as a list"),
    CandidateCase("c3_marker_stream_null", 3, QUICK,
                  lambda d, f: _c(d)["observations"]["profile"].update(marker_stream=None), "documents",
                  "observations.profile", "the profiled call's stream set to null"),
    CandidateCase("c3_thread_count_float", 3, QUICK, lambda d, f: _case(d, "repeat").update(threads_after=2.0),
                  "documents", "threads_after is a number, not an integer", "a thread count of 2.0"),
    CandidateCase("c3_parent_digests_deleted", 3, QUICK, lambda d, f: _case(d, "s0/official").pop("digests_parent"),
                  "documents", "digests_parent is missing", "the parent's digests of a case deleted"),
    CandidateCase("c3_parent_digests_emptied", 3, QUICK,
                  lambda d, f: _case(d, "s0/official").update(digests_parent=[]), "documents",
                  "not one per input", "the parent's digests of a case emptied"),
    CandidateCase("c3_per_call_time_zero", 3, QUICK,
                  lambda d, f: _c(d)["timing"]["per_call"]["fresh"][0]["times_ms"].__setitem__(0, 0.0), "documents",
                  "times_ms[0] is 0.0, not more than 0", "a per-call time of 0"),
    CandidateCase("c3_failing_case_marked_pass", 3, QUICK, lambda d, f: _case(d, "s0/normal")["compare"][
        "official"].update({"pass": True, "failing_count": None}), "documents", "official.failing_count is null",
                  "a case marked pass: true with its counts set to null"),
    # 4: a summary field over the raw one
    CandidateCase("c4_reference_range_widened", 4, QUICK, lambda d, f: _case(d, "s0/official").update(
        reference_range=[-1000.0, 1000.0]), "documents", "max_abs_reference",
                  "the reference's range widened (discriminates reads it)"),
    CandidateCase("c4_discriminating_flag", 4, QUICK, lambda d, f: _case(d, "s0/official")["compare"].update(
        discriminating=False), "documents", "compare.discriminating", "the discrimination flag contradicts max |ref|"),
    # 5: records that contradict each other
    CandidateCase("c5_sizes_against_shapes", 5, QUICK, _case_of_other_inputs, "documents",
                  "the recorded inputs are not the ones the task gives", "a case's inputs of another shape"),
    CandidateCase("c5_sizes_claimed", 5, QUICK, _sizes_claimed, "documents", "not a size of the task",
                  "a size the task does not have"),
    CandidateCase("c5_custom_kernel_in_no_binary", 5, QUICK, _kernel_in_no_binary, "documents",
                  "custom_kernel_ran passes on a kernel no bundled binary defines",
                  "a custom kernel that no bundled binary defines"),
    CandidateCase("c5_case_model_swapped", 5, QUICK, lambda d, f: _case(d, "redrawn_weights").update(model="main"),
                  "documents", "input set and model", "the re-drawn-weights case ran the main model"),
    CandidateCase("c5_arm_order_sorted", 5, QUICK, lambda d, f: [r.update(order=sorted(r["order"])) for b in
                                                                 _c(d)["blocks"] for r in b["rounds"]],
                  "documents", "seeded order", "the arms of every round in another order than the seeded shuffle"),
    CandidateCase("c5_stage_shorter_than_requests", 5, QUICK, lambda d, f: _c(d)["stages"][1].update(seconds=0.001),
                  "documents", "stages[1].seconds", "a stage shorter than its own requests"),
    CandidateCase("c5_full_inputs_of_another_rank", 5, FULL, lambda d, f: _case(d, "s1/normal").update(
        digests_parent=[x.replace("|(", "|(2, ", 1) for x in _case(d, "s1/normal")["digests_parent"]]),
                  "documents", "digests_parent", "the full example: a case's inputs of another rank"),
)
NAMES = tuple(c.name for c in CASES)


def by_name(name: str) -> CandidateCase:
    return next(c for c in CASES if c.name == name)
