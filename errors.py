"""The product's one exception hierarchy.

Every error the product raises on purpose derives from :class:`ReproError`. Each class
carries the process exit code the CLI edge maps it to and a message that tells the user
what to do next. Library code raises these; only the four CLI edges (``make_bundle.py``,
``verify_bundle.py``, ``python -m kbrepro.bundle.audit``, ``python -m kbrepro.harness``, through
:class:`kbrepro.cli.edge.EdgeMixin`) turn them into exit codes. A leaf module at the package
root: it imports nothing of the product, so every layer (kernels, harness, bundle, the CLIs)
can raise without importing upward. The checks of paths the user gave live in
:mod:`kbrepro.paths`, signals and the process's exit in :mod:`kbrepro.process` (DESIGN.md §2).

Exit codes (DESIGN.md section 6): 0 ok, 1 invalid results / verification failed,
2 usage error, 3 unreadable, unsafe or unknown-format input, 4 no GPU or missing dependency,
5 (verify only) PARTIAL: verified in part, 6 harness error (our code raised while it checked a
candidate, which is not blamed), 130 interrupted.
"""
from __future__ import annotations


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


__all__ = ["ReproError", "InvalidResultsError", "UsageError", "UnreadableInputError", "EnvironmentUnavailableError",
           "CompileError", "CandidateFailure", "HarnessError", "KernelBenchPinError", "InputPathError", "OutputPathError",
           "Interrupted"]


def __getattr__(name: str):
    """The two path checks the shipped pointwise-fusion study imports from here: its files are
    hashed in its committed runs (a changed import would change their digests), so they keep
    reaching :mod:`kbrepro.paths` this way. Anything else is an AttributeError."""
    if name in ("check_input_file", "check_input_dir"):
        from kbrepro import paths  # noqa: E402 (a leaf must not import paths at its top: paths imports it)

        return getattr(paths, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
