"""What describes a bundle, checked against what the verifier derives from the checked
documents: its RO-Crate file (:func:`crate_check`) and, for a signed bundle, its signed
statements (:func:`statements_check`).
"""
from __future__ import annotations

from typing import Mapping

from kbrepro.bundle import attest, crate, facts, pack
from kbrepro.bundle.facts import CRATE_FILE
from kbrepro.bundle.verify.core import Bundle, Tier
from kbrepro.model.problems import SIGNATURE_PAYLOAD


def crate_check(b: Bundle, t: Tier) -> None:
    """The bundle's RO-Crate file against the one this verifier writes from the checked
    documents (:mod:`bundle.crate`), for formats that carry one (older ones must not). Runs
    last in tier 5, so that a document edit is first reported by the check that owns it."""
    docs = {n: d for n, d in b.documents.items() if n != "claims"}
    rel = f"data/{CRATE_FILE}"
    if not b.has_crate:
        if rel in b.files:
            t.fail(rel, "bundles of this format carry no RO-Crate file")
        return
    payload = b.payload
    f = facts.bundle_facts(b.meta, docs, payload)
    problems = crate.problems(payload.get(CRATE_FILE), f)
    for msg in problems:
        t.fail(rel, f"the RO-Crate metadata does not describe this bundle: {msg}")
    t.details["ro_crate"] = "differs from the documents" if problems else "agrees with the documents"


def statements_check(b: Bundle, t: Tier, docs: Mapping, claims_doc: Mapping) -> None:
    """A signed bundle's statements against the ones this verifier derives from the documents
    and from the claims verdicts it evaluated itself (:mod:`bundle.attest`): a statement signed
    with a valid signature that says anything else (another study, profile, KernelBench commit,
    software version, verdict) fails here."""
    att = b.attestation
    if att is None or not att.signed or not att.statements:
        return
    if any(p.code == SIGNATURE_PAYLOAD for p in att.problems):
        return  # tier 2 said it: the payload is not what was signed (its file digests would only repeat that)
    payload = b.payload
    f = facts.bundle_facts(b.meta, docs, payload)
    want = attest.statements(f, attest.verdicts_of(claims_doc), payload)
    for path, e, found in attest.disagreements(att.statements, want):
        t.fail(pack.ATTESTATIONS, "the signed statement disagrees with the documents (the verifier derives another "
               "value from them)", path=path, expected=e, found=found)
    if t.status == "PASS":
        t.notes.append(f"the signed provenance and test-result statements agree with the documents "
                       f"({att.line()})")
