"""Cross-document content checks of a bundle: tier 3 (documents) and tier 4 (provenance).

A forger who edits a document can recompute both BagIt manifests, so only content checks
catch the edit. Everything here is derived by the verifier itself, with its own code and
definitions (its own study, its own FTZ rule, its own predicate definitions, the bytes of
the bundled binaries and task files); what the bundle says about itself is compared, never
believed.

Pure functions: no I/O, no printing, nothing raised for malformed input (a value of the
wrong type is skipped or reported, never trusted). Every function returns a list of
:class:`kbrepro.model.problems.Problem` (file, JSON path, one-line message, optional expected
and found, a code; built by :func:`kbrepro.bundle.evidence.problem`); what a study plug-in's own
checks return is read through :func:`kbrepro.bundle.evidence.from_study`.

Imported results (``bundle.json`` ``source: imported``: the post's original files converted
by the study's importer) have no KernelBench files, binaries, witness document, stage list,
resolved study or per-case shapes, and their timing blocks follow the post's scripts (one
variant per script, ids ``<task>.<scope>.<mode>@<file>``). Checks that need what an import
cannot have are skipped for them (each function's docstring says which); every check whose
inputs are present still applies.

The checks live in :mod:`.documents`, :mod:`.study` and :mod:`.provenance` (what they share
in :mod:`.common`); this module is their one entry point.
"""
from __future__ import annotations

from kbrepro.bundle.crosscheck.common import expected_ftz
from kbrepro.bundle.crosscheck.documents import document_problems
from kbrepro.bundle.crosscheck.provenance import check_arithmetic, cubin_sm, provenance_problems
from kbrepro.bundle.crosscheck.study import study_problems

__all__ = ["document_problems", "study_problems", "provenance_problems", "expected_ftz", "cubin_sm",
           "check_arithmetic"]
