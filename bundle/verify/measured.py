"""Evidence a study's measured run always records, which a check needs: missing or malformed,
it fails (the trust rule: evidence a check needs never makes the check quietly undecided).

The engine writes every field named here for every measured run (harness/run_build.py,
harness/run_task.py, harness/checks.py); a check elsewhere that reads one of them would
otherwise skip where it is null or absent. Imported results (the post's own files) are not held
to them: an import cannot have what the post never recorded. Two checks:

* :func:`recorded_evidence` (tier 3): the compile records' architecture, NVRTC release, option
  lists and binary sizes; the predicate-direction witness; every full-program case's shape;
  the compile records' witness against witness.json; the environment fields the checks
  compare; each cold-L2 block's regime and flush size (:func:`kbrepro.harness.extras.flush_bytes`);
  every check record's statistics; a skipped block holds no rounds (any bundle).
* :func:`listings_again` (tier 4, any bundle): the recorded SASS and PTX FTZ verdicts and
  counts derived again from the bundled listings, the CPU references' values against their bits.
"""
from __future__ import annotations

import math
import re
import struct
from collections.abc import Mapping

from kbrepro.bundle.crosscheck.common import checks_of, f32_bits
from kbrepro.bundle.evidence import number
from kbrepro.bundle.verify.core import Bundle, Tier, safe_text
from kbrepro.harness import extras
from kbrepro.kernels import compile as kc
from kbrepro.model.timing_rules import gpu_problems

COMPILE, CORRECTNESS, TIMINGS = "data/results/compile.json", "data/results/correctness.json", "data/results/timings.json"
WITNESS, ENVIRONMENT = "data/results/witness.json", "data/environment.json"
#: the environment fields whose values the checks compare with the run and the binaries
ENVIRONMENT_COMPARED = ("float32_matmul_precision", "torch_version", "nvrtc_version", "compute_capability",
                        "l2_cache_bytes")
#: the keys of a check record the engine writes for an output of the reference's shape
#: (harness.checks.compare; :class:`kbrepro.model.compare_records.FullCompare`)
CHECK_KEYS = ("element_count", "bit_identical_count", "official", "legacy", "equal_nan_stress", "max_abs_error",
              "max_abs_reference", "nonfinite", "discriminating", "null_candidate_passes")


def _measured(b: Bundle) -> bool:
    return b.records.bundle is not None and b.records.bundle.source == "measured"


def recorded_evidence(b: Bundle, t: Tier) -> None:
    """Tier 3: what a measured run always records, present and well formed (module docstring)."""
    r = b.records
    for i, blk in enumerate(r.timings.blocks if r.timings is not None else ()):
        if blk.skipped is not None and blk.rounds:
            t.fail(TIMINGS, f"block {safe_text(blk.id)}: marked skipped ({safe_text(blk.skipped, 80)}) yet holds "
                   f"{len(blk.rounds)} rounds", path=f"$.blocks[{i}].skipped")
    if not _measured(b):
        return
    for i, v in enumerate(r.compile.variants if r.compile is not None else ()):
        where = f"$.variants[{i}]"
        if v.arch is None or v.nvrtc_version is None or len(v.nvrtc_version) != 2:
            t.fail(COMPILE, f"{safe_text(v.name)}: a measured run records the architecture and the NVRTC release "
                   "(major, minor) it compiled for; without them its options and binaries cannot be checked",
                   path=where, found={"arch": v.arch, "nvrtc_version": v.nvrtc_version})
        if v.effective_options is None or v.requested_options is None:
            t.fail(COMPILE, f"{safe_text(v.name)}: a measured run records the options requested and the options "
                   "NVRTC received; without them the FTZ mode in effect cannot be derived", path=where)
        for key, ref in (("cubin", v.cubin), ("cubin_complete", v.cubin_complete), ("ptx", v.ptx)):
            if ref is not None and ref.bytes is None:
                t.fail(COMPILE, f"{safe_text(v.name)}: the {key}'s size is not recorded", path=f"{where}.{key}.bytes")
        if v.cubin is not None and v.cubin_complete is not None and v.cubin_complete.loaded_is_prefix is None:
            t.fail(COMPILE, f"{safe_text(v.name)}: whether the loaded cubin is the complete one's prefix is not "
                   "recorded", path=f"{where}.cubin_complete.loaded_is_prefix")
        _witness_evidence(b, t, i, v)
    cor = r.correctness
    if cor is not None:
        pdir = cor.predicate_direction
        if pdir is None or number(pdir.reference) is None or number(pdir.candidate) is None \
                or "float32" not in pdir.results or not isinstance(pdir.torch_version, str):
            t.fail(CORRECTNESS, "a measured run records the predicate-direction witness: two numbers, what "
                   "allclose gives for them in each argument order (float32 at least) and the torch it ran on",
                   path="$.predicate_direction")
        for task, td in sorted(cor.tasks.items()):
            ti = td.get("timing_input") if isinstance(td, Mapping) else None
            if isinstance(ti, Mapping) and ti and type(ti.get("seed")) is not int:
                t.fail(CORRECTNESS, f"task {safe_text(task)}: the timing input's seed is not recorded: its draw "
                       "cannot be held against the study's", path=f'$.tasks["{safe_text(task)}"].timing_input.seed')
        for j, c in enumerate(cor.full_program):
            if c.case.shape is None:
                t.fail(CORRECTNESS, f"full-program case {j}: its input shape is not recorded",
                       path=f"$.full_program[{j}].case.shape")
    env = r.environment
    if env is not None:
        for name in ENVIRONMENT_COMPARED:
            if name not in env.fields:
                t.fail(ENVIRONMENT, f"the fingerprint field {name}, which the checks compare with the run, is "
                       "missing (a field the product could not read is recorded null, with its reason)",
                       path=f"$.fields.{name}")
    if env is not None:
        for p in gpu_problems("$.fields", env.value("gpu_name"), env.value("compute_capability"),
                              env.value("l2_cache_bytes")):
            t.fail(ENVIRONMENT, p.message, path=p.path, expected=p.expected, found=p.found)
    cc = r.run.compile_cache if r.run is not None else None
    if not isinstance(cc, Mapping) or not isinstance(cc.get("CUDA_CACHE_DISABLE"), str) or "set_by" not in cc:
        t.fail("data/results/run.json", "a measured run records how the NVRTC compile cache was kept off "
               "(CUDA_CACHE_DISABLE and what set it): without it the cache's FTZ trap cannot be ruled out",
               path="$.compile_cache", found=cc)
    _block_evidence(b, t)
    _cold_blocks(b, t)
    for name in sorted(n for n in b.documents if n not in ("claims", "run", "environment", "compile", "timings")):
        for path, c in checks_of(b.documents.get(name)):
            missing = [k for k in CHECK_KEYS if k not in c]
            if c.get("shape_match") is not False and missing:
                t.fail(f"data/results/{name}.json", "a check record lacks " + ", ".join(missing) + ", which the "
                       "engine writes for every output it compares: its arithmetic cannot be derived again",
                       path=path)
            elif c.get("shape_match") is not False and _null_statistics(c):
                t.fail(f"data/results/{name}.json", "a check record holds no value for " +
                       ", ".join(_null_statistics(c)) + ", which the engine derives for every output it compares: "
                       "its verdict cannot be derived again", path=path)


def _null_statistics(c: Mapping) -> list[str]:
    """The statistics of a compared output's check record (harness.checks.compare) that are not
    of their type: counts int, verdicts bool, worst ratios numbers; the largest |error| may be
    null only where every candidate or every reference element is not finite, the largest
    |reference| only where every reference element is not."""
    def is_int(v):
        return type(v) is int and v >= 0
    bad = [k for k in ("element_count", "bit_identical_count") if not is_int(c.get(k))]
    for k in ("official", "legacy", "equal_nan_stress"):
        sub = c.get(k) if isinstance(c.get(k), Mapping) else {}
        bad += [f"{k}.pass"] if type(sub.get("pass")) is not bool else []
        bad += [f"{k}.failing_count"] if not is_int(sub.get("failing_count")) else []
        if k != "equal_nan_stress" and number(sub.get("worst_ratio")) is None:
            bad.append(f"{k}.worst_ratio")
    nf = c.get("nonfinite") if isinstance(c.get("nonfinite"), Mapping) else {}
    if not nf or not all(is_int(v) for v in nf.values()):
        bad.append("nonfinite")
    # null only where no finite value is left: every candidate or every reference element not finite
    n = c.get("element_count") if is_int(c.get("element_count")) else 0
    cand = sum(v for k, v in nf.items() if k.startswith("candidate_") and is_int(v))
    ref = sum(v for k, v in nf.items() if k.startswith("reference_") and is_int(v))
    if number(c.get("max_abs_error")) is None and not (n and (cand >= n or ref >= n)):
        bad.append("max_abs_error")
    if number(c.get("max_abs_reference")) is None and not (n and ref >= n):
        bad.append("max_abs_reference")
    bad += [k for k in ("discriminating", "null_candidate_passes") if type(c.get(k)) is not bool]
    return bad


#: block kinds whose rounds time a task's arms at a shape (the engine records the shape), and
#: those of them whose tail scope records the bytes it moves
SHAPED_KINDS = ("study", "extra_shape", "cold_l2", "ftz_cost", "gemm")
BYTES_KINDS = ("study", "cold_l2")


def _block_evidence(b: Bundle, t: Tier) -> None:
    """Every timed block of a measured run records its shape (a task's block), the bytes a
    tail moves (a study or cold-L2 tail) and, where NVML answered at the run's start
    (environment.json clocks_start), each round's clocks: the throttling check reads them."""
    r = b.records
    env = r.environment
    # NVML answered if any field it gives holds a value (clocks, driver, power limit...): a null
    # clocks_start beside them does not excuse rounds without clocks
    nvml = env is not None and any(f.value is not None and "NVML" in str(f.source or "") for f in env.fields.values())
    raw = (b.documents.get("timings") or {}).get("blocks") or []
    for i, blk in enumerate(r.timings.blocks if r.timings is not None else ()):
        if blk.skipped is not None:
            continue
        bid = safe_text(blk.id)
        if blk.kind in SHAPED_KINDS and blk.shape is None:
            t.fail(TIMINGS, f"block {bid}: its shape is not recorded", path=f"$.blocks[{i}].shape")
        nbytes = raw[i].get("bytes_moved") if i < len(raw) and isinstance(raw[i], Mapping) else None
        if blk.kind in BYTES_KINDS and blk.scope == "tail" and not (type(nbytes) is int and nbytes > 0):
            t.fail(TIMINGS, f"block {bid}: the bytes the tail moves are not recorded (a positive integer)",
                   path=f"$.blocks[{i}].bytes_moved", found=nbytes)
        if nvml and any(rnd.clocks is None for rnd in blk.rounds):
            t.fail(TIMINGS, f"block {bid}: NVML answered in this run, yet a round records no clocks: "
                   "throttling cannot be ruled out", path=f"$.blocks[{i}].rounds")


def _witness_evidence(b: Bundle, t: Tier, i: int, v) -> None:
    """A compiled variant's witness verdict in the compile record is witness.json's, whole."""
    wit = b.records.witness
    doc_w = wit.verdicts.get(v.name) if wit is not None else None
    if doc_w is None:
        return
    rec_w = v.ftz_evidence.witness
    if rec_w is None:
        t.fail(COMPILE, f"{safe_text(v.name)}: witness.json judged this binary; its compile record's FTZ "
               "evidence leaves the witness out", path=f"$.variants[{i}].ftz_evidence.witness")
        return
    want = {"task": wit.task, "discriminates": wit.discriminates}
    got = {"task": rec_w.task, "discriminates": rec_w.discriminates}
    if got != want or any(type(a) is not type(c) for a, c in zip(got.values(), want.values())):
        t.fail(COMPILE, f"{safe_text(v.name)}: the compile record's witness names another task or "
               "discrimination than witness.json", path=f"$.variants[{i}].ftz_evidence.witness", expected=want,
               found=got)


def _cold_blocks(b: Bundle, t: Tier) -> None:
    """A cold-L2 block is timed cold (the block's regime and its protocol's) after a flush of
    the size the engine's rule gives for the recorded L2 (:func:`kbrepro.harness.extras.flush_bytes`),
    the one timings.json's extras record; a block's regime is its protocol's."""
    r = b.records
    if r.timings is None:
        return
    l2 = r.environment.value("l2_cache_bytes") if r.environment is not None else None
    want = extras.flush_bytes(l2) if type(l2) is int and l2 > 0 else None
    recorded = (r.timings.extras or {}).get("l2_flush_bytes")
    for i, blk in enumerate(r.timings.blocks):
        if blk.l2 is not None and blk.protocol.l2 is not None and blk.l2 != blk.protocol.l2:
            t.fail(TIMINGS, f"block {safe_text(blk.id)}: timed with a {blk.l2} L2, its protocol says {blk.protocol.l2}",
                   path=f"$.blocks[{i}].l2", expected=blk.protocol.l2, found=blk.l2)
        if blk.kind != "cold_l2":
            continue
        if blk.l2 != "cold" or blk.protocol.l2 != "cold":
            t.fail(TIMINGS, f"block {safe_text(blk.id)}: a cold-L2 block not timed cold", path=f"$.blocks[{i}].l2",
                   expected="cold", found=[blk.l2, blk.protocol.l2])
        if want is None:  # the evidence the flush size follows from is not there: the check fails, never skips
            t.fail(ENVIRONMENT, f"block {safe_text(blk.id)}: a cold-L2 block, and the L2 size its flush follows "
                   "from is not recorded", path="$.fields.l2_cache_bytes.value", found=l2)
        elif blk.flush_bytes != want or blk.flush_bytes != recorded:
            t.fail(TIMINGS, f"block {safe_text(blk.id)}: the flush before each invocation is not the engine's "
                   "(2 x the L2 environment.json records, as timings.json's extras say)",
                   path=f"$.blocks[{i}].flush_bytes", expected=want if want is not None else recorded,
                   found=blk.flush_bytes)


def listings_again(b: Bundle, t: Tier) -> None:
    """Tier 4: the FTZ verdicts and counts recorded from the bundled SASS and PTX listings are
    the ones this verifier counts (:func:`kbrepro.kernels.compile.sass_ftz_counts`,
    :func:`~kbrepro.kernels.compile.ptx_ftz_counts`); every value of the witness's CPU
    references is the float32 its bits give; a flush the machine did not support changes no bit."""
    r, measured = b.records, _measured(b)
    for i, v in enumerate(r.compile.variants if r.compile is not None else ()):
        ev = v.ftz_evidence
        for kind, ref, count, says in (("sass", v.sass, lambda d: kc.sass_ftz_counts(d.decode("utf-8", "replace")),
                                        kc.sass_says_ftz), ("ptx", v.ptx, kc.ptx_ftz_counts, kc.ptx_says_ftz)):
            rec = getattr(ev, kind)
            data = b.files.get(f"data/{ref.file}") if ref is not None else None
            if rec is None or data is None:
                continue
            counts = count(data)
            want = {**counts, "says_ftz": says(counts)}
            bad = sorted(k for k in want if (k in rec and (rec[k] != want[k] or type(rec[k]) is not type(want[k])))
                         or (measured and k not in rec))
            if bad:
                t.fail(COMPILE, f"{safe_text(v.name)}: the recorded {kind.upper()} FTZ evidence is not what the "
                       f"bundled listing gives ({', '.join(bad)})", path=f"$.variants[{i}].ftz_evidence.{kind}",
                       expected={k: want[k] for k in bad}, found={k: rec[k] for k in bad})
    wit = r.witness
    if wit is None:
        return
    for side in ("keep", "flush"):
        for j, rec in enumerate(getattr(wit.reference_cpu, side)):
            if not _value_is_bits(rec.value, rec.bits):
                t.fail(WITNESS, f"CPU reference ({side}) value {rec.value!r} is not the float32 with bits "
                       f"{safe_text(rec.bits)}", path=f"$.reference_cpu.{side}[{j}]", expected=f32_bits(rec.value),
                       found=rec.bits)
    keep, flush = wit.reference_cpu.keep, wit.reference_cpu.flush
    if wit.reference_cpu.flush_supported is False and [x.bits for x in keep] != [x.bits for x in flush]:
        t.fail(WITNESS, "the CPU could not flush subnormals (flush_supported false), yet its flushed reference "
               "differs from the kept one", path="$.reference_cpu")


def _value_is_bits(x: float, bits: str) -> bool:
    """Whether the float ``x`` is the float32 whose bits are ``bits`` (``0x`` and 8 hex digits;
    any NaN payload for a NaN)."""
    if math.isnan(x):
        return bool(re.fullmatch(r"0x[0-9a-f]{8}", bits)) and (int(bits, 16) & 0x7F800000) == 0x7F800000 \
            and (int(bits, 16) & 0x007FFFFF) != 0
    try:
        return f32_bits(x) == bits and struct.unpack("<f", struct.pack("<f", x))[0] == x
    except (OverflowError, struct.error):
        return False


__all__ = ["recorded_evidence", "listings_again", "ENVIRONMENT_COMPARED", "CHECK_KEYS"]
