"""Tier 6 of a study bundle: the study run again on this GPU with the verifier's own code (its
own study folder; the bundle's only with ``--trust-bundle-code``), then compared
(:mod:`.compare`).
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Callable

from kbrepro.bundle import claims as claims_mod
from kbrepro.bundle.documents import OUR_DOCUMENTS, study_documents
from kbrepro.harness import jsonio
from kbrepro.harness import run as harness_run
from kbrepro.harness.study import load_study
from kbrepro.process import deferred_sigint
from kbrepro.errors import (EnvironmentUnavailableError, ReproError)
from kbrepro.bundle.verify.compare import claim_changes, compare_replay, environment_diff, ptx_toolchain
from kbrepro.bundle.verify.core import Bundle, Tier, safe_text


def tier_replay(b: Bundle, t: Tier, *, profile: str | None, trust: bool, kernelbench: str | None,
                 ratio_tolerance: float, keep: Path | None, progress: Callable | None) -> None:
    """The replay tier. For a study this verifier ships, the model builds of the replay start
    in worker processes before torch is imported (``harness.run.early_prefetch``; the replay
    closes them, and so does this function where the replay never starts)."""
    box = [None]
    if b.trusted is not None and b.kernel_source_known:
        recorded = ((b.documents.get("run") or {}).get("study") or {}).get("profile") or "full"
        try:
            box[0] = harness_run.early_prefetch(load_study(b.trusted.folder, profile or recorded), kernelbench)
        except ReproError:  # the replay below reports it
            box[0] = None
    try:
        _replay(b, t, profile=profile, trust=trust, kernelbench=kernelbench, ratio_tolerance=ratio_tolerance,
                keep=keep, progress=progress, prefetcher=box)
    finally:
        if box[0] is not None:
            box[0].close()


def _replay(b: Bundle, t: Tier, *, profile: str | None, trust: bool, kernelbench: str | None,
            ratio_tolerance: float, keep: Path | None, progress: Callable | None, prefetcher: list) -> None:
    with deferred_sigint():  # torch imported only for a replay (a Ctrl-C inside its C++ import would abort)
        import torch

    if not torch.cuda.is_available():
        raise EnvironmentUnavailableError("replay needs a CUDA GPU and none is visible",
                                          "run verify_bundle.py --level static on this machine, or replay on a GPU")
    try:
        import cupy  # noqa: F401  (only a replay needs CuPy, an optional dependency)
    except Exception as exc:
        raise EnvironmentUnavailableError(f"replay needs CuPy: {exc}", "pip install 'kbrepro[cuda12]' or '[cuda13]'") from exc
    run = b.documents.get("run") or {}
    recorded_profile = run.get("study", {}).get("profile") or "full"
    prof = profile or recorded_profile
    # the study replayed is the verifier's own folder (definition, kernels, binding); a bundle's
    # own study folder runs only with --trust-bundle-code
    work = None
    if b.trusted is not None and b.kernel_source_known:
        study_folder = b.trusted.folder
    elif trust:
        work = Path(tempfile.mkdtemp(prefix="kbrepro-study-"))
        for rel, data in b.study_files.items():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / rel).write_bytes(data)
        study_folder = work
        t.notes.append("replaying the bundle's own study folder, its binding and kernels (--trust-bundle-code)")
    else:
        t.fail(None, "replay refused: " + ("the bundle's study is not one this verifier ships" if b.trusted is None
               else "the compiled kernel source is not this verifier's own") + "; pass --trust-bundle-code to run "
               "the bundle's study folder (its Python binding and kernels execute on this machine)")
        return
    try:
        study = load_study(study_folder, prof)
        binding = study.binding()
    except ReproError as exc:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
        t.fail(None, f"replay of study {safe_text(b.meta.get('study', {}).get('name'))!r} at profile "
               f"{safe_text(prof)!r} refused: {exc.message}")
        return
    out = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="kbrepro-replay-"))
    try:
        pf, prefetcher[0] = (prefetcher[0] if study.folder == getattr(b.trusted, "folder", None) else None), None
        harness_run.run_study(study, out, kernelbench=kernelbench, progress=progress, binding=binding, prefetcher=pf)
        names = (*OUR_DOCUMENTS, *study_documents(binding))
        replayed = {n: jsonio.read_json(out / f"{n}.json") for n in names if (out / f"{n}.json").is_file()}
        toolchains = {}
        for v in (replayed.get("compile") or {}).get("variants", []):
            rec = next((r for r in (b.documents.get("compile") or {}).get("variants", []) if r.get("name") == v["name"]), {})
            rp = (rec.get("ptx") or {}).get("file")
            pp = (v.get("ptx") or {}).get("file")
            toolchains[v["name"]] = (ptx_toolchain(b.files.get(f"data/{rp}") if rp else None),
                                     ptx_toolchain((out / pp).read_bytes() if pp and (out / pp).is_file() else None))
    finally:
        if not keep:
            shutil.rmtree(out, ignore_errors=True)
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
    same_profile = prof == recorded_profile
    judge = claims_mod.parse_spec(b.trusted.claims_raw) if b.trusted is not None else \
        claims_mod.parse_spec(b.files[f"data/{b.meta['claims']['file']}"])
    env_rows = environment_diff(b.documents.get("environment", {}), replayed["environment"])
    problems, details = compare_replay(b.documents, replayed, same_profile=same_profile,
                                       ratio_tolerance=ratio_tolerance, boot=judge["bootstrap"], toolchains=toolchains,
                                       check_documents=("correctness", *study_documents(binding)))
    replay_claims = claims_mod.evaluate(judge, replayed, source="replayed on this GPU")
    recorded_claims = {c["id"]: c["verdict"] for c in (b.documents.get("claims") or {}).get("claims", [])}
    contradicting, reported = claim_changes(recorded_claims, {c["id"]: c["verdict"] for c in replay_claims["claims"]},
                                            same_profile)
    problems += contradicting
    if reported:
        t.notes.append("claims whose interval fell on the other side of its threshold, with the timing ratios "
                       "compared above (a change to or from inconclusive is reported, not failed): " + "; ".join(reported))
    for p in problems:
        t.add(p)
    details["claims"] = [{"id": c["id"], "recorded": recorded_claims.get(c["id"]), "replayed": c["verdict"],
                          "sentence": c["sentence"]} for c in replay_claims["claims"]]
    details["environment"] = env_rows
    details["profile"] = prof
    details["recorded_profile"] = recorded_profile
    t.details.update(details)
    if not same_profile:
        t.notes.append(f"replayed at profile {prof!r}, recorded at {recorded_profile!r}: recorded cases and blocks the "
                       "replay does not run are listed, not failed; claims fail only on a holds/fails flip")
    if any(not r["same"] and r["bits"] for r in env_rows):
        t.notes.append("the bundle's environment record differs from this machine in fields that can change bits; "
                       "bit counts are required to match only where the replay compiled a byte-identical cubin")
