"""Which study definition judges a study bundle (tier 3, part of the documents gate): the
verifier's own copy of a study it ships, at the recorded profile, compared with the bundle's
study folder; else the author's definition, whose schemas can judge only what they are allowed
to (the result is then PARTIAL).
"""
from __future__ import annotations

import hashlib
import re
from typing import Mapping

from kbrepro import schemas
from kbrepro.bundle.documents import DOC_NAME, OUR_DOCUMENTS, study_documents
from kbrepro.harness import bounded, jsonio, plugin
from kbrepro.harness.study import load_study
from kbrepro.errors import (ReproError, UnreadableInputError)
from kbrepro.bundle.verify.core import Bundle, STUDY_PREFIX, Tier, safe_text, trusted_studies


def study_document_names(b: Bundle) -> list[str]:
    """The study's own document names: the verifier's binding's for a study it ships; for
    another study, the names bundle.json lists as ``kbrepro/<name>`` under ``results/``."""
    if b.binding is not None:
        return list(study_documents(b.binding))
    names = []
    for rel, schema in sorted((b.meta.get("documents") or {}).items()):
        n = str(schema).split("/", 1)[-1]
        if DOC_NAME.match(n) and n not in OUR_DOCUMENTS and n != "claims" and rel == f"results/{n}.json" \
                and str(schema) == f"kbrepro/{n}":
            names.append(n)
    return names


def author_schemas(b: Bundle, t: Tier, names: list[str]) -> dict[str, list[dict]]:
    """For a study the verifier does not ship: each study document's schema is the author's
    ``schemas/<name>.schema.json`` of the bundled study folder (the result becomes partial)."""
    out: dict[str, list[dict]] = {}
    for n in names:
        rel = f"schemas/{n}.schema.json"
        raw = b.study_files.get(rel)
        if raw is None:
            t.fail(f"{STUDY_PREFIX}{rel}", f"the study document {n}.json has no schema in the bundled study folder")
            continue
        try:
            sch = jsonio.loads_strict(raw, rel, max_bytes=1024 * 1024)
        except UnreadableInputError as exc:
            t.fail(f"{STUDY_PREFIX}{rel}", exc.message)
            continue
        why = schemas.untrusted_schema_problems(sch)
        for w in why:
            t.fail(f"{STUDY_PREFIX}{rel}", f"the author's schema of {n}.json cannot judge anything: {w}")
        if not why:
            out[n] = [schemas.UntrustedSchema(sch)]
    if out:
        b.partial.append("the study's own documents (" + ", ".join(sorted(out)) + ") are judged by the author's "
                         "schemas only")
    return out


#: a file name a bundled study folder may hold (no hidden files, bounded depth and length)
_STUDY_FILE = re.compile(r"^([A-Za-z0-9_][A-Za-z0-9._-]{0,80}/){0,3}[A-Za-z0-9_][A-Za-z0-9._-]{0,80}"
                         r"\.(yaml|yml|json|py|cu|cuh|h|hpp|md|txt)$")


def study_definition(b: Bundle, t: Tier, run_doc: Mapping) -> None:
    """The bundled study folder (``data/inputs/study/``, every file of it), compared with
    the records and with the verifier's own folder of the study the run names, which then
    judges the bundle (its definition, claims, lock, schemas and binding); a study the
    verifier does not ship is judged by the author's definition and makes the result partial.
    The bundled files are never imported or executed here."""
    ref = b.meta.get("study") or {}
    rel = f"{STUDY_PREFIX}study.yaml"
    if ref.get("file") != "inputs/study/study.yaml":
        t.fail("data/bundle.json", "the study definition is not where the packer puts it", path="$.study.file",
               expected="inputs/study/study.yaml", found=ref.get("file"))
        return
    files = {p[len(STUDY_PREFIX):]: d for p, d in b.files.items() if p.startswith(STUDY_PREFIX)}
    for name in sorted(files):
        if not _STUDY_FILE.match(name):
            t.fail(f"{STUDY_PREFIX}{name}", "not a file name a study folder may hold (source, YAML, JSON, Python, "
                   "Markdown or text, at most three folders deep)")
    raw = files.get("study.yaml")
    if raw is None:
        t.fail(rel, "the study definition bundle.json names is missing")
        return
    b.study_files = files
    got = hashlib.sha256(raw).hexdigest()
    if ref.get("sha256") != got:
        t.fail(rel, "the study definition differs from the sha256 bundle.json records", expected=ref.get("sha256"),
               found=got)
    digest = plugin.files_digest(files)
    for what, recorded in (("bundle.json", ref.get("files")), ("run.json", (run_doc.get("study") or {}).get("files"))):
        if recorded is None and what == "run.json":
            continue
        if recorded != digest:
            bad = plugin.differing(digest, recorded or {})
            t.fail("data/bundle.json" if what == "bundle.json" else "data/results/run.json",
                   f"the bundled study files differ from the ones {what} records: "
                   + ", ".join(safe_text(x, 80) for x in bad[:8]), path="$.study.files")
    run_st = run_doc.get("study") or {}
    if run_st.get("sha256") not in (None, got):
        t.fail("data/results/run.json", "the run used another study definition than the bundled one",
               path="$.study.sha256", expected=got, found=run_st.get("sha256"))
    try:
        parsed = bounded.load_yaml(raw, rel)
    except ReproError as exc:
        t.fail(rel, exc.message)
        return
    name = run_st.get("name") or ref.get("name")
    profile = run_st.get("profile") or ref.get("profile")
    for what, value in (("bundle.json", ref.get("name")), ("the bundled study definition",
                                                          parsed.get("name") if isinstance(parsed, dict) else None)):
        if value != name:
            t.fail(rel, f"{what} names study {safe_text(value)!r}, run.json names {safe_text(name)!r}")
    if ref.get("profile") != profile:
        t.fail("data/bundle.json", "bundle.json and run.json name different profiles", path="$.study.profile",
               expected=profile, found=ref.get("profile"))
    if t.status == "FAIL":
        return
    studies = trusted_studies()
    trusted = studies.get(name)
    if trusted is None and isinstance(parsed, dict):
        bare = {k: v for k, v in parsed.items() if k not in ("name", "title")}
        for other in studies.values():
            theirs = bounded.load_yaml(other.study_raw, "study.yaml")
            same_rest = {k: v for k, v in files.items() if k != "study.yaml"} == \
                {k: v for k, v in other.files.items() if k != "study.yaml"}
            if same_rest and bare == {k: v for k, v in theirs.items() if k not in ("name", "title")}:
                t.fail(rel, f"the bundled study is this verifier's study {other.name!r} under another name "
                       f"({safe_text(name)!r}); it is judged as {other.name!r} and must carry that name",
                       expected=other.name, found=name)
                return
    if trusted is not None and not trusted.intact:
        t.notes.append(f"this verifier's own copy of study {trusted.name!r} differs from its registry "
                       "(manifests/studies.json): it judges nothing")
        b.partial.append(f"this verifier's own copy of study {safe_text(name)!r} was edited after it was registered")
        trusted = None
    if trusted is None:
        b.partial.append(f"study {safe_text(name)!r} is not one this verifier ships: its study definition and its "
                         "claims are the author's, checked for consistency with the data but not judged by the "
                         "verifier's own definitions")
        try:
            b.author_study = load_study(b.root / "data" / "inputs" / "study", profile, files=files, untrusted=True)
        except ReproError as exc:
            t.fail(rel, exc.message)
        t.details["study"] = {"name": name, "profile": profile, "judged_by": "author"}
        return
    diff = plugin.differing(files, trusted.files)
    if diff:
        first = diff[0]
        own, theirs = trusted.files.get(first), files.get(first)
        t.fail(f"{STUDY_PREFIX}{first}", f"the bundled folder of study {safe_text(name)!r} differs from this "
               "verifier's own in " + ", ".join(safe_text(x, 80) for x in diff[:8]) + "; a bundle cannot redefine a "
               "study the verifier ships (a bundle of an earlier version of the study is judged only by a verifier "
               "of that version)",
               expected=hashlib.sha256(own).hexdigest() if own is not None else "(no such file)",
               found=hashlib.sha256(theirs).hexdigest() if theirs is not None else "(no such file)")
        return
    try:
        b.own_study = load_study(trusted.folder, profile)
        b.binding = b.own_study.binding()
    except ReproError as exc:
        t.fail("data/results/run.json", f"profile {safe_text(profile)!r}: {exc.message}", path="$.study.profile")
        b.own_study = None
        return
    b.trusted = trusted
    t.details["study"] = {"name": name, "profile": profile, "judged_by": "verifier"}
