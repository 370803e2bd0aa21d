"""The product's one exception hierarchy.

Every error the product raises on purpose derives from :class:`ReproError`. Each class
carries the process exit code the CLI edge maps it to and a message that tells the user
what to do next. Library code raises these; only ``make_bundle.py`` and
``verify_bundle.py`` turn them into exit codes. The module sits in ``kernels`` (the lowest
layer) so that every layer can raise without importing upward.

Exit codes (DESIGN.md section 6): 0 ok, 1 invalid results / verification failed,
2 usage error, 3 unreadable, unsafe or unknown-format input, 4 no GPU or missing dependency.
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


class KernelBenchPinError(UnreadableInputError):
    """The KernelBench checkout is missing, at another commit, or a file differs from the lock."""
