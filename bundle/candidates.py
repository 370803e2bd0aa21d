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

import json
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from kbrepro.bundle import candidate_records, case_records, checkpoint, claims as claims_mod, pack, scrub
from kbrepro.bundle.shard_merge import is_sharded, merged_files, read_results
from kbrepro.bundle.candidate_report import (COMPILED, KIND, best_compiled, default_claims,  # noqa: F401
                                             excluded_compiled, merge_claims, render_report, spec_yaml,
                                             where_cases_ran)
from kbrepro.paths import check_input_file
from kbrepro.errors import Interrupted, InvalidResultsError, UnreadableInputError, UsageError
from kbrepro.harness import candidate as hc, extras, fingerprint, jsonio
from kbrepro.model import candidate_rules, sizes as msizes
from kbrepro.model.protocol import shape_problems
from kbrepro.model.provenance_rules import MAX_BUILDS, fit_component, ninja_commands
from kbrepro.model.task_inputs import size_globals
from kbrepro.bundle.kinds import (CRATE_SINCE, DOC_VERSIONS, FORMAT, FORMAT_VERSION, FORMAT_VERSIONS,  # noqa: F401
                                  SCHEMA_VERSION, CANDIDATES, format_for)
from kbrepro import schemas
from kbrepro.bundle import assemble
from kbrepro.bundle.assemble import Contents
from kbrepro.bundle.make import check_out_path, load_key
from kbrepro.harness.kernelbench import KernelBenchCheckout, load_pin, resolve_checkout
from kbrepro.harness.checks import PREDICATES

DOCUMENTS = {"results/candidates.json": "kbrepro/candidates", "results/environment.json": "kbrepro/environment",
             "claims.json": "kbrepro/claims"}
NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,39}$")
#: provenance files read as text and scrubbed before packing (sources, build scripts, metadata)
TEXT_SUFFIXES = (".ninja", ".cu", ".cpp", ".cuh", ".h", ".json", ".source", ".ptx", ".llir", ".ttir", ".ttgir",
                 ".txt", ".py", ".sass")


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
    if arg in pin.files and candidate_rules.TASK_PATH.match(arg):
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


def pair_candidates(candidates: Sequence[str], tasks: Sequence[str], pin) -> list[tuple[Path, str]]:
    """``--candidate`` files paired with ``--task`` values (one task for all, or one each, in
    order), the files readable and every task one of the pin's: the one check of
    ``make_bundle.py --candidate`` and ``shard plan``, before any work. Raises UsageError,
    InputPathError."""
    if len(tasks) not in (1, len(candidates)):
        raise UsageError(f"{len(candidates)} --candidate and {len(tasks)} --task",
                         "give one --task for all candidates or one per --candidate, in order")
    for c in candidates:
        check_input_file(c, "--candidate", folder_hint="a folder of candidates named <level>_<task>.py is "
                         "--candidate-dir FOLDER")
    pairs = [(Path(c), t) for c, t in zip(candidates, tasks if len(tasks) == len(candidates)
                                          else list(tasks) * len(candidates))]
    for _, t in pairs:
        task_path(t, pin)  # a bad task is a usage error before any work
    return pairs


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


#: a file of a candidate folder: ``<level>_<task>.py`` or ``<level>_<task>_<anything>.py``
#: (``1_19.py``, ``2_39_gemm_bn.py``)
CANDIDATE_FILE = re.compile(r"^(\d{1,2})_(\d{1,4})(?:_[A-Za-z0-9_.-]*)?\.py$")


def candidates_in(folder: Path) -> list[tuple[Path, str]]:
    """Every ``(candidate file, task)`` of a candidate folder, in level and task order: each
    ``*.py`` file named as :data:`CANDIDATE_FILE` says solves task ``<level>/<task>``. Raises
    UsageError for a ``.py`` file named otherwise (nothing is silently left out) or a folder
    without one."""
    files = sorted(p for p in Path(folder).iterdir() if p.suffix == ".py" and p.is_file())
    odd = [p.name for p in files if not CANDIDATE_FILE.match(p.name)]
    if odd:
        raise UsageError(f"{len(odd)} file(s) of the candidate folder are not named <level>_<task>[_name].py: "
                         + ", ".join(odd[:4]), "rename them (e.g. 1_19.py for KernelBench level 1 task 19), or "
                         "move them out of the folder")
    if not files:
        raise UsageError(f"no candidate file in {Path(folder).name}/ (named <level>_<task>[_name].py)",
                         "put one ModelNew file per task in the folder, e.g. 1_19.py")
    keyed = []
    for p in files:
        m = CANDIDATE_FILE.match(p.name)
        keyed.append(((int(m.group(1)), int(m.group(2)), p.name), p, f"{int(m.group(1))}/{int(m.group(2))}"))
    return [(p, t) for _, p, t in sorted(keyed, key=lambda k: k[0])]


def safe_relpath(path: str) -> str:
    """A build file's path as a bundle path: each part starts with a letter or digit (``x``
    put in front of ``.ninja_log`` or ``__triton_launcher...``), other characters than
    letters, digits, ``.``, ``_`` and ``-`` become ``_``, and a part over 100 characters is
    shortened with a digest of itself (:func:`kbrepro.model.provenance_rules.fit_component`)."""
    parts = []
    for part in path.split("/"):
        part = re.sub(r"[^A-Za-z0-9._-]", "_", part) or "x"
        parts.append(fit_component(part if part[0].isalnum() else "x" + part))
    return "/".join(parts)


# ---------------------------------------------------------------------------------------------
# running


def _utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _shape_text(shape) -> str:
    return ",".join(f"{k}={msizes.text(v)}" for k, v in shape)


def parse_size_options(items: Sequence[str], opt: str = "--size") -> dict:
    """The ``NAME=VALUE`` items of option ``opt`` (``--size``; an extra shape's pairs) as
    ``{name: int or tuple of ints}`` (:func:`kbrepro.model.sizes.parse_pair`: ``8``,
    ``(4096,)``, ``4096,``, ``(5,7)``, ``5,7``). The one parser of the command lines
    (make_bundle.py, ``shard plan``). Raises UsageError for a malformed pair, a zero or
    negative entry, or a NAME given twice; whether the task has such a size of that kind is
    :func:`kbrepro.model.protocol.shape_problems`' (checked by :func:`run_candidates`)."""
    out: dict = {}
    for it in items:
        try:
            k, v = msizes.parse_pair(it)
            if k in out:
                raise ValueError(f"{k} is given twice")
        except ValueError as exc:
            raise UsageError(f"{opt} {it!r}: {exc}; give NAME=VALUE, VALUE a positive integer or a tuple of them, "
                             "each NAME once", f"e.g. {opt} batch_size=8, {opt} input_shape=(4096,) or "
                             f"{opt} kernel_size=5,7") from None
        out[k] = v
    return out


def parse_extra_shape(text: str) -> dict:
    """One ``--extra-shape NAME=VALUE[,NAME=VALUE...]`` (the pairs split at the commas that
    start another NAME, never at a tuple's) by :func:`parse_size_options`. Raises UsageError."""
    return parse_size_options(msizes.split_pairs(text), "--extra-shape")


def task_configs(profile: str, sizes: Mapping[str, msizes.SizeValue] | None, extra_shapes: tuple,
                 paths: Sequence[str], checkout) -> dict:
    """Each pinned task path's configuration: the profile, the sizes it names (over several
    tasks, a size applies to the tasks that name it) and the extra shapes, held to the rule the
    verifier holds a record to (:func:`kbrepro.model.protocol.shape_problems`) before anything
    runs; ``checkout`` a verified :class:`~kbrepro.harness.kernelbench.KernelBenchCheckout`.
    The one check of ``make_bundle.py`` and of ``shard plan``. Raises UsageError (an unknown
    profile, a size no task names or of another kind than the task's value, an extra shape
    that changes nothing)."""
    if profile not in hc.PROFILES:
        raise UsageError(f"unknown candidate profile {profile!r}", f"use one of {', '.join(hc.PROFILES)}")
    cfg = hc.PROFILES[profile]
    if extra_shapes:  # tuple values as tuples (a replay passes the JSON arrays of a record)
        cfg = hc.with_overrides(cfg, extra_shapes=tuple(tuple(sorted(msizes.canonical_map(s).items()))
                                                        for s in extra_shapes))
    if sizes:
        cfg = hc.with_overrides(cfg, sizes=tuple(sorted(msizes.canonical_map(sizes).items())))
    cfgs = {}
    for tp in sorted(set(paths)):  # the rule the verifier holds a record to, before the run spends the GPU
        glob = size_globals(checkout.read_verified(tp))
        # over several tasks (a level), a size applies to the tasks that name it
        own = {k: v for k, v in cfg.sizes if k in glob} if len(set(paths)) > 1 else dict(cfg.sizes)
        cfgs[tp] = hc.with_overrides(cfg, sizes=tuple(sorted(own.items())))
        bad = shape_problems(glob, own, [dict(s) for s in cfg.extra_shapes])
        if bad:
            what = "--size" if bad[0][0] is None else f"--extra-shape {_shape_text(cfg.extra_shapes[bad[0][0]])}"
            raise UsageError(f"{what} {bad[0][1]} ({tp})", "give sizes the task names, each of the kind of the "
                             "task's own value (an integer, or a tuple of as many integers: kernel_size=5,7), and "
                             "extra shapes that differ from the run's")
    unused = sorted(set(dict(cfg.sizes)) - {k for c in cfgs.values() for k, _ in c.sizes})
    if unused:
        raise UsageError(f"--size {', '.join(unused)}: no task of the run has such a size", "check the name (a "
                         "module-level size of the task file: an integer, or a tuple such as input_shape=(64,))")
    return cfgs


def run_candidates(items: Sequence[tuple[Path, str]], *, profile: str, kernelbench: str | None,
                   results_dir: Path, progress: Callable[[str], None] | None = None,
                   extra_shapes: tuple = (), sizes: Mapping[str, msizes.SizeValue] | None = None,
                   device: str = "cuda", names: Sequence[str] | None = None) -> Path:
    """Check and time every ``(candidate file, task argument)`` on this GPU and write a
    results folder (the bundle's ``data/`` layout) to ``results_dir``. ``sizes`` and each of
    ``extra_shapes`` map a size global's name to an int or a tuple of ints (a list is read as
    a tuple: :mod:`kbrepro.model.sizes`). ``names`` (one per
    item) overrides the names :func:`candidate_names` derives from the file names (a case of
    a sharded run keeps the name its plan gave it). Raises UsageError (bad task or profile, a
    size the task does not have or of another kind than the task's value),
    KernelBenchPinError (checkout differs from the pin), UnreadableInputError."""
    import torch


    say = progress or (lambda m: None)
    pin = load_pin()
    paths = [task_path(t, pin) for _, t in items]
    checkout = KernelBenchCheckout(resolve_checkout(kernelbench), pin)
    checkout.verify(sorted(set(paths) | {"LICENSE"}))
    cfgs = task_configs(profile, sizes, extra_shapes, paths, checkout)
    # each task's reference runs at the sizes and extra shapes before any candidate does
    cfgs = {tp: hc.task_config(checkout.read_verified(tp), tp, c, device, say) for tp, c in cfgs.items()}
    names = list(names) if names is not None else candidate_names([p for p, _ in items])
    if len(names) != len(items) or len(set(names)) != len(names) or not all(NAME_RE.match(n) for n in names):
        raise UsageError("candidate names must be distinct bundle-safe names, one per candidate",
                         "let the product derive them from the file names")
    srcs = read_sources([p for p, _ in items])
    results_dir = Path(results_dir)
    ident = checkpoint.identity(profile=profile, device=device, sizes=sizes or {}, extra_shapes=extra_shapes,
                                names=names, sources=srcs, paths=paths, commit=pin.commit)
    env = fingerprint.collect("start")
    resuming = checkpoint.holds_progress(results_dir)
    if resuming or not device.startswith("cuda"):  # a CPU run (tests): no timing, no bandwidth
        blk, gbps = None, None
    else:
        blk = extras.copy_bandwidth(None)
        gbps = extras.copy_gbps(blk)
        say(f"copy bandwidth {gbps:.0f} GB/s")
    cp = checkpoint.open_run(results_dir, ident, env, (gbps, blk), _utc())
    env, (gbps, blk), started = cp.env, cp.bandwidth, cp.started
    if resuming:
        say(f"resuming the run in {results_dir}: {len(cp.finished)} of {len(names)} candidates finished before")
    records = []
    files: dict[str, bytes] = {}
    running = None  # the candidate being checked: its work folder goes if the run stops before it finished
    try:
        for i, (name, src, tp) in enumerate(zip(names, srcs, paths)):
            if i in cp.finished:
                rec, own = cp.finished[i]
                records.append(rec)
                files.update(own)
                continue
            # a build the stopped run left half done (its lock file, its objects) is not this run's
            shutil.rmtree(results_dir / "work" / name, ignore_errors=True)
            running = name
            rec, own = _run_one(hc.CandidateSpec(name, src, tp, checkout.read_verified(tp)), cfgs[tp], results_dir,
                                device, say, gbps, files)
            cp.keep(i, rec, own)
            running = None
            records.append(rec)
            files.update(own)
            say(checkpoint.summary_line(rec))
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
        files["inputs/kernelbench/LICENSE"] = checkout.read_verified("LICENSE")
        _write_results(results_dir, files, records, fingerprint.add_clocks(env, "end"), profile=profile, device=device,
                       started=started, pin=pin, gbps=gbps, blk=blk)
    except KeyboardInterrupt:
        cp.release()
        if running is not None:  # its half-built folders (the resumed run rebuilds it from nothing)
            shutil.rmtree(results_dir / "work" / running, ignore_errors=True)
            try:
                (results_dir / "work").rmdir()  # only if no finished candidate's folder is there
            except OSError:
                pass
        done = len(cp.finished)
        kept = (f"{done} of {len(names)} candidates finished and are kept in {results_dir}" if done else
                f"no candidate finished; the run's folder {results_dir} is kept")
        raise Interrupted(f"{kept}; the same command with --results-dir {results_dir} resumes the run") from None
    except BaseException:
        cp.release()
        raise
    cp.remove()
    return results_dir


def _write_results(results_dir: Path, files: dict, records: list, env: dict, *, profile: str, device: str,
                   started: str, pin, gbps, blk) -> None:
    """The results folder of a finished run: its candidates document, environment and files."""

    doc = {"schema": "kbrepro/candidates", "schema_version": SCHEMA_VERSION, "kind": KIND, "profile": profile,
           "device": "cuda" if device.startswith("cuda") else "cpu",
           "started_utc": started, "finished_utc": _utc(),
           "predicate": {"official": "allclose", **PREDICATES["allclose"], "atol": hc.PROFILES[profile].atol, "rtol": hc.PROFILES[profile].rtol},
           "kernelbench": {"commit": pin.commit, "repository": pin.repository},
           "bandwidth": {"gbps": gbps, "block": blk} if blk else {"gbps": None, "reason": "no GPU"}, "candidates": records}
    files["results/candidates.json"] = jsonio.dumps(doc).encode()
    files["results/environment.json"] = jsonio.dumps(env).encode()
    for rel, data in files.items():
        dst = results_dir / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        jsonio.atomic_write_bytes(dst, data)


def _run_one(spec, cfg, results_dir: Path, device: str, say, gbps, taken: Mapping[str, bytes]) -> tuple[dict, dict]:
    """One candidate run and checked: its record and the files it adds to the results folder
    (path -> bytes: its file, its task, its provenance files; ``taken``: the paths earlier
    candidates added)."""
    work = results_dir / "work" / spec.name
    try:
        return _record_and_files(hc.run_candidate(spec, cfg, work, device=device, progress=say, bandwidth_gbps=gbps),
                                 spec, results_dir, work, taken)
    finally:  # finished or not: no provenance copy and no empty build folder stays behind
        hc.tidy_work(work)


def _record_and_files(rec: dict, spec, results_dir: Path, work: Path, taken: Mapping[str, bytes]) -> tuple[dict, dict]:
    """:func:`_run_one`'s record and files, from what the candidate's run returned."""
    name, tp = spec.name, spec.task_path
    rec["file"] = f"inputs/candidates/{name}.py"
    own: dict[str, bytes] = {rec["file"]: spec.source, f"inputs/kernelbench/{tp}": spec.task_source}
    prov = Path(rec.pop("provenance_dir"))
    for f in (rec["provenance"].get("files") or []):
        if f.get("copied"):
            f["bundle_path"] = f"provenance/{name}/{safe_relpath(f['path'])}"
            if f["bundle_path"] in own or f["bundle_path"] in taken:  # two build files one bundle path: keep the first
                f.update(copied=False, bundle_path=None)
                del f["bundle_path"]
                continue
            own[f["bundle_path"]] = scrub_provenance_file(f, (prov / f["path"]).read_bytes(), [work, results_dir])
    # the flags in effect as the bundle holds them: read again from the scrubbed build files
    rec["provenance"]["builds"] = [{"path": f["path"], **ninja_commands(own[f["bundle_path"]].decode("utf-8", "replace"))}
                                   for f in rec["provenance"].get("files") or []
                                   if f.get("bundle_path") and f["path"].rsplit("/", 1)[-1] == "build.ninja"][:MAX_BUILDS]
    for b in rec["provenance"].get("binaries") or []:
        if b.get("sass_file"):
            b["sass_file"] = f"provenance/{name}/{b['sass_file']}"
            own[b["sass_file"]] = (prov / b["sass_file"].split("/", 2)[2]).read_bytes()
    return rec, own


# ---------------------------------------------------------------------------------------------
# packing


def is_candidate_results(folder: Path) -> bool:
    """Whether ``folder`` is a results folder of candidates (it holds results/candidates.json,
    the shard plan of a sharded run, ``shard.json``, or an unfinished run's progress)."""
    try:
        return (Path(folder) / "results" / "candidates.json").is_file() or (Path(folder) / "shard.json").is_file() \
            or checkpoint.holds_progress(Path(folder))
    except OSError:
        return False


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


def candidate_contents(files: Mapping[str, bytes], *, extra_claims: Mapping | None = None,
                       extra_raw: bytes | None = None, name: str | None = None,
                       bundle_format: int | None = None) -> tuple[Contents, int, dict]:
    """What a candidate bundle of a results folder's ``files`` holds (:class:`bundle.assemble.Contents`),
    the bundle format it is packed in (``bundle_format``, or the newest that holds the results:
    :func:`bundle.kinds.format_for`) and the candidates document with the verdicts this packer
    derived. Raises InvalidResultsError for results that fail their schema or whose recorded
    verdicts are not the ones their observations give; UsageError for a format that cannot hold
    them."""
    doc = jsonio.loads_strict(files["results/candidates.json"], "results/candidates.json")
    env = jsonio.loads_strict(files["results/environment.json"], "results/environment.json")
    version = doc.get("schema_version") if isinstance(doc, dict) and type(doc.get("schema_version")) is int else 1
    bundle_format = format_for(version, bundle_format)
    problems = schemas.validate(doc, "candidates") + schemas.validate(env, "environment")
    if problems:
        raise InvalidResultsError("the candidate results do not validate: " + "; ".join(map(str, problems[:5])),
                                  "pack the folder a run wrote, unedited")
    loaded = candidate_records.load(doc, files, lambda rec: files.get(f"inputs/kernelbench/{rec.task}"))
    if loaded.problems:
        raise InvalidResultsError("the candidate records are incomplete or contradict themselves: "
                                  + "; ".join(map(str, loaded.problems[:5])), "pack the folder a run wrote, unedited")
    changed = candidate_records.file_problems(doc, files)
    if changed:  # the verifier's check, before packing
        raise InvalidResultsError(changed[0], "pack the folder a run wrote, unedited")
    cases = case_records.case_problems(doc, lambda task: files.get(f"inputs/kernelbench/{task}"))
    if cases:  # what the verifier fails, the packer refuses
        raise InvalidResultsError("the cases of the sharded run do not match its records: "
                                  + "; ".join(f"{p} {m}" for p, m in cases[:3]), "pack the folder a run wrote, unedited")
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
    spec = merge_claims(default_claims(doc, bundle_format), extra_claims)
    spec_raw = spec_yaml(spec)
    payload = dict(files)
    payload["inputs/claims.yaml"] = spec_raw
    canon = {"candidates": json.loads(jsonio.dumps(doc)), "environment": env}
    claims_doc = claims_mod.evaluate(claims_mod.parse_spec(spec_raw, "inputs/claims.yaml", claims_mod.record_count(canon)),
                                     canon, source="recorded")
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
    contents = Contents(payload=payload, meta=meta, claims=claims_doc,
                        documents=canon,
                        own_ids=frozenset(c["id"] for c in default_claims(doc)["claims"]),
                        label=f"{KIND} ({meta['profile']})")
    return contents, bundle_format, doc


def build_payload(files: Mapping[str, bytes], *, extra_claims: Mapping | None = None, extra_raw: bytes | None = None,
                  name: str | None = None, bundle_format: int | None = None,
                  signing_key=None) -> tuple[pack.Bag, dict, dict, dict]:
    """The sealed bag of a candidate results folder's ``files`` (:func:`candidate_contents`, then
    the one seal, :func:`bundle.assemble.build_payload`). Returns ``(bag, bundle metadata, claims
    document, candidates document)``. ``bundle_format``: the newest that holds the results by
    default; ``signing_key`` (format 3 on) adds the signed attestations. Raises as
    :func:`candidate_contents`, and UsageError for a format it does not write or cannot sign."""
    contents, fmt, doc = candidate_contents(files, extra_claims=extra_claims, extra_raw=extra_raw, name=name,
                                            bundle_format=bundle_format)
    return assemble.build_payload(CANDIDATES, contents, fmt, signing_key), dict(contents.meta), \
        dict(contents.claims), doc


def pack_results(results_dir: Path, out: Path | None = None, *, claims_path: str | None = None,
                 name: str | None = None, allow_failing: bool = False, bundle_format: int | None = None,
                 sign: str | None = None, unpublished: bool = False) -> MadeCandidates:
    """Validate and pack a candidate results folder into ``out``. A candidate caught by a check,
    or a default correctness claim (``K<n>a``, ``K<n>b``) that fails, raises
    InvalidResultsError (exit 1) with the results left in place, unless ``allow_failing``:
    then the bundle is written and says so in its claims. A speed claim that fails is a
    result, packed as such.
    Nothing is written unless everything succeeds (archive, then its digest file).
    ``bundle_format`` and ``sign`` (a PEM private key file): as :func:`build_payload`;
    ``unpublished``: as :func:`bundle.make.make_from_results`."""
    t0 = time.perf_counter()
    key = load_key(sign)
    if bundle_format is not None:
        CANDIDATES.check_format(bundle_format, key is not None)
    extra, extra_raw = (claims_mod.load_spec(claims_path) if claims_path else (None, None))
    failed_cases: list = []
    if checkpoint.holds_progress(Path(results_dir)) and not (Path(results_dir) / "results" / "candidates.json").is_file():
        raise UsageError(f"{results_dir} holds an unfinished candidate run (its progress/ folder): nothing to pack yet",
                         f"run the same make_bundle.py command with --results-dir {results_dir} again to resume it")
    try:
        if is_sharded(Path(results_dir)):  # the cases are the truth: merged in memory, as the run merged them
            files, failed_cases = merged_files(Path(results_dir))
        else:
            files = read_results(Path(results_dir))
    except OSError as exc:
        raise UnreadableInputError(f"cannot read the results folder {results_dir}: {exc.strerror}",
                                   "check the path") from exc
    if "results/candidates.json" not in files or "results/environment.json" not in files:
        raise UnreadableInputError(f"{results_dir} holds no candidate results (results/candidates.json)",
                                   "pass the folder 'make_bundle.py candidates' wrote")
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
                                  f"{f0['id']}', then pack with 'make_bundle.py pack {results_dir}'; or pass --allow-failing "
                                  "to pack the cases that finished")
    if (bad or failing) and not allow_failing:
        why_not = {r["name"]: next((str(v.get("detail") or "") for v in r.get("verdicts") or []
                                    if v.get("name") == "ran"), "") for r in doc.get("candidates") or []}
        what = "; ".join(f"{k} did not run ({why_not.get(k, '')[:160]})" if v == ["ran"]
                         else f"{k} caught by {', '.join(v)}" for k, v in bad.items()) or \
            f"claims {', '.join(failing)} fail"
        needs_gpu = doc.get("device") == "cpu" and any("cuda" in why_not.get(k, "").lower() for k in bad)
        raise InvalidResultsError(f"{what}; the results stay in {results_dir}",
                                  ("a candidate that builds CUDA code needs a GPU: run it on a machine with one, "
                                   "without --device cpu; or " if needs_gpu else "") +
                                  f"to pack them anyway, run 'python make_bundle.py pack {results_dir} "
                                  "--allow-failing'")
    out = check_out_path(Path(out) if out else Path(f"{meta['name']}.tar"))
    size, digest = assemble.write_bundle(bag, out, unpublished)
    return MadeCandidates(out, bag.name, digest, size, claims_doc["summary"], bad, time.perf_counter() - t0,
                          tuple(meta["notes"]), key.public.keyid if key else None)


__all__ = ["KIND", "FORMAT", "task_path", "candidate_names", "default_claims", "merge_claims", "render_report",
           "run_candidates", "pack_results", "build_payload", "is_candidate_results", "caught", "MadeCandidates"]
