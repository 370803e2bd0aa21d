"""Cross-document content checks of a bundle: tier 3 (documents) and tier 4 (provenance).

A forger who edits a document can recompute both BagIt manifests, so only content checks
catch the edit. Everything here is derived by the verifier itself, with its own code and
definitions (its own study, its own FTZ rule, its own predicate definitions, the bytes of
the bundled binaries and task files); what the bundle says about itself is compared, never
believed.

Pure functions: no I/O, no printing, nothing raised for malformed input (a value of the
wrong type is skipped or reported, never trusted). Every function returns a list of
problem dicts::

    {"file": "data/...", "path": "$.json.path" or None, "message": "one line",
     "expected": ... (optional), "found": ... (optional)}

Imported results (``bundle.json`` ``source: imported``: the post's original files converted
by :mod:`bundle.importer`) have no KernelBench files, binaries, witness document, stage
list, resolved study or per-case shapes, and their timing blocks follow the post's scripts
(one variant per script, ids ``<task>.<scope>.<mode>@<file>``). Checks that need what an
import cannot have are skipped for them (each function's docstring says which); every
check whose inputs are present still applies.
"""
from __future__ import annotations

import hashlib
import itertools
import math
import random
import re
import struct
from datetime import datetime, timezone
from typing import Any, Iterator, Mapping

from kbrepro.bundle import derived_facts
from kbrepro.bundle import problem_dicts as pd
from kbrepro.bundle.scrub import _HOME, _UUID
from kbrepro.harness import checks
from kbrepro.harness.records import BlockKey
from kbrepro.harness.run import witness_flushes
from kbrepro.harness.study import task_key, values
from kbrepro.harness.timing import THROTTLE_MASK, AdaptiveRule, TimingProtocol
from kbrepro.kernels import compile as kc

#: where each document lies in the bag (the packer's layout, bundle/documents.py DOC_PATHS)
class _DocFiles(dict):
    """Bag path of a document by name: ours and any study's (``data/results/<name>.json``)."""

    def __missing__(self, name: str) -> str:
        return f"data/results/{name}.json"

    def get(self, name, default=None):  # noqa: D401 (dict API)
        return self[name] if isinstance(name, str) and re.match(r"^[a-z][a-z0-9_-]{0,40}$", name) else default


_DOC_FILE = _DocFiles({"environment": "data/environment.json", "claims": "data/claims.json"})
#: documents a measured run of any study writes whatever its profile (harness/run.py); the
#: witness (a study with one), selftest (``extras.self_test``) and the study's own documents
#: are checked against the study
_MEASURED_REQUIRED = ("run", "environment", "compile", "correctness", "timings")
_IMPORTED_REQUIRED = ("run", "environment", "compile", "correctness", "timings")
_ZERO_BITS = ("0x00000000", "0x80000000")
_CUT = pd.CUT
_ELF_MAGIC = b"\x7fELF"
_EM_CUDA = 190
_PTX_RELEASE = re.compile(rb"^//\s*Cuda compilation tools, release (\d+)\.(\d+)", re.MULTILINE)
_PTX_TARGET = re.compile(rb"^\s*\.target\s+(sm_\d+[a-z]?)", re.MULTILINE)
_SASS_TARGET = re.compile(r"^\s*code for (sm_\d+[a-z]?)", re.MULTILINE)
_ARCH = re.compile(r"^(?:sm|compute)_(\d+)[a-z]?$")


# ------------------------------------------------------------------------------ helpers


_cut, _p, _d, _l, _is_int, _num = pd.cut, pd.problem, pd.as_dict, pd.as_list, pd.is_int, pd.number


def _f32_bits(x: float) -> str:
    """IEEE-754 binary32 bits of ``x`` (rounded to float32) as ``0x%08x``."""
    try:
        return "0x%08x" % struct.unpack("<I", struct.pack("<f", x))[0]
    except (OverflowError, struct.error):
        return "overflow"


def _measured(meta: Mapping) -> bool:
    return meta.get("source") != "imported"


def _imported(documents: Mapping[str, dict], meta: Mapping | None = None) -> bool:
    if meta is not None and meta.get("source") == "imported":
        return True
    return _d(documents.get("run")).get("status") == "imported"


def _variants(documents: Mapping[str, dict]) -> list[dict]:
    return [v for v in _l(_d(documents.get("compile")).get("variants")) if isinstance(v, dict)]


def _walk(node: Any, path: str = "$") -> Iterator[tuple[str, dict]]:
    if isinstance(node, dict):
        yield path, node
        for k, v in node.items():
            if isinstance(v, (dict, list)):
                yield from _walk(v, f"{path}.{k}" if str(k).isidentifier() else f'{path}["{k}"]')
    elif isinstance(node, list):
        for i, v in enumerate(node):
            if isinstance(v, (dict, list)):
                yield from _walk(v, f"{path}[{i}]")


def _checks_of(node: Any) -> Iterator[tuple[str, dict]]:
    for path, d in _walk(node):
        if "element_count" in d and "bit_identical_count" in d and "official" in d:
            yield path, d


def _ftz_from_options(options: list[str], default: bool) -> bool:
    """The verifier's rule for the FTZ mode an NVRTC option list gives: the last ``--ftz=`` /
    ``-ftz=`` option decides; ``--use_fast_math`` / ``-use_fast_math`` implies ftz=true
    unless a later explicit ``--ftz=false`` overrides it (NVRTC reads options in order);
    ``default`` where nothing says."""
    mode = default
    for o in options:
        o = str(o)
        if o in ("--use_fast_math", "-use_fast_math"):
            mode = True
        m = re.match(r"^--?ftz=(true|false|1|0)$", o)
        if m:
            mode = m.group(1) in ("true", "1")
    return mode


def expected_ftz(study) -> dict[str, bool]:
    """The FTZ mode each compile variant of the verifier's own ``study`` (a
    :class:`kbrepro.harness.study.StudyConfig`) must have: ``{variant name: ftz}``.

    Derived from the variant's route and options by the verifier's rule, never from any
    ``expected_ftz`` field: the ``cupy_rawmodule`` route ends up with ``-ftz=true``
    whatever it is given (CuPy's ``RawModule(code=...)`` appends it after the caller's
    options, see kernels/compile.py), so it is always True; the ``nvrtc`` route: the last
    ``--ftz=``/``-ftz=`` option, ``--use_fast_math`` implying true, default false.
    """
    out = {}
    for v in study.variants:
        opts = [str(o) for o in v.options]
        out[v.name] = True if v.route == "cupy_rawmodule" else _ftz_from_options(opts, False)
    return out


# ------------------------------------------------------------------------ tier 3: documents


def document_problems(documents: Mapping[str, dict], files: Mapping[str, bytes], meta: Mapping,
                      bag_info: Mapping[str, str]) -> list[dict]:
    """Tier 3 (documents): contradictions between the documents, ``bundle.json`` and
    ``bag-info.txt``.

    ``documents``: name -> parsed document (``"run"``, ``"environment"``, ``"compile"``,
    ``"witness"``, ``"correctness"``, ``"timings"``, ``"selftest"``, a study's own,
    ``"claims"``); ``files``: every file of the bag by path relative to the bag root
    (``"data/results/run.json"``, ``"bag-info.txt"``, ...), bytes; ``meta``: parsed
    ``data/bundle.json``; ``bag_info``: ``bag-info.txt`` fields. Returns problem dicts
    (module docstring); raises nothing.

    Checks: every ``data/results/*.json`` (not ``results/originals/``) and
    ``data/environment.json`` is listed in ``bundle.json`` under its own document name, and
    the documents a run of that source always writes are there (measured: run, environment,
    compile, correctness, timings (witness when the study has one); imported: run, environment, compile,
    correctness, timings); ``bag-info.txt`` agrees with ``bundle.json`` (name, format,
    version, source, study); ``bundle.json`` agrees with run.json and environment.json
    (source vs run status, study name/profile/sha256 and the bundled study file's sha256,
    product version/commit, KernelBench commit and files); the default bundle name's time
    stamp is the run's start; start <= finish, the stages fit in the wall time and the wall
    time in start..finish; environment vs run (precision, compile-cache setting) and
    correctness (torch version of the predicate witness); timing rounds: every round's
    order is a permutation of the block's arms and is exactly the one
    ``random.Random(order_seed)`` shuffles (harness/timing.py), times are finite and
    positive, a recorded ``throttled`` flag follows from its throttle reasons; timing
    eligibility follows from the official checks of the task (harness/run.py), and each
    study block times exactly the eligible variants (skipped for imported results: the post
    timed one variant per script); then the facts :func:`bundle.derived_facts.document_problems`
    derives (self-tests, adaptive stopping, copy and floor blocks, GEMM FLOPs).
    """
    out: list[dict] = []
    measured = _measured(meta)
    out += _listing_problems(documents, files, meta, measured)
    out += _bag_info_problems(meta, bag_info)
    out += _meta_problems(documents, files, meta, measured)
    out += _time_problems(documents, meta)
    out += _environment_problems(documents)
    out += _round_problems(documents)
    out += _eligibility_problems(documents, measured)
    return out + derived_facts.document_problems(documents)


def _listing_problems(documents, files, meta, measured) -> list[dict]:
    out = []
    listed = _d(meta.get("documents"))
    for rel, schema in sorted(listed.items()):
        name = str(schema).split("/", 1)[-1]
        want = _DOC_FILE.get(name)
        if want is not None and want != f"data/{rel}":
            out.append(_p("data/bundle.json", f'$.documents["{_cut(rel)}"]',
                          f"document {name} listed at data/{_cut(rel)}; the packer writes it at {want}",
                          expected=want, found=f"data/{rel}"))
        if f"data/{rel}" not in files:
            out.append(_p("data/bundle.json", f'$.documents["{_cut(rel)}"]',
                          f"document data/{_cut(rel)} listed in bundle.json is not in the bag"))
    listed_paths = {f"data/{rel}" for rel in listed}
    for path in sorted(files):
        is_doc = (path.startswith("data/results/") and path.endswith(".json") and path.count("/") == 2) \
            or path == "data/environment.json"
        if is_doc and path not in listed_paths:
            out.append(_p(path, None, f"{path} is in the bag but not listed in bundle.json's documents "
                                      "(an unlisted document is never checked)"))
    listed_names = {str(s).split("/", 1)[-1] for s in listed.values()}
    required = _MEASURED_REQUIRED if measured else _IMPORTED_REQUIRED
    for name in required:
        if name not in listed_names:
            out.append(_p(_DOC_FILE[name], None,
                          f"{'a measured' if measured else 'an imported'} run always writes {name}.json; "
                          "the bundle does not list it", expected=_DOC_FILE[name]))
    return out


def _bag_info_problems(meta, info) -> list[dict]:
    out = []
    study = _d(meta.get("study"))
    pairs = (("External-Identifier", meta.get("name"), "$.name"),
             ("Bundle-Format", meta.get("format"), "$.format"),
             ("Bundle-Format-Version", None if meta.get("format_version") is None else str(meta.get("format_version")),
              "$.format_version"),
             ("Source", meta.get("source"), "$.source"),
             ("Study", f"{study.get('name')} ({study.get('profile')})", "$.study"))
    for key, want, path in pairs:
        got = info.get(key)
        if got != want:
            out.append(_p("bag-info.txt", None, f"bag-info.txt {key} differs from bundle.json {path}",
                          expected=want, found=got))
    return out


def _meta_problems(documents, files, meta, measured) -> list[dict]:
    out = []
    run = _d(documents.get("run"))
    env = _d(_d(documents.get("environment")).get("fields"))
    status = run.get("status")
    source = meta.get("source")
    if source == "measured" and (status != "complete" or run.get("imported") is not None):
        out.append(_p("data/bundle.json", "$.source", "bundle.json says measured, run.json says otherwise",
                      expected="status 'complete', imported null", found=f"status {status!r}"))
    if source == "imported" and status != "imported":
        out.append(_p("data/bundle.json", "$.source", "bundle.json says imported, run.json's status is not 'imported'",
                      expected="imported", found=status))
    rs, ms = _d(run.get("study")), _d(meta.get("study"))
    for key in ("name", "profile"):
        if key in rs and rs.get(key) != ms.get(key):
            out.append(_p("data/bundle.json", f"$.study.{key}", f"bundle.json's study {key} differs from run.json's",
                          expected=rs.get(key), found=ms.get(key)))
    if rs.get("sha256") is not None and rs.get("sha256") != ms.get("sha256"):
        out.append(_p("data/bundle.json", "$.study.sha256", "bundle.json's study sha256 differs from run.json's",
                      expected=rs.get("sha256"), found=ms.get("sha256")))
    study_file = f"data/{ms.get('file')}"
    if ms.get("file") is not None and study_file in files:
        got = hashlib.sha256(files[study_file]).hexdigest()
        if got != ms.get("sha256"):
            out.append(_p("data/bundle.json", "$.study.sha256", "the bundled study file's sha256 differs from "
                          "bundle.json's", expected=got, found=ms.get("sha256")))
    elif ms.get("file") is not None:
        out.append(_p(study_file, None, "the study file bundle.json names is not in the bag"))
    prod = _d(meta.get("product"))
    for key, field in (("version", "product_version"), ("commit", "product_commit")):
        if field in env and _d(env.get(field)).get("value") != prod.get(key):
            out.append(_p("data/bundle.json", f"$.product.{key}", f"bundle.json's product {key} differs from "
                          f"environment.json's {field}", expected=_d(env.get(field)).get("value"), found=prod.get(key)))
    mkb, rkb = _d(meta.get("kernelbench")), _d(run.get("kernelbench"))
    if rkb.get("commit") is not None and mkb.get("commit") != rkb.get("commit"):
        out.append(_p("data/bundle.json", "$.kernelbench.commit", "bundle.json's KernelBench commit differs from "
                      "run.json's", expected=rkb.get("commit"), found=mkb.get("commit")))
    if mkb.get("files_included") and isinstance(rkb.get("files"), list) and mkb.get("files") != rkb.get("files"):
        out.append(_p("data/bundle.json", "$.kernelbench.files", "bundle.json's KernelBench files differ from the "
                      "files run.json says the run used", expected=rkb.get("files"), found=mkb.get("files")))
    if measured and mkb.get("files_included") is False:
        out.append(_p("data/bundle.json", "$.kernelbench.files_included",
                      "a measured bundle must include the KernelBench files its run used", expected=True, found=False))
    return out


def _parse_utc(s: Any) -> float | None:

    if not isinstance(s, str):
        return None
    try:
        return datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None


def _time_problems(documents, meta) -> list[dict]:
    out = []
    run = _d(documents.get("run"))
    f = _DOC_FILE["run"]
    start, end = _parse_utc(run.get("started_utc")), _parse_utc(run.get("finished_utc"))
    if run.get("started_utc") is not None and start is None:
        out.append(_p(f, "$.started_utc", "not a UTC time stamp YYYY-MM-DDTHH:MM:SSZ", found=run.get("started_utc")))
    if run.get("finished_utc") is not None and end is None:
        out.append(_p(f, "$.finished_utc", "not a UTC time stamp YYYY-MM-DDTHH:MM:SSZ", found=run.get("finished_utc")))
    if start is not None and end is not None:
        if end < start:
            out.append(_p(f, "$.finished_utc", "the run finished before it started",
                          expected=f">= {run['started_utc']}", found=run["finished_utc"]))
        wall = _num(run.get("wall_seconds"))
        if wall is not None and wall > (end - start) + 2.0:
            out.append(_p(f, "$.wall_seconds", f"wall time {wall:.1f} s exceeds start..finish "
                          f"({end - start:.0f} s, whole seconds)", expected=f"<= {end - start + 2:.0f}", found=wall))
        if wall is not None and wall < -0.0:
            out.append(_p(f, "$.wall_seconds", "negative wall time", found=wall))
    wall = _num(run.get("wall_seconds"))
    secs = [_num(_d(s).get("seconds")) for s in _l(run.get("stages"))]
    if any(s is not None and (s < 0 or not math.isfinite(s)) for s in secs):
        out.append(_p(f, "$.stages", "a stage has a negative or non-finite duration"))
    total = sum(s for s in secs if s is not None and math.isfinite(s) and s > 0)
    if wall is not None and total > wall + 1.0:
        out.append(_p(f, "$.stages", f"the stages take {total:.1f} s, more than the run's wall time {wall:.1f} s",
                      expected=f"<= {wall + 1.0:.1f}", found=round(total, 3)))
    # the packer's default name is <study>-<profile or 'imported'>-<start stamp>
    st = _d(run.get("study"))
    label = "imported" if meta.get("source") == "imported" else st.get("profile")
    prefix = f"{st.get('name')}-{label}-"
    name = meta.get("name")
    if isinstance(name, str) and name.startswith(prefix) and isinstance(run.get("started_utc"), str):
        stamp = re.sub(r"[^0-9T]", "", run["started_utc"][:19]) or "undated"
        if name[len(prefix):] != stamp:
            out.append(_p("data/bundle.json", "$.name", "the bundle name's time stamp is not the run's start "
                          "(run.json started_utc)", expected=prefix + stamp, found=name))
    return out


def _environment_problems(documents) -> list[dict]:
    out = []
    run = _d(documents.get("run"))
    fields = _d(_d(documents.get("environment")).get("fields"))

    def val(k):
        return _d(fields.get(k)).get("value")

    prec = _d(run.get("precision"))
    if "float32_matmul_precision" in prec and val("float32_matmul_precision") is not None \
            and prec["float32_matmul_precision"] != val("float32_matmul_precision"):
        out.append(_p(_DOC_FILE["environment"], "$.fields.float32_matmul_precision.value",
                      "environment.json's float32 matmul precision differs from run.json's",
                      expected=prec["float32_matmul_precision"], found=val("float32_matmul_precision")))
    cc = _d(run.get("compile_cache"))
    envvars = val("env")
    if cc.get("set_by") == "environment" and isinstance(envvars, dict) and \
            envvars.get("CUDA_CACHE_DISABLE") != cc.get("CUDA_CACHE_DISABLE"):
        out.append(_p(_DOC_FILE["environment"], "$.fields.env.value.CUDA_CACHE_DISABLE",
                      "run.json says CUDA_CACHE_DISABLE came from the environment; environment.json records another value",
                      expected=cc.get("CUDA_CACHE_DISABLE"), found=envvars.get("CUDA_CACHE_DISABLE")))
    for i, v in enumerate(_variants(documents)):
        disabled = v.get("nvrtc_cache_disabled_by")
        if isinstance(disabled, list) and "CUDA_CACHE_DISABLE=1" in disabled and cc and \
                cc.get("CUDA_CACHE_DISABLE") != "1":
            out.append(_p(_DOC_FILE["compile"], f"$.variants[{i}].nvrtc_cache_disabled_by",
                          f"{_cut(v.get('name'))}: says CUDA_CACHE_DISABLE=1 was in effect; run.json says it was not",
                          expected=cc.get("CUDA_CACHE_DISABLE"), found="1"))
    tv = val("torch_version")
    pd = _d(_d(documents.get("correctness")).get("predicate_direction"))
    if tv is not None and pd.get("torch_version") is not None and pd["torch_version"] != tv:
        out.append(_p(_DOC_FILE["correctness"], "$.predicate_direction.torch_version",
                      "the predicate witness ran under another torch than environment.json records",
                      expected=tv, found=pd["torch_version"]))
    return out


def _round_problems(documents) -> list[dict]:

    out = []
    f = _DOC_FILE["timings"]
    for i, b in enumerate(_l(_d(documents.get("timings")).get("blocks"))):
        if not isinstance(b, dict):
            continue
        arms = [a for a in _l(b.get("arms")) if isinstance(a, str)]
        rounds = _l(b.get("rounds"))
        proto = _d(b.get("protocol"))
        bid = _cut(b.get("id"))
        if len(set(arms)) != len(arms):
            out.append(_p(f, f"$.blocks[{i}].arms", f"block {bid}: an arm is listed twice", found=arms))
        seed = proto.get("order_seed")
        rng = random.Random(seed) if _is_int(seed) else None
        bad_order = bad_time = bad_thr = False
        for j, r in enumerate(rounds):
            r = _d(r)
            order = r.get("order")
            if rng is not None:
                want = list(arms)
                rng.shuffle(want)
                if order != want and not bad_order:
                    bad_order = True
                    msg = ("is not a permutation of the block's arms" if sorted(map(str, _l(order))) != sorted(arms)
                           else f"is not the order random.Random({seed}) gives")
                    out.append(_p(f, f"$.blocks[{i}].rounds[{j}].order", f"block {bid}: round {j}'s order {msg} "
                                  "(rounds reordered, dropped or inserted)", expected=want, found=order))
            times = _d(r.get("times_ms"))
            if not bad_time and any(_num(t) is None or not (math.isfinite(_num(t)) and _num(t) > 0)
                                    for t in times.values()):
                bad_time = True
                out.append(_p(f, f"$.blocks[{i}].rounds[{j}].times_ms",
                              f"block {bid}: a time is not a finite positive number of milliseconds"))
            clk = _d(r.get("clocks"))
            if not bad_thr and "throttled" in clk and _is_int(clk.get("throttle_reasons")) \
                    and bool(clk["throttle_reasons"] & THROTTLE_MASK) != clk["throttled"]:
                bad_thr = True
                out.append(_p(f, f"$.blocks[{i}].rounds[{j}].clocks.throttled",
                              f"block {bid}: 'throttled' contradicts throttle_reasons "
                              f"0x{clk['throttle_reasons']:x}", expected=bool(clk["throttle_reasons"] & THROTTLE_MASK),
                              found=clk["throttled"]))
    return out


def _pass(chk: Any, pred: str) -> bool | None:
    r = _d(chk).get(pred)
    if isinstance(r, dict) and isinstance(r.get("pass"), bool):
        return r["pass"]
    return None


def _eligibility_problems(documents, measured) -> list[dict]:
    """Eligibility for timing re-derived as harness/run.py derives it; for measured results
    also the arms of each study (and cold-L2) block of the task."""
    out = []
    cor = _d(documents.get("correctness"))
    tasks = _d(cor.get("tasks"))
    fp = [c for c in _l(cor.get("full_program")) if isinstance(c, dict)]
    blocks = [b for b in _l(_d(documents.get("timings")).get("blocks")) if isinstance(b, dict)]
    for t, td in sorted(tasks.items()):
        td = _d(td)
        elig = td.get("eligible_for_timing")
        if not isinstance(elig, dict):
            continue
        for n, rec in sorted(elig.items()):
            oks = [_pass(_d(c.get("checks")).get(n), "official") for c in fp if _d(c.get("case")).get("task") == _int(t)]
            oks += [_pass(_d(_d(c).get("checks")).get(n), _d(c).get("criterion"))
                    for sec in td.values() if isinstance(sec, list) for c in sec]
            oks.append(_pass(_d(_d(td.get("timing_input")).get("checks")).get(n), "official"))
            if "graph_mutation" in td:
                oks.append(_pass(_d(_d(td.get("graph_mutation")).get("checks")).get(n), "official"))
            if any(o is False for o in oks):
                want = False
            elif all(o is True for o in oks):
                want = True
            else:
                continue  # undecidable from what was recorded (imported summaries)
            if rec != want:
                out.append(_p(_DOC_FILE["correctness"], f'$.tasks["{_cut(t)}"].eligible_for_timing.{_cut(n)}',
                              f"task {_cut(t)}: {_cut(n)}'s timing eligibility does not follow from its checks",
                              expected=want, found=rec))
        if not measured:
            continue
        ts = _d(td.get("torchscript"))
        ts_ok = bool(ts) and all(_pass(c, "official") is True for c in ts.values())
        ind = _d(td.get("inductor"))
        for i, b in enumerate(blocks):
            if b.get("kind") not in ("study", "cold_l2") or str(b.get("task")) != str(t):
                continue
            scope = b.get("scope")
            sfx = "" if scope == "full" else f"_{scope}"
            want = (["l2_flush_only"] if b.get("kind") == "cold_l2" else []) + [f"eager{sfx}"]
            if ts_ok:
                want.append(f"torchscript{sfx}")
            # the engine times the variants in the study's (compile) order; the JSON keys are sorted
            order = [v.get("name") for v in _variants(documents)]
            want += sorted((n for n, e in elig.items() if e is True),
                           key=lambda n: (order.index(n) if n in order else len(order), n))
            if ind and _pass(ind.get(scope), "official") is True:
                want.append(f"inductor{sfx}")
            if b.get("arms") != want:
                out.append(_p(_DOC_FILE["timings"], f"$.blocks[{i}].arms",
                              f"block {_cut(b.get('id'))}: the arms are not the eligible variants and passing "
                              "baselines of task " + _cut(str(t)), expected=want, found=b.get("arms")))
    for i, b in enumerate(blocks):
        if b.get("kind") == "extra_shape" and measured:
            es = [c for c in _l(cor.get("extra_shapes")) if isinstance(c, dict)
                  and _d(c.get("case")).get("task") == b.get("task")
                  and all(b.get(k) == v for k, v in _d(c.get("case")).items() if k not in ("task", "seed"))]
            if len(es) == 1:
                chk = _d(es[0].get("checks"))
                order = [v.get("name") for v in _variants(documents)]
                want = ["eager"] + (["torchscript"] if _pass(chk.get("torchscript"), "official") else []) + \
                    sorted((n for n in chk if n not in ("torchscript",) and _pass(chk[n], "official") is True),
                           key=lambda n: (order.index(n) if n in order else len(order), n))
                if b.get("arms") != want:
                    out.append(_p(_DOC_FILE["timings"], f"$.blocks[{i}].arms", f"block {_cut(b.get('id'))}: the arms "
                                  "are not the variants that passed at this shape", expected=want, found=b.get("arms")))
        if "checks" in b and b.get("kind") not in ("study", "cold_l2", "extra_shape"):  # a probe checked first
            chk = _d(b.get("checks"))
            passes = [_pass(c, "official") for c in chk.values()]
            timed = bool(_l(b.get("rounds")))
            if passes and all(p is True for p in passes) and not timed:
                out.append(_p(_DOC_FILE["timings"], f"$.blocks[{i}].rounds", f"block {_cut(b.get('id'))}: every "
                              "variant passed its check, yet the block was not timed"))
            if any(p is False for p in passes) and timed:
                out.append(_p(_DOC_FILE["timings"], f"$.blocks[{i}].rounds", f"block {_cut(b.get('id'))}: a variant "
                              "failed its check on the timing input, yet the block was timed"))
    return out


def _int(x: Any) -> Any:
    try:
        return int(x)
    except (TypeError, ValueError):
        return x


# --------------------------------------------------------------------- tier 3: the study


def _norm(x: Any) -> Any:
    """JSON-shaped copy (tuples as lists) for comparisons."""
    if isinstance(x, (list, tuple)):
        return [_norm(v) for v in x]
    if isinstance(x, dict):
        return {str(k): _norm(v) for k, v in x.items()}
    return x


def study_problems(study, documents: Mapping[str, dict], binding=None) -> list[dict]:
    """Tier 3: the documents against the verifier's OWN resolved study.

    ``study``: a :class:`kbrepro.harness.study.StudyConfig` the verifier loaded from its own
    study folder (``studies/<name>``) with the profile the run recorded (never the bundle's
    copy); ``documents`` as for :func:`document_problems`. Returns problem dicts; raises
    nothing.

    Checks: study name and profile; (measured) the resolved definition run.json recorded
    equals the verifier's, key by key; the stage list; selftest.json present exactly when
    the study's ``extras.self_test`` says so; one KernelBench file per task the study uses
    task in run.json's list; precision modes (run.json, environment.json); predicate
    atol/rtol, names and definitions (argument order included) equal the verifier's own
    ``harness.checks.PREDICATES``, and the predicate-direction witness gives the verdicts
    the verifier computes; compile variants: names, routes, requested options, the FTZ mode
    of :func:`expected_ftz` (``expected_ftz`` and ``ftz_evidence.expected``) and, for the
    NVRTC route, the exact option list ``kernels.compile.nvrtc_options`` gives, for the CuPy
    route the requested options in order and an effective FTZ mode equal to the expected
    one; the exact correctness case set (tasks x seeds x distributions in the run's order,
    with the variant set of every check), task controls (names, boundary shape and
    criterion, timing-input seed, graph-mutation parameters, TorchScript, Inductor), extra
    shapes, tiny-value controls (shape, bias, criterion, domain, cross pairs); timing
    blocks: the exact set of block ids the study gives, each block's protocol (mode,
    warmups, rounds unless adaptive, invocations per pair, order seed, adaptive rule, L2
    regime) equal to the verifier's, FTZ-cost arms; the witness task and inputs (as
    float32 bits) and its output set; then the binding's own checks of its documents, and
    the copy and floor blocks the study's extras make the engine write
    (:func:`bundle.derived_facts.study_problems`).

    Imported results are not held to what an import cannot have: the resolved definition,
    the stage list, the KernelBench file list, the witness, per-case variant sets (the
    post's scripts ran subsets), block ids and arms; their variants must be study variants
    with the study's route and FTZ mode, their case sets must be the study's, and every
    timing block's protocol must be the study's for its kind.
    """
    out: list[dict] = []
    imported = _imported(documents)
    out += _study_identity(study, documents, imported, binding)
    out += _study_predicate(study, documents)
    out += _study_variants(study, documents, imported)
    out += _study_cases(study, documents, imported, binding)
    out += _study_blocks(study, documents, imported, binding)
    out += _study_witness(study, documents, imported)
    if binding is not None:
        try:
            out += list(binding.crosscheck(study, documents, imported))
        except Exception as exc:  # a study's checks must not crash the verifier
            out.append(_p(None, None, f"the study's own checks failed on these documents: {type(exc).__name__}: "
                          f"{_cut(str(exc))}"))
    return out


def _stages(study, binding=None) -> list[str]:
    """The stages harness/run.py runs for ``study``, in order."""
    ex = study.doc.get("extras", {}) or {}
    names = ["setup", "compile"] + (["witness"] if study.doc.get("witness") else [])
    if ex.get("measurement_floor"):
        names.append("measurement_floor")
    if ex.get("roofline") or ex.get("self_test"):
        names.append("copy_bandwidth")
    names += [f"task_{t}" for t in study.tasks]
    if study.doc.get("extra_shapes"):
        names.append("extra_shapes")
    if binding is not None:
        names += list(binding.stage_names(study))
    if ex.get("self_test"):
        names.append("self_test")
    return names


def _study_identity(study, documents, imported, binding=None) -> list[dict]:
    out = []
    f = _DOC_FILE["run"]
    run = _d(documents.get("run"))
    rs = _d(run.get("study"))
    if rs.get("name") != study.name:
        out.append(_p(f, "$.study.name", "the run's study is not the verifier's", expected=study.name,
                      found=rs.get("name")))
    if rs.get("profile") != study.profile:
        out.append(_p(f, "$.study.profile", "the run's profile differs from the one the verifier resolved",
                      expected=study.profile, found=rs.get("profile")))
    ex = study.doc.get("extras", {}) or {}
    if not imported:
        resolved = _d(rs.get("resolved"))
        own = _norm(study.doc)
        for k in sorted(set(own) | set(resolved)):
            if _norm(resolved.get(k)) != own.get(k):
                out.append(_p(f, f"$.study.resolved.{k}", f"the run's resolved study differs from the verifier's "
                              f"in '{_cut(k)}'", expected=own.get(k), found=resolved.get(k)))
        names = [_d(s).get("name") for s in _l(run.get("stages"))]
        if run.get("status") == "complete" and binding is not None and names != _stages(study, binding):
            out.append(_p(f, "$.stages", "the stages are not the ones the study runs, in order",
                          expected=_stages(study, binding), found=names))
        if ("witness" in documents) != bool(study.doc.get("witness")):
            out.append(_p(_DOC_FILE["witness"], None, "witness.json " + ("is missing although the study has a "
                          "witness" if "witness" not in documents else "is present although the study has no witness")))
        for dname in sorted((binding.documents if binding is not None else {})):
            if dname not in documents:
                out.append(_p(_DOC_FILE[dname], None, f"{dname}.json, a document of the study, is missing"))
        has_self = "selftest" in documents
        if has_self != bool(ex.get("self_test")):
            out.append(_p(_DOC_FILE["selftest"], None, "selftest.json " + ("is missing although the study runs the "
                          "self-tests" if not has_self else "is present although the study runs no self-tests")))
        kb_files = [x for x in _l(_d(run.get("kernelbench")).get("files")) if isinstance(x, str)]
        keys = binding.kernelbench_tasks(study) if binding is not None else study.task_keys
        for lv, t in sorted(set(keys)):
            hits = [x for x in kb_files if re.match(rf"^KernelBench/level{lv}/{t}_[^/]+\.py$", x)]
            if len(hits) != 1:
                out.append(_p(f, "$.kernelbench.files", f"task {t}: run.json lists {len(hits)} KernelBench files "
                              "for it; the study uses exactly one", expected=1, found=len(hits)))
    prec = study.doc.get("precision", {})
    rp = _d(run.get("precision"))
    for k, v in prec.items():
        if k in rp and rp[k] != v:
            out.append(_p(f, f"$.precision.{k}", f"precision mode {k} differs from the study", expected=v, found=rp[k]))
        elif k not in rp and not imported:
            out.append(_p(f, f"$.precision.{k}", f"precision mode {k} not recorded", expected=v))
    env = _d(_d(documents.get("environment")).get("fields"))
    ev = _d(env.get("float32_matmul_precision")).get("value")
    if ev is not None and ev != prec.get("float32_matmul_precision"):
        out.append(_p(_DOC_FILE["environment"], "$.fields.float32_matmul_precision.value",
                      "float32 matmul precision differs from the study", expected=prec.get("float32_matmul_precision"),
                      found=ev))
    return out


def _study_predicate(study, documents) -> list[dict]:

    out = []
    f = _DOC_FILE["correctness"]
    cor = _d(documents.get("correctness"))
    pred = _d(cor.get("predicate"))
    sp = study.doc.get("predicate", {})
    for key, want in (("atol", float(sp.get("atol"))), ("rtol", float(sp.get("rtol")))):
        got = _num(pred.get(key))
        if got != want:
            out.append(_p(f, f"$.predicate.{key}", f"predicate {key} differs from the study", expected=want,
                          found=pred.get(key)))
    for key in ("official", "legacy"):
        if pred.get(key) != sp.get(key):
            out.append(_p(f, f"$.predicate.{key}", f"the {key} predicate is not the study's", expected=sp.get(key),
                          found=pred.get(key)))
    defs = _d(pred.get("definitions"))
    for name in (sp.get("official"), sp.get("legacy")):
        own = _norm(checks.PREDICATES.get(name))
        if own is not None and _norm(defs.get(name)) != own:
            bad = sorted(k for k in set(own) | set(_d(defs.get(name))) if _norm(_d(defs.get(name)).get(k)) != own.get(k))
            out.append(_p(f, f"$.predicate.definitions.{name}", f"predicate {name} is defined differently from the "
                          f"verifier's own definition ({', '.join(map(str, bad))[:_CUT]})",
                          expected={k: own.get(k) for k in bad}, found={k: _d(defs.get(name)).get(k) for k in bad}))
    pd = cor.get("predicate_direction")
    if isinstance(pd, dict):
        atol, rtol = float(sp.get("atol")), float(sp.get("rtol"))
        if _num(pd.get("atol")) != atol or _num(pd.get("rtol")) != rtol:
            out.append(_p(f, "$.predicate_direction", "the predicate-direction witness used other tolerances",
                          expected=[atol, rtol], found=[pd.get("atol"), pd.get("rtol")]))
        ref, cand = _num(pd.get("reference")), _num(pd.get("candidate"))
        if ref is not None and cand is not None:
            want = {"allclose_reference_candidate": abs(ref - cand) <= atol + rtol * abs(cand),
                    "allclose_candidate_reference": abs(cand - ref) <= atol + rtol * abs(ref)}
            for dtype, res in sorted(_d(pd.get("results")).items()):
                for k, w in want.items():
                    if k in _d(res) and _d(res)[k] != w:
                        out.append(_p(f, f"$.predicate_direction.results.{dtype}.{k}",
                                      "the predicate-direction verdict is not what allclose gives for these inputs",
                                      expected=w, found=_d(res)[k]))
    return out


def _study_variants(study, documents, imported) -> list[dict]:

    out = []
    f = _DOC_FILE["compile"]
    want_ftz = expected_ftz(study)
    own = {v.name: v for v in study.variants}
    recs = _variants(documents)
    names = [v.get("name") for v in recs]
    if not imported and names != [v.name for v in study.variants]:
        out.append(_p(f, "$.variants", "the compiled variants are not the study's, in order",
                      expected=[v.name for v in study.variants], found=names))
    for i, r in enumerate(recs):
        n = r.get("name")
        sv = own.get(n)
        if sv is None:
            if imported or names == [v.name for v in study.variants]:
                out.append(_p(f, f"$.variants[{i}].name", f"variant {_cut(n)} is not in the study",
                              expected=sorted(own), found=n))
            continue
        if r.get("route") != sv.route:
            out.append(_p(f, f"$.variants[{i}].route", f"{n}: route differs from the study", expected=sv.route,
                          found=r.get("route")))
        if r.get("expected_ftz") != want_ftz[n]:
            out.append(_p(f, f"$.variants[{i}].expected_ftz", f"{n}: the FTZ mode its route and options give is "
                          f"ftz={str(want_ftz[n]).lower()}", expected=want_ftz[n], found=r.get("expected_ftz")))
        evx = _d(r.get("ftz_evidence")).get("expected")
        if "expected" in _d(r.get("ftz_evidence")) and evx != want_ftz[n]:
            out.append(_p(f, f"$.variants[{i}].ftz_evidence.expected", f"{n}: the FTZ evidence is judged against "
                          "the wrong mode", expected=want_ftz[n], found=evx))
        req = r.get("requested_options")
        if not imported and req is not None and req != list(sv.options):
            out.append(_p(f, f"$.variants[{i}].requested_options", f"{n}: requested options differ from the study",
                          expected=list(sv.options), found=req))
        eff = r.get("effective_options")
        if not isinstance(eff, list):
            continue
        if imported:
            pass  # the post's scripts passed the architecture themselves and predate --no-cache
        elif sv.route == "nvrtc":
            ver = r.get("nvrtc_version")
            if isinstance(ver, list) and len(ver) == 2 and all(_is_int(x) for x in ver) and isinstance(r.get("arch"), str):
                try:
                    exp = list(kc.nvrtc_options(sv, r["arch"], tuple(ver)))
                except Exception:  # the verifier's own variant names an arch: nothing to compare
                    exp = None
                if exp is not None and eff != exp:
                    out.append(_p(f, f"$.variants[{i}].effective_options", f"{n}: the options NVRTC received are not "
                                  "the study's options + architecture (+ --no-cache)", expected=exp, found=eff))
        else:
            it = iter(eff)
            if not all(any(o == e for e in it) for o in sv.options):
                out.append(_p(f, f"$.variants[{i}].effective_options", f"{n}: the study's options are not among the "
                              "options NVRTC received, in order", expected=list(sv.options), found=eff))
        got = _ftz_from_options([str(o) for o in eff], False)
        if got != want_ftz[n]:
            out.append(_p(f, f"$.variants[{i}].effective_options", f"{n}: the options NVRTC received give "
                          f"ftz={str(got).lower()}, the study's variant ftz={str(want_ftz[n]).lower()}",
                          expected=want_ftz[n], found=got))
    return out


def _criterion_of(vals: list) -> str:
    return "equal_nan_stress" if any(isinstance(v, float) and math.isnan(v) for v in vals) else "official"


def _study_cases(study, documents, imported, binding=None) -> list[dict]:

    out = []
    f = _DOC_FILE["correctness"]
    cor = _d(documents.get("correctness"))
    doc = study.doc
    vnames = [v.name for v in study.variants]
    ex = doc.get("extras", {}) or {}
    inductor = bool(ex.get("inductor"))

    def vset(checks: Any, path: str, what: str, extra: tuple = ()) -> None:
        keys = list(_d(checks))
        allowed = vnames + list(extra)
        if imported:
            bad = [k for k in keys if k not in allowed]
            if bad or not keys:
                out.append(_p(f, path, f"{what}: checks of variants the study does not compile", expected=allowed,
                              found=keys))
        elif sorted(keys) != sorted(allowed):
            out.append(_p(f, path, f"{what}: the checked variants are not the study's", expected=sorted(allowed),
                          found=sorted(keys)))

    want = [(t, s, d) for t in study.tasks for s in doc["correctness"]["seeds"] for d in doc["correctness"]["distributions"]]
    fp = [c for c in _l(cor.get("full_program")) if isinstance(c, dict)]
    got = [(_d(c.get("case")).get("task"), _d(c.get("case")).get("seed"), _d(c.get("case")).get("distribution"))
           for c in fp]
    if got != want:
        missing = [k for k in want if k not in got]
        extra = [k for k in got if k not in want]
        dup = sorted({k for k in got if got.count(k) > 1}, key=str)
        what = []
        if missing:
            what.append(f"{len(missing)} missing (first {list(missing[0])})")
        if extra:
            what.append(f"{len(extra)} not in the study (first {list(extra[0])})")
        if dup:
            what.append(f"{len(dup)} repeated (first {list(dup[0])})")
        if not what:
            what.append("the run's order (tasks, seeds, distributions) changed")
        out.append(_p(f, "$.full_program", f"the full-program cases are not the study's {len(want)}: "
                      + "; ".join(what), expected=len(want), found=len(got)))
    for i, c in enumerate(fp):
        vset(c.get("checks"), f"$.full_program[{i}].checks", f"full-program case {i}")
    tdocs = _d(cor.get("tasks"))
    if sorted(tdocs) != sorted(str(t) for t in study.tasks):
        out.append(_p(f, "$.tasks", "the task controls are not the study's tasks",
                      expected=[str(t) for t in study.tasks], found=sorted(tdocs)))
    mut = (doc.get("controls") or {}).get("graph_mutation")
    sections = set(binding.section_names) if binding is not None else None
    for t in study.tasks:
        td = tdocs.get(str(t))
        if not isinstance(td, dict):
            continue
        base = f'$.tasks["{t}"]'
        if sections is not None and not imported:
            got_sections = sorted(k for k, v in td.items() if isinstance(v, list))
            if got_sections != sorted(sections):
                out.append(_p(f, base, f"task {t}: the control sections are not the study's",
                              expected=sorted(sections), found=got_sections))
        for sec, recs in sorted(td.items()):
            if not isinstance(recs, list):
                continue
            for j, c in enumerate(recs):
                vset(_d(c).get("checks"), f"{base}.{sec}[{j}].checks", f"task {t} control {_cut(_d(c).get('name'))}")
        ti = _d(td.get("timing_input"))
        if "seed" in ti and ti.get("seed") != doc["timing"]["seed"]:
            out.append(_p(f, f"{base}.timing_input.seed", f"task {t}: timing-input seed differs from the study",
                          expected=doc["timing"]["seed"], found=ti.get("seed")))
        if ti:
            vset(ti.get("checks"), f"{base}.timing_input.checks", f"task {t} timing input")
        gm = _d(td.get("graph_mutation"))
        if mut is None and gm and not imported:
            out.append(_p(f, f"{base}.graph_mutation", f"task {t}: a graph-mutation control the study does not run"))
        if gm.get("mutation") is not None and _norm(gm.get("mutation")) != _norm(mut):
            out.append(_p(f, f"{base}.graph_mutation.mutation", f"task {t}: graph-mutation parameters differ from "
                          "the study", expected=mut, found=gm.get("mutation")))
        if gm:
            vset(gm.get("checks"), f"{base}.graph_mutation.checks", f"task {t} graph mutation")
        ts = td.get("torchscript")
        want_ts = sorted(["full", *(binding.scope_names if binding is not None else ())])
        if not imported and binding is None and (not isinstance(ts, dict) or "full" not in ts):
            out.append(_p(f, f"{base}.torchscript", f"task {t}: no TorchScript check of the full "
                          "program, which the engine always makes"))
        if not imported and binding is not None and (not isinstance(ts, dict) or sorted(ts) != want_ts):
            out.append(_p(f, f"{base}.torchscript", f"task {t}: TorchScript checks of the full program and every "
                          "scope expected", expected=want_ts, found=sorted(_d(ts))))
        if not imported and ("inductor" in td) != inductor:
            out.append(_p(f, f"{base}.inductor", f"task {t}: Inductor checks " + ("missing although the study "
                          "compiles with Inductor" if inductor else "present although the study has no Inductor")))
    want_es = [(t, es["seed"]) for es in doc.get("extra_shapes") or [] for t in study.tasks]
    got_es = [(_d(c.get("case")).get("task"), _d(c.get("case")).get("seed"))
              for c in _l(cor.get("extra_shapes")) if isinstance(c, dict)]
    if got_es != want_es and not (imported and [a for a, _ in got_es] == [a for a, _ in want_es]):
        out.append(_p(f, "$.extra_shapes", "the extra-shape cases are not the study's",
                      expected=[list(x) for x in want_es], found=[list(x) for x in got_es]))
    for i, c in enumerate(_l(cor.get("extra_shapes"))):
        vset(_d(c).get("checks"), f"$.extra_shapes[{i}].checks", f"extra shape {i}", ("torchscript",))
    return out


def _expected_blocks(study, documents, binding=None) -> dict[str, dict]:
    """id -> {"kind", "protocol" (doc), "arms" (or None)} of every block the study gives:
    the engine's (full program and every scope of the binding, cold-L2 twins, extra
    shapes) and the binding's own (:meth:`StudyBinding.expected_blocks`)."""
    doc = study.doc
    ex = doc.get("extras", {}) or {}
    ad = ex.get("adaptive")
    blocks = {_d(b).get("id"): _d(b) for b in _l(_d(documents.get("timings")).get("blocks"))}
    vnames = [v.name for v in study.variants]
    scopes = list(binding.scope_names) if binding is not None else []

    def proto(mode: str, bid: str, l2: str = "warm") -> dict:
        base = study.timing_protocol(mode)
        if not ad:
            return TimingProtocol(**{**base.__dict__, "l2": l2}).to_doc()
        arms = [a for a in _l(blocks.get(bid, {}).get("arms")) if isinstance(a, str)]
        pairs = tuple((v, b) for v in [a for a in arms if a in vnames] for b in [a for a in arms if a not in vnames])
        rule = AdaptiveRule(target_rel_half_width=ad["target_rel_half_width"], min_rounds=ad.get("min_rounds", 10),
                            max_rounds=ad["max_rounds"], max_seconds=ad["max_seconds"], pairs=pairs)
        return TimingProtocol(mode=mode, warmups=base.warmups, rounds=rule.min_rounds,
                              invocations_per_pair=base.invocations_per_pair, order_seed=base.order_seed,
                              adaptive=rule, l2=l2).to_doc()

    out: dict[str, dict] = {}
    modes = doc["timing"]["modes"]
    for t in study.tasks:
        for scope in ["full", *scopes]:
            for mode in modes:
                bid = BlockKey(t, scope, mode).id
                out[bid] = {"kind": "study", "protocol": proto(mode, bid), "arms": None}
        if ex.get("cold_l2"):
            for scope in [*scopes, "full"]:
                for mode in (("graph",) if scope == "full" else ("events", "graph")):
                    bid = BlockKey(t, scope, mode, "cold_l2").id
                    out[bid] = {"kind": "cold_l2", "protocol": proto(mode, bid, "cold"), "arms": None}
    for es in doc.get("extra_shapes") or []:
        label = binding.size_label(es["size"]) if binding is not None else None
        for t in study.tasks:
            for mode in modes:
                if label is None:
                    continue
                bid = BlockKey(t, "full", mode, "extra_shape", label).id
                out[bid] = {"kind": "extra_shape", "protocol": study.timing_protocol(mode, rounds=es["rounds"]).to_doc(),
                            "arms": None}
    if binding is not None:
        out.update(binding.expected_blocks(study))
    return out


def _study_blocks(study, documents, imported, binding=None) -> list[dict]:
    out = []
    f = _DOC_FILE["timings"]
    doc = study.doc
    ex = doc.get("extras", {}) or {}
    blocks = [b for b in _l(_d(documents.get("timings")).get("blocks")) if isinstance(b, dict)]
    if imported:
        # the post's ids and arms differ; the protocol of each kind must still be the study's
        by_kind = {"study": [study.timing_protocol(m).to_doc() for m in doc["timing"]["modes"]],
                   "extra_shape": [study.timing_protocol(m, rounds=es["rounds"]).to_doc()
                                   for es in doc.get("extra_shapes") or [] for m in doc["timing"]["modes"]]}
        for w in (binding.expected_blocks(study).values() if binding is not None else ()):
            by_kind.setdefault(w["kind"], []).append(w["protocol"])
        for i, b in enumerate(blocks):
            allowed = by_kind.get(b.get("kind"))
            if allowed is None:
                out.append(_p(f, f"$.blocks[{i}].kind", f"block {_cut(b.get('id'))}: kind not in the study",
                              expected=sorted(by_kind), found=b.get("kind")))
            elif _norm(b.get("protocol")) not in [_norm(a) for a in allowed]:
                out.append(_p(f, f"$.blocks[{i}].protocol", f"block {_cut(b.get('id'))}: protocol is not the "
                              f"study's for {b.get('kind')} blocks", expected=allowed[0], found=b.get("protocol")))
        return out
    want = _expected_blocks(study, documents, binding)
    authors: set = set()
    if binding is None:
        # a study this verifier does not ship: the engine's full-program blocks (and their
        # cold-L2 twins) follow from the study definition alone and are required; blocks of
        # the binding's scopes, extra shapes and probes are the author's (the result is partial)
        want = {k: v for k, v in want.items() if k.split(".")[1] == "full" and v["kind"] in ("study", "cold_l2")}
        authors = {b.get("id") for b in blocks if b.get("id") not in want}
    ids = [b.get("id") for b in blocks]
    seen = set()
    for i, b in enumerate(blocks):
        bid = b.get("id")
        if bid in seen:
            out.append(_p(f, f"$.blocks[{i}].id", f"block {_cut(bid)} appears twice"))
            continue
        seen.add(bid)
        w = want.get(bid)
        if w is None and bid in authors:
            continue
        if w is None:
            kind = b.get("kind")
            if (kind == "floor" and ex.get("measurement_floor")) or \
                    (kind == "copy" and (ex.get("roofline") or ex.get("self_test"))):
                continue
            out.append(_p(f, f"$.blocks[{i}].id", f"block {_cut(bid)} is not one the study times",
                          found=_cut(bid)))
            continue
        if b.get("kind") != w["kind"]:
            out.append(_p(f, f"$.blocks[{i}].kind", f"block {bid}: kind differs from the study", expected=w["kind"],
                          found=b.get("kind")))
        if _norm(b.get("protocol")) != _norm(w["protocol"]):
            p, q = _norm(w["protocol"]), _d(_norm(b.get("protocol")))
            keys = sorted(k for k in set(p) | set(q) if p.get(k) != q.get(k))
            out.append(_p(f, f"$.blocks[{i}].protocol", f"block {bid}: protocol differs from the study's in "
                          f"{', '.join(keys)[:_CUT]}", expected={k: p.get(k) for k in keys},
                          found={k: q.get(k) for k in keys}))
        if w["arms"] is not None and b.get("arms") != w["arms"]:
            out.append(_p(f, f"$.blocks[{i}].arms", f"block {bid}: arms differ from the study", expected=w["arms"],
                          found=b.get("arms")))
        t = bid.split(".", 1)[0]
        if str(b.get("task")) != t or (b.get("mode") not in (None, bid.split(".")[2] if bid.count(".") >= 2 else None)):
            out.append(_p(f, f"$.blocks[{i}]", f"block {bid}: task or mode contradicts its id",
                          found=[b.get("task"), b.get("mode")]))
    missing = [k for k in want if k not in ids]
    if missing:
        out.append(_p(f, "$.blocks", f"{len(missing)} timing block(s) of the study missing (first {missing[0]})",
                      expected=missing[:10]))
    return out + derived_facts.study_problems(study, documents)


def _study_witness(study, documents, imported) -> list[dict]:
    """The witness ran the study's task at its inputs (float32 bits) for the reference and
    every variant (and Inductor); whether it discriminates follows from its CPU references;
    verdicts follow from the bits (harness/run.py ``witness_flushes``)."""
    out = []
    ex = study.doc.get("extras", {}) or {}
    w = study.doc.get("witness")
    wit = documents.get("witness")
    f = _DOC_FILE["witness"]
    if not (isinstance(wit, dict) and w):
        return out
    if wit.get("task") != task_key(w["task"])[1]:
        out.append(_p(f, "$.task", "the witness ran another task than the study's", expected=task_key(w["task"])[1],
                      found=wit.get("task")))
    want_bits = [_f32_bits(v) for v in values(w["inputs"])]
    got_bits = [_d(r).get("bits") for r in _l(wit.get("inputs"))]
    if got_bits != want_bits:
        out.append(_p(f, "$.inputs", "the witness inputs are not the study's (float32 bits)", expected=want_bits,
                      found=got_bits))
    outs = _d(wit.get("outputs"))
    want_out = ["reference"] + [v.name for v in study.variants] + (["inductor"] if ex.get("inductor") else [])
    if sorted(outs) != sorted(want_out) and not imported:
        out.append(_p(f, "$.outputs", "the witness outputs are not the reference and the study's variants",
                      expected=sorted(want_out), found=sorted(outs)))
    n = len(_l(outs.get("reference")))
    for k, rows in sorted(outs.items()):
        if len(_l(rows)) != n:
            out.append(_p(f, f"$.outputs.{k}", f"{_cut(k)}: {len(_l(rows))} witness outputs, the reference has {n}",
                          expected=n, found=len(_l(rows))))
    if sorted(_d(wit.get("verdicts"))) != sorted(k for k in outs if k != "reference"):
        out.append(_p(f, "$.verdicts", "the witness verdicts are not one per output",
                      expected=sorted(k for k in outs if k != "reference"), found=sorted(_d(wit.get("verdicts")))))
    rc = _d(wit.get("reference_cpu"))
    keep, flush = _l(rc.get("keep")), _l(rc.get("flush"))
    if "reference_cpu" in wit and (len(keep) != n or len(flush) != n):
        out.append(_p(f, "$.reference_cpu", "the CPU references do not have one value per output",
                      expected=n, found=[len(keep), len(flush)]))
    elif "reference_cpu" in wit:
        disc = [i for i, (a, b) in enumerate(zip(keep, flush)) if _d(a).get("bits") != _d(b).get("bits")]
        if wit.get("discriminating_elements") != disc or wit.get("discriminates") != bool(disc):
            out.append(_p(f, "$.discriminating_elements", "the discriminating elements are not where the CPU "
                          "references with denormals kept and flushed differ", expected=disc,
                          found=wit.get("discriminating_elements")))
        for name, ver in sorted(_d(wit.get("verdicts")).items()):
            rows = _l(outs.get(name))
            try:
                want = witness_flushes(rows, keep, flush, disc) if len(rows) == n else None
            except (KeyError, TypeError, ValueError, IndexError):
                continue
            if _d(ver).get("flushes") != want:
                out.append(_p(f, f"$.verdicts.{_cut(name)}.flushes", f"{_cut(name)}: the FTZ verdict does not follow "
                              "from the recorded values", expected=want, found=_d(ver).get("flushes")))
    for i, v in enumerate(_variants(documents)):
        ev_w = _d(_d(v.get("ftz_evidence")).get("witness"))
        if ev_w.get("task") is not None and ev_w.get("task") != wit.get("task"):
            out.append(_p(_DOC_FILE["compile"], f"$.variants[{i}].ftz_evidence.witness.task",
                          f"{_cut(v.get('name'))}: the compile record's witness task differs from witness.json",
                          expected=wit.get("task"), found=ev_w.get("task")))
    return out


# ------------------------------------------------------------------------ tier 4: provenance


def provenance_problems(documents: Mapping[str, dict], files: Mapping[str, bytes], meta: Mapping,
                        binding=None) -> list[dict]:
    """Tier 4 (provenance): contradictions the verifier derives from bytes and numbers.

    ``documents``, ``files`` (bag-root relative paths -> bytes) and ``meta`` as for
    :func:`document_problems`. Returns problem dicts; raises nothing.

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
    out: list[dict] = []
    out += _binary_problems(documents, files)
    out += _kernelbench_listed(documents, files, meta)
    out += _witness_bits(documents)
    out += _check_arithmetic(documents)
    if binding is not None:
        try:
            out += list(binding.provenance(documents, files))
        except Exception as exc:  # a study's checks must not crash the verifier
            out.append(_p(None, None, f"the study's provenance checks failed: {type(exc).__name__}: {_cut(str(exc))}"))
    out += _privacy_problems(files)
    return out


def _sm(arch: Any) -> int | None:
    m = _ARCH.match(arch) if isinstance(arch, str) else None
    return int(m.group(1)) if m else None


def cubin_sm(data: bytes) -> int | None:
    """The SM number (e.g. 90) a CUDA cubin targets, read from its ELF header, or None if
    ``data`` is not a 64-bit little-endian CUDA ELF (e_machine EM_CUDA = 190). The field is
    e_flags bits 8..15 in the ABI of EI_ABIVERSION >= 8 (CUDA 12.8 and newer), bits 0..7
    before it."""
    if len(data) < 52 or data[:4] != _ELF_MAGIC or data[4] != 2 or data[5] != 1:
        return None
    if struct.unpack_from("<H", data, 18)[0] != _EM_CUDA:
        return None
    flags = struct.unpack_from("<I", data, 48)[0]
    return (flags >> 8) & 0xFF if data[8] >= 8 else flags & 0xFF


def _binary_problems(documents, files) -> list[dict]:
    out = []
    f = _DOC_FILE["compile"]
    env = _d(_d(documents.get("environment")).get("fields"))
    env_nvrtc = _d(env.get("nvrtc_version")).get("value")
    env_cc = _d(env.get("compute_capability")).get("value")
    env_sm = None
    if isinstance(env_cc, str) and re.match(r"^\d+\.\d+$", env_cc):
        major, minor = env_cc.split(".")
        env_sm = int(major) * 10 + int(minor)
    elif env_cc is not None:
        out.append(_p(_DOC_FILE["environment"], "$.fields.compute_capability.value",
                      "environment.json's compute capability is not of the form MAJOR.MINOR", found=_cut(env_cc)))
    for i, v in enumerate(_variants(documents)):
        name = _cut(v.get("name"))
        arch_sm = _sm(v.get("arch"))
        ver = v.get("nvrtc_version")
        ver_s = f"{ver[0]}.{ver[1]}" if isinstance(ver, list) and len(ver) == 2 else None
        if env_nvrtc is not None and ver_s is not None and env_nvrtc != ver_s:
            out.append(_p(f, f"$.variants[{i}].nvrtc_version", f"{name}: NVRTC {ver_s} in the compile record, "
                          f"{_cut(env_nvrtc)} in environment.json", expected=env_nvrtc, found=ver))
        if env_sm is not None and arch_sm is not None and env_sm != arch_sm:
            out.append(_p(f, f"$.variants[{i}].arch", f"{name}: compiled for {_cut(v.get('arch'))}, environment.json's "
                          f"GPU has compute capability {env_cc}", expected=f"sm_{env_sm}", found=v.get("arch")))
        ptx_ref = _d(v.get("ptx"))
        ptx = files.get(f"data/{ptx_ref.get('file')}") if ptx_ref.get("file") else None
        if ptx is not None:
            m = _PTX_RELEASE.search(ptx[:4096])
            if m is None:
                out.append(_p(f"data/{ptx_ref['file']}", None, f"{name}: the PTX header names no CUDA compilation "
                              "tools release"))
            else:
                rel = [int(m.group(1)), int(m.group(2))]
                if ver is not None and rel != ver:
                    out.append(_p(f, f"$.variants[{i}].nvrtc_version", f"{name}: the bundled PTX was made by release "
                                  f"{rel[0]}.{rel[1]}, the compile record says NVRTC {ver_s}", expected=rel, found=ver))
                if env_nvrtc is not None and f"{rel[0]}.{rel[1]}" != env_nvrtc:
                    out.append(_p(_DOC_FILE["environment"], "$.fields.nvrtc_version.value",
                                  f"{name}: the bundled PTX was made by release {rel[0]}.{rel[1]}, environment.json "
                                  f"says NVRTC {_cut(env_nvrtc)}", expected=f"{rel[0]}.{rel[1]}", found=env_nvrtc))
            t = _PTX_TARGET.search(ptx)
            if t is not None and arch_sm is not None and _sm(t.group(1).decode()) != arch_sm:
                out.append(_p(f, f"$.variants[{i}].arch", f"{name}: the bundled PTX targets {t.group(1).decode()}",
                              expected=t.group(1).decode(), found=v.get("arch")))
            if _is_int(ptx_ref.get("bytes")) and ptx_ref["bytes"] != len(ptx):
                out.append(_p(f, f"$.variants[{i}].ptx.bytes", f"{name}: PTX size differs from the file",
                              expected=len(ptx), found=ptx_ref["bytes"]))
        blobs = {}
        for key in ("cubin", "cubin_complete"):
            ref = _d(v.get(key))
            data = files.get(f"data/{ref.get('file')}") if ref.get("file") else None
            if data is None:
                continue
            blobs[key] = data
            if _is_int(ref.get("bytes")) and ref["bytes"] != len(data):
                out.append(_p(f, f"$.variants[{i}].{key}.bytes", f"{name}: {key} size differs from the file",
                              expected=len(data), found=ref["bytes"]))
            sm = cubin_sm(data)
            if sm is None:
                out.append(_p(f"data/{ref['file']}", None, f"{name}: {key} is not a CUDA ELF binary"))
                continue
            if arch_sm is not None and sm != arch_sm:
                out.append(_p(f, f"$.variants[{i}].arch", f"{name}: the bundled {key}'s ELF header targets sm_{sm}",
                              expected=f"sm_{sm}", found=v.get("arch")))
            if env_sm is not None and sm != env_sm:
                out.append(_p(_DOC_FILE["environment"], "$.fields.compute_capability.value",
                              f"{name}: the bundled {key} targets sm_{sm}, environment.json's GPU is compute "
                              f"capability {env_cc}", expected=f"{sm // 10}.{sm % 10}", found=env_cc))
        cc = _d(v.get("cubin_complete"))
        if "cubin" in blobs and "cubin_complete" in blobs and isinstance(cc.get("loaded_is_prefix"), bool):
            pre = blobs["cubin_complete"].startswith(blobs["cubin"])
            if pre != cc["loaded_is_prefix"]:
                out.append(_p(f, f"$.variants[{i}].cubin_complete.loaded_is_prefix", f"{name}: loaded_is_prefix "
                              "does not follow from the two cubins", expected=pre, found=cc["loaded_is_prefix"]))
        sref = _d(v.get("sass"))
        sass = files.get(f"data/{sref.get('file')}") if sref.get("file") else None
        if sass is not None and arch_sm is not None:
            m = _SASS_TARGET.search(sass[:4096].decode("utf-8", "replace"))
            if m is not None and _sm(m.group(1)) != arch_sm:
                out.append(_p(f, f"$.variants[{i}].arch", f"{name}: the bundled SASS is code for {m.group(1)}",
                              expected=m.group(1), found=v.get("arch")))
    return out


def _kernelbench_listed(documents, files, meta) -> list[dict]:
    out = []
    mkb = _d(meta.get("kernelbench"))
    if not (_measured(meta) or mkb.get("files_included")):
        return out  # imported: the post's checkout was never verified, nothing is carried
    for j, rel in enumerate(_l(_d(_d(documents.get("run")).get("kernelbench")).get("files"))):
        if isinstance(rel, str) and f"data/inputs/kernelbench/{rel}" not in files:
            out.append(_p(f"data/inputs/kernelbench/{_cut(rel)}", None,
                          f"KernelBench file {_cut(rel)} the run used (run.json $.kernelbench.files[{j}]) is not in the bundle"))
    return out


def _witness_bits(documents) -> list[dict]:
    out = []
    wit = _d(documents.get("witness"))
    f = _DOC_FILE["witness"]
    rows = [("$.inputs", _l(wit.get("inputs")))] + [(f"$.outputs.{k}", _l(v)) for k, v in sorted(_d(wit.get("outputs")).items())]
    for path, recs in rows:
        for j, r in enumerate(recs):
            r = _d(r)
            x, bits = _num(r.get("value")), r.get("bits")
            if x is None or not isinstance(bits, str):
                continue
            if math.isnan(x):
                ok = bool(re.match(r"^0x[0-9a-f]{8}$", bits)) and (int(bits, 16) & 0x7F800000) == 0x7F800000 \
                    and (int(bits, 16) & 0x007FFFFF) != 0
            else:
                ok = _f32_bits(x) == bits and struct.unpack("<f", struct.pack("<f", x))[0] == x
            if not ok:
                out.append(_p(f, f"{path}[{j}]", f"witness value {r.get('value')!r} is not the float32 with bits "
                              f"{_cut(bits)}", expected=_f32_bits(x), found=bits))
    return out


def _check_arithmetic(documents) -> list[dict]:
    """Bit identity, max abs error, worst ratios, failing and non-finite counts of one check
    record must be consistent under harness/checks.py's definitions."""
    out = []
    pred = _d(_d(documents.get("correctness")).get("predicate"))
    atol, rtol = _num(pred.get("atol")), _num(pred.get("rtol"))
    for name in sorted(n for n in documents if n not in ("claims", "run", "environment", "compile", "timings")):
        f = _DOC_FILE[name]
        for path, c in _checks_of(documents.get(name)):
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


def _privacy_problems(files) -> list[dict]:
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
