"""The process's signals and exit (DESIGN.md §2: ``process.py``): Ctrl-C while a CLI imports,
the handler that turns it into a KeyboardInterrupt, the blocks where it must wait (torch's C++
import), workers that ignore it, and the fast exit of a command that started CUDA.
"""
from __future__ import annotations

import sys

from kbrepro.inert import terminal

INTERRUPTED_EXIT = 130
#: the exit code of a command stopped by SIGTERM (128 + 15), with the same promises as Ctrl-C
TERMINATED_EXIT = 143


def stderr_line(line: str) -> None:
    """Write ``line`` (each of its lines made inert for a terminal: a bundle's or report's text
    in a message never sends an escape sequence or a bidi control) to stderr."""
    import sys

    try:
        sys.stderr.write("\n".join(terminal(x, None) for x in line.split("\n")) + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def guard_early_interrupt() -> None:
    """Ctrl-C while a CLI's imports and its module's definitions still run: one line on
    stderr and exit 130, no traceback. Call it first thing under ``if __name__ == "__main__"``;
    :func:`run_main` ends it (:func:`imports_done`) as it starts the command."""
    import os
    import signal
    import sys

    def _early(signum, frame):
        sys.stderr.write("interrupted; nothing was written\n")
        os._exit(INTERRUPTED_EXIT)

    signal.signal(signal.SIGINT, _early)


#: the packages a CLI imports before its CLI edge can turn a missing one into one line
REQUIRED = ("click", "yaml", "jsonschema", "numpy")


def require_installed(modules=REQUIRED) -> None:
    """Exit 4 with one line and its next step where one of ``modules`` is not installed (a CLI
    run before ``pip install -e .``); call it right after :func:`guard_early_interrupt`."""
    import importlib.util
    import sys

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        sys.stderr.write(f"error: a required package is not installed: {', '.join(missing)}\n  -> in the project "
                         "folder: pip install -e . (README), then run this again\n")
        sys.exit(4)


#: set once a Ctrl-C reached this process: an exception that follows it (a C extension whose
#: import the KeyboardInterrupt cut short refuses a second import) is the interrupt's doing
_SIGINT_SEEN = {"seen": False, "term": False}


def _on_sigint(signum, frame):
    """Ctrl-C: KeyboardInterrupt, except inside importlib's own machinery or a weakref
    callback (a module lock's, a WeakKeyDictionary's during garbage collection), where CPython
    would only print "Exception ignored" and a traceback and go on: there the signal is sent
    again 50 ms later, once the callback has returned. Any other place where an exception
    cannot propagate (a ``__del__``) is caught by :func:`unraisable_hook`."""
    _SIGINT_SEEN["seen"] = True
    name = frame.f_code.co_filename if frame is not None else ""
    if name.startswith("<frozen importlib") or name.endswith(("weakref.py", "_weakrefset.py")):
        import os
        import signal
        import threading

        threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT)).start()
        return
    raise KeyboardInterrupt


def unraisable_hook(info) -> None:
    """``sys.unraisablehook`` of a command: a KeyboardInterrupt our handler raised where it could
    not propagate (a ``__del__``, a callback during garbage collection) is not printed as
    "Exception ignored" with a traceback: the interrupt is sent again 50 ms later (from a timer
    thread: sent from here it would land in this hook), where it can stop the command. Anything
    else goes to Python's own hook."""
    if info.exc_type is not None and issubclass(info.exc_type, KeyboardInterrupt):
        import os
        import signal
        import threading

        threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT)).start()
        return
    sys.__unraisablehook__(info)


def _on_sigterm(signum, frame):
    """SIGTERM: handled as Ctrl-C is (every cleanup and message of an interrupt), and the
    command leaves with 143 instead of 130 (:func:`interrupted_exit`)."""
    _SIGINT_SEEN["term"] = True
    _on_sigint(signum, frame)


def interrupted_exit() -> int:
    """The exit code of an interrupted command: 143 where SIGTERM stopped it, else 130."""
    return TERMINATED_EXIT if _SIGINT_SEEN["term"] else INTERRUPTED_EXIT


def sigint_seen() -> bool:
    """Whether a Ctrl-C reached this process (whatever breaks after it is the interrupt's doing)."""
    return _SIGINT_SEEN["seen"]


def imports_done() -> None:
    """From here on the CLI edge (:class:`EdgeMixin`) turns Ctrl-C into exit 130 and SIGTERM
    into exit 143."""
    import signal

    sys.unraisablehook = unraisable_hook
    signal.signal(signal.SIGINT, _on_sigint)
    signal.signal(signal.SIGTERM, _on_sigterm)


def work_done() -> None:
    """The command's result is being written: a Ctrl-C from here on no longer changes it."""
    import threading

    if threading.current_thread() is threading.main_thread():
        _ignore_signals_now()


def _cuda_started() -> bool:
    import sys

    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_initialized())
    except Exception:  # a half-imported torch
        return False


def run_main(main) -> None:
    """Run a click ``main`` as a script. An interrupted run leaves with 130 at once (CPython
    otherwise kills itself with SIGINT at exit, hiding the 130, when the Ctrl-C reached code
    it ran through ``PyRun_*``, as in some imports), once the threads it left running have
    ended (a Prefetcher's folder removal; a second Ctrl-C stops the wait); once the exit code
    is decided a late Ctrl-C cannot change it.

    A command that started CUDA (a study, a replay) leaves with its exit code through
    ``os._exit`` once stdout and stderr are flushed: the interpreter's teardown (the CUDA
    context, torch's exit handlers, every module's objects) took about 0.8 s on the H200 and
    writes nothing of ours. Everything the command writes is written, closed and renamed into
    place before its exit code is decided; its worker and candidate processes are stopped by
    then. ``KBREPRO_FAST_EXIT=0`` keeps the normal exit."""
    import os
    import sys

    # the CLI edge handles Ctrl-C from here on, not before: a KeyboardInterrupt raised while the
    # module still defined its command (its click decorators) reached no edge (a traceback)
    imports_done()
    code = 0
    try:
        main()
    except SystemExit as exc:
        if exc.code in (INTERRUPTED_EXIT, TERMINATED_EXIT):
            # a pool whose worker the Ctrl-C killed while it sent a result leaves its manager thread
            # reading half a message for ever, and the interpreter's exit joins it: past this
            # bound the process leaves with its code all the same (seen once in 400 interrupts)
            _exit_after(JOIN_AFTER_INTERRUPT_S, exc.code)
            try:  # the threads left running first (a Prefetcher's folder removal); a second Ctrl-C cuts it short
                _join_threads()
            except KeyboardInterrupt:
                pass
            _ignore_signals_now()
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(exc.code)
        if not (isinstance(exc.code, int) or exc.code is None) or not _cuda_started() or \
                os.environ.get("KBREPRO_FAST_EXIT") == "0":
            raise
        code = exc.code or 0
    finally:
        _ignore_signals_now()
    if _cuda_started() and os.environ.get("KBREPRO_FAST_EXIT") != "0":
        _fast_exit(code)
    sys.exit(code)


def _ignore_signals_now() -> None:
    """Ignore SIGINT and SIGTERM from here on: the exit code is decided. A signal that lands
    between the two calls (its handler raises KeyboardInterrupt) cannot cut this short."""
    import signal

    while True:
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            return
        except KeyboardInterrupt:
            continue


#: how long an interrupted command waits for the threads it left running before it leaves anyway (s)
JOIN_AFTER_INTERRUPT_S = 1.0


def _exit_after(seconds: float, code: int) -> None:
    """Leave with ``code`` (stdout and stderr flushed) ``seconds`` from now, unless the process
    has left by then: a daemon timer the interpreter's exit never waits for."""
    import os
    import sys
    import threading

    def leave():
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)

    t = threading.Timer(seconds, leave)
    t.daemon = True
    t.start()


def _join_threads() -> None:
    """What the interpreter's exit does first: threading's exit hooks (a thread pool not shut
    down), then wait for every non-daemon thread (a Prefetcher's folder removal)."""
    import threading

    try:
        shutdown = getattr(threading, "_shutdown", None)
        if shutdown is not None:
            shutdown()
        else:  # pragma: no cover (CPython has it)
            for t in threading.enumerate():
                if t is not threading.current_thread() and not t.daemon:
                    t.join()
    except Exception:
        pass


def _fast_exit(code: int) -> None:
    """``os._exit(code)`` after what of the interpreter's exit is ours: the non-daemon threads
    joined (threading's exit hooks first, as the interpreter runs them: a Prefetcher's folder
    removal in ``/dev/shm``, a thread pool not shut down), multiprocessing's exit (daemonic
    children terminated, the others joined), then stdout and stderr flushed each on its own
    and C's stdio buffers (a CUDA kernel's ``printf``) too. A stdout that cannot be flushed
    (its reader has gone) is exit 120, as the normal exit makes it; stderr is flushed all the
    same. Skipped: the CUDA context's teardown, torch's exit handlers, the modules' objects."""
    import os
    import sys

    try:
        _join_threads()
        mp = sys.modules.get("multiprocessing.util")
        if mp is not None:
            try:
                mp._exit_function()
            except Exception:
                pass
        for stream in (sys.stdout, sys.stderr):
            try:
                if stream is not None and not stream.closed:
                    stream.flush()
            except Exception as exc:  # as the interpreter reports it: "Exception ignored in: <stdout>"
                if stream is sys.stdout:
                    import traceback

                    stderr_line(f"Exception ignored in: {stream!r}\n" + "".join(traceback.format_exception_only(exc)).rstrip())
                code = 120
        try:
            import ctypes

            ctypes.CDLL(None).fflush(None)
        except Exception:
            pass
    finally:
        os._exit(code)


def ignore_sigint_from_now() -> None:
    """A worker process's first act: ignore SIGINT (a Ctrl-C reaches the whole process group;
    only the parent acts on it and stops its workers, which otherwise print their own
    KeyboardInterrupt traceback), then unblock it: a parent starts its workers inside
    :class:`deferred_sigint`, whose mask a forked or spawned child inherits, so a Ctrl-C that
    came meanwhile is dropped here."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a forked worker: stopped by SIGTERM at once, quietly
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def die_with_parent(sig: int, parent: int | None = None) -> None:
    """Have the kernel send ``sig`` to this process when its parent dies (Linux
    ``prctl(PR_SET_PDEATHSIG)``; set it after any change of user, which clears it), so that a
    parent that leaves at once (Ctrl-C, SIGKILL) leaves no worker or candidate child behind
    holding its stdout or the GPU. ``parent``: the pid the caller was started by (default:
    the parent now); where it is already gone, this process exits at once. Elsewhere than on
    Linux it does nothing."""
    import os
    import sys

    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid() if parent is None else parent
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(sig), 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError, TypeError):
        return
    if os.getppid() != parent or parent == 1:
        os._exit(0)


class deferred_sigint:
    """``with deferred_sigint(): import torch``: a Ctrl-C (or SIGTERM) during the block waits
    until it ends. torch's import runs C++ (pybind11) that aborts the process (SIGABRT) when a
    KeyboardInterrupt surfaces inside it, and a pair of renames must not be cut in two; held,
    the signal is acted on right after the block, as a clean KeyboardInterrupt the CLI edge turns
    into exit 130 (143). The main thread blocks both signals and, since the kernel may deliver
    them to another thread of the process (whose C handler still has Python run the handler in
    the main thread), also swaps in handlers that only note them; the noted signal is raised again
    in this thread once the handlers are back. In another thread the block does nothing (only the main thread
    handles signals)."""

    _SIGNALS = ("SIGINT", "SIGTERM")

    def __enter__(self):
        import signal
        import threading

        self._held = threading.current_thread() is threading.main_thread()
        self._noted: list[int] = []
        self._saved = {}
        if not self._held:
            return self
        if hasattr(signal, "pthread_sigmask"):
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        for name in self._SIGNALS:
            sig = getattr(signal, name)
            self._saved[sig] = signal.signal(sig, lambda signum, frame: self._noted.append(signum))
        return self

    def decided(self) -> None:
        """The command's result is decided inside the block (:func:`work_done`): at its end
        SIGINT and SIGTERM are ignored from then on, and one held meanwhile is dropped."""
        if self._held:
            import signal

            self._saved = {sig: signal.SIG_IGN for sig in self._saved}
            self._noted.clear()

    def __exit__(self, *exc) -> bool:
        if not self._held:
            return False
        import signal

        for sig, handler in self._saved.items():
            signal.signal(sig, handler)
        if hasattr(signal, "pthread_sigmask"):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
        for sig in dict.fromkeys(self._noted):  # to this thread, once each: the handler back in place acts on it
            signal.raise_signal(sig)
        return False


__all__ = ["INTERRUPTED_EXIT", "TERMINATED_EXIT", "interrupted_exit", "require_installed", "stderr_line", "guard_early_interrupt", "imports_done", "work_done", "run_main",
           "ignore_sigint_from_now", "deferred_sigint", "sigint_seen", "die_with_parent", "unraisable_hook"]
