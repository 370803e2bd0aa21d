"""Forgeries of the study-folder trust surface, found by a red-team review of the verifier
after studies became folders; each must FAIL (exit 1) with a named problem, never crash or
pass as PARTIAL."""
from __future__ import annotations

import hashlib
import json
import tarfile
import time
from pathlib import Path

import pytest

from kbrepro import schemas
from kbrepro.bundle import pack
from kbrepro.bundle.verify.checklist import verify_archive
from kbrepro.bundle.verify.claims import author_sections_report
from kbrepro.bundle.verify.core import Bundle, Tier
from kbrepro.harness import jsonio

ROOT = Path(__file__).resolve().parent.parent
USER = ROOT / "tests" / "fixtures" / "user-study-relu-quick.tar"
(LAYERNORM,) = (ROOT / "examples").glob("layernorm-l1-40-full-*.tar")


def _load(path: Path):
    files, top, mtime = {}, None, 0
    with tarfile.open(path) as tf:
        for m in tf:
            top, mtime = m.name.split("/")[0], m.mtime
            if m.isfile():
                files[m.name.split("/", 1)[1]] = tf.extractfile(m).read()
    return top, files, mtime


def _seal(tmp_path: Path, top: str, files: dict, mtime: int) -> Path:
    info = [tuple(line.split(": ", 1)) for line in files["bag-info.txt"].decode().splitlines()
            if not line.startswith("Payload-Oxum")]
    payload = {p[len("data/"):]: b for p, b in files.items() if p.startswith("data/")}
    out = tmp_path / "forged.tar"
    out.write_bytes(pack.tar_bytes(pack.make_bag(top, payload, info), mtime=mtime))
    return out


def _edit(files: dict, rel: str, fn) -> None:
    doc = json.loads(files[rel])
    fn(doc)
    files[rel] = jsonio.dumps(doc).encode()


def _messages(rep) -> list[str]:
    return [p.message for t in rep.tiers for p in t.problems]


def _restudy(files: dict) -> None:
    """Rewrite the study-file digests bundle.json and run.json record (what a forger does)."""
    digest = {p[len("data/inputs/study/"):]: hashlib.sha256(b).hexdigest()
              for p, b in sorted(files.items()) if p.startswith("data/inputs/study/")}
    for rel in ("data/bundle.json", "data/results/run.json"):
        def fix(d):
            d["study"]["files"] = digest
            d["study"]["sha256"] = digest["study.yaml"]
        _edit(files, rel, fix)


def test_an_unknown_study_cannot_drop_the_engines_full_program_blocks(tmp_path):
    top, files, mtime = _load(USER)
    _edit(files, "data/results/timings.json", lambda d: d.update(blocks=[b for b in d["blocks"]
                                                                          if b["id"] != "19.full.graph"]))
    rep = verify_archive(_seal(tmp_path, top, files, mtime), level="static")
    assert rep.exit_code == 1
    assert any("timing block(s) of the study missing (first 19.full.graph)" in m for m in _messages(rep))


def test_an_unknown_studys_custom_schema_may_not_use_patterns(tmp_path):
    """A backtracking pattern would hang the verifier: it is refused before it is applied."""
    top, files, mtime = _load(USER)
    y = files["data/inputs/study/study.yaml"].decode()
    files["data/inputs/study/study.yaml"] = y.replace("profiles:\n", 'custom:\n  a: "' + "a" * 40 + '!"\nprofiles:\n',
                                                      1).encode()
    files["data/inputs/study/schemas/custom.schema.json"] = json.dumps(
        {"type": "object", "properties": {"a": {"type": "string", "pattern": "^(a|a)+$"}}}).encode()
    _restudy(files)
    t0 = time.perf_counter()
    rep = verify_archive(_seal(tmp_path, top, files, mtime), level="static")
    assert time.perf_counter() - t0 < 30
    assert rep.exit_code == 1
    assert any("keyword 'pattern' is not allowed" in m for m in _messages(rep))


@pytest.mark.parametrize("schema, fragment", [
    ([], "must be a JSON object"),
    ({"$ref": "https://evil.example/s.json"}, "points outside"),
    ({"type": 5}, "not a valid JSON Schema"),
    ({"properties": {"a": {"patternProperties": {"x": {}}}}}, "'patternProperties' is not allowed"),
    ({"properties": {"a": {"format": "email"}}}, "'format' is not allowed"),
    ({"allOf": [{"allOf": [{}] * 3000}] * 3}, "larger than"),
])
def test_untrusted_schemas_are_refused_with_a_reason(schema, fragment):
    why = schemas.untrusted_schema_problems(schema)
    assert why and fragment in why[0]


def test_plain_untrusted_schemas_are_accepted():
    assert schemas.untrusted_schema_problems({"type": "object", "properties": {"n": {"type": "integer"}},
                                              "$defs": {"x": {"enum": [1]}}, "required": ["n"]}) == []


def test_a_broken_schema_is_a_violation_not_a_crash():
    (v,) = schemas.validate_with({"a": 1}, {"$ref": "https://kbrepro.invalid/schemas/nope.schema.json"}, "x")
    assert v.path == "$" and "cannot be applied" in v.message


@pytest.mark.parametrize("line", [
    "[low, high]: //evil.example/phish", "see [here]", "```text", "~~~", "ftp://evil.example/x",
    "www.evil.example", "mail me@evil.example", "<b>x</b>", "&amp;",
])
def test_author_report_sections_may_not_link_fence_or_tag(line):
    head, tail = b"# r\n\n## Timings\n", b"\n## Plots\n"
    b = Bundle(name="x", files={}, root=Path("."))
    t = Tier(5, "claims")
    report = head + f"## Mine\n\n| a | b |\n|---|---|\n| 1 | {line} |\n".encode() + tail
    author_sections_report(b, t, report, head + tail[1:], head + b"\x00study-sections\x00" + tail)
    assert t.status == "FAIL" and "author's" in t.problems[0].message


def test_inert_author_sections_are_accepted_and_make_the_result_partial():
    head, tail = b"# r\n\n## Timings\n", b"\n## Plots\n"
    b = Bundle(name="x", files={}, root=Path("."))
    t = Tier(5, "claims")
    report = head + b"## Mine\n\n| a | b |\n|---|---|\n| 1 | **2** `x` |\n" + tail
    assert author_sections_report(b, t, report, head + tail[1:], head + b"\x00study-sections\x00" + tail) == report
    assert t.status == "PASS" and any("author's rendering" in r for r in b.partial)


def test_a_compile_record_must_name_the_source_the_study_compiles(tmp_path):
    top, files, mtime = _load(LAYERNORM)
    src = {"file": "binding.py", "sha256": hashlib.sha256(files["data/inputs/study/binding.py"]).hexdigest()}

    def point(d):
        d["source"] = src
        for v in d["variants"]:
            v["source"] = src
    _edit(files, "data/results/compile.json", point)
    rep = verify_archive(_seal(tmp_path, top, files, mtime), level="static")
    assert rep.exit_code == 1
    assert any("the study compiles layernorm.cu for this variant; the record names binding.py" in m
               for m in _messages(rep))


@pytest.mark.parametrize("value", ["x", {"files": [["a"]]}, {"files": "abc"}])
def test_a_malformed_run_study_record_is_a_problem_not_a_crash(tmp_path, value):
    top, files, mtime = _load(LAYERNORM)
    _edit(files, "data/results/run.json", lambda d: d.update(study=value))
    rep = verify_archive(_seal(tmp_path, top, files, mtime), level="static")
    assert rep.exit_code == 1
    assert any("study record is not an object" in m for m in _messages(rep))


# ------------------------------------------------------------------ second red-team pass


def test_an_untrusted_schema_that_takes_too_long_is_cut_off(monkeypatch):
    """122 nodes, each $def referring twice to the next: 2^22 steps to apply."""
    n = 22
    defs = {f"a{i}": {"allOf": [{"$ref": f"#/$defs/a{i + 1}"}, {"$ref": f"#/$defs/a{i + 1}"}]} for i in range(n)}
    defs[f"a{n}"] = {"type": "object"}
    schema = {"$ref": "#/$defs/a0", "$defs": defs}
    assert schemas.untrusted_schema_problems(schema) == []
    t0 = time.perf_counter()
    # an invalid document: the fast pre-check may only say "valid", so the reference validator
    # walks the whole 2^22 tree
    (v,) = schemas.validate_untrusted([1], schema, "extra", seconds=1.0)
    assert time.perf_counter() - t0 < 10 and "took more than 1 s" in v.message


def test_an_untrusted_schema_is_applied_in_full_when_it_is_quick():
    got = schemas.validate_untrusted({"n": "x"}, {"type": "object", "properties": {"n": {"type": "integer"}}}, "extra")
    assert [(v.path, v.schema) for v in got] == [("$.n", "extra")]


def test_an_author_schema_without_a_version_const_is_a_problem_not_a_crash():
    from kbrepro.bundle import validate

    (p,) = validate.schema_problems("extra", {"schema": "kbrepro/extra", "schema_version": 1},
                                    {"extra": [schemas.UntrustedSchema({"properties": {"schema_version": True}})]})
    assert "gives no integer schema_version const" in p.message and p.code == "document.schema"


def test_a_recorded_infinity_decides_a_comparison_and_is_written_as_json_allows():
    from kbrepro.bundle import claims as claims_mod

    spec = {"schema": "kbrepro/claims-spec", "schema_version": 1, "study": "x",
            "bootstrap": {"level": 0.95, "resamples": 100, "seed": 1},
            "claims": [{"id": "C01", "sentence": "small error", "checks": [
                {"kind": "compare", "select": "correctness.errs[]", "op": "<=", "value": 1e-4}]}]}
    out = claims_mod.evaluate(spec, {"correctness": {"errs": [1e-6, "inf"]}}, source="recorded")
    (c,) = out["claims"]
    assert c["verdict"] == "fails" and c["checks"][0]["max"] == "inf"
    jsonio.dumps(out)  # raises on a non-finite float


def test_an_unknown_study_relabelled_as_imported_fails(tmp_path):
    """An import is held to fewer checks than a run; without an importer of the verifier's
    own nothing of it can be re-derived, so it is refused, not partial."""
    top, files, mtime = _load(USER)
    _edit(files, "data/bundle.json", lambda d: d.update(source="imported"))
    _edit(files, "data/results/run.json",
          lambda d: d.update(status="imported", imported={"source_format": "x", "source_files": {}}))
    files["data/results/originals/results.json"] = b"{}\n"
    files["bag-info.txt"] = files["bag-info.txt"].replace(b"Source: measured", b"Source: imported")
    rep = verify_archive(_seal(tmp_path, top, files, mtime), level="static")
    assert rep.exit_code == 1
    assert any("imported results of a study this verifier does not ship cannot be checked" in m
               for m in _messages(rep))


def _disposition_rows(*args):
    from conftest import sigint_disposition

    return [("$", sigint_disposition(), "extra")]


def test_the_untrusted_schema_worker_ignores_ctrl_c(monkeypatch):
    """The forked worker of validate_untrusted had Python's SIGINT handler: a Ctrl-C while a
    stranger's schema was applied printed ``Process ForkPoolWorker-1:`` and a traceback."""
    from conftest import sigint_disposition

    here = sigint_disposition()
    monkeypatch.setattr(schemas, "_rows", _disposition_rows)
    (v,) = schemas.validate_untrusted({}, {"type": "object"}, "extra")
    assert v.message == "ignored:unblocked"
    assert sigint_disposition() == here  # this process: as it was
