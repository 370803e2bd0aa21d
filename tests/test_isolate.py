"""The candidate runs in a spawned child that serves requests (harness/isolate.py): on CPU, what
the parent gets back, what the candidate can and cannot do to the parent, and how each way a
child can fail becomes a named CandidateFailure."""
from __future__ import annotations

import os
import time

import pytest
import torch

from kbrepro.errors import CandidateFailure
from kbrepro.harness import candidate_server, isolate, kbtask, wire

TASK = b'''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n))
    def forward(self, x):
        return torch.relu(x) * self.w

batch_size = 4
n = 8

def get_inputs():
    return [torch.rand(batch_size, n)]

def get_init_inputs():
    return [n]
'''

HONEST = b'''import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n))
    def forward(self, x):
        return torch.clamp(x, min=0) * self.w
'''

#: patches, in its own process, what a checker or timer would use, and returns zeros
PATCHER = HONEST.replace(b"return torch.clamp(x, min=0) * self.w", b"return torch.zeros_like(x)") + b'''
import os
import time
torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
time.perf_counter = lambda: 0.0
'''


def _build(p, src=HONEST, **kw):
    return p.request({"cmd": "build", "device": "cpu", "seed": 0, **kw}, [src, TASK], timeout_s=60)


def _call(p, sid="a", seed=3, dist="official"):
    p.request({"cmd": "draw", "id": sid, "seed": seed, "distribution": dist}, timeout_s=60)
    rep = p.request({"cmd": "call", "id": sid}, timeout_s=60)
    return rep, wire.frame_tensor(rep.header["outputs"][0]["tensor"], rep.frames[0])


def _reference(seed=3, dist="official"):
    task = kbtask.load_task(TASK)
    m = kbtask.build_model(task, task.Model, 0, "cpu")
    xs = kbtask.draw_inputs(task, seed, dist, "cpu")
    return m(*xs).detach(), xs


def test_an_honest_candidate_answers_with_the_references_outputs_on_the_same_draw():
    with isolate.CandidateProcess() as p:
        b = _build(p)
        assert b.header["flags_before"] == b.header["flags_after_build"]
        for dist in kbtask.DISTRIBUTIONS:
            rep, out = _call(p, f"s/{dist}", 3, dist)
            ref, xs = _reference(3, dist)
            assert torch.equal(out, ref)
            assert rep.header["digests_before"] == [kbtask.fingerprint(x) for x in xs] == rep.header["digests_after"]
            assert rep.header["outputs"][0]["plain"] is True and rep.host_ms > 0


def test_patching_the_checkers_and_timers_changes_only_the_candidates_process():
    with isolate.CandidateProcess() as p:
        _build(p, PATCHER)
        _, out = _call(p)
    ref, _ = _reference()
    assert not torch.allclose(ref, out)  # our torch.allclose is the real one
    assert time.perf_counter() > 0


@pytest.mark.parametrize("src,fragment", [
    (b"import os\nos._exit(7)\n", "exit code 7"),
    (b"raise RuntimeError('no kernel today')\n", "RuntimeError: no kernel today"),
    (b"x = 1\n", "defines no ModelNew"),
])
def test_a_candidate_that_dies_raises_or_defines_nothing_is_a_named_failure(src, fragment):
    with isolate.CandidateProcess() as p:
        with pytest.raises(CandidateFailure) as e:
            _build(p, src)
    assert fragment in e.value.message


@pytest.mark.slow
def test_a_candidate_that_hangs_is_stopped_at_the_deadline_and_stays_dead():
    src = HONEST.replace(b"return torch.clamp(x, min=0) * self.w", b"import time; time.sleep(60)")
    with isolate.CandidateProcess() as p:
        _build(p, src)
        p.request({"cmd": "draw", "id": "a", "seed": 1, "distribution": "official"}, timeout_s=30)
        t0 = time.perf_counter()
        with pytest.raises(CandidateFailure, match="did not answer 'call' within 2 s"):
            p.request({"cmd": "call", "id": "a"}, timeout_s=2)
        assert time.perf_counter() - t0 < 10
        with pytest.raises(CandidateFailure):
            p.request({"cmd": "call", "id": "a"}, timeout_s=2)


def test_a_forged_reply_from_the_candidate_is_refused_not_parsed_as_data():
    # the candidate writes its own frames into the pipe: an oversized frame list, then garbage
    src = HONEST + b'''
import gc, json, multiprocessing.connection as mc
for o in gc.get_objects():
    if isinstance(o, mc.Connection):
        o.send_bytes(json.dumps({"ok": True, "frames": [1 << 40]}).encode())
'''
    with isolate.CandidateProcess() as p:
        with pytest.raises(CandidateFailure, match="malformed"):
            _build(p, src)


@pytest.mark.parametrize("meta,raw,fragment", [
    ({"dtype": "object", "shape": [1]}, b"x", "not a dtype"),
    ({"dtype": "float32", "shape": [2]}, b"\0" * 4, "do not fill"),
    ({"dtype": "float32", "shape": [-1]}, b"", "not a shape"),
    ({"dtype": "float32", "shape": [1] * 17}, b"\0" * 4, "not a shape"),
])
def test_reply_tensors_a_candidate_could_forge_are_refused(meta, raw, fragment):
    with pytest.raises(ValueError, match=fragment):
        wire.frame_tensor(meta, raw)


def test_tensor_frames_round_trip():
    for t in (torch.randn(3, 5), torch.arange(7, dtype=torch.int64), torch.zeros(0, 4), torch.tensor([True, False])):
        meta, raw = wire.tensor_frame(t)
        assert torch.equal(wire.frame_tensor(meta, raw), t)


@pytest.mark.slow
def test_a_size_override_reaches_both_processes_and_an_unknown_one_is_refused():
    with isolate.CandidateProcess() as p:
        _build(p, overrides={"batch_size": 2})
        _, out = _call(p)
        assert tuple(out.shape) == (2, 8)
    with isolate.CandidateProcess() as p:
        with pytest.raises(CandidateFailure, match="no size global 'width'"):
            _build(p, overrides={"width": 2})


def test_the_fingerprint_sees_one_changed_element_dtype_and_shape():
    x = torch.rand(3, 1000)
    y = x.clone()
    assert kbtask.fingerprint(x) == kbtask.fingerprint(y)
    y[2, 5] = torch.nextafter(y[2, 5], torch.tensor(2.0))
    assert kbtask.fingerprint(x) != kbtask.fingerprint(y)
    assert kbtask.fingerprint(x) != kbtask.fingerprint(x.reshape(1000, 3))
    assert kbtask.fingerprint(torch.zeros(4)) != kbtask.fingerprint(torch.zeros(4, dtype=torch.int32))
    assert kbtask.fingerprint(3) is None


AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def _others_can_run_python() -> bool:
    """Whether another user can reach this interpreter and its libraries (every folder above
    them searchable by others): not so for a Python installed in root's home folder."""
    import sys
    from pathlib import Path

    for top in {Path(sys.executable).resolve(), Path(os.__file__).resolve(), Path(torch.__file__).resolve()}:
        for d in top.parents:
            if not os.stat(d).st_mode & 0o001:
                return False
    return True


@pytest.mark.skipif(not AS_ROOT or not _others_can_run_python(),
                    reason="starting the child as another user needs root and an interpreter that user can run")
def test_a_child_started_as_another_user_runs_and_cannot_write_our_files(tmp_path, monkeypatch):
    from kbrepro.harness import candidate as hc

    ours = tmp_path / "ours.txt"
    ours.write_text("parent's")
    os.chmod(tmp_path, 0o700)
    monkeypatch.setenv("KBREPRO_CANDIDATE_UID", "65534")
    rec = hc.run_candidate(hc.CandidateSpec("c", HONEST, "task.py", TASK), hc.PROFILES["quick"], tmp_path / "w1",
                           device="cpu")
    assert rec["observations"]["failure"] is None and rec["verdicts"][0]["passed"] is True
    evil = HONEST + f"open({str(ours)!r}, 'w').write('candidate')\n".encode()
    rec = hc.run_candidate(hc.CandidateSpec("c", evil, "task.py", TASK), hc.PROFILES["quick"], tmp_path / "w2",
                           device="cpu")
    assert rec["verdicts"][0]["passed"] is False and "PermissionError" in rec["observations"]["failure"]
    assert ours.read_text() == "parent's"


def test_a_bad_candidate_uid_is_a_usage_error(monkeypatch):
    from kbrepro.errors import UsageError
    from kbrepro.harness import candidate as hc

    monkeypatch.setenv("KBREPRO_CANDIDATE_UID", "0")
    with pytest.raises(UsageError):
        hc.candidate_uid()


def _forger(raw: bytes) -> bytes:
    """A candidate that, inside its forward, writes ``raw`` as a reply header into the child's
    pipe (found with gc) before the real server can answer."""
    return HONEST.replace(b"    def forward(self, x):\n", b'''    def forward(self, x):
        import gc, multiprocessing.connection as mc
        gc.unfreeze()  # the child freezes its heap after each collection: frozen objects are not listed
        for o in gc.get_objects():
            if isinstance(o, mc.Connection) and not o.closed:
                o.send_bytes(RAW)
''') + b"\nRAW = " + repr(raw).encode() + b"\n"


@pytest.mark.parametrize("forged,fragment", [
    (b'{"ok": true, "outputs": 5, "frames": []}', "outputs is not a list"),
    (b'{"ok": true, "outputs": [], "call_ms": Infinity, "frames": []}', "Infinity"),
    (b'{"ok": true, "outputs": [[[[[[[[[[1]]]]]]]]]], "frames": []}', "nested"),
])
@pytest.mark.slow
def test_a_reply_the_candidate_forges_is_refused_and_is_its_failure(tmp_path, forged, fragment):
    from kbrepro.harness import candidate as hc

    rec = hc.run_candidate(hc.CandidateSpec("c", _forger(forged), "task.py", TASK), hc.PROFILES["quick"],
                           tmp_path / "w", device="cpu")
    assert rec["verdicts"][0]["passed"] is False
    assert fragment in rec["observations"]["failure"], rec["observations"]["failure"]


def test_more_outputs_than_the_task_has_fail_the_official_check(tmp_path):
    from kbrepro.harness import candidate as hc

    src = HONEST.replace(b"return torch.clamp(x, min=0) * self.w", b"return torch.clamp(x, min=0) * self.w, x")
    rec = hc.run_candidate(hc.CandidateSpec("c", src, "task.py", TASK), hc.PROFILES["quick"], tmp_path / "w",
                           device="cpu")
    v = {x["name"]: x["passed"] for x in rec["verdicts"]}
    assert v["official_allclose"] is False
    assert rec["observations"]["cases"][0]["output_count"] == 2 and rec["observations"]["cases"][0]["reference_count"] == 1


def test_the_timing_request_runs_no_collection_inside_the_parents_clock():
    """A full collection with torch loaded takes tens of ms; inside a timing request it was
    counted by host_clock_agrees as time the candidate's timer did not report (an honest
    candidate failed on an H200). The collection is a request of its own before it."""
    events = []

    class FakeGC:
        def __init__(self):
            self.on = True

        def isenabled(self):
            return self.on

        def collect(self):
            events.append("collect")

        def freeze(self):
            events.append("freeze")

        def disable(self):
            events.append("disable")
            self.on = False

        def enable(self):
            events.append("enable")
            self.on = True

    srv = candidate_server.Server.__new__(candidate_server.Server)
    srv.torch, srv.gc, srv.flush_buf = torch, FakeGC(), None
    srv.models, srv.inputs, srv.kept = {"main": object()}, {"timing": []}, []
    srv._time_loop = lambda *a: events.append("loop")
    assert srv.time({"cmd": "time", "ids": ["timing"], "n": 1}) == {"times_ms": []}
    assert events == ["disable", "loop", "enable"]
    events.clear()
    assert srv.collect() == {} and events == ["collect", "freeze"]


PARENT = r'''
import sys, time
sys.path[:0] = sys.argv[1:2]
from kbrepro.harness import isolate
TASK, SRC = open(sys.argv[2], "rb").read(), open(sys.argv[3], "rb").read()
with isolate.CandidateProcess() as p:
    print(p.proc.pid, flush=True)
    p.request({"cmd": "build", "device": "cpu", "seed": 0}, [SRC, TASK], timeout_s=60)
'''


def test_a_child_dies_with_its_killed_parent_and_prints_no_traceback(tmp_path):
    """The parent killed (SIGKILL) while its candidate's build still runs: the child goes with
    it at once (it would have run on, then printed a BrokenPipeError traceback; issue 29)."""
    import signal
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "task.py").write_bytes(TASK)
    (tmp_path / "cand.py").write_bytes(HONEST + b"\nimport time\ntime.sleep(8)\n")
    root = str(Path(isolate.__file__).resolve().parent.parent.parent)
    parent = subprocess.Popen([sys.executable, "-c", PARENT, root, str(tmp_path / "task.py"), str(tmp_path / "cand.py")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    child = int(parent.stdout.readline())
    time.sleep(1.0)  # the child is in the candidate's import
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=10)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 5:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        with open(f"/proc/{child}/stat") as f:
            if f.read().split(") ", 1)[1].startswith("Z"):
                break
        time.sleep(0.05)
    else:
        pytest.fail("the child outlived its parent by 5 s")
    time.sleep(0.2)
    err = parent.stderr.read().decode()
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_request_while_overlaps_the_parents_work_and_fails_closed():
    """The parent's own draw runs while the child draws the same set (issue 29): both copies
    hold the same bits, the parent's result comes back with the reply, ``host_ms`` is the
    child's reply time (not the parent's work), and a ``meanwhile`` that raises stops the
    child (its reply would be read by no one) and propagates as it is."""
    task = kbtask.load_task(TASK)
    with isolate.CandidateProcess() as p:
        _build(p)
        def slow_draw():  # the parent's own work outlasts the child's reply (busy, not asleep)
            end = time.perf_counter() + 0.3
            while time.perf_counter() < end:
                pass
            return kbtask.draw_inputs(task, 3, "official", "cpu")

        rep, xs = p.request_while({"cmd": "draw", "id": "a", "seed": 3, "distribution": "official"}, slow_draw)
        assert rep.header["count"] == 1 and rep.host_ms < 300
        out = p.request({"cmd": "call", "id": "a"})
        y = wire.frame_tensor(out.header["outputs"][0]["tensor"], out.frames[0])
        model = kbtask.build_model(task, task.Model, 0, "cpu")
        assert torch.equal(y, model(*xs).detach())

        def boom():
            raise RuntimeError("the parent's own draw failed")

        with pytest.raises(RuntimeError, match="own draw failed"):
            p.request_while({"cmd": "draw", "id": "b", "seed": 4, "distribution": "official"}, boom)
        with pytest.raises(CandidateFailure, match="stopped waiting"):
            p.request({"cmd": "call", "id": "a"})


def test_the_budget_counts_from_the_first_request():
    """The parent builds the task's model while the child starts (issue 29): that time is the
    parent's, never taken from the candidate's budget, whose clock starts with the first request."""
    with isolate.CandidateProcess(budget_s=600.0) as p:
        assert p.deadline is None
        t0 = time.monotonic()
        _build(p)
        assert t0 + 600.0 <= p.deadline <= time.monotonic() + 600.0
