"""Worker processes of packing: a pool forked before CUDA starts (:func:`start_workers`), warmed
with the imports and validators packing needs, and :class:`PlotWorker`, which validates the
documents and draws each figure there while the parent checks consistency and evaluates the
claims. Workers ignore Ctrl-C and end with their parent; the parent alone shuts them down
(:func:`stop_workers`).
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from concurrent.futures import ProcessPoolExecutor
from typing import Mapping

from kbrepro import schemas
from kbrepro.bundle import plots as plots_mod
from kbrepro.bundle import validate
from kbrepro.bundle.documents import OUR_DOCUMENTS
from kbrepro.process import deferred_sigint, die_with_parent, ignore_sigint_from_now


def schema_problems_of(name: str, doc: dict, extra=None) -> list[str]:
    return validate.schema_problems(name, doc, extra)


def quiet_worker() -> None:
    """A pool worker's first act: ignore Ctrl-C (:func:`kbrepro.process.ignore_sigint_from_now`;
    :func:`worker_pool` forks with SIGINT blocked) and exit with the parent."""
    ignore_sigint_from_now()
    die_with_parent(signal.SIGTERM)


def warm_worker() -> int:
    """:func:`quiet_worker`, then import and build what packing jobs need (matplotlib,
    validators), once per worker."""
    quiet_worker()

    for name in OUR_DOCUMENTS:
        try:
            schemas._validator(name)
        except KeyError:
            pass
    try:
        plots_mod._pyplot()
    except ImportError:
        pass
    return os.getpid()


def worker_pool(n: int, initializer):
    """A ``ProcessPoolExecutor`` of ``n`` workers, all of them started before it returns, with
    SIGINT blocked in this thread while they are forked: no worker can act on a Ctrl-C before
    ``initializer`` (which must start with :func:`quiet_worker`) ran, and a Ctrl-C that came
    meanwhile is delivered here afterwards. Workers are forked on Linux (the fork start method
    starts them all on the first submit)."""
    ctx = multiprocessing.get_context("fork") if sys.platform.startswith("linux") else None
    with deferred_sigint():  # SIGINT blocked here, and so in every worker until it unblocks it
        pool = ProcessPoolExecutor(max_workers=n, mp_context=ctx, initializer=initializer)
        try:
            for _ in range(n):
                pool.submit(os.getpid)
        except BaseException:
            stop_workers(pool)
            raise
    return pool


def start_workers(n: int | None = None):
    """A pool of worker processes, warmed (imports done, validators built) in the background.
    Start it before CUDA initialises (workers are forked on Linux) and hand it to
    :func:`kbrepro.bundle.make.make_from_results` so that packing after a study finds them ready. The caller
    shuts it down with :func:`stop_workers`, also on Ctrl-C. The workers ignore SIGINT
    (:func:`worker_pool`)."""
    return worker_pool(n or max(1, min(8, os.cpu_count() or 1)), warm_worker)


def stop_workers(pool) -> None:
    """Shut ``pool`` down: wait for running jobs after a normal finish; while an exception
    (a Ctrl-C, an error) is on its way out, cancel and terminate the workers instead, so that
    no worker (a forked child that may hold a lock it inherited) can keep the exit waiting."""
    if sys.exc_info()[0] is None:
        pool.shutdown(wait=True, cancel_futures=True)
        return
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        try:
            proc.terminate()
        except (OSError, ValueError, AttributeError):
            pass
    for proc in procs:
        try:
            proc.join(timeout=2)
        except (OSError, ValueError, AssertionError, AttributeError):
            pass


class PlotWorker:
    """Worker processes for the slow, independent parts of packing: each document's schema
    validation and each figure's rendering (one PNG a job) run there while this process checks
    consistency and evaluates the claims. Falls back to doing everything here if no worker
    process can be started. Rendering needs matplotlib; without it :meth:`results` raises
    ImportError (the figures' data are packed all the same)."""

    def __init__(self, documents: Mapping[str, dict], with_plots: bool = True, pool=None, extra=None):
        self._owned = pool is None
        self._documents = documents
        self._render = False
        if with_plots:
            try:
                plots_mod.renderer_versions()
                self._render = True
            except ImportError:
                pass
        self._docfigs = plots_mod.document_figures(documents)
        jobs = list(self._docfigs.items()) if self._render else []
        self._extra = extra or {}
        self._schema = None
        self._pool = None
        self._futures = {}
        try:
            # a pool of warm workers (started during a study) validates too; without one, the
            # schemas are checked here (the Rust validator takes milliseconds, a spawned
            # worker's imports a second) and workers are started only to draw the figures
            # workers that ignore Ctrl-C, as the warm pool's (a Ctrl-C while they draw must not
            # print a worker's KeyboardInterrupt traceback: the parent alone shuts them down)
            self._pool = pool or (worker_pool(max(1, min(len(jobs), os.cpu_count() or 1, 8)), quiet_worker)
                                  if jobs else None)
            if pool is not None:
                self._schema = [pool.submit(schema_problems_of, n, d, self._extra) for n, d in documents.items()]
            if self._pool is not None:
                self._futures = {n: self._pool.submit(plots_mod.render, n, d) for n, d in jobs}
        except (OSError, RuntimeError, NotImplementedError):
            self._pool = None
            self._schema = None
            self._futures = {}

    def schema_problems(self) -> list[str]:
        if self._schema is None:
            return [p for n, d in self._documents.items() for p in validate.schema_problems(n, d, self._extra)]
        return [p for f in self._schema for p in f.result()]

    def results(self, figures: Mapping[str, dict]) -> dict[str, bytes]:
        """PNG bytes by figure name for every figure of ``figures`` (figure data by name)."""
        if not self._render:
            raise ImportError("matplotlib is not installed")
        try:
            if self._pool is None:
                return {n: plots_mod.render(n, d) for n, d in figures.items()}
            futures = {n: self._futures[n] if n in self._futures and self._docfigs.get(n) == d
                       else self._pool.submit(plots_mod.render, n, d) for n, d in figures.items()}
            return {n: f.result() for n, f in futures.items()}
        finally:
            self.close()

    def close(self) -> None:
        if self._pool is not None and self._owned:
            stop_workers(self._pool)
        self._pool = None


__all__ = ["PlotWorker", "start_workers", "stop_workers", "worker_pool", "quiet_worker", "warm_worker"]
