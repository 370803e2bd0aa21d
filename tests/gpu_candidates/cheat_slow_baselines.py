"""Cheat: an honest kernel that makes the *baselines* slower: at each timed request it leaves a
spin kernel of about 120 ms running on a side stream of its own, so that the parent's eager,
TorchScript and torch.compile arms, timed right after it on the same GPU, share the GPU with it.

Task: KernelBench level 1 task 88 (MinGPTNewGelu). Written as a red-team candidate for kbrepro.

The trick: the candidate's child and the harness's parent are two processes, two CUDA contexts on
one GPU. Kernels of two contexts do not run at once; the GPU time-slices between them while both
have work. In a timed request (told apart as the 5th call of a burst of calls less than 150 us
apart: block and clock requests only; checked calls and per-call requests never reach it) the
candidate queues ``torch.cuda._sleep`` (one spinning thread, ~120 ms) on a non-blocking side stream.
* In its own process the spin only shares the GPU with its own kernels (same context: they run
  concurrently, the spin holds one SM slot); ``b.synchronize()`` and the "held" request's
  checksums wait on the calling stream only, so its own requests are not slowed.
* In the parent's arms of the same round (and the next round's arms before the candidate's turn)
  every kernel waits for time slices: eager, TorchScript and compile are timed slower.
* Before each of its own timed requests the child's "pool" request runs ``torch.cuda.synchronize()``
  (device-wide): whatever is left of the spin ends there, in a request no clock measures, so its
  own regions start on an idle GPU. Checked calls come only after the per-call requests (whose
  pool requests also synchronise), so no checked call finds the spin (``no_work_after_return``),
  and the profiled call never launches one (``single_stream``).

Which check should catch it: none; every check of the candidate judges the candidate's own
outputs and clocks, and nothing checks that the baselines were timed on a GPU the candidate left
alone. Expected to slip: the bundle's eager/compile medians should be clearly above those of a run
of tests/gpu_candidates/honest_gelu_triton.py at the same size (this kernel is that one), so the
"faster than eager / than torch.compile" claims (K<n>c, K<n>d) are inflated. How much depends on
the GPU's time-slice policy (default compute mode, no MPS); run both on the same machine.

Now (after the round): "time_fresh" synchronises every stream of the child's device before its
reply, so the spin lands inside the parent's clock of each timed request (host_clock_agrees) and
the baselines are timed on an idle GPU.
"""
import time

import torch
import torch.nn as nn
import triton
import triton.language as tl

_GAP_S = 150e-6
_HOG_FROM = 5
#: cycles of the spin kernel (about 120 ms at ~2 GHz; clock64 keeps counting while the context is switched out)
_HOG_CYCLES = 240_000_000


@triton.jit
def _gelu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    y = 0.5 * x * (1.0 + (2.0 * tl.sigmoid(2.0 * u) - 1.0))
    tl.store(y_ptr + offs, y, mask=mask)


def gelu(x):
    x = x.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    _gelu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    return out


_state = {"last": -1.0, "burst": 0, "side": None}


def _hog(device):
    side = _state["side"]
    if side is None:
        side = _state["side"] = torch.cuda.Stream(device=device)  # non-blocking: no implicit sync with stream 0
    with torch.cuda.stream(side):
        torch.cuda._sleep(_HOG_CYCLES)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        now = time.perf_counter()
        _state["burst"] = _state["burst"] + 1 if now - _state["last"] < _GAP_S else 1
        y = gelu(x)
        if _state["burst"] == _HOG_FROM and x.is_cuda:
            _hog(x.device)
        _state["last"] = time.perf_counter()
        return y
