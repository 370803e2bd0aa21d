"""The verification checklist: which check runs in which tier, for each bundle kind, in one place,
and :func:`verify_archive`, which runs it.

Tiers 1 and 2 (:mod:`.manifest`) are the same for every kind: nothing of a bundle is read as
a document before its archive and manifests passed. Tiers 3 to 5 are lists of checks
(:class:`Check`), each a function ``check(bundle, tier)`` that adds problems to the tier; tier
6 is the kind's replay. A new check is one function in its own module and one line here.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kbrepro.bundle import kinds
from kbrepro.bundle.extract import extract_checked
from kbrepro.bundle.verify import (candidate, claims, described, documents, imported, inert, layout, measured,
                                   provenance, replay)
from kbrepro.bundle.verify.core import LEVELS, TIER_NAMES, Bundle, Report, Tier, bag_info, guarded, safe_text
from kbrepro.bundle.verify.manifest import tier_archive, tier_attestation, tier_manifest
from kbrepro.errors import EnvironmentUnavailableError, UnreadableInputError, UsageError
from kbrepro.process import deferred_sigint
from kbrepro.model.problems import UNKNOWN_VERSION, verdict_exit


@dataclass(frozen=True)
class Options:
    """What the command line asks of a verification beyond the level (:func:`verify_archive`)."""

    level: str = "auto"
    profile: str | None = None
    trust: bool = False
    kernelbench: str | None = None
    ratio_tolerance: float = 0.05
    keep_replay: Path | None = None
    progress: Callable | None = None
    check_renderings: bool = False


@dataclass(frozen=True)
class Check:
    """One check of a tier: ``run(bundle, tier)`` adds the problems it finds to the tier.
    ``gate``: the tier's later checks run only when the tier has no problem after this one.
    ``option``: the :class:`Options` field that must be true for it to run (and it runs only
    when no tier failed before it: it costs seconds)."""

    title: str
    run: Callable[[Bundle, Tier], None]
    gate: bool = False
    option: str | None = None


@dataclass(frozen=True)
class Kind:
    """A bundle kind's tiers 3 to 5 (``tiers[n]`` the checks of tier ``n``), its replay, and
    whether a failed tier 4 still lets tier 5 run (a study's claims are judged from the
    documents tier 3 passed; a candidate's claims need its provenance)."""

    name: str
    tiers: dict[int, tuple[Check, ...]]
    replay: Callable[[Bundle, Tier, Options], None]
    claims_after_failed_provenance: bool


def _study_replay(b: Bundle, t: Tier, o: Options) -> None:
    replay.tier_replay(b, t, profile=o.profile, trust=o.trust, kernelbench=o.kernelbench,
                       ratio_tolerance=o.ratio_tolerance, keep=o.keep_replay, progress=o.progress)


def _candidate_replay(b: Bundle, t: Tier, o: Options) -> None:
    candidate.tier_replay(b, t, trust=o.trust, kernelbench=o.kernelbench, ratio_tolerance=o.ratio_tolerance,
                          progress=o.progress)


STUDY = Kind("study", {
    3: (Check("documents: strict JSON, the verifier's schemas and table", documents.parse_documents, gate=True),
        Check("the bag holds exactly the packer's files", layout.layout_check),
        Check("strings REPORT.md shows are inert", inert.inert_strings),
        Check("imported results derived again; notes", imported.source_check),
        Check("documents consistent", documents.consistency_check),
        Check("documents agree with each other", documents.agreement_check),
        Check("documents agree with the study", documents.study_agreement_check),
        Check("evidence a measured run always records, present", measured.recorded_evidence)),
    4: (Check("KernelBench files, kernel sources, cubins, FTZ evidence", provenance.tier_provenance),
        Check("FTZ listings and CPU references derived again", measured.listings_again)),
    5: (Check("claims evaluated again; claims.json and REPORT.md", claims.claims_check),
        Check("the RO-Crate file describes the documents", described.crate_check),
        Check("renderings drawn again, byte for byte", layout.rendered_again, option="check_renderings")),
}, _study_replay, claims_after_failed_provenance=True)

CANDIDATES = Kind("candidates", {
    3: (Check("bundle.json: the candidate format, agreeing with bag-info.txt", candidate.bundle_meta, gate=True),
        Check("documents: strict JSON, schemas, typed records", candidate.documents, gate=True),
        Check("each candidate's record by its own rules", candidate.record_rules),
        Check("bundle.json agrees with the results and the pin", candidate.meta_agreement),
        Check("candidate and task files are the ones that ran, at the pin", candidate.candidate_inputs),
        Check("every named check's verdict derived again", candidate.derived_verdicts),
        Check("provenance files where the packer keeps them", candidate.provenance_files),
        Check("the bag holds exactly the packer's files", candidate.bag_layout),
        Check("the cases of a sharded run", candidate.sharded_cases),
        Check("what the run could not decide, said", candidate.where_it_ran),
        Check("every check record's arithmetic", candidate.check_arithmetic),
        Check("strings REPORT.md and summary.txt show are inert", inert.candidate_strings)),
    4: (Check("provenance files, FTZ evidence from the SASS", candidate.tier_provenance),),
    5: (Check("claims evaluated again; claims.json and REPORT.md", candidate.claims_check),
        Check("the RO-Crate file describes the documents", described.crate_check)),
}, _candidate_replay, claims_after_failed_provenance=False)


def _run_checks(checks: tuple[Check, ...], b: Bundle, t: Tier, o: Options, failed_before: bool) -> None:
    """The checks of one tier, in order. A bound a check hits, or data of a shape no schema rule
    foresaw, is a named problem (:func:`.core.guarded`) and ends the tier."""
    for c in checks:
        if c.option is not None and (not getattr(o, c.option) or failed_before or t.status == "FAIL"):
            continue
        if not guarded(c.run, b, t) or (c.gate and t.status == "FAIL"):
            return


def no_nvidia_driver() -> bool:
    """True where this machine plainly has no NVIDIA driver, so no CUDA GPU, decided without
    importing torch (about a second of a static verification's two): Linux without
    ``/proc/driver/nvidia``, ``/dev/nvidiactl`` and WSL's ``/dev/dxg``, or macOS. Elsewhere, and
    where torch is already imported (its answer is then the one asked), False."""
    if "torch" in sys.modules:
        return False
    if sys.platform == "darwin":
        return True
    return sys.platform.startswith("linux") and not any(
        os.path.exists(p) for p in ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/dxg"))


def _replay_runs(t: Tier, level: str, failed: bool) -> bool:
    """Whether tier 6 runs: a GPU is present (at ``auto`` its absence skips) and no earlier
    tier failed (an untrusted bundle is never replayed); otherwise ``t`` is marked SKIP."""
    if level == "auto" and no_nvidia_driver():
        t.status = "SKIP"
        t.notes.append("no CUDA GPU here; replay skipped (--level replay on a GPU machine runs it)")
        return False
    with deferred_sigint():  # torch imported only here: seconds, and only tier 6 needs it
        import torch  # (a Ctrl-C inside torch's C++ import would abort)

    if not torch.cuda.is_available() and level == "auto":
        t.status = "SKIP"
        t.notes.append("no CUDA GPU here; replay skipped (--level replay on a GPU machine runs it)")
        return False
    if failed:
        t.status = "SKIP"
        t.notes.append("earlier tiers failed; an untrusted bundle is not replayed")
        return False
    return True


def _kind_tiers(kind: Kind, b: Bundle, tier: Callable[[int], Tier], last: int, o: Options, failed: bool) -> None:
    """Tiers 3 to ``last`` of ``kind`` on ``b``; a document version this verifier does not know
    stops after tier 3. ``failed``: tier 2 failed (a signature), which leaves the documents
    checked but never replays."""
    stopped = False
    for n in (3, 4, 5):
        t = tier(n)
        if stopped:
            t.status = "SKIP"
            t.notes.append("an earlier tier failed")
            continue
        t0 = time.perf_counter()
        _run_checks(kind.tiers[n], b, t, o, failed)
        t.seconds = time.perf_counter() - t0
        if n == 3 and any(p.code == UNKNOWN_VERSION for p in t.problems):
            return  # a document this verifier cannot read: the later tiers would judge it by the wrong rules
        if t.status == "FAIL":
            failed = True
            stopped = n == 3 or not (n == 4 and kind.claims_after_failed_provenance)
    if last >= 6:
        t = tier(6)
        if _replay_runs(t, o.level, failed):
            t0 = time.perf_counter()
            kind.replay(b, t, o)
            t.seconds = time.perf_counter() - t0
            failed |= t.status == "FAIL"


def verify_archive(path: Path, *, level: str = "auto", profile: str | None = None, trust: bool = False,
                   kernelbench: str | None = None, ratio_tolerance: float = 0.05, expect_digest: str | None = None,
                   keep_extracted: Path | None = None, keep_replay: Path | None = None,
                   progress: Callable | None = None, check_renderings: bool = False, public_key=None,
                   on_tier: Callable[[int, str], None] | None = None) -> Report:
    """Run the tiers up to ``level`` (fast, static, replay, auto) on ``path``. With
    ``check_renderings``, the renderings' PNGs are drawn again from their verified data and
    compared byte for byte (:func:`.layout.rendered_again`; seconds, with matplotlib).
    ``public_key`` (:class:`bundle.attest.PublicKey`, ``--public-key``): the key a signed
    bundle must be signed with (a bundle that is not signed then fails); without it a
    signature is read and its statements checked, but not the signature itself.
    ``on_tier(number, name)`` is called as each tier starts (a progress display).

    Returns a :class:`.core.Report` whose ``exit_code`` follows DESIGN.md section 6. Raises
    UsageError for a bad level, EnvironmentUnavailableError when ``level == "replay"`` and
    no GPU is present, UnreadableInputError when ``path`` is not a file.
    """
    if level not in LEVELS:
        raise UsageError(f"unknown level {level!r}", f"use one of {', '.join(LEVELS)}")
    o = Options(level=level, profile=profile, trust=trust, kernelbench=kernelbench, ratio_tolerance=ratio_tolerance,
                keep_replay=keep_replay, progress=progress, check_renderings=check_renderings)
    rep = Report(archive=Path(path).name, level=level)
    last = LEVELS[level]

    def tier(n: int) -> Tier:
        if on_tier is not None:
            on_tier(n, TIER_NAMES[n - 1])
        t = Tier(n, TIER_NAMES[n - 1])
        rep.tiers.append(t)
        return t

    partial: list[str] = []

    def finish() -> Report:
        """The verdict from the tiers (FAIL where one failed; PARTIAL where something rests on
        the author's side), the exit code from the verdict and the problems' codes."""
        rep.partial = list(dict.fromkeys(partial))
        rep.verdict = "FAIL" if any(t.status == "FAIL" for t in rep.tiers) else "PARTIAL" if rep.partial else "PASS"
        rep.exit_code = verdict_exit(rep.verdict, (p.code for t in rep.tiers for p in t.problems))
        return rep

    if level == "replay":
        with deferred_sigint():  # torch imported only for a replay (a Ctrl-C inside its import would abort)
            import torch

        if not torch.cuda.is_available():
            raise EnvironmentUnavailableError("replay needs a CUDA GPU and none is visible",
                                              "run verify_bundle.py --level static on this machine, or replay on a GPU")
    if not Path(path).is_file():
        raise UnreadableInputError(f"no archive at {path}", "check the path of the bundle (.tar or .tar.gz)")
    t = tier(1)
    t0 = time.perf_counter()
    try:
        contents = tier_archive(Path(path), t)
    except UnreadableInputError as exc:
        t.fail(Path(path).name, exc.message + (f" ({exc.hint})" if exc.hint else ""))
        t.seconds = time.perf_counter() - t0
        return finish()
    t.seconds = time.perf_counter() - t0
    if t.status == "FAIL":
        return finish()
    rep.bundle_name = contents.top
    rep.files = contents.files
    t = tier(2)
    t0 = time.perf_counter()
    rep.digest = tier_manifest(contents, t)
    vouched = t.status == "PASS"  # the payload is the one the manifests and the digest name
    rep.payload_matches_manifests = vouched
    rep.signature = tier_attestation(contents, t, public_key) if rep.digest is not None else None
    unexpected = bool(expect_digest) and rep.digest != expect_digest.lower()
    if unexpected:
        t.fail("tagmanifest-sha256.txt", "bundle digest differs from the one you expected"
               + (f": this archive is bundle {safe_text(contents.top or '', 80)} (its payload matches its own "
                  "manifests), not the bundle whose digest you gave" if vouched else ""), expected=expect_digest,
               found=rep.digest)
        vouched = False
    elif expect_digest:
        t.notes.append("the bundle digest is the one you expected (--expect-digest)")
    t.seconds = time.perf_counter() - t0
    failed = t.status == "FAIL"
    if last <= 2:
        if not failed:
            t.notes.append("--level fast checks the archive and its manifests only: the documents, the claims, "
                           "REPORT.md, summary.txt and renderings/ are not checked (use --level static)")
        return finish()
    if not vouched:
        # the payload is not what its manifests (and so the digest) name: later tiers would judge
        # bytes nobody vouched for
        why = ("not the bundle you expected (--expect-digest): its documents are not judged" if unexpected
               and rep.payload_matches_manifests else "the manifest tier failed: the payload is not the one the "
               "digest names")
        for n in range(3, last + 1):
            sk = tier(n)
            sk.status = "SKIP"
            sk.notes.append(why)
        return finish()
    tmp = Path(keep_extracted) if keep_extracted else Path(tempfile.mkdtemp(prefix="kbrepro-verify-"))
    try:
        root = extract_checked(Path(path), tmp, contents)
        b = Bundle(name=contents.top or "", files=contents.files, root=root, digest=rep.digest or "", partial=partial,
                   attestation=rep.signature, renderings_drawn_again=o.check_renderings)
        is_candidates = bag_info(contents.files.get("bag-info.txt", b"")).get("Bundle-Format") == kinds.FORMAT
        _kind_tiers(CANDIDATES if is_candidates else STUDY, b, tier, last, o, failed)
        return finish()
    finally:
        if not keep_extracted:
            shutil.rmtree(tmp, ignore_errors=True)


__all__ = ["Options", "Check", "Kind", "STUDY", "CANDIDATES", "verify_archive"]
