"""Outputs read through CUDA IPC (harness/ipc.py, issue 29): every field of a reply's handle is
checked before the parent maps anything (no GPU needed), and on a GPU a shared output comes back
with its bits while a child that claims more bytes than its allocation holds is refused."""
from __future__ import annotations

import base64

import pytest
import torch

from kbrepro.harness import ipc, wire


def _b(x: bytes) -> str:
    return base64.b64encode(x).decode()


def _fields(**kw):
    d = {"device": 0, "handle": _b(b"\x02c" + b"h" * 64), "size": 4096, "offset": 0,
         "ref_counter": _b(b"/torch_12_34_5"), "ref_counter_offset": 3, "event": None, "event_sync": False}
    d.update(kw)
    return d


def test_good_fields_pass():
    f = ipc.check_fields(_fields(), 4096)
    assert f["handle"] == b"\x02c" + b"h" * 64 and f["ref_counter"] == b"/torch_12_34_5"
    assert f["ref_counter_offset"] == 3 and f["event"] == b""  # never waited on (the child synchronises)
    assert ipc.check_fields(_fields(handle=_b(b"\x03c" + b"h" * 64), event=_b(b"e" * 64)), 4096)["event"] == b"e" * 64


@pytest.mark.parametrize("bad, why", [
    ({"size": 100}, "smaller than the tensor"),
    ({"size": True}, "ipc.size"),
    ({"offset": -1}, "ipc.offset"),
    ({"device": "0"}, "ipc.device"),
    ({"handle": "not base64!"}, "not base64"),
    ({"handle": ""}, "plain cudaMalloc"),
    # an expandable segment's handle: torch divides by a size the child writes (SIGFPE on zero)
    ({"handle": _b(b"\x02e" + b"\x00" * 64)}, "plain cudaMalloc"),
    ({"handle": _b(b"\x02e")}, "plain cudaMalloc"),
    ({"handle": _b(b"h" * 64)}, "plain cudaMalloc"),
    ({"handle": _b(b"\x02c" + b"h" * 65)}, "plain cudaMalloc"),
    ({"handle": "A" * 5000}, "short base64"),
    ({"ref_counter": base64.b64encode(b"/../../etc/passwd").decode()}, "ref-counter files"),
    ({"ref_counter": base64.b64encode(b"/torch_1_2_3\x00x").decode()}, "ref-counter files"),
    ({"ref_counter_offset": 10000}, "ref_counter_offset"),
    ({"event": 5}, "ipc.event"),
])
def test_bad_fields_are_refused(bad, why):
    with pytest.raises(ValueError, match=why):
        ipc.check_fields(_fields(**bad), 4096)


def test_a_shape_torch_cannot_hold_is_malformed_not_a_harness_error():
    """A shape whose strides overflow raised torch's RuntimeError (read as our harness error)."""
    with pytest.raises(ValueError, match="too many elements"):
        wire.reply_tensor({"dtype": "float32", "shape": [0, 2 ** 31, 2 ** 31, 2 ** 31]}, iter([b""]), "cpu")


def test_an_ipc_output_in_a_cpu_run_is_malformed():
    d = {"dtype": "float32", "shape": [4], "nbytes": 16, "ipc": _fields()}
    with pytest.raises(ValueError, match="without CUDA"):
        wire.reply_tensor(d, iter(()), "cpu")
    with pytest.raises(ValueError, match="without its frame"):
        wire.reply_tensor({"dtype": "float32", "shape": [4], "nbytes": 16}, iter(()), "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("lie", [False, "size", "shape", "offset"])
def test_shared_output_round_trip_on_a_gpu(lie):
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    q, back = ctx.Queue(), ctx.Queue()
    shape = [3, 1000]
    p = ctx.Process(target=_child_share_pair, args=(q, back, shape, lie))
    p.start()
    try:
        meta = q.get(timeout=120)
        # a child that claims more bytes than it shared: the buffer alone, or the tensor too
        d = {"dtype": "float32", "shape": [3, 1000 << 20] if lie == "shape" else shape, "nbytes": 12000, "ipc": meta}
        if lie == "offset":  # the mapping's start moved into other memory (the parent's own)
            meta["offset"] += 1 << 40
        if lie:
            with pytest.raises(ValueError, match="reaches past the allocation|cannot be opened|more than"):
                wire.reply_tensor(d, iter(()), "cuda", 1 << 40)
            with pytest.raises(ValueError, match="more than the 100"):
                wire.reply_tensor({**d, "shape": shape}, iter(()), "cuda", 100)
        else:
            y = wire.reply_tensor(d, iter(()), "cuda")
            want = torch.arange(3000, dtype=torch.float32, device="cuda").reshape(shape) * 0.5
            assert y.is_cuda and torch.equal(y, want)
    finally:
        back.put(1)
        p.join(60)


def _child_share_pair(q, back, shape, lie):
    import torch as t

    x = t.arange(int(t.tensor(shape).prod()), dtype=t.float32, device="cuda").reshape(shape) * 0.5
    keep: list = []
    meta = ipc.share(x, keep)
    if lie:
        meta["size"] *= 1 << 20
    q.put(meta)
    back.get(timeout=120)
