"""The documents registry (model/documents.py) and its one loader (bundle/documents.py): every
document of ours has a line (bag path, schema, record), every committed study bundle's
documents load into their records, and each step of a load reports its own problem."""
from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from conftest import ROOT
from kbrepro.bundle import documents
from kbrepro.harness import jsonio
from kbrepro.model import documents as md
from kbrepro.model.problems import DOCUMENT, EXTRA, SCHEMA

STUDY_BUNDLES = sorted(p for p in (ROOT / "examples").glob("**/*.tar") if "candidates" not in p.name)


def test_every_line_of_the_registry_names_a_schema_and_a_record():
    assert {d.name for d in md.REGISTRY} == {"run", "environment", "compile", "witness", "correctness", "timings",
                                             "selftest", "claims", "bundle"}
    for d in md.REGISTRY:
        assert (ROOT / "schemas" / f"{d.schema}.schema.json").is_file(), d
        assert d.bag_path.startswith("data/") and d.bag_path.endswith(f"{d.name}.json"), d
        assert d.record is not None and d.record.__dataclass_params__.frozen, d
    assert documents.REQUIRED == ("run", "environment", "compile", "correctness", "timings")
    assert documents.DOC_PATHS["environment"] == "environment.json" and documents.DOC_PATHS["scout"] == "results/scout.json"
    assert documents.bag_path("claims") == "data/claims.json"
    with pytest.raises(KeyError):
        documents.bag_path("../escape")


@pytest.mark.parametrize("bundle", STUDY_BUNDLES, ids=[p.name for p in STUDY_BUNDLES])
def test_every_document_of_the_committed_study_bundles_loads_into_its_record(bundle: Path):
    with tarfile.open(bundle) as tf:
        files = {m.name.split("/", 1)[1]: tf.extractfile(m).read() for m in tf if m.isfile() and "/" in m.name}
    loaded = 0
    for d in md.REGISTRY:
        if d.bag_path not in files:
            continue
        got = documents.load(d.name, files[d.bag_path], canonical=d.name != "bundle")
        assert got.problems == () and isinstance(got.record, d.record), (d.name, got.problems[:3])
        loaded += 1
    assert loaded >= 7
    run = documents.load("run", files["data/results/run.json"]).record
    assert run.status == "complete" and run.stages and all(s.seconds >= 0 for s in run.stages)


def _run_doc() -> dict:
    return json.loads((ROOT / "tests" / "fixtures" / "results-quick-h200" / "run.json").read_text())


def test_each_step_of_a_load_reports_its_own_problem():
    doc = _run_doc()
    raw = jsonio.dumps(doc).encode()
    ok = documents.load("run", raw)
    assert ok.problems == () and ok.record.study.name == doc["study"]["name"]
    # not strict JSON
    (p,) = documents.load("run", b'{"a": NaN}').problems
    assert p.code == DOCUMENT and p.file == "data/results/run.json"
    # not the canonical form
    (p,) = documents.load("run", json.dumps(doc).encode()).problems
    assert p.code == DOCUMENT and "canonical" in p.message
    # the schema
    bad = dict(doc, status="finished")
    assert {p.code for p in documents.load("run", jsonio.dumps(bad).encode()).problems} == {SCHEMA}
    # the record: what the schema leaves open stays open, what it closes stays closed
    assert documents.load("run", jsonio.dumps(dict(doc, later_field=1)).encode()).problems == ()
    env = json.loads((ROOT / "tests" / "fixtures" / "results-quick-h200" / "environment.json").read_text())
    env["fields"]["gpu_name"]["extra"] = 1
    got = documents.load("environment", jsonio.dumps(env).encode()).problems
    assert got and got[0].code == SCHEMA
    # a schema-valid document whose record refuses it (a field the record declares closed)
    from kbrepro.model import strict

    rec, problems = strict.build(md.Protocol, {"mode": "graph", "warmups": 1, "rounds": 2, "invocations_per_pair": 1,
                                               "order_seed": None, "later": 1})
    assert rec is None and problems[0].code == EXTRA


@pytest.mark.parametrize("bad", [0.0, -1.0])
def test_a_round_time_that_is_not_positive_is_refused_when_the_timings_load(bad):
    """Once the verifier's cross-check, now the schema's and the record's: a zero or negative
    time is a broken timer (and the denominator of a ratio)."""
    doc = json.loads((ROOT / "tests" / "fixtures" / "results-quick-h200" / "timings.json").read_text())
    doc["blocks"][0]["rounds"][3]["times_ms"]["eager"] = bad
    got = documents.load("timings", jsonio.dumps(doc).encode())
    assert got.record is None and got.problems and got.problems[0].code == SCHEMA
    from kbrepro.model import strict

    rec, problems = strict.build(md.Timings, doc)
    assert rec is None and "$.blocks[0].rounds[3].times_ms.eager" in problems[0].path


@pytest.mark.parametrize("edit,where", [
    (lambda d: d["stages"][0].update(seconds=1e308), "$.stages[0].seconds"),
    (lambda d: d.update(wall_seconds=1e308), "$.wall_seconds"),
])
def test_a_duration_past_any_run_is_refused_by_the_record(edit, where):
    """Red team: stages of 1e308 s added up to inf, which the JSON report could not hold
    (internal error with --json); a duration is at most 1e7 s (model/scalars.py SECONDS)."""
    doc = _run_doc()
    edit(doc)
    got = documents.load("run", jsonio.dumps(doc).encode())
    assert got.record is None and [p.path for p in got.problems] == [where]


def test_a_non_finite_value_quoted_by_a_problem_is_written_as_a_string():
    from kbrepro.model.problems import CONTRADICTS, Problem

    doc = Problem(CONTRADICTS, "$.x", "m", expected=[1.0, float("inf")], found={"a": float("nan")}).to_doc()
    assert doc["expected"] == [1.0, "inf"] and doc["found"] == {"a": "nan"}
    json.dumps(doc, allow_nan=False)

