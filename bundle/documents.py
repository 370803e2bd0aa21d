"""The documents registry: which documents a bundle holds, where each lies in the bag and
which schema judges it. One table for the packer (:mod:`bundle.make`), the verifier
(:mod:`bundle.verify`, which never takes a bundle's own listing for it) and the
cross-checks. A study's binding adds its own documents (``StudyBinding.documents``: name ->
schema file of the study folder); they lie beside ours under ``data/results/``.
"""
from __future__ import annotations

import re

#: every result document the engine writes for any study, by name
#: (``schemas/<name>.schema.json``, and the document's own ``schema`` field ``kbrepro/<name>``)
OUR_DOCUMENTS = ("run", "environment", "compile", "witness", "correctness", "timings", "selftest")
#: the documents without which results are not packed
REQUIRED = ("run", "environment", "compile", "correctness", "timings")
#: the only note a measured bundle's packer writes (the verifier refuses any other)
#: a document name a study may use
DOC_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,40}$")


class _DocPaths(dict):
    """Where each document goes inside ``data/``: ``environment.json``, else
    ``results/<name>.json`` (ours and a study's alike)."""

    def __missing__(self, name: str) -> str:
        if not (isinstance(name, str) and DOC_NAME.match(name)) or name == "claims":
            raise KeyError(name)
        return f"results/{name}.json"

    def get(self, name, default=None):  # noqa: D102 (dict API, with the fallback above)
        try:
            return self[name]
        except KeyError:
            return default


DOC_PATHS = _DocPaths({"environment": "environment.json"})


def bag_path(name: str) -> str:
    """The bag path (``data/...``) of document ``name``; ``claims`` included. Raises KeyError
    for a name no document may have."""
    return "data/claims.json" if name == "claims" else f"data/{DOC_PATHS[name]}"


def study_documents(binding) -> tuple[str, ...]:
    """The study's own document names (none without a binding)."""
    return tuple(sorted(getattr(binding, "documents", {}) or {})) if binding is not None else ()
