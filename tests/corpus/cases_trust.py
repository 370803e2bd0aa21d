"""Corpus cases of the trust rule: a bundle that brings its own judge.

Each case is a forgery made with the product's own code, as the strongest forger would
make it: after the edit, ``claims.json`` is re-evaluated with the bundle's (edited) claims
spec and ``REPORT.md`` re-rendered with :func:`kbrepro.bundle.report.render`, then both
BagIt manifests are recomputed. So every derived file agrees with the edited records, and
only the verifier's own definitions (its study, its claims spec, its FTZ rule) can object.

Loaded by ``make_corpus.py`` (``EXTRA_MODULES``): :data:`NAMES` and :func:`build`.
"""
from __future__ import annotations

import json

import hashlib
import re

from kbrepro.bundle import claims as claims_mod
from kbrepro.bundle import report as report_mod
from kbrepro.harness import jsonio

NAMES = (
    "trust_study_renamed", "trust_study_other_unknown", "trust_study_yaml_loosened",
    "trust_claim_ids_renamed", "trust_failing_claims_dropped", "trust_claim_sentence_inverted",
    "trust_claim_range_loosened_reforged", "trust_claim_added_by_author",
    "trust_check_verdict_forged", "trust_claim_number_forged", "trust_summary_forged", "trust_sentence_forged_in_json",
    "trust_report_hidden_rows", "trust_report_number_changed", "trust_report_raw_html",
    "trust_ftz_expectation_edited", "trust_notes_injected",
    "trust_study_file_added", "trust_study_checks_edited", "trust_study_lock_edited",
    "trust_compile_source_sha_forged", "trust_bundle_lock_not_study_lock", "trust_unknown_study_lock_not_in_pin",
)

#: a bundle of a study this verifier does not ship (PARTIAL, exit 5), for the cases that must
#: reach the provenance tier with the author's own study folder (relative to this folder)
USER_STUDY_BUNDLE = "../fixtures/user-study-relu-quick.tar"
KB_PREFIX = "data/inputs/kernelbench/"

BUNDLE = "data/bundle.json"
CLAIMS = "data/claims.json"
REPORT = "data/REPORT.md"
COMPILE = "data/results/compile.json"
WITNESS = "data/results/witness.json"
RUN = "data/results/run.json"

_DOCS = {"environment": "data/environment.json", **{n: f"data/results/{n}.json" for n in
                                                    ("run", "compile", "witness", "correctness", "timings", "scout",
                                                     "selftest")}}


def _meta(f: dict) -> dict:
    return jsonio.loads_strict(f[BUNDLE], BUNDLE)


def _put_json(f: dict, rel: str, doc) -> None:
    f[rel] = jsonio.dumps(doc).encode("ascii")


_BINDING = []


def report_sections(docs: dict) -> list[str]:
    """The study sections the packer puts into REPORT.md (the shipped study's binding, whose
    code every bundle of that study carries unchanged in its study folder)."""
    if not _BINDING:
        from kbrepro.harness.study import default_study_path, load_study

        st = load_study(default_study_path())
        _BINDING.append((st, st.binding()))
    st, binding = _BINDING[0]
    return list(binding.report_sections(st.doc, docs))


def refresh_figures(f: dict[str, bytes], docs: dict, claims_doc: dict | None) -> list[str]:
    """The figures' data (data/plots/*.json) derived again from the (edited) records, as a
    careful forger would write them; returns the figure names REPORT.md lists."""
    from kbrepro.bundle import plots as plots_mod

    before = {p: b for p, b in f.items() if p.startswith("data/plots/")}
    for p in before:
        del f[p]
    figs = plots_mod.figure_data({n: d for n, d in docs.items() if n != "claims"},
                                 json.loads(jsonio.dumps(claims_doc)) if claims_doc else None)
    for n, d in figs.items():
        f[f"data/plots/{n}.json"] = jsonio.dumps(d).encode()
    if before != {p: b for p, b in f.items() if p.startswith("data/plots/")}:
        for p in [p for p in f if p.startswith("renderings/")]:  # drawn from other data: dropped, not redrawn
            del f[p]
    return sorted(figs)


def render_report(meta: dict, docs: dict, claims_doc: dict | None, plots: list[str], own_ids=None) -> bytes:
    """REPORT.md as the packer renders it from these records (with the study's sections;
    ``own_ids`` as :func:`kbrepro.bundle.report.claims_section` takes them)."""
    return report_mod.render(meta, docs, claims_doc, plots, report_sections(docs), own_ids).encode("utf-8")


def reforge(f: dict[str, bytes]) -> None:
    """Recompute claims.json from the bundle's own claims spec and re-render REPORT.md (and,
    from bundle format 4 on, the RO-Crate file: a description of the records), with the
    product's code, from the (edited) records in ``f``."""
    meta = _meta(f)
    docs = {n: jsonio.loads_strict(f[p], p) for n, p in _DOCS.items() if p in f}
    spec_raw = f["data/" + meta["claims"]["file"]]
    spec = claims_mod.parse_spec(spec_raw)
    doc = claims_mod.evaluate(spec, docs, source="recorded")
    doc["spec"] = {"file": meta["claims"]["file"], "sha256": hashlib.sha256(spec_raw).hexdigest()}
    meta["claims"]["sha256"] = doc["spec"]["sha256"]
    _put_json(f, CLAIMS, doc)
    _put_json(f, BUNDLE, meta)
    plots = refresh_figures(f, docs, doc)
    f[REPORT] = render_report(meta, docs, doc, plots, claims_mod.own_ids(spec_raw, f.get(STUDY_PREFIX + "claims.yaml")))
    refresh_crate(f)


def refresh_crate(f: dict[str, bytes]) -> None:
    """Write the RO-Crate file of ``f`` again from its (edited) records, if it has one."""
    from kbrepro.bundle import crate, facts

    rel = f"data/{facts.CRATE_FILE}"
    if rel not in f:
        return
    meta = _meta(f)
    docs = {n: jsonio.loads_strict(f[p], p) for n, p in _DOCS.items() if p in f}
    payload = {p[len("data/"):]: b for p, b in f.items() if p.startswith("data/") and p != rel}
    f[rel] = crate.render(facts.bundle_facts(meta, docs, payload))


def _spec_rel(f: dict) -> str:
    return "data/" + _meta(f)["claims"]["file"]


def _edit_spec(f: dict, fn) -> None:
    rel = _spec_rel(f)
    text = f[rel].decode("utf-8")
    new = fn(text)
    if new == text:
        raise ValueError(f"{rel}: the edit changed nothing; adapt cases_trust.py")
    f[rel] = new.encode("utf-8")


STUDY_PREFIX = "data/inputs/study/"


def set_study_file(f: dict, name: str, raw: bytes | None) -> None:
    """Write (or, ``raw`` None, remove) the file ``name`` of the bundled study folder and
    re-forge every record of it, as the strongest forger would: the per-file sha256 that
    bundle.json and run.json list under ``study.files`` (and, for ``study.yaml``, the
    study's own sha256 in both)."""
    rel = STUDY_PREFIX + name
    if raw is None:
        del f[rel]
    else:
        f[rel] = raw
    digest = None if raw is None else hashlib.sha256(raw).hexdigest()
    meta = _meta(f)
    run = jsonio.loads_strict(f[RUN], RUN)
    for st in (meta["study"], run["study"]):
        files = st.get("files")
        if isinstance(files, dict):
            if digest is None:
                files.pop(name, None)
            else:
                files[name] = digest
        if name == "study.yaml" and digest is not None:
            st["sha256"] = digest
    _put_json(f, BUNDLE, meta)
    _put_json(f, RUN, run)


def _set_study(f: dict, raw: bytes) -> None:
    meta = _meta(f)
    if "data/" + meta["study"]["file"] != STUDY_PREFIX + "study.yaml":
        raise ValueError("bundle.json's study file is not inputs/study/study.yaml; adapt cases_trust.py")
    set_study_file(f, "study.yaml", raw)


def _rename_study(f: dict, new: str, edit_yaml=None) -> None:
    meta = _meta(f)
    old = meta["study"]["name"]
    raw = f["data/" + meta["study"]["file"]].decode("utf-8")
    raw = raw.replace(f"name: {old}\n", f"name: {new}\n", 1)
    if edit_yaml:
        raw = edit_yaml(raw)
    _set_study(f, raw.encode("utf-8"))
    meta = _meta(f)
    meta["study"]["name"] = new
    _put_json(f, BUNDLE, meta)
    run = jsonio.loads_strict(f[RUN], RUN)
    run["study"]["name"] = new
    resolved = run["study"].get("resolved")
    if isinstance(resolved, dict):
        resolved["name"] = new
        if edit_yaml:
            import yaml

            resolved["title"] = yaml.safe_load(raw)["title"]
    _put_json(f, RUN, run)
    _edit_spec(f, lambda t: re.sub(r"(?m)^study: .*$", f"study: {new}", t, count=1))


def build(g, kit) -> list:
    Case = kit.Case

    def case(name, tier, code, fragment, problem_file, description, mutate):
        f = dict(g.files)
        mutate(f)
        reforge(f)
        meta = _meta(f)
        # bag-info.txt follows bundle.json, as the packer writes it
        info = [(k, f"{meta['study']['name']} ({meta['study']['profile']})" if k == "Study" else v) for k, v in g.info()]
        payload = {p[len("data/"):]: b for p, b in f.items() if p.startswith("data/")}
        data = kit.pack.tar_bytes(kit.pack.make_bag(g.top, payload, info), mtime=g.mtime)
        if data == g.raw:
            raise ValueError(f"{name}: the mutation changed nothing")
        return (Case(name, f"{name}.tar", "trust", code, tier, fragment, problem_file,
                     description + "; claims.json and REPORT.md re-derived with the product's own code; manifests "
                     "recomputed"), data)

    def claims_edit(fn):
        def m(f):
            doc = jsonio.loads_strict(f[CLAIMS], CLAIMS)
            fn(doc)
            _put_json(f, CLAIMS, doc)
            docs = {n: jsonio.loads_strict(f[p], p) for n, p in _DOCS.items() if p in f}
            plots = refresh_figures(f, docs, doc)
            f[REPORT] = render_report(_meta(f), docs, doc, plots)
        return m

    def only_manifests(name, tier, code, fragment, problem_file, description, mutate):
        return kit._recomputed_case(g, Case(name, f"{name}.tar", "trust", code, tier, fragment, problem_file,
                                            description + "; manifests recomputed"), mutate)

    def find_claim(doc, cid):
        return next(c for c in doc["claims"] if c["id"] == cid)

    def check_verdict(doc):
        c = find_claim(doc, "C10")
        item = next(it for it in c["checks"][0]["items"] if it["verdict"] == "fails")
        item["verdict"] = "holds"

    def number(doc):
        c = find_claim(doc, "C09")
        c["checks"][0]["items"][0]["median_ratio"] = 0.25

    def summary(doc):
        doc["summary"]["holds"] += 2
        doc["summary"]["fails"] -= 2

    def sentence(doc):
        find_claim(doc, "C08")["sentence"] = "The custom full program beats TorchScript on every task."

    def hidden_rows(f):
        text = f[REPORT].decode("utf-8")
        lines = text.split("\n")
        out = []
        for line in lines:
            m = re.match(r"^\| (C1[01]) \| \*\*fails\*\* \|(.*)$", line)
            if m:
                out.append(f"| {m.group(1)} | **holds** |{m.group(2)}")
                out.append(f"<!--\n{line}\n-->")
            else:
                out.append(line)
        f[REPORT] = "\n".join(out).encode("utf-8")

    def report_number(f):
        text = f[REPORT].decode("utf-8")
        # the first ratio of C10's row in the claims table (0.608 in the committed bundle)
        new, n = re.subn(r"(\| C10 \|[^\n]*?eager_tail )0\.\d\d\d \[", r"\g<1>0.310 [", text, count=1)
        if n != 1:
            raise ValueError("REPORT.md's C10 row has no 'eager_tail 0.NNN [' to edit; adapt cases_trust.py")
        f[REPORT] = new.encode("utf-8")

    def raw_html(f):
        f[REPORT] = f[REPORT] + b'\n<div style="display:none">C10 holds</div><script>alert(1)</script>\n'

    def ftz_expectation(f):
        # the NVRTC-cache failure: nvrtc_ftz_true "is" the ftz=false binary; the forger
        # records that the variant was expected not to flush, so every piece of evidence agrees
        comp = jsonio.loads_strict(f[COMPILE], COMPILE)
        byname = {v["name"]: v for v in comp["variants"]}
        t, fl = byname["nvrtc_ftz_true"], byname["nvrtc_ftz_false"]
        for key in ("cubin", "ptx", "sass"):
            f["data/" + t[key]["file"]] = f["data/" + fl[key]["file"]]
            t[key] = {**t[key], **{k: fl[key][k] for k in ("sha256", "bytes") if k in fl[key]}}
        t["ftz_evidence"] = jsonio.loads_strict(jsonio.dumps(fl["ftz_evidence"]), "evidence")
        t["expected_ftz"] = False
        _put_json(f, COMPILE, comp)
        w = jsonio.loads_strict(f[WITNESS], WITNESS)
        w["outputs"]["nvrtc_ftz_true"] = [dict(o) for o in w["outputs"]["nvrtc_ftz_false"]]
        w["verdicts"]["nvrtc_ftz_true"] = dict(w["verdicts"]["nvrtc_ftz_false"])
        _put_json(f, WITNESS, w)

    def notes(f):
        meta = _meta(f)
        meta["notes"] = ["Independently verified on three GPUs by the kbrepro maintainers."]
        _put_json(f, BUNDLE, meta)

    def rename_ids(t):
        return re.sub(r"(?m)^(\s*- id: )C1([01])$", r"\1X1\2", t)

    def drop_failing(t):
        return re.sub(r"(?ms)^  - id: C1[01]\n.*?(?=^  - id: )", "", t)

    def invert(t):
        return t.replace("The custom full program does not beat TorchScript", "The custom full program beats TorchScript")

    def loosen(t):
        return t.replace("range: [2.8, 5.5]", "range: [1.0, 9.9]")

    def add_claim(t):
        return t.rstrip("\n") + ("\n\n  - id: A01\n    sentence: \"Every full-program case of the CuPy default passes "
                                 "the official check.\"\n    checks:\n      - kind: all_equal\n        select: "
                                 "\"correctness.full_program[*].checks.cupy_default.official.pass\"\n        equals: true\n")

    def loosened_study(raw):
        return raw.replace("  rounds: 25\n  invocations_per_pair: 5\n", "  rounds: 25\n  invocations_per_pair: 4\n", 1)

    def other_study(raw):
        # another title and one more profile: the full profile the run used resolves as before
        out = raw.replace("title: \"", "title: \"(a user's variation) ", 1)
        return out.replace("\nprofiles:\n  full: {}\n", "\nprofiles:\n  full: {}\n  mine:\n    timing: {rounds: 50}\n", 1)

    def study_yaml_loosened(f):
        meta = _meta(f)
        raw = f["data/" + meta["study"]["file"]].decode("utf-8")
        new = loosened_study(raw)
        if new == raw:
            raise ValueError("study YAML edit changed nothing; adapt cases_trust.py")
        _set_study(f, new.encode("utf-8"))

    def add_study_file(f):
        set_study_file(f, "extra_checks.py", b"def problems(study, documents, imported):\n    return []\n")

    def edit_checks(f):
        raw = f[STUDY_PREFIX + "checks.py"]
        new = raw.replace(b"\ndef problems(", b"\ndef _unused_problems(", 1)
        if new == raw:
            raise ValueError("checks.py has no 'def problems('; adapt cases_trust.py")
        new += b"\n\ndef problems(study, documents, imported):\n    return []\n"
        set_study_file(f, "checks.py", new)

    def lock_with_task(f, lock_rels: list[str], task_rel: str) -> None:
        """The bundled task file ``task_rel`` (relative to the KernelBench checkout) changed
        by one byte, and every copy of the lock made to list its new hash (the study folder's
        through :func:`set_study_file`), so the bundle agrees with itself and only the
        verifier's pin (or its own copy of the study) can object."""
        kb_rel = KB_PREFIX + task_rel
        f[kb_rel] = kit.flip_text_byte(f[kb_rel], b'"""\n    ', kb_rel)
        digest = hashlib.sha256(f[kb_rel]).hexdigest()
        for rel in lock_rels:
            doc = jsonio.loads_strict(f[rel], rel)
            if task_rel not in doc["files"]:
                raise ValueError(f"{rel} does not list {task_rel}; adapt cases_trust.py")
            doc["files"][task_rel] = digest
            raw = jsonio.dumps(doc).encode("ascii")
            if rel.startswith(STUDY_PREFIX):
                set_study_file(f, rel[len(STUDY_PREFIX):], raw)
            else:
                f[rel] = raw

    task53 = "KernelBench/level2/53_Gemm_Scaling_Hardtanh_GELU.py"

    def study_lock(f):
        meta = _meta(f)
        lock_with_task(f, ["data/" + meta["kernelbench"]["lock_file"], STUDY_PREFIX + "kernelbench.lock.json"], task53)

    def bundle_lock_only(f):
        lock_with_task(f, ["data/" + _meta(f)["kernelbench"]["lock_file"]], task53)

    def compile_source(f):
        # the compile records say another source was compiled than the study's (the study folder intact)
        other = hashlib.sha256(f[STUDY_PREFIX + "fused_tails.cu"] + b"\n// another kernel\n").hexdigest()
        comp = jsonio.loads_strict(f[COMPILE], COMPILE)
        for src in [comp["source"]] + [v["source"] for v in comp["variants"] if isinstance(v.get("source"), dict)]:
            src["sha256"] = other
        _put_json(f, COMPILE, comp)

    def user_study_lock_case():
        import pathlib

        g2 = kit.load_good(pathlib.Path(__file__).resolve().parent / USER_STUDY_BUNDLE)
        f = dict(g2.files)
        meta = _meta(f)
        lock_file = meta["kernelbench"]["lock_file"]
        task = next(r for r in meta["kernelbench"]["files"] if r.startswith("KernelBench/"))
        lock_with_task(f, ["data/" + lock_file, STUDY_PREFIX + "kernelbench.lock.json"], task)
        name = "trust_unknown_study_lock_not_in_pin"
        data = kit.repack(g2, f)
        if data == g2.raw:
            raise ValueError(f"{name}: the mutation changed nothing")
        return (Case(name, f"{name}.tar", "trust", 1, "provenance", f"{task}: hash differs from the verifier's pin",
                     "data/" + lock_file,
                     f"from {pathlib.Path(USER_STUDY_BUNDLE).name} (a study the verifier does not ship, judged by the "
                     f"author's files): one byte of the bundled {task} flipped and both copies of the study's "
                     "KernelBench lock (study folder and inputs/kernelbench) list its new hash, the study's file "
                     "hashes in bundle.json and run.json updated; manifests recomputed"), data)

    return [
        case("trust_study_renamed", "documents", 1, "is this verifier's study 'pointwise-fusion-ftz' under another name",
             "data/inputs/study/study.yaml",
             "study renamed to 'pointwise-fusion-ftz-v2' in the study YAML, run.json, bundle.json and the claims spec "
             "(nothing else changed)", lambda f: _rename_study(f, "pointwise-fusion-ftz-v2")),
        case("trust_study_other_unknown", "claims", 5, "is not one this verifier ships", None,
             "study renamed AND its definition changed (title, one more profile), C10's range loosened: a study the "
             "verifier does not know, judged by the author's definitions: PARTIAL, exit 5",
             lambda f: (_rename_study(f, "my-fusion-variation", other_study), _edit_spec(f, loosen))),
        case("trust_study_yaml_loosened", "documents", 1, "differs from this verifier's own", None,
             "the bundled study YAML's timing invocations_per_pair changed 5 -> 4 (sha256 updated in bundle.json and "
             "run.json)", study_yaml_loosened),
        case("trust_claim_ids_renamed", "claims", 1, "claim C10 of this verifier's spec is missing from the bundle", None,
             "claims C10 and C11 (which fail) renamed X10 and X11 in the bundled spec", lambda f: _edit_spec(f, rename_ids)),
        case("trust_failing_claims_dropped", "claims", 1, "claim C11 of this verifier's spec is missing from the bundle",
             None, "the failing claims C10 and C11 deleted from the bundled spec", lambda f: _edit_spec(f, drop_failing)),
        case("trust_claim_sentence_inverted", "claims", 1, "claim C08 is defined differently from this verifier's spec "
             "(fields: sentence)", None, "C08's sentence inverted ('beats TorchScript'), its check unchanged",
             lambda f: _edit_spec(f, invert)),
        case("trust_claim_range_loosened_reforged", "claims", 1, "claim C10 is defined differently from this "
             "verifier's spec (fields: checks)", None, "C10's speed-up range loosened to [1.0, 9.9]",
             lambda f: _edit_spec(f, loosen)),
        case("trust_claim_added_by_author", "claims", 5, "A01 is the author's definition", None,
             "an extra claim A01 appended to the bundled spec (every verifier claim unchanged): PARTIAL, exit 5",
             lambda f: _edit_spec(f, add_claim)),
        only_manifests("trust_check_verdict_forged", "claims", 1, "differs from the verifier's evaluation of the data",
                       CLAIMS, "claims.json: one failing comparison of C10 recorded as 'holds' (claim verdict and "
                       "summary unchanged); REPORT.md re-rendered from it", claims_edit(check_verdict)),
        only_manifests("trust_claim_number_forged", "claims", 1, "differs from the verifier's evaluation of the data",
                       CLAIMS, "claims.json: C09's first median ratio set to 0.25; REPORT.md re-rendered from it",
                       claims_edit(number)),
        only_manifests("trust_summary_forged", "claims", 1, "differs from the verifier's evaluation of the data",
                       CLAIMS, "claims.json: summary says 14 holds, 0 fails; REPORT.md re-rendered from it",
                       claims_edit(summary)),
        only_manifests("trust_sentence_forged_in_json", "claims", 1, "differs from the verifier's evaluation of the data",
                       CLAIMS, "claims.json: C08's sentence replaced; REPORT.md re-rendered from it",
                       claims_edit(sentence)),
        only_manifests("trust_report_hidden_rows", "claims", 1, "REPORT.md differs from the report the verifier renders",
                       REPORT, "REPORT.md: C10 and C11 shown as holds, the true rows kept in HTML comments below them",
                       hidden_rows),
        only_manifests("trust_report_number_changed", "claims", 1, "REPORT.md differs from the report the verifier "
                       "renders", REPORT, "REPORT.md: the first speed-up in the claims table changed (1.67x) -> 3.10x",
                       report_number),
        only_manifests("trust_report_raw_html", "claims", 1, "REPORT.md differs from the report the verifier renders",
                       REPORT, "REPORT.md: hidden raw HTML and a script appended", raw_html),
        case("trust_ftz_expectation_edited", "documents", 1, "the FTZ mode its route and options give is ftz=true",
             COMPILE,
             "the NVRTC-cache failure hidden: nvrtc_ftz_true's cubin, PTX, SASS, evidence and witness replaced by the "
             "ftz=false binary's, and its expected_ftz set to false so that every piece of evidence 'agrees'",
             ftz_expectation),
        case("trust_notes_injected", "documents", 1, "notes of a measured bundle", BUNDLE,
             "bundle.json notes: 'Independently verified on three GPUs by the kbrepro maintainers.'", notes),
        case("trust_study_file_added", "documents", 1, "differs from this verifier's own in extra_checks.py; a bundle "
             "cannot redefine a study the verifier ships", STUDY_PREFIX + "extra_checks.py",
             "an extra file extra_checks.py in the bundled folder of the shipped study (its sha256 added to "
             "bundle.json's and run.json's study.files)", add_study_file),
        case("trust_study_checks_edited", "documents", 1, "differs from this verifier's own in checks.py; a bundle "
             "cannot redefine a study the verifier ships", STUDY_PREFIX + "checks.py",
             "the shipped study's checks.py (its cross-checks) edited to find no problem (its sha256 updated in "
             "bundle.json's and run.json's study.files)", edit_checks),
        case("trust_study_lock_edited", "documents", 1, "differs from this verifier's own in kernelbench.lock.json; a "
             "bundle cannot redefine a study the verifier ships", STUDY_PREFIX + "kernelbench.lock.json",
             "one byte of the bundled task 53 file flipped, and both copies of the shipped study's KernelBench lock "
             "list its new hash (one not in the pin; the study's file hashes updated)", study_lock),
        case("trust_compile_source_sha_forged", "provenance", 1, "kernel source differs from the compile records",
             STUDY_PREFIX + "fused_tails.cu",
             "compile.json's source sha256 (top level and every variant's) set to that of another source; the study "
             "folder intact", compile_source),
        case("trust_bundle_lock_not_study_lock", "provenance", 1, "the KernelBench lock differs from the study's own "
             "lock file (kernelbench.lock.json)", "data/inputs/kernelbench/kernelbench.lock.json",
             "one byte of the bundled task 53 file flipped and the bundle's KernelBench lock (inputs/kernelbench, not "
             "the study folder's copy) made to list its new hash, one not in the pin", bundle_lock_only),
        user_study_lock_case(),
    ]
