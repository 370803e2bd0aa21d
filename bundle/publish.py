"""Publishing a bundle the packer just wrote: it is verified at ``--level static`` with the
verifier's own code while it and its digest file lie under hidden names, and they take their
final names only after the verification finished (:func:`verify_unpublished`, then
:func:`put_in_place`); a bundle whose self-verification did not finish, or that fails it, is
never left under its final name, and an earlier bundle of that name stays as it was until the
new one replaces it.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from kbrepro.bundle.assemble import published, remove_unpublished, unpublished_paths
from kbrepro.bundle.pack import DIGEST_SUFFIX
from kbrepro.bundle.verify.checklist import verify_archive
from kbrepro.cli.edge import status
from kbrepro.errors import Interrupted, InvalidResultsError
from kbrepro.process import deferred_sigint


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


def verify_unpublished(path: Path, public_key=None, results_dir: Path | None = None) -> tuple[str, str]:
    """:func:`predict_verification` of the bundle this packer just wrote for ``path``, under its
    hidden names (:func:`bundle.assemble.unpublished_paths`: written there, or moved there
    from ``path`` first); it stays there for :func:`publish` to put in place or remove. A
    Ctrl-C, SIGTERM or error here removes the hidden files and propagates (a Ctrl-C as
    :class:`~kbrepro.errors.Interrupted` saying what is at ``path``: an earlier bundle of
    that name is left as it was, and ``results_dir`` is named to pack again)."""
    path = Path(path)
    files = [path, path.with_name(path.name + DIGEST_SUFFIX)]
    hidden = list(unpublished_paths(path))
    try:
        if not hidden[0].exists():  # written under its final name (a library caller's bundle)
            for a, b in zip(files, hidden):
                if a.exists():
                    os.replace(a, b)
        return predict_verification(hidden[0], public_key)
    except BaseException as exc:
        remove_unpublished(path)
        if isinstance(exc, KeyboardInterrupt):
            there = (f"the earlier {path.name} is left as it was" if path.exists() else f"{path.name} is not there")
            raise Interrupted(f"the new bundle was removed before its self-verification finished ({there}); the "
                              f"results are kept: pack them again with 'make_bundle.py pack "
                              f"{results_dir if results_dir is not None else 'RESULTS'} --out {path}'") from None
        raise


def put_in_place(path: Path) -> bool:
    """Move the verified bundle and its digest file from their hidden names to ``path`` and
    ``<path>.sha256-digest``, together (Ctrl-C and SIGTERM held for the two renames); from then
    on the command's result is decided and a Ctrl-C or SIGTERM no longer changes it
    (:meth:`kbrepro.process.deferred_sigint.decided`: the lines that say what was written are
    printed whole).
    Returns whether an earlier bundle was there (it is replaced)."""
    path = Path(path)
    files = [path, path.with_name(path.name + DIGEST_SUFFIX)]
    replaced = path.exists()
    with deferred_sigint() as held:
        for b, a in zip(unpublished_paths(path), files):
            os.replace(b, a)
        published(path)
        held.decided()  # (a signal held during the renames is dropped too)
    return replaced


def publish(path: Path, *, signed: bool, allow_failing: bool, public_key=None, own_run: bool = False,
            echo: Callable[[str], None] = print, results_dir: Path | None = None) -> str:
    """Verify the bundle just written for ``path`` (:func:`verify_unpublished`), ``echo`` its
    ``verify:`` line, and put it in place (replacing an earlier bundle of that name, and
    saying so), or remove it with its digest file and raise InvalidResultsError, leaving an
    earlier bundle at ``path`` as it was: a bundle that fails is kept only with
    ``allow_failing``, a signed one never (a signature never goes on a failing bundle). ``own_run``: the results are the
    command's own run, so a failure is a defect of ours; ``results_dir``: the results packed
    (named where they must be packed again). Returns the verdict."""
    with status(f"verifying {Path(path).name}, just written"):
        verdict, line = verify_unpublished(path, public_key, results_dir)
    echo(f"verify:  {line}")
    if verdict != "FAIL" or (allow_failing and not signed):
        if put_in_place(path):
            echo(f"note:    replaced the earlier {Path(path).name} and its digest file")
        return verdict
    remove_unpublished(path)
    if signed:
        raise InvalidResultsError("the signed bundle would fail verification (the verify: line above says where); "
                                  "it was removed, the results are kept: a signature never goes on a failing bundle",
                                  "report this as a bug: the packer's own bundle should verify" if own_run else
                                  "fix the results, or pack them unsigned with --allow-failing")
    raise InvalidResultsError("the bundle would fail verification (the verify: line above says where); it was "
                              "removed, the results are kept",
                              "report this as a bug, or pass --allow-failing to keep a bundle that fails" if own_run
                              else "fix the results, or pass --allow-failing to keep a bundle that fails")


__all__ = ["publish", "predict_verification", "verify_unpublished", "put_in_place"]
