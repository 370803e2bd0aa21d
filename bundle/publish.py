"""Publishing a bundle the packer just wrote: it is verified at ``--level static`` with the
verifier's own code while it and its digest file lie under hidden names, and they take their
final names only after the verification finished (:func:`verify_unpublished`); a bundle whose
self-verification did not finish is never left under its final name.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from kbrepro.bundle.pack import DIGEST_SUFFIX
from kbrepro.bundle.verify.checklist import verify_archive
from kbrepro.cli.edge import status
from kbrepro.errors import Interrupted, InvalidResultsError


def predict_verification(path: Path, public_key=None) -> tuple[str, str]:
    """The verdict ``verify_bundle.py --level static`` gives the bundle at ``path`` (with
    ``--public-key``, for a signed bundle: ``public_key``, a :class:`bundle.attest.PublicKey`)
    and one line saying it: PASS, PARTIAL (with its first reason) or FAIL (with the first
    problem and its tier)."""
    rep = verify_archive(Path(path), level="static", public_key=public_key)
    if rep.verdict == "FAIL":
        t = next((t for t in rep.tiers if t.status == "FAIL"), None)
        p = t.problems[0] if t and t.problems else None
        where = f"tier {t.number} {t.name}" if t else "a tier"
        return "FAIL", (f"FAIL in {where}: {(p.file if p else None) or ''}: {p.message if p else ''}"
                        f"{' (and more)' if t and len(t.problems) > 1 else ''}")
    if rep.verdict == "PARTIAL":
        signed = f" ({rep.signature.line()})" if public_key is not None and rep.signature is not None else ""
        return "PARTIAL", f"PARTIAL at --level static{signed}: {rep.partial[0] if rep.partial else ''}"
    signed = f", {rep.signature.line()}" if public_key is not None and rep.signature is not None else ""
    return rep.verdict, f"{rep.verdict} at --level static{signed} (replay on a GPU: --level replay)"


def verify_unpublished(path: Path, public_key=None) -> tuple[str, str]:
    """:func:`predict_verification` of the bundle this packer just wrote at ``path``, with the
    bundle and its digest file under hidden names (``.<name>.verifying.tar``) until it has
    finished, then back under their names: a bundle whose self-verification did not finish
    (Ctrl-C, SIGTERM, an error) is never left under its final name. Where it does not finish,
    both files are removed and the exception propagates (a Ctrl-C or SIGTERM as
    :class:`~kbrepro.errors.Interrupted` saying so)."""
    path = Path(path)
    files = [path, path.with_name(path.name + DIGEST_SUFFIX)]
    hidden = [p.with_name(f".{p.name}.verifying{path.suffix}") for p in files]
    try:
        for a, b in zip(files, hidden):
            if a.exists():
                os.replace(a, b)
        verdict, line = predict_verification(hidden[0], public_key)
    except BaseException as exc:
        for p in hidden:
            remove_bundle(p)
        remove_bundle(path)
        if isinstance(exc, KeyboardInterrupt):
            raise Interrupted(f"the bundle was removed before its self-verification finished ({path.name} is not "
                              "there); the results are kept: pack them again with 'make_bundle.py pack DIR'") from None
        raise
    for a, b in zip(files, hidden):
        if b.exists():
            os.replace(b, a)
    return verdict, line


def remove_bundle(path: Path) -> None:
    """Remove an archive this packer wrote and its digest file beside it."""
    for p in (Path(path), Path(path).with_name(Path(path).name + DIGEST_SUFFIX)):
        try:
            p.unlink()
        except OSError:
            pass


def publish(path: Path, *, signed: bool, allow_failing: bool, public_key=None, own_run: bool = False,
            echo: Callable[[str], None] = print) -> str:
    """Verify the bundle just written at ``path`` (:func:`verify_unpublished`), ``echo`` its
    ``verify:`` line, and keep it, or remove it with its digest file and raise
    InvalidResultsError: a bundle that fails is kept only with ``allow_failing``, a signed one
    never (a signature never goes on a failing bundle). ``own_run``: the results are the
    command's own run, so a failure is a defect of ours. Returns the verdict."""
    with status(f"verifying {Path(path).name}, just written"):
        verdict, line = verify_unpublished(path, public_key)
    echo(f"verify:  {line}")
    if verdict != "FAIL" or (allow_failing and not signed):
        return verdict
    remove_bundle(path)
    if signed:
        raise InvalidResultsError("the signed bundle would fail verification (the verify: line above says where); "
                                  "it was removed, the results are kept: a signature never goes on a failing bundle",
                                  "report this as a bug: the packer's own bundle should verify" if own_run else
                                  "fix the results, or pack them unsigned with --allow-failing")
    raise InvalidResultsError("the bundle would fail verification (the verify: line above says where); it was "
                              "removed, the results are kept",
                              "report this as a bug, or pass --allow-failing to keep a bundle that fails" if own_run
                              else "fix the results, or pass --allow-failing to keep a bundle that fails")


__all__ = ["publish", "predict_verification", "verify_unpublished", "remove_bundle"]
