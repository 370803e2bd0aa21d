"""A candidate run stopped part-way keeps every candidate that finished, and the same command on
the same folder resumes after them, to the documents an unstopped run writes (issue 29); a folder
holding another run's progress, or one started on another machine, is refused (CPU, KernelBench
1/40 at small sizes)."""
from __future__ import annotations

import json
from pathlib import Path
from unittest import mock

import pytest

from conftest import kernelbench_from_example
from kbrepro.bundle import candidates as bc
from kbrepro.bundle import case_records, checkpoint
from kbrepro.errors import Interrupted, UsageError
from kbrepro.harness import candidate as hc
from kbrepro.harness import fingerprint
from test_shard import LN, LN_B, SIZES

pytestmark = pytest.mark.slow  # run by .ci/run: python -m pytest -q --slow -m slow


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("resume")
    kb = kernelbench_from_example(d, "layernorm-l1-40-full-*.tar")
    for n, src in (("a", LN), ("b", LN_B), ("c", LN)):
        (d / f"{n}.py").write_bytes(src)
    items = [(d / "a.py", "1/40"), (d / "b.py", "1/40"), (d / "c.py", "1/40")]
    whole = bc.run_candidates(items, profile="quick", kernelbench=str(kb), results_dir=d / "whole", sizes=SIZES,
                              device="cpu")
    return d, kb, items, whole


def _run(setup, out, **kw):
    d, kb, items, _ = setup
    return bc.run_candidates(items, profile="quick", kernelbench=str(kb), results_dir=out, sizes=kw.pop("sizes", SIZES),
                             device="cpu", **kw)


def _stop_at(k):
    """run_candidate interrupted (Ctrl-C) at its ``k``-th call (0-based)."""
    real = hc.run_candidate
    calls = []

    def fake(spec, cfg, workdir, *a, **kw):
        calls.append(spec.name)
        if len(calls) == k + 1:  # stopped while the child built it: its build folders exist
            (Path(workdir) / "build" / "extensions").mkdir(parents=True)
            raise KeyboardInterrupt
        return real(spec, cfg, workdir, *a, **kw)
    return fake, calls


def test_a_stopped_run_keeps_what_finished_and_the_same_command_resumes(setup, tmp_path):
    out = tmp_path / "res"
    fake, calls = _stop_at(2)
    with mock.patch.object(hc, "run_candidate", fake), pytest.raises(Interrupted) as ei:
        _run(setup, out)
    assert "2 of 3 candidates finished and are kept" in ei.value.kept and f"the same command with --results-dir {out} resumes" in ei.value.kept
    assert sorted(p.name for p in (out / checkpoint.PROGRESS).iterdir()) == [".lock", "0.json", "1.json", "run.json"]
    assert not (out / "work" / "c").exists()  # the build folders of the candidate it stopped in (issue 31)
    (out / "work" / "c").mkdir(parents=True, exist_ok=True)
    (out / "work" / "c" / "lock").write_text("a build the stopped run left")  # torch's build lock
    assert not (out / "results" / "candidates.json").exists()
    assert (out / "inputs" / "candidates" / "b.py").read_bytes() == LN_B  # its files kept with it

    lines = []
    fake, calls = _stop_at(99)
    with mock.patch.object(hc, "run_candidate", fake):
        _run(setup, out, progress=lines.append)
    assert calls == ["c"]  # only the candidate that had not finished ran again
    assert not (out / "work" / "c" / "lock").exists()  # its half-done build folder was not reused
    assert any("resuming the run" in m and "2 of 3 candidates finished before" in m for m in lines), lines
    assert any(m.startswith("c: finished in ") and "checks" in m for m in lines), lines
    assert not (out / checkpoint.PROGRESS).exists()
    a = json.loads((out / "results" / "candidates.json").read_bytes())
    b = json.loads((setup[3] / "results" / "candidates.json").read_bytes())
    assert [r["name"] for r in a["candidates"]] == ["a", "b", "c"]
    assert case_records.differences(a, b) == []  # the documents of a run never stopped, timings and hosts aside
    bc.build_payload({str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()
                      and p.relative_to(out).parts[0] in ("inputs", "results", "provenance")})


def test_a_folder_with_another_run_s_progress_or_machine_is_refused(setup, tmp_path):
    out = tmp_path / "res"
    fake, _ = _stop_at(1)
    with mock.patch.object(hc, "run_candidate", fake), pytest.raises(Interrupted):
        _run(setup, out)
    with pytest.raises(UsageError, match="unfinished run of other candidates, tasks or settings"):
        _run(setup, out, sizes={**SIZES, "dim2": 4})
    real = fingerprint.collect

    def elsewhere(*a, **kw):
        env = real(*a, **kw)
        env["fields"]["python_version"] = {**env["fields"]["python_version"], "value": "3.99.0"}
        return env
    with mock.patch.object(fingerprint, "collect", elsewhere), \
            pytest.raises(UsageError, match="another machine or software .changed: python_version"):
        _run(setup, out)
    import fcntl

    with open(out / checkpoint.PROGRESS / ".lock", "w") as held:  # another run on the same folder
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(UsageError, match="another run is using --results-dir"):
            _run(setup, out)
    kept = json.loads((out / checkpoint.PROGRESS / "0.json").read_bytes())
    (out / "inputs" / "candidates" / "a.py").write_bytes(LN + b"# edited\n")
    with pytest.raises(UsageError, match="the kept candidate file is not the one that ran"):
        _run(setup, out)
    (out / "inputs" / "candidates" / "a.py").write_bytes(LN)
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    for bad in (str(victim), "../victim.txt", "inputs/../../victim.txt", "results/candidates.json"):
        (out / checkpoint.PROGRESS / "0.json").write_text(json.dumps({**kept, "files": kept["files"] + [bad]}))
        with pytest.raises(UsageError, match="a kept file outside the candidate's folders"):
            _run(setup, out)
    assert victim.read_text() == "mine"
    (out / checkpoint.PROGRESS / "0.json").write_text("{not json")
    with pytest.raises(UsageError, match="cannot be read"):
        _run(setup, out)


def test_summary_line_names_the_catches_or_the_undecided_checks():
    rec = {"name": "k", "seconds": 2.0, "verdicts": [{"name": "ran", "passed": True},
                                                     {"name": "inputs_unchanged", "passed": False},
                                                     {"name": "single_stream", "passed": None}]}
    assert checkpoint.summary_line(rec) == "k: finished in 2.0 s; CAUGHT by inputs_unchanged"
    rec["verdicts"][1]["passed"] = True
    assert checkpoint.summary_line(rec) == "k: finished in 2.0 s; passed 2 checks, 1 undecided (single_stream)"
    rec["verdicts"] += [{"name": n, "passed": None} for n in ("a", "b", "c")]
    assert checkpoint.summary_line(rec).endswith("4 undecided (single_stream, a, b and 1 more)")  # never a silent cut


def test_a_run_stopped_before_any_candidate_finished_says_so(setup, tmp_path):
    out = tmp_path / "res"
    fake, _ = _stop_at(0)
    with mock.patch.object(hc, "run_candidate", fake), pytest.raises(Interrupted) as ei:
        _run(setup, out)
    assert ei.value.kept.startswith(f"no candidate finished; the run's folder {out} is kept; the same command")


def test_packing_an_unfinished_run_or_running_into_a_finished_one_names_the_next_step(setup, tmp_path):
    from click.testing import CliRunner

    import make_bundle

    out = tmp_path / "res"
    fake, _ = _stop_at(1)
    with mock.patch.object(hc, "run_candidate", fake), pytest.raises(Interrupted):
        _run(setup, out)
    r = CliRunner().invoke(make_bundle.main, ["--from-results", str(out), "--out", str(tmp_path / "x.tar")])
    assert r.exit_code == 2 and "holds an unfinished candidate run" in r.output and "to resume it" in r.output, r.output
    d, kb, items, whole = setup
    args = [a for p, t in items for a in ("--candidate", str(p), "--task", t)] + [
        "--device", "cpu", "--profile", "quick", "--kernelbench", str(kb), "--results-dir", str(whole)] + [
        a for k, v in SIZES.items() for a in ("--size", f"{k}={v}")]
    r = CliRunner().invoke(make_bundle.main, args)
    assert r.exit_code == 2 and "holds a finished candidate run" in r.output and "make_bundle.py pack" in r.output, r.output
