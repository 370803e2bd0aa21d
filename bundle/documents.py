"""The documents of a study bundle, read through the model's registry
(:data:`kbrepro.model.documents.REGISTRY`: name, bag path, schema, record type), and their one
loader, :func:`load`: strict JSON, the packer's canonical form, the verifier's schema, then the
typed record. The packer (:mod:`bundle.make`), the verifier (:mod:`bundle.verify`, which never
takes a bundle's own listing for it) and the cross-checks read the layout from here. A study's
binding adds its own documents (``StudyBinding.documents``: name -> schema file of the study
folder); they lie beside ours under ``data/results/`` and have no record of ours.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Mapping

from kbrepro.bundle import validate
from kbrepro.errors import UnreadableInputError
from kbrepro.harness import jsonio
from kbrepro.model import documents as registry
from kbrepro.model import strict
from kbrepro.model.problems import DOCUMENT, Problem

#: every result document the engine writes for any study, by name
#: (``schemas/<name>.schema.json``, and the document's own ``schema`` field ``kbrepro/<name>``)
OUR_DOCUMENTS = registry.RESULT_DOCUMENTS
#: the documents without which results are not packed, and a measured bundle fails
REQUIRED = tuple(d.name for d in registry.REGISTRY if d.required)
#: a document name a study may use
DOC_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,40}$")
#: the largest document of a study bundle the verifier parses (the committed extended
#: timings.json is 2.3 MB; a forged 2 GB document is refused before it is parsed)
MAX_DOCUMENT_BYTES = 16 * 1024 * 1024


def spec(name: str) -> registry.Document:
    """The registry line of document ``name``: ours, else a study's own
    (``data/results/<name>.json``). Raises KeyError for a name no document may have."""
    got = registry.BY_NAME.get(name)
    if got is not None:
        return got
    if not (isinstance(name, str) and DOC_NAME.match(name)):
        raise KeyError(name)
    return registry.study_document(name)


class _DocPaths(dict):
    """Where each result document goes inside ``data/``: ``environment.json``, else
    ``results/<name>.json`` (ours and a study's alike); from the registry."""

    def __missing__(self, name: str) -> str:
        if name in ("claims", "bundle"):
            raise KeyError(name)
        return spec(name).bag_path[len("data/"):]

    def get(self, name, default=None):  # noqa: D102 (dict API, with the fallback above)
        try:
            return self[name]
        except KeyError:
            return default


DOC_PATHS = _DocPaths()


def bag_path(name: str) -> str:
    """The bag path (``data/...``) of document ``name``; ``claims`` and ``bundle`` included.
    Raises KeyError for a name no document may have."""
    return spec(name).bag_path


def study_documents(binding) -> tuple[str, ...]:
    """The study's own document names (none without a binding)."""
    return tuple(sorted(getattr(binding, "documents", {}) or {})) if binding is not None else ()


@dataclass(frozen=True)
class Loaded:
    """One document as :func:`load` read it: ``doc`` the parsed JSON (None where unreadable),
    ``record`` its typed record (None for a study's own document, or where ``problems``),
    ``problems`` every problem found (file: its bag path), empty for a valid document."""

    name: str
    doc: Any
    record: Any
    problems: tuple[Problem, ...]


def load(name: str, raw: bytes, extra: Mapping[str, list] | None = None, *, canonical: bool = True,
         max_bytes: int = MAX_DOCUMENT_BYTES) -> Loaded:
    """Read document ``name`` from its bytes ``raw``, once: strict JSON (at most ``max_bytes``),
    in the packer's canonical form (``canonical``), valid against the verifier's schema
    (``extra``: a study's schemas, :func:`bundle.validate.study_schemas`), then built into its
    record (:data:`kbrepro.model.documents.REGISTRY`). Raises nothing: a document that fails a
    step is returned with its problems (code ``bundle.document`` where it is not strict or
    canonical JSON, the schema's and the record's own codes after)."""
    path = bag_path(name)
    try:
        doc = jsonio.loads_strict(raw, path, max_bytes=max_bytes)
    except UnreadableInputError as exc:
        return Loaded(name, None, None, (Problem(DOCUMENT, None, exc.message, file=path),))
    if canonical and jsonio.dumps(doc).encode("ascii") != raw:
        return Loaded(name, doc, None, (Problem(DOCUMENT, None, "not in the canonical JSON form the packer writes "
                                                "(sorted keys, two-space indent, ASCII)", file=path),))
    problems = [dataclasses.replace(p, file=path) for p in validate.schema_problems(name, doc, extra)]
    if problems:
        return Loaded(name, doc, None, tuple(problems))
    record_type = spec(name).record
    if record_type is None:
        return Loaded(name, doc, None, ())
    record, problems = strict.build(record_type, doc)
    return Loaded(name, doc, record, tuple(dataclasses.replace(p, file=path) for p in problems))


__all__ = ["OUR_DOCUMENTS", "REQUIRED", "DOC_NAME", "DOC_PATHS", "MAX_DOCUMENT_BYTES", "spec", "bag_path",
           "study_documents", "Loaded", "load"]
