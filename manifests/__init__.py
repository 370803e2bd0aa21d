"""Checked-in inputs: study definitions, claims and the KernelBench lock."""
from __future__ import annotations

from pathlib import Path

MANIFEST_DIR = Path(__file__).resolve().parent


def path(name: str) -> Path:
    """Absolute path of a manifest shipped with the product (e.g. ``study_fusion.yaml``)."""
    return MANIFEST_DIR / name
