"""Strict JSON, atomic writes, and schema validation (all violations, paths, strict counts)."""
from __future__ import annotations

import json
import math
import random
import tarfile
from collections import OrderedDict

from pathlib import Path

import pytest

from kbrepro import schemas
from kbrepro.harness import jsonio
from kbrepro.errors import UnreadableInputError


def test_nonfinite_tokens_and_duplicate_keys_are_refused():
    for text in ('{"a": NaN}', '{"a": Infinity}', '{"a": -Infinity}', '{"a": 1, "a": 2}'):
        with pytest.raises(UnreadableInputError):
            jsonio.loads_strict(text)
    assert jsonio.loads_strict('{"a": 1.5}') == {"a": 1.5}


def test_nonfinite_values_are_encoded_explicitly():
    assert [jsonio.enc_float(v) for v in (1.0, math.nan, math.inf, -math.inf)] == [1.0, "nan", "inf", "-inf"]
    assert math.isnan(jsonio.dec_float("nan")) and jsonio.dec_float("-inf") == -math.inf
    with pytest.raises(ValueError):
        jsonio.dumps({"a": math.nan})


def _stdlib(doc) -> str:
    return json.dumps(doc, indent=2, sort_keys=True, allow_nan=False, ensure_ascii=True) + "\n"


def _random_doc(rng: random.Random, depth: int = 0):
    kind = rng.randrange(10 if depth < 5 else 7)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.randrange(-10 ** rng.randrange(1, 30), 10 ** rng.randrange(1, 30))
    if kind == 2:
        return rng.choice([0.0, -0.0, 1.0, 1e16, 1e-7, 2.5e-308, 5e-324, 1.7976931348623157e308,
                           rng.uniform(-1e6, 1e6), rng.random() * 10 ** rng.randrange(-30, 30)])
    if kind in (3, 4):
        return "".join(rng.choice(["a", "\"", "\\", "\n", "\u00e9", "\u202e", "\U0001f600", "\x00", " ", "/"])
                       for _ in range(rng.randrange(6)))
    if kind in (5, 6, 7):
        return [_random_doc(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {str(_random_doc(rng, 5)) if rng.random() < 0.3 else f"k{rng.randrange(50)}": _random_doc(rng, depth + 1)
            for _ in range(rng.randrange(5))}


def test_canonical_dumps_is_the_standard_librarys_text():
    """jsonio.dumps writes plain documents with its own encoder; it must give the same bytes
    as json.dumps(indent=2, sort_keys=True) on random documents, the committed examples'
    documents, and the values it hands back to json.dumps (tuples, subclasses, odd keys)."""
    rng = random.Random(20261203)
    for _ in range(3000):
        doc = _random_doc(rng)
        assert jsonio.dumps(doc) == _stdlib(doc), doc
    root = Path(__file__).resolve().parent.parent / "examples"
    seen = 0
    for tar in sorted(root.glob("*.tar"))[:3]:
        with tarfile.open(tar) as tf:
            for m in tf.getmembers():
                if m.isfile() and m.name.endswith(".json") and "/data/provenance/" not in m.name \
                        and "/data/inputs/" not in m.name:
                    raw = tf.extractfile(m).read()
                    assert jsonio.dumps(json.loads(raw)).encode() == raw, m.name
                    seen += 1
    assert seen >= 10
    for odd in [(1, 2), {"a": (1, [2])}, OrderedDict(b=1, a=2), {1: "x", 2: "y"}, {True: 1}, [True, 1, 1.0],
                type("F", (float,), {})(1.5), type("S", (str,), {})("x"), {"z": {"y": []}, "a": {}}]:
        assert jsonio.dumps(odd) == _stdlib(odd), odd
    for bad in [[math.nan], {"a": math.inf}, {"a": {1, 2}}, [object()], {(1, 2): 3}]:
        with pytest.raises((ValueError, TypeError)) as ours:
            jsonio.dumps(bad)
        with pytest.raises(type(ours.value)):
            _stdlib(bad)
    cyc: list = []
    cyc.append(cyc)
    with pytest.raises(ValueError, match="Circular"):
        jsonio.dumps(cyc)


def test_atomic_write_leaves_no_temporary_and_keeps_old_file_on_failure(tmp_path, monkeypatch):
    p = tmp_path / "doc.json"
    jsonio.write_json(p, {"a": 1})
    assert json.loads(p.read_text()) == {"a": 1}

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(jsonio.os, "replace", boom)
    with pytest.raises(OSError):
        jsonio.write_json(p, {"a": 2})
    assert json.loads(p.read_text()) == {"a": 1}
    assert [f.name for f in tmp_path.iterdir()] == ["doc.json"]


#: the published study's own schemas (its scout document, its sections, custom keys, the post formats)
STUDY_SCHEMAS = Path(__file__).resolve().parent.parent / "studies" / "pointwise_fusion" / "schemas"


def test_every_schema_is_valid_against_the_metaschema():
    from jsonschema import Draft202012Validator

    names = schemas.available()
    for required in ("study", "run", "environment", "compile", "witness", "correctness", "timings",
                     "claims", "claims-spec", "bundle", "verification-report", "kernelbench-lock"):
        assert required in names
    for n in names:
        schemas.load(n, check=True)
    own = {p.name[:-len(".schema.json")]: p for p in STUDY_SCHEMAS.glob("*.schema.json")}
    for required in ("scout", "correctness.sections", "custom", "post-fusion-results", "post-fusion-controls",
                     "post-fusion-ftz-cost", "post-scout"):
        assert required in own
    for p in own.values():
        Draft202012Validator.check_schema(json.loads(p.read_text()))


def _reference_problems(doc, name):
    """The reference (Python jsonschema) answer alone, without the Rust pre-check."""
    real = schemas._fast_validator
    try:
        schemas._fast_validator = lambda _name: None
        return schemas.validate(doc, name)
    finally:
        schemas._fast_validator = real


@pytest.mark.slow
def test_fast_precheck_agrees_with_the_reference_validator():
    """The Rust pre-check may only ever say 'valid' where the reference validator does: on the
    committed documents and on about 150 seeded mutations of them (integral floats in counts, wrong
    types, strings with trailing newlines, negative and huge numbers, removed keys)."""
    import copy
    import json
    import random

    from kbrepro.bundle import validate
    from kbrepro.harness.study import load_study

    if schemas._fast_validator("run") is None:
        pytest.skip("jsonschema_rs is not installed: only the reference validator runs")
    root = Path(__file__).resolve().parent.parent / "examples" / "results-full-h200"
    docs = {p.stem: json.loads(p.read_text()) for p in sorted(root.glob("*.json"))}
    # the study's own documents (scout) have no product schema and no pre-check: the reference
    # validator alone judges them, through the study's schemas
    study = load_study(None, "full")
    extra = validate.study_schemas(study, study.binding())
    own = sorted(n for n in docs if n not in schemas.available())
    assert own == ["scout"]
    for name in own:
        assert validate.schema_problems(name, docs.pop(name), extra) == []
    rng = random.Random(20261201)
    tried = 0
    for name, doc in docs.items():
        assert schemas.validate(doc, name) == [] == _reference_problems(doc, name)
        paths = []

        def walk(node, path):
            if isinstance(node, dict):
                for k, v in node.items():
                    paths.append(path + (k,))
                    walk(v, path + (k,))
            elif isinstance(node, list):
                for i, v in enumerate(node[:3]):
                    paths.append(path + (i,))
                    walk(v, path + (i,))

        walk(doc, ())
        big = len(json.dumps(doc)) > 100_000
        for _ in range(8 if big else 34):
            d = copy.deepcopy(doc)
            path = rng.choice(paths)
            parent = d
            for k in path[:-1]:
                parent = parent[k]
            old = parent[path[-1]]
            choices = [float(old) if isinstance(old, int) and not isinstance(old, bool) else "x", -1, 10 ** 30, None,
                       "abc\n", [], {}, True, 0.5]
            if isinstance(parent, dict) and rng.random() < 0.2:
                del parent[path[-1]]
            else:
                parent[path[-1]] = rng.choice(choices)
            fast, ref = schemas.validate(d, name), _reference_problems(d, name)
            assert (fast == []) == (ref == []), (name, path, parent.get(path[-1]) if isinstance(parent, dict) else None)
            tried += 1
    assert tried >= 140


def _witness_doc():
    ref = [{"value": -2.66e-37, "bits": "0x82b54ddb"}]
    return {"schema": "kbrepro/witness", "schema_version": 1, "task": 81,
            "inputs": [{"value": -88.0, "bits": "0xc2b00000"}],
            "outputs": {"reference": ref},
            "reference_cpu": {"keep": ref, "flush": [{"value": -0.0, "bits": "0x80000000"}], "flush_supported": True},
            "discriminates": True, "discriminating_elements": [0],
            "verdicts": {"x": {"flushes": False, "bit_identical_to_reference": True}}}


def test_valid_document_passes():
    assert schemas.validate(_witness_doc(), "witness") == []


def test_float_count_nan_and_missing_field_are_each_reported_with_their_path():
    doc = _witness_doc()
    doc["task"] = 81.0
    doc["inputs"][0]["value"] = math.nan
    del doc["verdicts"]["x"]["flushes"]
    found = {v.path: v.message for v in schemas.validate(doc, "witness")}
    assert "$.task" in found and "integer" in found["$.task"]
    assert "$.inputs[0].value" in found and "non-finite" in found["$.inputs[0].value"]
    assert "$.verdicts.x" in found and "flushes" in found["$.verdicts.x"]


def test_supported_version_and_document_naming():
    assert schemas.supported_version("correctness") == 1
    assert schemas.schema_name_of({"schema": "kbrepro/timings"}) == "timings"
    assert schemas.schema_name_of({"schema": "other/x"}) is None


def test_a_huge_integral_float_is_not_an_integer_for_the_fast_precheck_either():
    """From 2**53 on every float is integral and x + 0.5 == x: the fast pre-check's twin must
    still refuse 1e16 where the schema wants an integer (red-team finding)."""
    tar = Path(__file__).resolve().parent.parent / "examples" / "pointwise-fusion-ftz-full-20261201T124959.tar"
    with tarfile.open(tar) as tf:
        doc = json.loads(tf.extractfile(next(m for m in tf.getmembers() if m.name.endswith("/data/results/run.json")))
                         .read())
    assert schemas.validate(doc, "run") == [] and isinstance(doc["peak_gpu_memory_bytes"]["reserved"], int)
    for v in (3.0, 1e16, 2.0 ** 53, 1e22):
        doc["peak_gpu_memory_bytes"]["reserved"] = v
        assert [p.path for p in schemas.validate(doc, "run")] == ["$.peak_gpu_memory_bytes.reserved"], v
