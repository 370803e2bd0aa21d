"""Tier 4 of a study bundle: the KernelBench files against the verifier's own lock, the kernel
sources against the compile records and the verifier's own copies, the cubins against their
hashes, the FTZ evidence against the variants (PTX and SASS counted again from the listings).

Each part reads the typed records tier 3 built (``Bundle.records``, :mod:`kbrepro.model.documents`);
the bytes it checks them against are the bag's own (``Bundle.files``).
"""
from __future__ import annotations

import hashlib

from kbrepro.bundle import crosscheck
from kbrepro.harness import jsonio
from kbrepro.harness.records import ftz_agrees
from kbrepro.kernels import compile as kc
from kbrepro.errors import UnreadableInputError
from kbrepro.model.documents import Compile, FileRef, Variant
from kbrepro.bundle.verify.core import Bundle, STUDY_PREFIX, Tier, judging_lock, own_pin, safe_text

COMPILE = "data/results/compile.json"


def tier_provenance(b: Bundle, t: Tier) -> None:
    """Tier 4's checks, in order: the KernelBench lock and files, the kernel sources, each
    variant's binaries and FTZ evidence, cubins shared across FTZ modes, the compile records'
    witness against witness.json; then the cross-document provenance checks
    (:func:`kbrepro.bundle.crosscheck.provenance_problems`)."""
    measured = b.records.bundle is not None and b.records.bundle.source == "measured"
    comp = b.records.compile if b.records.compile is not None else Compile("kbrepro/compile", 1, None, ())
    included = _kernelbench(b, t, measured)
    sources = _kernel_sources(b, t, comp, measured)
    own_ftz = _own_ftz(b, t, comp)
    for i, v in enumerate(comp.variants):
        _variant_evidence(b, t, i, v, own_ftz, measured)
    _shared_cubins(t, comp, own_ftz)
    _witness_agrees(b, t, comp, measured)
    checked = []
    if included:
        checked.append(f"KernelBench pin ({included} files)")
    if sources:
        checked.append("kernel source" + ("" if b.kernel_source_known else " (not the verifier's own)"))
    n_bin = sum(1 for v in comp.variants for ref in (v.cubin, v.cubin_complete) if ref is not None)
    if n_bin:
        checked.append(f"{n_bin} cubins")
    if comp.variants:
        checked.append("FTZ evidence" + ("" if n_bin else " (recorded numbers only)"))
    t.details["checked"] = checked
    for p in crosscheck.provenance_problems(b.documents, b.files, b.records, b.binding):
        t.add(p)


def _kernelbench(b: Bundle, t: Tier, measured: bool) -> int:
    """The bundle's KernelBench lock against the study's lock file and the verifier's pin, the
    run's commit, and every task file carried against the lock that judges the bundle.
    Returns how many task files the bundle carries."""
    pin = own_pin()
    kb = b.records.bundle.kernelbench if b.records.bundle is not None else None
    lock_rel = "data/" + (kb.lock_file if kb is not None else "inputs/kernelbench/kernelbench.lock.json")
    lock_raw = b.files.get(lock_rel)
    study_lock = b.study.lock_file if b.study is not None else None
    if lock_raw is None:
        t.fail(lock_rel, "the bundle carries no KernelBench lock")
    else:
        if study_lock is not None and b.study_files.get(study_lock) != lock_raw:
            t.fail(lock_rel, "the KernelBench lock differs from the study's own lock file "
                   f"({safe_text(study_lock)})")
        try:
            blk = jsonio.loads_strict(lock_raw, "kernelbench.lock.json")
        except UnreadableInputError as exc:
            blk = {}
            t.fail(lock_rel, exc.message)
        blk = blk if isinstance(blk, dict) else {}
        if blk.get("commit") != pin.commit:
            t.fail(lock_rel, "KernelBench commit differs from the verifier's pin", expected=pin.commit,
                   found=blk.get("commit"))
        files = blk.get("files")
        for rel, h in sorted((files if isinstance(files, dict) else {}).items()):
            if pin.files.get(rel) != h:
                t.fail(lock_rel, f"{safe_text(rel, 120)}: " + ("not a file of KernelBench at the pinned commit"
                       if rel not in pin.files else "hash differs from the verifier's pin"),
                       expected=pin.files.get(rel), found=h)
    run = b.records.run
    run_commit = run.kernelbench.commit if run is not None and run.kernelbench is not None else None
    if run_commit and run_commit != pin.commit:
        t.fail("data/results/run.json", "the run used another KernelBench commit", path="$.kernelbench.commit",
               expected=pin.commit, found=run_commit)
    judging = judging_lock(b)
    included = [p for p in b.files if p.startswith("data/inputs/kernelbench/") and p != lock_rel]
    for p in included:
        rel = p[len("data/inputs/kernelbench/"):]
        want = judging.files.get(rel) if rel in judging.files else None
        got = hashlib.sha256(b.files[p]).hexdigest()
        if want is None:
            t.fail(p, "KernelBench file not in the study's lock")
        elif want != got or pin.files.get(rel) != got:
            t.fail(p, "KernelBench file differs from the verifier's pin", expected=pin.files.get(rel), found=got)
    if not included:
        msg = "the bundle carries no KernelBench task files"
        if measured:
            t.fail("data/inputs/kernelbench", msg + " although it was measured")
        else:
            t.notes.append(msg + f" ({safe_text((kb.reason if kb is not None else None) or 'imported results')})")
    return len(included)


def _source_of(v: Variant, comp: Compile) -> dict:
    """The kernel source a variant compiled (its own record, else the compile record's)."""
    src = v.source if v.source else comp.source
    return dict(src) if src else {}


def _kernel_sources(b: Bundle, t: Tier, comp: Compile, measured: bool) -> dict[str, set]:
    """Every kernel source the compile records name, against the bundled study folder, the
    recorded sha256 and the verifier's own copy (``b.kernel_source_known``); for a study the
    verifier ships, the file and headers each variant compiles are the study definition's.
    Returns file name -> the sha256 values recorded for it."""
    sources: dict[str, set] = {}
    for v in comp.variants:
        src = _source_of(v, comp)
        if src.get("file"):
            sources.setdefault(src["file"], set()).add(src.get("sha256"))
    known = bool(sources)
    for fname, shas in sorted(sources.items()):
        path = f"{STUDY_PREFIX}{fname}"
        data = b.study_files.get(fname)
        if data is None:
            if measured:
                t.fail(path, "the kernel source the compile records name is not in the bundled study folder")
            known = False
            continue
        got = hashlib.sha256(data).hexdigest()
        if shas != {got}:
            if measured:
                t.fail(path, "kernel source differs from the compile records", expected=sorted(map(str, shas)),
                       found=got)
            known = False
        if b.trusted is None or b.trusted.files.get(fname) != data:
            known = False
    if measured and not sources:
        t.fail(COMPILE, "the compile records name no kernel source")
    if b.study is not None and measured:
        _study_sources(b, t, comp)
    t.details["kernel_source_known"] = known
    b.kernel_source_known = known
    if sources and not known and b.trusted is not None and measured:
        b.partial.append("a compiled kernel source is not this verifier's own copy of the study's")
    if not sources or (not measured and not known):
        t.notes.append("the compiled kernel source is not in the bundle (imported results)")
        b.partial.append("no kernel source and no compiled binaries: the FTZ modes and results rest on the "
                         "numbers the post recorded, which only a replay can confirm")
    return sources


def _study_sources(b: Bundle, t: Tier, comp: Compile) -> None:
    """Which file and headers each variant compiles is the study definition's, not the record's."""
    for i, v in enumerate(comp.variants):
        want = b.study.variant_sources.get(v.name)
        got = _source_of(v, comp).get("file")
        if want is not None and got != want:
            t.fail(COMPILE, f"{safe_text(v.name)}: the study compiles {want} for this variant; the record names "
                   f"{safe_text(got)}", path=f"$.variants[{i}].source.file", expected=want, found=got)
        want_h = list(b.study.variant_headers.get(v.name, ()))
        got_h = [h.file for h in v.headers or ()]
        if want is not None and got_h != want_h:
            t.fail(COMPILE, f"{safe_text(v.name)}: the headers compiled are not the study's",
                   path=f"$.variants[{i}].headers", expected=want_h, found=got_h)
        for j, h in enumerate(v.headers or ()):
            data = b.study_files.get(h.file)
            if data is None or hashlib.sha256(data).hexdigest() != h.sha256:
                t.fail(COMPILE, f"{safe_text(v.name)}: header {safe_text(h.file)} differs from the bundled study "
                       "file", path=f"$.variants[{i}].headers[{j}]")
    first = b.study.variant_sources.get(b.study.variants[0].name) if b.study.variants else None
    got = dict(comp.source).get("file") if comp.source else None
    if first is not None and got != first:
        t.fail(COMPILE, f"the compile record's source is not the study's first variant's ({first})",
               path="$.source.file", expected=first, found=got)


def _own_ftz(b: Bundle, t: Tier, comp: Compile) -> dict[str, bool] | None:
    """Which FTZ mode each variant must have: the verifier's own reading of its own study's
    routes and options (for a study it does not ship, its own FTZ rule applied to the author's
    routes and options); the bundle's ``expected_ftz`` is compared with it, never used instead.
    A variant of the definition that was not compiled fails. None: no definition judges."""
    judge_study = b.own_study if b.own_study is not None else b.author_study
    if judge_study is None:
        return None
    own_ftz = crosscheck.expected_ftz(judge_study)
    for n in sorted(set(own_ftz) - {v.name for v in comp.variants}):
        t.fail(COMPILE, f"variant {n} of the study definition was not compiled", path="$.variants")
    return own_ftz


def _variant_evidence(b: Bundle, t: Tier, i: int, v: Variant, own_ftz: dict[str, bool] | None,
                      measured: bool) -> None:
    """One variant: a variant of the definition, with the FTZ mode the definition gives; its
    binaries and listings are the bundled files their sha256 names; its FTZ evidence (the
    witness where it discriminates and decided, the PTX and SASS counted again here) agrees
    with that mode, and its recorded ``agrees`` follows (:func:`kbrepro.harness.records.ftz_agrees`)."""
    name = v.name
    if own_ftz is not None:
        if name not in own_ftz:
            t.fail(COMPILE, f"variant {safe_text(name)!r} is not a variant of the study definition",
                   path=f"$.variants[{i}].name")
            return
        if v.expected_ftz is not own_ftz[name]:
            t.fail(COMPILE, f"{name}: the record says the binary must have ftz={str(v.expected_ftz).lower()}; "
                   + ("this verifier's study definition" if b.own_study is not None else
                      "this verifier's FTZ rule applied to the author's study definition")
                   + f" (route and options) gives ftz={str(own_ftz[name]).lower()}", path=f"$.variants[{i}].expected_ftz",
                   expected=own_ftz[name], found=v.expected_ftz)
    refs: dict[str, FileRef | None] = {"cubin": v.cubin, "cubin_complete": v.cubin_complete, "ptx": v.ptx,
                                       "sass": v.sass}
    for key, ref in refs.items():
        if ref is not None:
            data = b.files.get(f"data/{ref.file}")
            if data is None:
                t.fail(f"data/{ref.file}", f"{name}: {key} named by the compile record is missing")
            elif hashlib.sha256(data).hexdigest() != ref.sha256:
                t.fail(f"data/{ref.file}", f"{name}: {key} does not match its recorded sha256",
                       expected=ref.sha256, found=hashlib.sha256(data).hexdigest())
    ev = v.ftz_evidence
    expected = own_ftz[name] if own_ftz is not None else v.expected_ftz
    says = {}
    w = ev.witness
    # a witness judges only where it discriminates and decided (harness.records.FtzEvidence)
    if w is not None and w.discriminates is not False and w.flushes is not None:
        says["witness"] = w.flushes
    if v.ptx is not None and f"data/{v.ptx.file}" in b.files:
        counts = kc.ptx_ftz_counts(b.files[f"data/{v.ptx.file}"])
        rec = dict(ev.ptx) if ev.ptx else {}
        if rec and any(rec.get(k) != counts[k] for k in counts):
            t.fail(COMPILE, f"{name}: recorded PTX .ftz counts differ from the bundled PTX",
                   path=f"$.variants[{i}].ftz_evidence.ptx", expected=counts, found={k: rec.get(k) for k in counts})
        if kc.ptx_says_ftz(counts) is not None:
            says["ptx"] = kc.ptx_says_ftz(counts)
    if v.sass is not None and f"data/{v.sass.file}" in b.files:
        counts = kc.sass_ftz_counts(b.files[f"data/{v.sass.file}"].decode("utf-8", "replace"))
        if kc.sass_says_ftz(counts) is not None:
            says["sass"] = kc.sass_says_ftz(counts)
    agrees = ftz_agrees(expected, says)
    if not says:
        t.fail(COMPILE, f"{name}: no FTZ evidence (no witness, PTX or SASS)", path=f"$.variants[{i}].ftz_evidence")
    elif not agrees:
        derived = f"; the witness is derived from {w.derived_from}" if w is not None and w.derived_from else ""
        t.fail(COMPILE,
               f"{name}: FTZ evidence contradicts the variant (name promises ftz={str(expected).lower()}; "
               + ", ".join(f"{k} says ftz={str(s).lower()}" for k, s in says.items()) + f"{derived}). The "
               "binary that ran did not have the FTZ mode its name claims, so results labelled with this "
               "variant do not show what they say (a known cause: NVRTC's compile cache, see docs/traps.md)",
               path=f"$.variants[{i}].ftz_evidence", expected=expected, found=says)
    # a measured record's 'agrees' is the shared rule's, exactly; an imported one's where both decided
    if (ev.agrees != agrees) if measured else (ev.agrees is not None and agrees is not None and ev.agrees != agrees):
        t.fail(COMPILE, f"{name}: recorded 'agrees' does not follow from the evidence",
               path=f"$.variants[{i}].ftz_evidence.agrees", expected=agrees, found=ev.agrees)


def _shared_cubins(t: Tier, comp: Compile, own_ftz: dict[str, bool] | None) -> None:
    """One cubin (by sha256) may not stand for variants that promise different FTZ modes."""
    by_sha: dict[str, set] = {}
    for v in comp.variants:
        ftz = own_ftz.get(v.name, v.expected_ftz) if own_ftz else v.expected_ftz
        for ref in (v.cubin, v.cubin_complete):
            if ref is not None:
                by_sha.setdefault(ref.sha256, set()).add((v.name, ftz))
    for sha, owners in sorted(by_sha.items()):
        if len({ftz for _, ftz in owners}) > 1:
            t.fail(COMPILE, "one cubin is recorded for variants that promise different FTZ modes: "
                   + ", ".join(sorted(f"{n} (ftz={str(f).lower()})" for n, f in owners)), found=sha)


def _witness_agrees(b: Bundle, t: Tier, comp: Compile, measured: bool) -> None:
    """Each compile record's witness verdict is witness.json's for that variant (a measured
    record's every field, a null included; an imported one's fields that it recorded)."""
    wit = b.records.witness
    for i, v in enumerate(comp.variants):
        rec_w = v.ftz_evidence.witness
        doc_w = wit.verdicts.get(v.name) if wit is not None else None
        if wit is not None and doc_w is None and rec_w is not None:
            t.fail("data/results/witness.json", f"{v.name}: no witness verdict for a compiled variant")
        elif doc_w is not None and rec_w is not None and any(
                (measured or getattr(rec_w, k) is not None) and getattr(rec_w, k) != doc_w.get(k)
                for k in ("flushes", "bit_identical_to_reference")):
            t.fail(COMPILE, f"{v.name}: the compile record's witness differs from witness.json",
                   path=f"$.variants[{i}].ftz_evidence.witness", expected=dict(doc_w),
                   found={k: getattr(rec_w, k) for k in ("task", "discriminates", "flushes",
                                                         "bit_identical_to_reference") if getattr(rec_w, k) is not None})
