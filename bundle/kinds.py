"""The bundle kinds (DESIGN.md section 2, ``bundle/kinds.py``): :class:`BundleKind` records of
the two kinds' formats, light enough for the verifier's first tier to read any bundle's
bag-info.txt without importing a kind's records and checks. The study bundle's constants are
:mod:`kbrepro.bundle.pack`'s, the candidate bundle's are here; :data:`BY_FORMAT` finds a kind by
the ``Bundle-Format`` of its bag-info.txt. The one make pipeline (:mod:`kbrepro.bundle.assemble`)
seals either kind's contents by its record.
"""
from __future__ import annotations

from dataclasses import dataclass

from kbrepro.bundle import pack
from kbrepro.errors import UsageError

FORMAT = "kbrepro-candidate-bundle"
#: the study name a candidate bundle records (bag-info.txt ``Study``, claims specs, RO-Crate)
KIND = "kernelbench-candidates"
#: the candidate bundle format this packer writes: 3 adds the RO-Crate metadata file and,
#: when signed, the attestations (as study format 4 does); 2 is the format before them
FORMAT_VERSION = 7
FORMAT_VERSIONS = (2, 3, 4, 5, 6, 7)
#: the version of results/candidates.json this product writes: 2, timing protocol 2 (issue 27:
#: fresh inputs for every timed invocation, every timed output checked, the clock over two
#: lengths); the verifier reads 1 and 2
SCHEMA_VERSION = 2
#: the results/candidates.json schema versions each candidate bundle format holds: 4 is 3's
#: layout holding timing protocol 2 (issue 27); 5 is 4 whose REPORT.md and summary.txt say
#: first where and at which sizes the candidates ran, and write differences as a person does; 6
#: is 5 whose first claim of a candidate says how many of its checks decide (:data:`DECIDING_SINCE`);
#: 7 is 6 in the tidier words of :data:`TIDY_SINCE`
DOC_VERSIONS = {2: (1,), 3: (1,), 4: (2,), 5: (2,), 6: (2,), 7: (2,)}


def format_for(doc_version: int, asked: int | None) -> int:
    """The bundle format results of ``doc_version`` are packed in: ``asked``, or the newest that
    holds them. Raises UsageError where ``asked`` cannot hold them."""
    if asked is None:
        return max(f for f, vs in DOC_VERSIONS.items() if doc_version in vs)
    if doc_version not in DOC_VERSIONS.get(asked, ()):
        holds = [f for f, vs in DOC_VERSIONS.items() if doc_version in vs]
        raise UsageError(f"candidate bundle format {asked} cannot hold results of timing protocol {doc_version}",
                         f"use --bundle-format {' or '.join(map(str, holds))}, or drop --bundle-format")
    return asked


#: candidate bundle formats from which the RO-Crate file (and, signed, the attestations) is there
CRATE_SINCE = 3
#: the first candidate bundle format whose REPORT.md and summary.txt use ``report.readable``'s words
READABLE_SINCE = 5
#: the first candidate bundle format whose claim K<i>a says how many checks decide (format 5 said
#: "20 checks" where 8 of them could not decide on a CPU)
DECIDING_SINCE = 6
#: the first candidate bundle format whose report words are :func:`kbrepro.bundle.wording.readable`'s
#: level 2: one value where an interval's two ends read the same ("3.0x faster", not "3.0x to 3.0x"),
#: the ratio convention explained only where a claim compares times, and a CPU run's sizes note
#: without "timing" (it has none)
TIDY_SINCE = 7


@dataclass(frozen=True)
class BundleKind:
    """One kind of bundle: what its bag-info.txt calls its format, the format versions this
    packer writes and the verifier reads (the newest is the default), the first version with the
    RO-Crate metadata file and optional signatures, the first whose report is written in a
    person's words (:func:`kbrepro.bundle.report.readable`), and the schema of its
    ``data/bundle.json``."""

    name: str
    format: str
    versions: tuple[int, ...]
    newest: int
    crate_since: int
    readable_since: int
    tidy_since: int
    meta_schema: str

    def check_format(self, version: int, signed: bool) -> None:
        """Refuse a bundle format this packer does not write, and a signature on one that cannot
        carry it. Raises UsageError (2)."""
        if version not in self.versions:
            raise UsageError(f"--bundle-format {version} is not a format this packer writes",
                             f"use one of {', '.join(map(str, self.versions))} (default {self.newest})")
        if signed and version < self.crate_since:
            raise UsageError(f"bundle format {version} cannot be signed (signatures start with format "
                             f"{self.crate_since})", "drop --bundle-format, or drop --sign")


STUDY = BundleKind("study", pack.FORMAT_NAME, pack.FORMAT_VERSIONS, pack.FORMAT_VERSION, pack.CRATE_SINCE,
                   pack.READABLE_SINCE, pack.TIDY_SINCE, "bundle")
CANDIDATES = BundleKind("candidates", FORMAT, FORMAT_VERSIONS, FORMAT_VERSION, CRATE_SINCE, READABLE_SINCE,
                        TIDY_SINCE, "candidate-bundle")
#: bag-info.txt's Bundle-Format -> its kind
BY_FORMAT = {k.format: k for k in (STUDY, CANDIDATES)}


__all__ = ["BundleKind", "STUDY", "CANDIDATES", "BY_FORMAT", "FORMAT", "KIND", "FORMAT_VERSION", "FORMAT_VERSIONS", "SCHEMA_VERSION", "DOC_VERSIONS", "CRATE_SINCE", "DECIDING_SINCE", "format_for"]
