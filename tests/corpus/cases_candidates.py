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

import random
import statistics

from kbrepro.bundle import case_records
from kbrepro.harness import cases as hcases
from kbrepro.model import protocol

QUICK = "candidates-quick-20261201T153437.tar"
FULL = "candidates-full-20261201T175531.tar"
#: timing protocol 2 (format 4): a run of KernelBench's example candidates on an H200
V2 = "formats/candidates-quick-format4.tar"


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
        fields = case_records.record_case_fields(r, doc)[0]
        r["case"] = {"id": hcases.case_id(fields), "bandwidth_gbps": doc["bandwidth"]["gbps"]}
        if with_block:
            r["case"]["bandwidth_block"] = copy.deepcopy(doc["bandwidth"]["block"])
    doc["cases"] = [{"id": r["case"]["id"], "index": i, **case_records.record_case_fields(r, doc)[0], "status": "done",
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
                  "times_ms[0] is 0.0, less than 1e-06", "a per-call time of 0"),
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


# --------------------------------------------- found by the red team of issue 26 (round 2)
def _copy_scaled(doc, files, f=0.3):
    """The run's copy block made 3x faster (14 TB/s on an H200), every derived value with it,
    and the candidate's times with it: the roofline has room for a faster candidate."""
    for row in doc["bandwidth"]["block"]["rounds"]:
        row["times_ms"] = {k: v * f for k, v in row["times_ms"].items()}
    blk = doc["bandwidth"]["block"]
    doc["bandwidth"]["gbps"] = protocol.copy_gbps(blk["bytes_moved"], [r["times_ms"] for r in blk["rounds"]],
                                                  blk["arms"])
    for r in doc["candidates"]:
        r["timing"]["roofline"]["bandwidth_gbps"] = doc["bandwidth"]["gbps"]


def _extra_shape_is_main(doc, files):
    for r in doc["candidates"]:
        r["config"]["extra_shapes"] = [{"batch_size": 8192}]
        r["observations"]["extra_shapes"] = [{"batch_size": 8192}]
        cases = r["observations"]["cases"]
        src = copy.deepcopy(next(c for c in cases if c["id"] == "s0/normal"))
        cases[:] = [c for c in cases if c["kind"] != "extra_shape"]
        src.update(id="shape0", kind="extra_shape", set="shape0", model="shape0")
        cases.append(src)


def _fabricated_binary(doc, files):
    """A kernel renamed in the profile, with a made-up binary record and SASS listing for it."""
    import hashlib

    sass = b"\n\tcode for sm_90a\n\t\tFunction : _Z20my_fused_gelu_kernelPKfPfi\n"
    r = _c(doc)
    for k in r["observations"]["profile"]["kernels"]:
        k["name"] = "my_fused_gelu_kernel(float const*, float*, int)"
    path = f"provenance/{r['name']}/sass/fake.so.sass"
    files[path] = sass
    r["provenance"]["binaries"].append({"file": "ext/nowhere/fake.so", "sha256": "0" * 64, "elf": [],
                                        "sass_file": path, "sass_sha256": hashlib.sha256(sass).hexdigest(),
                                        "ftz_counts": None, "sass_says_ftz": None})


def _inv_to(doc, files, new=1000):
    """Invocations per request at the rule's cap, the parent's clock kept consistent."""
    b = _c(doc)["blocks"][0]
    inv = b["protocol"]["invocations_per_pair"]
    for row in b["rounds"]:
        t = row["times_ms"]["candidate"]
        row["host_ms"]["candidate"] += t * (new - inv)
    b["protocol"]["invocations_per_pair"] = new
    r = _c(doc)
    st = next(x for x in r["stages"] if x["name"] == "timing")
    need = sum(row["host_ms"]["candidate"] for bb in r["blocks"] for row in bb["rounds"]) / 1e3 + 1
    r["seconds"] += max(0.0, need - st["seconds"])
    st["seconds"] = max(st["seconds"], need)


def _eager_skipped(doc, files):
    cfg = protocol.PROFILES[doc["profile"]]
    for r in doc["candidates"]:
        r["timing"]["baselines"]["eager"] = {"skipped": "eager baseline not run"}
        for b in r["blocks"]:
            b["arms"].remove("eager")
            rng = random.Random(cfg.order_seed + (1 if b["l2"] == "cold" else 0))
            for row in b["rounds"]:
                row["times_ms"].pop("eager")
                o = list(b["arms"])
                rng.shuffle(o)
                row["order"] = o


def _ran_on_cpu(doc, files):
    _sharded(doc, True)
    for c in doc["cases"]:
        c["ran_on"] = {"host_sha256": "a" * 64, "engine": "local", "worker": None, "device": "cpu", "gpu_name": None,
                       "gpu_uuid_sha256": None, "driver_version": None, "sm_clock_mhz": None, "memory_clock_mhz": None}


def _clocks_outside_run(doc, files):
    doc["started_utc"], doc["finished_utc"] = doc["finished_utc"], "2020-01-01T00:00:00Z"


def _longer_than_run(doc, files):
    r = _c(doc)
    r["stages"][-1]["seconds"] = 9_000_000.0
    r["seconds"] = 9_999_999.0


def _reference_on_cpu(doc, files):
    for c in _c(doc)["observations"]["cases"]:
        if c["id"] in ("s0/official", "timing_input"):
            c["reference_device"] = "cpu"
            c["output"]["device"] = "cpu"


def _subnormal_copy(doc, files):
    for row in doc["bandwidth"]["block"]["rounds"]:
        row["times_ms"] = {k: 5e-324 for k in row["times_ms"]}


def _inf_copy(doc, files):
    for row in doc["bandwidth"]["block"]["rounds"]:
        row["times_ms"] = {k: 1e-310 for k in row["times_ms"]}
    doc["bandwidth"]["gbps"] = 123.0
    for r in doc["candidates"]:
        r["timing"]["roofline"]["bandwidth_gbps"] = 123.0


RED_TEAM = (
    CandidateCase("c2_copy_faster_than_the_gpu", 2, FULL, _copy_scaled, "documents", "more than the NVIDIA H200 can move",
                  "the raw copy block and everything derived from it made 3x faster (14 TB/s on an H200)"),
    CandidateCase("c2_infinite_bandwidth", 2, QUICK, _inf_copy, "documents", "times_ms",
                  "copy times of 1e-310 ms: an infinite bandwidth that would equal any stated one"),
    CandidateCase("c2_invocations_at_the_cap", 2, QUICK, _inv_to, "documents", "protocol.invocations_per_pair",
                  "invocations per request at the rule's cap of 1000 where the eager arm gives about 274"),
    CandidateCase("c2_flush_of_one_byte", 2, QUICK, lambda d, f: [r["blocks"][1].update(flush_bytes=1)
                                                                  for r in d["candidates"]],
                  "documents", "blocks[1].flush_bytes", "a cold block that flushed one byte"),
    CandidateCase("c3_subnormal_copy_times", 3, QUICK, _subnormal_copy, "documents", "times_ms",
                  "copy times of 5e-324 ms (a division by zero once)"),
    CandidateCase("c3_poison_byte_deleted", 3, QUICK, lambda d, f: [c.pop("poison_byte") for r in d["candidates"]
                                                                    for c in r["observations"]["cases"]
                                                                    if c["kind"] == "poison"],
                  "documents", "poison_byte", "the poisoned cases' byte deleted"),
    CandidateCase("c5_extra_shape_is_the_main_shape", 5, FULL, _extra_shape_is_main, "documents",
                  "changes no size of the run", "an extra shape equal to the main one, a main case copied as shape0"),
    CandidateCase("c5_fabricated_binary", 5, FULL, _fabricated_binary, "documents",
                  "is not a bundled provenance file with this hash", "a made-up binary and SASS for a renamed kernel"),
    CandidateCase("c5_reference_on_the_cpu", 5, QUICK, _reference_on_cpu, "documents",
                  "not all on the run's device", "a GPU run whose references and outputs say cpu"),
    CandidateCase("c5_cases_ran_on_the_cpu", 5, QUICK, _ran_on_cpu, "documents", "ran_on.device",
                  "a GPU run's sharded cases that say they ran on the CPU"),
    CandidateCase("c5_finished_before_started", 5, QUICK, _clocks_outside_run, "documents", "is before started_utc",
                  "finished_utc before started_utc"),
    CandidateCase("c5_longer_than_the_run", 5, QUICK, _longer_than_run, "documents", "is longer than the run",
                  "a candidate's whole check longer than the run"),
    CandidateCase("c5_eager_skipped", 5, QUICK, _eager_skipped, "documents", "timing.baselines.eager",
                  "the eager baseline marked skipped (its claims vanish) while every reference came from it"),
)
def _halve_block(doc, files):
    """The candidate's block times halved, the parent's clock of each request kept consistent:
    the clock's requests of the same length still report the true times."""
    for b in _c(doc)["blocks"]:
        inv = b["protocol"]["invocations_per_pair"]
        for row in b["rounds"]:
            t = row["times_ms"]["candidate"]
            row["times_ms"]["candidate"] = t / 2
    r = _c(doc)
    r["timing"]["roofline"]["median_ms"] = statistics.median(x["times_ms"]["candidate"] for x in r["blocks"][0]["rounds"])


def _held(doc, k=0):
    return _c(doc)["blocks"][0]["rounds"][k]["outputs"]


PROTOCOL_2 = (
    CandidateCase("c6_block_times_against_the_clock", 2, V2, _halve_block, "documents", "timing.clock.reported1_ms",
                  "protocol 2: the block's times halved, the clock's requests of the same length unchanged"),
    CandidateCase("c6_held_row_beyond_the_output", 3, V2, lambda d, f: _held(d)["sample"][0].__setitem__(2, 7),
                  "documents", "names a chunk the task's output does not have",
                  "protocol 2: a held output's row in a chunk the 128-element output does not have"),
    CandidateCase("c6_held_failure_not_counted", 3, V2, lambda d, f: _held(d)["sample"][0].__setitem__(3, 1e6),
                  "documents", "its counts do not agree with the checksums it records",
                  "protocol 2: a row whose checksums fail, in a round that counts no failure"),
    CandidateCase("c6_held_worst_without_failure", 3, V2, lambda d, f: _held(d).update(worst=5.0), "documents",
                  "its counts do not agree", "protocol 2: a worst deviation in a round without a failure"),
    CandidateCase("c6_held_rows_not_the_seeded_ones", 5, V2, lambda d, f: [x.__setitem__(0, x[0] + 1) or
                                                                           x.__setitem__(1, x[1] + 1)
                                                                           for x in _held(d)["sample"]],
                  "documents", "not the ones the seeded draw picks", "protocol 2: passing rows of other invocations"),
    CandidateCase("c6_eager_per_call_rounds", 5, V2, lambda d, f: [x.update(round=7) for x in _c(d)["timing"][
        "per_call"]["eager_fresh"]], "documents", "eager_fresh", "protocol 2: eager's per-call rounds misnumbered"),
    CandidateCase("c6_clock_beyond_the_stage", 5, V2, lambda d, f: _c(d)["timing"]["clock"].update(
        host1_ms=[1e6] * 5, host2_ms=[2e6] * 5), "documents", "stages[2].seconds",
                  "protocol 2: clock requests of 1000 s in a timing stage of seconds"),
    CandidateCase("c6_clock_missing", 5, V2, lambda d, f: _c(d)["timing"].pop("clock"), "documents", "timing.clock",
                  "protocol 2: the clock over two lengths deleted"),
    CandidateCase("c6_pool_budget_below_the_requests", 2, V2, lambda d, f: [b["protocol"].update(pool_bytes=0)
                                                                            for b in _c(d)["blocks"]],
                  "documents", "protocol.invocations_per_pair", "protocol 2: a pool of 0 bytes (one set a request) "
                  "recorded beside requests of the calibrated length"),
    CandidateCase("c6_pool_budget_differs_by_block", 5, V2, lambda d, f: _c(d)["blocks"][-1]["protocol"].update(
        pool_bytes=12345), "documents", "protocol.pool_bytes", "protocol 2: the cold block states another pool "
                  "budget than the warm one"),
    CandidateCase("c3_pool_budget_beyond_the_cap", 3, V2, lambda d, f: [b["protocol"].update(pool_bytes=1 << 40)
                                                                        for b in _c(d)["blocks"]],
                  "documents", "pool_bytes", "protocol 2: a pool budget above the protocol's 16 GiB cap"),
    CandidateCase("c6_protocol_1_with_held_outputs", 5, QUICK, lambda d, f: _c(d)["blocks"][0]["rounds"][0].update(
        outputs={"n": 1, "aliased": 0, "failing": 0, "worst": 0.0, "sample": []}), "documents", "protocol",
                  "protocol 1 records holding a field of protocol 2"),
)

def _ninja_file(doc):
    return next(f for f in _c(doc)["provenance"]["files"] if f["path"].endswith("/build.ninja"))


def _ninja_not_bundled(doc, files):
    f = _ninja_file(doc)
    files.pop(f.pop("bundle_path"))
    f["copied"] = False


#: found by mutating the committed examples with the forger's packer (tests/corpus/mutate_candidates.py)
MUTATION = (
    CandidateCase("c2_build_flags_edited", 2, QUICK, lambda d, f: _c(d)["provenance"]["builds"][0].update(
        cuda_cflags=_c(d)["provenance"]["builds"][0]["cuda_cflags"] + " --use_fast_math"), "documents",
        "builds[0].cuda_cflags", "the compiler flags in effect as the record states them, not the bundled build.ninja"),
    CandidateCase("c3_build_record_dropped", 3, QUICK, lambda d, f: _c(d)["provenance"].update(builds=[]),
                  "documents", "provenance.builds", "a bundled build.ninja with no build record"),
    CandidateCase("c3_build_ninja_not_bundled", 3, QUICK, _ninja_not_bundled, "documents", "provenance.builds",
                  "a build record whose build.ninja is not in the bundle: flags nobody can read"),
    CandidateCase("c3_plain_output_of_another_type", 3, QUICK, lambda d, f: _case(d, "s0/official")["output"].update(
        type="mymodule.Tensor"), "documents", "output.plain", "a plain tensor of another type"),
    CandidateCase("c4_max_abs_error_nulled", 4, QUICK, lambda d, f: _case(d, "s0/official")["compare"].update(
        max_abs_error=None), "documents", "max_abs_error", "a statistic nulled where finite pairs exist"),
    CandidateCase("c4_nan_pairs_without_nans", 4, QUICK, lambda d, f: _case(d, "s0/official")["compare"][
        "nonfinite"].update(nan_both=3), "documents", "nonfinite", "NaN pairs counted where neither side has a NaN"),
    CandidateCase("c3_output_digest_nulled", 3, QUICK, lambda d, f: _case(d, "s0/official")["output"].update(
        digest=None), "documents", "compare", "a compared output whose digest is gone"),
    CandidateCase("c4_element_count_edited", 4, QUICK, lambda d, f: _case(d, "s0/official")["compare"].update(
        element_count=256), "documents", "compared element count", "a compare over more elements than the output holds"),
    CandidateCase("c4_reference_range_collapsed", 4, QUICK, lambda d, f: _case(d, "s0/official").update(
        reference_range=[0.0, 0.0]), "documents", "max_abs_reference", "a reference range that is not the compare's"),
    CandidateCase("c3_build_torch_nulled", 3, QUICK, lambda d, f: _c(d)["observations"]["build"].update(torch=None),
                  "documents", "observations.build", "a complete build that does not say which torch it ran"),
    CandidateCase("c3_request_clock_zero", 3, QUICK, lambda d, f: _case(d, "s0/official").update(host_ms=0),
                  "documents", "host_ms", "a checked call the parent's clock never saw"),
)

CASES = CASES + RED_TEAM + PROTOCOL_2 + MUTATION
NAMES = tuple(c.name for c in CASES)


def by_name(name: str) -> CandidateCase:
    return next(c for c in CASES if c.name == name)
