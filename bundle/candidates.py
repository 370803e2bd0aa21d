"""Bundles of KernelBench candidates (``ModelNew`` files): run, default claims, report, pack.

No binding to write: a candidate bundle is the candidate files, the pinned task files they
solve, what :func:`kbrepro.harness.candidate.run_candidate` observed, the claims and the
report. Layout under ``data/`` (the same layout a results folder has, so
``make_bundle.py --from-results`` packs either):

* ``inputs/candidates/<name>.py`` and ``inputs/kernelbench/<pin path>`` (the task files,
  hashed by the product's pin ``manifests/kernelbench.pin.json``), ``inputs/claims.yaml``;
* ``results/candidates.json`` (schema ``kbrepro/candidates``), ``results/environment.json``;
* ``provenance/<name>/...`` (extension build files, ``.so``, SASS, Triton cache);
* ``claims.json``, ``REPORT.md``, ``bundle.json`` (schema ``kbrepro/candidate-bundle``).

The default claims (:func:`default_claims`) are a function of the results alone, so the
verifier writes them again with its own code and compares; a user's extra claims
(``--claims``) are appended after them and judged by the same evaluator.
"""
from __future__ import annotations

import dataclasses
import json
import re
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from kbrepro import inert
from kbrepro.bundle import candidate_records
from kbrepro.bundle import claims as claims_mod
from kbrepro.bundle import pack, scrub
from kbrepro.errors import InvalidResultsError, OutputPathError, UnreadableInputError, UsageError
from kbrepro.harness import jsonio

KIND = "kernelbench-candidates"
FORMAT = "kbrepro-candidate-bundle"
#: the candidate bundle format this packer writes: 3 adds the RO-Crate metadata file and,
#: when signed, the attestations (as study format 4 does); 2 is the format before them
FORMAT_VERSION = 3
FORMAT_VERSIONS = (2, 3)
CRATE_SINCE = 3
DOCUMENTS = {"results/candidates.json": "kbrepro/candidates", "results/environment.json": "kbrepro/environment",
             "claims.json": "kbrepro/claims"}
NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,39}$")
COMPILED = ("compile_default", "compile_max_autotune")
DIGEST_SUFFIX = ".sha256-digest"
#: the most files and bytes a results folder of candidates may hold
MAX_FILES = 2000
#: provenance files read as text and scrubbed before packing (sources, build scripts, metadata)
TEXT_SUFFIXES = (".ninja", ".cu", ".cpp", ".cuh", ".h", ".json", ".source", ".ptx", ".llir", ".ttir", ".ttgir",
                 ".txt", ".py", ".sass")
MAX_BYTES = 1 << 30


@dataclass(frozen=True)
class MadeCandidates:
    """What packing wrote: archive ``path``, bundle ``name``, ``digest``, ``size_bytes``,
    ``claims_summary`` (verdict -> count), ``caught`` (candidate -> names of failed checks),
    ``pack_seconds`` and ``notes``."""

    path: Path
    name: str
    digest: str
    size_bytes: int
    claims_summary: dict
    caught: dict
    pack_seconds: float
    notes: tuple = ()
    #: the key id of the key that signed the bundle (None: not signed)
    signed_by: str | None = None


# ---------------------------------------------------------------------------------------------
# tasks and names


def task_path(arg: str, pin) -> str:
    """The pin path of a task argument: ``L/T`` (KernelBench level L, task T) or a path the
    pin holds (e.g. ``src/kernelbench/prompts/model_ex_add.py``). Raises UsageError."""
    m = re.fullmatch(r"(\d{1,2})/(\d{1,4})", arg.strip())
    if m:
        prefix = f"KernelBench/level{int(m.group(1))}/{int(m.group(2))}_"
        hits = [p for p in pin.files if p.startswith(prefix) and p.endswith(".py")]
        if len(hits) == 1:
            return hits[0]
        raise UsageError(f"KernelBench at the pinned commit has no level {m.group(1)} task {m.group(2)}",
                         "give --task LEVEL/TASK of an existing task, e.g. 1/88")
    from kbrepro.bundle.verify_candidate import TASK_PATH

    if arg in pin.files and TASK_PATH.match(arg):
        return arg
    raise UsageError(f"--task {arg!r} is neither LEVEL/TASK nor a Python file of the KernelBench pin",
                     "use e.g. --task 1/88 or --task src/kernelbench/prompts/model_ex_add.py")


def read_sources(paths) -> list[bytes]:
    """The bytes of each candidate file, in order. Raises UnreadableInputError (3) naming the
    first that cannot be read."""
    out = []
    for p in paths:
        try:
            out.append(Path(p).read_bytes())
        except OSError as exc:
            raise UnreadableInputError(f"cannot read candidate {p}: {exc.strerror}", "check the path") from exc
    return out


def candidate_names(paths: Sequence[Path]) -> list[str]:
    """Bundle-safe, distinct names from the candidate file names (stem, non-word characters
    replaced by ``_``, a numeric suffix where two collide)."""
    out: list[str] = []
    for p in paths:
        base = re.sub(r"[^A-Za-z0-9_]", "_", Path(p).stem)[:32] or "candidate"
        if not base[0].isalpha():
            base = "c_" + base
        name, i = base, 2
        while name in out:
            name, i = f"{base}_{i}", i + 1
        out.append(name)
    return out


def safe_relpath(path: str) -> str:
    """A build file's path as a bundle path: each part starts with a letter or digit (``x``
    put in front of ``.ninja_log`` or ``__triton_launcher...``), other characters than
    letters, digits, ``.``, ``_`` and ``-`` become ``_``."""
    parts = []
    for part in path.split("/"):
        part = re.sub(r"[^A-Za-z0-9._-]", "_", part) or "x"
        parts.append(part if part[0].isalnum() else "x" + part)
    return "/".join(parts)


# ---------------------------------------------------------------------------------------------
# default claims


def _q(name: str) -> str:
    return f"candidates.candidates[?name=='{name}'] | [0]"


def best_compiled(record: Mapping) -> str | None:
    """The compiled baseline (``torch.compile`` default or max-autotune) with the lowest median
    time in the candidate's warm-L2 block, among those whose output passed the official check."""
    blocks = [b for b in record.get("blocks") or [] if isinstance(b, dict) and b.get("l2") == "warm"]
    base = (record.get("timing") or {}).get("baselines") or {}
    if not blocks:
        return None
    best = None
    for arm in COMPILED:
        if arm not in (blocks[0].get("arms") or []):
            continue
        if ((base.get(arm) or {}).get("compare") or {}).get("official", {}).get("pass") is not True:
            continue
        ts = [r["times_ms"][arm] for r in blocks[0].get("rounds") or [] if arm in (r.get("times_ms") or {})]
        if ts and (best is None or statistics.median(ts) < best[1]):
            best = (arm, statistics.median(ts))
    return best[0] if best else None


def default_claims(doc: Mapping) -> dict:
    """The default claims spec (schemas/claims-spec.schema.json) of a ``candidates.json``
    document: per candidate (``K<i>``), in this order: (a) it passes every named check that can
    decide; (b) it passes the official check on every case, re-drawn weights and extra shapes
    included; (c) it is faster than eager PyTorch (warm L2, paired per-round ratios, 95%
    bootstrap interval of the median); (d) it is faster than the fastest correct compiled
    baseline; (e) the same against eager with a cold L2; (f) bit identity, phrased as the data
    say. (c) to (f) require (a) and (b): a speed-up of a candidate that was caught means nothing."""
    claims = []
    pred = doc.get("predicate") or {}
    atol, rtol = pred.get("atol"), pred.get("rtol")
    for i, rec in enumerate(doc.get("candidates") or []):
        n = rec["name"]
        k = f"K{i + 1}"
        q = _q(n)
        claims.append({"id": f"{k}a", "sentence": f"{n} passes every named check against cheating that can decide "
                       f"({len((rec.get('verdicts') or []))} checks; one that cannot decide is listed, not counted).",
                       "checks": [{"kind": "all_equal", "select": f"{q}.verdicts[?passed != null].passed",
                                   "equals": True}]})
        shapes = any(c.get("kind") == "extra_shape" for c in (rec.get("observations") or {}).get("cases") or []
                     if isinstance(c, dict))
        claims.append({"id": f"{k}b", "sentence": f"{n} passes torch.allclose(reference, candidate, atol={atol:g}, "
                       f"rtol={rtol:g}) on every case: seeds x input distributions, re-drawn weights"
                       + (" and extra shapes." if shapes else " (no extra shape: the task has no batch size to vary)."),
                       "checks": [{"kind": "all_equal", "select": f"{q}.verdicts[?(name == 'official_allclose' || "
                                   "name == 'redrawn_weights_correct' || name == 'other_shapes_correct') && "
                                   "passed != null].passed", "equals": True}]})
        arms = set()
        for b in rec.get("blocks") or []:
            arms.update(b.get("arms") or [])
        req = [f"{k}a", f"{k}b"]
        if "eager" in arms:
            claims.append({"id": f"{k}c", "sentence": f"{n} is faster than the task's PyTorch model run eagerly "
                           "(warm L2).", "requires": req,
                           "checks": [{"kind": "paired_ratio", "blocks": f"{q}.blocks[?l2 == 'warm']",
                                       "numerators": ["candidate"], "denominator": "eager", "test": "faster"}]})
        best = best_compiled(rec)
        if best:
            claims.append({"id": f"{k}d", "sentence": f"{n} is faster than torch.compile ({best.split('_', 1)[1]}), the "
                           "fastest correct compiled baseline on this GPU (warm L2).", "requires": req,
                           "checks": [{"kind": "paired_ratio", "blocks": f"{q}.blocks[?l2 == 'warm']",
                                       "numerators": ["candidate"], "denominator": best, "test": "faster"}]})
        if any(b.get("l2") == "cold" for b in rec.get("blocks") or []) and "eager" in arms:
            claims.append({"id": f"{k}e", "sentence": f"{n} is faster than eager PyTorch with a cold L2 (the flush "
                           "before every invocation is timed in both arms).", "requires": req,
                           "checks": [{"kind": "paired_ratio", "blocks": f"{q}.blocks[?l2 == 'cold']",
                                       "numerators": ["candidate"], "denominator": "eager", "test": "faster"}]})
        cases = [c for c in (rec.get("observations") or {}).get("cases") or [] if isinstance(c, dict)]
        same = bool(cases) and all((c.get("compare") or {}).get("bit_identical_count") ==
                                   (c.get("compare") or {}).get("element_count") for c in cases)
        sel = f"{q}.observations.cases[*].[compare.bit_identical_count == compare.element_count][]"
        claims.append({"id": f"{k}f", "requires": [f"{k}b"],
                       "sentence": f"{n} is bit-identical to PyTorch in every checked case." if same else
                       f"{n} is not bit-identical to PyTorch: at least one checked case differs in bits.",
                       "checks": [{"kind": "all_equal", "select": sel, "equals": True}] if same else
                       [{"kind": "compare", "select": f"[length({q}.observations.cases[?compare.bit_identical_count "
                                                      "!= compare.element_count])]", "op": ">=", "value": 1}]})
    return {"schema": "kbrepro/claims-spec", "schema_version": 1, "study": KIND,
            "bootstrap": {"level": 0.95, "resamples": 2000, "seed": 20261201}, "claims": claims}


def merge_claims(defaults: Mapping, extra: Mapping | None) -> dict:
    """The defaults, then the user's claims (ids must not collide). Raises UsageError."""
    spec = json.loads(json.dumps(defaults))
    if extra:
        ids = {c["id"] for c in spec["claims"]}
        clash = sorted(c["id"] for c in extra.get("claims", []) if c["id"] in ids)
        if clash:
            raise UsageError(f"claims {', '.join(clash)} of --claims collide with the default claims",
                             "give your claims other ids (the defaults are K<n><letter>)")
        spec["claims"] += list(extra.get("claims", []))
    return spec


def spec_yaml(spec: Mapping) -> bytes:
    """The claims spec as the bundle stores it (``inputs/claims.yaml``): canonical JSON, which
    is YAML, so that it reads back with the same parser as any claims file."""
    return jsonio.dumps(spec).encode()


# ---------------------------------------------------------------------------------------------
# the report


def _fmt(x, d: int = 4) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{d}g}"
    return str(x)


def _md(text) -> str:
    """A bundle string shown in REPORT.md: the one inertness rule (:func:`kbrepro.inert.md`)."""
    return inert.md(text)


def render_report(meta: Mapping, doc: Mapping, claims_doc: Mapping) -> str:
    """REPORT.md of a candidate bundle, from the packed documents only (the verifier renders
    it again and compares bytes)."""
    from kbrepro.harness import stats

    lines = [f"# {meta['name']}", "", f"KernelBench candidates, profile `{meta.get('profile')}`; KernelBench pinned at "
             f"`{(meta.get('kernelbench') or {}).get('commit')}`; official check `torch.allclose(reference, candidate, "
             f"atol={doc['predicate']['atol']:g}, rtol={doc['predicate']['rtol']:g})`.", ""]
    caught = {r["name"]: [v["name"] for v in r.get("verdicts") or [] if v.get("passed") is False]
              for r in doc.get("candidates") or []}
    lines += ["## Verdict", ""]
    for r in doc.get("candidates") or []:
        bad = caught[r["name"]]
        lines.append(f"- **{r['name']}** ({_md(r['task'])}): " + ("passes every check that can decide" if not bad else
                                                                 "CAUGHT by " + ", ".join(bad)))
    from kbrepro.bundle import report

    # the claims the product writes from the results are its own; any other came with --claims
    own = frozenset(c["id"] for c in default_claims(doc)["claims"])
    lines += ["", report.claims_section(claims_doc, own).rstrip("\n")]
    for r in doc.get("candidates") or []:
        lines += ["", f"## {r['name']}", "", f"Task `{r['task']}` (sha256 `{r['task_sha256'][:16]}...`); candidate "
                  f"sha256 `{r['source_sha256'][:16]}...`; compile {_fmt(r.get('compile_seconds'), 3)} s, whole "
                  f"check {_fmt(r.get('seconds'), 3)} s; built with {_md(', '.join((r.get('provenance') or {}).get('built_with') or [])) or 'nothing we could trace'}.",
                  "", "| check | verdict | detail |", "|---|---|---|"]
        for v in r.get("verdicts") or []:
            mark = {True: "pass", False: "**FAIL**", None: "undecided"}[v.get("passed")]
            lines.append(f"| {v['name']} | {mark} | {_md(v.get('detail', ''))} |")
        for b in r.get("blocks") or []:
            lines += ["", f"Timing, {b.get('l2')} L2 ({len(b.get('rounds') or [])} rounds x "
                      f"{(b.get('protocol') or {}).get('invocations_per_pair')} invocations, CUDA events; median and IQR "
                      "in ms per invocation):", "", "| arm | median | IQR | candidate / arm |", "|---|---|---|---|"]
            for arm in b.get("arms") or []:
                s = stats.summary(stats.arm_samples(b, arm))
                ratio = "-"
                if arm != "candidate":
                    rs = stats.paired_ratios(b, "candidate", arm)
                    ratio = _fmt(statistics.median(rs)) if rs else "-"
                lines.append(f"| {arm} | {_fmt(s['median_ms'])} | {_fmt(s.get('iqr_ms'))} | {ratio} |")
    lines += where_cases_ran(doc)
    lines += ["", "What these checks cannot catch is listed in the README (section on candidates).", ""]
    return "\n".join(lines)


def where_cases_ran(doc: Mapping) -> list[str]:
    """REPORT.md's section "Where each case ran" for a sharded run (``doc`` holds ``cases``;
    none otherwise): one row per case in plan order: id, candidate, task, status, the host's
    and GPU's hashes (first 12 hex), GPU name, driver, SM / memory clocks (MHz) when the case
    started, the engine and its worker, and a failed case's error. Every value is made inert
    (:func:`_md`). The packer and the verifier render it with this one function."""
    cs = [c for c in doc.get("cases") or [] if isinstance(c, dict)]
    if not cs:
        return []

    def h(v):
        return f"`{str(v)[:12]}`" if isinstance(v, str) and v else "-"

    hosts = {(c.get("ran_on") or {}).get("host_sha256") for c in cs} - {None}
    gpus = {(c.get("ran_on") or {}).get("gpu_uuid_sha256") for c in cs} - {None}
    failed = [c for c in cs if c.get("status") != "done"]
    out = ["", "## Where each case ran", "",
           f"{len(cs)} cases (candidate x task x profile seeds x variant, each run in its own process), "
           f"{len(cs) - len(failed)} done, {len(failed)} failed; {len(hosts)} host(s), {len(gpus)} GPU(s). Hosts "
           "and GPUs are shown as the first 12 hex digits of the sha256 of their name and UUID.", "",
           "| case | candidate | task | status | host | GPU | GPU name | driver | SM / memory MHz | engine |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for c in cs:
        ro = c.get("ran_on") or {}
        clocks = "-" if ro.get("sm_clock_mhz") is None else f"{ro.get('sm_clock_mhz')} / {_fmt(ro.get('memory_clock_mhz'))}"
        status = "done" if c.get("status") == "done" else "**FAILED**"
        engine = _md(f"{ro.get('engine')} {ro.get('worker') or ''}".strip()) if ro else "-"
        out.append(f"| `{_md(c.get('id'))}` | {_md(c.get('candidate'))} | {_md(c.get('task'))} | {status} | "
                   f"{h(ro.get('host_sha256'))} | {h(ro.get('gpu_uuid_sha256'))} | {_md(ro.get('gpu_name') or '-')} | "
                   f"{_md(ro.get('driver_version') or '-')} | {clocks} | {engine} |")
    for c in failed:
        out += ["", f"Case `{_md(c.get('id'))}` ({_md(c.get('candidate'))}) failed: {_md(c.get('error'))}"]
    return out


# ---------------------------------------------------------------------------------------------
# running


def _utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def run_candidates(items: Sequence[tuple[Path, str]], *, profile: str, kernelbench: str | None,
                   results_dir: Path, progress: Callable[[str], None] | None = None,
                   extra_shapes: tuple = (), sizes: Mapping[str, int] | None = None, device: str = "cuda",
                   names: Sequence[str] | None = None) -> Path:
    """Check and time every ``(candidate file, task argument)`` on this GPU and write a
    results folder (the bundle's ``data/`` layout) to ``results_dir``. ``names`` (one per
    item) overrides the names :func:`candidate_names` derives from the file names (a case of
    a sharded run keeps the name its plan gave it). Raises UsageError (bad task or profile),
    KernelBenchPinError (checkout differs from the pin), UnreadableInputError."""
    import torch

    from kbrepro.harness import candidate as hc
    from kbrepro.harness import extras, fingerprint
    from kbrepro.harness.checks import PREDICATES
    from kbrepro.harness.kernelbench import KernelBenchCheckout, load_pin, resolve_checkout

    say = progress or (lambda m: None)
    if profile not in hc.PROFILES:
        raise UsageError(f"unknown candidate profile {profile!r}", f"use one of {', '.join(hc.PROFILES)}")
    cfg = hc.PROFILES[profile]
    if extra_shapes:
        cfg = hc.with_overrides(cfg, extra_shapes=tuple(tuple(sorted(s.items())) for s in extra_shapes))
    if sizes:
        cfg = hc.with_overrides(cfg, sizes=tuple(sorted(dict(sizes).items())))
    pin = load_pin()
    paths = [task_path(t, pin) for _, t in items]
    checkout = KernelBenchCheckout(resolve_checkout(kernelbench), pin)
    checkout.verify(sorted(set(paths) | {"LICENSE"}))
    names = list(names) if names is not None else candidate_names([p for p, _ in items])
    if len(names) != len(items) or len(set(names)) != len(names) or not all(NAME_RE.match(n) for n in names):
        raise UsageError("candidate names must be distinct bundle-safe names, one per candidate",
                         "let the product derive them from the file names")
    srcs = read_sources([p for p, _ in items])
    results_dir = Path(results_dir)
    started = _utc()
    env = fingerprint.collect("start")
    if device.startswith("cuda"):
        blk = extras.copy_bandwidth(None)
        gbps = extras.copy_gbps(blk)
        say(f"copy bandwidth {gbps:.0f} GB/s")
    else:  # a CPU run (tests): no timing, no bandwidth
        blk, gbps = None, None
    records = []
    files: dict[str, bytes] = {}
    for name, src, tp in zip(names, srcs, paths):
        task_src = checkout.read_verified(tp)
        spec = hc.CandidateSpec(name, src, tp, task_src)
        work = results_dir / "work" / name
        rec = hc.run_candidate(spec, cfg, work, device=device, progress=say, bandwidth_gbps=gbps)
        rec["file"] = f"inputs/candidates/{name}.py"
        records.append(rec)
        files[rec["file"]] = src
        files[f"inputs/kernelbench/{tp}"] = task_src
        prov = Path(rec.pop("provenance_dir"))
        for f in (rec["provenance"].get("files") or []):
            if f.get("copied"):
                f["bundle_path"] = f"provenance/{name}/{safe_relpath(f['path'])}"
                if f["bundle_path"] in files:  # two build files one bundle path: keep the first, list the other
                    f.update(copied=False, bundle_path=None)
                    del f["bundle_path"]
                    continue
                files[f["bundle_path"]] = scrub_provenance_file(f, (prov / f["path"]).read_bytes(),
                                                                [work, results_dir])
        for b in rec["provenance"].get("binaries") or []:
            if b.get("sass_file"):
                b["sass_file"] = f"provenance/{name}/{b['sass_file']}"
                files[b["sass_file"]] = (prov / b["sass_file"].split("/", 2)[2]).read_bytes()
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    files["inputs/kernelbench/LICENSE"] = checkout.read_verified("LICENSE")
    env = fingerprint.add_clocks(env, "end")
    doc = {"schema": "kbrepro/candidates", "schema_version": 1, "kind": KIND, "profile": profile,
           "device": "cuda" if device.startswith("cuda") else "cpu",
           "started_utc": started, "finished_utc": _utc(),
           "predicate": {"official": "allclose", **PREDICATES["allclose"], "atol": cfg.atol, "rtol": cfg.rtol},
           "kernelbench": {"commit": pin.commit, "repository": pin.repository},
           "bandwidth": {"gbps": gbps, "block": blk} if blk else {"gbps": None, "reason": "no GPU"}, "candidates": records}
    files["results/candidates.json"] = jsonio.dumps(doc).encode()
    files["results/environment.json"] = jsonio.dumps(env).encode()
    for rel, data in files.items():
        dst = results_dir / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        jsonio.atomic_write_bytes(dst, data)
    return results_dir


# ---------------------------------------------------------------------------------------------
# packing


def is_candidate_results(folder: Path) -> bool:
    """Whether ``folder`` is a results folder of candidates (it holds results/candidates.json,
    or the shard plan of a sharded run, ``shard.json``)."""
    try:
        return (Path(folder) / "results" / "candidates.json").is_file() or (Path(folder) / "shard.json").is_file()
    except OSError:
        return False


def _read_results(folder: Path) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    total = 0
    for top in ("inputs", "results", "provenance"):
        root = folder / top
        if not root.is_dir():
            continue
        for p in sorted(root.rglob("*")):
            if p.is_symlink():
                raise UnreadableInputError(f"{p.relative_to(folder)} is a symbolic link", "results hold plain files only")
            if not p.is_file():
                continue
            rel = p.relative_to(folder).as_posix()
            if rel == "inputs/claims.yaml":
                continue  # written anew by the packer
            data = p.read_bytes()
            total += len(data)
            out[rel] = data
            if len(out) > MAX_FILES or total > MAX_BYTES:
                raise UnreadableInputError(f"the results folder holds more than {MAX_FILES} files or {MAX_BYTES} bytes",
                                           "pack the folder run_candidates wrote, nothing else")
    return out


def scrub_provenance_file(rec: dict, data: bytes, folders: Sequence[Path]) -> bytes:
    """The bytes of a provenance file as packed, ``rec`` (its record) updated. Build files
    name the folders they were built in: the candidate's work folder and the results folder
    (``folders``, each resolved and as given), temporary and home folders, user and host names
    never leave the machine (bundle/scrub.py). Text files are scrubbed as text; binaries in
    place, with fillers of the same length. The built file's hash is kept as
    ``built_sha256``."""
    paths = [q for f in folders for q in (str(Path(f).resolve()), str(f))]
    if Path(rec["path"]).suffix in TEXT_SUFFIXES:
        clean = scrub.scrub_text(data.decode("utf-8", "replace"), extra_paths=paths).encode()
    else:
        clean = scrub.scrub_binary(data, paths)
    if clean != data:
        rec.update(built_sha256=rec.get("built_sha256", rec["sha256"]), sha256=pack.sha256_hex(clean),
                   bytes=len(clean), scrubbed=True)
    return clean


def caught(doc: Mapping) -> dict[str, list[str]]:
    """Candidate name -> names of its checks whose verdict is False."""
    return {r["name"]: [v["name"] for v in r.get("verdicts") or [] if v.get("passed") is False]
            for r in doc.get("candidates") or []}


def build_payload(files: Mapping[str, bytes], *, extra_claims: Mapping | None = None, extra_raw: bytes | None = None,
                  name: str | None = None, bundle_format: int = FORMAT_VERSION,
                  signing_key=None) -> tuple[pack.Bag, dict, dict, dict]:
    """The bag of a candidate results folder's files. Returns ``(bag, bundle metadata, claims
    document, candidates document)``. ``bundle_format`` 3 (the default) adds the RO-Crate file,
    2 writes the layout before it; ``signing_key`` (format 3) adds the signed attestations.
    Raises InvalidResultsError for results that fail their schema or whose recorded verdicts
    are not the ones their observations give; UsageError for a format it does not write."""
    from kbrepro import schemas
    from kbrepro.bundle.make import check_bundle_format, describe_and_sign

    check_bundle_format(bundle_format, signing_key is not None, FORMAT_VERSIONS, CRATE_SINCE)
    doc = jsonio.loads_strict(files["results/candidates.json"], "results/candidates.json")
    env = jsonio.loads_strict(files["results/environment.json"], "results/environment.json")
    problems = schemas.validate(doc, "candidates") + schemas.validate(env, "environment")
    if problems:
        raise InvalidResultsError("the candidate results do not validate: " + "; ".join(map(str, problems[:5])),
                                  "pack the folder a run wrote, unedited")
    loaded = candidate_records.load(doc, files, lambda rec: files.get(f"inputs/kernelbench/{rec.task}"))
    if loaded.problems:
        raise InvalidResultsError("the candidate records are incomplete or contradict themselves: "
                                  + "; ".join(map(str, loaded.problems[:5])), "pack the folder a run wrote, unedited")
    notes = []
    for r in doc["candidates"]:
        # the verdicts are this packer's, derived from the typed observations (a run's own verdicts are
        # only what it showed while running; an older run packed here gets today's checks)
        derived = [v.to_doc() for v in loaded.verdicts[r["name"]]]
        old = {v.get("name"): v.get("passed") for v in r.get("verdicts") or [] if isinstance(v, dict)}
        moved = [f"{v['name']} {old.get(v['name'])} -> {v['passed']}" for v in derived if old.get(v["name"]) != v["passed"]]
        if moved:
            notes.append(f"candidate {r['name']}: verdicts derived again by this packer differ from the run's: "
                         + ", ".join(moved[:4]))
        r["verdicts"] = derived
    files = {**files, "results/candidates.json": jsonio.dumps(doc).encode()}
    spec = merge_claims(default_claims(doc), extra_claims)
    spec_raw = spec_yaml(spec)
    payload = dict(files)
    payload["inputs/claims.yaml"] = spec_raw
    canon = {"candidates": json.loads(jsonio.dumps(doc)), "environment": env}
    claims_doc = claims_mod.evaluate(claims_mod.parse_spec(spec_raw, "inputs/claims.yaml"), canon, source="recorded")
    claims_doc["spec"] = {"file": "inputs/claims.yaml", "sha256": claims_mod.spec_sha256(spec_raw)}
    payload["claims.json"] = jsonio.dumps(claims_doc).encode()
    stamp = re.sub(r"[^0-9T]", "", doc.get("started_utc") or "")[:15]
    meta = {"schema": "kbrepro/candidate-bundle", "schema_version": 1, "format": FORMAT,
            "format_version": bundle_format, "name": name or f"candidates-{doc['profile']}-{stamp}",
            "source": "measured", "profile": doc["profile"],
            "candidates": [{"name": r["name"], "file": r["file"], "sha256": r["source_sha256"], "task": r["task"],
                            "task_sha256": r["task_sha256"]} for r in doc["candidates"]],
            "kernelbench": {"commit": doc["kernelbench"]["commit"],
                            "files": {p[len("inputs/kernelbench/"):]: pack.sha256_hex(b) for p, b in sorted(files.items())
                                      if p.startswith("inputs/kernelbench/")}},
            "product": {"version": ((env.get("fields") or {}).get("product_version") or {}).get("value"),
                        "commit": ((env.get("fields") or {}).get("product_commit") or {}).get("value")},
            "claims": {**claims_doc["spec"], "defaults": len(spec["claims"]) - len((extra_claims or {}).get("claims", [])),
                       "extra": len((extra_claims or {}).get("claims", []))},
            "documents": dict(DOCUMENTS), "notes": notes}
    if extra_raw is not None:
        meta["notes"].append(f"{meta['claims']['extra']} claim(s) added by the author (--claims), judged by this "
                             "product's evaluator on the author's definitions")
    payload["REPORT.md"] = render_report(meta, canon["candidates"], json.loads(payload["claims.json"])).encode()
    payload["bundle.json"] = jsonio.dumps(meta).encode()
    problems = schemas.validate(meta, "candidate-bundle") + schemas.validate(claims_doc, "claims")
    if problems:
        raise InvalidResultsError("internal error: bundle metadata invalid: " + "; ".join(map(str, problems[:5])),
                                  "report this as a bug")
    bag = pack.make_bag(meta["name"], payload, pack.bag_info(meta["name"], FORMAT, bundle_format,
                                                             f"{KIND} ({meta['profile']})", "measured"))
    if bundle_format >= CRATE_SINCE:
        bag = describe_and_sign(bag, meta, {**canon, "claims": json.loads(payload["claims.json"])}, signing_key)
    from kbrepro.bundle import report

    summary = report.post_summary(meta, canon, json.loads(payload["claims.json"]), bag.digest(),
                                  frozenset(c["id"] for c in default_claims(doc)["claims"]))
    return dataclasses.replace(bag, summary=summary.encode()), meta, claims_doc, doc


def pack_results(results_dir: Path, out: Path | None = None, *, claims_path: str | None = None,
                 name: str | None = None, allow_failing: bool = False, bundle_format: int = FORMAT_VERSION,
                 sign: str | None = None) -> MadeCandidates:
    """Validate and pack a candidate results folder into ``out``. A candidate caught by a check,
    or a default correctness claim (``K<n>a``, ``K<n>b``) that fails, raises
    InvalidResultsError (exit 1) with the results left in place, unless ``allow_failing``:
    then the bundle is written and says so in its claims. A speed claim that fails is a
    result, packed as such.
    Nothing is written unless everything succeeds (archive, then its digest file).
    ``bundle_format`` and ``sign`` (a PEM private key file): as :func:`build_payload`."""
    from kbrepro.bundle.make import check_bundle_format, check_out_path, load_key

    t0 = time.perf_counter()
    key = load_key(sign)
    check_bundle_format(bundle_format, key is not None, FORMAT_VERSIONS, CRATE_SINCE)
    extra, extra_raw = (claims_mod.load_spec(claims_path) if claims_path else (None, None))
    failed_cases: list = []
    try:
        from kbrepro.bundle import shard

        if shard.is_sharded(Path(results_dir)):  # the cases are the truth: merged in memory, as the run merged them
            files, failed_cases = shard.merged_files(Path(results_dir))
        else:
            files = _read_results(Path(results_dir))
    except OSError as exc:
        raise UnreadableInputError(f"cannot read the results folder {results_dir}: {exc.strerror}",
                                   "check the path") from exc
    if "results/candidates.json" not in files or "results/environment.json" not in files:
        raise UnreadableInputError(f"{results_dir} holds no candidate results (results/candidates.json)",
                                   "pass the folder make_bundle.py --candidate wrote")
    bag, meta, claims_doc, doc = build_payload(files, extra_claims=extra, extra_raw=extra_raw, name=name,
                                               bundle_format=bundle_format, signing_key=key)
    bad = {k: v for k, v in caught(doc).items() if v}
    # a candidate caught, or a default correctness claim (a, b) that fails, is a failing study;
    # a speed claim that fails is a finding (an honest kernel may be slower than torch.compile)
    failing = [c["id"] for c in claims_doc["claims"][:meta["claims"]["defaults"]]
               if c["verdict"] == "fails" and c["id"][-1] in "ab"]
    if failed_cases and not allow_failing:
        f0 = failed_cases[0]
        raise InvalidResultsError(f"{len(failed_cases)} case(s) failed, e.g. case {f0['id']} ({f0['candidate']} on "
                                  f"{f0['task']}): {f0['error'][:200]}; the other cases are intact in {results_dir}",
                                  f"run it again with 'python -m kbrepro.bundle.shard run-case {results_dir}/cases/"
                                  f"{f0['id']}', then pack with --from-results {results_dir}; or pass --allow-failing "
                                  "to pack the cases that finished")
    if (bad or failing) and not allow_failing:
        what = "; ".join(f"{k} caught by {', '.join(v)}" for k, v in bad.items()) or f"claims {', '.join(failing)} fail"
        raise InvalidResultsError(f"{what}; the results stay in {results_dir}",
                                  f"to pack a failing study anyway, run 'python make_bundle.py --from-results "
                                  f"{results_dir} --allow-failing'")
    out = check_out_path(Path(out) if out else Path(f"{meta['name']}.tar"))
    digest = bag.digest()
    dpath = out.with_name(out.name + DIGEST_SUFFIX)
    written = False
    try:
        size = pack.write_archive(bag, out)
        written = True
        jsonio.atomic_write_bytes(dpath, f"bundle digest (sha256 of {bag.name}/tagmanifest-sha256.txt): {digest}\n".encode())
    except BaseException as exc:
        if written:
            out.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise OutputPathError(f"cannot write {out}: {exc.strerror}; nothing was written", "choose another --out") from exc
        raise
    return MadeCandidates(out, bag.name, digest, size, claims_doc["summary"], bad, time.perf_counter() - t0,
                          tuple(meta["notes"]), key.public.keyid if key else None)


__all__ = ["KIND", "FORMAT", "task_path", "candidate_names", "default_claims", "merge_claims", "render_report",
           "run_candidates", "pack_results", "build_payload", "is_candidate_results", "caught", "MadeCandidates"]
