"""verify: an untrusted archive -> a numbered checklist of tiers -> a verification report.

Tiers, cheapest first; each collects every problem (file, JSON path, expected, found), and
:mod:`.checklist` declares which check runs in which tier for each bundle kind:

1. ``archive`` (:mod:`.manifest`): the archive's member headers read as a stream.
2. ``manifest`` (:mod:`.manifest`): payload hashes, tag manifest, Payload-Oxum, digest,
   attestations.
3. ``documents``: strict JSON, the verifier's own schemas and table, consistency
   (:mod:`.documents`, :mod:`.study_definition`, :mod:`.layout`, :mod:`.inert`,
   :mod:`.imported`; a candidate bundle's :mod:`.candidate`).
4. ``provenance``: KernelBench files against the verifier's own lock, kernel sources,
   cubins, FTZ evidence (:mod:`.provenance`, :mod:`.candidate`).
5. ``claims``: evaluated again from the recorded documents; recorded verdicts, claims.json,
   REPORT.md and the RO-Crate file must follow (:mod:`.claims`, :mod:`.described`).
6. ``replay``: the study or candidates run again on this GPU with the verifier's own code,
   then compared (:mod:`.replay`, :mod:`.compare`).

Trust anchors are the verifier's own schemas, KernelBench lock and kernel source, never the
bundle's copies. The entry point is :func:`kbrepro.bundle.verify.checklist.verify_archive`;
this package module imports nothing, so that its leaf :mod:`.core` can be imported alone.
"""
