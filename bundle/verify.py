"""verify: an untrusted archive -> tiered checks -> a verification report.

Tiers, cheapest first; each collects every problem (file, JSON path, expected, found):

1. ``archive``: member headers read as a stream; only regular files and folders, safe
   relative names under one top folder, no duplicates, size and count limits; BagIt and
   bundle format versions known.
2. ``manifest``: payload completeness (missing / extra files), every payload hash, the tag
   manifest over the tag files, Payload-Oxum; the bundle digest.
3. ``documents``: strict JSON, the verifier's own schemas, supported versions, consistency.
4. ``provenance``: KernelBench files against the verifier's own lock, kernel source against
   the compile records, cubins against their hashes, FTZ evidence against variant names
   (PTX and SASS recounted from the bundled listings).
5. ``claims``: re-evaluated from the recorded documents; recorded verdicts must follow.
6. ``replay``: the study rerun on this GPU with the verifier's own code, then compared.

Trust anchors are the verifier's own schemas, KernelBench lock and kernel source, never the
bundle's copies.
"""
from __future__ import annotations

import hashlib
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from kbrepro import manifests
from kbrepro.bundle import archive as arc
from kbrepro.bundle import claims as claims_mod
from kbrepro.bundle import pack, validate
from kbrepro.harness import fingerprint, jsonio
from kbrepro.harness.kernelbench import load_lock
from kbrepro.kernels import compile as kc
from kbrepro.kernels.errors import (EnvironmentUnavailableError, ReproError, UnreadableInputError, UsageError)

LEVELS = {"fast": 2, "static": 5, "replay": 6, "auto": 6}
TIER_NAMES = ("archive", "manifest", "documents", "provenance", "claims", "replay")
_MANIFEST_LINE = re.compile(r"^([0-9a-f]{64})  (\S.*)$")


@dataclass
class Tier:
    number: int
    name: str
    status: str = "PASS"  # PASS, FAIL, SKIP
    problems: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    details: dict = field(default_factory=dict)

    def fail(self, file: str | None, message: str, *, path: str | None = None, expected=None, found=None) -> None:
        self.status = "FAIL"
        p = {"file": file, "path": path, "message": message}
        if expected is not None:
            p["expected"] = expected
        if found is not None:
            p["found"] = found
        self.problems.append(p)


@dataclass
class Report:
    archive: str
    level: str
    tiers: list[Tier] = field(default_factory=list)
    digest: str | None = None
    bundle_name: str | None = None
    exit_code: int = 0
    verdict: str = "PASS"

    def to_doc(self) -> dict:
        return {"schema": "kbrepro/verification-report", "schema_version": 1, "archive": self.archive,
                "level": self.level, "bundle_name": self.bundle_name, "digest": self.digest,
                "verdict": self.verdict, "exit_code": self.exit_code,
                "tiers": [{"number": t.number, "name": t.name, "status": t.status, "seconds": round(t.seconds, 4),
                           "problems": t.problems, "notes": t.notes, "details": t.details} for t in self.tiers]}


@dataclass
class Bundle:
    """A bundle that passed tiers 1-2: files by path relative to the bag root, extracted
    copy on disk, and parsed documents (filled by tier 3)."""

    name: str
    files: dict[str, bytes]
    root: Path
    documents: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    kernel_source_known: bool = False


# ---------------------------------------------------------------------------------- tiers


def _tier_archive(path: Path, t: Tier) -> arc.ArchiveContents:
    contents = arc.read_archive(path)
    for p in contents.problems:
        t.fail(p["file"], p["message"])
    if t.status == "FAIL":
        return contents
    bagit = contents.files.get("bagit.txt")
    if bagit is None:
        t.fail("bagit.txt", "missing: not a BagIt bag")
    elif bagit.decode("utf-8", "replace").splitlines()[:1] != ["BagIt-Version: 1.0"]:
        t.fail("bagit.txt", "unknown BagIt version", expected="BagIt-Version: 1.0",
               found=bagit.decode("utf-8", "replace").splitlines()[:1])
    info = _bag_info(contents.files.get("bag-info.txt", b""))
    if info.get("Bundle-Format") != pack.FORMAT_NAME:
        t.fail("bag-info.txt", "not a kbrepro bundle", expected=pack.FORMAT_NAME, found=info.get("Bundle-Format"))
    elif info.get("Bundle-Format-Version") != str(pack.FORMAT_VERSION):
        t.fail("bag-info.txt", "unknown bundle format version; this verifier reads version "
               f"{pack.FORMAT_VERSION}", expected=str(pack.FORMAT_VERSION), found=info.get("Bundle-Format-Version"))
    t.details.update(members=contents.members, bytes=contents.total_bytes, top=contents.top,
                     compressed=contents.compressed)
    return contents


def _bag_info(raw: bytes) -> dict:
    out = {}
    for line in raw.decode("utf-8", "replace").splitlines():
        if ":" in line and not line.startswith((" ", "\t")):
            k, v = line.split(":", 1)
            out[k.strip()] = v.strip()
    return out


def _parse_manifest(raw: bytes, file: str, t: Tier) -> dict[str, str]:
    out = {}
    for i, line in enumerate(raw.decode("utf-8", "replace").splitlines(), 1):
        m = _MANIFEST_LINE.match(line)
        if not m:
            t.fail(file, f"line {i} is not '<sha256>  <path>'", found=line[:120])
            continue
        if m.group(2) in out:
            t.fail(file, f"line {i}: {m.group(2)} listed twice")
        out[m.group(2)] = m.group(1)
    return out


def _tier_manifest(c: arc.ArchiveContents, t: Tier) -> str | None:
    files = c.files
    for tag in ("manifest-sha256.txt", "tagmanifest-sha256.txt", "bag-info.txt"):
        if tag not in files:
            t.fail(tag, "missing tag file")
    if t.status == "FAIL":
        return None
    manifest = _parse_manifest(files["manifest-sha256.txt"], "manifest-sha256.txt", t)
    payload = {p for p in files if p.startswith("data/")}
    for p in sorted(set(manifest) - payload):
        t.fail(p, "listed in manifest-sha256.txt but missing from the archive")
    for p in sorted(payload - set(manifest)):
        t.fail(p, "in the archive but not listed in manifest-sha256.txt (extra file)")
    for p in sorted(set(manifest) & payload):
        if c.sha256[p] != manifest[p]:
            t.fail(p, "sha256 differs from manifest-sha256.txt", expected=manifest[p], found=c.sha256[p])
    tagm = _parse_manifest(files["tagmanifest-sha256.txt"], "tagmanifest-sha256.txt", t)
    tags = {p for p in files if not p.startswith("data/") and p != "tagmanifest-sha256.txt"}
    for p in sorted(tags - set(tagm)):
        t.fail(p, "tag file not covered by tagmanifest-sha256.txt")
    for p in sorted(set(tagm) - set(files)):
        t.fail(p, "listed in tagmanifest-sha256.txt but missing")
    for p in sorted(set(tagm) & set(files)):
        if c.sha256[p] != tagm[p]:
            t.fail(p, "sha256 differs from tagmanifest-sha256.txt (a manifest was edited)", expected=tagm[p],
                   found=c.sha256[p])
    oxum = _bag_info(files["bag-info.txt"]).get("Payload-Oxum")
    actual = f"{sum(len(files[p]) for p in payload)}.{len(payload)}"
    if oxum != actual:
        t.fail("bag-info.txt", "Payload-Oxum does not match the payload", expected=actual, found=oxum)
    digest = hashlib.sha256(files["tagmanifest-sha256.txt"]).hexdigest()
    t.details.update(payload_files=len(payload), digest=digest)
    return digest


def _tier_documents(b: Bundle, t: Tier) -> None:
    raw = b.files.get("data/bundle.json")
    if raw is None:
        t.fail("data/bundle.json", "missing bundle metadata")
        return
    try:
        meta = jsonio.loads_strict(raw, "data/bundle.json")
    except UnreadableInputError as exc:
        t.fail("data/bundle.json", exc.message)
        return
    for p in validate.schema_problems("bundle", meta):
        t.fail("data/bundle.json", p.split(": ", 2)[-1], path=p.split(": ")[1] if ": " in p else None)
    if t.status == "FAIL":
        return
    b.meta = meta
    docs = {}
    listed = [(rel, schema.split("/", 1)[1]) for rel, schema in sorted(meta["documents"].items())]
    for rel, name in listed + [("claims.json", "claims")]:
        data = b.files.get(f"data/{rel}")
        if data is None:
            t.fail(f"data/{rel}", "document listed in bundle.json is missing" if name != "claims" else "missing")
            continue
        try:
            doc = jsonio.loads_strict(data, f"data/{rel}")
        except UnreadableInputError as exc:
            t.fail(f"data/{rel}", exc.message)
            continue
        for p in validate.schema_problems(name, doc):
            _, path, msg = (p.split(": ", 2) + ["", ""])[:3]
            t.fail(f"data/{rel}", msg or p, path=path or None)
            if "unsupported version" in p:
                t.details["unknown_version"] = True
        docs[name] = doc
    files = {k[len("data/"):]: v for k, v in b.files.items() if k.startswith("data/")}
    results_docs = {n: d for n, d in docs.items() if n != "claims"}
    from kbrepro.bundle.make import DOC_PATHS

    for p in validate.consistency_problems(results_docs, files, file_hashes=False):  # tier 4 checks the files
        doc_file, rest = p.split(": ", 1)
        path, _, msg = rest.partition(": ")
        t.fail("data/" + DOC_PATHS.get(doc_file[: -len(".json")], doc_file), msg or rest,
               path=path if path.startswith("$") else None)
    b.documents = docs
    t.details["documents"] = sorted(docs)


def _tier_provenance(b: Bundle, t: Tier) -> None:
    own_lock = load_lock(manifests.path("kernelbench.lock.json"))
    kb = b.meta.get("kernelbench", {})
    lock_raw = b.files.get("data/" + kb.get("lock_file", "inputs/kernelbench/kernelbench.lock.json"))
    if lock_raw is None:
        t.fail("data/inputs/kernelbench/kernelbench.lock.json", "the bundle carries no KernelBench lock")
    else:
        try:
            blk = jsonio.loads_strict(lock_raw, "kernelbench.lock.json")
        except UnreadableInputError as exc:
            blk = {}
            t.fail("data/inputs/kernelbench/kernelbench.lock.json", exc.message)
        if blk.get("commit") != own_lock.commit:
            t.fail("data/inputs/kernelbench/kernelbench.lock.json", "KernelBench commit differs from the verifier's lock",
                   expected=own_lock.commit, found=blk.get("commit"))
        for rel, h in (blk.get("files") or {}).items():
            if own_lock.files.get(rel) not in (None, h):
                t.fail("data/inputs/kernelbench/kernelbench.lock.json", f"{rel}: hash differs from the verifier's lock",
                       expected=own_lock.files.get(rel), found=h)
    run_kb = (b.documents.get("run") or {}).get("kernelbench") or {}
    if run_kb.get("commit") and run_kb["commit"] != own_lock.commit:
        t.fail("data/results/run.json", "the run used another KernelBench commit", path="$.kernelbench.commit",
               expected=own_lock.commit, found=run_kb["commit"])
    included = [p for p in b.files if p.startswith("data/inputs/kernelbench/") and not p.endswith("kernelbench.lock.json")]
    for p in included:
        rel = p[len("data/inputs/kernelbench/"):]
        want = own_lock.files.get(rel)
        got = hashlib.sha256(b.files[p]).hexdigest()
        if want is None:
            t.fail(p, "KernelBench file not in the verifier's lock")
        elif want != got:
            t.fail(p, "KernelBench file differs from the verifier's lock", expected=want, found=got)
    if not included:
        msg = "the bundle carries no KernelBench task files"
        if b.meta.get("source") == "measured":
            t.fail("data/inputs/kernelbench", msg + " although it was measured")
        else:
            t.notes.append(msg + f" ({kb.get('reason') or 'imported results'})")
    comp = b.documents.get("compile") or {}
    src = comp.get("source") or {}
    src_path = f"data/inputs/kernels/{src.get('file')}" if src.get("file") else None
    if src_path and src_path in b.files:
        got = hashlib.sha256(b.files[src_path]).hexdigest()
        if got != src.get("sha256"):
            t.fail(src_path, "kernel source differs from the compile records", expected=src.get("sha256"), found=got)
        own = kc.SOURCE_PATH.parent / src["file"]
        known = own.is_file() and hashlib.sha256(own.read_bytes()).hexdigest() == got
        t.details["kernel_source_known"] = known
        b.kernel_source_known = known
        if not known:
            t.notes.append(f"kernel source {src['file']} differs from this verifier's kernels/{src['file']}: "
                           "replay will not execute it without --trust-bundle-code")
    elif b.meta.get("source") == "measured":
        t.fail(src_path or "data/inputs/kernels", "the bundle carries no kernel source")
    else:
        t.details["kernel_source_known"] = False
        t.notes.append("no kernel source in the bundle (imported results)")
    for i, v in enumerate(comp.get("variants", [])):
        name = v.get("name")
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
        expected = bool(v.get("expected_ftz"))
        says = {}
        w = ev.get("witness") or {}
        if "flushes" in w:
            says["witness"] = bool(w["flushes"])
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
        agrees = all(s == expected for s in says.values()) if says else None
        if not says:
            t.fail("data/results/compile.json", f"{name}: no FTZ evidence (no witness, PTX or SASS)",
                   path=f"$.variants[{i}].ftz_evidence")
        elif not agrees:
            derived = (w.get("derived_from") and f"; the witness is derived from {w['derived_from']}") or ""
            t.fail("data/results/compile.json",
                   f"{name}: FTZ evidence contradicts the variant (name promises ftz={str(expected).lower()}; "
                   + ", ".join(f"{k} says ftz={str(s).lower()}" for k, s in says.items()) + f"{derived}). The "
                   "binary that ran did not have the FTZ mode its name claims, so results labelled with this "
                   "variant do not show what they say (a known cause: NVRTC's compile cache, see the README)",
                   path=f"$.variants[{i}].ftz_evidence", expected=expected, found=says)
        if ev.get("agrees") is not None and agrees is not None and ev["agrees"] != agrees:
            t.fail("data/results/compile.json", f"{name}: recorded 'agrees' does not follow from the evidence",
                   path=f"$.variants[{i}].ftz_evidence.agrees", expected=agrees, found=ev["agrees"])
    by_sha: dict[str, set] = {}
    for v in comp.get("variants", []):
        for key in ("cubin", "cubin_complete"):
            ref = v.get(key)
            if isinstance(ref, dict) and ref.get("sha256"):
                by_sha.setdefault(ref["sha256"], set()).add((v.get("name"), bool(v.get("expected_ftz"))))
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
    from kbrepro.bundle.scrub import _HOME, _UUID

    for p in ("data/environment.json", "data/logs/run.log"):
        text = b.files.get(p, b"").decode("utf-8", "replace")
        leaks = [m.group(0) for m in _UUID.finditer(text)] + [m.group(0) for m in _HOME.finditer(text)]
        if leaks:
            t.fail(p, "identifying strings were not scrubbed", found=sorted(set(leaks))[:5])


def _tier_claims(b: Bundle, t: Tier) -> None:
    spec_ref = b.meta.get("claims", {})
    raw = b.files.get(f"data/{spec_ref.get('file')}")
    if raw is None:
        t.fail(f"data/{spec_ref.get('file')}", "claims spec missing")
        return
    try:
        spec = claims_mod.parse_spec(raw, spec_ref.get("file", "claims"))
    except ReproError as exc:
        t.fail(f"data/{spec_ref.get('file')}", exc.message)
        return
    got = hashlib.sha256(raw).hexdigest()
    if spec_ref.get("sha256") != got:
        t.fail(f"data/{spec_ref.get('file')}", "claims spec differs from the sha256 bundle.json records",
               expected=spec_ref.get("sha256"), found=got)
    recorded = b.documents.get("claims") or {}
    if (recorded.get("spec") or {}).get("sha256") not in (None, got):
        t.fail("data/claims.json", "claims.json was evaluated from another claims spec",
               expected=got, found=(recorded.get("spec") or {}).get("sha256"))
    docs = {n: d for n, d in b.documents.items() if n != "claims"}
    recomputed = claims_mod.evaluate(spec, docs, source="recorded (re-evaluated by the verifier)")
    for msg in claims_mod.compare_verdicts(recorded, recomputed):
        t.fail("data/claims.json", msg)
    own_spec, own_raw = claims_mod.load_spec()
    t.details["spec_matches_verifier"] = got == hashlib.sha256(own_raw).hexdigest()
    if not t.details["spec_matches_verifier"] and own_spec.get("study") == spec.get("study"):
        # claims this verifier defines differently are judged by its own definition too: a bundle
        # must not pass by loosening a threshold
        theirs = {c["id"]: c for c in spec["claims"]}
        ours = {c["id"]: c for c in own_spec["claims"]}
        changed = sorted(i for i in set(theirs) & set(ours) if theirs[i] != ours[i])
        if changed:
            own_eval = {c["id"]: c for c in claims_mod.evaluate(own_spec, docs, source="verifier's own spec")["claims"]}
            new_eval = {c["id"]: c for c in recomputed["claims"]}
            for cid in changed:
                if own_eval[cid]["verdict"] != new_eval[cid]["verdict"]:
                    t.fail(f"data/{spec_ref.get('file')}",
                           f"claim {cid} is defined differently from this verifier's spec and gives "
                           f"{new_eval[cid]['verdict']!r} where the verifier's definition gives {own_eval[cid]['verdict']!r}")
                else:
                    t.notes.append(f"claim {cid} is defined differently from this verifier's spec; same verdict")
        for cid in sorted(set(ours) - set(theirs)):
            t.notes.append(f"claim {cid} of this verifier's spec is not in the bundle")
    report = b.files.get("data/REPORT.md")
    if report is None:
        t.fail("data/REPORT.md", "the bundle has no REPORT.md")
    else:
        shown = dict(re.findall(r"^\| (\S+) \| \*\*(holds|fails|inconclusive|not_comparable)\*\* \|",
                                report.decode("utf-8", "replace"), re.MULTILINE))
        for c in recomputed["claims"]:
            if shown.get(c["id"]) != c["verdict"]:
                t.fail("data/REPORT.md", f"claim {c['id']}: the report shows {shown.get(c['id'])!r}, "
                       f"the data give {c['verdict']!r}")
    t.details["verdicts"] = {c["id"]: c["verdict"] for c in recomputed["claims"]}
    t.details["recomputed"] = recomputed


# ---------------------------------------------------------------------------------- replay


def environment_diff(recorded: Mapping, here: Mapping) -> list[dict]:
    """Field by field: recorded vs here, with ``bits`` True for fields that can change bits."""
    rows = []
    rf, hf = recorded.get("fields", {}), here.get("fields", {})
    for k in sorted(set(rf) | set(hf)):
        if k.startswith("clocks_"):
            continue
        a = (rf.get(k) or {}).get("value")
        c = (hf.get(k) or {}).get("value")
        rows.append({"field": k, "recorded": a, "here": c, "same": a == c, "bits": k in fingerprint.BIT_RELEVANT})
    return rows


def _index_cases(doc: Mapping) -> dict:
    return {(c["case"]["task"], c["case"]["seed"], c["case"]["distribution"]): c["checks"]
            for c in doc.get("full_program", [])}


def compare_replay(recorded: Mapping[str, Mapping], replayed: Mapping[str, Mapping], same_toolchain: bool,
                   ratio_tolerance: float) -> tuple[list[dict], dict]:
    """Compare recorded and replayed documents. Returns ``(problems, details)``."""
    from kbrepro.harness import stats

    problems: list[dict] = []
    details: dict = {"cases_compared": 0, "bit_counts_compared": same_toolchain}
    rc, pc = _index_cases(recorded.get("correctness", {})), _index_cases(replayed.get("correctness", {}))
    for key in sorted(set(rc) & set(pc)):
        for v in sorted(set(rc[key]) & set(pc[key])):
            a, b = rc[key][v], pc[key][v]
            details["cases_compared"] += 1
            for pred in ("official", "legacy"):
                if (a.get(pred) or {}).get("pass") != (b.get(pred) or {}).get("pass"):
                    problems.append({"file": "correctness", "path": f"{key}/{v}/{pred}",
                                     "message": "verdict differs", "expected": (a.get(pred) or {}).get("pass"),
                                     "found": (b.get(pred) or {}).get("pass")})
            if same_toolchain and a.get("bit_identical_count") != b.get("bit_identical_count"):
                problems.append({"file": "correctness", "path": f"{key}/{v}/bit_identical_count",
                                 "message": "bit-identity count differs on the same GPU model and toolchain",
                                 "expected": a.get("bit_identical_count"), "found": b.get("bit_identical_count")})
    rw, pw = recorded.get("witness") or {}, replayed.get("witness") or {}
    if rw and pw and same_toolchain and rw.get("outputs") != pw.get("outputs"):
        problems.append({"file": "witness", "path": "$.outputs", "message": "witness bits differ",
                         "expected": rw.get("outputs"), "found": pw.get("outputs")})
    cubins = []
    r_comp = {v["name"]: v for v in (recorded.get("compile") or {}).get("variants", [])}
    for v in (replayed.get("compile") or {}).get("variants", []):
        r = r_comp.get(v["name"])
        if not r:
            continue
        comparable = r.get("nvrtc_version") == v.get("nvrtc_version") and r.get("arch") == v.get("arch")
        same = (r.get("cubin") or {}).get("sha256") == (v.get("cubin") or {}).get("sha256")
        cubins.append({"variant": v["name"], "comparable": comparable, "same": same if comparable else None})
        if comparable and not same:
            problems.append({"file": "compile", "path": v["name"], "message": "cubin sha256 differs with the same NVRTC and arch",
                             "expected": (r.get("cubin") or {}).get("sha256"), "found": (v.get("cubin") or {}).get("sha256")})
        if r.get("ftz_evidence", {}).get("witness", {}).get("flushes") != v.get("ftz_evidence", {}).get("witness", {}).get("flushes"):
            problems.append({"file": "compile", "path": v["name"], "message": "witness FTZ behaviour differs"})
    details["cubins"] = cubins
    ratios = []
    rb = {b["id"]: b for b in (recorded.get("timings") or {}).get("blocks", []) if b.get("rounds")}
    for b in (replayed.get("timings") or {}).get("blocks", []):
        r = rb.get(b["id"])
        if not r or not b.get("rounds"):
            continue
        base = next((a for a in ("eager", "eager_tail", "nvrtc_ftz_true") if a in b["arms"] and a in r["arms"]), None)
        if not base:
            continue
        for arm in b["arms"]:
            if arm == base or arm not in r["arms"]:
                continue
            x = stats.summary(stats.paired_ratios(r, arm, base))["median_ms"]
            y = stats.summary(stats.paired_ratios(b, arm, base))["median_ms"]
            ok = abs(y / x - 1) <= ratio_tolerance
            ratios.append({"block": b["id"], "ratio": f"{arm}/{base}", "recorded": x, "replayed": y, "within": ok})
    details["timing_ratios"] = ratios
    outside = [r for r in ratios if not r["within"]]
    details["timing_ratios_outside_tolerance"] = len(outside)
    return problems, details


def _tier_replay(b: Bundle, t: Tier, *, profile: str | None, trust: bool, kernelbench: str | None,
                 ratio_tolerance: float, keep: Path | None, progress: Callable | None) -> None:
    import torch

    if not torch.cuda.is_available():
        raise EnvironmentUnavailableError("replay needs a CUDA GPU and none is visible",
                                          "run verify_bundle.py --level static on this machine, or replay on a GPU")
    try:
        import cupy  # noqa: F401
    except Exception as exc:
        raise EnvironmentUnavailableError(f"replay needs CuPy: {exc}", "pip install 'kbrepro[cuda12]' or '[cuda13]'") from exc
    from kbrepro.harness.run import run_study
    from kbrepro.harness.study import load_study

    run = b.documents.get("run") or {}
    kernel_source = None
    if not b.kernel_source_known:
        src = (b.documents.get("compile") or {}).get("source") or {}
        bundled = b.files.get(f"data/inputs/kernels/{src.get('file')}")
        if not trust or bundled is None:
            t.fail(None, "replay refused: the bundle's kernel source is not the verifier's own"
                   + ("" if bundled is None else "; pass --trust-bundle-code to execute it"))
            return
        kernel_source = bundled
        t.notes.append("executing the bundle's own kernel source (--trust-bundle-code)")
    study_file = b.root / "data" / b.meta["study"]["file"]
    prof = profile or run.get("study", {}).get("profile") or "full"
    study = load_study(study_file, prof)
    out = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="kbrepro-replay-"))
    try:
        run_study(study, out, kernelbench=kernelbench, progress=progress, kernel_source=kernel_source)
        from kbrepro.bundle.make import OUR_DOCUMENTS

        replayed = {n: jsonio.read_json(out / f"{n}.json") for n in OUR_DOCUMENTS if (out / f"{n}.json").is_file()}
    finally:
        if not keep:
            shutil.rmtree(out, ignore_errors=True)
    env_rows = environment_diff(b.documents.get("environment", {}), replayed["environment"])
    same = all(r["same"] for r in env_rows if r["field"] in ("gpu_name", "nvrtc_version", "torch_version",
                                                                 "driver_version", "cupy_distributions"))
    problems, details = compare_replay(b.documents, replayed, same, ratio_tolerance)
    for p in problems:
        t.fail(p["file"], p["message"], path=p.get("path"), expected=p.get("expected"), found=p.get("found"))
    spec = claims_mod.parse_spec(b.files[f"data/{b.meta['claims']['file']}"])
    replay_claims = claims_mod.evaluate(spec, replayed, source="replayed on this GPU")
    recorded_claims = {c["id"]: c["verdict"] for c in (b.documents.get("claims") or {}).get("claims", [])}
    details["claims"] = [{"id": c["id"], "recorded": recorded_claims.get(c["id"]), "replayed": c["verdict"],
                          "sentence": c["sentence"]} for c in replay_claims["claims"]]
    details["environment"] = env_rows
    details["same_gpu_and_toolchain"] = same
    details["profile"] = prof
    t.details.update(details)
    if not same:
        t.notes.append("different GPU model or toolchain: bit counts and cubin hashes are reported, not required to match")


# ---------------------------------------------------------------------------------- driver


def verify_archive(path: Path, *, level: str = "auto", profile: str | None = None, trust: bool = False,
                   kernelbench: str | None = None, ratio_tolerance: float = 0.05, expect_digest: str | None = None,
                   keep_extracted: Path | None = None, keep_replay: Path | None = None,
                   progress: Callable | None = None) -> Report:
    """Run the tiers up to ``level`` (fast, static, replay, auto) on ``path``.

    Returns a :class:`Report` whose ``exit_code`` follows DESIGN.md section 6. Raises
    UsageError for a bad level, EnvironmentUnavailableError when ``level == "replay"`` and
    no GPU is present.
    """
    if level not in LEVELS:
        raise UsageError(f"unknown level {level!r}", f"use one of {', '.join(LEVELS)}")
    import tarfile

    if not hasattr(tarfile, "data_filter"):
        raise EnvironmentUnavailableError("this Python's tarfile has no extraction filters",
                                          "use Python 3.10.12+, 3.11.4+ or 3.12+")
    rep = Report(archive=Path(path).name, level=level)
    last = LEVELS[level]

    def tier(n: int) -> Tier:
        t = Tier(n, TIER_NAMES[n - 1])
        rep.tiers.append(t)
        return t

    def finish(code: int) -> Report:
        rep.exit_code = code
        rep.verdict = "PASS" if code == 0 else "FAIL"
        return rep

    if level == "replay":
        import torch

        if not torch.cuda.is_available():
            raise EnvironmentUnavailableError("replay needs a CUDA GPU and none is visible",
                                              "run verify_bundle.py --level static on this machine, or replay on a GPU")
    if not Path(path).is_file():
        raise UnreadableInputError(f"no archive at {path}", "check the path of the bundle (.tar or .tar.gz)")
    t = tier(1)
    t0 = time.perf_counter()
    try:
        contents = _tier_archive(Path(path), t)
    except UnreadableInputError as exc:
        t.fail(Path(path).name, exc.message + (f" ({exc.hint})" if exc.hint else ""))
        t.seconds = time.perf_counter() - t0
        return finish(3)
    t.seconds = time.perf_counter() - t0
    if t.status == "FAIL":
        return finish(3)
    rep.bundle_name = contents.top
    t = tier(2)
    t0 = time.perf_counter()
    rep.digest = _tier_manifest(contents, t)
    if expect_digest and rep.digest != expect_digest.lower():
        t.fail("tagmanifest-sha256.txt", "bundle digest differs from the one you expected", expected=expect_digest,
               found=rep.digest)
    t.seconds = time.perf_counter() - t0
    failed = t.status == "FAIL"
    if last <= 2:
        return finish(1 if failed else 0)
    tmp = Path(keep_extracted) if keep_extracted else Path(tempfile.mkdtemp(prefix="kbrepro-verify-"))
    try:
        root = arc.extract_checked(Path(path), tmp, contents)
        b = Bundle(name=contents.top or "", files=contents.files, root=root)
        t = tier(3)
        t0 = time.perf_counter()
        _tier_documents(b, t)
        t.seconds = time.perf_counter() - t0
        if t.details.get("unknown_version"):
            return finish(3)
        failed |= t.status == "FAIL"
        if t.status == "FAIL":
            for n in (4, 5):
                tier(n).status = "SKIP"
            if last >= 6:
                tier(6).status = "SKIP"
            return finish(1)
        for n, fn in ((4, _tier_provenance), (5, _tier_claims)):
            t = tier(n)
            t0 = time.perf_counter()
            fn(b, t)
            t.seconds = time.perf_counter() - t0
            failed |= t.status == "FAIL"
        if last >= 6:
            t = tier(6)
            import torch

            if not torch.cuda.is_available() and level == "auto":
                t.status = "SKIP"
                t.notes.append("no CUDA GPU here; replay skipped (--level replay on a GPU machine runs it)")
            elif failed:
                t.status = "SKIP"
                t.notes.append("earlier tiers failed; an untrusted bundle is not replayed")
            else:
                t0 = time.perf_counter()
                _tier_replay(b, t, profile=profile, trust=trust, kernelbench=kernelbench,
                             ratio_tolerance=ratio_tolerance, keep=keep_replay, progress=progress)
                t.seconds = time.perf_counter() - t0
                failed |= t.status == "FAIL"
        return finish(1 if failed else 0)
    finally:
        if not keep_extracted:
            shutil.rmtree(tmp, ignore_errors=True)
