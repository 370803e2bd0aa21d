"""Tier 4 cross-document checks of a study bundle (:func:`provenance_problems`): every cubin's
ELF header and SASS target against the environment and the compile record, PTX release and
target, the KernelBench files listed, the witness's bit patterns, every correctness check's
arithmetic, and no path or identifier of the packing machine in the documents.
"""
from __future__ import annotations

import itertools
import math
import re
import struct
from typing import Any, Mapping

from kbrepro.model.documents import Records
from kbrepro.model.problems import Problem
from kbrepro.bundle import evidence as pd
from kbrepro.bundle.scrub import _HOME, _UUID
from kbrepro.bundle.crosscheck.common import (ARCH, DOC_FILE, ELF_MAGIC, EM_CUDA, PTX_RELEASE, PTX_TARGET,
                                              SASS_TARGET, checks_of, f32_bits)

_cut, _p, _d, _l, _is_int, _num = pd.cut, pd.problem, pd.as_dict, pd.as_list, pd.is_int, pd.number


def provenance_problems(documents: Mapping[str, dict], files: Mapping[str, bytes], records: Records,
                        binding=None) -> list[Problem]:
    """Tier 4 (provenance): contradictions the verifier derives from bytes and numbers.

    ``records``: the typed records of the documents tier 3 passed (:mod:`kbrepro.model.documents`;
    ``records.bundle`` is bundle.json); ``documents``: the same documents parsed, whose check
    records (study-shaped) are walked for their arithmetic and handed to the study's own
    checks; ``files``: bag-root relative paths -> bytes. Returns Problems
    (:class:`kbrepro.model.problems.Problem`); raises nothing.

    Checks: the NVRTC release in each bundled PTX header (``// Cuda compilation tools,
    release X.Y``) equals the variant's ``nvrtc_version`` and environment.json's
    ``nvrtc_version``, and the PTX ``.target`` the variant's arch; each bundled cubin (and
    complete cubin) is a CUDA ELF (EM_CUDA) whose e_flags name the variant's ``sm_XX``,
    which is also environment.json's compute capability and the SASS listing's ``code for``
    line; recorded byte sizes and ``loaded_is_prefix`` follow from the files; every
    KernelBench file run.json lists as used is in the bundle (measured results, or
    whenever bundle.json says the files are included; an imported bundle has none to
    carry); every witness value is its recorded float32 bits; in every check record
    (correctness, a study's own documents) the bit-identity count, max abs error, worst ratios, failing counts
    and non-finite counts are consistent with one another under the predicates' definitions
    (e.g. all bits identical forces max abs error 0, max abs error > 0 forces a differing
    element); element counts and shapes follow from the bundled KernelBench task files'
    sizes (skipped where a task file is not bundled: imported results); a privacy scan
    (GPU/MIG UUIDs and home folders: the patterns ``bundle.scrub.find_leaks`` reports)
    over every text file of the bag. Temporary-folder and site-packages paths are not
    flagged: the committed extended bundle's Inductor settings record them, and they name
    no person or machine.
    """
    out: list[Problem] = []
    out += _binary_problems(records, files)
    out += _kernelbench_listed(records, files)
    out += _witness_bits(records)
    pred = records.correctness.predicate if records.correctness is not None else None
    out += check_arithmetic(documents, *((float(pred.atol), float(pred.rtol)) if pred is not None else (None, None)))
    if binding is not None:
        try:
            out += pd.from_study(binding.provenance(documents, files), "provenance")
        except Exception as exc:  # a study's checks must not crash the verifier
            out.append(_p(None, None, f"the study's provenance checks failed: {type(exc).__name__}: {_cut(str(exc))}"))
    out += _privacy_problems(files)
    return out


def _sm(arch: Any) -> int | None:
    m = ARCH.match(arch) if isinstance(arch, str) else None
    return int(m.group(1)) if m else None


def cubin_sm(data: bytes) -> int | None:
    """The SM number (e.g. 90) a CUDA cubin targets, read from its ELF header, or None if
    ``data`` is not a 64-bit little-endian CUDA ELF (e_machine EM_CUDA = 190). The field is
    e_flags bits 8..15 in the ABI of EI_ABIVERSION >= 8 (CUDA 12.8 and newer), bits 0..7
    before it."""
    if len(data) < 52 or data[:4] != ELF_MAGIC or data[4] != 2 or data[5] != 1:
        return None
    if struct.unpack_from("<H", data, 18)[0] != EM_CUDA:
        return None
    flags = struct.unpack_from("<I", data, 48)[0]
    return (flags >> 8) & 0xFF if data[8] >= 8 else flags & 0xFF


def _binary_problems(records: Records, files) -> list[Problem]:
    """Each variant's NVRTC release, PTX target, cubins' ELF targets and sizes and SASS
    target against each other and against environment.json's NVRTC and compute capability."""
    out = []
    f = DOC_FILE["compile"]
    env = records.environment
    env_nvrtc = env.value("nvrtc_version") if env is not None else None
    env_cc = env.value("compute_capability") if env is not None else None
    env_sm = None
    if isinstance(env_cc, str) and re.match(r"^\d+\.\d+$", env_cc):
        major, minor = env_cc.split(".")
        env_sm = int(major) * 10 + int(minor)
    elif env_cc is not None:
        out.append(_p(DOC_FILE["environment"], "$.fields.compute_capability.value",
                      "environment.json's compute capability is not of the form MAJOR.MINOR", found=_cut(env_cc)))
    for i, v in enumerate(records.compile.variants if records.compile is not None else ()):
        name = _cut(v.name)
        arch_sm = _sm(v.arch)
        ver = list(v.nvrtc_version) if v.nvrtc_version is not None else None
        ver_s = f"{ver[0]}.{ver[1]}" if ver is not None and len(ver) == 2 else None
        if env_nvrtc is not None and ver_s is not None and env_nvrtc != ver_s:
            out.append(_p(f, f"$.variants[{i}].nvrtc_version", f"{name}: NVRTC {ver_s} in the compile record, "
                          f"{_cut(env_nvrtc)} in environment.json", expected=env_nvrtc, found=ver))
        if env_sm is not None and arch_sm is not None and env_sm != arch_sm:
            out.append(_p(f, f"$.variants[{i}].arch", f"{name}: compiled for {_cut(v.arch)}, environment.json's "
                          f"GPU has compute capability {env_cc}", expected=f"sm_{env_sm}", found=v.arch))
        ptx_ref = v.ptx
        ptx = files.get(f"data/{ptx_ref.file}") if ptx_ref is not None else None
        if ptx is not None:
            m = PTX_RELEASE.search(ptx[:4096])
            if m is None:
                out.append(_p(f"data/{ptx_ref.file}", None, f"{name}: the PTX header names no CUDA compilation "
                              "tools release"))
            else:
                rel = [int(m.group(1)), int(m.group(2))]
                if ver is not None and rel != ver:
                    out.append(_p(f, f"$.variants[{i}].nvrtc_version", f"{name}: the bundled PTX was made by release "
                                  f"{rel[0]}.{rel[1]}, the compile record says NVRTC {ver_s}", expected=rel, found=ver))
                if env_nvrtc is not None and f"{rel[0]}.{rel[1]}" != env_nvrtc:
                    out.append(_p(DOC_FILE["environment"], "$.fields.nvrtc_version.value",
                                  f"{name}: the bundled PTX was made by release {rel[0]}.{rel[1]}, environment.json "
                                  f"says NVRTC {_cut(env_nvrtc)}", expected=f"{rel[0]}.{rel[1]}", found=env_nvrtc))
            t = PTX_TARGET.search(ptx)
            if t is not None and arch_sm is not None and _sm(t.group(1).decode()) != arch_sm:
                out.append(_p(f, f"$.variants[{i}].arch", f"{name}: the bundled PTX targets {t.group(1).decode()}",
                              expected=t.group(1).decode(), found=v.arch))
            if ptx_ref.bytes is not None and ptx_ref.bytes != len(ptx):
                out.append(_p(f, f"$.variants[{i}].ptx.bytes", f"{name}: PTX size differs from the file",
                              expected=len(ptx), found=ptx_ref.bytes))
        blobs = {}
        for key, ref in (("cubin", v.cubin), ("cubin_complete", v.cubin_complete)):
            data = files.get(f"data/{ref.file}") if ref is not None else None
            if data is None:
                continue
            blobs[key] = data
            if ref.bytes is not None and ref.bytes != len(data):
                out.append(_p(f, f"$.variants[{i}].{key}.bytes", f"{name}: {key} size differs from the file",
                              expected=len(data), found=ref.bytes))
            sm = cubin_sm(data)
            if sm is None:
                out.append(_p(f"data/{ref.file}", None, f"{name}: {key} is not a CUDA ELF binary"))
                continue
            if arch_sm is not None and sm != arch_sm:
                out.append(_p(f, f"$.variants[{i}].arch", f"{name}: the bundled {key}'s ELF header targets sm_{sm}",
                              expected=f"sm_{sm}", found=v.arch))
            if env_sm is not None and sm != env_sm:
                out.append(_p(DOC_FILE["environment"], "$.fields.compute_capability.value",
                              f"{name}: the bundled {key} targets sm_{sm}, environment.json's GPU is compute "
                              f"capability {env_cc}", expected=f"{sm // 10}.{sm % 10}", found=env_cc))
        cc = v.cubin_complete
        if "cubin" in blobs and "cubin_complete" in blobs and cc.loaded_is_prefix is not None:
            pre = blobs["cubin_complete"].startswith(blobs["cubin"])
            if pre != cc.loaded_is_prefix:
                out.append(_p(f, f"$.variants[{i}].cubin_complete.loaded_is_prefix", f"{name}: loaded_is_prefix "
                              "does not follow from the two cubins", expected=pre, found=cc.loaded_is_prefix))
        sass = files.get(f"data/{v.sass.file}") if v.sass is not None else None
        if sass is not None and arch_sm is not None:
            m = SASS_TARGET.search(sass[:4096].decode("utf-8", "replace"))
            if m is not None and _sm(m.group(1)) != arch_sm:
                out.append(_p(f, f"$.variants[{i}].arch", f"{name}: the bundled SASS is code for {m.group(1)}",
                              expected=m.group(1), found=v.arch))
    return out


def _kernelbench_listed(records: Records, files) -> list[Problem]:
    """Every KernelBench file run.json lists as used is in the bundle (a measured bundle, or
    one whose bundle.json says the files are included)."""
    out = []
    meta, run = records.bundle, records.run
    if meta is None or not (meta.source != "imported" or meta.kernelbench.files_included):
        return out  # imported: the post's checkout was never verified, nothing is carried
    listed = run.kernelbench.files if run is not None and run.kernelbench is not None else None
    for j, rel in enumerate(listed or ()):
        if f"data/inputs/kernelbench/{rel}" not in files:
            out.append(_p(f"data/inputs/kernelbench/{_cut(rel)}", None,
                          f"KernelBench file {_cut(rel)} the run used (run.json $.kernelbench.files[{j}]) is not in the bundle"))
    return out


def _witness_bits(records: Records) -> list[Problem]:
    """Every witness value (inputs and outputs) is the float32 its recorded bits give."""
    out = []
    wit = records.witness
    f = DOC_FILE["witness"]
    if wit is None:
        return out
    rows = [("$.inputs", wit.inputs)] + [(f"$.outputs.{k}", v) for k, v in sorted(wit.outputs.items())]
    for path, recs in rows:
        for j, r in enumerate(recs):
            x, bits = r.value, r.bits
            if math.isnan(x):
                ok = bool(re.match(r"^0x[0-9a-f]{8}$", bits)) and (int(bits, 16) & 0x7F800000) == 0x7F800000 \
                    and (int(bits, 16) & 0x007FFFFF) != 0
            else:
                ok = f32_bits(x) == bits and struct.unpack("<f", struct.pack("<f", x))[0] == x
            if not ok:
                out.append(_p(f, f"{path}[{j}]", f"witness value {_value_text(x)!r} is not the float32 with bits "
                              f"{_cut(bits)}", expected=f32_bits(x), found=bits))
    return out


def _value_text(x: float) -> float | str:
    """A witness value as its document writes it (the non-finite ones as ``jsonio`` encodes them)."""
    return x if math.isfinite(x) else "nan" if math.isnan(x) else "inf" if x > 0 else "-inf"


def check_arithmetic(documents: Mapping[str, Any], atol: float | None, rtol: float | None) -> list[Problem]:
    """Bit identity, max abs error, worst ratios, failing and non-finite counts of one check
    record must be consistent under harness/checks.py's definitions. The check records are
    found by walking every document's JSON (``documents``: they sit where the study or the
    candidate record puts them); ``atol``, ``rtol``: the predicate's tolerances the document's
    record gives (None: the checks that need them are not made)."""
    out = []
    for name in sorted(n for n in documents if n not in ("claims", "run", "environment", "compile", "timings")):
        f = DOC_FILE[name]
        for path, c in checks_of(documents.get(name)):
            n, bits = c.get("element_count"), c.get("bit_identical_count")
            if not (_is_int(n) and _is_int(bits)) or c.get("shape_match") is False:
                continue
            mae = _num(c.get("max_abs_error"))
            off, leg, st = _d(c.get("official")), _d(c.get("legacy")), _d(c.get("equal_nan_stress"))
            nf = c.get("nonfinite") if isinstance(c.get("nonfinite"), dict) else None
            wo, wl = _num(off.get("worst_ratio")), _num(leg.get("worst_ratio"))
            fo, fl, fs = off.get("failing_count"), leg.get("failing_count"), st.get("failing_count")

            def bad(msg, sub="", expected=None, found=None):
                out.append(_p(f, path + sub, msg, expected=expected, found=found))

            if bits == n and n > 0:
                if mae is not None and mae != 0:
                    bad(f"all {n} elements bit-identical, yet max abs error {mae:g}", ".max_abs_error", 0.0, mae)
                for lbl, w in (("official", wo), ("legacy", wl)):
                    if w is not None and w != 0:
                        bad(f"all {n} elements bit-identical, yet {lbl} worst ratio {w:g}", f".{lbl}.worst_ratio", 0.0, w)
                if _is_int(fl) and fl:
                    bad(f"all {n} elements bit-identical, yet {fl} fail the legacy predicate", ".legacy.failing_count",
                        0, fl)
                if _is_int(fs) and fs:
                    bad(f"all {n} elements bit-identical, yet {fs} fail the equal-NaN check",
                        ".equal_nan_stress.failing_count", 0, fs)
                if nf is not None:
                    for k in ("nan", "posinf", "neginf"):
                        a, b = nf.get(f"reference_{k}"), nf.get(f"candidate_{k}")
                        if _is_int(a) and _is_int(b) and a != b:
                            bad(f"all elements bit-identical, yet {a} reference and {b} candidate {k} values",
                                f".nonfinite.candidate_{k}", a, b)
                    if _is_int(nf.get("mismatched")) and nf["mismatched"]:
                        bad("all elements bit-identical, yet non-finite mismatches", ".nonfinite.mismatched", 0,
                            nf["mismatched"])
            if mae is not None and mae > 0 and bits >= n:
                bad(f"max abs error {mae:g} > 0, yet every element is bit-identical", ".bit_identical_count",
                    f"< {n}", bits)
            if mae is not None and math.isfinite(mae):
                for lbl, w in (("official", wo), ("legacy", wl)):
                    if w is None:
                        continue
                    if (mae == 0) != (w == 0):
                        bad(f"{lbl} worst ratio {w:g} with max abs error {mae:g} (one is 0 only if the other is)",
                            f".{lbl}.worst_ratio")
                    elif atol and atol > 0 and math.isfinite(w) and w > mae / atol * (1 + 1e-6) + 1e-12:
                        bad(f"{lbl} worst ratio {w:g} exceeds max abs error / atol = {mae / atol:g} (every allowance "
                            "is at least atol)", f".{lbl}.worst_ratio", f"<= {mae / atol:g}", w)
                mar = _num(c.get("max_abs_reference"))
                if atol and rtol is not None and mar is not None and math.isfinite(mar) and mae > 0:
                    lo_l = mae / (atol + rtol * mar)
                    lo_o = mae / (atol + rtol * (mar + mae))
                    for lbl, w, lo in (("legacy", wl, lo_l), ("official", wo, lo_o)):
                        if w is not None and math.isfinite(w) and w < lo * (1 - 1e-6):
                            bad(f"{lbl} worst ratio {w:g} is below {lo:g}, the least the element with the max abs "
                                "error gives", f".{lbl}.worst_ratio", f">= {lo:g}", w)
            if _is_int(fl) and fl > n - bits:
                bad(f"{fl} elements fail the legacy predicate, but only {n - bits} differ in bits",
                    ".legacy.failing_count", f"<= {n - bits}", fl)
            ref_nan = nf.get("reference_nan") if nf is not None else None
            if _is_int(fo) and _is_int(ref_nan) and fo > n - bits + ref_nan:
                bad(f"{fo} elements fail the official predicate, but only {n - bits} differ in bits and {ref_nan} "
                    "are NaN", ".official.failing_count", f"<= {n - bits + ref_nan}", fo)
            mism = nf.get("mismatched") if nf is not None else None
            if _is_int(mism) and _is_int(fo) and fo < mism:
                bad(f"{mism} pairs are not finite in one output only, and no such pair is close, yet only {fo} "
                    "elements fail the official predicate", ".official.failing_count", f">= {mism}", fo)
            if _is_int(fs) and _is_int(fo) and fs > fo:
                bad(f"the equal-NaN check fails {fs} elements, more than the official predicate's {fo} (it only adds "
                    "NaN pairs as close)", ".equal_nan_stress.failing_count", f"<= {fo}", fs)
            if nf is not None and _is_int(fs) and _is_int(fo) and nf.get("reference_nan") == 0 \
                    and nf.get("candidate_nan") == 0 and fs != fo:
                bad("without NaN the equal-NaN check and the official predicate are the same test", 
                    ".equal_nan_stress.failing_count", fo, fs)
            if wl is not None and _is_int(fl):
                if wl > 1 and fl == 0:
                    bad(f"legacy worst ratio {wl:g} > 1, yet no element fails", ".legacy.failing_count", ">= 1", fl)
            if wo is not None and _is_int(fo) and wo > 1 + 1e-3 and fo == 0:
                bad(f"official worst ratio {wo:g} > 1, yet no element fails", ".official.failing_count", ">= 1", fo)
            if nf is not None:
                nb, rn, cn = nf.get("nan_both"), nf.get("reference_nan"), nf.get("candidate_nan")
                if all(_is_int(x) for x in (nb, rn, cn)) and nb > min(rn, cn):
                    bad(f"{nb} NaN pairs, but {rn} reference and {cn} candidate NaN", ".nonfinite.nan_both")
                for side in ("reference", "candidate"):
                    tot = [nf.get(f"{side}_{k}") for k in ("nan", "posinf", "neginf")]
                    if all(_is_int(x) for x in tot) and sum(tot) > n:
                        bad(f"more {side} non-finite values than elements", f".nonfinite.{side}_nan")
            disc, mar = c.get("discriminating"), _num(c.get("max_abs_reference"))
            if isinstance(disc, bool) and mar is not None and atol is not None and disc != (mar > atol):
                bad(f"discriminating={disc} contradicts max |reference| {mar:g} vs atol {atol:g}", ".discriminating",
                    mar > atol, disc)
    return out


def _privacy_problems(files) -> list[Problem]:
    """GPU/MIG UUIDs and home folders (``bundle.scrub`` ``_UUID``, ``_HOME``: the strings
    ``scrub.find_leaks`` calls identifying) in any text file of the bag. A substring test
    decides first whether a pattern can match at all, which keeps the scan cheap."""
    out = []
    for p in sorted(files):
        data = files[p]
        if p.endswith((".png", ".cubin")) or b"\x00" in data[:4096]:
            continue
        has_uuid = b"GPU-" in data or b"MIG-" in data
        has_home = b"/home/" in data or b"/Users/" in data or b"/root" in data
        if not (has_uuid or has_home):
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue

        leaks = ([m.group(0) for m in itertools.islice(_UUID.finditer(text), 20)] if has_uuid else []) + \
            ([m.group(0) for m in itertools.islice(_HOME.finditer(text), 20)] if has_home else [])
        if leaks:
            out.append(_p(p, None, f"identifying strings were not scrubbed ({len(set(leaks))} distinct)",
                          found=[_cut(x) for x in sorted(set(leaks))[:5]]))
    return out
