"""The documents registry: which documents a bundle holds, where each lies in the bag and
which schema judges it. One table for the packer (:mod:`bundle.make`), the verifier
(:mod:`bundle.verify`, which never takes a bundle's own listing for it) and the
cross-checks; ``crosscheck`` keeps its stricter per-source lists of required documents.
"""
from __future__ import annotations

#: every result document the product writes, by name (``schemas/<name>.schema.json``, and the
#: document's own ``schema`` field ``kbrepro/<name>``)
OUR_DOCUMENTS = ("run", "environment", "compile", "witness", "correctness", "timings", "scout", "selftest")
#: the documents without which results are not packed
REQUIRED = ("run", "environment", "compile", "correctness", "timings")
#: where each document goes inside ``data/``
DOC_PATHS = {"environment": "environment.json", **{n: f"results/{n}.json" for n in OUR_DOCUMENTS if n != "environment"}}
#: the only note a measured bundle's packer writes (the verifier refuses any other)
NO_PLOTS_NOTE = "no plots: matplotlib is not installed (pip install 'kbrepro[plots]')"


def bag_path(name: str) -> str:
    """The bag path (``data/...``) of document ``name``; ``claims`` included. Raises KeyError
    for a document the product does not write."""
    return "data/claims.json" if name == "claims" else f"data/{DOC_PATHS[name]}"
