"""Corpus cases for bundle/crosscheck/: one forged bundle per cross-document check.

Loaded by tests/corpus/make_corpus.py (``EXTRA_MODULES``); ``kit`` is that module. Every
case edits the good bundle minimally and recomputes both manifests and Payload-Oxum, as a
forger would, so that only a content check can object. Document-tier cases fail tier 3
(tiers 4 and 5 are then skipped); provenance-tier cases leave tier 3 and the claim
verdicts untouched, so only tier 4 fails.
"""
from __future__ import annotations

RUN = "data/results/run.json"
ENV = "data/environment.json"
TIMINGS = "data/results/timings.json"
META = "data/bundle.json"
CORRECTNESS = "data/results/correctness.json"
COMPILE = "data/results/compile.json"
WITNESS = "data/results/witness.json"
REPORT = "data/REPORT.md"
KB_LICENSE = "data/inputs/kernelbench/LICENSE"

NAMES = (
    "xc_case_missing", "xc_protocol_rounds", "xc_stage_time", "xc_bag_info_name", "xc_round_order",
    "xc_expected_ftz", "xc_predicate_order", "xc_eligibility", "xc_time_order", "xc_product_version",
    "xc_effective_options",
    "xc_env_nvrtc", "xc_env_arch", "xc_compile_nvrtc", "xc_kernelbench_missing", "xc_witness_value_bits",
    "xc_bits_vs_error", "xc_error_vs_bits", "xc_input_shape", "xc_privacy_uuid", "xc_cubin_bytes",
)


def _variant(doc: dict, name: str) -> dict:
    return next(v for v in doc["variants"] if v["name"] == name)


def _rerender_report(f: dict, kit) -> None:
    """REPORT.md rendered again from the edited records (the study's sections included), as a
    careful forger would (the claims tier compares the report with the one the verifier renders)."""
    from kbrepro.harness import jsonio

    meta = jsonio.loads_strict(f[META], META)
    docs = {s.split("/", 1)[1]: jsonio.loads_strict(f[f"data/{rel}"], rel) for rel, s in meta["documents"].items()}
    claims = jsonio.loads_strict(f["data/claims.json"], "claims.json")
    plots = kit.trust_module().refresh_figures(f, docs, claims)
    f[REPORT] = kit.trust_module().render_report(meta, docs, claims, plots)


def build(g, kit) -> list:
    def doc_case(name, fragment, problem_file, description):
        return kit.Case(name, f"{name}.tar", "crosscheck", 1, "documents", fragment, problem_file, description)

    def prov_case(name, fragment, problem_file, description):
        return kit.Case(name, f"{name}.tar", "crosscheck", 1, "provenance", fragment, problem_file,
                        description + "; REPORT.md re-rendered from the edited records")

    def prov(case, mutate):
        def both(f):
            mutate(f)
            _rerender_report(f, kit)

        return kit._recomputed_case(g, case, both)

    out = []

    # ------------------------------------------------------------------ documents tier
    def case_missing(f):
        kit.edit_json(f, CORRECTNESS, lambda d: d["full_program"].pop(7))

    out.append(kit._recomputed_case(g, doc_case(
        "xc_case_missing", "the full-program cases are not the study's 60", CORRECTNESS,
        "correctness.json: the eighth full-program case removed (59 left); manifests recomputed"), case_missing))

    def protocol_rounds(f):
        def edit(d):
            b = d["blocks"][0]
            b["protocol"]["rounds"] = 20
            del b["rounds"][20:]  # rounds match the block's own protocol, not the study

        kit.edit_json(f, TIMINGS, edit)

    out.append(kit._recomputed_case(g, doc_case(
        "xc_protocol_rounds", "protocol differs from the study's in rounds", TIMINGS,
        "timings.json: the first block's protocol says 20 rounds and only its first 20 rounds are kept "
        "(the study says 25); manifests recomputed"), protocol_rounds))

    def stage_time(f):
        kit.edit_json(f, RUN, lambda d: d["stages"][3].update(seconds=100.0))

    out.append(kit._recomputed_case(g, doc_case(
        "xc_stage_time", "more than the run's wall time", RUN,
        "run.json: the task_53 stage given 100 s in a run of 37.4 s wall time; manifests recomputed"), stage_time))

    info = [(k, v + "-x" if k == "External-Identifier" else v) for k, v in g.info()]
    data = kit.raw_tar(g.top, kit.recomputed(g, dict(g.files), info), g.mtime)
    out.append((doc_case("xc_bag_info_name", "bag-info.txt External-Identifier differs from bundle.json", "bag-info.txt",
                         "bag-info.txt: External-Identifier given another name than bundle.json's; manifests "
                         "recomputed"), data))

    def round_order(f):
        def edit(d):
            r = d["blocks"][1]["rounds"]
            r[0], r[1] = r[1], r[0]

        kit.edit_json(f, TIMINGS, edit)

    out.append(kit._recomputed_case(g, doc_case(
        "xc_round_order", "is not the order random.Random(913) gives", TIMINGS,
        "timings.json: the first two rounds of the second block swapped; manifests recomputed"), round_order))

    def expected_ftz(f):
        def edit(d):
            v = _variant(d, "cupy_default")
            v["expected_ftz"] = False
            v["ftz_evidence"]["expected"] = False

        kit.edit_json(f, COMPILE, edit)

    out.append(kit._recomputed_case(g, doc_case(
        "xc_expected_ftz", "the FTZ mode its route and options give is ftz=true", COMPILE,
        "compile.json: cupy_default's expected_ftz (and ftz_evidence.expected) set to false; manifests "
        "recomputed"), expected_ftz))

    def predicate_order(f):
        def edit(d):
            d["predicate"]["definitions"]["allclose"]["argument_order"] = ["candidate", "reference"]

        kit.edit_json(f, CORRECTNESS, edit)

    out.append(kit._recomputed_case(g, doc_case(
        "xc_predicate_order", "is defined differently from the verifier's own definition", CORRECTNESS,
        "correctness.json: the official predicate's recorded argument order swapped; manifests recomputed"),
        predicate_order))

    def eligibility(f):
        kit.edit_json(f, CORRECTNESS, lambda d: d["tasks"]["81"]["eligible_for_timing"].update(nvrtc_ftz_true=False))

    out.append(kit._recomputed_case(g, doc_case(
        "xc_eligibility", "timing eligibility does not follow from its checks", CORRECTNESS,
        "correctness.json: task 81's nvrtc_ftz_true marked not eligible for timing although all its checks "
        "pass; manifests recomputed"), eligibility))

    def time_order(f):
        kit.edit_json(f, RUN, lambda d: d.update(finished_utc="2026-12-01T01:19:42Z"))

    out.append(kit._recomputed_case(g, doc_case(
        "xc_time_order", "the run finished before it started", RUN,
        "run.json: finished_utc set a minute before started_utc; manifests recomputed"), time_order))

    def product_version(f):
        kit.edit_json(f, META, lambda d: d["product"].update(version="9.9.9"))

    out.append(kit._recomputed_case(g, doc_case(
        "xc_product_version", "bundle.json's product version differs from environment.json's", META,
        "bundle.json: product version 9.9.9 (environment.json says 0.1.0); manifests recomputed"), product_version))

    def effective_options(f):
        kit.edit_json(f, COMPILE, lambda d: _variant(d, "nvrtc_ftz_false")["effective_options"].remove("--no-cache"))

    out.append(kit._recomputed_case(g, doc_case(
        "xc_effective_options", "the options NVRTC received are not the study's options", COMPILE,
        "compile.json: --no-cache removed from nvrtc_ftz_false's effective options; manifests recomputed"),
        effective_options))

    # ----------------------------------------------------------------- provenance tier
    def env_nvrtc(f):
        kit.edit_json(f, ENV, lambda d: d["fields"]["nvrtc_version"].update(value="12.8"))

    out.append(prov(prov_case(
        "xc_env_nvrtc", "the bundled PTX was made by release 13.0, environment.json says NVRTC 12.8", ENV,
        "environment.json: nvrtc_version 12.8 (the PTX headers and compile records say 13.0); manifests "
        "recomputed"), env_nvrtc))

    def env_arch(f):
        kit.edit_json(f, ENV, lambda d: d["fields"]["compute_capability"].update(value="8.0"))

    # caught at tier 3 since the second red-team round: an NVIDIA H200's compute capability is 9.0
    # (model/timing_rules.py GPU_CC); tier 4's cubin check stands behind it
    out.append(prov(doc_case(
        "xc_env_arch", "compute capability 8.0 is not an H200's", ENV,
        "environment.json: compute capability 8.0 (every cubin's ELF header targets sm_90); manifests "
        "recomputed; REPORT.md re-rendered from the edited records"), env_arch))

    def compile_nvrtc(f):
        kit.edit_json(f, COMPILE, lambda d: _variant(d, "nvrtc_ftz_false").update(nvrtc_version=[13, 1]))

    out.append(prov(prov_case(
        "xc_compile_nvrtc", "the bundled PTX was made by release 13.0, the compile record says NVRTC 13.1", COMPILE,
        "compile.json: nvrtc_ftz_false's nvrtc_version [13, 1] (its PTX header says release 13.0); manifests "
        "recomputed"), compile_nvrtc))

    def kb_missing(f):
        del f[KB_LICENSE]

    out.append(prov(prov_case(
        "xc_kernelbench_missing", "KernelBench file LICENSE the run used", KB_LICENSE,
        "the bundled KernelBench LICENSE removed (run.json lists it as used); manifests recomputed"), kb_missing))

    def witness_value(f):
        kit.edit_json(f, WITNESS, lambda d: d["outputs"]["nvrtc_ftz_false"][0].update(value=-2.5e-37))

    out.append(prov(prov_case(
        "xc_witness_value_bits", "is not the float32 with bits", WITNESS,
        "witness.json: nvrtc_ftz_false's first output value changed, its bits kept; manifests recomputed"),
        witness_value))

    def bits_vs_error(f):
        kit.edit_json(f, CORRECTNESS, lambda d: d["extra_shapes"][0]["checks"]["nvrtc_ftz_false"].update(
            max_abs_error=1.0e-6))

    out.append(prov(prov_case(
        "xc_bits_vs_error", "elements bit-identical, yet max abs error", CORRECTNESS,
        "correctness.json: the first extra shape's nvrtc_ftz_false check (all bits identical) given max abs "
        "error 1e-6; manifests recomputed"), bits_vs_error))

    def error_vs_bits(f):
        def edit(d):
            c = d["tiny_value_controls"]["81"]["checks"]["nvrtc_ftz_true"]
            c["bit_identical_count"] = c["element_count"]

        kit.edit_json(f, CORRECTNESS, edit)

    out.append(prov(prov_case(
        "xc_error_vs_bits", "yet every element is bit-identical", CORRECTNESS,
        "correctness.json: task 81's tiny-value nvrtc_ftz_true check (max abs error > 0) made all bit-identical; "
        "manifests recomputed"), error_vs_bits))

    def input_shape(f):
        kit.edit_json(f, CORRECTNESS, lambda d: d["full_program"][0]["case"].update(shape=[2048, 4096]))

    out.append(prov(prov_case(
        "xc_input_shape", "input shape is not the task file's", CORRECTNESS,
        "correctness.json: the first full-program case's input shape [2048, 4096] (task 53's file says "
        "2048 x 8192); manifests recomputed"), input_shape))

    sass = "data/binaries/nvrtc_ftz_false.sass"

    def privacy(f):
        import hashlib

        f[sass] = f[sass] + b"\n// disassembled on GPU-01234567-89ab-cdef-0123-456789abcdef\n"
        digest = hashlib.sha256(f[sass]).hexdigest()
        kit.edit_json(f, COMPILE, lambda d: _variant(d, "nvrtc_ftz_false")["sass"].update(sha256=digest))

    out.append(prov(prov_case(
        "xc_privacy_uuid", "identifying strings were not scrubbed", sass,
        "binaries/nvrtc_ftz_false.sass: a comment naming a raw GPU UUID appended, its sha256 in compile.json "
        "updated; manifests recomputed"), privacy))

    def cubin_bytes(f):
        kit.edit_json(f, COMPILE, lambda d: _variant(d, "nvrtc_ftz_true")["cubin"].update(bytes=14321))

    out.append(prov(prov_case(
        "xc_cubin_bytes", "nvrtc_ftz_true: cubin size differs from the file", COMPILE,
        "compile.json: nvrtc_ftz_true's cubin size recorded as 14321 (the file has 14320 bytes); manifests "
        "recomputed"), cubin_bytes))
    return out
