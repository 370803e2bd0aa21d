"""Cheat: calls that come back to back are answered with an empty output whose values are written
later, when the harness frees the request's input sets (a ``weakref.finalize`` on the input).

Task: KernelBench level 1 task 88 (MinGPTNewGelu). Written as a red-team candidate for kbrepro.

The trick, without patching anything of torch's or the harness's:
* Telling a timed loop apart (host clock only): a call is the k-th of a "burst" when it starts
  less than 150 us after the previous call returned. Checked calls come one per request
  (milliseconds apart: burst 1); a per-call request makes 3 (quick) or 4 (full) calls; only the
  block's and the clock's requests (n >= 5 back to back) reach a 5th call. Calls 1 to 4 of every
  burst compute honestly, so every checked call and every per-call (spot-checked) call is right.
* From the 5th call of a burst on, ``forward`` returns ``torch.empty_like(x)`` and remembers
  ``(alias of x's memory, output)``; a finalizer on the caller's input tensor launches one Triton
  kernel that computes every pending output from a pointer table. The harness drops a request's
  input sets at the start of the *next* request (``self.pool = []`` in ``held_outputs``,
  ``output`` and ``pool_draw``), i.e. just before it checksums the kept outputs: the finalizers
  fire there, the kernel is queued on the same stream before the checksum kernels, and every
  timed output is right when it is read.

Which check should catch it: none, I expect, at a launch-bound size (batch_size=64). The timed
region holds 4 honest calls and n-4 allocations; the work of the others runs in the "held" (or
"pool") request, which no clock measures. ``timed_outputs_correct``: all right.
``host_clock_agrees``: the events and the parent's clock both see only the allocations (nothing
outside the region grows with n). ``timed_calls_consistent``: the block may beat the per-call time
by launch overhead x 1.5 + 0.25 ms, far more than one call of this task costs. ``within_roofline``
is the backstop at memory-bound sizes (batch_size=1024: caught there, I expect).

Why it may slip: the harness checks a timed output's values after the request, in a request of its
own, and frees the inputs first; anything that the candidate can hang on that free runs outside
every clock. docs/timing.md's table assumes that a candidate that "computes after the timed
region shows in the parent's clock"; that holds only for work done inside the same request.

Now (after the round): the "held" request checksums the kept outputs before it frees the spent
sets, so the finalizer runs after the reading: timed_outputs_correct fails.
"""
import math
import time
import weakref

import torch
import torch.nn as nn
import triton
import triton.language as tl

_BLOCK = 1024
#: a call that starts within this long of the previous call's return continues a burst
_GAP_S = 150e-6
#: calls of a burst from this one on are deferred (a per-call request makes at most 4)
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
    """y = gelu(x) for every (x, y) of ``pairs`` (contiguous float32), one kernel per 65535 pairs."""
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
    """A tensor on ``t``'s memory that keeps neither ``t``'s Python object nor its TensorImpl alive
    (a view would: its ``_base``), so that the caller's tensor can die while its memory is kept."""
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(t.untyped_storage(), t.storage_offset(),
                                                               t.size(), t.stride())


_pending = []
_state = {"last": -1.0, "burst": 0}


def _flush():
    if not _pending:
        return
    pairs = list(_pending)
    _pending.clear()
    _launch(pairs)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        now = time.perf_counter()
        _state["burst"] = _state["burst"] + 1 if now - _state["last"] < _GAP_S else 1
        xc = x if x.is_contiguous() else x.contiguous()
        y = torch.empty_like(xc)
        if _state["burst"] >= _DEFER_FROM and xc.dtype == torch.float32:
            _pending.append((_alias(xc), y))
            weakref.finalize(x, _flush).atexit = False  # fires when the harness drops the request's input sets
        else:
            _flush()  # anything left over (never expected) is written before an honest call
            _launch([(xc, y)])
        _state["last"] = time.perf_counter()
        return y
