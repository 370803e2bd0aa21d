"""The pointwise-fusion study's importer (studies/pointwise_fusion/importer.py) on the published
study's real H200 output files (CPU only).

The data set lives beside the project checkout in ``shared/data/h200-seed-run``; the tests
that need it are skipped where it is absent.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from kbrepro.bundle import validate
from kbrepro.harness.study import default_study_path, load_study
from kbrepro.studies.pointwise_fusion.importer import (POST_CONTROLS, POST_FTZ_COST, POST_RESULTS, POST_SCOUT,
                                                       ImportedRun, import_post_run, parse_log, recognise)
from kbrepro.harness import jsonio
from kbrepro.errors import InvalidResultsError, UnreadableInputError

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "h200-seed-run"
POST_FILES = ("fusion_results.json", "fusion_preserve_denormals.json", "fusion_controls.json",
              "fusion_ftz_cost.json", "scout.json")

needs_data = pytest.mark.skipif(not (DATA / "fusion_results.json").is_file(),
                                reason="the published H200 run (shared/data/h200-seed-run beside the checkout) "
                                       "is not present")


@pytest.fixture(scope="module")
def imported() -> ImportedRun:
    if not (DATA / "fusion_results.json").is_file():
        pytest.skip("the published H200 run (shared/data/h200-seed-run beside the checkout) is not present")
    return import_post_run(DATA)


@pytest.fixture
def copy_dir(tmp_path) -> Path:
    if not (DATA / "fusion_results.json").is_file():
        pytest.skip("the published H200 run (shared/data/h200-seed-run beside the checkout) is not present")
    out = tmp_path / "run"
    out.mkdir()
    for p in DATA.iterdir():
        if p.is_file():
            shutil.copyfile(p, out / p.name)
    return out


_STUDY_SCHEMAS: list = []


def schema_problems(name: str, doc) -> list[str]:
    """Violations of ``doc`` as the verifier judges it: the product's schema of ``name`` plus
    the published study's own schemas (its documents, e.g. scout, and its sections of ours)."""
    if not _STUDY_SCHEMAS:
        st = load_study(default_study_path())
        _STUDY_SCHEMAS.append(validate.study_schemas(st, st.binding()))
    return validate.schema_problems(name, doc, _STUDY_SCHEMAS[0])


def original(name: str):
    return json.loads((DATA / name).read_text(encoding="utf-8"))


def write(path: Path, doc) -> None:
    # Python's json writes NaN tokens and 3.0 as it is told: exactly the damage to refuse
    path.write_text(json.dumps(doc, indent=2), encoding="utf-8")


# ---------------------------------------------------------------------------- recognition
@needs_data
def test_recognise_each_post_file_by_structure(tmp_path):
    expected = {"fusion_results.json": POST_RESULTS, "fusion_preserve_denormals.json": POST_RESULTS,
                "fusion_controls.json": POST_CONTROLS, "fusion_ftz_cost.json": POST_FTZ_COST,
                "scout.json": POST_SCOUT}
    for name, fmt in expected.items():
        assert recognise(DATA / name) == fmt
        renamed = tmp_path / ("renamed_" + name)            # structure, not name, decides
        shutil.copyfile(DATA / name, renamed)
        assert recognise(renamed) == fmt
    assert recognise(DATA / "run_all.log") is None


def test_recognise_our_documents_and_unknown(tmp_path):
    ours = tmp_path / "run.json"
    ours.write_text(json.dumps({"schema": "kbrepro/run", "schema_version": 1}))
    assert recognise(ours) == "kbrepro/run"
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"hello": [1, 2]}))
    assert recognise(other) is None
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert recognise(broken) is None
    assert recognise(tmp_path / "missing.json") is None


# ---------------------------------------------------------------------------- the real import
def test_every_document_validates(imported):
    assert list(imported.documents) == ["run", "environment", "compile", "correctness", "timings", "scout"]
    for name, doc in imported.documents.items():
        assert doc["schema"] == f"kbrepro/{name}" and doc["schema_version"] == 1
        assert schema_problems(name, doc) == [], name
        jsonio.dumps(doc)  # strict JSON: no NaN, no Infinity


def test_originals_and_provenance_are_exact(imported):
    assert sorted(imported.originals) == sorted(POST_FILES)
    for name, data in imported.originals.items():
        assert data == (DATA / name).read_bytes()
    assert imported.log == (DATA / "run_all.log").read_bytes()
    prov = imported.documents["run"]["imported"]
    assert set(prov["source_files"]) == set(POST_FILES) | {"run_all.log"}
    for name, digest in prov["source_files"].items():
        assert digest == hashlib.sha256((DATA / name).read_bytes()).hexdigest()
    for name in ("compile", "correctness", "timings", "scout"):
        p = imported.documents[name]["provenance"]
        assert p["source_files"] and all(p["source_files"][n] == prov["source_files"][n] for n in p["source_files"])
        assert all(part.startswith("post-") for part in p["source_format"].split("+"))
    assert imported.documents["scout"]["provenance"]["source_format"] == POST_SCOUT
    assert imported.notes and all(isinstance(n, str) for n in imported.notes)


def test_no_machine_path_in_documents(imported):
    text = "".join(jsonio.dumps(d) for d in imported.documents.values())
    assert str(DATA) not in text and str(DATA.parent) not in text
    assert str(Path(__file__).resolve().parents[1]) not in text


def test_run_document(imported):
    run = imported.documents["run"]
    assert run["status"] == "imported"
    assert run["study"] == {"name": "pointwise-fusion-ftz", "profile": "full"}
    assert run["started_utc"] == "2026-11-30T23:27:01Z"
    assert run["finished_utc"] == "2026-11-30T23:28:19Z"
    assert [s["name"] for s in run["stages"]] == ["scout", "experiment_fusion", "experiment_fusion_preserve_denormals",
                                                 "fusion_controls", "fusion_ftz_cost"]
    assert run["stages"][0]["seconds"] == pytest.approx(8.719)
    assert run["kernelbench"]["commit"] == "423217d9fda91e0c2d67e4a43bf62f96f6d104f1"
    assert run["failure"] is None
    assert run["imported"]["source_format"].count("post-") == 5


def test_environment_document(imported):
    f = imported.documents["environment"]["fields"]
    assert f["gpu_name"]["value"] == "NVIDIA H200"
    assert f["torch_version"]["value"] == "2.11.0+cu130"
    assert f["torch_cuda_build"]["value"] == "13.0"
    assert f["python_version"]["value"] == "3.12.3"
    assert f["driver_version"] == {"value": "580.159.04", "source": "run_all.log header (nvidia-smi)", "reason": None}
    assert f["numpy_version"]["value"] == "2.5.2"
    assert f["cupy_distributions"]["value"][0]["version"] == "14.2.0"
    assert f["nvrtc_version"]["value"] == "13.0"
    assert f["compute_capability"]["value"] == "9.0"
    assert f["tf32_matmul"]["value"] is False and f["tf32_cudnn"]["value"] is False
    assert f["driver_cuda_version"]["value"] is None
    assert f["driver_cuda_version"]["reason"] == "not recorded by the post's scripts"
    assert f["gpu_name"]["source"].startswith("fusion_results.json")


def test_full_program_cases(imported):
    fp = imported.documents["correctness"]["full_program"]
    assert len(fp) == 60
    assert {e["case"]["task"] for e in fp} == {53, 81, 95}
    assert {e["case"]["distribution"] for e in fp} == {"official_uniform", "normal", "uniform_x100",
                                                      "uniform_x_minus100"}
    for e in fp:
        assert set(e["checks"]) == {"cupy_default", "nvrtc_ftz_false"}
        for c in e["checks"].values():
            assert c["official"]["pass"] is True and c["official"]["failing_count"] == 0
            assert "derived_from" in c["official"] and "assumes no NaN pair" in c["official"]["derived_from"]
            assert c["legacy"]["pass"] is True and c["legacy"]["failing_count"] == 0
            assert c["equal_nan_stress"] is None and c["nonfinite"] is None and c["max_abs_reference"] is None
        # preserve-denormals: bit-identical in every case
        ftz_false = e["checks"]["nvrtc_ftz_false"]
        assert ftz_false["bit_identical_count"] == ftz_false["element_count"]
    case = next(e for e in fp if e["case"] == {"task": 81, "seed": 0, "distribution": "uniform_x100"})
    c = case["checks"]["cupy_default"]
    assert c["bit_identical_count"] == 8384513 and c["element_count"] == 8388608
    assert c["imported"]["distribution"] == "scaled_100" and c["imported"]["bit_equal_count"] == 8384513
    # task 53 is bit-identical under both routes
    assert all(x["bit_identical_count"] == x["element_count"] for e in fp if e["case"]["task"] == 53
               for x in e["checks"].values())


def test_task_controls(imported):
    tasks = imported.documents["correctness"]["tasks"]
    assert list(tasks) == ["53", "81", "95"]
    for t, td in tasks.items():
        names = [c["name"] for c in td["tail_controls"]]
        assert names == ["boundaries_and_nonfinite", "actual_linear_output"]
        for ctl in td["tail_controls"]:
            assert ctl["criterion"] == "legacy"
            assert set(ctl["checks"]) == {"cupy_default", "nvrtc_ftz_false"}
            assert all(c["legacy"]["pass"] for c in ctl["checks"].values())
        # the boundary array holds NaN by construction: no official verdict is derived for it
        assert all(c["official"] is None for c in td["tail_controls"][0]["checks"].values())
        assert set(td["timing_input"]["checks"]) == {"cupy_default", "nvrtc_ftz_false"}
        assert set(td["graph_mutation"]["checks"]) == {"cupy_default", "nvrtc_ftz_false"}
        assert td["torchscript"]["full"]["legacy"]["pass"] and td["torchscript"]["tail"]["legacy"]["pass"]
        assert td["eligible_for_timing"] == {"cupy_default": True, "nvrtc_ftz_false": True}
    assert tasks["95"]["tail_controls"][0]["checks"]["cupy_default"]["element_count"] == 24576


def test_extra_shapes_and_tiny_value_controls(imported):
    cor = imported.documents["correctness"]
    assert cor["predicate"]["atol"] == 1e-4 and cor["predicate"]["rtol"] == 1e-4
    assert cor["predicate"]["official"] == "allclose" and cor["predicate"]["legacy"] == "legacy_reference_scaled"
    assert "predicate_direction" not in cor
    assert len(cor["extra_shapes"]) == 3
    for es in cor["extra_shapes"]:
        assert es["case"]["seed"] == 371 and es["case"]["shape_B_K_H"] == [128, 1024, 1024]
        assert set(es["checks"]) == {"cupy_default", "torchscript"}
    tv = cor["tiny_value_controls"]
    assert list(tv) == ["53", "81", "95"]
    t81 = tv["81"]
    assert t81["criterion"] == "legacy" and t81["shape"] == [128, 1024]
    assert set(t81["checks"]) == {"cupy_default", "nvrtc_ftz_true", "nvrtc_ftz_false"}
    assert t81["checks"]["cupy_default"]["bit_identical_count"] == 128296
    # the H200 surprise, preserved: explicit --ftz=true matched PyTorch bit for bit
    assert t81["checks"]["nvrtc_ftz_true"]["bit_identical_count"] == 131072
    assert t81["checks"]["nvrtc_ftz_false"]["bit_identical_count"] == 131072
    cross = t81["cross"]["nvrtc_ftz_true_vs_cupy_default"]
    assert cross["bit_identical_count"] == 128296 and cross["element_count"] == 131072
    assert "NaN" in t81["domain"]


def test_compile_ftz_evidence(imported):
    variants = {v["name"]: v for v in imported.documents["compile"]["variants"]}
    assert set(variants) == {"cupy_default", "nvrtc_ftz_false", "nvrtc_ftz_true"}
    cd = variants["cupy_default"]
    assert cd["route"] == "cupy_rawmodule" and cd["expected_ftz"] is True and cd["effective_options"] is None
    f, t = variants["nvrtc_ftz_false"], variants["nvrtc_ftz_true"]
    assert f["route"] == t["route"] == "nvrtc"
    assert "--ftz=false" in f["effective_options"] and "--ftz=true" in t["effective_options"]
    assert f["nvrtc_version"] == t["nvrtc_version"] == [13, 0]
    sha = "cb5b43713236a0368751511924222cc6868acb6c9e4042b8f46cc33f5589c43c"
    assert f["source"]["sha256"] == t["source"]["sha256"] == sha
    assert imported.documents["compile"]["source"]["sha256"] == sha
    for v in variants.values():
        ev = v["ftz_evidence"]
        assert ev["ptx"] is None and ev["sass"] is None
        assert ev["witness"]["task"] == 81 and "tiny_value_controls task 81" in ev["witness"]["derived_from"]
    assert cd["ftz_evidence"]["witness"]["flushes"] is True and cd["ftz_evidence"]["agrees"] is True
    assert f["ftz_evidence"]["witness"]["flushes"] is False and f["ftz_evidence"]["agrees"] is True
    assert t["ftz_evidence"]["witness"]["flushes"] is False and t["ftz_evidence"]["agrees"] is False
    assert any("nvrtc_ftz_true" in n and "does not flush" in n for n in imported.notes)


def test_timing_blocks_keep_every_round(imported):
    blocks = imported.documents["timings"]["blocks"]
    assert len({b["id"] for b in blocks}) == len(blocks) == 33
    by_id = {b["id"]: b for b in blocks}
    for stem, variant in (("fusion_results", "cupy_default"), ("fusion_preserve_denormals", "nvrtc_ftz_false")):
        src = original(stem + ".json")
        for t in ("53", "81", "95"):
            for key in ("full_events", "full_graph", "tail_events", "tail_graph"):
                scope, mode = key.split("_")
                b = by_id[f"{t}.{scope}.{mode}@{stem}"]
                assert b["kind"] == "study" and b["mode"] == mode and b["scope"] == scope
                assert b["protocol"] == {"mode": mode, "warmups": 8, "rounds": 25, "invocations_per_pair": 5,
                                         "order_seed": 913}
                assert len(b["rounds"]) == 25
                assert variant in b["arms"] and "cuda_tail" not in b["arms"]
                raw = src["tasks"][t]["timings"][key]["rounds"]
                for got, want in zip(b["rounds"], raw):
                    assert got["order"] == [variant if a == "cuda_tail" else a for a in want]
                    assert got["times_ms"] == {(variant if a == "cuda_tail" else a): v for a, v in want.items()}
                assert "stats" not in b
    extra = [b for b in blocks if b["kind"] == "extra_shape"]
    assert len(extra) == 6 and all(b["shape_B_K_H"] == [128, 1024, 1024] and len(b["rounds"]) == 25 for b in extra)
    assert all(b["arms"] == ["eager", "torchscript", "cupy_default"] for b in extra)
    cost = [b for b in blocks if b["kind"] == "ftz_cost"]
    assert len(cost) == 3
    for b in cost:
        assert b["arms"] == ["nvrtc_ftz_true", "nvrtc_ftz_false"] and len(b["rounds"]) == 35
        assert b["protocol"] == {"mode": "graph", "warmups": 8, "rounds": 35, "invocations_per_pair": 10,
                                 "order_seed": 913}
        assert set(b["checks"]) == {"nvrtc_ftz_true", "nvrtc_ftz_false"}
    assert by_id["53.tail.graph@fusion_ftz_cost"]["shape"] == [2048, 8192]


def test_scout_document(imported):
    cases = imported.documents["scout"]["cases"]
    assert len(cases) == 10
    for c in cases:
        assert set(c["checks"]) == {"fp32", "fp64_accumulated"}
        for chk in c["checks"].values():
            assert chk["element_count"] is None and chk["bit_identical_count"] is None
        want = c["case"]["task"] == 51
        assert c["checks"]["fp32"]["legacy"]["pass"] is want
        assert c["checks"]["fp32"]["official"]["pass"] is want
    first = cases[0]
    assert first["case"] == {"task": 14, "seed": 0}
    assert first["checks"]["fp32"]["legacy"]["failing_count"] == 6
    assert first["min_abs_reference"] == 5.7977142333984375


def test_parse_log_header():
    if not (DATA / "run_all.log").is_file():
        pytest.skip("the published H200 run is not present")
    log = parse_log((DATA / "run_all.log").read_bytes())
    assert log.header["nvidia_smi"]["name"] == "NVIDIA H200"
    assert log.header["versions"] == {"torch": "2.11.0+cu130", "cupy": "14.2.0", "numpy": "2.5.2"}
    assert log.header["commit"] == "423217d9fda91e0c2d67e4a43bf62f96f6d104f1"
    assert log.failed_steps == 0 and log.notes == []


# ---------------------------------------------------------------------------- refusals
def test_count_written_as_float_is_refused(copy_dir):
    doc = original("fusion_results.json")
    doc["tasks"]["53"]["correctness"][0]["bit_equal_count"] = 3.0
    write(copy_dir / "fusion_results.json", doc)
    with pytest.raises(InvalidResultsError) as err:
        import_post_run(copy_dir)
    assert '$.tasks["53"].correctness[0].bit_equal_count' in err.value.message
    assert "fusion_results.json" in err.value.message and err.value.hint


def test_nan_token_is_refused(copy_dir):
    doc = original("fusion_controls.json")
    doc["tiny_value_controls"]["81"]["explicit_ftz_true"]["max_abs"] = float("nan")
    write(copy_dir / "fusion_controls.json", doc)
    assert "NaN" in (copy_dir / "fusion_controls.json").read_text()
    with pytest.raises(UnreadableInputError) as err:
        import_post_run(copy_dir)
    assert '$.tiny_value_controls["81"].explicit_ftz_true.max_abs' in err.value.message
    assert err.value.hint


def test_missing_required_field_is_refused(copy_dir):
    doc = original("fusion_preserve_denormals.json")
    del doc["tasks"]["95"]["graph_mutation_correctness"]["bit_equal_count"]
    del doc["protocol"]
    write(copy_dir / "fusion_preserve_denormals.json", doc)
    with pytest.raises(InvalidResultsError) as err:
        import_post_run(copy_dir)
    msg = err.value.message
    assert '$.tasks["95"].graph_mutation_correctness' in msg and "'bit_equal_count' is a required property" in msg
    assert "$: 'protocol' is a required property" in msg      # every violation is listed


def test_scout_count_as_float_and_missing_field(copy_dir):
    doc = original("scout.json")
    doc[3]["fp64"]["bad"] = 3.0
    del doc[7]["seed"]
    write(copy_dir / "scout.json", doc)
    with pytest.raises(InvalidResultsError) as err:
        import_post_run(copy_dir)
    assert "$[3].fp64.bad" in err.value.message and "$[7]: 'seed' is a required property" in err.value.message


def test_ftz_cost_required_field_removed(copy_dir):
    doc = original("fusion_ftz_cost.json")
    del doc["configs"]["true"]
    write(copy_dir / "fusion_ftz_cost.json", doc)
    with pytest.raises(InvalidResultsError) as err:
        import_post_run(copy_dir)
    assert "$.configs: 'true' is a required property" in err.value.message


def test_inconsistent_samples_are_refused(copy_dir):
    doc = original("fusion_results.json")
    doc["tasks"]["81"]["timings"]["tail_graph"]["rounds"][4]["cuda_tail"] += 1.0
    write(copy_dir / "fusion_results.json", doc)
    with pytest.raises(InvalidResultsError) as err:
        import_post_run(copy_dir)
    assert '$.tasks["81"].timings.tail_graph.stats.cuda_tail.samples_ms' in err.value.message


def test_pass_flag_contradicting_counts_is_refused(copy_dir):
    doc = original("fusion_results.json")
    doc["tasks"]["53"]["correctness"][2]["bad_finite"] = 2
    write(copy_dir / "fusion_results.json", doc)
    with pytest.raises(InvalidResultsError) as err:
        import_post_run(copy_dir)
    assert '$.tasks["53"].correctness[2].pass' in err.value.message


def test_unparseable_file_is_refused(copy_dir):
    (copy_dir / "fusion_ftz_cost.json").write_text('{"configs": {', encoding="utf-8")
    with pytest.raises(UnreadableInputError) as err:
        import_post_run(copy_dir)
    assert "fusion_ftz_cost.json" in err.value.message and err.value.hint


def test_directory_without_post_files(tmp_path):
    (tmp_path / "notes.txt").write_text("nothing here")
    (tmp_path / "run.json").write_text(json.dumps({"schema": "kbrepro/run", "schema_version": 1}))
    with pytest.raises(UnreadableInputError) as err:
        import_post_run(tmp_path)
    assert "fusion_results.json" in err.value.message and "scout.json" in err.value.message
    assert err.value.hint
    with pytest.raises(UnreadableInputError):
        import_post_run(tmp_path / "does-not-exist")


def test_partial_directory_imports_with_notes(tmp_path):
    if not (DATA / "scout.json").is_file():
        pytest.skip("the published H200 run is not present")
    shutil.copyfile(DATA / "scout.json", tmp_path / "scout.json")
    run = import_post_run(tmp_path)
    assert set(run.documents) == {"run", "environment", "scout"}
    for name, doc in run.documents.items():
        assert schema_problems(name, doc) == [], name
    assert run.log is None and run.documents["run"]["started_utc"] is None
    assert any("run_all.log" in n for n in run.notes)


def test_renamed_results_file_keeps_its_variant(copy_dir):
    (copy_dir / "fusion_preserve_denormals.json").rename(copy_dir / "ftz_off.json")
    run = import_post_run(copy_dir)
    assert "ftz_off.json" in run.originals
    ids = {b["id"] for b in run.documents["timings"]["blocks"]}
    assert "53.full.events@ftz_off" in ids
    case = run.documents["correctness"]["full_program"][0]
    assert set(case["checks"]) == {"cupy_default", "nvrtc_ftz_false"}
