"""Completeness and derivation rules over a candidate run's typed records: fail closed.

:mod:`kbrepro.model.candidates` decides that each field has its type and range; this module
decides that the records are *complete* for the kind of run they describe and *agree* with one
another and with what the verifier derives from the raw data with its own code:

* the configuration is the profile's protocol, the stages and the failure name the same stop,
  and the cases are exactly the ones a checking pass of that protocol records up to that stop;
* every case's inputs have the dtypes and shapes the pinned task gives at the run's sizes
  (:mod:`kbrepro.model.task_inputs`), and its summary fields agree with its raw ones
  (``reference_range`` with ``max_abs_reference`` and ``discriminating``);
* a GPU run holds a profiled call, every baseline, block, arm, round, per-call and spot-check
  record its protocol writes; the arm order of every round is the seeded shuffle; the
  invocations per request follow the calibration rule; the roofline's bytes, time and
  bandwidth are the ones derived from the shapes, the warm block and the raw copy block;
* a custom kernel that a passing ``custom_kernel_ran`` names is defined by a bundled binary.

Each rule returns :class:`~kbrepro.model.problems.Problem` records (codes ``record.*``); the
verifier fails the documents tier on any of them, the packer refuses to pack. "Cannot decide"
is left to the named checks, only where the run kind says why (a CPU run has no timing).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Iterator, Mapping, Optional, Sequence

from kbrepro.model import problems as P
from kbrepro.model import protocol
from kbrepro.model.candidates import CandidateRecord, CandidatesDoc, Case
from kbrepro.model.provenance_rules import (binaries_with_sass, binary_problems, build_problems, copy_problems,  # noqa: F401
                                            defines,
                                            in_binary, kernel_base_name, sass_functions)
from kbrepro.model.timing_rules import (COPY_PEAK_SLACK, _close, _p, _specs, block_problems, copy_block_problems,
                                        derived_gbps, gpu_l2_bytes, gpu_peak_gbps, gpu_problems)
from kbrepro.model.problems import Problem
from kbrepro.model.sizes import SizeValue
from kbrepro.model.task_inputs import Undecidable, parse_digest, size_globals

#: relative difference under which a stated float equals the derived one (the engine computes
#: it with the same rule; only the last bits of a float may differ)
FLOAT_REL = 1e-9

#: the task paths a candidate may solve, packer and verifier alike: a task of a level, or one of
#: KernelBench's example models (never a candidate or test file of the pin)
TASK_PATH = re.compile(r"^(KernelBench/level\d{1,2}/\d{1,4}_[A-Za-z0-9_]{1,120}\.py|"
                       r"src/kernelbench/prompts/model_ex_[A-Za-z0-9_]{1,60}\.py)$")


@dataclass(frozen=True)
class Evidence:
    """What the rules read beside a record: the pinned task's source (None where the verifier
    already failed it), the payload (bundle path under ``data/`` -> bytes: SASS listings and
    binaries), and what environment.json states of the machine (its L2 size, GPU name and the
    precision flags the run started with, named as :class:`kbrepro.model.scalars.Flags` names
    them: held against the records, never used in their place)."""

    task_src: Optional[bytes]
    files: Mapping[str, bytes]
    l2_cache_bytes: Optional[int]
    gpu_name: Optional[str]
    flags: Mapping[str, object] = field(default_factory=dict)


def case_gpu(doc: CandidatesDoc, rec: CandidateRecord, gpu_name: Optional[str]) -> Optional[str]:
    """The GPU a record ran on: for a case of a sharded run, the one its ``ran_on`` names (the
    environment record is the first finished case's, and the cases of a plan may run on other
    GPUs: bundle/shard.py), else ``gpu_name``, the environment's."""
    ran = next((c.ran_on for c in doc.cases or () if rec.case is not None and c.id == rec.case.id), None)
    return ran.gpu_name if ran is not None and ran.gpu_name else gpu_name


def document_problems(doc: CandidatesDoc, gpu_name: Optional[str] = None, compute_capability: Optional[str] = None,
                      l2_cache_bytes: Optional[int] = None, archs: Sequence[str] = (),
                      torch_version: Optional[str] = None) -> list[Problem]:
    """Rules over the whole document: the predicate is the profile's; the run ends after it
    starts; the run's copy bandwidth is derived from its raw block (a GPU run always measures
    it; a CPU run never) and is one the GPU the environment names can reach
    (:func:`gpu_peak_gbps`, by compute capability for a GPU not in its table); a GPU run's GPU,
    compute capability and L2 as :func:`gpu_problems` holds them (``archs``: the compute
    capabilities the bundled SASS listings name); a sharded run's cases ran on the document's
    device, one of them on environment.json's GPU; the candidates' processes ran
    environment.json's torch (one of them, in a sharded run)."""
    out: list[Problem] = []
    if doc.device == "cuda":
        out += [replace(p, file="data/results/environment.json")
                for p in gpu_problems("$.fields", gpu_name, compute_capability, l2_cache_bytes, archs)]
    ran = [c.ran_on.gpu_name for c in doc.cases or () if c.ran_on is not None and c.ran_on.gpu_name]
    if doc.device == "cuda" and ran and gpu_name not in ran:  # environment.json is the first finished case's
        out.append(_p(P.CONTRADICTS, "$.cases", "environment.json is the first finished case's, yet no case ran on "
                      "the GPU it names", gpu_name, sorted(set(ran))[:4]))
    torches = [r.observations.build.torch for r in doc.candidates if r.observations.build is not None
               and r.observations.build.torch]
    if torch_version is not None and torches and (torch_version not in torches if doc.cases else
                                                  any(x != torch_version for x in torches)):
        out.append(_p(P.CONTRADICTS, "$.candidates", "the candidates' processes ran another torch than "
                      "environment.json records (in a sharded run: no case ran the environment's)", torch_version,
                      sorted(set(torches))[:4]))
    if doc.finished_utc < doc.started_utc:
        out.append(_p(P.CONTRADICTS, "$.finished_utc", "is before started_utc"))
    for j, c in enumerate(doc.cases or ()):
        if c.ran_on is not None and c.ran_on.device != doc.device:
            out.append(_p(P.CONTRADICTS, f"$.cases[{j}].ran_on.device", "is not the run's device", doc.device,
                          c.ran_on.device))
    blocks = [("$.bandwidth.block", doc.bandwidth.block, gpu_name)] + [
        (f"$.candidates[{i}].case.bandwidth_block", r.case.bandwidth_block, case_gpu(doc, r, gpu_name))
        for i, r in enumerate(doc.candidates) if r.case]
    for path, blk, gpu in blocks:
        peak = gpu_peak_gbps(gpu, compute_capability if gpu == gpu_name else None) * COPY_PEAK_SLACK
        g = derived_gbps(blk) if blk is not None else None
        if g is not None and g > peak:
            out.append(_p(P.CONTRADICTS, path, f"gives a copy bandwidth of {g:.0f} GB/s, more than the "
                          f"{gpu or 'unnamed GPU'} can move ({peak:.0f} GB/s with {COPY_PEAK_SLACK - 1:.0%} slack)"))
    base = protocol.PROFILES[doc.profile]
    if doc.predicate.atol != base.atol or doc.predicate.rtol != base.rtol:
        out.append(_p(P.CONTRADICTS, "$.predicate", f"atol/rtol are not the {doc.profile} profile's "
                      f"{base.atol:g}/{base.rtol:g}"))
    bw = doc.bandwidth
    if doc.device == "cuda":
        if bw.gbps is None or bw.block is None:
            out.append(_p(P.INCOMPLETE, "$.bandwidth", "a GPU run measures the copy bandwidth: the raw copy block and "
                          "its GB/s are missing"))
        else:
            out += copy_block_problems(bw.block, "$.bandwidth.block")
            want = derived_gbps(bw.block)
            if want is not None and not _close(bw.gbps, want):
                out.append(_p(P.DERIVED, "$.bandwidth.gbps", "is not the bandwidth of its raw copy block", want, bw.gbps))
    elif bw.gbps is not None or bw.block is not None:
        out.append(_p(P.CONTRADICTS, "$.bandwidth", "a CPU run measures no copy bandwidth"))
    return out


def _variant_sizes(rec: CandidateRecord, case: Case, shapes: Sequence[Mapping[str, SizeValue]]) -> Optional[dict]:
    sizes = dict(rec.config.sizes)
    if case.kind == "extra_shape":
        m = re.fullmatch(r"shape(\d+)", case.id)
        if not m or int(m.group(1)) >= len(shapes):
            return None
        sizes.update(shapes[int(m.group(1))])
    return sizes


def _stage_problems(rec: CandidateRecord, at: str, cuda: bool) -> Iterator[Problem]:
    names = [s.name for s in rec.stages]
    order = [s for s in protocol.STAGES if cuda or s != "timing"]
    if names != order[:len(names)]:
        yield _p(P.CONTRADICTS, f"{at}.stages", f"are not the run's stages in order ({', '.join(order)})",
                 order, names)
        return
    failure = rec.observations.failure
    if failure is None and names != order:
        yield _p(P.INCOMPLETE, f"{at}.stages", "a run without a failure ran every stage", order, names)
    if failure is not None:
        if not names or not failure.startswith(f"{names[-1]}: "):
            yield _p(P.CONTRADICTS, f"{at}.observations.failure", "does not name the stage the run stopped in "
                     f"({names[-1] if names else 'none ran'})")


#: slack of the wall-clock inequalities (s): clocks are read at different points of one request
_CLOCK_SLACK_S = 1e-3


def _clock_problems(rec: CandidateRecord, at: str) -> Iterator[Problem]:
    """The parent's wall clocks nest: a stage lasts at least as long as the requests it made
    (the build's own clock, each case's ``host_ms``, each timed request's), and the whole run
    at least as long as its stages."""
    inner = {"build": rec.observations.build.host_s if rec.observations.build else 0.0,
             "checking pass": 0.0, "timing": 0.0, "weights and shapes": 0.0}
    stage_of = {"timing_input": "timing", "redrawn_weights": "weights and shapes"}
    for c in rec.observations.cases:
        st = stage_of.get(c.id, "weights and shapes" if c.kind == "extra_shape" else "checking pass")
        inner[st] += c.host_ms / 1e3
    inner["timing"] += sum(r.host_ms.get("candidate", 0.0) + (r.checksum_ms or 0.0) for b in rec.blocks
                           for r in b.rounds) / 1e3
    ck, pc = rec.timing.clock, rec.timing.per_call
    if ck is not None:  # protocol 2: the clock's requests and the per-call times are in the stage too
        inner["timing"] += (sum(ck.host1_ms) + sum(ck.host2_ms)) / 1e3
    if pc is not None:
        inner["timing"] += sum(t for r in (*pc.fresh, *pc.eager_fresh, *pc.repeat) for t in r.times_ms) / 1e3
    for j, s in enumerate(rec.stages):
        if s.seconds + _CLOCK_SLACK_S < inner[s.name]:
            yield _p(P.CONTRADICTS, f"{at}.stages[{j}].seconds", f"is shorter than the {inner[s.name]:.3f} s its "
                     "requests took by the parent's clock", None, s.seconds)
    total = sum(s.seconds for s in rec.stages)
    if rec.seconds + _CLOCK_SLACK_S < total:
        yield _p(P.CONTRADICTS, f"{at}.seconds", f"is shorter than its stages ({total:.3f} s)", None, rec.seconds)


def _case_problems(rec: CandidateRecord, at: str, cuda: bool, shapes: list) -> Iterator[Problem]:
    cfg = protocol.PROFILES[rec.config.profile]
    want = protocol.expected_cases(cfg, len(shapes), cuda)
    got = [(c.id, c.kind) for c in rec.observations.cases]
    names = [s.name for s in rec.stages]
    failure = rec.observations.failure
    # where the cases must have got to, given the stage that stopped: every case of the stages
    # that finished
    through = {"build": 0, "checking pass": want.index(("profiled", "profiled")) + 1}
    through["timing"] = through["checking pass"] + (1 if cuda else 0)
    done = [n for n in names if failure is None or not failure.startswith(f"{n}: ")]
    least = max([through.get(n, 0) for n in done] + [0]) if failure is not None else len(want)
    upto = {"build": 0, "checking pass": through["checking pass"], "timing": through["timing"],
            "weights and shapes": len(want)}
    most = upto.get(names[-1], len(want)) if failure is not None and names else len(want)
    if failure is None and got != want:
        yield _p(P.INCOMPLETE, f"{at}.observations.cases", f"are not the cases a complete checking pass of this "
                 f"profile records ({len(got)} recorded, {len(want)} expected)")
        return
    if failure is not None and (got != want[:len(got)] or not least <= len(got) <= most):
        yield _p(P.INCOMPLETE, f"{at}.observations.cases", f"are not the cases a checking pass records up to the "
                 f"stage it stopped in ({len(got)} recorded, {least} to {most} expected)")
        return
    ids = [c.id for c in rec.observations.cases]
    poison = [c for c in rec.observations.cases if c.kind == "poison"]
    shared = protocol.same_buffers_reference(cfg)  # a reference kept under a key that may be no case's id
    for j, c in enumerate(rec.observations.cases):
        others = set(ids) | ({shared} if "same_buffers" in ids[:j + 1] else set())
        if (c.set, c.model) != protocol.case_set_and_model(cfg, c.id):
            yield _p(P.CONTRADICTS, f"{at}.observations.cases[{j}]", "its input set and model are not the ones the "
                     "protocol calls for this case", list(protocol.case_set_and_model(cfg, c.id)), [c.set, c.model])
        if c.held_over is not None and c.held_over not in ids[:j]:
            yield _p(P.CONTRADICTS, f"{at}.observations.cases[{j}].held_over", "names no earlier case")
        if c.matches_other is not None and not set(c.matches_other) <= others - {c.id}:
            yield _p(P.CONTRADICTS, f"{at}.observations.cases[{j}].matches_other", "names a case that is not another case "
                     "(or the same-buffers case's reference)")
        if len(c.digests_before) != len(c.digests_parent) or len(c.digests_after) != len(c.digests_parent):
            yield _p(P.INCOMPLETE, f"{at}.observations.cases[{j}]", "its child and parent digests are not one per input")
    for i, c in enumerate(poison):
        if c.poison_byte is not None and c.poison_byte != cfg.poison_bytes[i]:
            yield _p(P.CONTRADICTS, f"{at}.observations.cases", f"poisoned case {c.id} names another byte than the "
                     "profile's", cfg.poison_bytes[i], c.poison_byte)


def _reference_facts(cm) -> Optional[tuple]:
    """What a full comparison says of its reference alone (the same for every output compared
    with that reference): element count, max |reference|, the reference's non-finite counts."""
    if not cm.shape_match:
        return None
    nf = cm.nonfinite
    return cm.element_count, cm.max_abs_reference, nf.reference_nan, nf.reference_posinf, nf.reference_neginf


def _flag_problems(cm, path: str, atol: float) -> Iterator[Problem]:
    """A full comparison's flags are functions of its reference: ``discriminating`` is whether
    max |reference| exceeds atol; ``null_candidate_passes`` whether every reference value is
    finite and within atol of zero (``torch.isclose(reference, 0)``, harness/checks.py)."""
    if not cm.shape_match:
        return
    nf = cm.nonfinite
    finite = nf.reference_nan + nf.reference_posinf + nf.reference_neginf == 0
    m = cm.max_abs_reference
    if cm.discriminating != (m is not None and m > atol):
        yield _p(P.CONTRADICTS, f"{path}.discriminating", "is not whether max |reference| exceeds atol")
    if cm.null_candidate_passes != (finite and (m is None or m <= atol)):
        yield _p(P.CONTRADICTS, f"{path}.null_candidate_passes", "is not whether every reference value is finite and "
                 "within atol of zero")


def _reference_key(cfg, case_id: str) -> str:
    """Which reference a case was compared with (harness/candidate.py): the first set's for
    its own case, the repeat, the poisoned and the profiled calls; the timing input's for
    the timing input and every baseline; its own for the others."""
    first = f"s{cfg.seeds[0]}/{cfg.distributions[0]}"
    if case_id == first or case_id in ("repeat", "profiled") or case_id.startswith("poison"):
        return first
    return "timing" if case_id == "timing_input" else case_id


def _summary_problems(rec: CandidateRecord, at: str, atol: float) -> Iterator[Problem]:
    """Summary fields against raw ones: a case's reference range against the largest
    |reference|; every comparison's flags against its reference (:func:`_flag_problems`); and
    every comparison with one reference (cases of one set, the baselines and the timing input)
    saying the same of it."""
    cfg = protocol.PROFILES[rec.config.profile]
    facts: dict = {}

    def same(key: str, cm, path: str) -> Iterator[Problem]:
        f = _reference_facts(cm)
        if f is None:
            return
        if key in facts and facts[key][0] != f:
            yield _p(P.CONTRADICTS, path, f"says other things of its reference than {facts[key][1]}, compared with the "
                     "same reference")
        facts.setdefault(key, (f, path))

    for j, c in enumerate(rec.observations.cases):
        cm = c.compare
        cp = f"{at}.observations.cases[{j}].compare"
        yield from _flag_problems(cm, cp, atol)
        single = (c.reference_count or 1) == 1 or cm.official.passed  # the record's compare is the first output's
        if single:
            yield from same(_reference_key(cfg, c.id), cm, cp)
        lo, hi = c.reference_range
        if single and cm.max_abs_reference is not None and lo is not None:
            peak = max(abs(lo), abs(hi))
            if not _close(peak, cm.max_abs_reference, 1e-12) and not (peak == cm.max_abs_reference == 0):
                yield _p(P.CONTRADICTS, f"{at}.observations.cases[{j}].reference_range",
                         "its largest |value| is not the comparison's max_abs_reference", cm.max_abs_reference, peak)
        if single and lo is None and cm.max_abs_reference is not None:
            yield _p(P.CONTRADICTS, f"{at}.observations.cases[{j}].reference_range",
                     "says the reference has no finite value, its comparison says it has")
        spec = parse_digest(c.output.digest) if c.output.digest else None
        if single and spec is not None and cm.shape_match and cm.element_count is not None:
            n = 1
            for d in spec.shape:
                n *= d
            if n != cm.element_count:
                yield _p(P.CONTRADICTS, f"{at}.observations.cases[{j}].output.digest",
                         "the output's shape does not hold the compared element count", cm.element_count, n)
    for name, b in rec.timing.baselines.items():
        if b.compare is not None:
            bp = f"{at}.timing.baselines.{name}.compare"
            yield from _flag_problems(b.compare, bp, atol)
            yield from same("timing", b.compare, bp)
    for j, sc in enumerate(rec.timing.per_call.spot_checks if rec.timing.per_call else ()):
        yield from _flag_problems(sc.compare, f"{at}.timing.per_call.spot_checks[{j}].compare", atol)


def _input_problems(rec: CandidateRecord, at: str, task_src: Optional[bytes], shapes: list,
                    cache: dict) -> Iterator[Problem]:
    if task_src is None:
        return
    for j, c in enumerate(rec.observations.cases):
        sizes = _variant_sizes(rec, c, shapes)
        if sizes is None:
            yield _p(P.CONTRADICTS, f"{at}.observations.cases[{j}].id", "names no extra shape of the run")
            continue
        try:
            specs = _specs(task_src, sizes, cache)
        except Undecidable as exc:
            yield _p(P.INCOMPLETE, f"{at}.task", f"the inputs of the task cannot be derived from its source ({exc}): "
                     "its recorded shapes cannot be checked")
            return
        want = [s.digest_prefix() if s else None for s in specs]
        got = [None if d is None else "|".join(d.split("|")[:2]) for d in c.digests_parent]
        if want != got:
            yield _p(P.DERIVED, f"{at}.observations.cases[{j}].digests_parent", "the recorded inputs are not the ones "
                     "the task gives at the run's sizes", want, got)


_UTC_SLACK_S = 5.0


def _utc_s(utc: str) -> int:
    """Seconds of a ``YYYY-MM-DDTHH:MM:SSZ`` stamp (the model's pattern) since 1970."""
    import calendar
    import time as _time

    return calendar.timegm(_time.strptime(utc, "%Y-%m-%dT%H:%M:%SZ"))


def record_problems(doc: CandidatesDoc, i: int, ev: Evidence, custom: Sequence[str],
                    custom_passed: Optional[bool]) -> list[Problem]:
    """Every rule of the module docstring for the record ``doc.candidates[i]``, with the
    :class:`Evidence` beside it; ``custom``: the custom kernels its profiled call launched, and
    ``custom_passed`` the derived verdict of ``custom_kernel_ran``."""
    rec = doc.candidates[i]
    at = f"$.candidates[{i}]"
    out: list[Problem] = []
    base = protocol.PROFILES[doc.profile]
    own = base.to_doc()
    cfg = rec.config
    for k, v in own.items():
        if k in protocol.USER_FIELDS or k in protocol.LIMIT_FIELDS:
            continue
        got = getattr(cfg, k)
        if (list(got) if isinstance(got, tuple) else got) != v:
            out.append(_p(P.CONTRADICTS, f"{at}.config.{k}", f"is not the {doc.profile} profile's", v, got))
    if out:
        return out
    cuda = doc.device == "cuda"
    task_src = ev.task_src
    pc = rec.timing.per_call
    if doc.schema_version < 2 and (rec.timing.clock is not None or (pc is not None and pc.eager_fresh)):
        out.append(_p(P.CONTRADICTS, f"{at}.timing", "a record of timing protocol 1 holds fields of protocol 2 (clock, "
                      "eager_fresh)"))
    out += _stage_problems(rec, at, cuda)
    before = rec.observations.build.flags_before if rec.observations.build is not None else None
    if before is not None and any(v is None for v in ev.flags.values()):
        out.append(_p(P.INCOMPLETE, f"{at}.observations.build.flags_before", "the precision flags the run started "
                      "with are not all recorded (environment.json): the candidate's cannot be held against them",
                      None, sorted(k for k, v in ev.flags.items() if v is None)))
    elif before is not None:
        differ = sorted(k for k, v in ev.flags.items() if getattr(before, k, v) != v)
        if differ:  # the candidate's process starts with the run's flags: different ones were set by it
            out.append(_p(P.CONTRADICTS, f"{at}.observations.build.flags_before", "are not the precision flags "
                          "the run started with (environment.json): " + ", ".join(differ),
                          {k: ev.flags[k] for k in differ}, {k: getattr(before, k) for k in differ}))
    span = (_utc_s(doc.finished_utc) - _utc_s(doc.started_utc)) if doc.finished_utc >= doc.started_utc else 0
    if rec.seconds > span + _UTC_SLACK_S:
        out.append(_p(P.CONTRADICTS, f"{at}.seconds", f"is longer than the run ({span} s from started_utc to "
                      "finished_utc)", None, rec.seconds))
    devices = {c.reference_device for c in rec.observations.cases}
    if len(devices) > 1 or any(not d.startswith(doc.device) for d in devices):
        out.append(_p(P.CONTRADICTS, f"{at}.observations.cases", "the references are not all on the run's device",
                      doc.device, sorted(devices)))
    glob = size_globals(task_src) if task_src is not None else None
    shapes = [dict(s) for s in cfg.extra_shapes]
    if glob is not None:
        bad = protocol.shape_problems(glob, dict(cfg.sizes), shapes)
        if bad and bad[0][0] is None:
            out.append(_p(P.CONTRADICTS, f"{at}.config.sizes", bad[0][1]))
            return out
        run_sizes = {**glob, **dict(cfg.sizes)}
        if cfg.no_extra_shape and (shapes or not protocol.default_extra_shapes(run_sizes)
                                   or not cfg.no_extra_shape.strip() or doc.schema_version < 2):
            out.append(_p(P.CONTRADICTS, f"{at}.config.no_extra_shape", "leaves out an extra shape where the user gave "
                          "one, the task has none to leave out, no reason is given, or the record's format predates "
                          "it", None, cfg.no_extra_shape))
        shapes = protocol.checked_extra_shapes(shapes, cfg.no_extra_shape, run_sizes)
        for j, why in bad:
            out.append(_p(P.CONTRADICTS, f"{at}.config.extra_shapes[{j}]", why, None, shapes[j]))
    obs = rec.observations
    if obs.extra_shapes is not None and [dict(s) for s in obs.extra_shapes] != shapes:
        out.append(_p(P.DERIVED, f"{at}.observations.extra_shapes", "are not the extra shapes the configuration and the "
                      "task give", shapes, [dict(s) for s in obs.extra_shapes]))
    if obs.failure is None and obs.extra_shapes is None:
        out.append(_p(P.INCOMPLETE, f"{at}.observations.extra_shapes", "a complete run records its extra shapes"))
    out += _case_problems(rec, at, cuda, shapes)
    if out:
        return out
    if rec.compile_seconds != (obs.build.host_s if obs.build else None):
        out.append(_p(P.DERIVED, f"{at}.compile_seconds", "is not the build's own time (observations.build.host_s)"))
    cache: dict = {}
    out += _clock_problems(rec, at)
    out += _summary_problems(rec, at, doc.predicate.atol)
    out += _input_problems(rec, at, task_src, shapes, cache)
    out += binary_problems(rec, at, ev.files)
    out += copy_problems(rec, at)
    out += build_problems(rec, at, ev.files)
    built = sorted({"load_inline" for _ in rec.provenance.builds} | {
        "triton" for f in rec.provenance.files if f.path.startswith("triton/") and f.path.endswith(".cubin")})
    if list(rec.provenance.built_with) != built:
        out.append(_p(P.DERIVED, f"{at}.provenance.built_with", "is not what its provenance files show", built,
                      list(rec.provenance.built_with)))
    if obs.failure is None:
        if obs.build is None or not obs.build.flags_before or not obs.build.flags_after_build or obs.build.torch is None:
            out.append(_p(P.INCOMPLETE, f"{at}.observations.build", "a build records the precision flags before the "
                          "import and after the build, and the child's torch"))
    if not cuda:
        if rec.blocks or rec.timing.per_call is not None or rec.timing.roofline is not None or rec.timing.baselines \
                or obs.profile is not None or rec.timing.clock is not None:
            out.append(_p(P.CONTRADICTS, f"{at}.timing", "a CPU run has no timing and no profiled call"))
        return out
    if custom_passed and not any(defines(fns, n) and any(in_binary(f, data) for f in fns if defines([f], n))
                                 for fns, data in binaries_with_sass(rec, ev.files) for n in custom):
        out.append(_p(P.CONTRADICTS, f"{at}.observations.profile.kernels", "custom_kernel_ran passes on a kernel no "
                      "bundled binary defines", None, list(custom)[:3]))
    timed = obs.failure is None or any(s.name == "weights and shapes" for s in rec.stages)
    if not timed:
        return out
    if rec.case is not None:
        blk = rec.case.bandwidth_block
        gbps = derived_gbps(blk) if blk is not None else None
        if gbps is None or rec.case.bandwidth_gbps is None or not _close(gbps, rec.case.bandwidth_gbps):
            out.append(_p(P.DERIVED, f"{at}.case.bandwidth_gbps", "is not the bandwidth of the case's own raw copy block",
                          gbps, rec.case.bandwidth_gbps))
    else:
        gbps = derived_gbps(doc.bandwidth.block) if doc.bandwidth.block is not None else None
    # a case that ran on another GPU than the environment's: that GPU's L2 from the table (None
    # where not known: its cold block's flush cannot be derived, and fails)
    gpu = case_gpu(doc, rec, ev.gpu_name)
    l2 = ev.l2_cache_bytes if gpu == ev.gpu_name else gpu_l2_bytes(gpu)
    out += block_problems(rec, at, gbps, task_src, cache, l2, doc.schema_version)
    return out


__all__ = ["TASK_PATH", "Evidence", "case_gpu", "gpu_peak_gbps", "document_problems", "record_problems", "derived_gbps", "sass_functions", "defines", "kernel_base_name"]
