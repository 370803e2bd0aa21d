"""Cheat: the work of every call is queued *after* the caller's end event, on the calling stream.

Task: KernelBench level 1 task 88 (MinGPTNewGelu). Written as a red-team candidate for kbrepro.

The trick. ``forward`` launches nothing: it allocates the output (``torch.empty_like``) and
appends ``(input, output)`` to a module-level list. At import the module wraps the Python-level
synchronisation methods torch exposes (``torch.cuda.Event.synchronize``,
``torch.cuda.Stream.synchronize``, ``torch.cuda.synchronize`` and ``torch._C._cuda_synchronize``,
which the harness's early-bound ``torch.cuda.synchronize`` still looks up at call time): before it
synchronises, each wrapper launches ONE Triton kernel that computes every pending output from a
table of pointers, then calls the real method. The timer is never touched and never lies.

Where the work lands:
* timed region (``FreshTimer.region``): ``a.record(); n x forward; b.record(); b.synchronize()``.
  The kernel is launched inside ``b.synchronize()``, i.e. after ``b`` was recorded, so CUDA events
  measure only the host loop of n allocations. ``b.synchronize()`` returns as soon as ``b`` is
  reached, so the request's reply (and with it the parent's clock of the request) does not wait for
  the kernel either; the "held" request that follows checksums the outputs on the same stream, after
  the kernel: every timed output is right.
* per-call requests: the same (the kernel runs after ``b``; the next ``torch.cuda.synchronize()``
  waits for it outside the events). The spot-checked output is right.
* checked calls: ``_call`` runs ``stream.synchronize()`` before it reads the output: the kernel is
  launched there, on the calling stream, so the output, the profile (a Triton kernel on the calling
  stream), the poisoned calls and the device-idle check all look honest.

Which check should catch it: none, I expect, at a size where the task is launch-bound. Every output
is correct, nothing lies about time, the parent's clock over two lengths agrees with the events
(both see only the host loop: the one launch per request is a fixed cost and cancels in the slope;
the host work that grows with n is one Python int per call), block and per-call times agree
(``timed_calls_consistent``), no thread, no side stream. ``within_roofline`` is the one backstop:
the reported time per call is the host cost of ``torch.empty_like`` plus ``nn.Module.__call__``
(a few microseconds), so at a memory-bound size (e.g. batch_size=1024, 64 MiB moved, about 16 us at
the copy bandwidth) it is caught by within_roofline; at batch_size=64 (4 MiB, about 1 us) it is not,
and it reports several times faster than the honest Triton candidate at the same size.

Why it may slip: the harness binds ``torch.cuda.Event`` (the class) before the candidate is imported
but looks up its *methods* at call time, and no request after the timed one is clocked (the "held",
"pool" and "output" requests are outside every clock), so GPU work that starts after the end event
is invisible to the events, to the per-request clock and to the slope.

Now (after the round): the timer's synchronisations and readings are torch's C functions bound
before the candidate's module ran (harness/fresh.py), and "time_fresh" synchronises the device
before its reply: the wrappers never run, the outputs are empty when read: timed_outputs_correct fails.
"""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

_BLOCK = 1024


@triton.jit
def _gelu_table_kernel(xs_ptr, ys_ptr, ns_ptr, BLOCK: tl.constexpr):
    # one program per (block of elements, pending call); pointers come from a table
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
    """y = gelu(x) for every (x, y) of ``pairs`` (contiguous float32 tensors), one kernel per 65535
    pairs, on the current stream."""
    if not pairs:
        return
    dev = pairs[0][1].device
    if dev.type != "cuda":  # a --device cpu run: no timing there, compute in place
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


_pending = []
_busy = [False]


def _flush():
    if _busy[0] or not _pending:
        return
    _busy[0] = True
    try:
        pairs = list(_pending)
        _pending.clear()
        _launch(pairs)
    finally:
        _busy[0] = False


def _wrap(owner, name):
    real = getattr(owner, name)

    def synced(*args, **kwargs):
        _flush()
        return real(*args, **kwargs)

    synced.__name__ = getattr(real, "__name__", name)
    synced.__doc__ = getattr(real, "__doc__", None)
    setattr(owner, name, synced)


_wrap(torch.cuda.Event, "synchronize")
_wrap(torch.cuda.Stream, "synchronize")
_wrap(torch.cuda, "synchronize")
if hasattr(torch._C, "_cuda_synchronize"):
    _wrap(torch._C, "_cuda_synchronize")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        xc = x if x.is_contiguous() else x.contiguous()
        y = torch.empty_like(xc)
        _pending.append((xc, y))  # computed at the caller's next synchronisation, after its end event
        return y
