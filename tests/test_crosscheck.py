"""bundle/crosscheck/: the committed bundles give no problem; each check fires on a
minimal edit of their documents (read from examples/results-full-h200/ and from the tars
in memory); imported results are judged only by the checks that apply to them."""
from __future__ import annotations

import copy
import io
import json
import tarfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import ROOT, SHARED_RUN
from kbrepro.bundle import assemble, kinds, pack
from kbrepro.bundle import crosscheck as cx
from kbrepro.harness import jsonio
from kbrepro.model import documents as md
from kbrepro.model import strict
from kbrepro.model.problems import Problem
from kbrepro.harness.study import load_study
from kbrepro.kernels.compile import CompileVariant

EXAMPLES = ROOT / "examples"
RESULTS = EXAMPLES / "results-full-h200"
FULL = next(iter(sorted(EXAMPLES.glob("pointwise-fusion-ftz-full-*.tar"))), None)
EXTENDED = next(iter(sorted(EXAMPLES.glob("*-extended-*.tar"))), None)
LAYERNORM = next(iter(sorted(EXAMPLES.glob("layernorm-l1-40-full-*.tar"))), None)


def _bag_info(raw: bytes) -> dict:
    out = {}
    for line in raw.decode().splitlines():
        k, _, v = line.partition(":")
        out[k.strip()] = v.strip()
    return out


def read_tar(path: Path) -> SimpleNamespace:
    files = {}
    with tarfile.open(fileobj=io.BytesIO(path.read_bytes()), mode="r:") as tf:
        for m in tf:
            if m.isreg():
                files[m.name.split("/", 1)[1]] = tf.extractfile(m).read()
    meta = jsonio.loads_strict(files["data/bundle.json"], "bundle.json")
    docs = {s.split("/", 1)[1]: jsonio.loads_strict(files[f"data/{rel}"], rel) for rel, s in meta["documents"].items()}
    docs["claims"] = jsonio.loads_strict(files["data/claims.json"], "claims.json")
    return _ns(docs, files, meta)


def _study_folder(name: str) -> Path:
    """The verifier's own folder of the study ``name`` (the study registry)."""
    reg = json.loads((ROOT / "manifests" / "studies.json").read_text())
    return ROOT / "studies" / reg["studies"][name]["folder"]


def _ns(docs, files, meta) -> SimpleNamespace:
    study = load_study(_study_folder(docs["run"]["study"]["name"]), docs["run"]["study"]["profile"])
    return SimpleNamespace(docs=docs, files=files, meta=meta, info=_bag_info(files["bag-info.txt"]),
                           study=study, binding=study.binding())


@pytest.fixture(scope="module")
def full() -> SimpleNamespace:
    if FULL is None:
        pytest.skip("no examples/*-full-*.tar")
    b = read_tar(FULL)
    # the unpacked results are the same documents (the documents of the tests below)
    for name in ("run", "compile", "correctness", "timings", "witness"):
        assert json.loads((RESULTS / f"{name}.json").read_text()) == b.docs[name]
    return b


@pytest.fixture(scope="module")
def extended() -> SimpleNamespace:
    if EXTENDED is None:
        pytest.skip("no examples/*-extended-*.tar")
    return read_tar(EXTENDED)


@pytest.fixture(scope="module")
def layernorm() -> SimpleNamespace:
    if LAYERNORM is None:
        pytest.skip("no examples/layernorm-l1-40-full-*.tar")
    return read_tar(LAYERNORM)


def records(b) -> md.Records:
    """The typed records of ``b``'s documents, built straight from them (no schema first, so
    that an edit reaches the cross-checks; a document its record refuses has none)."""
    built = {}
    for name, doc in {**b.docs, "bundle": b.meta}.items():
        spec = md.BY_NAME.get(name)
        if spec is not None and spec.record is not None:
            rec, _ = strict.build(spec.record, doc)
            if rec is not None:
                built[name] = rec
    return md.Records(**built)


def all_problems(b, recs=None) -> tuple[list, list, list]:
    recs = records(b) if recs is None else recs
    return (cx.document_problems(b.docs, b.files, b.meta, b.info, recs), cx.study_problems(b.study, b.docs, recs, b.binding),
            cx.provenance_problems(b.docs, b.files, recs, b.binding))


def edited(b, fn) -> SimpleNamespace:
    c = SimpleNamespace(docs=copy.deepcopy(b.docs), files=dict(b.files), meta=copy.deepcopy(b.meta),
                        info=dict(b.info), study=b.study,
                        binding=b.binding)
    fn(c)
    return c


def _v(docs, name):
    return next(v for v in docs["compile"]["variants"] if v["name"] == name)


# ------------------------------------------------------------------------------ good ones


def test_committed_bundles_have_no_problems(full, extended, layernorm):
    assert layernorm.study.name == "layernorm-l1-40" and full.study.name == "pointwise-fusion-ftz"
    for b in (full, extended, layernorm):
        doc, st, prov = all_problems(b)
        assert (doc, st, prov) == ([], [], []), (doc + st + prov)[:5]


def test_cost_on_the_full_bundle(full):
    recs = records(full)  # built once, as tier 3's gate does (bundle.documents.load)
    all_problems(full, recs)  # warm imports
    t0 = time.perf_counter()
    for _ in range(3):
        all_problems(full, recs)
    assert (time.perf_counter() - t0) / 3 < 0.1


def test_problem_shape(full):
    b = edited(full, lambda c: c.docs["run"].update(finished_utc="2026-12-01T01:19:42Z"))
    (p,) = [p for p in cx.document_problems(b.docs, b.files, b.meta, b.info, records(b)) if "finished before" in p.message]
    assert isinstance(p, Problem) and p.code and p.file == "data/results/run.json" and "\n" not in p.message


def test_long_strings_from_the_bundle_are_cut(full):
    b = edited(full, lambda c: c.info.update({"External-Identifier": "x" * 500}))
    (p,) = cx.document_problems(b.docs, b.files, b.meta, b.info, records(b))
    assert len(p.found) < 130


# ------------------------------------------------------------------------- expected_ftz


def test_expected_ftz_rule_ignores_the_recorded_field():
    def study(*vs):
        return SimpleNamespace(variants=tuple(CompileVariant(n, r, tuple(o), e) for n, r, o, e in vs))

    s = study(("a", "cupy_rawmodule", ["--ftz=false"], False), ("b", "nvrtc", [], True),
              ("c", "nvrtc", ["--ftz=true", "-ftz=false"], True), ("d", "nvrtc", ["--use_fast_math"], False),
              ("e", "nvrtc", ["--use_fast_math", "--ftz=false"], True))
    assert cx.expected_ftz(s) == {"a": True, "b": False, "c": False, "d": True, "e": False}
    own = load_study(None, "full")
    assert cx.expected_ftz(own) == {"cupy_default": True, "nvrtc_ftz_false": False, "nvrtc_ftz_true": True}


# ----------------------------------------------------------------- each check fires (tier 3)


def _drop_witness_listing(c):
    del c.meta["documents"]["results/witness.json"]


def _truncate_rounds(c):
    blk = c.docs["timings"]["blocks"][0]
    blk["protocol"]["rounds"] = 20
    del blk["rounds"][20:]


def _swap_rounds(c):
    r = c.docs["timings"]["blocks"][1]["rounds"]
    r[0], r[1] = r[1], r[0]


def _adaptive_edit(c):
    c.docs["timings"]["blocks"][4]["adaptive"]["rounds"] = 20


DOCUMENT_EDITS = {
    "unlisted document": (_drop_witness_listing, "not listed in bundle.json's documents"),
    "listed document missing": (lambda c: c.files.pop("data/results/scout.json"), "is not in the bag"),
    "bag-info name": (lambda c: c.info.update({"External-Identifier": "other"}), "External-Identifier differs"),
    "bag-info source": (lambda c: c.info.update(Source="imported"), "bag-info.txt Source differs"),
    "bag-info study": (lambda c: c.info.update(Study="x (quick)"), "bag-info.txt Study differs"),
    "source vs status": (lambda c: c.meta.update(source="imported"), "run.json's status is not 'imported'"),
    "study sha": (lambda c: c.meta["study"].update(sha256="0" * 64), "study sha256"),
    "product commit": (lambda c: c.meta["product"].update(commit="f" * 40), "product commit differs"),
    "kernelbench commit": (lambda c: c.meta["kernelbench"].update(commit="a" * 40), "KernelBench commit differs"),
    "name stamp": (lambda c: c.docs["run"].update(started_utc="2026-12-01T01:20:06Z"), "time stamp is not the run's"),
    "wall time": (lambda c: c.docs["run"].update(wall_seconds=999.0), "exceeds start..finish"),
    # red team: a measured run without its times passed, every time check skipped
    "no start": (lambda c: c.docs["run"].update(started_utc=None), "a measured run always records started_utc"),
    "no finish": (lambda c: c.docs["run"].update(finished_utc=None, wall_seconds=None),
                  "a measured run always records finished_utc"),
    "stage time": (lambda c: c.docs["run"]["stages"][3].update(seconds=100.0), "more than the run's wall time"),
    "precision env": (lambda c: c.docs["environment"]["fields"]["float32_matmul_precision"].update(value="high"),
                      "float32 matmul precision differs from run.json"),
    "torch version": (lambda c: c.docs["correctness"]["predicate_direction"].update(torch_version="2.0"),
                      "predicate witness ran under another torch"),
    "round order": (_swap_rounds, "is not the order random.Random(913) gives"),
    "throttled": (lambda c: c.docs["timings"]["blocks"][0]["rounds"][0]["clocks"].update(throttled=True),
                  "'throttled' contradicts"),
    # red team: a boolean throttle_reasons skipped the check; a flag that cannot be derived fails
    "throttle reasons": (lambda c: c.docs["timings"]["blocks"][0]["rounds"][0]["clocks"].update(throttle_reasons=True),
                         "without the non-negative integer throttle_reasons"),
    "eligibility": (lambda c: c.docs["correctness"]["tasks"]["81"]["eligible_for_timing"].update(nvrtc_ftz_true=False),
                    "timing eligibility does not follow"),
    "arms": (lambda c: c.docs["timings"]["blocks"][2]["arms"].remove("torchscript_tail"), "the arms are not the eligible"),
    "ftz cost untimed": (lambda c: c.docs["timings"]["blocks"][-1].update(rounds=[]),
                         "ftz_cost.graph: every variant passed its check, yet the block was not timed"),
}

STUDY_EDITS = {
    "case missing": (lambda c: c.docs["correctness"]["full_program"].pop(7), "full-program cases are not the study's 60"),
    "case extra seed": (lambda c: c.docs["correctness"]["full_program"][0]["case"].update(seed=9), "not in the study"),
    "variant set": (lambda c: c.docs["correctness"]["full_program"][3]["checks"].pop("nvrtc_ftz_true"),
                    "checked variants are not the study's"),
    "protocol rounds": (_truncate_rounds, "protocol differs from the study's in rounds"),
    "protocol seed": (lambda c: c.docs["timings"]["blocks"][5]["protocol"].update(order_seed=1), "order_seed"),
    "block missing": (lambda c: c.docs["timings"]["blocks"].pop(0), "timing block(s) of the study missing"),
    "ftz cost arms": (lambda c: c.docs["timings"]["blocks"][-1].update(arms=["nvrtc_ftz_false", "nvrtc_ftz_true"]),
                      "arms differ from the study"),
    "resolved": (lambda c: c.docs["run"]["study"]["resolved"]["timing"].update(rounds=5), "resolved study differs"),
    "profile": (lambda c: c.docs["run"]["study"].update(profile="quick"), "profile differs"),
    "stages": (lambda c: c.docs["run"]["stages"].pop(4), "stages are not the ones"),
    "kernelbench list": (lambda c: c.docs["run"]["kernelbench"]["files"].pop(0), "task 14: run.json lists 0"),
    "precision run": (lambda c: c.docs["run"]["precision"].update(allow_tf32_matmul=True), "allow_tf32_matmul"),
    "atol": (lambda c: c.docs["correctness"]["predicate"].update(atol=1e-3), "predicate atol differs"),
    "argument order": (lambda c: c.docs["correctness"]["predicate"]["definitions"]["allclose"].update(
        argument_order=["candidate", "reference"]), "defined differently from the verifier's own"),
    "direction verdict": (lambda c: c.docs["correctness"]["predicate_direction"]["results"]["float32"].update(
        allclose_candidate_reference=True), "not what allclose gives"),
    "expected ftz": (lambda c: _v(c.docs, "cupy_default").update(expected_ftz=False), "route and options give"),
    "route": (lambda c: _v(c.docs, "nvrtc_ftz_true").update(route="cupy_rawmodule"), "route differs"),
    "requested": (lambda c: _v(c.docs, "nvrtc_ftz_true").update(requested_options=["--ftz=true"]),
                  "requested options differ"),
    "no-cache": (lambda c: _v(c.docs, "nvrtc_ftz_false")["effective_options"].remove("--no-cache"),
                 "not the study's options + architecture"),
    "cupy ftz": (lambda c: _v(c.docs, "cupy_default")["effective_options"].append("-ftz=false"),
                 "the options NVRTC received give ftz=false"),
    "boundary shape": (lambda c: c.docs["correctness"]["tasks"]["53"]["tail_controls"][0].update(shape=[18, 23]),
                       "boundary control's shape"),
    "boundary criterion": (lambda c: c.docs["correctness"]["tasks"]["81"]["tail_controls"][0].update(
        criterion="official"), "decided by the wrong criterion"),
    "graph mutation": (lambda c: c.docs["correctness"]["tasks"]["95"]["graph_mutation"]["mutation"].update(
        input_scale=1.0), "graph-mutation parameters"),
    "timing seed": (lambda c: c.docs["correctness"]["tasks"]["95"]["timing_input"].update(seed=1),
                    "timing-input seed"),
    "tiny domain": (lambda c: c.docs["correctness"]["tiny_value_controls"]["53"].update(domain="x"),
                    "tiny-value domain"),
    "extra shapes": (lambda c: c.docs["correctness"]["extra_shapes"].pop(), "extra-shape cases"),
    "witness inputs": (lambda c: c.docs["witness"]["inputs"][0].update(bits="0xc2b10000", value=-88.5),
                       "witness inputs are not the study's"),
    "witness task": (lambda c: c.docs["witness"].update(task=53), "witness ran another task"),
    "scout cases": (lambda c: c.docs["scout"]["cases"].pop(), "scout cases are not"),
}


@pytest.mark.parametrize("edit", sorted(DOCUMENT_EDITS))
def test_document_check_fires(full, edit):
    fn, fragment = DOCUMENT_EDITS[edit]
    b = edited(full, fn)
    found = cx.document_problems(b.docs, b.files, b.meta, b.info, records(b))
    assert any(fragment in p.message for p in found), found


@pytest.mark.parametrize("edit", sorted(STUDY_EDITS))
def test_study_check_fires(full, edit):
    fn, fragment = STUDY_EDITS[edit]
    b = edited(full, fn)
    found = cx.study_problems(b.study, b.docs, records(b), b.binding)
    assert any(fragment in p.message or fragment in str(p.path) for p in found), found


def test_adaptive_outcome_and_selftest_on_extended(extended):
    b = edited(extended, _adaptive_edit)
    assert any("adaptive outcome's round count" in p.message
               for p in cx.document_problems(b.docs, b.files, b.meta, b.info, records(b)))
    b = edited(extended, lambda c: c.docs.pop("selftest"))
    assert any("selftest.json is missing" in p.message for p in cx.study_problems(b.study, b.docs, records(b), b.binding))
    b = edited(extended, lambda c: c.docs["timings"]["blocks"][4]["protocol"]["adaptive"].update(max_rounds=50))
    assert any("protocol differs" in p.message for p in cx.study_problems(b.study, b.docs, records(b), b.binding))


# ------------------------------------------------------------- each check fires (tier 4)


def _ptx_release(c):
    p = "data/binaries/nvrtc_ftz_true.ptx"
    c.files[p] = c.files[p].replace(b"release 13.0,", b"release 12.8,", 1)


def _cubin_arch(c):
    p = "data/binaries/nvrtc_ftz_false.cubin"
    raw = bytearray(c.files[p])
    raw[49] = 80  # e_flags bits 8..15: sm_80
    c.files[p] = bytes(raw)


PROVENANCE_EDITS = {
    "env nvrtc": (lambda c: c.docs["environment"]["fields"]["nvrtc_version"].update(value="12.8"),
                  "environment.json says NVRTC 12.8"),
    "compile nvrtc": (lambda c: _v(c.docs, "nvrtc_ftz_false").update(nvrtc_version=[13, 1]),
                      "the compile record says NVRTC 13.1"),
    "ptx header": (_ptx_release, "the bundled PTX was made by release 12.8"),
    "env arch": (lambda c: c.docs["environment"]["fields"]["compute_capability"].update(value="8.0"),
                 "compute capability 8.0"),
    "compile arch": (lambda c: _v(c.docs, "cupy_default").update(arch="sm_80"), "ELF header targets sm_90"),
    "cubin elf": (_cubin_arch, "targets sm_80"),
    "not elf": (lambda c: c.files.update({"data/binaries/nvrtc_ftz_true.cubin": b"not an elf" * 10}),
                "is not a CUDA ELF binary"),
    "cubin bytes": (lambda c: _v(c.docs, "nvrtc_ftz_true")["cubin"].update(bytes=1), "cubin size differs"),
    "prefix": (lambda c: _v(c.docs, "cupy_default")["cubin_complete"].update(loaded_is_prefix=False),
               "loaded_is_prefix does not follow"),
    "kernelbench missing": (lambda c: c.files.pop("data/inputs/kernelbench/LICENSE"), "KernelBench file LICENSE"),
    "witness value": (lambda c: c.docs["witness"]["outputs"]["nvrtc_ftz_false"][0].update(value=-2.5e-37),
                      "is not the float32 with bits"),
    "witness bits": (lambda c: c.docs["witness"]["inputs"][1].update(bits="0xc2af0001"), "is not the float32"),
    "bits vs error": (lambda c: c.docs["correctness"]["extra_shapes"][0]["checks"]["nvrtc_ftz_false"].update(
        max_abs_error=1e-6), "bit-identical, yet max abs error"),
    "error vs bits": (lambda c: c.docs["correctness"]["tiny_value_controls"]["81"]["checks"]["nvrtc_ftz_true"].update(
        bit_identical_count=131072), "yet every element is bit-identical"),
    "ratio vs error": (lambda c: c.docs["scout"]["cases"][0]["checks"]["fp32"]["official"].update(worst_ratio=1e6),
                       "exceeds max abs error / atol"),
    "legacy fails vs bits": (lambda c: c.docs["correctness"]["full_program"][0]["checks"]["cupy_default"]["legacy"].update(
        failing_count=3, **{"pass": False}), "fail the legacy predicate"),
    "stress vs official": (lambda c: c.docs["scout"]["cases"][0]["checks"]["fp32"]["equal_nan_stress"].update(
        failing_count=7), "without NaN the equal-NaN check"),
    "discriminating": (lambda c: c.docs["scout"]["cases"][0]["checks"]["fp32"].update(discriminating=False),
                       "discriminating=False contradicts"),
    "input shape": (lambda c: c.docs["correctness"]["full_program"][0]["case"].update(shape=[2048, 4096]),
                    "input shape is not the task file's"),
    "element count": (lambda c: c.docs["correctness"]["tasks"]["53"]["timing_input"]["checks"]["cupy_default"].update(
        element_count=100, bit_identical_count=100), "the task's output has 16777216"),
    "bytes moved": (lambda c: c.docs["timings"]["blocks"][2].update(bytes_moved=1), "bytes moved by the tail"),
    "privacy": (lambda c: c.files.update({"data/inputs/study/study.yaml": c.files[
        "data/inputs/study/study.yaml"] + b"# /" + b"home/alice/run\n"}), "identifying strings were not scrubbed"),
}


@pytest.mark.parametrize("edit", sorted(PROVENANCE_EDITS))
def test_provenance_check_fires(full, edit):
    fn, fragment = PROVENANCE_EDITS[edit]
    b = edited(full, fn)
    found = cx.provenance_problems(b.docs, b.files, records(b), b.binding)
    assert any(fragment in p.message for p in found), found


def test_cubin_sm_reads_both_abi_layouts():
    import struct

    head = bytearray(64)
    head[:4], head[4], head[5] = b"\x7fELF", 2, 1
    struct.pack_into("<H", head, 18, 190)
    head[8] = 8
    struct.pack_into("<I", head, 48, 0x06005A04)
    assert cx.cubin_sm(bytes(head)) == 90
    head[8] = 7
    struct.pack_into("<I", head, 48, 0x00500550)
    assert cx.cubin_sm(bytes(head)) == 0x50
    struct.pack_into("<H", head, 18, 62)  # x86-64
    assert cx.cubin_sm(bytes(head)) is None


# ------------------------------------------------------------------------------- imported


@pytest.fixture(scope="module")
def imported():
    if not (SHARED_RUN / "fusion_results.json").is_file():
        pytest.skip("../shared/data/h200-seed-run is not present")
    from kbrepro.bundle import make

    rs = make.load_results(SHARED_RUN)
    contents = make.study_contents(rs, with_plots=False)
    bag = assemble.build_payload(kinds.STUDY, contents, pack.FORMAT_VERSION)
    meta = contents.meta
    files = dict(bag.members())
    docs = {s.split("/", 1)[1]: jsonio.loads_strict(files[f"data/{rel}"], rel) for rel, s in meta["documents"].items()}
    return _ns(docs, files, meta)


def test_imported_results_give_no_problem_but_are_still_checked(imported):
    assert imported.meta["source"] == "imported"
    assert all_problems(imported) == ([], [], [])
    b = edited(imported, lambda c: c.docs["correctness"]["full_program"].pop())
    assert any("full-program cases" in p.message for p in cx.study_problems(b.study, b.docs, records(b), b.binding))
    b = edited(imported, lambda c: c.docs["timings"]["blocks"][0]["protocol"].update(warmups=1))
    assert any("protocol is not the study's" in p.message for p in cx.study_problems(b.study, b.docs, records(b), b.binding))
    b = edited(imported, _swap_rounds)
    assert any("random.Random" in p.message for p in cx.document_problems(b.docs, b.files, b.meta, b.info, records(b)))
