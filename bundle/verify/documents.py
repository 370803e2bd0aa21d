"""Tier 3 of a study bundle, its first check: bundle.json, the study that judges the bundle
(:mod:`.study_definition`), then every document in strict, canonical JSON against the
verifier's own schemas and its own table of which document sits where. The checks after it
(:mod:`.checklist`) read the parsed documents from ``Bundle.documents``; their own agreement
checks are here too.
"""
from __future__ import annotations

import dataclasses
from kbrepro.bundle import crosscheck, validate
from kbrepro.bundle import documents as registry
from kbrepro.bundle.documents import DOC_PATHS, MAX_DOCUMENT_BYTES, OUR_DOCUMENTS, REQUIRED
from kbrepro.bundle.verify.core import Bundle, Tier, bag_info, safe_text
from kbrepro.bundle.verify.study_definition import author_schemas, study_definition, study_document_names
from kbrepro.errors import ReproError, UnreadableInputError
from kbrepro.model.documents import Records
from kbrepro.harness import jsonio


def parse_documents(b: Bundle, t: Tier) -> None:
    """The gate of tier 3: ``data/bundle.json`` against its schema, the study definition, the
    documents bundle.json lists against the verifier's own table, then each document read
    strictly (at most :data:`MAX_DOCUMENT_BYTES`), in the packer's canonical form and valid
    against the verifier's schemas, each once through :func:`kbrepro.bundle.documents.load`.
    Sets ``b.meta``, ``b.documents`` (name -> parsed document, the valid ones) and
    ``b.records`` (name -> typed record, :mod:`kbrepro.model.documents`); the tier's other
    checks run only when this adds no problem."""
    raw = b.files.get("data/bundle.json")
    if raw is None:
        t.fail("data/bundle.json", "missing bundle metadata")
        return
    # bundle.json is read as strict JSON, not required in the canonical form (formats 3 to 6
    # were verified so)
    loaded = registry.load("bundle", raw, canonical=False)
    for p in loaded.problems:
        t.add(p)
    if t.status == "FAIL":
        return
    meta = loaded.doc
    b.meta = meta
    # which study judges the bundle is decided first: the schemas of its documents are the
    # verifier's own plus (for a study it ships) the study's, from the verifier's own folder
    try:
        run_doc = jsonio.loads_strict(b.files.get("data/results/run.json", b"{}"), "data/results/run.json",
                                      max_bytes=MAX_DOCUMENT_BYTES)
    except UnreadableInputError:
        run_doc = {}
    run_doc = run_doc if isinstance(run_doc, dict) else {}
    if not isinstance(run_doc.get("study", {}), dict) or not isinstance((run_doc.get("study") or {}).get("files", {}),
                                                                         dict):
        t.fail("data/results/run.json", "the run's study record is not an object with a files mapping", path="$.study")
        return
    study_definition(b, t, run_doc)
    if t.status == "FAIL":
        return
    study_docs = study_document_names(b)
    if b.own_study is not None:
        try:
            extra = validate.study_schemas(b.own_study, b.binding)
        except ReproError as exc:
            t.fail(None, f"this verifier's own study {b.own_study.name} is broken: {exc.message}")
            return
    else:
        extra = author_schemas(b, t, study_docs)
    known = [*OUR_DOCUMENTS, *study_docs]
    # which document sits where, and which schema judges it, is the verifier's own table: the
    # bundle's list is compared with it, never used to pick a schema
    present = {n for n in known if f"data/{DOC_PATHS[n]}" in b.files}
    own_listing = {DOC_PATHS[n]: f"kbrepro/{n}" for n in sorted(present)}
    for rel, schema in sorted(meta["documents"].items()):
        if own_listing.get(rel) != schema:
            t.fail("data/bundle.json", f"lists {safe_text(rel)} as {safe_text(schema)}, which is not where this "
                   "verifier keeps that document" if rel not in own_listing else
                   f"lists {rel} as {safe_text(schema)}; this verifier reads it as {own_listing[rel]}",
                   path="$.documents", expected=own_listing.get(rel), found=schema)
    for rel in sorted(set(own_listing) - set(meta["documents"])):
        t.fail("data/bundle.json", f"{rel} is in the bag but not listed among its documents", path="$.documents")
    stray = sorted(p for p in b.files if p.startswith("data/results/") and p.endswith(".json")
                   and not p.startswith("data/results/originals/") and p[len("data/"):] not in own_listing)
    for p in stray:
        t.fail(p, "a results document this verifier does not know (not one of "
               + ", ".join(DOC_PATHS[n] for n in known) + ")")
    if meta.get("source") == "measured":
        for n in REQUIRED:
            if n not in present:
                t.fail(f"data/{DOC_PATHS[n]}", "a measured bundle must carry this document; it is missing")
    docs, records = {}, {"bundle": loaded.record}
    for name in [n for n in known if n in present] + ["claims"]:
        path = registry.bag_path(name)
        data = b.files.get(path)
        if data is None:
            t.fail(path, "missing")
            continue
        got = registry.load(name, data, extra)
        for p in got.problems:
            t.add(p)
        if not got.problems:
            docs[name] = got.doc
            if got.record is not None:
                records[name] = got.record
    b.records = Records(**records)
    b.documents = docs
    if t.status == "PASS":
        t.details["documents"] = sorted(docs)


def consistency_check(b: Bundle, t: Tier) -> None:
    """The documents' own cross-references (:func:`bundle.validate.consistency_problems`); the
    bundled files' hashes are tier 4's."""
    files = {k[len("data/"):]: v for k, v in b.files.items() if k.startswith("data/")}
    results_docs = {n: d for n, d in b.documents.items() if n != "claims"}
    for p in validate.consistency_problems(results_docs, files, file_hashes=False):
        t.add(dataclasses.replace(p, file="data/" + DOC_PATHS.get(p.file[: -len(".json")], p.file)))


def agreement_check(b: Bundle, t: Tier) -> None:
    """The documents against each other, bundle.json and bag-info.txt
    (:func:`bundle.crosscheck.document_problems`)."""
    for p in crosscheck.document_problems(b.documents, b.files, b.meta, bag_info(b.files.get("bag-info.txt", b"")),
                                          b.records):
        t.add(p)


def study_agreement_check(b: Bundle, t: Tier) -> None:
    """The documents against the study that judges them (:func:`bundle.crosscheck.study_problems`),
    where one does."""
    if b.study is not None:
        for p in crosscheck.study_problems(b.study, b.documents, b.records, b.binding):
            t.add(p)
