"""Tier 3 checks of a study bundle's documents against the study that judges them
(:func:`study_problems`): identity and stages, the correctness predicate (evaluated again on
the recorded numbers), variants and their compile options, the cases and timing blocks the
study's definition implies, and the FTZ witness.
"""
from __future__ import annotations

import math
import re
from typing import Any, Mapping

from kbrepro.model.documents import Records
from kbrepro.model.problems import Problem
from kbrepro.model.study_rules import stage_plan
from kbrepro.bundle import derived_facts
from kbrepro.bundle import evidence as pd
from kbrepro.harness import checks
from kbrepro.harness.records import BlockKey
from kbrepro.harness.run_build import witness_flushes
from kbrepro.harness.study import task_key, values
from kbrepro.harness.timing import AdaptiveRule, TimingProtocol
from kbrepro.kernels import compile as kc
from kbrepro.bundle.crosscheck.common import CUT, DOC_FILE, expected_ftz, f32_bits, ftz_from_options, norm, same

_cut, _p, _d, _num = pd.cut, pd.problem, pd.as_dict, pd.number


def study_problems(study, documents: Mapping[str, dict], records: Records, binding=None) -> list[Problem]:
    """Tier 3: the documents against the verifier's OWN resolved study.

    ``study``: a :class:`kbrepro.harness.study.StudyConfig` the verifier loaded from its own
    study folder (``studies/<name>``) with the profile the run recorded (never the bundle's
    copy); ``records``: the typed records of the documents that passed their schemas
    (:mod:`kbrepro.model.documents`), which the checks read; ``documents``: the same documents
    parsed (name -> JSON), for the study's own documents and the study-shaped parts of
    correctness.json, which have no record. Returns Problems
    (:class:`kbrepro.model.problems.Problem`); raises nothing.

    Checks: study name and profile; (measured) the resolved definition run.json recorded
    equals the verifier's, key by key; the stage list; selftest.json present exactly when
    the study's ``extras.self_test`` says so; one KernelBench file per task the study uses
    task in run.json's list; precision modes (run.json, environment.json); predicate
    atol/rtol, names and definitions (argument order included) equal the verifier's own
    ``harness.checks.PREDICATES``, and the predicate-direction witness gives the verdicts
    the verifier computes; compile variants: names, routes, requested options, the FTZ mode
    of :func:`expected_ftz` (``expected_ftz`` and ``ftz_evidence.expected``) and, for the
    NVRTC route, the exact option list ``kernels.compile.nvrtc_options`` gives, for the CuPy
    route the requested options in order and an effective FTZ mode equal to the expected
    one; the exact correctness case set (tasks x seeds x distributions in the run's order,
    with the variant set of every check), task controls (names, boundary shape and
    criterion, timing-input seed, graph-mutation parameters, TorchScript, Inductor), extra
    shapes, tiny-value controls (shape, bias, criterion, domain, cross pairs); timing
    blocks: the exact set of block ids the study gives, each block's protocol (mode,
    warmups, rounds unless adaptive, invocations per pair, order seed, adaptive rule, L2
    regime) equal to the verifier's, FTZ-cost arms; the witness task and inputs (as
    float32 bits) and its output set; then the binding's own checks of its documents, and
    the copy and floor blocks the study's extras make the engine write
    (:func:`bundle.derived_facts.study_problems`).

    Imported results are not held to what an import cannot have: the resolved definition,
    the stage list, the KernelBench file list, the witness, per-case variant sets (the
    post's scripts ran subsets), block ids and arms; their variants must be study variants
    with the study's route and FTZ mode, their case sets must be the study's, and every
    timing block's protocol must be the study's for its kind.
    """
    out: list[Problem] = []
    imported = records.run is not None and records.run.status == "imported"
    out += _study_identity(study, documents, records, imported, binding)
    out += _study_predicate(study, records)
    out += _study_variants(study, records, imported)
    out += _study_cases(study, records, imported, binding)
    out += _study_blocks(study, documents, records, imported, binding)
    out += _study_witness(study, records, imported)
    if binding is not None:
        try:
            out += pd.from_study(binding.crosscheck(study, documents, imported), "crosscheck")
        except Exception as exc:  # a study's checks must not crash the verifier
            out.append(_p(None, None, f"the study's own checks failed on these documents: {type(exc).__name__}: "
                          f"{_cut(str(exc))}"))
    return out


def _stages(study, binding=None) -> list[str]:
    """The stages harness/run.py runs for ``study``, in order (:func:`kbrepro.model.study_rules.stage_plan`,
    the engine's own plan)."""
    return stage_plan(study.doc, study.tasks, list(binding.stage_names(study)) if binding is not None else [])


def _study_identity(study, documents, records: Records, imported, binding=None) -> list[Problem]:
    out = []
    f = DOC_FILE["run"]
    run = records.run
    rs = run.study if run is not None else None
    name, profile = (rs.name, rs.profile) if rs is not None else (None, None)
    if name != study.name:
        out.append(_p(f, "$.study.name", "the run's study is not the verifier's", expected=study.name, found=name))
    if profile != study.profile:
        out.append(_p(f, "$.study.profile", "the run's profile differs from the one the verifier resolved",
                      expected=study.profile, found=profile))
    ex = study.doc.get("extras", {}) or {}
    if not imported:
        resolved = norm(rs.resolved) if rs is not None and rs.resolved is not None else {}
        own = norm(study.doc)
        for k in sorted(set(own) | set(resolved)):
            if not same(resolved.get(k), own.get(k)):
                out.append(_p(f, f"$.study.resolved.{k}", f"the run's resolved study differs from the verifier's "
                              f"in '{_cut(k)}'", expected=own.get(k), found=resolved.get(k)))
        names = [s.name for s in run.stages] if run is not None else []
        if run is not None and run.status == "complete" and binding is not None and names != _stages(study, binding):
            out.append(_p(f, "$.stages", "the stages are not the ones the study runs, in order",
                          expected=_stages(study, binding), found=names))
        has_witness = records.witness is not None
        if has_witness != bool(study.doc.get("witness")):
            out.append(_p(DOC_FILE["witness"], None, "witness.json " + ("is missing although the study has a "
                          "witness" if not has_witness else "is present although the study has no witness")))
        for dname in sorted((binding.documents if binding is not None else {})):
            if dname not in documents:
                out.append(_p(DOC_FILE[dname], None, f"{dname}.json, a document of the study, is missing"))
        has_self = records.selftest is not None
        if has_self != bool(ex.get("self_test")):
            out.append(_p(DOC_FILE["selftest"], None, "selftest.json " + ("is missing although the study runs the "
                          "self-tests" if not has_self else "is present although the study runs no self-tests")))
        kb = run.kernelbench if run is not None else None
        kb_files = list(kb.files or ()) if kb is not None else []
        keys = binding.kernelbench_tasks(study) if binding is not None else study.task_keys
        for lv, t in sorted(set(keys)):
            hits = [x for x in kb_files if re.match(rf"^KernelBench/level{lv}/{t}_[^/]+\.py$", x)]
            if len(hits) != 1:
                out.append(_p(f, "$.kernelbench.files", f"task {t}: run.json lists {len(hits)} KernelBench files "
                              "for it; the study uses exactly one", expected=1, found=len(hits)))
    prec = study.doc.get("precision", {})
    rp = run.precision if run is not None and run.precision is not None else {}
    for k, v in prec.items():
        if k in rp and rp[k] != v:
            out.append(_p(f, f"$.precision.{k}", f"precision mode {k} differs from the study", expected=v, found=rp[k]))
        elif k not in rp and not imported:
            out.append(_p(f, f"$.precision.{k}", f"precision mode {k} not recorded", expected=v))
    ev = records.environment.value("float32_matmul_precision") if records.environment is not None else None
    if ev is not None and ev != prec.get("float32_matmul_precision"):
        out.append(_p(DOC_FILE["environment"], "$.fields.float32_matmul_precision.value",
                      "float32 matmul precision differs from the study", expected=prec.get("float32_matmul_precision"),
                      found=ev))
    return out


def _study_predicate(study, records: Records) -> list[Problem]:
    """The predicate's tolerances, names and definitions are the study's and the verifier's
    own; the predicate-direction witness's verdicts are what ``allclose`` gives for its two
    values in each argument order (the inequality of :data:`kbrepro.harness.checks.PREDICATES`)."""
    out = []
    f = DOC_FILE["correctness"]
    cor = records.correctness
    if cor is None:
        return out
    pred = cor.predicate
    sp = study.doc.get("predicate", {})
    for key, want, got in (("atol", float(sp.get("atol")), pred.atol), ("rtol", float(sp.get("rtol")), pred.rtol)):
        if float(got) != want:
            out.append(_p(f, f"$.predicate.{key}", f"predicate {key} differs from the study", expected=want, found=got))
    for key, got in (("official", pred.official), ("legacy", pred.legacy)):
        if got != sp.get(key):
            out.append(_p(f, f"$.predicate.{key}", f"the {key} predicate is not the study's", expected=sp.get(key),
                          found=got))
    defs = norm(pred.definitions) if pred.definitions is not None else {}
    for name in (sp.get("official"), sp.get("legacy")):
        own = norm(checks.PREDICATES.get(name))
        theirs = defs.get(name)
        if own is not None and not same(theirs, own):
            theirs = theirs if isinstance(theirs, dict) else {}
            bad = sorted(k for k in set(own) | set(theirs) if not same(theirs.get(k), own.get(k)))
            out.append(_p(f, f"$.predicate.definitions.{name}", f"predicate {name} is defined differently from the "
                          f"verifier's own definition ({', '.join(map(str, bad))[:CUT]})",
                          expected={k: own.get(k) for k in bad}, found={k: theirs.get(k) for k in bad}))
    pdir = cor.predicate_direction
    if pdir is not None:
        atol, rtol = float(sp.get("atol")), float(sp.get("rtol"))
        if _num(pdir.atol) != atol or _num(pdir.rtol) != rtol:
            out.append(_p(f, "$.predicate_direction", "the predicate-direction witness used other tolerances",
                          expected=[atol, rtol], found=[pdir.atol, pdir.rtol]))
        ref, cand = _num(pdir.reference), _num(pdir.candidate)
        if ref is not None and cand is not None:
            want = {"allclose_reference_candidate": abs(ref - cand) <= atol + rtol * abs(cand),
                    "allclose_candidate_reference": abs(cand - ref) <= atol + rtol * abs(ref)}
            for dtype, res in sorted(pdir.results.items()):
                for k, w in want.items():
                    if getattr(res, k) != w:
                        out.append(_p(f, f"$.predicate_direction.results.{dtype}.{k}",
                                      "the predicate-direction verdict is not what allclose gives for these inputs",
                                      expected=w, found=getattr(res, k)))
    return out


def _study_variants(study, records: Records, imported) -> list[Problem]:
    """The compiled variants are the study's (names, routes, requested options), each with the
    FTZ mode its route and options give (:func:`expected_ftz`), and the options NVRTC
    received are the ones the verifier's own compile path gives
    (:func:`kbrepro.kernels.compile.nvrtc_options`)."""
    out = []
    f = DOC_FILE["compile"]
    want_ftz = expected_ftz(study)
    own = {v.name: v for v in study.variants}
    recs = records.compile.variants if records.compile is not None else ()
    names = [v.name for v in recs]
    if not imported and names != [v.name for v in study.variants]:
        out.append(_p(f, "$.variants", "the compiled variants are not the study's, in order",
                      expected=[v.name for v in study.variants], found=names))
    for i, r in enumerate(recs):
        n = r.name
        sv = own.get(n)
        if sv is None:
            if imported or names == [v.name for v in study.variants]:
                out.append(_p(f, f"$.variants[{i}].name", f"variant {_cut(n)} is not in the study",
                              expected=sorted(own), found=n))
            continue
        if r.route != sv.route:
            out.append(_p(f, f"$.variants[{i}].route", f"{n}: route differs from the study", expected=sv.route,
                          found=r.route))
        if r.expected_ftz != want_ftz[n]:
            out.append(_p(f, f"$.variants[{i}].expected_ftz", f"{n}: the FTZ mode its route and options give is "
                          f"ftz={str(want_ftz[n]).lower()}", expected=want_ftz[n], found=r.expected_ftz))
        if r.ftz_evidence.expected != want_ftz[n]:
            out.append(_p(f, f"$.variants[{i}].ftz_evidence.expected", f"{n}: the FTZ evidence is judged against "
                          "the wrong mode", expected=want_ftz[n], found=r.ftz_evidence.expected))
        req = list(r.requested_options) if r.requested_options is not None else None
        if not imported and req is not None and req != list(sv.options):
            out.append(_p(f, f"$.variants[{i}].requested_options", f"{n}: requested options differ from the study",
                          expected=list(sv.options), found=req))
        if r.effective_options is None:
            continue
        eff = list(r.effective_options)
        if imported:
            pass  # the post's scripts passed the architecture themselves and predate --no-cache
        elif sv.route == "nvrtc":
            ver = r.nvrtc_version
            if ver is not None and len(ver) == 2 and r.arch is not None:
                try:
                    exp = list(kc.nvrtc_options(sv, r.arch, tuple(ver)))
                except Exception:  # the verifier's own variant names an arch: nothing to compare
                    exp = None
                if exp is not None and eff != exp:
                    out.append(_p(f, f"$.variants[{i}].effective_options", f"{n}: the options NVRTC received are not "
                                  "the study's options + architecture (+ --no-cache)", expected=exp, found=eff))
        else:
            it = iter(eff)
            if not all(any(o == e for e in it) for o in sv.options):
                out.append(_p(f, f"$.variants[{i}].effective_options", f"{n}: the study's options are not among the "
                              "options NVRTC received, in order", expected=list(sv.options), found=eff))
        got = ftz_from_options([str(o) for o in eff], False)
        if got != want_ftz[n]:
            out.append(_p(f, f"$.variants[{i}].effective_options", f"{n}: the options NVRTC received give "
                          f"ftz={str(got).lower()}, the study's variant ftz={str(want_ftz[n]).lower()}",
                          expected=want_ftz[n], found=got))
    return out


#: the criteria the engine decides a control by (harness.run.criterion): allclose, or its
#: equal_nan form where the input holds NaN by construction
CRITERIA = ("official", "equal_nan_stress")


def _criterion_of(vals: list) -> str:
    return "equal_nan_stress" if any(isinstance(v, float) and math.isnan(v) for v in vals) else "official"


def _study_cases(study, records: Records, imported, binding=None) -> list[Problem]:
    """The exact correctness case set the study gives (tasks x seeds x distributions in the
    run's order, extra shapes), every case checked on the study's variants, and each task's
    controls (sections, timing input, graph mutation, TorchScript, Inductor) the study's."""
    out = []
    f = DOC_FILE["correctness"]
    cor = records.correctness
    if cor is None:
        return out
    doc = study.doc
    vnames = [v.name for v in study.variants]
    ex = doc.get("extras", {}) or {}
    inductor = bool(ex.get("inductor"))

    def vset(checks: Any, path: str, what: str, extra: tuple = ()) -> None:
        keys = list(checks) if isinstance(checks, Mapping) else []
        allowed = vnames + list(extra)
        if imported:
            bad = [k for k in keys if k not in allowed]
            if bad or not keys:
                out.append(_p(f, path, f"{what}: checks of variants the study does not compile", expected=allowed,
                              found=keys))
        elif sorted(keys) != sorted(allowed):
            out.append(_p(f, path, f"{what}: the checked variants are not the study's", expected=sorted(allowed),
                          found=sorted(keys)))

    want = [(t, s, d) for t in study.tasks for s in doc["correctness"]["seeds"] for d in doc["correctness"]["distributions"]]
    fp = cor.full_program
    got = [(c.case.task, c.case.seed, c.case.distribution) for c in fp]
    if got != want:
        missing = [k for k in want if k not in got]
        extra = [k for k in got if k not in want]
        dup = sorted({k for k in got if got.count(k) > 1}, key=str)
        what = []
        if missing:
            what.append(f"{len(missing)} missing (first {list(missing[0])})")
        if extra:
            what.append(f"{len(extra)} not in the study (first {list(extra[0])})")
        if dup:
            what.append(f"{len(dup)} repeated (first {list(dup[0])})")
        if not what:
            what.append("the run's order (tasks, seeds, distributions) changed")
        out.append(_p(f, "$.full_program", f"the full-program cases are not the study's {len(want)}: "
                      + "; ".join(what), expected=len(want), found=len(got)))
    for i, c in enumerate(fp):
        vset(c.checks, f"$.full_program[{i}].checks", f"full-program case {i}")
    tdocs = cor.tasks
    if sorted(tdocs) != sorted(str(t) for t in study.tasks):
        out.append(_p(f, "$.tasks", "the task controls are not the study's tasks",
                      expected=[str(t) for t in study.tasks], found=sorted(tdocs)))
    mut = (doc.get("controls") or {}).get("graph_mutation")
    sections = set(binding.section_names) if binding is not None else None
    for t in study.tasks:
        td = tdocs.get(str(t))
        if td is None:
            continue
        base = f'$.tasks["{t}"]'
        if sections is not None and not imported:
            got_sections = sorted(k for k, v in td.items() if isinstance(v, list))
            if got_sections != sorted(sections):
                out.append(_p(f, base, f"task {t}: the control sections are not the study's",
                              expected=sorted(sections), found=got_sections))
        for sec, recs in sorted(td.items()):
            if not isinstance(recs, list):
                continue
            for j, c in enumerate(recs):
                vset(_d(c).get("checks"), f"{base}.{sec}[{j}].checks", f"task {t} control {_cut(_d(c).get('name'))}")
                if not imported and _d(c).get("criterion") not in CRITERIA:  # the engine writes one for every control
                    out.append(_p(f, f"{base}.{sec}[{j}].criterion", f"task {t} control "
                                  f"{_cut(_d(c).get('name'))}: decided by a criterion the engine never uses "
                                  "(harness.run.criterion)", expected=list(CRITERIA), found=_d(c).get("criterion")))
        ti = _d(td.get("timing_input"))
        if "seed" in ti and ti.get("seed") != doc["timing"]["seed"]:
            out.append(_p(f, f"{base}.timing_input.seed", f"task {t}: timing-input seed differs from the study",
                          expected=doc["timing"]["seed"], found=ti.get("seed")))
        if ti:
            vset(ti.get("checks"), f"{base}.timing_input.checks", f"task {t} timing input")
        gm = _d(td.get("graph_mutation"))
        if mut is None and gm and not imported:
            out.append(_p(f, f"{base}.graph_mutation", f"task {t}: a graph-mutation control the study does not run"))
        if gm.get("mutation") is not None and not same(gm.get("mutation"), mut):
            out.append(_p(f, f"{base}.graph_mutation.mutation", f"task {t}: graph-mutation parameters differ from "
                          "the study", expected=mut, found=gm.get("mutation")))
        if gm:
            vset(gm.get("checks"), f"{base}.graph_mutation.checks", f"task {t} graph mutation")
        ts = td.get("torchscript")
        want_ts = sorted(["full", *(binding.scope_names if binding is not None else ())])
        if not imported and binding is None and (not isinstance(ts, dict) or "full" not in ts):
            out.append(_p(f, f"{base}.torchscript", f"task {t}: no TorchScript check of the full "
                          "program, which the engine always makes"))
        if not imported and binding is not None and (not isinstance(ts, dict) or sorted(ts) != want_ts):
            out.append(_p(f, f"{base}.torchscript", f"task {t}: TorchScript checks of the full program and every "
                          "scope expected", expected=want_ts, found=sorted(_d(ts))))
        if not imported and ("inductor" in td) != inductor:
            out.append(_p(f, f"{base}.inductor", f"task {t}: Inductor checks " + ("missing although the study "
                          "compiles with Inductor" if inductor else "present although the study has no Inductor")))
    want_es = [(t, es["seed"]) for es in doc.get("extra_shapes") or [] for t in study.tasks]
    got_es = [(c.case.get("task"), c.case.get("seed")) for c in cor.extra_shapes or ()]
    if not same(got_es, want_es) and not (imported and same([a for a, _ in got_es], [a for a, _ in want_es])):
        out.append(_p(f, "$.extra_shapes", "the extra-shape cases are not the study's",
                      expected=[list(x) for x in want_es], found=[list(x) for x in got_es]))
    for i, c in enumerate(cor.extra_shapes or ()):
        vset(c.checks, f"$.extra_shapes[{i}].checks", f"extra shape {i}", ("torchscript",))
    return out


def _expected_blocks(study, records: Records, binding=None) -> dict[str, dict]:
    """id -> {"kind", "protocol" (doc), "arms" (or None)} of every block the study gives:
    the engine's (full program and every scope of the binding, cold-L2 twins, extra
    shapes) and the binding's own (:meth:`StudyBinding.expected_blocks`)."""
    doc = study.doc
    ex = doc.get("extras", {}) or {}
    ad = ex.get("adaptive")
    arms_of = {b.id: b.arms for b in (records.timings.blocks if records.timings is not None else ())}
    vnames = [v.name for v in study.variants]
    scopes = list(binding.scope_names) if binding is not None else []

    def proto(mode: str, bid: str, l2: str = "warm") -> dict:
        base = study.timing_protocol(mode)
        if not ad:
            return TimingProtocol(**{**base.__dict__, "l2": l2}).to_doc()
        arms = list(arms_of.get(bid, ()))
        pairs = tuple((v, b) for v in [a for a in arms if a in vnames] for b in [a for a in arms if a not in vnames])
        rule = AdaptiveRule(target_rel_half_width=ad["target_rel_half_width"], min_rounds=ad.get("min_rounds", 10),
                            max_rounds=ad["max_rounds"], max_seconds=ad["max_seconds"], pairs=pairs)
        return TimingProtocol(mode=mode, warmups=base.warmups, rounds=rule.min_rounds,
                              invocations_per_pair=base.invocations_per_pair, order_seed=base.order_seed,
                              adaptive=rule, l2=l2).to_doc()

    out: dict[str, dict] = {}
    modes = doc["timing"]["modes"]
    for t in study.tasks:
        for scope in ["full", *scopes]:
            for mode in modes:
                bid = BlockKey(t, scope, mode).id
                out[bid] = {"kind": "study", "protocol": proto(mode, bid), "arms": None}
        if ex.get("cold_l2"):
            for scope in [*scopes, "full"]:
                for mode in (("graph",) if scope == "full" else ("events", "graph")):
                    bid = BlockKey(t, scope, mode, "cold_l2").id
                    out[bid] = {"kind": "cold_l2", "protocol": proto(mode, bid, "cold"), "arms": None}
    for es in doc.get("extra_shapes") or []:
        label = binding.size_label(es["size"]) if binding is not None else None
        for t in study.tasks:
            for mode in modes:
                if label is None:
                    continue
                bid = BlockKey(t, "full", mode, "extra_shape", label).id
                out[bid] = {"kind": "extra_shape", "protocol": study.timing_protocol(mode, rounds=es["rounds"]).to_doc(),
                            "arms": None}
    if binding is not None:
        out.update(binding.expected_blocks(study))
    return out


#: the kinds of block the engine keys by :class:`kbrepro.harness.records.BlockKey` (the id's
#: second part is the block's scope)
ENGINE_KINDS = ("study", "cold_l2", "extra_shape")


def _study_blocks(study, documents, records: Records, imported, binding=None) -> list[Problem]:
    """The timing blocks are the study's: for a measured run exactly the ids it gives, each
    of its kind, protocol (:func:`_expected_blocks`) and arms, task and mode as its id says;
    for imported results each block's protocol is the study's for its kind. Then the facts
    :func:`kbrepro.bundle.derived_facts.study_problems` derives again."""
    out = []
    f = DOC_FILE["timings"]
    doc = study.doc
    ex = doc.get("extras", {}) or {}
    blocks = records.timings.blocks if records.timings is not None else ()
    if imported:
        # the post's ids and arms differ; the protocol of each kind must still be the study's
        by_kind = {"study": [study.timing_protocol(m).to_doc() for m in doc["timing"]["modes"]],
                   "extra_shape": [study.timing_protocol(m, rounds=es["rounds"]).to_doc()
                                   for es in doc.get("extra_shapes") or [] for m in doc["timing"]["modes"]]}
        for w in (binding.expected_blocks(study).values() if binding is not None else ()):
            by_kind.setdefault(w["kind"], []).append(w["protocol"])
        for i, b in enumerate(blocks):
            allowed = by_kind.get(b.kind)
            if allowed is None:
                out.append(_p(f, f"$.blocks[{i}].kind", f"block {_cut(b.id)}: kind not in the study",
                              expected=sorted(by_kind), found=b.kind))
            elif not any(same(b.protocol.to_doc(), a) for a in allowed):
                out.append(_p(f, f"$.blocks[{i}].protocol", f"block {_cut(b.id)}: protocol is not the "
                              f"study's for {b.kind} blocks", expected=allowed[0], found=b.protocol.to_doc()))
        return out
    want = _expected_blocks(study, records, binding)
    authors: set = set()
    if binding is None:
        # a study this verifier does not ship: the engine's full-program blocks (and their
        # cold-L2 twins) follow from the study definition alone and are required; blocks of
        # the binding's scopes, extra shapes and probes are the author's (the result is partial)
        want = {k: v for k, v in want.items() if k.split(".")[1] == "full" and v["kind"] in ("study", "cold_l2")}
        authors = {b.id for b in blocks if b.id not in want}
    ids = [b.id for b in blocks]
    scopes = {k.split(".")[1] for k, v in want.items() if v["kind"] in ENGINE_KINDS}
    seen = set()
    for i, b in enumerate(blocks):
        bid = b.id
        if bid in seen:
            out.append(_p(f, f"$.blocks[{i}].id", f"block {_cut(bid)} appears twice"))
            continue
        seen.add(bid)
        w = want.get(bid)
        if w is None and bid in authors:
            continue
        if w is None:
            kind = b.kind
            if (kind == "floor" and ex.get("measurement_floor")) or \
                    (kind == "copy" and (ex.get("roofline") or ex.get("self_test"))):
                continue
            out.append(_p(f, f"$.blocks[{i}].id", f"block {_cut(bid)} is not one the study times",
                          found=_cut(bid)))
            continue
        if b.kind != w["kind"]:
            out.append(_p(f, f"$.blocks[{i}].kind", f"block {bid}: kind differs from the study", expected=w["kind"],
                          found=b.kind))
        if not same(b.protocol.to_doc(), w["protocol"]):
            p, q = norm(w["protocol"]), norm(b.protocol.to_doc())
            keys = sorted(k for k in set(p) | set(q) if not same(p.get(k), q.get(k)))
            out.append(_p(f, f"$.blocks[{i}].protocol", f"block {bid}: protocol differs from the study's in "
                          f"{', '.join(keys)[:CUT]}", expected={k: p.get(k) for k in keys},
                          found={k: q.get(k) for k in keys}))
        if w["arms"] is not None and list(b.arms) != list(w["arms"]):
            out.append(_p(f, f"$.blocks[{i}].arms", f"block {bid}: arms differ from the study", expected=w["arms"],
                          found=list(b.arms)))
        parts = bid.split(".")
        # the engine's blocks name their scope in the id (BlockKey); a probe's is a scope of the study or its kind
        scope_ok = b.scope == parts[1] if b.kind in ENGINE_KINDS else b.scope in scopes | {b.kind}
        if str(b.task) != parts[0] or b.mode != (parts[2] if len(parts) >= 3 else None) or not scope_ok:
            out.append(_p(f, f"$.blocks[{i}]", f"block {bid}: task, scope or mode contradicts its id (a probe's scope "
                          "is one of the study's, or its kind)", expected=parts[:3], found=[b.task, b.scope, b.mode]))
    missing = [k for k in want if k not in ids]
    if missing:
        out.append(_p(f, "$.blocks", f"{len(missing)} timing block(s) of the study missing (first {missing[0]})",
                      expected=missing[:10]))
    return out + derived_facts.study_problems(study, records)


def _study_witness(study, records: Records, imported) -> list[Problem]:
    """The witness ran the study's task at its inputs (float32 bits) for the reference and
    every variant (and Inductor); whether it discriminates follows from its CPU references;
    verdicts follow from the bits (harness/run.py ``witness_flushes``)."""
    out = []
    ex = study.doc.get("extras", {}) or {}
    w = study.doc.get("witness")
    wit = records.witness
    f = DOC_FILE["witness"]
    if wit is None or not w:
        return out
    if wit.task != task_key(w["task"])[1]:
        out.append(_p(f, "$.task", "the witness ran another task than the study's", expected=task_key(w["task"])[1],
                      found=wit.task))
    want_bits = [f32_bits(v) for v in values(w["inputs"])]
    got_bits = [r.bits for r in wit.inputs]
    if got_bits != want_bits:
        out.append(_p(f, "$.inputs", "the witness inputs are not the study's (float32 bits)", expected=want_bits,
                      found=got_bits))
    outs = wit.outputs
    want_out = ["reference"] + [v.name for v in study.variants] + (["inductor"] if ex.get("inductor") else [])
    if sorted(outs) != sorted(want_out) and not imported:
        out.append(_p(f, "$.outputs", "the witness outputs are not the reference and the study's variants",
                      expected=sorted(want_out), found=sorted(outs)))
    n = len(outs.get("reference", ()))
    for k, rows in sorted(outs.items()):
        if len(rows) != n:
            out.append(_p(f, f"$.outputs.{k}", f"{_cut(k)}: {len(rows)} witness outputs, the reference has {n}",
                          expected=n, found=len(rows)))
    if sorted(wit.verdicts) != sorted(k for k in outs if k != "reference"):
        out.append(_p(f, "$.verdicts", "the witness verdicts are not one per output",
                      expected=sorted(k for k in outs if k != "reference"), found=sorted(wit.verdicts)))
    keep = [{"value": r.value, "bits": r.bits} for r in wit.reference_cpu.keep]
    flush = [{"value": r.value, "bits": r.bits} for r in wit.reference_cpu.flush]
    if len(keep) != n or len(flush) != n:
        out.append(_p(f, "$.reference_cpu", "the CPU references do not have one value per output",
                      expected=n, found=[len(keep), len(flush)]))
    else:
        disc = [i for i, (a, b) in enumerate(zip(keep, flush)) if a["bits"] != b["bits"]]
        if list(wit.discriminating_elements) != disc or wit.discriminates != bool(disc):
            out.append(_p(f, "$.discriminating_elements", "the discriminating elements are not where the CPU "
                          "references with denormals kept and flushed differ", expected=disc,
                          found=list(wit.discriminating_elements)))
        for name, ver in sorted(wit.verdicts.items()):
            rows = [{"value": r.value, "bits": r.bits} for r in outs.get(name, ())]
            try:
                want = witness_flushes(rows, keep, flush, disc) if len(rows) == n else None
            except (KeyError, TypeError, ValueError, IndexError):
                continue
            if not same(ver.get("flushes"), want):
                out.append(_p(f, f"$.verdicts.{_cut(name)}.flushes", f"{_cut(name)}: the FTZ verdict does not follow "
                              "from the recorded values", expected=want, found=ver.get("flushes")))
    for i, v in enumerate(records.compile.variants if records.compile is not None else ()):
        ev_w = v.ftz_evidence.witness
        if ev_w is not None and ev_w.task is not None and ev_w.task != wit.task:
            out.append(_p(DOC_FILE["compile"], f"$.variants[{i}].ftz_evidence.witness.task",
                          f"{_cut(v.name)}: the compile record's witness task differs from witness.json",
                          expected=wit.task, found=ev_w.task))
    return out
