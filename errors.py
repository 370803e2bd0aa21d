"""The product's one exception hierarchy.

Every error the product raises on purpose derives from :class:`ReproError`. Each class
carries the process exit code the CLI edge maps it to and a message that tells the user
what to do next. Library code raises these; only the four CLI edges (``make_bundle.py``,
``verify_bundle.py``, ``python -m kbrepro.bundle.audit``, ``python -m kbrepro.harness``, through
:class:`EdgeMixin`) turn them into exit codes. A leaf module at the package root: it imports
nothing of the product, so every layer (kernels, harness, bundle, the CLIs) can raise without
importing upward (only the other leaf, :mod:`kbrepro.inert`, whose terminal rule every error
line passes through).

Exit codes (DESIGN.md section 6): 0 ok, 1 invalid results / verification failed,
2 usage error, 3 unreadable, unsafe or unknown-format input, 4 no GPU or missing dependency,
5 (verify only) PARTIAL: verified in part, 6 harness error (our code raised while it checked a
candidate, which is not blamed), 130 interrupted.
"""
from __future__ import annotations

from kbrepro.inert import terminal


class ReproError(Exception):
    """Base class. ``exit_code`` is what the CLI returns; ``hint`` says what to do next."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:  # one line for the message, one for the hint
        return self.message if not self.hint else f"{self.message}\n  -> {self.hint}"


class InvalidResultsError(ReproError):
    """Results or a bundle that are well-formed input but fail validation or verification."""

    exit_code = 1


class UsageError(ReproError):
    """Bad command line, study definition or option combination."""

    exit_code = 2


class UnreadableInputError(ReproError):
    """Input that cannot be read safely: missing file, corrupt archive, unsafe member,
    unknown format or schema version."""

    exit_code = 3


class EnvironmentUnavailableError(ReproError):
    """The machine cannot do what was asked: no CUDA GPU, CuPy missing, NVRTC missing."""

    exit_code = 4


class CompileError(ReproError):
    """NVRTC rejected a program; the message carries the program log."""

    exit_code = 1


class CandidateFailure(ReproError):
    """A KernelBench candidate failed in its own process (raised, exited, hung, sent a
    malformed reply). The harness records it as the candidate's verdict; it reaches the CLI
    only where no verdict can hold it."""

    exit_code = 1


class HarnessError(ReproError):
    """Our own code raised while it checked a candidate (not the candidate's process, not its
    reply): the candidate is not blamed, no verdict of it is recorded, and the run stops with
    exit code 6 (a sharded run lists the case as failed with this message)."""

    exit_code = 6


class KernelBenchPinError(UnreadableInputError):
    """The KernelBench checkout is missing, at another commit, or a file differs from the lock."""


class InputPathError(UnreadableInputError):
    """A path the user gave as input cannot be read: missing, the wrong kind (a folder where
    a file is expected or the reverse), permission denied, not a regular file (a FIFO or a
    device), a name too long. Exit 3, like any unreadable input."""


class OutputPathError(UsageError):
    """A path the user gave (or its default) for output cannot be written: its folder is
    missing or not a folder, it is a folder, permission denied, read-only, a name too long.
    Exit 2: a usage error, the next step is to choose another path."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT), re-raised by code that knows what it kept: ``kept`` completes the
    line ``interrupted; ...`` that the CLI edge prints (default: ``nothing was written``)."""

    def __init__(self, kept: str | None = None):
        super().__init__(kept)
        self.kept = kept


# ------------------------------------------------------------------------------------------
# Paths the user gave, checked up front. One mapping for every entry point: an input path
# that cannot be read -> InputPathError (exit 3); an output path that cannot be written ->
# OutputPathError (exit 2). Nothing here raises OSError.

def _why(exc: OSError) -> str:
    return (exc.strerror or type(exc).__name__).lower()


def _stat(path):
    import os

    try:
        return os.stat(path), None
    except OSError as exc:
        return None, exc


def check_input_file(path, what: str, hint: str | None = None):
    """``path`` as a readable regular file; returns it as a Path. Raises InputPathError."""
    import os
    import stat
    from pathlib import Path

    p = Path(path)
    hint = hint or f"check the path given as {what}"
    st, err = _stat(p)
    if st is None:
        if err.errno == 2:  # ENOENT
            raise InputPathError(f"{what} {p} does not exist", hint)
        raise InputPathError(f"cannot read {what} {p}: {_why(err)}", hint)
    if stat.S_ISDIR(st.st_mode):
        raise InputPathError(f"{what} {p} is a folder, not a file", hint)
    if not stat.S_ISREG(st.st_mode):
        raise InputPathError(f"{what} {p} is not a regular file (a FIFO, socket or device)", hint)
    if not os.access(p, os.R_OK):
        raise InputPathError(f"cannot read {what} {p}: permission denied", hint)
    return p


def check_input_path(path, what: str, hint: str | None = None):
    """``path`` as a readable folder or regular file (a study: its folder or its study.yaml);
    returns it as a Path. Raises InputPathError."""
    import stat
    from pathlib import Path

    st, _ = _stat(Path(path))
    if st is not None and stat.S_ISDIR(st.st_mode):
        return check_input_dir(path, what, hint)
    return check_input_file(path, what, hint)


def check_input_dir(path, what: str, hint: str | None = None):
    """``path`` as a folder whose entries can be listed; returns it as a Path. Raises InputPathError."""
    import os
    import stat
    from pathlib import Path

    p = Path(path)
    hint = hint or f"check the path given as {what}"
    st, err = _stat(p)
    if st is None:
        if err.errno == 2:
            raise InputPathError(f"{what} {p} does not exist", hint)
        raise InputPathError(f"cannot read {what} {p}: {_why(err)}", hint)
    if not stat.S_ISDIR(st.st_mode):
        raise InputPathError(f"{what} {p} is a file, not a folder", hint)
    if not os.access(p, os.R_OK | os.X_OK):
        raise InputPathError(f"cannot read {what} {p}: permission denied", hint)
    return p


def _probe_write(folder, name: str) -> OSError | None:
    """Create and remove a temporary file named as ``harness.jsonio.atomic_write_bytes``
    names its own (``.<name>.XXXX.tmp``) in ``folder``: whether the atomic write can happen."""
    import os
    import tempfile

    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        return exc
    os.close(fd)
    try:
        os.unlink(tmp)
    except OSError:
        pass
    return None


def check_output_file(path, what: str, *, companions: tuple[str, ...] = ()):
    """``path`` as a file that can be written atomically (a temporary file beside it, then a
    rename); ``companions``: suffixes of files written beside it (``.sha256-digest``),
    checked too. The folder must exist. Returns the Path. Raises OutputPathError."""
    import stat
    from pathlib import Path

    p = Path(path)
    hint = f"choose another {what}"
    if not p.name or p.name in (".", ".."):
        raise OutputPathError(f"{what} {path} names no file", hint)
    parent = p.parent
    for name in (p.name, *(p.name + s for s in companions)):
        target = parent / name
        label = what if name == p.name else f"{target.name} (written beside {what})"
        st, err = _stat(target)
        if st is not None:
            if stat.S_ISDIR(st.st_mode):
                raise OutputPathError(f"{label} {target if name == p.name else ''}".rstrip() + " is a folder",
                                      f"{hint}: give a file name")
            if not stat.S_ISREG(st.st_mode):
                raise OutputPathError(f"{label} {target if name == p.name else ''}".rstrip()
                                      + " exists and is not a regular file", hint)
        elif err.errno not in (2,):  # ENOENT is fine: the file will be created
            if err.errno == 20:  # ENOTDIR: a component of the folder is a file
                raise OutputPathError(f"cannot write {what} {target}: a part of its folder is a file", hint)
            raise OutputPathError(f"cannot write {what} {target}: {_why(err)}", hint)
    st, err = _stat(parent)
    if st is None:
        if err.errno == 2:
            raise OutputPathError(f"cannot write {what} {p}: folder {parent} does not exist",
                                  f"create the folder first, or {hint}")
        raise OutputPathError(f"cannot write {what} {p}: {_why(err)}", hint)
    if not stat.S_ISDIR(st.st_mode):
        raise OutputPathError(f"cannot write {what} {p}: {parent} is not a folder", hint)
    for name in (p.name, *(p.name + s for s in companions)):
        err = _probe_write(parent, name)
        if err is not None:
            raise OutputPathError(f"cannot write {what} {parent / name}: {_why(err)}", hint)
    return p


def prepare_output_dir(path, what: str, *, must_be_empty: bool = True):
    """Create ``path`` (and its parents) as a writable folder, or accept it if it exists and
    (with ``must_be_empty``) is empty. Returns ``(Path, created)`` where ``created`` lists
    the folders made here, deepest first (remove them with :func:`remove_created`).
    Raises OutputPathError."""
    import os
    import stat
    from pathlib import Path

    p = Path(path)
    hint = f"choose another {what}"
    st, err = _stat(p)
    created: list = []
    if st is not None:
        if not stat.S_ISDIR(st.st_mode):
            raise OutputPathError(f"{what} {p} exists and is not a folder", hint)
        try:
            nonempty = any(True for _ in os.scandir(p))
        except OSError as exc:
            raise OutputPathError(f"cannot use {what} {p}: {_why(exc)}", hint) from exc
        if must_be_empty and nonempty:
            raise OutputPathError(f"{what} {p} is not empty", f"{hint}, or empty it; nothing was overwritten")
    elif err.errno == 2:
        missing, q = [], p
        while True:
            s, e = _stat(q)
            if s is not None or e.errno != 2 or q.parent == q:
                break
            missing.append(q)
            q = q.parent
        try:
            for d in reversed(missing):
                os.mkdir(d)
                created.insert(0, d)
        except OSError as exc:
            remove_created(created)
            why = "a part of its folder is a file" if exc.errno == 20 else _why(exc)
            raise OutputPathError(f"cannot create {what} {p}: {why}", hint) from exc
    else:
        why = "a part of its folder is a file" if err.errno == 20 else _why(err)
        raise OutputPathError(f"cannot use {what} {p}: {why}", hint)
    e = _probe_write(p, "probe")
    if e is not None:
        remove_created(created)
        raise OutputPathError(f"cannot write into {what} {p}: {_why(e)}", hint)
    return p, created


def remove_created(created) -> None:
    """Remove the folders :func:`prepare_output_dir` made, if they are still empty."""
    import os

    for d in created:
        try:
            os.rmdir(d)
        except OSError:
            pass


# ------------------------------------------------------------------------------------------
# The CLI edge: the one place where errors become exit codes and lines on stderr.

INTERRUPTED_EXIT = 130
DEBUG_ENV = "KBREPRO_DEBUG"


class _Escape(BaseException):
    """Carries a KeyboardInterrupt past click (which would turn it into 'Aborted!', exit 1)."""

    def __init__(self, exc: KeyboardInterrupt):
        super().__init__()
        self.exc = exc


def _err(line: str) -> None:
    """Write ``line`` (each of its lines made inert for a terminal: a bundle's or report's text
    in a message never sends an escape sequence or a bidi control) to stderr."""
    import sys

    try:
        sys.stderr.write("\n".join(terminal(x, None) for x in line.split("\n")) + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


class EdgeMixin:
    """Mixed into a ``click.Command`` or ``click.Group`` (``class C(EdgeMixin, click.Command)``):
    every error leaves as one ``error: <what>`` line (at most one ``  -> <next step>``) and
    the documented exit code; a ReproError with its own code; a click usage error 2;
    Ctrl-C 130 with ``interrupted; ...``; anything else one ``internal error`` line and 1
    (the traceback with KBREPRO_DEBUG=1)."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:
            raise _Escape(exc) from None

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        import os
        import sys

        import click

        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
            code = rv if isinstance(rv, int) else 0
        except _Escape as esc:
            code = _interrupted(esc.exc)
        except KeyboardInterrupt as exc:
            code = _interrupted(exc)
        except click.exceptions.Abort as exc:
            if isinstance(exc.__cause__, KeyboardInterrupt):
                code = _interrupted(exc.__cause__)
            else:
                _err("error: aborted")
                code = 1
        except click.ClickException as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # a bare group: its help, as click shows it
                exc.show()
                sys.exit(exc.exit_code)
            msg = " ".join(exc.format_message().split())
            ctx = getattr(exc, "ctx", None)
            _err(f"error: {msg}")
            if isinstance(exc, click.UsageError):
                path = ctx.command_path if ctx is not None else (prog_name or "the command")
                _err(f"  -> see '{path} --help'")
            code = exc.exit_code
        except ReproError as exc:
            _err(f"error: {exc}")
            code = exc.exit_code
        except Exception as exc:  # after a Ctrl-C, whatever breaks next is the interrupt's doing
            if not _SIGINT_SEEN["seen"] or os.environ.get(DEBUG_ENV) == "1":
                code = self._unexpected(exc)
            else:
                code = _interrupted(KeyboardInterrupt())
        sys.exit(code)

    def _unexpected(self, exc: Exception) -> int:
        import os

        try:
            raise exc
        except ImportError as exc:
            if os.environ.get(DEBUG_ENV) == "1":
                raise
            missing = (exc.name or "").split(".")[0]
            if missing and missing != "kbrepro":  # a dependency that is not installed: 4, like any
                _err(f"error: a required package is not installed: {missing} ({exc})")
                _err(f"  -> pip install {missing}, or the project with its dependencies: pip install -e . "
                     "(README, 'On a fresh machine')")
                code = EnvironmentUnavailableError.exit_code
            else:  # a part of this product that does not import: a defect
                _internal(exc)
                code = 1
        except Exception as exc:
            if os.environ.get(DEBUG_ENV) == "1":
                raise
            _internal(exc)
            code = 1
        return code


def _internal(exc: BaseException) -> None:
    msg = " ".join(str(exc).split())
    _err(f"internal error: {type(exc).__name__}: {msg} (please report; rerun with {DEBUG_ENV}=1 for the traceback)")


def _interrupted(exc: KeyboardInterrupt) -> int:
    _err(f"interrupted; {getattr(exc, 'kept', None) or 'nothing was written'}")
    return INTERRUPTED_EXIT


# ------------------------------------------------------------------ CLI process edge (Ctrl-C)


def guard_early_interrupt() -> None:
    """Ctrl-C while a CLI's imports and its module's definitions still run: one line on
    stderr and exit 130, no traceback. Call it first thing under ``if __name__ == "__main__"``;
    :func:`run_main` ends it (:func:`imports_done`) as it starts the command."""
    import os
    import signal
    import sys

    def _early(signum, frame):
        sys.stderr.write("interrupted; nothing was written\n")
        os._exit(130)

    signal.signal(signal.SIGINT, _early)


#: set once a Ctrl-C reached this process: an exception that follows it (a C extension whose
#: import the KeyboardInterrupt cut short refuses a second import) is the interrupt's doing
_SIGINT_SEEN = {"seen": False}


def _on_sigint(signum, frame):
    """Ctrl-C: KeyboardInterrupt, except inside importlib's own machinery (a module lock's
    weakref callback), where CPython would only print "Exception ignored" and a traceback:
    there the signal is sent again 50 ms later, once the import has moved on."""
    _SIGINT_SEEN["seen"] = True
    if frame is not None and frame.f_code.co_filename.startswith("<frozen importlib"):
        import os
        import signal
        import threading

        threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT)).start()
        return
    raise KeyboardInterrupt


def imports_done() -> None:
    """From here on the CLI edge (:class:`EdgeMixin`) turns Ctrl-C into exit 130."""
    import signal

    signal.signal(signal.SIGINT, _on_sigint)


def work_done() -> None:
    """The command's result is being written: a Ctrl-C from here on no longer changes it."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


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
    import signal
    import sys

    # the CLI edge handles Ctrl-C from here on, not before: a KeyboardInterrupt raised while the
    # module still defined its command (its click decorators) reached no edge (a traceback)
    imports_done()
    code = 0
    try:
        main()
    except SystemExit as exc:
        if exc.code == 130:
            try:  # the threads left running first (a Prefetcher's folder removal); a second Ctrl-C cuts it short
                _join_threads()
            except KeyboardInterrupt:
                pass
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(130)
        if not (isinstance(exc.code, int) or exc.code is None) or not _cuda_started() or \
                os.environ.get("KBREPRO_FAST_EXIT") == "0":
            raise
        code = exc.code or 0
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    if _cuda_started() and os.environ.get("KBREPRO_FAST_EXIT") != "0":
        _fast_exit(code)
    sys.exit(code)


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

                    _err(f"Exception ignored in: {stream!r}\n" + "".join(traceback.format_exception_only(exc)).rstrip())
                code = 120
        try:
            import ctypes

            ctypes.CDLL(None).fflush(None)
        except Exception:
            pass
    finally:
        os._exit(code)


def refuse_input_as_output(output, inputs, option: str) -> None:
    """An output path that names one of the command's own input files (``--json`` set to the
    archive, the digest file or an audited results file) would destroy that input: refused
    with OutputPathError (exit 2) before any work."""
    import os

    out = os.path.abspath(os.fspath(output))
    for inp in inputs:
        if inp is None:
            continue
        path = os.fspath(inp)
        try:
            same = os.path.exists(out) and os.path.exists(path) and os.path.samefile(out, path)
        except OSError:
            same = False
        if same or os.path.abspath(path) == out:
            raise OutputPathError(f"{option} {output} is one of this command's inputs; writing it would destroy it",
                                  f"choose another {option} path")


def ignore_sigint_from_now() -> None:
    """A worker process's first act: ignore SIGINT (a Ctrl-C reaches the whole process group;
    only the parent acts on it and stops its workers, which otherwise print their own
    KeyboardInterrupt traceback), then unblock it: a parent starts its workers inside
    :class:`deferred_sigint`, whose mask a forked or spawned child inherits, so a Ctrl-C that
    came meanwhile is dropped here."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


class deferred_sigint:
    """``with deferred_sigint(): import torch``: a Ctrl-C during the block waits until it ends.
    torch's import runs C++ (pybind11) that aborts the process (SIGABRT) when a
    KeyboardInterrupt surfaces inside it; blocked, the signal is delivered right after, as a
    clean KeyboardInterrupt the CLI edge turns into exit 130. Only the main thread can block."""

    def __enter__(self):
        import signal
        import threading

        self._blocked = hasattr(signal, "pthread_sigmask") and threading.current_thread() is threading.main_thread()
        if self._blocked:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        return self

    def __exit__(self, *exc) -> bool:
        if self._blocked:
            import signal

            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        return False
