"""One problem type for everything a document, a record or a check can be wrong about.

A :class:`Problem` names *where* (the bag file and a JSON path), *what* (a one-line message)
and a stable ``code`` that control flow and exit codes depend on, never the wording. The
strict record builder (:mod:`kbrepro.model.strict`) and every check of the candidate records
(:mod:`kbrepro.model.candidates`) return these; the verifier turns each into a failed tier's
problem, the packer into one InvalidResultsError line.
"""
from __future__ import annotations

from dataclasses import dataclass

#: codes of the strict builder: the JSON value is not what the record type says
TYPE = "model.type"            # another JSON type (a string where a number is, 2.0 where an integer is)
MISSING = "model.missing"      # a required field is absent
EXTRA = "model.extra"          # a field the record does not have
RANGE = "model.range"          # a number outside its range, or not finite
LENGTH = "model.length"        # a string, list or object of too few or too many items
PATTERN = "model.pattern"      # a string that does not match its pattern
ENUM = "model.enum"            # a value outside a closed set
#: codes of the checks between fields and records
INVARIANT = "model.invariant"  # a record contradicts itself (a passing check with failing elements)
INCOMPLETE = "record.incomplete"   # evidence a run of this kind always records is missing
CONTRADICTS = "record.contradicts"  # two records, or a record and the verifier's derivation, disagree
DERIVED = "record.derived"     # a stated value differs from the one the verifier derives
UNSAFE_TEXT = "record.unsafe_text"  # a string a person reads is not inert


@dataclass(frozen=True)
class Problem:
    """What is wrong, and where. ``code``: one of the module's codes; ``path``: a JSON path
    (``$.candidates[0].observations.failure``); ``message``: one line, without the path;
    ``file``: the document file, where the reader cannot tell it from the context;
    ``expected`` and ``found``: optional JSON values (the verifier bounds and escapes them)."""

    code: str
    path: str
    message: str
    expected: object = None
    found: object = None
    #: the document file it is about (``run.json``), where the problem's reader does not know it
    file: str | None = None

    def __str__(self) -> str:
        return f"{self.file}: {self.path}: {self.message}" if self.file else f"{self.path}: {self.message}"


__all__ = ["Problem", "TYPE", "MISSING", "EXTRA", "RANGE", "LENGTH", "PATTERN", "ENUM", "INVARIANT", "INCOMPLETE",
           "CONTRADICTS", "DERIVED", "UNSAFE_TEXT"]
