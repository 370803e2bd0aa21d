"""The candidate runs in a spawned child (harness/isolate.py): on CPU, what it can and cannot
do to the harness."""
from __future__ import annotations

import pytest
import torch

from kbrepro.harness import isolate

TASK = b'''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n))
    def forward(self, x):
        return torch.relu(x) * self.w

def get_inputs():
    return [torch.rand(4, 8)]

def get_init_inputs():
    return [8]
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

#: returns zeros and patches, in its own process, everything a checker or timer would use
PATCHER = HONEST.replace(b"return torch.clamp(x, min=0) * self.w", b"return torch.zeros_like(x)") + b'''
import time
torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
time.perf_counter = lambda: 0.0
'''


def _reference(seed: int, xs):
    ns = {}
    exec(compile(TASK, "task.py", "exec"), ns)
    torch.manual_seed(seed)
    m = ns["Model"](*ns["get_init_inputs"]())
    return [m(*x) for x in xs]


def _inputs():
    g = torch.Generator().manual_seed(5)
    return [[torch.randn(4, 8, generator=g)] for _ in range(3)]


def test_an_honest_candidate_gives_the_references_outputs_with_the_same_init_seed():
    xs = _inputs()
    run = isolate.run_candidate(HONEST, TASK, seed=7, inputs=xs, timeout_s=120)
    assert run.ok, run.error
    assert len(run.outputs) == 3 and len(run.times_ms) == 3 and all(t >= 0 for t in run.times_ms)
    for (out,), want in zip(run.outputs, _reference(7, xs)):
        assert torch.equal(out, want.detach())
    other = isolate.run_candidate(HONEST, TASK, seed=8, inputs=xs[:1], timeout_s=120)
    assert not torch.equal(other.outputs[0][0], run.outputs[0][0])  # the seed reaches ModelNew's init


def test_patching_the_checkers_and_timers_changes_only_the_candidates_process():
    xs = _inputs()
    run = isolate.run_candidate(PATCHER, TASK, seed=7, inputs=xs, timeout_s=120)
    assert run.ok, run.error
    want = _reference(7, xs)[0].detach()
    assert not torch.allclose(want, run.outputs[0][0])  # ours is not patched
    assert run.times_ms[0] >= 0 and torch.allclose is not None


@pytest.mark.parametrize("src, fragment", [
    (b"import os\nos._exit(3)\n", "exit code 3"),
    (b"raise RuntimeError('boom')\n", "RuntimeError: boom"),
    (b"X = 1\n", "defines no ModelNew"),
    # a forged reply through the child's own pipe: read as strict JSON, never unpickled
    (b"import gc, pickle\n"
     b"c = [o for o in gc.get_objects() if type(o).__name__ == 'Connection']\n"
     b"c[0].send_bytes(pickle.dumps({'ok': True}))\n"
     b"import os\nos._exit(0)\n", "malformed or oversized reply"),
])
def test_a_candidate_that_dies_raises_or_forges_its_reply_is_a_named_failure(src, fragment):
    run = isolate.run_candidate(src, TASK, seed=0, inputs=_inputs()[:1], timeout_s=120)
    assert not run.ok and fragment in run.error, run.error


def test_a_candidate_that_hangs_is_stopped_at_the_timeout():
    run = isolate.run_candidate(b"import time\ntime.sleep(600)\n", TASK, seed=0, inputs=_inputs()[:1], timeout_s=3)
    assert not run.ok and "did not answer within 3 s" in run.error and run.seconds < 60


def test_packed_tensors_round_trip_and_bad_ones_are_refused():
    for t in (torch.randn(3, 5), torch.arange(6, dtype=torch.int64).reshape(2, 3)[:, 1:], torch.empty(0, 4),
              torch.tensor([float("nan"), -0.0, float("inf")])):
        back = isolate.unpack_tensor(isolate.pack_tensor(t))
        assert back.dtype == t.dtype and back.shape == t.shape
        assert torch.equal(back.view(torch.uint8) if back.numel() else back,
                           t.contiguous().view(torch.uint8) if t.numel() else back)
    good = isolate.pack_tensor(torch.ones(2, 2))
    for bad, fragment in (({**good, "dtype": "os"}, "not a torch dtype of a reply"), ({**good, "shape": [3, 2]}, "do not fill"),
                          ({**good, "b64": "***"}, "not base64"), ({**good, "shape": [-1]}, "negative")):
        with pytest.raises(ValueError, match=fragment):
            isolate.unpack_tensor(bad)


def test_a_reply_that_stops_half_way_does_not_outlast_the_deadline():
    """Found by a red-team pass: the candidate wrote a 4-byte length header down the child's
    own pipe and slept; reading it blocked past the timeout."""
    src = (b"import os, struct, sys, time\n"
           b"f = sys._getframe(1)\n"
           b"while 'conn' not in f.f_locals:\n    f = f.f_back\n"
           b"os.write(f.f_locals['conn'].fileno(), struct.pack('!i', 100))\n"
           b"time.sleep(600)\n")
    run = isolate.run_candidate(src, TASK, seed=0, inputs=_inputs()[:1], timeout_s=3)
    assert not run.ok and "did not answer within 3 s" in run.error and run.seconds < 30


@pytest.mark.parametrize("bad, fragment", [
    ({"dtype": "qint8", "shape": [1], "b64": "AA=="}, "not a torch dtype of a reply"),
    ({"dtype": "float32", "shape": [0, 2 ** 62, 2 ** 62], "b64": ""}, "a dimension over"),
    ({"dtype": "float32", "shape": [1.5], "b64": "AAAAAA=="}, "not a shape"),
])
def test_reply_tensors_a_candidate_could_forge_are_refused(bad, fragment):
    with pytest.raises(ValueError, match=fragment):
        isolate.unpack_tensor(bad)
