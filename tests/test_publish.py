"""A bundle is published under its final name only once its self-verification finished
(bundle/publish.py: verify_unpublished, issue 31): during the verification neither the bundle nor its
digest file is under its name; a Ctrl-C, SIGTERM or error there removes both and says so; a
finished verification puts both back, byte for byte."""
from __future__ import annotations

import pytest

from kbrepro.bundle import assemble, pack, publish
from kbrepro.errors import Interrupted, InvalidResultsError


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
    assert publish.publish(b, signed=False, allow_failing=False, echo=lambda s: None) == "PASS"
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
        publish.verify_unpublished(b, results_dir=tmp_path / "res")
    assert list(tmp_path.iterdir()) == []
    if want is Interrupted:
        assert "removed before its self-verification finished (x.tar is not there)" in got.value.kept
        assert f"'make_bundle.py pack {tmp_path / 'res'} --out {b}'" in got.value.kept  # the user's --out kept


def _tiny_bag():
    return pack.make_bag("x", {"data/a.txt": b"a\n"}, [("Bundle-Format", "kbrepro-bundle")])


def test_an_interrupt_held_during_the_renames_removes_the_hidden_pair(tmp_path, monkeypatch):
    """A Ctrl-C or SIGTERM held while the hidden pair is renamed into place is raised the instant
    the renames end (jsonio.atomic_write_all): the pair goes with it, nothing is left beside
    --out (it was once seen in about 110 interrupted packs)."""
    real = assemble.jsonio.atomic_write_all

    def write_then_interrupt(files):
        real(files)
        assert all(p.exists() for p, _ in files)  # both renamed into place...
        raise KeyboardInterrupt  # ...and the held signal arrives

    monkeypatch.setattr(assemble.jsonio, "atomic_write_all", write_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        assemble.write_bundle(_tiny_bag(), tmp_path / "x.tar", unpublished=True)
    assert list(tmp_path.iterdir()) == []


def test_an_interrupt_between_writing_and_publishing_removes_the_hidden_pair(tmp_path, monkeypatch):
    """The instant after write_bundle returned and before the self-verification began: the
    command's guard (assemble.unpublished_removed_on_error) removes every pair not published;
    a published one is left alone."""
    with pytest.raises(KeyboardInterrupt):
        with assemble.unpublished_removed_on_error():
            assemble.write_bundle(_tiny_bag(), tmp_path / "x.tar", unpublished=True)
            assert len([x for x in tmp_path.iterdir() if x.name.startswith(".")]) == 2
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(publish, "predict_verification", lambda p, key=None: ("PASS", "PASS"))
    with pytest.raises(KeyboardInterrupt):
        with assemble.unpublished_removed_on_error():
            assemble.write_bundle(_tiny_bag(), tmp_path / "y.tar", unpublished=True)
            publish.publish(tmp_path / "y.tar", signed=False, allow_failing=False, echo=lambda s: None)
            raise KeyboardInterrupt
    assert sorted(x.name for x in tmp_path.iterdir()) == ["y.tar", "y.tar.sha256-digest"]


def _written_unpublished(tmp_path):
    """An earlier bundle at x.tar, and a new one the packer wrote for it, unpublished."""
    b, d = _files(tmp_path)
    new, new_digest = assemble.unpublished_paths(b)
    new.write_bytes(b"new bundle")
    new_digest.write_text("new digest\n")
    return b, d


@pytest.mark.parametrize("verdict,allow", [("INTERRUPT", False), ("FAIL", False), ("ERROR", False)])
def test_an_earlier_bundle_of_that_name_stays_until_the_new_one_verified(tmp_path, monkeypatch, verdict, allow):
    """A newcomer's finding: Ctrl-C while pack verified its own output deleted the earlier
    bundle --out named, and its digest file; the new one now waits under hidden names."""
    b, d = _written_unpublished(tmp_path)

    def verify(p, key=None):
        assert b.read_bytes() == b"bundle bytes"  # the earlier one, still in place while verifying
        if verdict == "INTERRUPT":
            raise KeyboardInterrupt
        if verdict == "ERROR":
            raise RuntimeError("boom")
        return "FAIL", "FAIL in tier 3"

    monkeypatch.setattr(publish, "predict_verification", verify)
    with pytest.raises((Interrupted, InvalidResultsError, RuntimeError)) as got:
        publish.publish(b, signed=False, allow_failing=allow, echo=lambda s: None)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["x.tar", "x.tar.sha256-digest"]
    assert b.read_bytes() == b"bundle bytes" and d.read_text() == "digest\n"
    if verdict == "INTERRUPT":
        assert "(the earlier x.tar is left as it was)" in got.value.kept


def test_a_new_bundle_that_verified_replaces_the_earlier_one_and_says_so(tmp_path, monkeypatch):
    b, d = _written_unpublished(tmp_path)
    monkeypatch.setattr(publish, "predict_verification", lambda p, key=None: ("PASS", "PASS at --level static"))
    said = []
    assert publish.publish(b, signed=False, allow_failing=False, echo=said.append) == "PASS"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["x.tar", "x.tar.sha256-digest"]
    assert b.read_bytes() == b"new bundle" and d.read_text() == "new digest\n"
    assert said[-1] == "note:    replaced the earlier x.tar and its digest file"


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


def test_once_in_place_the_result_is_decided_and_a_held_signal_is_dropped(tmp_path, monkeypatch):
    """A Ctrl-C or SIGTERM that lands while the verified bundle takes its final names, or after,
    no longer changes the result: the lines that say what was written are printed whole and the
    command exits 0 (a second newcomer saw 'nothing was written' beside a finished bundle)."""
    import signal

    from kbrepro.process import deferred_sigint

    b, d = _written_unpublished(tmp_path)
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    real_replace = publish.os.replace

    def replace_then_interrupt(src, dst):  # the signal arrives in the middle of the two renames
        real_replace(src, dst)
        signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(publish.os, "replace", replace_then_interrupt)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert publish.put_in_place(b) is True  # no KeyboardInterrupt: held, then dropped
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN and signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
        assert b.read_bytes() == b"new bundle" and d.read_text() == "new digest\n"
        signal.signal(signal.SIGINT, signal.default_int_handler)
        with pytest.raises(KeyboardInterrupt):  # a block that decided nothing acts on a held signal as before
            with deferred_sigint():
                signal.raise_signal(signal.SIGINT)
    finally:
        for s, h in saved.items():
            signal.signal(s, h)


def test_a_candidate_run_interrupted_while_packing_says_its_results_are_kept(tmp_path, monkeypatch):
    from click.testing import CliRunner

    import make_bundle
    from kbrepro.bundle import candidates as bc

    cand = tmp_path / "c.py"
    cand.write_text("import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n")
    res = tmp_path / "res"

    def stopped(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(bc, "run_candidates", lambda *a, **k: res)
    monkeypatch.setattr(bc, "pack_results", stopped)
    r = CliRunner().invoke(make_bundle.main, ["--candidate", str(cand), "--task", "1/19", "--device", "cpu",
                                              "--results-dir", str(res), "--out", str(tmp_path / "c.tar")])
    assert r.exit_code == 130, r.output
    assert (f"interrupted; the run finished and its results are kept in {res}; no bundle was written: pack them "
            f"with 'make_bundle.py pack {res} --out {tmp_path / 'c.tar'}'") in r.output
