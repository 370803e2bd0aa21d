"""What this machine can hold and do, read where a task or a candidate meets it: the host memory
available (:func:`available_bytes`), an allocation failure told from the task's or the
candidate's own error (:func:`is_out_of_memory`), and a CUDA initialisation that failed because
the machine has no CUDA GPU (:func:`needs_cuda`). Each is the machine's fact, never the task's or
the candidate's: the run stops with exit 4 (EnvironmentUnavailableError) and says what to do.

A leaf of the harness: it imports no torch at its top and nothing of ours but the errors and
the sizes' text, so that :mod:`kbrepro.harness.kbtask` and :mod:`kbrepro.harness.isolate` can
use it.
"""
from __future__ import annotations

import os
from typing import Mapping

from kbrepro.errors import EnvironmentUnavailableError
from kbrepro.model import sizes as msizes

#: the words of a host allocation that failed, as torch's CPU allocator and Python write them
#: (``[enforce fail at alloc_cpu.cpp:127] ... DefaultCPUAllocator: can't allocate memory: you
#: tried to allocate 6442450944 bytes``; ``MemoryError``)
HOST_OOM_MARKERS = ("DefaultCPUAllocator", "can't allocate memory", "Cannot allocate memory", "MemoryError")

#: the words of a CUDA initialisation that failed because there is no CUDA here (a torch built
#: without CUDA; no driver; no device)
NO_CUDA_MARKERS = ("Torch not compiled with CUDA enabled", "Found no NVIDIA driver", "No CUDA GPUs are available",
                   "no CUDA-capable device is detected")

#: the next step of every refusal for want of a CUDA GPU
CUDA_HINT = "run it on a machine with an NVIDIA GPU (without --device cpu)"


def _meminfo_available(path: str = "/proc/meminfo") -> int | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_left(root: str = "/sys/fs/cgroup") -> int | None:
    """What this process's cgroup (v2) may still take: ``memory.max`` less ``memory.current``;
    None without a limit (a container without one, or no cgroup v2)."""
    try:
        with open(os.path.join(root, "memory.max"), encoding="ascii") as f:
            limit = f.read().strip()
        if limit == "max":
            return None
        with open(os.path.join(root, "memory.current"), encoding="ascii") as f:
            used = int(f.read().strip())
        return max(0, int(limit) - used)
    except (OSError, ValueError):
        return None


def available_bytes() -> int | None:
    """The host memory a run may still take: ``MemAvailable`` of /proc/meminfo, or what the
    cgroup's limit leaves where that is less; None where neither can be read (not Linux)."""
    got = [v for v in (_meminfo_available(), _cgroup_left()) if v is not None]
    return min(got) if got else None


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is a host allocation that failed: MemoryError, or torch's CPU allocator's
    RuntimeError (``DefaultCPUAllocator: can't allocate memory``; torch raises no
    OutOfMemoryError on the CPU). A CUDA ``torch.OutOfMemoryError`` is not host memory and is
    left to its callers."""
    if isinstance(exc, MemoryError):
        return True
    return isinstance(exc, RuntimeError) and out_of_memory_text(str(exc))


def out_of_memory_text(text: str) -> bool:
    """Whether an error's text (``Type: message``, as a candidate's child reports it) says a
    host allocation failed (:data:`HOST_OOM_MARKERS`)."""
    return any(m in text for m in HOST_OOM_MARKERS)


def needs_cuda(exc: BaseException) -> bool:
    """Whether ``exc`` is CUDA failing to start here (a ``.cuda()``, a ``device="cuda"``, a
    ``torch.cuda`` call on a machine without CUDA): raised inside ``torch.cuda._lazy_init``, or
    with one of :data:`NO_CUDA_MARKERS`. No size helps such a task: it needs a CUDA GPU."""
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name == "_lazy_init" and os.path.join("torch", "cuda") in code.co_filename:
            return True
        tb = tb.tb_next
    return any(m in str(exc) for m in NO_CUDA_MARKERS)


def gib(n: int) -> str:
    """Bytes as GiB with one decimal (``8.0 GiB``), or MiB / KiB / bytes below one GiB."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} bytes"


def where(sizes: Mapping[str, msizes.SizeValue]) -> str:
    """The sizes of a run as its messages name them: ``K=1024, M=64``, or ``its own sizes``."""
    return ", ".join(f"{k}={msizes.text(v)}" for k, v in sorted(sizes.items())) or "its own sizes"


def size_options(sizes: Mapping[str, msizes.SizeValue]) -> str:
    """``--size NAME=VALUE`` options that set ``sizes`` (for a hint)."""
    return " ".join(f"--size {k}={msizes.text(v)}" for k, v in sorted(sizes.items()))


def out_of_memory(task: str, sizes: Mapping[str, msizes.SizeValue] | None, detail: str,
                  smaller: Mapping[str, msizes.SizeValue] | None = None) -> EnvironmentUnavailableError:
    """The one error of a run that ran out of host memory at its sizes (exit 4, never the
    candidate's failure nor a harness error): ``task`` at ``sizes`` (None: not known where it
    is raised), ``detail`` says where; ``smaller``, sizes to suggest."""
    eg = f" (e.g. {size_options(smaller)})" if smaller else ""
    at = f" at {where(sizes)}" if sizes is not None else ""
    return EnvironmentUnavailableError(
        f"out of memory at these sizes: {task}{at}: {detail}"[:400],
        f"run at sizes this machine holds with --size NAME=VALUE{eg}, or on a machine with more memory")


def cuda_needed(what: str, detail: str) -> EnvironmentUnavailableError:
    """The one error of a task or candidate that needs a CUDA GPU on a machine without one."""
    return EnvironmentUnavailableError(f"{what} needs a CUDA GPU, and this machine has none ({detail})"[:400],
                                       CUDA_HINT)


__all__ = ["available_bytes", "is_out_of_memory", "out_of_memory_text", "needs_cuda", "gib", "where", "size_options",
           "out_of_memory", "cuda_needed", "HOST_OOM_MARKERS", "NO_CUDA_MARKERS", "CUDA_HINT"]
