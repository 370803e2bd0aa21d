"""Product-wide checked-in inputs: the registry of the studies this product ships and trusts
(``studies.json``, written by ``python -m kbrepro.harness register-studies``)."""
from __future__ import annotations

from pathlib import Path

MANIFEST_DIR = Path(__file__).resolve().parent


def path(name: str) -> Path:
    """Absolute path of a manifest shipped with the product (e.g. ``studies.json``)."""
    return MANIFEST_DIR / name
