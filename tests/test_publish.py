"""A bundle is published under its final name only once its self-verification finished
(bundle/publish.py: verify_unpublished, issue 31): during the verification neither the bundle nor its
digest file is under its name; a Ctrl-C, SIGTERM or error there removes both and says so; a
finished verification puts both back, byte for byte."""
from __future__ import annotations

import pytest

from kbrepro.bundle import pack, publish
from kbrepro.errors import Interrupted


def _files(tmp_path):
    b = tmp_path / "x.tar"
    d = tmp_path / ("x.tar" + pack.DIGEST_SUFFIX)
    b.write_bytes(b"bundle bytes")
    d.write_text("digest\n")
    return b, d


def test_a_finished_verification_puts_both_files_back(tmp_path, monkeypatch):
    b, d = _files(tmp_path)
    seen = {}

    def verify(p, key=None):
        seen["path"], seen["bytes"] = p, p.read_bytes()
        seen["visible"] = sorted(x.name for x in tmp_path.iterdir() if not x.name.startswith("."))
        return "PASS", "PASS at --level static"

    monkeypatch.setattr(publish, "predict_verification", verify)
    assert publish.verify_unpublished(b) == ("PASS", "PASS at --level static")
    assert seen["visible"] == [] and seen["path"].name.startswith(".") and seen["bytes"] == b"bundle bytes"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["x.tar", "x.tar.sha256-digest"]
    assert b.read_bytes() == b"bundle bytes" and d.read_text() == "digest\n"


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), RuntimeError("boom")])
def test_an_unfinished_verification_leaves_nothing(tmp_path, monkeypatch, exc):
    b, _ = _files(tmp_path)

    def verify(p, key=None):
        raise exc

    monkeypatch.setattr(publish, "predict_verification", verify)
    want = Interrupted if isinstance(exc, KeyboardInterrupt) else RuntimeError
    with pytest.raises(want) as got:
        publish.verify_unpublished(b)
    assert list(tmp_path.iterdir()) == []
    if want is Interrupted:
        assert "removed before its self-verification finished" in got.value.kept


def test_a_terminal_sees_the_packing_and_the_self_verification_going_on(tmp_path):
    """make_bundle.py on a terminal: a status line on stderr while it packs and while it verifies
    the bundle it wrote (erased after); on a pipe nothing of it (the CLI tests' case)."""
    import sys
    from pathlib import Path

    from conftest import kernelbench_from_example, run_on_a_terminal

    root = Path(__file__).resolve().parents[1]
    kb = kernelbench_from_example(tmp_path)
    code, out, seen = run_on_a_terminal([sys.executable, str(root / "make_bundle.py"), "--from-results",
                                         str(root / "tests" / "fixtures" / "results-quick-h200"), "--out",
                                         str(tmp_path / "q.tar"), "--kernelbench", str(kb), "--no-plots"])
    assert code == 0, seen[-2000:]
    assert b"packing " in seen and b"just written" in seen
    assert "verify:  PASS" in out
