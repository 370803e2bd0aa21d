"""Launching the fused tails on PyTorch tensors.

Every launch goes on ``torch.cuda.current_stream()`` as read at that launch, so that a
CUDA graph captured around it records the launch, and timing events recorded on the
current stream bracket it. Passing an explicit ``stream`` other than the current one while
the current stream is capturing raises :class:`LaunchError`: the launch would run outside
the graph and the graph would replay stale results.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from kbrepro.errors import ReproError, UsageError

#: Kernel entry points in ``fused_tails.cu``, by KernelBench level-2 task id.
KERNEL_NAMES = {53: "fused_tail_53", 81: "fused_tail_81", 95: "fused_tail_95"}
THREADS_PER_BLOCK = 256


class LaunchError(ReproError):
    """A launch that would not do what the caller believes (wrong stream during capture)."""

    exit_code = 1


class _StreamRef:
    """The minimal object CuPy's ``Function.__call__`` needs: a ``.ptr`` CUDA stream handle."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int):
        self.ptr = int(ptr)


@dataclass
class TailKernels:
    """The three tails of one compile variant, as CuPy functions, ready to launch.

    ``functions`` maps kernel names of :data:`KERNEL_NAMES` to ``cupy`` ``Function``
    objects (from :func:`kernels.compile.load_cubin` or CuPy's RawModule).
    """

    variant: str
    functions: Mapping[str, object]

    def launch(self, task: int, x, params: Mapping, *, out=None, stream=None):
        """Run the fused tail of ``task`` on ``x``.

        ``x``: contiguous 2-D ``torch.float32`` CUDA tensor of shape (rows, cols), the Linear
        output. ``params``: task 53 ``{"scale": float, "min": float, "max": float}``; task 81
        ``{}``; task 95 ``{"bias": float32 CUDA tensor of shape (cols,)}``. ``out``: optional
        tensor like ``x`` to write into; a new one is allocated otherwise. ``stream``: leave
        ``None`` (the current stream). Returns the output tensor, same shape and dtype.
        Raises UsageError on bad inputs, LaunchError on a stream that escapes a capture.
        """
        import numpy as np
        import torch

        if task not in KERNEL_NAMES:
            raise UsageError(f"no fused tail for task {task}", f"supported tasks: {sorted(KERNEL_NAMES)}")
        if not (isinstance(x, torch.Tensor) and x.is_cuda and x.dtype == torch.float32
                and x.dim() == 2 and x.is_contiguous()):
            raise UsageError("the tail input must be a contiguous 2-D float32 CUDA tensor",
                             "call .contiguous().float().cuda() on the Linear output")
        y = torch.empty_like(x) if out is None else out
        if y.shape != x.shape or y.dtype != x.dtype or y.device != x.device or not y.is_contiguous():
            raise UsageError("out must be a contiguous tensor like x", "allocate it with torch.empty_like(x)")
        current = torch.cuda.current_stream(x.device)
        if stream is None:
            stream = current
        elif stream != current and torch.cuda.is_current_stream_capturing():
            raise LaunchError(
                f"tail launch on a side stream while the current stream is capturing a CUDA graph "
                f"(variant {self.variant}, task {task})",
                "launch on torch.cuda.current_stream(); a side-stream launch is not captured "
                "and the graph would replay stale output")
        n = x.numel()
        if task == 53:
            args = (x.data_ptr(), y.data_ptr(), np.int64(n), np.float32(params["scale"]),
                    np.float32(params["min"]), np.float32(params["max"]))
        elif task == 81:
            args = (x.data_ptr(), y.data_ptr(), np.int64(n))
        else:
            bias = params["bias"]
            cols = x.shape[1]
            if not (isinstance(bias, torch.Tensor) and bias.dtype == torch.float32 and bias.device == x.device
                    and bias.is_contiguous() and tuple(bias.shape) == (cols,)):
                raise UsageError("task 95 needs a contiguous float32 bias of one value per column on x's device",
                                 f"expected shape ({cols},)")
            args = (x.data_ptr(), bias.data_ptr(), y.data_ptr(), np.int64(n), np.int64(cols))
        if n == 0:
            return y
        blocks = (n + THREADS_PER_BLOCK - 1) // THREADS_PER_BLOCK
        import cupy as cp  # type: ignore

        with cp.cuda.Device(x.device.index):
            self.functions[KERNEL_NAMES[task]]((blocks,), (THREADS_PER_BLOCK,), args,
                                               stream=_StreamRef(stream.cuda_stream))
        return y
