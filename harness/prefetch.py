"""Task models built on the CPU ahead of use, in worker processes, with the same bits.

KernelBench builds a task's ``Model`` on the CPU after ``torch.manual_seed(seed)`` and then
draws its inputs with ``get_inputs()`` from the same CPU generator. PyTorch's CPU generator
is a serial Mersenne Twister, so a level-2 task with an 8192 x 8192 Linear layer takes about
a second of one core per build, and a study builds dozens of them (every correctness seed,
the timing seed, the probes). Bit-identical weights and inputs need that same serial
stream; nothing forces it to run in the study's own process, or one build after another.

:class:`Prefetcher` runs each planned build ``(task file, seed)`` in a spawned worker
process (one torch thread each): the task file executed from the same verified bytes,
``torch.manual_seed(seed)``, ``Model(*get_init_inputs())``, the CPU generator's state,
``get_inputs()``, its state again; the state dict, the inputs and both generator states are
saved with ``torch.save`` into a private folder.

:meth:`Prefetcher.wrap` gives a task module whose ``Model`` and ``get_inputs`` take those
builds only where the call is exactly the planned one, so the study code (and a study
binding) builds models as it always did: ``Model(*args)`` is taken from a worker when the
CPU generator is in the state ``torch.manual_seed(s)`` leaves for a planned seed ``s`` and
``args`` are the task's ``get_init_inputs()``; the module is then built on the ``meta``
device (no random draws), the worker's tensors are assigned to it, and the generator is set
to the state the direct build leaves. ``get_inputs()`` is taken when the generator is in
exactly the state a taken build left (nothing drew in between), and leaves it where the
direct draw would. Any other call runs the task's own code. ``tests/test_prefetch.py``
checks the bits (parameters, buffers, inputs, generator states) against direct builds.

A model with a tensor the state dict does not carry (a non-persistent buffer, a tensor
attribute), or whose ``__init__`` fails on ``meta``, is built directly instead, as is every
build whose worker failed: the prefetch changes when the CPU work happens, never what it
computes. Where CUDA is initialised the module is built on the GPU instead of ``meta`` (the
CUDA generator's state restored, the worker's tensors copied in): PyTorch's ``meta``
constructors run Python decompositions whose first use imports SymPy (about 3 s on a
machine without a bytecode cache), and the study moves the model to the GPU next anyway.

It is on by default and off with ``KBREPRO_PREFETCH=0``. Measured on an H200 (issue 13,
``benchmarks/ratio_drift.py``): a full run with the workers gave 75 of 75 timing ratios
within the replay tolerance of the committed bundle's and all 14 claims with their verdicts.
``KBREPRO_PREFETCH_WORKERS=N`` sets the number of workers (default: the CPU count minus 4,
between 1 and 8). :func:`gpu_present` keeps a machine without an NVIDIA driver from
starting workers at all.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
import types
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence
from kbrepro.harness import startenv
from kbrepro.process import deferred_sigint, ignore_sigint_from_now


@dataclass(frozen=True)
class Build:
    """One planned build: the task file's verified bytes and the name it is executed under
    (``module.__file__``), and the seed."""

    src: bytes
    filename: str
    seed: int

    @property
    def key(self) -> tuple[str, int]:
        return (self.filename, self.seed)


def _worker_init() -> None:
    """Ignore Ctrl-C (:func:`kbrepro.process.ignore_sigint_from_now`: the study's process alone
    acts on it and stops the workers), then one torch thread."""
    ignore_sigint_from_now()
    import torch

    torch.set_num_threads(1)


def build_to_file(src: bytes, filename: str, seed: int, out: str) -> str:
    """In a worker: build the task's model and inputs as KernelBench does (module docstring)
    and ``torch.save`` them to ``out``. Returns ``out``. Raises whatever the task raises."""
    import torch

    mod = types.ModuleType("kbrepro_prefetch_task")
    mod.__file__ = filename
    exec(compile(src, filename, "exec"), mod.__dict__)  # noqa: S102 (the verified bytes the study runs)
    torch.manual_seed(seed)
    model = mod.Model(*mod.get_init_inputs())
    built = torch.get_rng_state()
    xs = list(mod.get_inputs())
    drawn = torch.get_rng_state()
    tmp = out + ".part"
    torch.save({"state": model.state_dict(), "inputs": xs, "rng_built": built, "rng_drawn": drawn}, tmp)
    os.replace(tmp, out)
    return out


#: free bytes a memory file system (``/dev/shm``) must have for the builds to go there
SHM_MIN_FREE = 32 << 30


def _folder() -> str | None:
    """Where the builds are saved: ``/dev/shm`` where it is a large memory file system (no
    disk writes), else the temporary folder."""
    try:
        st = os.statvfs("/dev/shm")
        if st.f_bavail * st.f_frsize >= SHM_MIN_FREE and os.access("/dev/shm", os.W_OK):
            return "/dev/shm"
    except OSError:
        pass
    return None


def _workers() -> int:
    raw = os.environ.get("KBREPRO_PREFETCH_WORKERS")
    if raw and raw.isdigit() and int(raw) > 0:
        return min(int(raw), 32)
    return max(1, min(8, (os.cpu_count() or 2) - 4))


def enabled() -> bool:
    """Whether prefetching is on: unless ``KBREPRO_PREFETCH=0`` (module docstring)."""
    return os.environ.get("KBREPRO_PREFETCH", "1") != "0"


def gpu_present() -> bool:
    """Whether this machine looks like it has an NVIDIA GPU, without importing torch: the
    driver's files, and no ``CUDA_VISIBLE_DEVICES`` that hides every device. Only decides
    whether workers are worth starting before torch is imported; the run itself checks
    ``torch.cuda.is_available()``."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return False
    return os.path.exists("/proc/driver/nvidia/version") or os.path.exists("/dev/nvidiactl")


@dataclass
class _Pending:
    inputs: list
    built: Any
    drawn: Any


@dataclass
class Prefetcher:
    """Worker processes building ``builds`` in order (see the module docstring). Use as a
    context manager, or call :meth:`close`."""

    builds: Sequence[Build]
    workers: int = field(default_factory=_workers)
    folder: Path | None = None

    def __post_init__(self) -> None:
        import multiprocessing as mp

        self._dir = Path(tempfile.mkdtemp(prefix="kbrepro-prefetch-", dir=self.folder or _folder()))
        self._futures: dict[tuple[str, int], Future] = {}
        self._pending: dict[str, _Pending] = {}
        self._closed = False
        self.hits = self.misses = 0
        self.wait_s = 0.0  # seconds the study waited for a worker's build
        self.load_s = 0.0  # seconds spent taking builds over (load, construct, copy)
        # SIGINT blocked while the workers are spawned (they start on submit): no worker acts
        # on a Ctrl-C before _worker_init ignores it; one that came meanwhile reaches us after.
        # They start with the toolchain environment kbrepro started with (harness/startenv.py)
        with deferred_sigint(), startenv.launching():
            self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=mp.get_context("spawn"),
                                             initializer=_worker_init)
            for i, b in enumerate(self.builds):
                if b.key not in self._futures:
                    self._futures[b.key] = self._pool.submit(build_to_file, b.src, b.filename, b.seed,
                                                             str(self._dir / f"{i}.pt"))

    def __enter__(self) -> "Prefetcher":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop the workers and remove the folder; builds not taken are dropped. A worker
        still building one is terminated (the study no longer needs it); the folder is
        removed by a thread of its own (freeing gigabytes of memory files takes a while),
        which the interpreter waits for at exit. Calling it again does nothing."""
        if self._closed:
            return
        self._closed = True
        for f in self._futures.values():
            f.cancel()
        procs = list((getattr(self._pool, "_processes", None) or {}).values())
        self._pool.shutdown(wait=False, cancel_futures=True)
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        for proc in procs:
            proc.join(timeout=10)
        threading.Thread(target=shutil.rmtree, args=(self._dir,), kwargs={"ignore_errors": True},
                         name="kbrepro-prefetch-cleanup").start()

    def wrap(self, module: types.ModuleType) -> types.ModuleType:
        """``module`` with ``Model`` and ``get_inputs`` that take this prefetcher's builds of
        its file where the call is the planned one (module docstring); returned as is when
        nothing of it was planned."""
        import torch

        name = getattr(module, "__file__", None)
        seeds = sorted(s for f, s in self._futures if f == name)
        if not seeds or getattr(module.Model, "_kbrepro_prefetch", None) is self:
            return module
        state = torch.get_rng_state()
        try:
            init = list(module.get_init_inputs())
        finally:
            torch.set_rng_state(state)
        if any(isinstance(x, torch.Tensor) for x in init):
            return module
        fresh = {}
        for s in seeds:
            g = torch.Generator()
            g.manual_seed(s)
            fresh[s] = g.get_state()
        _hook(self, module, module.Model, init, fresh)
        module.get_inputs = _Inputs(self, module, module.get_inputs)
        return module

    def _load(self, module: types.ModuleType, cls, init: list, seed: int):
        """The worker's build of ``(module, seed)`` as an instance of ``cls``, the generator
        set to where the direct build leaves it and the inputs kept for :class:`_Inputs`; None
        (nothing changed) where it cannot stand for the direct build."""
        fut = self._futures.get((module.__file__, seed))
        if fut is None:
            return None
        t0 = time.perf_counter()
        try:
            path = fut.result()
        except Exception:  # the direct build raises the task's own error, where it has one
            return None
        finally:
            self.wait_s += time.perf_counter() - t0
        t0 = time.perf_counter()
        try:
            return self._take(path, module, cls, init)
        finally:
            self.load_s += time.perf_counter() - t0

    def _take(self, path: str, module: types.ModuleType, cls, init: list):
        import torch

        try:
            saved = torch.load(path, mmap=True, weights_only=True)
        except Exception:
            return None
        # on the GPU where CUDA is up (module docstring), else on meta; no draw of either
        # generator survives the construction
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        state = torch.get_rng_state()
        cuda_state = torch.cuda.get_rng_state() if cuda else None
        try:
            with torch.device("cuda" if cuda else "meta"):
                model = cls(*init)
        except Exception:  # an __init__ that needs real data: built directly
            model = None
        finally:
            torch.set_rng_state(state)
            if cuda_state is not None:
                torch.cuda.set_rng_state(cuda_state)
        if model is None or _extra_tensors(model):
            return None
        try:  # meta: take the worker's tensors as they are; GPU: copy them in
            model.load_state_dict(saved["state"], strict=True, assign=not cuda)
        except (RuntimeError, KeyError):
            return None
        if any(t.is_meta for t in (*model.parameters(), *model.buffers())):
            return None
        torch.set_rng_state(saved["rng_built"])
        self._pending[module.__file__] = _Pending(saved["inputs"], saved["rng_built"], saved["rng_drawn"])
        return model


def _hook(pf: Prefetcher, module, cls, init: list, fresh: dict) -> None:
    """Make ``cls(*init)`` right after ``torch.manual_seed(s)`` of a planned ``s`` return the
    worker's build: ``cls.__new__`` returns it and ``cls.__init__`` leaves it as it is. The
    class object is the module's own (a fresh execution of the task file), so nothing else
    sees the hook; ``Model`` stays the class (task files call ``super(Model, self)``), and
    subclasses (a candidate's ``ModelNew(Model)``) are built as always."""
    import torch

    new, init_fn = cls.__new__, cls.__init__
    building = [False]

    def __new__(klass, *args, **kwargs):
        if klass is cls and not building[0] and not kwargs and list(args) == init:
            state = torch.get_rng_state()
            seed = next((s for s, st in fresh.items() if torch.equal(state, st)), None)
            if seed is not None:
                building[0] = True
                try:
                    model = pf._load(module, cls, init, seed)
                finally:
                    building[0] = False
                if model is not None:
                    pf.hits += 1
                    object.__setattr__(model, "_kbrepro_prefetched", True)
                    return model
            pf.misses += 1
        return new(klass) if new is object.__new__ else new(klass, *args, **kwargs)

    def __init__(self, *args, **kwargs):
        if self.__dict__.pop("_kbrepro_prefetched", False):
            return
        init_fn(self, *args, **kwargs)

    cls.__new__ = staticmethod(__new__)
    cls.__init__ = __init__
    cls._kbrepro_prefetch = pf


class _Inputs:
    """``module.get_inputs`` as :meth:`Prefetcher.wrap` leaves it: right after a taken build
    (the CPU generator where that build left it), the worker's draw."""

    def __init__(self, pf: Prefetcher, module, fn):
        self.pf, self.module, self.fn = pf, module, fn

    def __call__(self):
        import torch

        p = self.pf._pending.pop(self.module.__file__, None)
        if p is not None and torch.equal(torch.get_rng_state(), p.built):
            torch.set_rng_state(p.drawn)
            return list(p.inputs)
        return self.fn()


def _extra_tensors(model) -> bool:
    """Whether ``model`` (built on meta) holds a tensor its state dict would not restore: a
    non-persistent buffer, or a tensor attribute of a module."""
    import torch

    for m in model.modules():
        if getattr(m, "_non_persistent_buffers_set", None):
            return True
        if any(isinstance(v, torch.Tensor) for k, v in vars(m).items() if not k.startswith("_")):
            return True
    return False


__all__ = ["Build", "Prefetcher", "build_to_file", "enabled", "gpu_present"]
