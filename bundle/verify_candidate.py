"""Verification tiers 3 to 6 of a KernelBench-candidate bundle (``bundle.json`` format
``kbrepro-candidate-bundle``); tiers 1 and 2 (archive, manifest) are the generic ones of
:mod:`kbrepro.bundle.verify`.

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

import json
import tempfile
from pathlib import Path
from typing import Callable

from kbrepro.bundle import candidates as bc
from kbrepro.bundle import claims as claims_mod
from kbrepro.errors import ReproError, UnreadableInputError
from kbrepro.harness import jsonio

MAX_DOCUMENT_BYTES = 64 * 1024 * 1024
_CORRECTNESS_CHECKS = ("ran", "official_allclose", "other_shapes_correct", "redrawn_weights_correct",
                       "follows_fresh_inputs", "inputs_unchanged", "output_is_plain_tensor", "discriminates",
                       "deterministic_under_poison", "precision_flags_unchanged")


def is_candidate_bundle(files) -> bool:
    """Whether the bag's ``bag-info.txt`` names the candidate format (tier 1 accepted it;
    tier 3 checks that ``bundle.json`` says the same)."""
    from kbrepro.bundle.verify import _bag_info

    return _bag_info(files.get("bag-info.txt", b"")).get("Bundle-Format") == bc.FORMAT


def _load(b, t, rel: str, schema: str):
    from kbrepro import schemas

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


def tier_documents(b, t) -> None:
    """Tier 3: metadata, documents, inputs against the product's pin, derived verdicts, check arithmetic."""
    from kbrepro.bundle import crosscheck
    from kbrepro.bundle.verify import _bag_info, safe_text
    from kbrepro.harness import cheats
    from kbrepro.harness.kernelbench import load_pin

    meta = _load(b, t, "bundle.json", "candidate-bundle")
    if meta is None:
        return
    b.meta = meta
    info = _bag_info(b.files.get("bag-info.txt", b""))
    for key, want in (("External-Identifier", meta["name"]), ("Bundle-Format", meta["format"]),
                      ("Bundle-Format-Version", str(meta["format_version"])), ("Source", meta["source"]),
                      ("Study", f"{bc.KIND} ({meta['profile']})")):
        if info.get(key) != want:
            t.fail("bag-info.txt", f"bag-info.txt {key} differs from bundle.json", expected=want, found=info.get(key))
    if meta["documents"] != bc.DOCUMENTS:
        t.fail("data/bundle.json", "lists other documents than a candidate bundle holds", path="$.documents",
               expected=bc.DOCUMENTS, found=meta["documents"])
    doc = _load(b, t, "results/candidates.json", "candidates")
    env = _load(b, t, "results/environment.json", "environment")
    if doc is None or env is None:
        return
    pin = load_pin()
    names = [c["name"] for c in meta["candidates"]]
    recs = {r["name"]: r for r in doc["candidates"]}
    if names != [r["name"] for r in doc["candidates"]]:
        t.fail("data/bundle.json", "the candidates listed differ from those in results/candidates.json",
               path="$.candidates", expected=[r["name"] for r in doc["candidates"]], found=names)
        return
    allowed = {"data/bundle.json", "data/claims.json", "data/REPORT.md", "data/inputs/claims.yaml",
               "data/results/candidates.json", "data/results/environment.json", "data/inputs/kernelbench/LICENSE"}
    if doc["kernelbench"]["commit"] != pin.commit or meta["kernelbench"]["commit"] != pin.commit:
        t.fail("data/results/candidates.json", "KernelBench is not at the commit this verifier pins",
               path="$.kernelbench.commit", expected=pin.commit, found=doc["kernelbench"]["commit"])
    lic = b.files.get("data/inputs/kernelbench/LICENSE")
    if lic is None or crosscheck_sha(lic) != pin.files.get("LICENSE"):
        t.fail("data/inputs/kernelbench/LICENSE", "missing or not KernelBench's LICENSE at the pinned commit")
    for m in meta["candidates"]:
        r = recs[m["name"]]
        for k_meta, k_rec in (("file", "file"), ("sha256", "source_sha256"), ("task", "task"),
                              ("task_sha256", "task_sha256")):
            if m[k_meta] != r[k_rec]:
                t.fail("data/bundle.json", f"candidate {m['name']}: {k_meta} differs from results/candidates.json",
                       path="$.candidates", expected=r[k_rec], found=m[k_meta])
        if r["file"] != f"inputs/candidates/{r['name']}.py":
            t.fail("data/results/candidates.json", f"candidate {r['name']} is not at inputs/candidates/{r['name']}.py")
        src = b.files.get(f"data/{r['file']}")
        if src is None or crosscheck_sha(src) != r["source_sha256"]:
            t.fail(f"data/{r['file']}", "the candidate file is missing or is not the one that ran")
        allowed.add(f"data/{r['file']}")
        own = pin.files.get(r["task"])
        if own is None:
            t.fail("data/results/candidates.json", f"task {safe_text(r['task'])} is not a file of this verifier's "
                   "KernelBench pin", path="$.candidates")
        elif r["task_sha256"] != own:
            t.fail("data/results/candidates.json", f"task {r['task']} is not the pinned file", expected=own,
                   found=r["task_sha256"])
        tsrc = b.files.get(f"data/inputs/kernelbench/{r['task']}")
        if tsrc is None or crosscheck_sha(tsrc) != own:
            t.fail(f"data/inputs/kernelbench/{r['task']}", "the task file is missing or is not the pinned file")
        allowed.add(f"data/inputs/kernelbench/{r['task']}")
        derived = [v.to_doc() for v in cheats.derive(r["observations"], r["timing"], r["blocks"],
                                                      doc["predicate"]["atol"], doc["predicate"]["rtol"])]
        for i, (want, got) in enumerate(zip(derived, r["verdicts"])):
            if want != got:
                t.fail("data/results/candidates.json", f"candidate {r['name']}: the recorded verdict of {want['name']} "
                       "is not what its observations give", path=f"$.candidates[{names.index(r['name'])}].verdicts[{i}]",
                       expected=want, found=got)
        if len(derived) != len(r["verdicts"]):
            t.fail("data/results/candidates.json", f"candidate {r['name']}: {len(r['verdicts'])} verdicts recorded, "
                   f"{len(derived)} checks derived")
        for f in r["provenance"]["files"]:
            if f.get("copied"):
                want = f"provenance/{r['name']}/{bc.safe_relpath(str(f['path']))}"
                if f.get("bundle_path") != want:
                    t.fail("data/results/candidates.json", f"candidate {r['name']}: provenance file "
                           f"{safe_text(f['path'])} is not kept where the packer keeps it", expected=want,
                           found=f.get("bundle_path"))
                allowed.add(f"data/{want}")
        for bin_ in r["provenance"].get("binaries") or []:
            if isinstance(bin_, dict) and isinstance(bin_.get("sass_file"), str):
                allowed.add(f"data/{bin_['sass_file']}")
    want_kb = {p[len("data/inputs/kernelbench/"):]: crosscheck_sha(v) for p, v in b.files.items()
               if p.startswith("data/inputs/kernelbench/")}
    if meta["kernelbench"]["files"] != dict(sorted(want_kb.items())):
        t.fail("data/bundle.json", "the KernelBench files listed are not the ones in the bag", path="$.kernelbench.files")
    stray = sorted(p for p in b.files if p.startswith("data/") and p not in allowed)
    for p in stray[:20]:
        t.fail(p, "a file a candidate bundle does not hold (not a listed input, result or provenance file)")
    for p in crosscheck._check_arithmetic({"correctness": doc}):
        t.fail("data/results/candidates.json", p["message"], path=p.get("path"), expected=p.get("expected"),
               found=p.get("found"))
    b.documents = {"candidates": doc, "environment": env}
    t.details["candidates"] = names


def crosscheck_sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def tier_provenance(b, t) -> None:
    """Tier 4: every provenance file the record lists is in the bag with its hash; SASS FTZ
    evidence counted again from the bundled SASS."""
    from kbrepro.kernels.compile import sass_ftz_counts, sass_says_ftz

    doc = b.documents["candidates"]
    n = 0
    for i, r in enumerate(doc["candidates"]):
        for f in r["provenance"]["files"]:
            if not f.get("copied"):
                continue
            rel = f"data/{f.get('bundle_path')}"
            data = b.files.get(rel)
            if data is None or crosscheck_sha(data) != f["sha256"] or len(data) != f["bytes"]:
                t.fail(rel, "a provenance file is missing or differs from its record", expected=f["sha256"])
            n += 1
        for bin_ in r["provenance"].get("binaries") or []:
            if not isinstance(bin_, dict) or not isinstance(bin_.get("sass_file"), str):
                continue
            data = b.files.get(f"data/{bin_['sass_file']}")
            if data is None or crosscheck_sha(data) != bin_.get("sass_sha256"):
                t.fail(f"data/{bin_['sass_file']}", "the SASS listed is missing or differs from its hash")
                continue
            counts = sass_ftz_counts(data.decode("utf-8", "replace"))
            if counts != bin_.get("ftz_counts") or sass_says_ftz(counts) != bin_.get("sass_says_ftz"):
                t.fail("data/results/candidates.json", f"candidate {r['name']}: the FTZ evidence of {bin_.get('file')} "
                       "is not what its SASS shows", path=f"$.candidates[{i}].provenance.binaries",
                       expected={"ftz_counts": counts, "sass_says_ftz": sass_says_ftz(counts)},
                       found={"ftz_counts": bin_.get("ftz_counts"), "sass_says_ftz": bin_.get("sass_says_ftz")})
    t.details["provenance_files"] = n


def tier_claims(b, t) -> None:
    """Tier 5: the default claims written again and compared, every claim evaluated again,
    claims.json and REPORT.md compared with what this verifier writes."""
    doc = b.documents["candidates"]
    raw = b.files.get("data/inputs/claims.yaml")
    if raw is None:
        t.fail("data/inputs/claims.yaml", "missing")
        return
    try:
        spec = claims_mod.parse_spec(raw, "data/inputs/claims.yaml")
    except ReproError as exc:
        t.fail("data/inputs/claims.yaml", exc.message)
        return
    own = bc.default_claims(doc)
    n = len(own["claims"])
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
    t.details["claims"] = mine["summary"]
    t.details["caught"] = {k: v for k, v in bc.caught(doc).items() if v}
    t.notes.append("claims: " + ", ".join(f"{k} {v}" for k, v in mine["summary"].items() if v))
    for k, v in t.details["caught"].items():
        t.notes.append(f"candidate {k} was CAUGHT by {', '.join(v)} (the bundle is genuine; the candidate cheats "
                       "or is wrong)")


def tier_replay(b, t, *, trust: bool, kernelbench: str | None, progress: Callable | None = None) -> None:
    """Tier 6: run every candidate again on this GPU (each in its own child) with the recorded
    profile, and compare each named check's verdict and each claim's verdict."""
    from kbrepro.harness import cheats

    if not trust:
        t.status = "SKIP"
        t.notes.append("replay runs the bundle's candidate code: pass --trust-bundle-code to run it (isolated in a "
                       "child process; see the README for running it in a container)")
        b.partial.append("the candidates were not replayed (their code runs only with --trust-bundle-code)")
        return
    doc = b.documents["candidates"]
    with tempfile.TemporaryDirectory(prefix="kbrepro-replay-") as tmp:
        items = [(b.root / "data" / r["file"], r["task"]) for r in doc["candidates"]]
        say = (lambda m: progress({"stage": "replay", "event": "step", "message": m, "elapsed_s": 0.0})) \
            if progress else None
        bc.run_candidates(items, profile=doc["profile"], kernelbench=kernelbench, results_dir=Path(tmp), progress=say)
        again = jsonio.loads_strict((Path(tmp) / "results" / "candidates.json").read_bytes(), "replayed results")
    changes = []
    for old, new in zip(doc["candidates"], again["candidates"]):
        for vo, vn in zip(old["verdicts"], new["verdicts"]):
            if vo["passed"] != vn["passed"]:
                changes.append({"candidate": old["name"], "check": vo["name"], "recorded": vo["passed"],
                                "replayed": vn["passed"], "detail": vn["detail"]})
                if vo["name"] in _CORRECTNESS_CHECKS and None not in (vo["passed"], vn["passed"]):
                    t.fail("data/results/candidates.json", f"candidate {old['name']}: {vo['name']} was "
                           f"{vo['passed']} when packed and is {vn['passed']} on replay: {vn['detail']}")
    mine = claims_mod.evaluate(claims_mod.parse_spec(b.files["data/inputs/claims.yaml"], "claims"),
                               {"candidates": again, "environment": {}}, source="replayed")
    rec = {c["id"]: c["verdict"] for c in json.loads(b.files["data/claims.json"])["claims"]}
    t.details["check_changes"] = changes
    t.details["claim_changes"] = [{"id": c["id"], "recorded": rec.get(c["id"]), "replayed": c["verdict"]}
                                  for c in mine["claims"] if rec.get(c["id"]) != c["verdict"]]
    t.details["replayed_caught"] = {k: v for k, v in bc.caught(again).items() if v}
    del cheats


__all__ = ["is_candidate_bundle", "tier_documents", "tier_provenance", "tier_claims", "tier_replay"]
