"""The environment this process started with, for the processes it starts.

Libraries change ``os.environ`` for themselves after a process started: PyTorch's Inductor, on
its first compile, sets ``TRITON_PTXAS_PATH`` (to the ``ptxas`` a CUDA 13 wheel ships),
``TRITON_LIBDEVICE_PATH``, ``TRITON_CACHE_DIR`` and ``TORCHINDUCTOR_CACHE_DIR``, and importing
one of its passes sets ``CUBLAS_WORKSPACE_CONFIG``. A process started after that inherits
them. Measured on the H200 (issue 15): a Triton candidate run in a process started after a
``torch.compile`` baseline compiled its kernel with CUDA 13's ``ptxas`` (PTX ISA 9.0), the same
candidate started before it with Triton's own (PTX 8.7): another cubin, and a build that
depended on what ran before it in the same study.

So in every process kbrepro starts (a candidate's child, an engine's case process, a submitit
job, a prefetch worker) the toolchain variables (:data:`HELD`: names that compilers and their libraries read,
``TRITON_*``, ``TORCHINDUCTOR_*``, ``CUBLAS_*`` ...) are what they were when ``kbrepro`` was
first imported (:data:`AT_START`; the package's ``__init__`` imports this module first),
except what kbrepro sets on purpose (:func:`set_own`) and the ``env`` given for that one
child. Every other variable is inherited as it is now (a test's or a user's setting after
the import included). Stdlib only: imported before anything else.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator, Mapping

#: os.environ as it was when kbrepro was first imported in this process (a copy)
AT_START: dict[str, str] = dict(os.environ)
#: the variables held at their start values: prefixes and whole names of what compilers and
#: the libraries that drive them read (the ones PyTorch sets for itself among them)
HELD_PREFIXES = ("TRITON_", "TORCHINDUCTOR_", "_TORCHINDUCTOR_", "TORCH_", "CUBLAS_", "CUBLASLT_", "CUPY_", "NVRTC_",
                 "PTXAS_", "KMP_", "OMP_", "MKL_")
HELD_NAMES = frozenset({"CUDA_HOME", "CUDA_PATH", "CPLUS_INCLUDE_PATH", "C_INCLUDE_PATH", "LIBRARY_PATH",
                        "LD_LIBRARY_PATH", "LD_PRELOAD", "PATH", "CC", "CXX", "NVCC_APPEND_FLAGS",
                        "NVCC_PREPEND_FLAGS"})


def held(name: str) -> bool:
    """Whether a started process gets ``name`` as it was at start (:data:`HELD_PREFIXES`,
    :data:`HELD_NAMES`) rather than as it is now."""
    return name in HELD_NAMES or name.startswith(HELD_PREFIXES)


def set_own(name: str, value: str) -> None:
    """Set ``name`` in ``os.environ`` and in what processes started from here inherit (a
    variable kbrepro sets on purpose, e.g. ``CUDA_CACHE_DISABLE=1`` before CUDA starts)."""
    os.environ[name] = value
    AT_START[name] = value


def child_env(env: Mapping[str, str | None] | None = None) -> dict[str, str]:
    """The whole environment of a process started now: ``os.environ`` with every
    :func:`held` variable as in :data:`AT_START`, then ``env`` over it (a value None removes
    the variable)."""
    out = {k: v for k, v in os.environ.items() if not held(k)}
    out.update((k, v) for k, v in AT_START.items() if held(k))
    for k, v in (env or {}).items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def drifted() -> list[str]:
    """The :func:`held` names whose value in ``os.environ`` is not what a started process
    gets (set, changed or removed in this process since kbrepro was imported, not through
    :func:`set_own`): what :func:`launching` holds back. Sorted."""
    now = dict(os.environ)
    return sorted(k for k in set(now) | set(AT_START) if held(k) and now.get(k) != AT_START.get(k))


@contextmanager
def launching(env: Mapping[str, str | None] | None = None) -> Iterator[None]:
    """Inside the block ``os.environ`` is :func:`child_env` (``env``): start processes there
    (``multiprocessing`` spawn, ``subprocess``, submitit's executors copy ``os.environ`` when
    they start one). Only the variables that differ are touched, and all of them are put
    back as they were on leaving, exceptions included."""
    want = child_env(env)
    saved = {k: os.environ.get(k) for k in set(os.environ) | set(want) if os.environ.get(k) != want.get(k)}
    for k in saved:
        if k in want:
            os.environ[k] = want[k]
        else:
            os.environ.pop(k, None)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
