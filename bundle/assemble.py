"""The one make pipeline's last stages for every bundle kind (DESIGN.md section 3): a kind (a
study, candidates) contributes its :class:`Contents` (payload, bundle metadata, claims, the
documents as packed); :func:`build_payload` seals them into the bag the same way for both,
and :func:`write_bundle` writes the archive and its digest file, or nothing.

The seal, in order: the metadata and claims documents are checked against their schemas (a
failure is our defect), ``bundle.json`` joins the payload, the bag is built with the kind's
bag-info.txt, from the kind's ``crate_since`` format on the RO-Crate metadata file joins the
payload and, with a key, the signed attestations the tag files (:mod:`bundle.crate`,
:mod:`bundle.attest`), and last the five-line ``summary.txt`` is rendered with the bag's digest.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping

from kbrepro import schemas
from kbrepro.bundle import attest, crate, facts, pack, report
from kbrepro.bundle.kinds import BundleKind
from kbrepro.errors import InvalidResultsError, OutputPathError
from kbrepro.harness import jsonio


@dataclass(frozen=True)
class Contents:
    """What a bundle kind puts into its bag. ``payload``: the files under ``data/`` by path, without
    ``bundle.json``; ``meta``: the ``data/bundle.json`` document (its kind's schema); ``claims``:
    the claims document as evaluated; ``documents``: the result documents as packed (canonical
    JSON read back, what the verifier reads), by name; ``own_ids``: the ids of the claims the
    study itself defines (the others are the author's); ``label``: bag-info.txt's ``Study``;
    ``renderings``: the figures' PNGs, outside every manifest."""

    payload: Mapping[str, bytes]
    meta: Mapping
    claims: Mapping
    documents: Mapping[str, Mapping]
    own_ids: frozenset
    label: str
    renderings: Mapping[str, bytes] = field(default_factory=dict)


def json_roundtrip(doc: Mapping) -> dict:
    """``doc`` as the verifier reads it back (canonical JSON), so that both derive the same figures."""
    return json.loads(jsonio.dumps(doc))


def describe_and_sign(bag: pack.Bag, meta: Mapping, documents: Mapping[str, Mapping], signing_key=None) -> pack.Bag:
    """``bag`` with its RO-Crate metadata file in the payload (:mod:`bundle.crate`) and, with a
    ``signing_key``, its signed attestations (:mod:`bundle.attest`): both derived from the
    payload (``documents`` as read back, ``claims`` among them), as the verifier derives them."""
    docs = {n: d for n, d in documents.items() if n != "claims"}
    f = facts.bundle_facts(meta, docs, bag.payload)
    payload = {**bag.payload, facts.CRATE_FILE: crate.render(f)}
    bag = dataclasses.replace(bag, payload=payload)
    if signing_key is not None:
        bag = dataclasses.replace(bag, attestations=attest.sign(f, attest.verdicts_of(documents["claims"]), payload,
                                                                signing_key))
    return bag


def build_payload(kind: BundleKind, contents: Contents, bundle_format: int, signing_key=None) -> pack.Bag:
    """The sealed bag of ``contents`` in ``kind``'s format ``bundle_format``, signed with
    ``signing_key`` (:class:`bundle.attest.SigningKey`) if given. Raises UsageError for a format
    the kind does not write or cannot sign, InvalidResultsError ("internal error") where the
    metadata or claims document does not validate against its schema."""
    kind.check_format(bundle_format, signing_key is not None)
    meta = contents.meta
    problems = schemas.validate(meta, kind.meta_schema) + schemas.validate(contents.claims, "claims")
    if problems:
        raise InvalidResultsError("internal error: bundle metadata invalid: " + "; ".join(map(str, problems[:10])),
                                  "report this as a bug")
    payload = {**contents.payload, "bundle.json": jsonio.dumps(meta).encode()}
    bag = pack.make_bag(meta["name"], payload, pack.bag_info(meta["name"], kind.format, bundle_format, contents.label,
                                                             meta["source"]), renderings=contents.renderings)
    claims = json_roundtrip(contents.claims)
    if bundle_format >= kind.crate_since:
        bag = describe_and_sign(bag, meta, {**contents.documents, "claims": claims}, signing_key)
    summary = report.post_summary(meta, contents.documents, claims, bag.digest(), contents.own_ids)
    return dataclasses.replace(bag, summary=summary.encode())


def unpublished_paths(out: Path) -> tuple[Path, Path]:
    """Where a bundle for ``out`` and its digest file lie until they are published
    (:mod:`kbrepro.bundle.publish`): hidden names beside ``out``, ``.<name>.verifying.tar``."""
    out = Path(out)
    return tuple(p.with_name(f".{p.name}.verifying{out.suffix}")
                 for p in (out, out.with_name(out.name + pack.DIGEST_SUFFIX)))


#: the ``out`` paths whose hidden pair this process wrote and has not yet published or removed
_PENDING: set[Path] = set()


def remove_unpublished(out: Path) -> None:
    """Remove the hidden pair :func:`unpublished_paths` names for ``out`` (what is missing is
    passed over)."""
    for p in unpublished_paths(out):
        try:
            p.unlink()
        except OSError:
            pass
    _PENDING.discard(Path(out))


def published(out: Path) -> None:
    """The hidden pair of ``out`` took its final names (:func:`kbrepro.bundle.publish.put_in_place`)."""
    _PENDING.discard(Path(out))


@contextlib.contextmanager
def unpublished_removed_on_error() -> Iterator[None]:
    """Around a command that writes a bundle under its hidden names and publishes it: an error,
    a Ctrl-C or a SIGTERM anywhere in between (even in the instant after the hidden pair was
    renamed into place and before its verification began) removes every hidden pair this
    process wrote and did not publish, so nothing is left beside ``--out`` that the
    interruption's message does not name."""
    try:
        yield
    except BaseException:
        for out in list(_PENDING):
            remove_unpublished(out)
        raise


def write_bundle(bag: pack.Bag, out: Path, unpublished: bool = False) -> tuple[int, str]:
    """Write ``bag`` to the archive ``out`` and its digest to ``<out>.sha256-digest``, together
    (:func:`kbrepro.harness.jsonio.atomic_write_all`): a failure or an interruption leaves both
    as they were (an earlier archive and its digest included), never one new and one old.
    ``unpublished``: write them under :func:`unpublished_paths` instead, leaving whatever is at
    ``out`` as it is until :func:`kbrepro.bundle.publish.publish` puts them in its place.
    Returns ``(archive size in bytes, bundle digest)``. Raises OutputPathError (2) where either
    cannot be written, UsageError for an archive name that is neither .tar nor .tar.gz."""
    digest = bag.digest()
    data = pack.archive_bytes(bag, out)
    line = f"bundle digest (sha256 of {bag.name}/tagmanifest-sha256.txt): {digest}\n".encode()
    paths = unpublished_paths(out) if unpublished else (out, out.with_name(out.name + pack.DIGEST_SUFFIX))
    if unpublished:  # a hidden pair left by an earlier run that was killed: ours to replace, never a folder
        for p in paths:
            if p.is_dir() and not p.is_symlink():
                raise OutputPathError(f"{p} is a folder in the way of the bundle's hidden name beside --out; nothing "
                                      "was written", f"remove {p}, or choose another --out")
    if unpublished:
        _PENDING.add(Path(out))
    try:
        jsonio.atomic_write_all([(paths[0], data), (paths[1], line)])
    except BaseException as exc:
        # (a second rename that failed leaves the first's hidden file; a Ctrl-C held during the
        # renames is raised right after them: either way the hidden pair goes)
        if unpublished:
            remove_unpublished(out)
        if not isinstance(exc, OSError):
            raise
        raise OutputPathError(f"cannot write {out}: {(exc.strerror or type(exc).__name__).lower()}; "
                              "nothing was written", "choose another --out") from exc
    return len(data), digest


__all__ = ["Contents", "build_payload", "write_bundle", "unpublished_paths", "remove_unpublished", "published",
           "unpublished_removed_on_error", "describe_and_sign", "json_roundtrip"]
