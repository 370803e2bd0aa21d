"""The CLI edge (DESIGN.md §2: ``cli/edge.py``): the one place where errors become exit codes
and lines on stderr, mixed into every click command of the four entry points.
"""
from __future__ import annotations

import contextlib
import sys
from typing import Callable, Iterator

from kbrepro.errors import EnvironmentUnavailableError, OutputPathError, ReproError, UsageError
from kbrepro.process import INTERRUPTED_EXIT, interrupted_exit, sigint_seen, stderr_line as _err, unraisable_hook

DEBUG_ENV = "KBREPRO_DEBUG"
@contextlib.contextmanager
def status(text: str) -> Iterator[Callable[[str], None] | None]:
    """A one-line status on a terminal's stderr for a stage of a few seconds (rich's spinner),
    erased when the stage ends; nothing where stderr is not a terminal (a log, a pipe, CI).
    Yields ``update(text)``, or None where nothing is shown."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console  # (only a terminal needs it)

    with Console(stderr=True, highlight=False).status(text, spinner="line") as st:
        yield st.update


#: the two entry points' commands, by tool: an option of the other tool is named as such
TOOLS = {"make_bundle.py": "kbrepro.cli.make", "verify_bundle.py": "kbrepro.cli.verify"}


def _spellings(cmd) -> dict[str, list[str]]:
    """Every option spelling of ``cmd`` (a click command or group) -> the subcommands that take
    it ([] for a plain command)."""
    import click

    out: dict[str, list[str]] = {}
    subs = cmd.commands.items() if isinstance(cmd, click.Group) else [(None, cmd)]
    for name, c in subs:
        for p in c.params:
            if isinstance(p, click.Option):
                for o in (*p.opts, *p.secondary_opts):
                    out.setdefault(o, [])
                    if name is not None:
                        out[o].append(name)
    return out


def other_tools_option(option: str, this_tool: str):
    """A UsageError naming the other entry point that takes ``option`` (one this tool does not
    know), or None where no tool takes it."""
    import importlib

    for tool, module in TOOLS.items():
        if tool == this_tool:
            continue
        # (the other entry point's command, imported only for this usage error: the two import
        # each other nowhere else)
        subs = _spellings(importlib.import_module(module).main).get(option.split("=", 1)[0])
        if subs is not None:
            where = f" ({', '.join(subs)})" if subs else ""
            return UsageError(f"{option.split('=', 1)[0]} is an option of {tool}{where}, not of {this_tool}",
                              f"see 'python {tool}{' ' + subs[0] if len(subs) == 1 else ''} --help'")
    return None


def stream_gone(err: bool = False) -> None:
    """The reader of stdout (``err``: stderr) stopped reading (``| head``): that stream goes to
    the null device from here on, so nothing is left to flush into a closed pipe."""
    import os

    stream = sys.stderr if err else sys.stdout
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, stream.fileno())
        os.close(fd)
    except (OSError, ValueError):
        pass


def echo(message: str = "", err: bool = False, nl: bool = True) -> None:
    """``click.echo`` that outlives a reader who stopped reading (``make_bundle.py ... 2>&1 |
    head``): from the first broken pipe on, the lines of that stream are dropped and the
    command carries on; its files and its exit code are not the reader's to change."""
    import click

    try:
        click.echo(message, err=err, nl=nl)
    except BrokenPipeError:
        stream_gone(err)


class _Escape(BaseException):
    """Carries a KeyboardInterrupt past click (which would turn it into 'Aborted!', exit 1)."""

    def __init__(self, exc: KeyboardInterrupt):
        super().__init__()
        self.exc = exc


class EdgeMixin:
    """Mixed into a ``click.Command`` or ``click.Group`` (``class C(EdgeMixin, click.Command)``):
    every error leaves as one ``error: <what>`` line (at most one ``  -> <next step>``) and
    the documented exit code; a ReproError with its own code; a click usage error 2;
    Ctrl-C 130 (SIGTERM 143) with ``interrupted; ...``; anything else one ``internal error`` line and 1
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
        # a Ctrl-C inside a callback Python cannot raise from (an import lock's) is sent again
        # once it returned, never printed as "Exception ignored" with a traceback
        sys.unraisablehook = unraisable_hook
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
                path = ctx.command_path if ctx is not None else \
                    (prog_name or os.path.basename(sys.argv[0]) or "the command")
                _err(f"  -> see '{path} --help'")
            code = exc.exit_code
        except ReproError as exc:
            _err(f"error: {exc}")
            code = exc.exit_code
        except Exception as exc:  # after a Ctrl-C, whatever breaks next is the interrupt's doing
            if not sigint_seen() or os.environ.get(DEBUG_ENV) == "1":
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
        except OSError as exc:
            if os.environ.get(DEBUG_ENV) == "1":
                raise
            import errno

            if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS):
                # the machine's disk or a stream it was told to write to, not a defect of ours
                where = f" ({exc.filename})" if exc.filename else " (a file or the terminal's output)"
                _err(f"error: cannot write{where}: {(exc.strerror or type(exc).__name__).lower()}")
                _err("  -> free some space or write elsewhere; what the command finished before this is kept "
                     "(its own lines above say what)")
                code = OutputPathError.exit_code
            else:
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
    return interrupted_exit()


__all__ = ["EdgeMixin", "DEBUG_ENV", "INTERRUPTED_EXIT"]
