"""One problem type for everything a document, a record or a check can be wrong about.

A :class:`Problem` names *where* (the bag file and a JSON path), *what* (a one-line message)
and a stable ``code`` that control flow and exit codes depend on, never the wording. The
strict record builder (:mod:`kbrepro.model.strict`), every check of the candidate records
(:mod:`kbrepro.model.candidates`), the content checks of a study bundle
(:mod:`kbrepro.bundle.crosscheck`, :mod:`kbrepro.bundle.derived_facts`), the archive reader
and every tier of the verifier (:class:`kbrepro.bundle.verify.core.Tier`) hold these, from the
check that finds one to the verification report, where :meth:`Problem.to_doc` is the JSON edge;
the packer turns them into one InvalidResultsError line.
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
STUDY_CHECK = "study.check"    # a study plug-in's own check (its crosscheck or provenance hook) found it
#: codes of a document against its schema
SCHEMA = "document.schema"     # a document fails its schema, or is not the document it names
UNKNOWN_VERSION = "document.unknown_version"  # a schema_version this verifier does not read
#: codes of a signed bundle's attestations (bundle/attest.py)
SIGNATURE_MALFORMED = "signature.malformed"    # the envelopes are not the packer's exact form
SIGNATURE_WRONG_KEY = "signature.wrong_key"    # signed by another key than the --public-key given
SIGNATURE_BAD = "signature.bad"                # a signature does not verify with the key it names
SIGNATURE_PAYLOAD = "signature.payload_altered"  # the signed subjects are not the payload in the archive
SIGNATURE_MISSING = "signature.missing"        # --public-key given, the bundle is not signed
#: codes of the verifier's tiers, for a problem a tier finds itself (DESIGN.md section 6)
ARCHIVE = "bundle.archive"       # tier 1: the archive is unreadable, unsafe or of an unknown format
MANIFEST = "bundle.manifest"     # tier 2: a file missing, extra or with another hash; another digest
DOCUMENT = "bundle.document"     # tier 3: a document that is not strict JSON or fails its schema
PROVENANCE = "bundle.provenance"  # tier 4: pins, sources, cubins, flags and witnesses
CLAIM = "bundle.claim"           # tier 5: a recorded verdict the data do not give
REPLAY = "bundle.replay"         # tier 6: the replay could not run or did not reproduce
#: the code of a problem a tier records without a more precise one, by tier name
TIER_CODES = {"archive": ARCHIVE, "manifest": MANIFEST, "documents": DOCUMENT, "provenance": PROVENANCE,
              "claims": CLAIM, "replay": REPLAY}


#: the exit code of a verification by its verdict: the one table (DESIGN.md section 6)
VERDICT_EXIT = {"PASS": 0, "FAIL": 1, "PARTIAL": 5}
#: a FAIL with a problem of one of these codes is an archive that is unreadable, unsafe or of an
#: unknown format (exit 3), not a bundle that failed its checks (exit 1)
UNREADABLE = frozenset({ARCHIVE, UNKNOWN_VERSION})
UNREADABLE_EXIT = 3


def verdict_exit(verdict: str, codes) -> int:
    """The exit code of a verification whose verdict is ``verdict`` (PASS, PARTIAL, FAIL) and
    whose problems have ``codes``: decided by verdict and code, never by a message's wording."""
    if verdict == "FAIL" and any(c in UNREADABLE for c in codes):
        return UNREADABLE_EXIT
    return VERDICT_EXIT[verdict]


def _finite(v):
    """``v`` with every non-finite float written as the strings ``"inf"``, ``"-inf"``, ``"nan"``
    (as jsonio.enc_float does): a report quotes a forged value that JSON cannot hold as a number."""
    if isinstance(v, float) and v != v:
        return "nan"
    if isinstance(v, float) and v in (float("inf"), float("-inf")):
        return "inf" if v > 0 else "-inf"
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    return v


@dataclass(frozen=True)
class Problem:
    """What is wrong, and where. ``code``: one of the module's codes; ``path``: a JSON path
    (``$.candidates[0].observations.failure``); ``message``: one line, without the path;
    ``file``: the document file, where the reader cannot tell it from the context;
    ``expected`` and ``found``: optional JSON values (the verifier bounds and escapes them).
    ``path`` is None for a problem of a whole file (a hash, an archive member)."""

    code: str
    path: str | None
    message: str
    expected: object = None
    found: object = None
    #: the document file it is about (``run.json``), where the problem's reader does not know it
    file: str | None = None

    def __str__(self) -> str:
        where = [w for w in (self.file, self.path) if w]
        return ": ".join([*where, self.message])

    def to_doc(self) -> dict:
        """The problem as the verification report's JSON holds it (``schemas/verification-report``):
        ``file``, ``path``, ``message``, ``expected`` and ``found`` where given, and ``code``."""
        out = {"file": self.file, "path": self.path, "message": self.message}
        if self.expected is not None:
            out["expected"] = _finite(self.expected)
        if self.found is not None:
            out["found"] = _finite(self.found)
        out["code"] = self.code
        return out


__all__ = ["Problem", "TYPE", "MISSING", "EXTRA", "RANGE", "LENGTH", "PATTERN", "ENUM", "INVARIANT", "INCOMPLETE",
           "CONTRADICTS", "DERIVED", "UNSAFE_TEXT", "STUDY_CHECK", "ARCHIVE", "MANIFEST", "DOCUMENT", "PROVENANCE", "CLAIM", "REPLAY",
           "TIER_CODES", "SCHEMA", "UNKNOWN_VERSION", "VERDICT_EXIT", "UNREADABLE", "verdict_exit"]
