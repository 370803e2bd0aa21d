"""Verification tiers 3 to 6 of a KernelBench-candidate bundle (``bundle.json`` format
``kbrepro-candidate-bundle``); tiers 1 and 2 (archive, manifest) are the generic ones of
:mod:`kbrepro.bundle.verify.manifest`.

The trust rule, as it applies here: the task files are judged by the product's own KernelBench
pin (never by hashes the bundle states); every verdict of a named check is derived again with
this verifier's copy of :mod:`kbrepro.harness.cheats` from the recorded observations and must
equal the recorded one; every check record's arithmetic is re-checked; the default claims are
written again from the data with this verifier's code and must equal the bundle's, then all
claims are evaluated again; REPORT.md is rendered again and must be byte-identical. Claims an
author added (``--claims``) are evaluated by the same evaluator on the author's definitions:
the result is then PARTIAL, not PASS. A replay runs the bundle's candidate code, so it needs
``--trust-bundle-code`` and runs each candidate in its own child process.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

from kbrepro import schemas
from kbrepro.bundle import candidate_records, case_records, crosscheck, pack
from kbrepro.bundle import candidates as bc
from kbrepro.bundle import claims as claims_mod
from kbrepro.bundle.facts import CRATE_FILE
from kbrepro.bundle.report import post_summary
from kbrepro.bundle.verify.compare import environment_diff
from kbrepro.bundle.verify.core import bag_info, safe_text
from kbrepro.bundle.verify.described import statements_check
from kbrepro.errors import ReproError, UnreadableInputError
from kbrepro.harness import jsonio, stats
from kbrepro.harness.kernelbench import load_pin
from kbrepro.kernels.compile import sass_ftz_counts, sass_says_ftz
from kbrepro.model.candidate_rules import TASK_PATH
from kbrepro.model.replay_rules import claim_change

MAX_DOCUMENT_BYTES = 64 * 1024 * 1024


def is_candidate_bundle(files) -> bool:
    """Whether the bag's ``bag-info.txt`` names the candidate format (tier 1 accepted it;
    tier 3 checks that ``bundle.json`` says the same)."""
    return bag_info(files.get("bag-info.txt", b"")).get("Bundle-Format") == bc.FORMAT


def _load(b, t, rel: str, schema: str):
    raw = b.files.get(f"data/{rel}")
    if raw is None:
        t.fail(f"data/{rel}", "missing")
        return None
    try:
        doc = jsonio.loads_strict(raw, f"data/{rel}", max_bytes=MAX_DOCUMENT_BYTES)
    except UnreadableInputError as exc:
        t.fail(f"data/{rel}", exc.message)
        return None
    if jsonio.dumps(doc).encode("ascii") != raw:
        t.fail(f"data/{rel}", "not in the canonical JSON form the packer writes (sorted keys, two-space indent, ASCII)")
        return None
    problems = schemas.validate(doc, schema)
    for p in problems[:20]:
        t.fail(f"data/{rel}", getattr(p, "message", str(p)), path=getattr(p, "path", None))
    return None if problems else doc


_NOTE = re.compile(r"^(candidate [A-Za-z][A-Za-z0-9_]{0,39}: verdicts derived again by this packer differ from the "
                   r"run's: [A-Za-z0-9_ ,>-]{1,300}|\d{1,3} claim\(s\) added by the author \(--claims\), judged by this "
                   r"product's evaluator on the author's definitions)$")


def bundle_meta(b, t) -> None:
    """Tier 3's first gate: ``data/bundle.json`` in the packer's canonical form and valid against
    the candidate bundle's schema, agreeing with bag-info.txt, of a format this verifier reads,
    listing the documents a candidate bundle holds. Sets ``b.meta``."""
    meta = _load(b, t, "bundle.json", "candidate-bundle")
    if meta is None:
        return
    b.meta = meta
    info = bag_info(b.files.get("bag-info.txt", b""))
    for key, want in (("External-Identifier", meta["name"]), ("Bundle-Format", meta["format"]),
                      ("Bundle-Format-Version", str(meta["format_version"])), ("Source", meta["source"]),
                      ("Study", f"{bc.KIND} ({meta['profile']})")):
        if info.get(key) != want:
            t.fail("bag-info.txt", f"bag-info.txt {key} differs from bundle.json", expected=want, found=info.get(key))
    if meta["format_version"] not in bc.DOC_VERSIONS:
        t.fail("data/bundle.json", f"candidate bundle format {meta['format_version']} is not one this verifier reads",
               path="$.format_version")
        return
    if meta["documents"] != bc.DOCUMENTS:
        t.fail("data/bundle.json", "lists other documents than a candidate bundle holds", path="$.documents",
               expected=bc.DOCUMENTS, found=meta["documents"])


def documents(b, t) -> None:
    """Tier 3's second gate: ``results/candidates.json`` and ``results/environment.json`` in
    canonical form and valid against their schemas, candidates.json of the schema version the
    format holds, read into typed records (:func:`kbrepro.bundle.candidate_records.load`, whose
    rules judge each record), its candidates the ones bundle.json lists, each name once. Sets
    ``b.documents`` and ``b.candidates`` (the loaded records)."""
    meta = b.meta
    doc = _load(b, t, "results/candidates.json", "candidates")
    env = _load(b, t, "results/environment.json", "environment")
    if doc is None or env is None:
        return
    if doc.get("schema_version") not in bc.DOC_VERSIONS[meta["format_version"]]:
        t.fail("data/results/candidates.json", f"schema version {doc.get('schema_version')} is not what a candidate "
               f"bundle of format {meta['format_version']} holds", path="$.schema_version",
               expected=list(bc.DOC_VERSIONS[meta["format_version"]]), found=doc.get("schema_version"))
        return
    pin = load_pin()

    def task_source(rec):  # the bundle's task file, where it is the pinned one (otherwise failed below)
        data = b.files.get(f"data/inputs/kernelbench/{rec.task}")
        return data if data is not None and pin.files.get(rec.task) == _sha(data) else None

    loaded = candidate_records.load(doc, b.files, task_source, prefix="data/")
    if loaded.doc is None:  # no typed record: nothing after this can be judged
        _record_problems(t, loaded)
        return
    names = [c["name"] for c in meta["candidates"]]
    if len(set(names)) != len(names):
        t.fail("data/bundle.json", "two candidates carry the same name", path="$.candidates")
        return
    if names != [r["name"] for r in doc["candidates"]]:
        t.fail("data/bundle.json", "the candidates listed differ from those in results/candidates.json",
               path="$.candidates", expected=[r["name"] for r in doc["candidates"]], found=names)
        return
    b.documents = {"candidates": doc, "environment": env}
    b.candidates = loaded
    t.details["candidates"] = names
    t.details["documents"] = ["bundle", "candidates", "environment"]


def _record_problems(t, loaded) -> None:
    for p in loaded.problems:
        t.fail("data/results/candidates.json", p.message, path=p.path, expected=p.expected, found=p.found)


def record_rules(b, t) -> None:
    """What the typed records' own rules find (:mod:`kbrepro.model.candidate_rules`: each
    record against its observations, its profile and its provenance files)."""
    _record_problems(t, b.candidates)


def meta_agreement(b, t) -> None:
    """bundle.json against the results: the profile, the product environment.json records, the
    claims file's hash, notes only of the kinds the packer writes, KernelBench at this
    verifier's pin (and its LICENSE), each candidate's file, task and hashes."""
    meta, doc, env = b.meta, b.documents["candidates"], b.documents["environment"]
    pin = load_pin()
    if meta["profile"] != doc["profile"]:
        t.fail("data/bundle.json", "the profile differs from the results'", path="$.profile", expected=doc["profile"],
               found=meta["profile"])
    fields = env.get("fields") or {}
    want_product = {"version": (fields.get("product_version") or {}).get("value"),
                    "commit": (fields.get("product_commit") or {}).get("value")}
    if meta["product"] != want_product:
        t.fail("data/bundle.json", "the product named is not the one environment.json records", path="$.product",
               expected=want_product, found=meta["product"])
    if meta["claims"]["sha256"] != _sha(b.files.get("data/inputs/claims.yaml", b"")):
        t.fail("data/bundle.json", "the claims file's hash is not the one listed", path="$.claims.sha256")
    for n in meta["notes"]:
        if not _NOTE.match(n):
            t.fail("data/bundle.json", f"a note the packer does not write: {safe_text(n, 120)}", path="$.notes")
    if doc["kernelbench"]["commit"] != pin.commit or meta["kernelbench"]["commit"] != pin.commit:
        t.fail("data/results/candidates.json", "KernelBench is not at the commit this verifier pins",
               path="$.kernelbench.commit", expected=pin.commit, found=doc["kernelbench"]["commit"])
    lic = b.files.get("data/inputs/kernelbench/LICENSE")
    if lic is None or _sha(lic) != pin.files.get("LICENSE"):
        t.fail("data/inputs/kernelbench/LICENSE", "missing or not KernelBench's LICENSE at the pinned commit")
    recs = {r["name"]: r for r in doc["candidates"]}
    for m in meta["candidates"]:
        r = recs[m["name"]]
        for k_meta, k_rec in (("file", "file"), ("sha256", "source_sha256"), ("task", "task"),
                              ("task_sha256", "task_sha256")):
            if m[k_meta] != r[k_rec]:
                t.fail("data/bundle.json", f"candidate {m['name']}: {k_meta} differs from results/candidates.json",
                       path="$.candidates", expected=r[k_rec], found=m[k_meta])


def candidate_inputs(b, t) -> None:
    """Each candidate's file is the one that ran (its sha256), where the packer keeps it; its
    task a KernelBench task of this verifier's pin, carried byte for byte."""
    pin = load_pin()
    for i, r in enumerate(b.documents["candidates"]["candidates"]):
        if r["file"] != f"inputs/candidates/{r['name']}.py":
            t.fail("data/results/candidates.json", f"candidate {r['name']} is not at inputs/candidates/{r['name']}.py")
        src = b.files.get(f"data/{r['file']}")
        if src is None or _sha(src) != r["source_sha256"]:
            t.fail(f"data/{r['file']}", "the candidate file is missing or is not the one that ran")
        own = pin.files.get(r["task"])
        if not TASK_PATH.match(r["task"]):
            t.fail("data/results/candidates.json", f"task {safe_text(r['task'])} is not a KernelBench task (a level's "
                   "task or an example model of the pin)", path=f"$.candidates[{i}].task")
            continue
        if own is None:
            t.fail("data/results/candidates.json", f"task {safe_text(r['task'])} is not a file of this verifier's "
                   "KernelBench pin", path="$.candidates")
        elif r["task_sha256"] != own:
            t.fail("data/results/candidates.json", f"task {r['task']} is not the pinned file", expected=own,
                   found=r["task_sha256"])
        tsrc = b.files.get(f"data/inputs/kernelbench/{r['task']}")
        if tsrc is None or _sha(tsrc) != own:
            t.fail(f"data/inputs/kernelbench/{r['task']}", "the task file is missing or is not the pinned file")


def derived_verdicts(b, t) -> None:
    """Every named check's verdict derived again from the recorded observations with this
    verifier's rules (:mod:`kbrepro.harness.cheats`), equal to the recorded one, one per check."""
    for i, r in enumerate(b.documents["candidates"]["candidates"]):
        derived = [v.to_doc() for v in b.candidates.verdicts.get(r["name"], ())]
        for k, (want, got) in enumerate(zip(derived, r["verdicts"])):
            if want != got:
                t.fail("data/results/candidates.json", f"candidate {r['name']}: the recorded verdict of {want['name']} "
                       "is not what its observations give", path=f"$.candidates[{i}].verdicts[{k}]",
                       expected=want, found=got)
        if len(derived) != len(r["verdicts"]):
            t.fail("data/results/candidates.json", f"candidate {r['name']}: {len(r['verdicts'])} verdicts recorded, "
                   f"{len(derived)} checks derived")


def provenance_files(b, t) -> None:
    """Each candidate's provenance files kept where the packer keeps them, its SASS listings in
    its own folder, and ``built_with`` what its provenance shows (load_inline builds, Triton cubins)."""
    for r in b.documents["candidates"]["candidates"]:
        prov = r["provenance"]
        for f in prov["files"]:
            if f.get("copied"):
                want = f"provenance/{r['name']}/{bc.safe_relpath(str(f['path']))}"
                if f.get("bundle_path") != want:
                    t.fail("data/results/candidates.json", f"candidate {r['name']}: provenance file "
                           f"{safe_text(f['path'])} is not kept where the packer keeps it", expected=want,
                           found=f.get("bundle_path"))
        for bin_ in prov.get("binaries") or []:
            if isinstance(bin_, dict) and isinstance(bin_.get("sass_file"), str) \
                    and not bin_["sass_file"].startswith(f"provenance/{r['name']}/sass/"):
                t.fail("data/results/candidates.json", f"candidate {r['name']}: a SASS file outside its "
                       f"provenance/{r['name']}/sass/ folder", found=bin_["sass_file"])
        built = sorted({"load_inline" for _ in prov.get("builds") or []} | {
            "triton" for f in prov["files"] if str(f.get("path", "")).startswith("triton/")
            and str(f.get("path", "")).endswith(".cubin")})
        if prov.get("built_with") != built:
            t.fail("data/results/candidates.json", f"candidate {r['name']}: built_with is not what its provenance files "
                   "show", expected=built, found=prov.get("built_with"))


def _packed_files(b) -> set[str]:
    """The bag paths a candidate bundle of these records may hold: its documents and inputs, each
    candidate's file, task and provenance files, the RO-Crate file where the format has it."""
    allowed = {"data/bundle.json", "data/claims.json", "data/REPORT.md", "data/inputs/claims.yaml",
               "data/results/candidates.json", "data/results/environment.json", "data/inputs/kernelbench/LICENSE"}
    if b.has_crate:
        allowed.add(f"data/{CRATE_FILE}")
    for r in b.documents["candidates"]["candidates"]:
        allowed.add(f"data/{r['file']}")
        if not TASK_PATH.match(r["task"]):
            continue
        allowed.add(f"data/inputs/kernelbench/{r['task']}")
        for f in r["provenance"]["files"]:
            if f.get("copied"):
                allowed.add(f"data/provenance/{r['name']}/{bc.safe_relpath(str(f['path']))}")
        for bin_ in r["provenance"].get("binaries") or []:
            if isinstance(bin_, dict) and isinstance(bin_.get("sass_file"), str) \
                    and bin_["sass_file"].startswith(f"provenance/{r['name']}/sass/"):
                allowed.add(f"data/{bin_['sass_file']}")
    return allowed


def bag_layout(b, t) -> None:
    """The bag holds exactly the packer's files (:func:`_packed_files`), no renderings, and
    bundle.json lists exactly the KernelBench files it carries."""
    want_kb = {p[len("data/inputs/kernelbench/"):]: _sha(v) for p, v in b.files.items()
               if p.startswith("data/inputs/kernelbench/")}
    if b.meta["kernelbench"]["files"] != dict(sorted(want_kb.items())):
        t.fail("data/bundle.json", "the KernelBench files listed are not the ones in the bag", path="$.kernelbench.files")
    allowed = _packed_files(b)
    stray = sorted(p for p in b.files if p.startswith("data/") and p not in allowed)
    for p in stray[:20]:
        t.fail(p, "a file a candidate bundle does not hold (not a listed input, result or provenance file)")
    for p in sorted(p for p in b.files if p.startswith("renderings/"))[:20]:
        t.fail(p, "a candidate bundle has no renderings: its packer draws no figures, so nothing here is a picture "
               "of its data")


def sharded_cases(b, t) -> None:
    """The cases of a sharded run (:func:`kbrepro.bundle.case_records.case_problems`); failed
    cases are named and make the result partial."""
    doc = b.documents["candidates"]
    for path, msg in case_records.case_problems(doc, lambda task: b.files.get(f"data/inputs/kernelbench/{task}")):
        t.fail("data/results/candidates.json", f"the cases of a sharded run: {msg}", path=path)
    failed = [c for c in doc.get("cases") or [] if isinstance(c, dict) and c.get("status") == "failed"]
    if failed:
        t.notes.append(f"{len(failed)} of {len(doc['cases'])} cases failed and hold no results (REPORT.md, "
                       "'Where each case ran', lists them)")
        b.partial.append(f"{len(failed)} of {len(doc['cases'])} cases of the sharded run failed: their candidates "
                         "were not checked")


def where_it_ran(b, t) -> None:
    """What the run could not decide, said and made partial: a CPU run's missing timing,
    profiler and poisoned allocator; protocol 1's limit; each GPU check that could not decide
    (:func:`undecided`)."""
    doc = b.documents["candidates"]
    if doc.get("device", "cuda") != "cuda":
        b.partial.append("the candidates ran without a GPU: no timing, no profiler, no poisoned allocator")
        return
    if b.candidates.doc.schema_version < 2:
        t.notes.append("timing protocol 1 (candidate bundle format 2 or 3): timed outputs are spot-checked, not "
                       "all held against the reference; a candidate that tells its timed calls from its checked "
                       "ones can gain speed unseen (docs/checks.md, the limits of protocol 1)")
    for name, why in undecided(b.candidates):
        t.notes.append(f"candidate {name}: {why}")
        b.partial.append(f"candidate {name}: {why}")


def check_arithmetic(b, t) -> None:
    """Every check record's statistics consistent with one another under the predicates'
    definitions (:func:`kbrepro.bundle.crosscheck.check_arithmetic`), at the recorded tolerances."""
    pred = b.candidates.doc.predicate
    for p in crosscheck.check_arithmetic({"correctness": b.documents["candidates"]}, float(pred.atol),
                                         float(pred.rtol)):
        t.add(dataclasses.replace(p, file="data/results/candidates.json"))


def undecided(loaded) -> list[tuple[str, str]]:
    """``(candidate, why)`` for every named check of a GPU run that cannot decide, except where
    the record itself says why it cannot apply: a candidate that did not run (``ran`` fails:
    it is caught), and ``other_shapes_correct`` on a task with no size to vary (the rule gives
    no extra shape and the user named none). A run that left its extra shape out
    (``config.no_extra_shape``: the reference raised there) is not such a task: the reason is the
    run's word, which no static check can repeat, so its undecided check stays. Each makes the
    verdict PARTIAL (fail closed: an undecided check is never a pass)."""
    out = []
    for rec in loaded.doc.candidates:
        vs = loaded.verdicts[rec.name]
        if vs and vs[0].passed is False:
            continue
        no_shape = rec.observations.extra_shapes is not None and not rec.observations.extra_shapes \
            and not rec.config.no_extra_shape
        for v in vs:
            if v.passed is None and not (v.name == "other_shapes_correct" and no_shape):
                out.append((rec.name, f"{v.name} cannot decide ({v.detail[:160]})"))
    return out


def _sha(data: bytes) -> str:
    """sha256 hex of ``data``."""
    return hashlib.sha256(data).hexdigest()


def tier_provenance(b, t) -> None:
    """Tier 4: every provenance file the record lists is in the bag with its hash; SASS FTZ
    evidence counted again from the bundled SASS."""
    doc = b.documents["candidates"]
    n = 0
    for i, r in enumerate(doc["candidates"]):
        for f in r["provenance"]["files"]:
            if not f.get("copied"):
                continue
            rel = f"data/{f.get('bundle_path')}"
            data = b.files.get(rel)
            if data is None or _sha(data) != f["sha256"] or len(data) != f["bytes"]:
                t.fail(rel, "a provenance file is missing or differs from its record", expected=f["sha256"])
            n += 1
        for bin_ in r["provenance"].get("binaries") or []:
            if not isinstance(bin_, dict) or not isinstance(bin_.get("sass_file"), str):
                continue
            data = b.files.get(f"data/{bin_['sass_file']}")
            if data is None or _sha(data) != bin_.get("sass_sha256"):
                t.fail(f"data/{bin_['sass_file']}", "the SASS listed is missing or differs from its hash")
                continue
            counts = sass_ftz_counts(data.decode("utf-8", "replace"))
            if counts != bin_.get("ftz_counts") or sass_says_ftz(counts) != bin_.get("sass_says_ftz"):
                t.fail("data/results/candidates.json", f"candidate {r['name']}: the FTZ evidence of {bin_.get('file')} "
                       "is not what its SASS shows", path=f"$.candidates[{i}].provenance.binaries",
                       expected={"ftz_counts": counts, "sass_says_ftz": sass_says_ftz(counts)},
                       found={"ftz_counts": bin_.get("ftz_counts"), "sass_says_ftz": bin_.get("sass_says_ftz")})
    t.details["provenance_files"] = n
    sass = sum(1 for r in doc["candidates"] for bin_ in (r.get("provenance") or {}).get("binaries") or []
               if isinstance(bin_, dict) and bin_.get("sass_file"))
    t.details["checked"] = ([f"{n} provenance files against their hashes"] if n else
                            ["no provenance files (the candidates built no GPU code here)"]) + (
        [f"FTZ evidence counted again from the SASS of {sass} binar{'y' if sass == 1 else 'ies'}"] if sass else [])


def claims_check(b, t) -> None:
    """The default claims written again and compared, every claim evaluated again,
    claims.json and REPORT.md compared with what this verifier writes."""
    doc = b.documents["candidates"]
    raw = b.files.get("data/inputs/claims.yaml")
    if raw is None:
        t.fail("data/inputs/claims.yaml", "missing")
        return
    try:
        spec = claims_mod.parse_spec(raw, "data/inputs/claims.yaml", claims_mod.record_count(b.documents))
    except ReproError as exc:
        t.fail("data/inputs/claims.yaml", exc.message)
        return
    if raw != bc.spec_yaml(spec):
        t.fail("data/inputs/claims.yaml", "not in the canonical form the packer writes (sorted-key JSON, no comments)")
        return
    own = bc.default_claims(doc, b.meta.get("format_version"))
    n = len(own["claims"])
    ids = [c["id"] for c in spec["claims"]]
    if len(set(ids)) != len(ids):
        t.fail("data/inputs/claims.yaml", "two claims carry the same id (the last would decide for both)")
        return
    head = {**spec, "claims": spec["claims"][:n]}
    if json.loads(json.dumps(head)) != own:
        t.fail("data/inputs/claims.yaml", "the default claims are not the ones this verifier writes from the data "
               "(a default claim was edited, dropped or reordered)")
        return
    extra = spec["claims"][n:]
    if len(extra) != b.meta["claims"]["extra"] or n != b.meta["claims"]["defaults"]:
        t.fail("data/bundle.json", "the counts of default and extra claims differ from the claims file",
               path="$.claims", expected={"defaults": n, "extra": len(extra)},
               found={"defaults": b.meta["claims"]["defaults"], "extra": b.meta["claims"]["extra"]})
    if extra:
        b.partial.append(f"{len(extra)} claim(s) defined by the bundle's author ({', '.join(c['id'] for c in extra[:5])}) "
                         "were judged by their own definitions")
    try:
        mine = claims_mod.evaluate(spec, b.documents, source="recorded")
    except ReproError as exc:
        t.fail("data/inputs/claims.yaml", exc.message)
        return
    mine["spec"] = {"file": "inputs/claims.yaml", "sha256": claims_mod.spec_sha256(raw)}
    try:
        recorded = jsonio.loads_strict(b.files.get("data/claims.json", b"null"), "data/claims.json")
    except UnreadableInputError as exc:
        t.fail("data/claims.json", exc.message)
        return
    if jsonio.dumps(mine) != jsonio.dumps(recorded):
        for p in claims_mod.compare_verdicts(recorded if isinstance(recorded, dict) else {}, mine)[:10] or \
                ["claims.json differs from the claims this verifier evaluates"]:
            t.fail("data/claims.json", p)
    report = bc.render_report(b.meta, doc, mine).encode()
    if b.files.get("data/REPORT.md") != report:
        t.fail("data/REPORT.md", "REPORT.md is not the report this verifier renders from the documents")
    got = b.files.get(pack.SUMMARY)
    if got is not None and got != post_summary(b.meta, b.documents, json.loads(jsonio.dumps(mine)), b.digest,
                                               frozenset(c["id"] for c in own["claims"])).encode():
        t.fail(pack.SUMMARY, "is not the five-line summary this verifier writes from the records and the digest")
    statements_check(b, t, b.documents, json.loads(jsonio.dumps(mine)))
    t.details["claims"] = mine["summary"]
    t.details["verdicts"] = {c["id"]: c["verdict"] for c in mine["claims"]}
    t.details["caught"] = {k: v for k, v in bc.caught(doc).items() if v}
    t.notes.append("claims: " + ", ".join(f"{k} {v}" for k, v in mine["summary"].items() if v)
                   + " (a PASS says every verdict was derived again from the data; a claim may still fail)")
    failing = [c["id"] for c in mine["claims"] if c["verdict"] != "holds"]
    if failing:
        t.notes.append("claims that do not hold: " + ", ".join(f"{c['id']} {c['verdict']}" for c in mine["claims"]
                                                              if c["verdict"] != "holds"))
    for k, v in t.details["caught"].items():
        t.notes.append(f"candidate {k} did not run (its build or first call failed; the bundle is genuine)"
                       if v == ["ran"] else f"candidate {k} was CAUGHT by {', '.join(v)} (the bundle is genuine; the "
                       "candidate cheats or is wrong)")


def _median_ratios(doc: dict) -> dict[tuple[str, str, str], float]:
    """(candidate, L2 state, arm) -> the median of the paired per-round ratios candidate / arm."""
    out = {}
    for r in doc.get("candidates") or []:
        for blk in r.get("blocks") or []:
            for arm in blk.get("arms") or []:
                if arm != "candidate":
                    rs = stats.paired_ratios(blk, "candidate", arm)
                    if rs:
                        out[(r["name"], blk.get("l2"), arm)] = statistics.median(rs)
    return out


def tier_replay(b, t, *, trust: bool, kernelbench: str | None, ratio_tolerance: float = 0.05,
                progress: Callable | None = None) -> None:
    """Tier 6: run every candidate again on this GPU (each in its own child) with the recorded
    profile, and compare. Fails where a named check that decided flips (True to False or
    False to True: a candidate caught on replay, or one that now passes) and where a claim's
    verdict changes; a check that decides on one side only, and the median ratios
    candidate / arm (listed in ``details``, those that moved by more than ``ratio_tolerance``
    relative in a note), are reported, not failed: the claims judge the timings."""
    if not trust:
        t.status = "SKIP"
        t.notes.append("replay runs the bundle's candidate code: pass --trust-bundle-code to run it (isolated in a "
                       "child process; see docs/checks.md for running it in a container)")
        b.partial.append("the candidates were not replayed (their code runs only with --trust-bundle-code)")
        return
    doc = b.documents["candidates"]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kbrepro-replay-") as tmp:
        items = [(b.root / "data" / r["file"], r["task"]) for r in doc["candidates"]]
        say = (lambda m: progress({"stage": "candidate", "event": "step", "message": m,
                                   "elapsed_s": time.perf_counter() - t0})) if progress else None
        # the run's own sizes and extra shapes (the user's options, recorded in every record's configuration)
        cfg0 = doc["candidates"][0]["config"] if doc["candidates"] else {}
        sizes = {}  # the user's sizes, each applied to the tasks that name it: their union
        for r in doc["candidates"]:
            sizes.update(r["config"].get("sizes") if isinstance(r["config"].get("sizes"), dict) else {})
        shapes = tuple(x for x in cfg0.get("extra_shapes") or [] if isinstance(x, dict))
        if any(r["config"].get("extra_shapes") != cfg0.get("extra_shapes") for r in doc["candidates"]):
            shapes = ()  # shapes the run chose per task (the reference raised at the default): it chooses again
        bc.run_candidates(items, profile=doc["profile"], kernelbench=kernelbench, results_dir=Path(tmp), progress=say,
                          sizes=sizes or None, extra_shapes=shapes, names=[r["name"] for r in doc["candidates"]])
        again = jsonio.loads_strict((Path(tmp) / "results" / "candidates.json").read_bytes(), "replayed results")
        env_file = Path(tmp) / "results" / "environment.json"
        env_again = jsonio.loads_strict(env_file.read_bytes(), "replayed environment") if env_file.is_file() else {}
    changes = []
    for old, new in zip(doc["candidates"], again["candidates"]):
        for vo, vn in zip(old["verdicts"], new["verdicts"]):
            if vo["passed"] == vn["passed"]:
                continue
            changes.append({"candidate": old["name"], "check": vo["name"], "recorded": vo["passed"],
                            "replayed": vn["passed"], "detail": vn["detail"]})
            if None in (vo["passed"], vn["passed"]):
                t.notes.append(f"candidate {old['name']}: {vo['name']} decided only "
                               f"{'when packed' if vn['passed'] is None else 'on replay'}: {vn['detail']}")
            else:
                t.fail("data/results/candidates.json", f"candidate {old['name']}: {vo['name']} was "
                       f"{'pass' if vo['passed'] else 'FAIL'} when packed and is {'pass' if vn['passed'] else 'FAIL'} "
                       f"on replay: {vn['detail']}")
    mine = claims_mod.evaluate(claims_mod.parse_spec(b.files["data/inputs/claims.yaml"], "claims",
                                                     claims_mod.record_count(b.documents)),
                               {"candidates": again, "environment": {}}, source="replayed")
    rec = {c["id"]: c["verdict"] for c in json.loads(b.files["data/claims.json"])["claims"]}
    before, after = _median_ratios(doc), _median_ratios(again)
    ratios = [{"candidate": k[0], "l2": k[1], "arm": k[2], "recorded": before[k], "replayed": after.get(k)}
              for k in sorted(before)]
    moved = [r for r in ratios if r["replayed"] is None or abs(r["replayed"] / r["recorded"] - 1) > ratio_tolerance]
    claim_changes = [{"id": c["id"], "recorded": rec.get(c["id"]), "replayed": c["verdict"],
                      "change": claim_change(rec.get(c["id"]), c["verdict"], same_profile=True,
                                             ratios_reproduce=not moved)}
                     for c in mine["claims"] if rec.get(c["id"]) != c["verdict"]]
    for c in claim_changes:
        if c["change"] == "contradicts":
            t.fail("data/claims.json", f"claim {c['id']}: {c['recorded']} when packed, {c['replayed']} on replay")
        else:
            t.notes.append(f"claim {c['id']}: {c['recorded']} when packed, {c['replayed']} on replay (its interval "
                           f"fell on the other side of its threshold; every median ratio stayed within "
                           f"{ratio_tolerance:.0%})")
    if moved:
        t.notes.append(f"{len(moved)} of {len(ratios)} median ratios candidate / arm moved by more than "
                       f"{ratio_tolerance:.0%}: " + "; ".join(
                           f"{r['candidate']} / {r['arm']} ({r['l2']} L2) {r['recorded']:.4g} -> "
                           + (f"{r['replayed']:.4g}" if r["replayed"] is not None else "not timed") for r in moved[:4]))
    # every claim recorded against replayed, and this machine beside the recorded one: what a
    # replay matrix across GPU kinds is built from (python -m kbrepro.bundle.matrix)
    t.details["claims"] = [{"id": c["id"], "recorded": rec.get(c["id"]), "replayed": c["verdict"],
                            "sentence": c["sentence"]} for c in mine["claims"]]
    t.details["environment"] = environment_diff(b.documents.get("environment") or {}, env_again)
    t.details["profile"] = doc["profile"]
    t.details.update(check_changes=changes, claim_changes=claim_changes, ratios=ratios,
                     replayed_caught={k: v for k, v in bc.caught(again).items() if v},
                     replay_seconds=round(time.perf_counter() - t0, 1))


__all__ = ["is_candidate_bundle", "bundle_meta", "documents", "record_rules", "meta_agreement", "candidate_inputs",
           "derived_verdicts", "provenance_files", "bag_layout", "sharded_cases", "where_it_ran", "check_arithmetic",
           "tier_provenance", "claims_check", "tier_replay"]
