"""Where a study bundle's results come from (tier 3): an imported bundle's documents derived
again from the post's original files by the verifier's own importer, and bundle.json's notes.
"""
from __future__ import annotations

import json
import re
import shutil
import tempfile
from pathlib import Path

from kbrepro.bundle.documents import DOC_PATHS
from kbrepro.harness import jsonio
from kbrepro.errors import ReproError
from kbrepro.bundle.verify.core import Bundle, Tier, json_diffs


#: the notes the packer adds to an importer's notes, exactly (bundle.make._kernelbench_inputs, _sources_check)
_PACKER_NOTES = (
    re.compile(r"KernelBench task files not included \(no verified checkout at [A-Za-z0-9._-]{1,100}/\): the "
               r"imported results are packed with the lock only"),
    re.compile(r"the imported results compiled a source with sha256 [0-9a-f]{64}, which is none of study "
               r"[A-Za-z0-9._-]{1,100}'s files"),
)


def _imported(b: Bundle, t: Tier, docs: dict) -> None:
    """An imported bundle's documents are derived from the post's original files it carries:
    the verifier runs its own importer on those files (and the bundled log) and requires the
    same documents, byte for byte, and the same notes."""
    originals = sorted(p for p in b.files if p.startswith("data/results/originals/"))
    if not originals:
        t.fail("data/results/originals", "an imported bundle must carry the original files its documents come from")
        return
    if b.binding is None:
        # nothing of an import can be re-derived without an importer of the verifier's own, and
        # an import is held to fewer checks than a measured run: refused, not partial
        t.fail("data/bundle.json", "imported results of a study this verifier does not ship cannot be checked: the "
               "verifier has no importer of its own to re-derive the documents from the bundled originals",
               path="$.source", found="imported")
        return
    log_name = getattr(b.binding, "import_log_file", "run.log")
    work = Path(tempfile.mkdtemp(prefix="kbrepro-import-", dir=b.root.parent))
    try:
        for p in originals:
            name = p.rsplit("/", 1)[1]
            if name == log_name or "/" in p[len("data/results/originals/"):]:
                t.fail(p, "not an original result file of the post")
                continue
            (work / name).write_bytes(b.files[p])
        if "data/logs/run.log" in b.files:
            (work / log_name).write_bytes(b.files["data/logs/run.log"])
        try:
            imp = b.binding.import_originals(work)
        except ReproError as exc:
            t.fail("data/results/originals", f"this verifier's importer refuses the bundled originals: {exc.message}")
            return
        if imp is None:
            t.fail("data/results/originals", f"study {b.trusted.name} has no importer: its results cannot be imported")
            return
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for name in sorted(set(imp.documents) | {n for n in docs if n != "claims"}):
        rel = f"data/{DOC_PATHS.get(name, name + '.json')}"
        want, have = imp.documents.get(name), docs.get(name)
        if want is None:
            t.fail(rel, "this document does not follow from the bundled originals")
        elif have is None:
            t.fail(rel, "the bundled originals give this document; the bundle lacks it")
        elif jsonio.dumps(want) != jsonio.dumps(have):
            for path, a, e in json_diffs(have, json.loads(jsonio.dumps(want)), limit=10):
                t.fail(rel, "differs from what this verifier's importer derives from the bundled originals", path=path,
                       expected=e, found=a)
    notes = list(b.meta.get("notes") or [])
    if notes[: len(imp.notes)] != list(imp.notes):
        t.fail("data/bundle.json", "the notes differ from the importer's notes on the bundled originals", path="$.notes")
    for i, n in enumerate(notes[len(imp.notes):], len(imp.notes)):
        if not any(r.fullmatch(n) for r in _PACKER_NOTES):
            t.fail("data/bundle.json", "a note neither the importer nor the packer writes", path=f"$.notes[{i}]", found=n)


def source_check(b: Bundle, t: Tier) -> None:
    """What bundle.json says of where the results come from: an imported bundle's documents
    derived again from the post's originals (:func:`_imported`), a measured bundle's notes
    (:func:`notes_check`)."""
    if b.meta.get("source") == "imported":
        _imported(b, t, b.documents)
    else:
        notes_check(b, t)


def notes_check(b: Bundle, t: Tier) -> None:
    """bundle.json's notes reach REPORT.md, so they are checked: a measured bundle's packer
    writes none."""
    notes = b.meta.get("notes") or []
    if b.meta.get("source") != "measured":
        return
    for i, n in enumerate(notes):
        t.fail("data/bundle.json", "the notes of a measured bundle are the packer's own; this one is not a note the "
               "packer writes", path=f"$.notes[{i}]", found=n)
