"""Tier 3 cross-document checks of a study bundle (:func:`document_problems`): the bag's listing,
bag-info.txt and bundle.json against the run record, timestamps, the environment, timing
rounds and the eligibility of every timing block, each derived again from the documents.
"""
from __future__ import annotations

import hashlib
import re
from datetime import datetime, timezone
from typing import Mapping

from kbrepro.model.problems import INCOMPLETE, Problem
from kbrepro.model.documents import Records
from kbrepro.model.timing_rules import arm_orders
from kbrepro.bundle import derived_facts
from kbrepro.bundle import evidence as pd
from kbrepro.harness.timing import THROTTLE_MASK
from kbrepro.bundle.crosscheck.common import (DOC_FILE, IMPORTED_REQUIRED, MEASURED_REQUIRED, as_int, is_measured,
                                              check_passes, variants)

_cut, _p, _d, _l, _is_int, _num = pd.cut, pd.problem, pd.as_dict, pd.as_list, pd.is_int, pd.number


def document_problems(documents: Mapping[str, dict], files: Mapping[str, bytes], meta: Mapping,
                      bag_info: Mapping[str, str], records: Records) -> list[Problem]:
    """Tier 3 (documents): contradictions between the documents, ``bundle.json`` and
    ``bag-info.txt``.

    ``documents``: name -> parsed document (``"run"``, ``"environment"``, ``"compile"``,
    ``"witness"``, ``"correctness"``, ``"timings"``, ``"selftest"``, a study's own,
    ``"claims"``); ``files``: every file of the bag by path relative to the bag root
    (``"data/results/run.json"``, ``"bag-info.txt"``, ...), bytes; ``meta``: parsed
    ``data/bundle.json``; ``bag_info``: ``bag-info.txt`` fields; ``records``: the typed records of
    the same documents (:mod:`kbrepro.model.documents`, ``"bundle"`` for bundle.json), as
    :func:`kbrepro.bundle.documents.load` built them. Returns Problems (:class:`kbrepro.model.problems.Problem`)
    (module docstring); raises nothing.

    Checks: every ``data/results/*.json`` (not ``results/originals/``) and
    ``data/environment.json`` is listed in ``bundle.json`` under its own document name, and
    the documents a run of that source always writes are there (measured: run, environment,
    compile, correctness, timings (witness when the study has one); imported: run, environment, compile,
    correctness, timings); ``bag-info.txt`` agrees with ``bundle.json`` (name, format,
    version, source, study); ``bundle.json`` agrees with run.json and environment.json
    (source vs run status, study name/profile/sha256 and the bundled study file's sha256,
    product version/commit, KernelBench commit and files); the default bundle name's time
    stamp is the run's start; start <= finish, the stages fit in the wall time and the wall
    time in start..finish; environment vs run (precision, compile-cache setting) and
    correctness (torch version of the predicate witness); timing rounds: every round's
    order is a permutation of the block's arms and is exactly the one
    ``random.Random(order_seed)`` shuffles (harness/timing.py), times are finite and
    positive, a recorded ``throttled`` flag follows from its throttle reasons; timing
    eligibility follows from the official checks of the task (harness/run.py), and each
    study block times exactly the eligible variants (skipped for imported results: the post
    timed one variant per script); then the facts :func:`bundle.derived_facts.document_problems`
    derives (self-tests, adaptive stopping, copy and floor blocks, GEMM FLOPs).
    """
    out: list[Problem] = []
    measured = is_measured(meta)
    out += _listing_problems(records, files, measured)
    out += _bag_info_problems(records, bag_info)
    out += _meta_problems(records, files, measured)
    out += _time_problems(records)
    out += _environment_problems(records)
    out += _round_problems(records)
    out += _eligibility_problems(documents, measured)
    return out + derived_facts.document_problems(documents, records)


def _listing_problems(records: Records, files, measured) -> list[Problem]:
    if records.bundle is None:
        return [_p("data/bundle.json", None, "bundle.json is not a valid record; its documents cannot be listed")]
    out = []
    listed = records.bundle.documents
    for rel, schema in sorted(listed.items()):
        name = schema.split("/", 1)[-1]
        want = DOC_FILE.get(name)
        if want is not None and want != f"data/{rel}":
            out.append(_p("data/bundle.json", f'$.documents["{_cut(rel)}"]',
                          f"document {name} listed at data/{_cut(rel)}; the packer writes it at {want}",
                          expected=want, found=f"data/{rel}"))
        if f"data/{rel}" not in files:
            out.append(_p("data/bundle.json", f'$.documents["{_cut(rel)}"]',
                          f"document data/{_cut(rel)} listed in bundle.json is not in the bag"))
    listed_paths = {f"data/{rel}" for rel in listed}
    for path in sorted(files):
        is_doc = (path.startswith("data/results/") and path.endswith(".json") and path.count("/") == 2) \
            or path == "data/environment.json"
        if is_doc and path not in listed_paths:
            out.append(_p(path, None, f"{path} is in the bag but not listed in bundle.json's documents "
                                      "(an unlisted document is never checked)"))
    listed_names = {s.split("/", 1)[-1] for s in listed.values()}
    required = MEASURED_REQUIRED if measured else IMPORTED_REQUIRED
    for name in required:
        if name not in listed_names:
            out.append(_p(DOC_FILE[name], None,
                          f"{'a measured' if measured else 'an imported'} run always writes {name}.json; "
                          "the bundle does not list it", expected=DOC_FILE[name]))
    return out


def _bag_info_problems(records: Records, info) -> list[Problem]:
    out = []
    meta = records.bundle
    if meta is None:
        return [_p("data/bundle.json", None, "bundle.json is not a valid record; bag-info.txt cannot be compared with it")]
    pairs = (("External-Identifier", meta.name, "$.name"),
             ("Bundle-Format", meta.format, "$.format"),
             ("Bundle-Format-Version", str(meta.format_version), "$.format_version"),
             ("Source", meta.source, "$.source"),
             ("Study", f"{meta.study.name} ({meta.study.profile})", "$.study"))
    for key, want, path in pairs:
        got = info.get(key)
        if got != want:
            out.append(_p("bag-info.txt", None, f"bag-info.txt {key} differs from bundle.json {path}",
                          expected=want, found=got))
    return out


def _meta_problems(records: Records, files, measured) -> list[Problem]:
    out = []
    meta, run, env = records.bundle, records.run, records.environment
    if meta is None or run is None:  # (the listing's problem: a document every run writes is missing)
        return out
    if meta.source == "measured" and (run.status != "complete" or run.imported is not None):
        out.append(_p("data/bundle.json", "$.source", "bundle.json says measured, run.json says otherwise",
                      expected="status 'complete', imported null", found=f"status {run.status!r}"))
    if meta.source == "imported" and run.status != "imported":
        out.append(_p("data/bundle.json", "$.source", "bundle.json says imported, run.json's status is not 'imported'",
                      expected="imported", found=run.status))
    rs, ms = run.study, meta.study
    for key in ("name", "profile"):
        if getattr(rs, key) != getattr(ms, key):
            out.append(_p("data/bundle.json", f"$.study.{key}", f"bundle.json's study {key} differs from run.json's",
                          expected=getattr(rs, key), found=getattr(ms, key)))
    if rs.sha256 is not None and rs.sha256 != ms.sha256:
        out.append(_p("data/bundle.json", "$.study.sha256", "bundle.json's study sha256 differs from run.json's",
                      expected=rs.sha256, found=ms.sha256))
    study_file = f"data/{ms.file}"
    if study_file in files:
        got = hashlib.sha256(files[study_file]).hexdigest()
        if got != ms.sha256:
            out.append(_p("data/bundle.json", "$.study.sha256", "the bundled study file's sha256 differs from "
                          "bundle.json's", expected=got, found=ms.sha256))
    else:
        out.append(_p(study_file, None, "the study file bundle.json names is not in the bag"))
    for key, name in (("version", "product_version"), ("commit", "product_commit")):
        if env is not None and name in env.fields and env.value(name) != getattr(meta.product, key):
            out.append(_p("data/bundle.json", f"$.product.{key}", f"bundle.json's product {key} differs from "
                          f"environment.json's {name}", expected=env.value(name), found=getattr(meta.product, key)))
    mkb, rkb = meta.kernelbench, run.kernelbench
    if rkb is not None and mkb.commit != rkb.commit:
        out.append(_p("data/bundle.json", "$.kernelbench.commit", "bundle.json's KernelBench commit differs from "
                      "run.json's", expected=rkb.commit, found=mkb.commit))
    if mkb.files_included and rkb is not None and rkb.files is not None and mkb.files != rkb.files:
        out.append(_p("data/bundle.json", "$.kernelbench.files", "bundle.json's KernelBench files differ from the "
                      "files run.json says the run used", expected=rkb.files, found=mkb.files))
    if measured and mkb.files_included is False:
        out.append(_p("data/bundle.json", "$.kernelbench.files_included",
                      "a measured bundle must include the KernelBench files its run used", expected=True, found=False))
    return out


def _parse_utc(s: str | None) -> float | None:
    """Seconds since the epoch of a UTC time stamp the schema let through (its pattern allows
    a 13th month), else None."""
    if s is None:
        return None
    try:
        return datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None


def _time_problems(records: Records) -> list[Problem]:
    out = []
    meta, run = records.bundle, records.run
    if meta is None or run is None:
        return out
    f = DOC_FILE["run"]
    if meta.source == "measured":  # a finished run of ours records when it ran: missing, nothing can be checked
        for key in ("started_utc", "finished_utc", "wall_seconds"):
            if getattr(run, key) is None:
                out.append(Problem(INCOMPLETE, f"$.{key}", f"a measured run always records {key}; it is missing or "
                                   "null, so the run's times cannot be checked", file=f))
    start, end = _parse_utc(run.started_utc), _parse_utc(run.finished_utc)
    if run.started_utc is not None and start is None:
        out.append(_p(f, "$.started_utc", "not a UTC time stamp YYYY-MM-DDTHH:MM:SSZ", found=run.started_utc))
    if run.finished_utc is not None and end is None:
        out.append(_p(f, "$.finished_utc", "not a UTC time stamp YYYY-MM-DDTHH:MM:SSZ", found=run.finished_utc))
    wall = run.wall_seconds
    if start is not None and end is not None:
        if end < start:
            out.append(_p(f, "$.finished_utc", "the run finished before it started",
                          expected=f">= {run.started_utc}", found=run.finished_utc))
        if wall is not None and wall > (end - start) + 2.0:
            out.append(_p(f, "$.wall_seconds", f"wall time {wall:.1f} s exceeds start..finish "
                          f"({end - start:.0f} s, whole seconds)", expected=f"<= {end - start + 2:.0f}", found=wall))
    total = sum(s.seconds for s in run.stages)
    if wall is not None and total > wall + 1.0:
        out.append(_p(f, "$.stages", f"the stages take {total:.1f} s, more than the run's wall time {wall:.1f} s",
                      expected=f"<= {wall + 1.0:.1f}", found=round(total, 3)))
    # the packer's default name is <study>-<profile or 'imported'>-<start stamp>
    label = "imported" if meta.source == "imported" else run.study.profile
    prefix = f"{run.study.name}-{label}-"
    if meta.name.startswith(prefix) and run.started_utc is not None:
        stamp = re.sub(r"[^0-9T]", "", run.started_utc[:19]) or "undated"
        if meta.name[len(prefix):] != stamp:
            out.append(_p("data/bundle.json", "$.name", "the bundle name's time stamp is not the run's start "
                          "(run.json started_utc)", expected=prefix + stamp, found=meta.name))
    return out


def _environment_problems(records: Records) -> list[Problem]:
    out = []
    run, env = records.run, records.environment
    if run is None or env is None:
        return out
    prec = run.precision or {}
    want = env.value("float32_matmul_precision")
    if "float32_matmul_precision" in prec and want is not None and prec["float32_matmul_precision"] != want:
        out.append(_p(DOC_FILE["environment"], "$.fields.float32_matmul_precision.value",
                      "environment.json's float32 matmul precision differs from run.json's",
                      expected=prec["float32_matmul_precision"], found=want))
    cc = run.compile_cache or {}
    envvars = env.value("env")
    if cc.get("set_by") == "environment" and isinstance(envvars, dict) and \
            envvars.get("CUDA_CACHE_DISABLE") != cc.get("CUDA_CACHE_DISABLE"):
        out.append(_p(DOC_FILE["environment"], "$.fields.env.value.CUDA_CACHE_DISABLE",
                      "run.json says CUDA_CACHE_DISABLE came from the environment; environment.json records another value",
                      expected=cc.get("CUDA_CACHE_DISABLE"), found=envvars.get("CUDA_CACHE_DISABLE")))
    comp = records.compile
    for i, v in enumerate(comp.variants if comp is not None else ()):
        if "CUDA_CACHE_DISABLE=1" in v.nvrtc_cache_disabled_by and cc and cc.get("CUDA_CACHE_DISABLE") != "1":
            out.append(_p(DOC_FILE["compile"], f"$.variants[{i}].nvrtc_cache_disabled_by",
                          f"{_cut(v.name)}: says CUDA_CACHE_DISABLE=1 was in effect; run.json says it was not",
                          expected=cc.get("CUDA_CACHE_DISABLE"), found="1"))
    tv = env.value("torch_version")
    corr = records.correctness
    ptv = corr.predicate_direction.torch_version if corr is not None and corr.predicate_direction else None
    if tv is not None and ptv is not None and ptv != tv:
        out.append(_p(DOC_FILE["correctness"], "$.predicate_direction.torch_version",
                      "the predicate witness ran under another torch than environment.json records",
                      expected=tv, found=ptv))
    return out


def _round_problems(records: Records) -> list[Problem]:
    out = []
    f = DOC_FILE["timings"]
    for i, b in enumerate(records.timings.blocks if records.timings is not None else ()):
        bid = _cut(b.id)
        if len(set(b.arms)) != len(b.arms):
            out.append(_p(f, f"$.blocks[{i}].arms", f"block {bid}: an arm is listed twice", found=b.arms))
        seed = b.protocol.order_seed
        orders = arm_orders(list(b.arms), seed) if seed is not None else None
        bad_order = bad_thr = False
        for j, r in enumerate(b.rounds):
            if orders is not None:
                want = next(orders)
                order = list(r.order) if r.order is not None else None
                if order != want and not bad_order:
                    bad_order = True
                    msg = ("is not a permutation of the block's arms" if sorted(order or ()) != sorted(b.arms)
                           else f"is not the order random.Random({seed}) gives")
                    out.append(_p(f, f"$.blocks[{i}].rounds[{j}].order", f"block {bid}: round {j}'s order {msg} "
                                  "(rounds reordered, dropped or inserted)", expected=want, found=order))
            clk = r.clocks or {}
            if not bad_thr and "throttled" in clk and not (_is_int(clk.get("throttle_reasons"))
                                                           and clk["throttle_reasons"] >= 0
                                                           and type(clk["throttled"]) is bool):
                # (fail closed: a flag the verifier cannot derive again is not believed)
                bad_thr = True
                out.append(_p(f, f"$.blocks[{i}].rounds[{j}].clocks",
                              f"block {bid}: 'throttled' is recorded without the non-negative integer "
                              "throttle_reasons it follows from", found={k: clk.get(k) for k in
                                                                        ("throttled", "throttle_reasons")}))
            if not bad_thr and "throttled" in clk \
                    and bool(clk["throttle_reasons"] & THROTTLE_MASK) != clk["throttled"]:
                bad_thr = True
                out.append(_p(f, f"$.blocks[{i}].rounds[{j}].clocks.throttled",
                              f"block {bid}: 'throttled' contradicts throttle_reasons "
                              f"0x{clk['throttle_reasons']:x}", expected=bool(clk["throttle_reasons"] & THROTTLE_MASK),
                              found=clk["throttled"]))
    return out


def _eligibility_problems(documents, measured) -> list[Problem]:
    """Eligibility for timing re-derived as harness/run.py derives it; for measured results
    also the arms of each study (and cold-L2) block of the task."""
    out = []
    cor = _d(documents.get("correctness"))
    tasks = _d(cor.get("tasks"))
    fp = [c for c in _l(cor.get("full_program")) if isinstance(c, dict)]
    blocks = [b for b in _l(_d(documents.get("timings")).get("blocks")) if isinstance(b, dict)]
    for t, td in sorted(tasks.items()):
        td = _d(td)
        elig = td.get("eligible_for_timing")
        if not isinstance(elig, dict):
            continue
        for n, rec in sorted(elig.items()):
            oks = [check_passes(_d(c.get("checks")).get(n), "official") for c in fp if _d(c.get("case")).get("task") == as_int(t)]
            oks += [check_passes(_d(_d(c).get("checks")).get(n), _d(c).get("criterion"))
                    for sec in td.values() if isinstance(sec, list) for c in sec]
            oks.append(check_passes(_d(_d(td.get("timing_input")).get("checks")).get(n), "official"))
            if "graph_mutation" in td:
                oks.append(check_passes(_d(_d(td.get("graph_mutation")).get("checks")).get(n), "official"))
            if any(o is False for o in oks):
                want = False
            elif all(o is True for o in oks):
                want = True
            else:
                continue  # undecidable from what was recorded (imported summaries)
            if rec != want:
                out.append(_p(DOC_FILE["correctness"], f'$.tasks["{_cut(t)}"].eligible_for_timing.{_cut(n)}',
                              f"task {_cut(t)}: {_cut(n)}'s timing eligibility does not follow from its checks",
                              expected=want, found=rec))
        if not measured:
            continue
        ts = _d(td.get("torchscript"))
        ts_ok = bool(ts) and all(check_passes(c, "official") is True for c in ts.values())
        ind = _d(td.get("inductor"))
        for i, b in enumerate(blocks):
            if b.get("kind") not in ("study", "cold_l2") or str(b.get("task")) != str(t):
                continue
            scope = b.get("scope")
            sfx = "" if scope == "full" else f"_{scope}"
            want = (["l2_flush_only"] if b.get("kind") == "cold_l2" else []) + [f"eager{sfx}"]
            if ts_ok:
                want.append(f"torchscript{sfx}")
            # the engine times the variants in the study's (compile) order; the JSON keys are sorted
            order = [v.get("name") for v in variants(documents)]
            want += sorted((n for n, e in elig.items() if e is True),
                           key=lambda n: (order.index(n) if n in order else len(order), n))
            if ind and check_passes(ind.get(scope), "official") is True:
                want.append(f"inductor{sfx}")
            if b.get("arms") != want:
                out.append(_p(DOC_FILE["timings"], f"$.blocks[{i}].arms",
                              f"block {_cut(b.get('id'))}: the arms are not the eligible variants and passing "
                              "baselines of task " + _cut(str(t)), expected=want, found=b.get("arms")))
    for i, b in enumerate(blocks):
        if b.get("kind") == "extra_shape" and measured:
            es = [c for c in _l(cor.get("extra_shapes")) if isinstance(c, dict)
                  and _d(c.get("case")).get("task") == b.get("task")
                  and all(b.get(k) == v for k, v in _d(c.get("case")).items() if k not in ("task", "seed"))]
            if len(es) != 1:  # the arms follow from that one case: without it they cannot be derived
                out.append(_p(DOC_FILE["timings"], f"$.blocks[{i}]", f"block {_cut(b.get('id'))}: "
                              f"{'no' if not es else len(es)} extra-shape correctness case(s) of its task at its "
                              "shape: its arms cannot be derived", expected=1, found=len(es)))
            else:
                chk = _d(es[0].get("checks"))
                order = [v.get("name") for v in variants(documents)]
                want = ["eager"] + (["torchscript"] if check_passes(chk.get("torchscript"), "official") else []) + \
                    sorted((n for n in chk if n not in ("torchscript",) and check_passes(chk[n], "official") is True),
                           key=lambda n: (order.index(n) if n in order else len(order), n))
                if b.get("arms") != want:
                    out.append(_p(DOC_FILE["timings"], f"$.blocks[{i}].arms", f"block {_cut(b.get('id'))}: the arms "
                                  "are not the variants that passed at this shape", expected=want, found=b.get("arms")))
        if "checks" in b and b.get("kind") not in ("study", "cold_l2", "extra_shape"):  # a probe checked first
            chk = _d(b.get("checks"))
            passes = [check_passes(c, "official") for c in chk.values()]
            timed = bool(_l(b.get("rounds")))
            if passes and all(p is True for p in passes) and not timed:
                out.append(_p(DOC_FILE["timings"], f"$.blocks[{i}].rounds", f"block {_cut(b.get('id'))}: every "
                              "variant passed its check, yet the block was not timed"))
            if any(p is False for p in passes) and timed:
                out.append(_p(DOC_FILE["timings"], f"$.blocks[{i}].rounds", f"block {_cut(b.get('id'))}: a variant "
                              "failed its check on the timing input, yet the block was timed"))
    return out
