"""Formats are forever (DESIGN.md section 6): every bundle format released keeps a committed
example that verifies in CI on every commit. Study bundles: formats 3 to 8; candidate bundles:
formats 2, 3, 4 (timing protocol 2), 5 (the report in a person's words), 6 (the first claim says
how many checks decide) and 7 (an interval whose ends read the same as one value). A format change adds a version and an example; it never drops one."""
from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from kbrepro.bundle.verify.checklist import verify_archive

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.tar")) + sorted((ROOT / "examples" / "formats").glob("*.tar"))
#: (Bundle-Format, Bundle-Format-Version) that must each have a committed example
RELEASED = {("kbrepro-bundle", "3"), ("kbrepro-bundle", "4"), ("kbrepro-bundle", "5"), ("kbrepro-bundle", "6"),
            ("kbrepro-bundle", "7"), ("kbrepro-bundle", "8"), ("kbrepro-candidate-bundle", "2"),
            ("kbrepro-candidate-bundle", "3"), ("kbrepro-candidate-bundle", "4"), ("kbrepro-candidate-bundle", "5"),
            ("kbrepro-candidate-bundle", "6"), ("kbrepro-candidate-bundle", "7")}


def _info(path: Path) -> dict:
    with tarfile.open(path) as tf:
        raw = next(tf.extractfile(m).read() for m in tf if m.name.endswith("/bag-info.txt") and m.name.count("/") == 1)
    return dict(ln.split(": ", 1) for ln in raw.decode().splitlines() if ": " in ln)


def test_every_released_format_has_a_committed_example():
    have = {(_info(p)["Bundle-Format"], _info(p)["Bundle-Format-Version"]) for p in EXAMPLES}
    assert RELEASED <= have, sorted(RELEASED - have)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_committed_example_verifies_pass_and_has_its_quoted_digest(path):
    rep = verify_archive(path, level="static")
    assert rep.verdict == "PASS", [p for t in rep.tiers for p in t.problems]
    quoted = path.with_name(path.name + ".sha256-digest").read_text().split()[-1]
    assert rep.digest == quoted
