"""pyproject.toml lists its packages by hand (the project root is the ``kbrepro`` package): a
package folder left out installs without it on a plain ``pip install .`` while an editable
install still finds it. Every folder of product code holding a ``.py`` file must be listed."""
from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11 and newer

ROOT = Path(__file__).resolve().parents[1]
NOT_PRODUCT = {"tests", "benchmarks", "examples", "KernelBench", "docs", "build", "dist"}


def _package_folders() -> set[str]:
    out = {"kbrepro"}
    for py in ROOT.rglob("*.py"):
        rel = py.parent.relative_to(ROOT)
        if not rel.parts or rel.parts[0] in NOT_PRODUCT or any(p.startswith(".") for p in rel.parts):
            continue
        out.add(".".join(("kbrepro", *rel.parts)))
    return out


def test_every_package_folder_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    assert _package_folders() - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert listed - _package_folders() == set(), "pyproject.toml lists packages that have no folder"
