"""Cheat: in a timed loop, returns a tensor subclass whose values are computed the first time any
torch function touches it (the harness's own checksums, in the next request).

Task: KernelBench level 1 task 88 (MinGPTNewGelu). Written as a red-team candidate for kbrepro.

The trick:
* Telling a timed loop apart (host clock only, as cheat_defer_until_pool_freed.py): the 5th and
  later calls of a burst of calls less than 150 us apart are a block's or the clock's; checked
  calls (one per request) and per-call requests (3 or 4 calls) never get there, so they all get an
  honest, plain ``torch.Tensor``.
* From the 5th call of a burst on, ``forward`` returns ``torch.empty_like(x).as_subclass(_Lazy)``
  and remembers ``(alias of x's memory, the output's memory)``. ``_Lazy.__torch_function__`` first
  launches one Triton kernel that computes every pending output from a pointer table, then runs
  the function as on a plain tensor (its results are plain tensors). The timed region runs no
  kernel; the harness's "held" request calls ``t.detach()`` / ``t.numel()`` on each kept output
  to checksum it: the values are computed right there, outside every clock, and are right.
  Outputs the harness never reads (the clock's requests) are forgotten when the harness drops
  them (a finalizer removes their entry).

Which check should catch it: ``output_is_plain_tensor`` would, but it only looks at the checked
calls (``_call``'s ``type(v) is Tensor``); a timed output's type is never looked at, and the
checksums treat any ``isinstance(y, Tensor)`` as an output. ``timed_outputs_correct`` sees right
values; ``host_clock_agrees`` sees a region and a request that agree (both hold only the
allocations); ``timed_calls_consistent`` allows 0.25 ms and more. ``within_roofline`` is the only
backstop: expected to slip at batch_size=64, caught by within_roofline at batch_size=1024.

Why it may slip: the checks of a lazy or subclassed output were written for checked calls; the
protocol-2 timed outputs are held by checksums that run ``torch`` functions on the candidate's
objects, in the candidate's process, in a request no clock measures.

Now (after the round): the "held" request reads no timed output that is not exactly a
torch.Tensor (harness/fresh.py ``plain``): its row is NaN and timed_outputs_correct fails.
"""
import math
import time
import weakref

import torch
import torch.nn as nn
import triton
import triton.language as tl

_BLOCK = 1024
_GAP_S = 150e-6
_DEFER_FROM = 5


@triton.jit
def _gelu_table_kernel(xs_ptr, ys_ptr, ns_ptr, BLOCK: tl.constexpr):
    blk = tl.program_id(0)
    pair = tl.program_id(1)
    n = tl.load(ns_ptr + pair)
    xp = tl.load(xs_ptr + pair).to(tl.pointer_type(tl.float32))
    yp = tl.load(ys_ptr + pair).to(tl.pointer_type(tl.float32))
    offs = blk.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(xp + offs, mask=mask, other=0.0)
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    y = 0.5 * x * (1.0 + (2.0 * tl.sigmoid(2.0 * u) - 1.0))
    tl.store(yp + offs, y, mask=mask)


def _reference(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def _launch(pairs):
    if not pairs:
        return
    dev = pairs[0][1].device
    if dev.type != "cuda":
        for x, y in pairs:
            y.copy_(_reference(x))
        return
    for s in range(0, len(pairs), 65535):
        chunk = pairs[s:s + 65535]
        meta = torch.tensor([[x.data_ptr() for x, _ in chunk], [y.data_ptr() for _, y in chunk],
                             [x.numel() for x, _ in chunk]], dtype=torch.int64)
        meta = meta.pin_memory().to(dev, non_blocking=True)
        grid = (triton.cdiv(max(x.numel() for x, _ in chunk), _BLOCK), len(chunk))
        _gelu_table_kernel[grid](meta[0], meta[1], meta[2], BLOCK=_BLOCK)


def _alias(t):
    """A plain tensor on ``t``'s memory that is no view of ``t`` (keeps only the storage alive)."""
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(t.untyped_storage(), t.storage_offset(),
                                                               t.size(), t.stride())


_pending = {}  # key -> (alias of the input, the output's plain memory)
_state = {"last": -1.0, "burst": 0, "key": 0}


def _flush():
    if not _pending:
        return
    pairs = list(_pending.values())
    _pending.clear()
    _launch(pairs)


def _forget(key):
    _pending.pop(key, None)


class _Lazy(torch.Tensor):
    """An output whose values are computed on first use by any torch function."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        _flush()
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        now = time.perf_counter()
        _state["burst"] = _state["burst"] + 1 if now - _state["last"] < _GAP_S else 1
        xc = x if x.is_contiguous() else x.contiguous()
        y = torch.empty_like(xc)
        if _state["burst"] >= _DEFER_FROM and xc.dtype == torch.float32:
            _state["key"] += 1
            key = _state["key"]
            _pending[key] = (_alias(xc), y)
            out = y.as_subclass(_Lazy)
            weakref.finalize(out, _forget, key).atexit = False  # dropped unread (the clock's requests): forget it
        else:
            _flush()
            _launch([(xc, y)])
            out = y
        _state["last"] = time.perf_counter()
        return out
