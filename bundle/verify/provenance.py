"""Tier 4 of a study bundle: the KernelBench files against the verifier's own lock, the kernel
sources against the compile records and the verifier's own copies, the cubins against their
hashes, the FTZ evidence against the variants (PTX and SASS counted again from the listings).
"""
from __future__ import annotations

import hashlib

from kbrepro.bundle import crosscheck
from kbrepro.harness import jsonio
from kbrepro.harness.records import ftz_agrees
from kbrepro.kernels import compile as kc
from kbrepro.errors import UnreadableInputError
from kbrepro.bundle.verify.core import Bundle, STUDY_PREFIX, Tier, judging_lock, own_pin, safe_text


def tier_provenance(b: Bundle, t: Tier) -> None:
    pin = own_pin()
    kb = b.meta.get("kernelbench", {})
    lock_rel = "data/" + kb.get("lock_file", "inputs/kernelbench/kernelbench.lock.json")
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
        for rel, h in sorted((blk.get("files") or {}).items()):
            if pin.files.get(rel) != h:
                t.fail(lock_rel, f"{safe_text(rel, 120)}: " + ("not a file of KernelBench at the pinned commit"
                       if rel not in pin.files else "hash differs from the verifier's pin"),
                       expected=pin.files.get(rel), found=h)
    run_kb = (b.documents.get("run") or {}).get("kernelbench") or {}
    if run_kb.get("commit") and run_kb["commit"] != pin.commit:
        t.fail("data/results/run.json", "the run used another KernelBench commit", path="$.kernelbench.commit",
               expected=pin.commit, found=run_kb["commit"])
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
        if b.meta.get("source") == "measured":
            t.fail("data/inputs/kernelbench", msg + " although it was measured")
        else:
            t.notes.append(msg + f" ({safe_text(kb.get('reason') or 'imported results')})")
    comp = b.documents.get("compile") or {}
    sources = {}
    for i, v in enumerate(comp.get("variants", [])):
        src = v.get("source") or comp.get("source") or {}
        if src.get("file"):
            sources.setdefault(src["file"], set()).add(src.get("sha256"))
    known = bool(sources)
    for fname, shas in sorted(sources.items()):
        path = f"{STUDY_PREFIX}{fname}"
        data = b.study_files.get(fname)
        if data is None:
            if b.meta.get("source") == "measured":
                t.fail(path, "the kernel source the compile records name is not in the bundled study folder")
            known = False
            continue
        got = hashlib.sha256(data).hexdigest()
        if shas != {got}:
            if b.meta.get("source") == "measured":
                t.fail(path, "kernel source differs from the compile records", expected=sorted(map(str, shas)),
                       found=got)
            known = False
        if b.trusted is None or b.trusted.files.get(fname) != data:
            known = False
    if b.meta.get("source") == "measured" and not sources:
        t.fail("data/results/compile.json", "the compile records name no kernel source")
    if b.study is not None and b.meta.get("source") == "measured":
        # which file each variant compiles is the study definition's, not the record's
        for i, v in enumerate(comp.get("variants", [])):
            name = v.get("name")
            want = b.study.variant_sources.get(name)
            got = (v.get("source") or comp.get("source") or {}).get("file")
            if want is not None and got != want:
                t.fail("data/results/compile.json", f"{safe_text(name)}: the study compiles {want} for this variant; "
                       f"the record names {safe_text(got)}", path=f"$.variants[{i}].source.file", expected=want,
                       found=got)
            want_h = list(b.study.variant_headers.get(name, ()))
            got_h = [(h or {}).get("file") for h in (v.get("headers") or [])]
            if want is not None and got_h != want_h:
                t.fail("data/results/compile.json", f"{safe_text(name)}: the headers compiled are not the study's",
                       path=f"$.variants[{i}].headers", expected=want_h, found=got_h)
            for j, h in enumerate(v.get("headers") or []):
                data = b.study_files.get((h or {}).get("file"))
                if data is None or hashlib.sha256(data).hexdigest() != (h or {}).get("sha256"):
                    t.fail("data/results/compile.json", f"{safe_text(name)}: header {safe_text((h or {}).get('file'))} "
                           "differs from the bundled study file", path=f"$.variants[{i}].headers[{j}]")
        first = b.study.variant_sources.get(b.study.variants[0].name) if b.study.variants else None
        if first is not None and (comp.get("source") or {}).get("file") != first:
            t.fail("data/results/compile.json", f"the compile record's source is not the study's first variant's "
                   f"({first})", path="$.source.file", expected=first, found=(comp.get("source") or {}).get("file"))
    t.details["kernel_source_known"] = known
    b.kernel_source_known = known
    if sources and not known and b.trusted is not None and b.meta.get("source") == "measured":
        b.partial.append("a compiled kernel source is not this verifier's own copy of the study's")
    if not sources or (b.meta.get("source") == "imported" and not known):
        t.notes.append("the compiled kernel source is not in the bundle (imported results)")
        b.partial.append("no kernel source and no compiled binaries: the FTZ modes and results rest on the "
                         "numbers the post recorded, which only a replay can confirm")
    # which FTZ mode each variant must have is the verifier's own reading of its own study's
    # routes and options; the bundle's expected_ftz is compared with it, never used instead
    # (for a study the verifier does not ship, its own FTZ rule is applied to the author's
    # routes and options)
    own_ftz = None
    judge_study = b.own_study if b.own_study is not None else b.author_study
    if judge_study is not None:
        own_ftz = crosscheck.expected_ftz(judge_study)
        recorded_names = [v.get("name") for v in comp.get("variants", [])]
        for n in sorted(set(own_ftz) - set(recorded_names)):
            t.fail("data/results/compile.json", f"variant {n} of the study definition was not compiled",
                   path="$.variants")
    for i, v in enumerate(comp.get("variants", [])):
        name = v.get("name")
        if own_ftz is not None:
            if name not in own_ftz:
                t.fail("data/results/compile.json", f"variant {safe_text(name)!r} is not a variant of the "
                       "study definition", path=f"$.variants[{i}].name")
                continue
            if v.get("expected_ftz") is not own_ftz[name]:
                t.fail("data/results/compile.json", f"{name}: the record says the binary must have "
                       f"ftz={str(v.get('expected_ftz')).lower()}; "
                       + ("this verifier's study definition" if b.own_study is not None else
                          "this verifier's FTZ rule applied to the author's study definition")
                       + f" (route and options) gives ftz={str(own_ftz[name]).lower()}", path=f"$.variants[{i}].expected_ftz",
                       expected=own_ftz[name], found=v.get("expected_ftz"))
        for key in ("cubin", "cubin_complete", "ptx", "sass"):
            ref = v.get(key)
            if isinstance(ref, dict):
                data = b.files.get(f"data/{ref['file']}")
                if data is None:
                    t.fail(f"data/{ref['file']}", f"{name}: {key} named by the compile record is missing")
                elif hashlib.sha256(data).hexdigest() != ref["sha256"]:
                    t.fail(f"data/{ref['file']}", f"{name}: {key} does not match its recorded sha256",
                           expected=ref["sha256"], found=hashlib.sha256(data).hexdigest())
        ev = v.get("ftz_evidence") or {}
        expected = own_ftz[name] if own_ftz is not None else bool(v.get("expected_ftz"))
        says = {}
        w = ev.get("witness") or {}
        # a witness judges only where it discriminates and decided (harness.records.FtzEvidence)
        if w.get("discriminates") is not False and isinstance(w.get("flushes"), bool):
            says["witness"] = w["flushes"]
        ptx_ref = v.get("ptx")
        if isinstance(ptx_ref, dict) and f"data/{ptx_ref['file']}" in b.files:
            counts = kc.ptx_ftz_counts(b.files[f"data/{ptx_ref['file']}"])
            rec = ev.get("ptx") or {}
            if rec and any(rec.get(k) != counts[k] for k in counts):
                t.fail("data/results/compile.json", f"{name}: recorded PTX .ftz counts differ from the bundled PTX",
                       path=f"$.variants[{i}].ftz_evidence.ptx", expected=counts, found={k: rec.get(k) for k in counts})
            if kc.ptx_says_ftz(counts) is not None:
                says["ptx"] = kc.ptx_says_ftz(counts)
        sass_ref = v.get("sass")
        if isinstance(sass_ref, dict) and f"data/{sass_ref['file']}" in b.files:
            counts = kc.sass_ftz_counts(b.files[f"data/{sass_ref['file']}"].decode("utf-8", "replace"))
            if kc.sass_says_ftz(counts) is not None:
                says["sass"] = kc.sass_says_ftz(counts)
        agrees = ftz_agrees(expected, says)
        if not says:
            t.fail("data/results/compile.json", f"{name}: no FTZ evidence (no witness, PTX or SASS)",
                   path=f"$.variants[{i}].ftz_evidence")
        elif not agrees:
            derived = (w.get("derived_from") and f"; the witness is derived from {w['derived_from']}") or ""
            t.fail("data/results/compile.json",
                   f"{name}: FTZ evidence contradicts the variant (name promises ftz={str(expected).lower()}; "
                   + ", ".join(f"{k} says ftz={str(s).lower()}" for k, s in says.items()) + f"{derived}). The "
                   "binary that ran did not have the FTZ mode its name claims, so results labelled with this "
                   "variant do not show what they say (a known cause: NVRTC's compile cache, see docs/traps.md)",
                   path=f"$.variants[{i}].ftz_evidence", expected=expected, found=says)
        strict = b.meta.get("source") == "measured"  # a measured record's 'agrees' is the shared rule's, exactly
        if (ev.get("agrees") != agrees) if strict else (ev.get("agrees") is not None and agrees is not None
                                                         and ev["agrees"] != agrees):
            t.fail("data/results/compile.json", f"{name}: recorded 'agrees' does not follow from the evidence",
                   path=f"$.variants[{i}].ftz_evidence.agrees", expected=agrees, found=ev["agrees"])
    by_sha: dict[str, set] = {}
    for v in comp.get("variants", []):
        for key in ("cubin", "cubin_complete"):
            ref = v.get(key)
            if isinstance(ref, dict) and ref.get("sha256"):
                ftz = own_ftz.get(v.get("name"), bool(v.get("expected_ftz"))) if own_ftz else bool(v.get("expected_ftz"))
                by_sha.setdefault(ref["sha256"], set()).add((v.get("name"), ftz))
    for sha, owners in sorted(by_sha.items()):
        if len({ftz for _, ftz in owners}) > 1:
            t.fail("data/results/compile.json", "one cubin is recorded for variants that promise different FTZ modes: "
                   + ", ".join(sorted(f"{n} (ftz={str(f).lower()})" for n, f in owners)), found=sha)
    wit = b.documents.get("witness") or {}
    for i, v in enumerate(comp.get("variants", [])):
        rec_w = (v.get("ftz_evidence") or {}).get("witness") or {}
        doc_w = (wit.get("verdicts") or {}).get(v.get("name"))
        if wit and doc_w is None and rec_w:
            t.fail("data/results/witness.json", f"{v.get('name')}: no witness verdict for a compiled variant")
        elif doc_w is not None and rec_w and any(k in rec_w and rec_w[k] != doc_w.get(k)
                                                 for k in ("flushes", "bit_identical_to_reference")):
            t.fail("data/results/compile.json", f"{v.get('name')}: the compile record's witness differs from witness.json",
                   path=f"$.variants[{i}].ftz_evidence.witness", expected=doc_w, found=rec_w)
    checked = []
    if included:
        checked.append(f"KernelBench pin ({len(included)} files)")
    if sources:
        checked.append("kernel source" + ("" if b.kernel_source_known else " (not the verifier's own)"))
    n_bin = sum(1 for v in comp.get("variants", []) for k in ("cubin", "cubin_complete")
                if isinstance(v.get(k), dict))
    if n_bin:
        checked.append(f"{n_bin} cubins")
    if comp.get("variants"):
        checked.append("FTZ evidence" + ("" if n_bin else " (recorded numbers only)"))
    t.details["checked"] = checked
    for p in crosscheck.provenance_problems(b.documents, b.files, b.records, b.binding):
        t.add(p)
