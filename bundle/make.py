"""make: results -> validated -> claims -> report -> bag -> deterministic archive.

Two entry points: :func:`make_from_results` packs results that already exist (our own
documents, or the post's original files through :mod:`bundle.importer`), and
:func:`run_and_make` runs the study on this GPU first (``harness.run.run_study``) into a
results folder that survives a failed pack.
"""
from __future__ import annotations

import hashlib
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from kbrepro.bundle import assemble, attest, claims as claims_mod, pack, plots as plots_mod, report, scrub, validate
from kbrepro.bundle.assemble import Contents, json_roundtrip
from kbrepro.bundle.kinds import STUDY
from kbrepro.harness import jsonio, plugin
from kbrepro.harness.kernelbench import KernelBenchCheckout, load_lock, resolve_checkout
from kbrepro.errors import (Interrupted, InvalidResultsError, KernelBenchPinError, OutputPathError, UnreadableInputError,
                            UsageError)

from kbrepro.bundle.documents import DOC_PATHS, OUR_DOCUMENTS, REQUIRED  # noqa: E402,F401
from kbrepro.bundle.workers import PlotWorker, start_workers, stop_workers
from kbrepro.bundle.documents import study_documents
from kbrepro.harness.plugin import files_digest
from kbrepro.harness.study import default_study_path, find_study, load_study
from kbrepro.paths import (check_input_dir, check_input_file, check_input_path, check_output_file, prepare_output_dir,
                           remove_created)
from kbrepro.harness import run as harness_run


@dataclass(frozen=True)
class ResultSet:
    """Results ready to pack. ``files``: extra payload files by path under ``data/``."""

    source: str  # "measured" or "imported"
    documents: Mapping[str, dict]
    files: Mapping[str, bytes]
    log: bytes | None
    notes: tuple[str, ...] = ()
    study: object = None  # the StudyConfig (full profile) the results belong to
    binding: object = None  # its StudyBinding


@dataclass(frozen=True)
class MadeBundle:
    path: Path
    name: str
    digest: str
    size_bytes: int
    claims_summary: Mapping[str, int]
    pack_seconds: float
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: the key id of the key that signed the bundle (None: not signed)
    signed_by: str | None = None
    #: figures REPORT.md shows whose PNG was not drawn (no matplotlib here): their data are packed
    undrawn_figures: int = 0
    #: the results folder packed
    results: Path | None = None


def _why(exc: OSError) -> str:
    return (exc.strerror or type(exc).__name__).lower()


def _regular_file(p: Path, what: str) -> bytes:
    """Bytes of ``p``, which must be a readable regular file. Raises UnreadableInputError (3)."""
    check_input_file(p, what, "make it a readable file, or remove it from the results folder")
    try:
        return p.read_bytes()
    except OSError as exc:
        raise UnreadableInputError(f"cannot read {what} {p}: {_why(exc)}",
                                   "make it a readable file, or remove it from the results folder") from exc


def _exists(p: Path) -> bool:
    try:
        os.lstat(p)
        return True
    except OSError:
        return False


def resolve_study(run_doc: Mapping | None, study_path: str | None):
    """``(StudyConfig at the run's profile, its binding)`` for results: the study folder
    ``study_path`` names, else the shipped study the run names (registry), else the default
    (published) study. Raises UsageError if the run names a study this product does not ship
    and no ``--study`` is given."""
    st = (run_doc or {}).get("study") or {}
    if study_path is not None:
        path = Path(study_path)
    elif st.get("name"):
        path = find_study(st["name"])
        if path is None:
            raise UsageError(f"the results are of study {st['name']!r}, which this product does not ship",
                             "pass --study with that study's folder")
    else:
        path = default_study_path()
    profile = st.get("profile") or "full"
    try:
        study = load_study(path, profile)
    except UsageError:
        study = load_study(path, "full")
    return study, study.binding()


def load_results(results_dir: Path, study_path: str | None = None) -> ResultSet:
    """Read a results folder: ours (``run.json`` naming ``kbrepro/run``) or an author's
    original files (the study's importer). Raises UnreadableInputError if neither is there,
    or if any file that would go into the bundle cannot be read (a folder or FIFO named like
    a result file, a file without read permission): nothing is dropped silently."""
    d = check_input_dir(Path(results_dir), "results folder", "pass the folder a run wrote, e.g. results/<name>")
    run_path = d / "run.json"
    if _exists(run_path):
        run_doc = jsonio.loads_strict(_regular_file(run_path, "result file"), where="run.json")
        study, binding = resolve_study(run_doc if isinstance(run_doc, dict) else None, study_path)
        docs = {}
        for name in (*OUR_DOCUMENTS, *study_documents(binding)):
            p = d / f"{name}.json"
            if _exists(p):
                docs[name] = jsonio.loads_strict(_regular_file(p, "result file"), where=p.name)
        missing = [n for n in REQUIRED if n not in docs]
        if missing:
            raise InvalidResultsError(f"{d} lacks {', '.join(m + '.json' for m in missing)}",
                                      "the run did not finish; rerun it, or pack a complete results folder")
        files = {}
        bdir = d / "binaries"
        if _exists(bdir):
            check_input_dir(bdir, "results folder", "make binaries/ a readable folder")
            try:
                entries = sorted(bdir.iterdir())
            except OSError as exc:
                raise UnreadableInputError(f"cannot list {bdir}: {_why(exc)}",
                                           "make binaries/ a readable folder") from exc
            for f in entries:
                if not f.name.startswith("."):
                    files[f"binaries/{f.name}"] = _regular_file(f, "binary")
        log_path = d / "logs" / "run.log"
        log = _regular_file(log_path, "run log") if _exists(log_path) else None
        return ResultSet(source="measured", documents=docs, files=files, log=log, study=study, binding=binding)
    if _exists(d / "bundle.json") and _exists(d / "results" / "run.json"):  # not a run's folder: a bundle's data/
        raise UnreadableInputError(f"{d} is the data/ folder of an unpacked study bundle, not the results folder a "
                                   "run wrote", "check the bundle with 'python verify_bundle.py ARCHIVE'; to pack the "
                                   "run again, pack the folder its run wrote (results/<name>, with run.json in it)")
    study, binding = resolve_study(None, study_path)
    imp = binding.import_originals(d)
    if imp is None:
        raise UnreadableInputError(f"{d} holds no run.json, and study {study.name} has no importer of other files",
                                   "pass the results folder a run wrote")
    missing = [n for n in REQUIRED if n not in imp.documents]
    if missing:
        raise InvalidResultsError(
            f"{d} holds too few of the post's files to make a bundle: nothing yields {', '.join(missing)}",
            "put fusion_results.json (and the post's other result files) in the folder; the audit command "
            "'python -m kbrepro.bundle.audit' reads single files")
    files = {f"results/originals/{name}": data for name, data in imp.originals.items()}
    return ResultSet(source="imported", documents=imp.documents, files=files, log=imp.log, notes=tuple(imp.notes),
                     study=study, binding=binding)


def check_results(rs: ResultSet, schema_problems: list[str] | None = None) -> None:
    """Schema and consistency of every document. Raises InvalidResultsError listing every
    problem with its file and JSON path. ``schema_problems``: already computed elsewhere."""
    extra = validate.study_schemas(rs.study, rs.binding) if rs.study is not None else {}
    problems = list(schema_problems) if schema_problems is not None else \
        [p for name, doc in rs.documents.items() for p in validate.schema_problems(name, doc, extra)]
    problems += [str(p) for p in validate.consistency_problems(rs.documents, rs.files)]
    if problems:
        shown = "\n".join(f"  {p}" for p in problems[:60])
        more = f"\n  ... and {len(problems) - 60} more" if len(problems) > 60 else ""
        raise InvalidResultsError(f"the results are not valid ({len(problems)} problems):\n{shown}{more}",
                                  "fix or regenerate the named documents; nothing was packed")


def _kernelbench_inputs(rs: ResultSet, kernelbench: str | None) -> tuple[dict[str, bytes], dict]:
    lock_path = rs.study.folder / rs.study.lock_file
    lock_raw = rs.study.file(rs.study.lock_file)
    lock = load_lock(lock_path)
    run_kb = rs.documents["run"].get("kernelbench") or {}
    out = {"inputs/kernelbench/kernelbench.lock.json": lock_raw}
    info = {"commit": lock.commit, "lock_file": "inputs/kernelbench/kernelbench.lock.json", "files_included": False,
            "reason": None}
    if run_kb.get("commit") and run_kb["commit"] != lock.commit:
        raise InvalidResultsError(f"the results were made with KernelBench {run_kb['commit']}, this product pins {lock.commit}",
                                  "pack them with the product version whose lock matches")
    wanted = run_kb.get("files") or sorted(lock.files)
    checkout = KernelBenchCheckout(resolve_checkout(kernelbench), lock)
    try:
        checkout.verify(wanted)
    except KernelBenchPinError as exc:
        if rs.source == "measured":
            # a measured bundle without the task files it ran would fail its own verification
            raise KernelBenchPinError(
                f"cannot pack the KernelBench task files the run used: {exc.message}",
                f"{exc.hint}; the bundle must carry them (pinned commit {lock.commit})") from exc
        info["reason"] = ("KernelBench task files not included (no verified checkout at "
                          f"{checkout.root.name}/): the imported results are packed with the lock only")
        return out, info
    for rel in wanted:
        out[f"inputs/kernelbench/{rel}"] = checkout.read_verified(rel)
    info["files_included"] = True
    info["files"] = wanted
    return out, info


def _sources_check(rs: ResultSet) -> list[str]:
    """The compiled sources the compile records name must be the study's files, byte for
    byte (measured results: else InvalidResultsError); for imported results a differing
    source is a note."""
    notes = []
    for v in (rs.documents["compile"].get("variants") or []):
        src = v.get("source") or rs.documents["compile"].get("source") or {}
        name, sha = src.get("file"), src.get("sha256")
        data = rs.study.files.get(name) if name else None
        if data is not None and hashlib.sha256(data).hexdigest() == sha:
            continue
        if rs.source == "imported" and sha in {hashlib.sha256(d).hexdigest() for d in rs.study.files.values()}:
            continue
        if rs.source == "measured":
            raise InvalidResultsError(f"{name} of study {rs.study.name} differs from the source the run compiled "
                                      f"(sha256 {sha})", "pack on the product commit that ran the study, or rerun it")
        note = f"the imported results compiled a source with sha256 {sha}, which is none of study {rs.study.name}'s files"
        if note not in notes:
            notes.append(note)
    return notes


def _study_input(rs: ResultSet) -> tuple[dict[str, bytes], dict]:
    """Every file of the study folder, under ``inputs/study/``; the run must have used this
    very ``study.yaml`` (and, for a measured run, these very files)."""
    st = rs.documents["run"].get("study", {})
    raw = rs.study.source_bytes
    if st.get("sha256") and hashlib.sha256(raw).hexdigest() != st["sha256"]:
        raise InvalidResultsError(f"study {rs.study.name}'s study.yaml differs from the study definition the run used",
                                  "pack on the product commit that ran, or pass --study with the folder the run used")
    digest = files_digest(rs.study.files)
    if rs.source == "measured" and st.get("files") is not None and st["files"] != digest:
        bad = plugin.differing(digest, st["files"])
        raise InvalidResultsError(f"study {rs.study.name}'s files differ from the ones the run used ({', '.join(bad[:5])})",
                                  "pack with the study folder the run used")
    files = {f"inputs/study/{rel}": data for rel, data in rs.study.files.items()}
    return files, {"name": st.get("name") or rs.study.name, "profile": st.get("profile") or "full",
                   "file": "inputs/study/study.yaml", "sha256": hashlib.sha256(raw).hexdigest(),
                   "files": digest}


def bundle_name(rs: ResultSet) -> str:
    run = rs.documents["run"]
    study = run.get("study", {}).get("name", "study")
    stamp = re.sub(r"[^0-9T]", "", (run.get("started_utc") or "")[:19]) or "undated"
    label = "imported" if rs.source == "imported" else run.get("study", {}).get("profile", "run")
    return f"{study}-{label}-{stamp}"


def renderings_of(figures: Mapping[str, dict], pngs: Mapping[str, bytes]) -> dict[str, bytes]:
    """The bag's ``renderings/`` tag folder: every PNG and ``renderings.json`` (the versions
    that drew them, each PNG's sha256 and size, the sha256 of the data file it was drawn
    from). Outside every manifest, so outside the digest."""
    data = {n: jsonio.dumps(figures[n]).encode() for n in pngs}
    out = {f"{n}.png": pngs[n] for n in pngs}
    out["renderings.json"] = plots_mod.renderings_doc(pngs, data, plots_mod.renderer_versions())
    return out


def study_contents(rs: ResultSet, *, kernelbench: str | None = None, study_path: str | None = None,
                   claims_path: str | None = None, name: str | None = None, with_plots: bool = True,
                   plotter: "PlotWorker | None" = None, bundle_format: int = pack.FORMAT_VERSION) -> Contents:
    """What a study bundle of ``rs`` holds (:class:`bundle.assemble.Contents`), for
    :func:`bundle.assemble.build_payload` to seal in ``bundle_format`` (5, the default; 3 for
    the layout before RO-Crate and signatures). Raises InvalidResultsError / UnreadableInputError /
    KernelBenchPinError for results, study files or KernelBench files that do not hold."""
    payload: dict[str, bytes] = {}
    notes = list(rs.notes)
    for n, doc in rs.documents.items():
        payload[DOC_PATHS[n]] = jsonio.dumps(doc).encode()
    payload.update(rs.files)
    # the study first: results of another study must be refused as such, before the lock check
    # would blame the (right) lock of the (wrong) study
    study_files, study_info = _study_input(rs)
    notes_src = _sources_check(rs)
    kb_files, kb_info = _kernelbench_inputs(rs, kernelbench)
    payload.update(kb_files)
    if kb_info.get("reason"):
        notes.append(kb_info["reason"])
    notes += notes_src
    payload.update(study_files)
    if claims_path:
        spec, spec_raw = claims_mod.load_spec(claims_path)
        spec_name = Path(claims_path).name
    else:
        spec_raw = rs.study.file(rs.study.claims_file)
        spec_name = Path(rs.study.claims_file).name
        spec = claims_mod.parse_spec(spec_raw, spec_name)
    payload[f"inputs/claims/{spec_name}"] = spec_raw
    # the claims the study defines; any other (from --claims) is marked as the author's own
    own_ids = claims_mod.own_ids(spec_raw, rs.study.file(rs.study.claims_file))
    claims_doc = claims_mod.evaluate(spec, rs.documents, source="recorded")
    claims_doc["spec"] = {"file": f"inputs/claims/{spec_name}", "sha256": claims_mod.spec_sha256(spec_raw)}
    payload["claims.json"] = jsonio.dumps(claims_doc).encode()
    if rs.log is not None:
        payload["logs/run.log"] = scrub.scrub_bytes(rs.log)
    env = rs.documents.get("environment", {}).get("fields", {})
    meta = {
        "schema": "kbrepro/bundle", "schema_version": 2, "format": pack.FORMAT_NAME,
        "format_version": bundle_format, "name": name or bundle_name(rs), "source": rs.source,
        "study": study_info,
        "claims": claims_doc["spec"],
        "kernelbench": kb_info,
        "product": {"version": (env.get("product_version") or {}).get("value"),
                    "commit": (env.get("product_commit") or {}).get("value")},
        "documents": {DOC_PATHS[n]: f"kbrepro/{n}" for n in rs.documents},
        "notes": notes,
    }

    # the figures' data go into the payload (the digest); their PNGs into renderings/ (outside it)
    figures = plots_mod.figure_data(rs.documents, json_roundtrip(claims_doc))
    for fname in sorted(figures):
        payload[f"plots/{fname}.json"] = jsonio.dumps(figures[fname]).encode()
    plots = sorted(figures)
    renderings: dict[str, bytes] = {}
    if with_plots and figures:
        try:
            renderings = renderings_of(figures, (plotter or PlotWorker(rs.documents, True)).results(figures))
        except ImportError:
            renderings = {}
    # rendered from the records as packed (canonical JSON read back), exactly as the verifier renders it
    canon = {n: json_roundtrip(rs.documents[n]) for n in rs.documents}
    sections = rs.binding.report_sections(rs.study.doc, canon) if rs.binding is not None else []
    payload["REPORT.md"] = report.render(meta, canon, json_roundtrip(claims_doc), plots, sections, own_ids).encode()
    return Contents(payload=payload, meta=meta, claims=claims_doc, documents=canon, own_ids=own_ids,
                    label=f"{study_info['name']} ({study_info['profile']})", renderings=renderings)


ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz")
KB_HINT = ("run 'git submodule update --init KernelBench' in the project root, or point --kernelbench at a "
           "checkout of the pinned commit")



def _check_name(name: str | None) -> None:
    """Refuse a ``--name`` the bag format does not allow, before any work. Raises UsageError."""
    if name is not None and not pack.NAME_RE.match(name):
        raise UsageError(f"bundle name {name!r} is not allowed",
                         "use 1 to 80 letters, digits, '.', '_' or '-', starting with a letter or digit")


def check_out_path(out: Path, what: str = "--out") -> Path:
    """Refuse, before any work, an archive path that :func:`make_from_results` could not
    write (with its ``.sha256-digest`` beside it). Raises UsageError / OutputPathError (2)."""
    out = Path(out)
    if not out.name.endswith(ARCHIVE_SUFFIXES):
        if out.is_dir():
            raise OutputPathError(f"{what} {out} is a folder", f"give a file name in it: {what} {out}/NAME.tar")
        raise UsageError(f"archive name {out.name!r} must end in .tar, .tar.gz or .tgz", "pass --out NAME.tar")
    return check_output_file(out, what, companions=(pack.DIGEST_SUFFIX,))


def make_from_results(results_dir: Path, out: Path | None = None, *, kernelbench: str | None = None,
                      study_path: str | None = None, claims_path: str | None = None, name: str | None = None,
                      with_plots: bool = True, pool=None, bundle_format: int = pack.FORMAT_VERSION,
                      sign: str | None = None, unpublished: bool = False) -> MadeBundle:
    """Validate and pack ``results_dir`` into ``out`` (default ``<bundle name>.tar``), in
    ``bundle_format`` (4; 3 for the layout before RO-Crate and signatures), signed with the
    Ed25519 private key of the PEM file ``sign`` if given (:mod:`bundle.attest`).

    Raises UnreadableInputError (no results, an input that cannot be read, an explicit
    ``kernelbench`` checkout that is missing or differs from the lock), InvalidResultsError
    (invalid results), UsageError / OutputPathError (bad names, an ``out`` that cannot be
    written: checked before any packing). Nothing is written unless everything succeeds:
    the archive is written atomically, then its digest to ``<out>.sha256-digest``; if the
    digest cannot be written, the archive is removed again. A pool from
    :func:`start_workers` (started while a study runs) validates the documents and draws the
    figures if given; else the documents are validated in this process and worker processes
    are started only to draw the figures. ``unpublished``: the archive and its digest are
    written under hidden names (:func:`bundle.assemble.unpublished_paths`) for
    :func:`bundle.publish.publish` to verify and put in place, and ``out`` is left as it is.
    """
    t0 = time.perf_counter()
    _check_name(name)
    key = load_key(sign)
    STUDY.check_format(bundle_format, key is not None)
    if out is not None:
        out = check_out_path(Path(out))
    if study_path is not None:
        check_input_path(study_path, "--study")
        load_study(study_path, "full")  # refuse a study that is not a valid study before packing it
    if claims_path is not None:
        check_input_file(claims_path, "--claims")
        claims_mod.load_spec(claims_path)
    if kernelbench is not None:
        check_input_dir(kernelbench, "--kernelbench", KB_HINT)
    rs = load_results(Path(results_dir), study_path)
    ran = ((rs.documents.get("run") or {}).get("study") or {}).get("name")
    if rs.source == "measured" and ran and ran != rs.study.name:
        raise InvalidResultsError(f"the results are of study {ran!r}; --study names study {rs.study.name!r}",
                                  "pass --study with the folder of the study that ran, or leave it out for a shipped study")
    _study_input(rs)  # the run used this study folder (else InvalidResultsError), before the lock is consulted
    if kernelbench is not None:
        # a checkout the user named is used or refused, never skipped with a note
        lock = load_lock(rs.study.folder / rs.study.lock_file)
        wanted = (rs.documents["run"].get("kernelbench") or {}).get("files") or sorted(lock.files)
        try:
            KernelBenchCheckout(resolve_checkout(kernelbench), lock).verify(wanted)
        except OSError as exc:
            raise KernelBenchPinError(f"cannot read the KernelBench checkout {kernelbench}: {_why(exc)}",
                                      KB_HINT) from exc
    if out is None:
        out = check_out_path(Path(f"{name or bundle_name(rs)}.tar"), "the default --out (<bundle name>.tar here)")
    # without a warm pool (a study's), PlotWorker validates here and starts workers only to draw
    workers = PlotWorker(rs.documents, with_plots, pool, validate.study_schemas(rs.study, rs.binding))
    try:
        check_results(rs, workers.schema_problems())
        try:
            contents = study_contents(rs, kernelbench=kernelbench, study_path=study_path, claims_path=claims_path,
                                      name=name, with_plots=with_plots, plotter=workers, bundle_format=bundle_format)
        except OSError as exc:  # everything study_contents touches on disk is read, never written
            raise UnreadableInputError(f"cannot read {exc.filename or 'an input file'}: {_why(exc)}",
                                       "make the file readable; nothing was written") from exc
    finally:
        workers.close()
    bag = assemble.build_payload(STUDY, contents, bundle_format, key)
    meta, claims_doc = contents.meta, contents.claims
    size, digest = assemble.write_bundle(bag, out, unpublished)
    figures = sum(1 for p in contents.payload if p.startswith("plots/"))
    return MadeBundle(path=out, name=bag.name, digest=digest, size_bytes=size, claims_summary=claims_doc["summary"],
                      pack_seconds=time.perf_counter() - t0, notes=tuple(meta["notes"]),
                      signed_by=key.public.keyid if key else None, results=Path(results_dir),
                      undrawn_figures=figures if with_plots and not contents.renderings else 0)


def load_key(sign: str | None):
    """The signing key of ``--sign`` (None without it); checked before any work. Raises
    InputPathError (3) or UsageError (2)."""
    if sign is None:
        return None

    return attest.load_signing_key(sign)


def run_and_make(out: Path | None, *, study_path: str | None, profile: str, kernelbench: str | None,
                 results_dir: Path | None, cache_dir: Path | None, claims_path: str | None,
                 progress: Callable[[dict], None] | None = None, name: str | None = None,
                 with_plots: bool = True, bundle_format: int = pack.FORMAT_VERSION,
                 sign: str | None = None, prefetcher=None, unpublished: bool = False) -> tuple[MadeBundle, dict]:
    """Run the study on this GPU into ``results_dir`` (default ``results/<study>-<profile>-<UTC>``)
    and pack it. Returns ``(MadeBundle, run document)``. ``out`` is checked before the run.
    ``prefetcher``: model builds already under way (``harness.run.early_prefetch``), handed to
    the run, which closes it; the caller closes it where the run never starts.
    A failure after the run keeps the results folder, so ``--from-results`` can pack it
    later; Ctrl-C raises :class:`~kbrepro.errors.Interrupted` saying what was kept."""
    _check_name(name)

    STUDY.check_format(bundle_format, load_key(sign) is not None)  # a bad key is reported before the GPU
    if out is not None:
        out = check_out_path(Path(out))
    if study_path is not None:
        check_input_path(study_path, "--study")
    study = load_study(study_path, profile)
    binding = study.binding()  # imports and validates the binding: a bad study fails before the GPU
    if claims_path is not None:
        check_input_file(claims_path, "--claims")
        spec, _ = claims_mod.load_spec(claims_path)
    else:  # the study's own claims, before the GPU: the run hashes them, so a typo found later costs a rerun
        spec = claims_mod.parse_spec(study.file(study.claims_file), study.claims_file)
    # selectors against the document schemas before the GPU (the data check waits for the data)

    claims_mod.check_selectors(spec, dict.fromkeys((*OUR_DOCUMENTS, *study_documents(binding))),
                               "--claims" if claims_path else study.claims_file)
    if out is None:  # the default name has this length; its folder is the current one
        check_out_path(Path(f"{name or f'{study.name}-{profile}-00000000T000000'}.tar"),
                       "the default --out (<bundle name>.tar here)")
    rdir = Path(results_dir) if results_dir else Path("results") / f"{study.name}-{profile}-{re.sub(r'[^0-9T]', '', harness_run.utc_now())}"
    if cache_dir is not None:
        prepare_output_dir(cache_dir, "--cache-dir", must_be_empty=False)
    rdir, created = prepare_output_dir(rdir, "--results-dir")
    pool = start_workers()  # before CUDA initialises; warm by the time packing starts
    stage = "run"
    try:
        run_doc = harness_run.run_study(study, rdir, kernelbench=kernelbench, cache_dir=cache_dir, progress=progress,
                            binding=binding, prefetcher=prefetcher)
        stage = "pack"
        made = make_from_results(rdir, out, kernelbench=kernelbench, study_path=study_path, claims_path=claims_path,
                                 name=name, with_plots=with_plots, pool=pool, bundle_format=bundle_format, sign=sign,
                                 unpublished=unpublished)
    except KeyboardInterrupt as exc:
        if isinstance(exc, Interrupted):
            raise
        if stage == "pack":
            raise Interrupted(f"no bundle was written; the results in {rdir} are complete: pack them with "
                              f"'python make_bundle.py pack {rdir}'") from None
        remove_created(created)
        try:
            partial = _exists(rdir) and any(rdir.iterdir())
        except OSError:
            partial = True
        if partial:
            raise Interrupted(f"the study did not finish; its partial results are in {rdir} (not packable)") from None
        raise Interrupted() from None
    finally:
        stop_workers(pool)
    return made, run_doc
