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


def test_the_sweep_takes_no_more_workers_than_the_memory_holds(monkeypatch):
    """``-n auto`` on a large machine started one sweep worker per core and ran out of memory:
    the hook caps the workers by the memory available (the other suites keep xdist's choice)."""
    import conftest

    class Config:
        def __init__(self, sweep):
            self.sweep = sweep

        def getoption(self, name):
            return self.sweep

    monkeypatch.setattr(conftest.os, "cpu_count", lambda: 64)
    monkeypatch.setattr(conftest, "_available_bytes", lambda: 100 << 30)
    assert conftest.pytest_xdist_auto_num_workers(Config(True)) == 100 // 6
    monkeypatch.setattr(conftest, "_available_bytes", lambda: 1 << 30)
    assert conftest.pytest_xdist_auto_num_workers(Config(True)) == 1
    monkeypatch.setattr(conftest, "_available_bytes", lambda: None)
    assert conftest.pytest_xdist_auto_num_workers(Config(True)) == 64
    assert conftest.pytest_xdist_auto_num_workers(Config(False)) is None
