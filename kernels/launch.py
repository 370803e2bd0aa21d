"""Launching compiled kernels on PyTorch tensors, safely with respect to CUDA graphs.

Every launch goes on ``torch.cuda.current_stream()`` as read at that launch, so that a
CUDA graph captured around it records the launch, and timing events recorded on the
current stream bracket it. Passing an explicit ``stream`` other than the current one while
the current stream is capturing raises :class:`LaunchError`: the launch would run outside
the graph and the graph would replay stale results.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from kbrepro.errors import ReproError, UsageError

THREADS_PER_BLOCK = 256


class LaunchError(ReproError):
    """A launch that would not do what the caller believes (wrong stream during capture)."""

    exit_code = 1


class _StreamRef:
    """The minimal object CuPy's ``Function.__call__`` needs: a ``.ptr`` CUDA stream handle."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int):
        self.ptr = int(ptr)


def blocks_for(n: int, threads: int = THREADS_PER_BLOCK) -> int:
    """Blocks of ``threads`` threads that cover ``n`` elements (at least 1)."""
    return max(1, (int(n) + threads - 1) // threads)


def check_float32_cuda(x, what: str, *, ndim: int | None = None) -> None:
    """Raise UsageError unless ``x`` is a contiguous float32 CUDA tensor (of ``ndim`` dims)."""
    import torch

    if not (isinstance(x, torch.Tensor) and x.is_cuda and x.dtype == torch.float32 and x.is_contiguous()
            and (ndim is None or x.dim() == ndim)):
        raise UsageError(f"{what} must be a contiguous {'' if ndim is None else f'{ndim}-D '}float32 CUDA tensor",
                         "call .contiguous().float().cuda() on it")


@dataclass
class KernelSet:
    """The kernels of one compile variant, as CuPy ``Function`` objects by entry-point name
    (from :func:`kernels.compile.load_cubin` or CuPy's RawModule), ready to launch."""

    variant: str
    functions: Mapping[str, object]

    def launch(self, name: str, grid: Sequence[int], block: Sequence[int], args: tuple, *,
               device_index: int = 0, stream=None, shared_bytes: int = 0) -> None:
        """Launch entry point ``name`` with CuPy-style ``args`` (device pointers as ints,
        scalars as numpy scalars of the kernel's parameter types) on the current stream.

        ``stream``: leave ``None`` (the current stream). Raises UsageError for an unknown
        entry point, LaunchError for a side stream while the current stream captures.
        """
        import torch

        fn = self.functions.get(name)
        if fn is None:
            raise UsageError(f"variant {self.variant} has no kernel {name!r}", f"kernels: {sorted(self.functions)}")
        current = torch.cuda.current_stream(device_index)
        if stream is None:
            stream = current
        elif stream != current and torch.cuda.is_current_stream_capturing():
            raise LaunchError(
                f"launch of {name} on a side stream while the current stream is capturing a CUDA graph "
                f"(variant {self.variant})",
                "launch on torch.cuda.current_stream(); a side-stream launch is not captured "
                "and the graph would replay stale output")
        import cupy as cp  # type: ignore

        with cp.cuda.Device(device_index):
            fn(tuple(grid), tuple(block), args, stream=_StreamRef(stream.cuda_stream), shared_mem=shared_bytes)
