"""Issue 14: the RO-Crate 1.1 metadata file of a bundle (data/ro-crate-metadata.json).

Packed from the committed full results, the format 4 bundle differs from the format 3 one
(the committed example's) only by that file and the format number; the crate validates
against the RO-Crate 1.1 profile with rocrate-validator (``roc-validator``, where it is
installed: run offline, the RO-Crate JSON-LD context served from the copy the ``rocrate``
package ships, whose terms used here map to the same IRIs as in the RO-Crate 1.1 context,
see TERMS_1_1), and the verifier refuses a crate that does not describe the bundle.
"""
from __future__ import annotations

import dataclasses
import json
import re
import tarfile
from pathlib import Path

import pytest

from kbrepro.bundle import crate, facts, make, pack
from kbrepro.bundle.verify.checklist import verify_archive
from kbrepro.harness import jsonio

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "examples" / "results-full-h200"
(EXAMPLE,) = (ROOT / "examples").glob("pointwise-fusion-ftz-full-*.tar")
GOLDEN = ROOT / "tests" / "fixtures" / "golden-full-h200"
CRATE = f"data/{facts.CRATE_FILE}"

#: every JSON-LD term the crate uses, with its IRI in the RO-Crate 1.1 context
#: (https://w3id.org/ro/crate/1.1/context, version 1.1.3), read off that file
TERMS_1_1 = {
    "CreateAction": "http://schema.org/CreateAction", "CreativeWork": "http://schema.org/CreativeWork",
    "Dataset": "http://schema.org/Dataset", "File": "http://schema.org/MediaObject",
    "IndividualProduct": "http://schema.org/IndividualProduct",
    "SoftwareApplication": "http://schema.org/SoftwareApplication", "about": "http://schema.org/about",
    "actionStatus": "http://schema.org/actionStatus", "conformsTo": "http://purl.org/dc/terms/conformsTo",
    "contentSize": "http://schema.org/contentSize", "datePublished": "http://schema.org/datePublished",
    "description": "http://schema.org/description", "encodingFormat": "http://schema.org/encodingFormat",
    "endTime": "http://schema.org/endTime", "hasPart": "http://schema.org/hasPart",
    "identifier": "http://schema.org/identifier", "instrument": "http://schema.org/instrument",
    "license": "http://schema.org/license", "mentions": "http://schema.org/mentions", "name": "http://schema.org/name",
    "object": "http://schema.org/object", "result": "http://schema.org/result",
    "softwareVersion": "http://schema.org/softwareVersion", "startTime": "http://schema.org/startTime",
}


def _members(path: Path) -> tuple[str, dict[str, bytes]]:
    with tarfile.open(path) as tf:
        files = {m.name.split("/", 1)[1]: tf.extractfile(m).read() for m in tf if m.isfile()}
        top = next(m.name for m in tf).split("/")[0]
    return top, files


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    from conftest import kernelbench_from_example

    d = tmp_path_factory.mktemp("crate")
    kb = str(kernelbench_from_example(d))
    new = make.make_from_results(RESULTS, d / "f4.tar", kernelbench=kb, with_plots=False, bundle_format=4)
    old = make.make_from_results(RESULTS, d / "f3.tar", kernelbench=kb, with_plots=False, bundle_format=3)
    latest = make.make_from_results(RESULTS, d / "f5.tar", kernelbench=kb, with_plots=False, bundle_format=5)
    six = make.make_from_results(RESULTS, d / "f6.tar", kernelbench=kb, with_plots=False, bundle_format=6)
    seven = make.make_from_results(RESULTS, d / "f7.tar", kernelbench=kb, with_plots=False, bundle_format=7)
    eight = make.make_from_results(RESULTS, d / "f8.tar", kernelbench=kb, with_plots=False)
    return {"dir": d, "new": new, "old": old, "latest": latest, "six": six, "seven": seven, "eight": eight}


def _crate(path: Path) -> dict:
    return json.loads(_members(path)[1][CRATE])


def test_format_4_adds_the_crate_and_changes_nothing_else_of_the_payload(packed):
    assert packed["old"].digest == EXAMPLE.with_name(EXAMPLE.name + ".sha256-digest").read_text().split()[-1]
    # format 4 of the same results: one digest on any machine (README, "The example bundles")
    assert packed["new"].digest == "1829377063736d11cbeffaf37c48e0ecfb55646e4f917bb87297ed2e90f21291"
    _, new = _members(packed["new"].path)
    _, old = _members(packed["old"].path)
    data_new = {k: v for k, v in new.items() if k.startswith("data/")}
    data_old = {k: v for k, v in old.items() if k.startswith("data/")}
    assert sorted(set(data_new) - set(data_old)) == [CRATE] and not set(data_old) - set(data_new)
    changed = sorted(k for k in data_old if data_old[k] != data_new[k])
    assert changed == ["data/bundle.json"]
    a, b = json.loads(data_old["data/bundle.json"]), json.loads(data_new["data/bundle.json"])
    assert (a.pop("format_version"), b.pop("format_version")) == (3, 4) and a == b
    # the golden files of the committed results hold for format 4 (summary.txt names the new digest)
    assert data_new["data/REPORT.md"] == (GOLDEN / "REPORT.md").read_bytes()
    assert data_new["data/claims.json"] == (GOLDEN / "claims.json").read_bytes()
    assert new["summary.txt"].decode().startswith(f"kbrepro bundle {packed['new'].name}: digest sha256:"
                                                  f"{packed['new'].digest}\n")
    assert "Bundle-Format-Version: 4\n" in new["bag-info.txt"].decode()
    assert verify_archive(packed["new"].path, level="static").verdict == "PASS"


def test_format_5_changes_only_the_format_number_for_results_without_adaptive_blocks(packed):
    """Format 5 gives in REPORT.md's timing tables the rounds each block holds; a block without
    adaptive stopping holds exactly its protocol's rounds, so these results render the same."""
    _, new = _members(packed["new"].path)
    _, latest = _members(packed["latest"].path)
    changed = sorted(k for k in new if k.startswith("data/") and new[k] != latest.get(k))
    assert changed == ["data/bundle.json", CRATE] and sorted(new) == sorted(latest)
    a, b = json.loads(new["data/bundle.json"]), json.loads(latest["data/bundle.json"])
    assert (a.pop("format_version"), b.pop("format_version")) == (4, 5) and a == b
    assert "Bundle-Format-Version: 5\n" in latest["bag-info.txt"].decode()
    assert verify_archive(packed["latest"].path, level="static").verdict == "PASS"


def test_format_6_changes_only_the_reports_words(packed):
    """Format 6 writes REPORT.md's differences as a person does (issue 31); the documents,
    claims and figures' data are those of format 5."""
    _, five = _members(packed["latest"].path)
    _, six = _members(packed["six"].path)
    changed = sorted(k for k in six if k.startswith("data/") and six[k] != five.get(k))
    assert changed == ["data/REPORT.md", "data/bundle.json", CRATE] and sorted(six) == sorted(five)
    old, new = five["data/REPORT.md"].decode(), six["data/REPORT.md"].decode()
    # 53.tail.events: the fused tail takes 0.60 to 0.61 of the eager tail's time
    assert "cupy_default faster by 39 to 40 % (worst of 18" in old
    assert "cupy_default 1.6x to 1.7x faster (worst of 18" in new
    assert verify_archive(packed["six"].path, level="static").verdict == "PASS"


def test_format_7_changes_only_the_ratio_column_of_blocks_without_an_eager_arm(packed):
    """Format 7 gives the ratios of a block without an eager arm (ftz_cost) to its first arm;
    format 6 headed that column "t(eager)" and left it empty (a newcomer's finding)."""
    _, six = _members(packed["six"].path)
    _, seven = _members(packed["seven"].path)
    changed = sorted(k for k in seven if k.startswith("data/") and seven[k] != six.get(k))
    assert changed == ["data/REPORT.md", "data/bundle.json", CRATE] and sorted(six) == sorted(seven)
    old, new = six["data/REPORT.md"].decode(), seven["data/REPORT.md"].decode()
    assert "| 81.ftz_cost.graph |" in new and "nvrtc_ftz_false/nvrtc_ftz_true 0.995 |" in new
    assert "nvrtc_ftz_false/nvrtc_ftz_true" not in old.split("### ftz_cost")[1]
    assert [ln for ln in old.splitlines() if "t(eager)" in ln] and not [ln for ln in new.splitlines() if "t(eager)" in ln]
    assert verify_archive(packed["seven"].path, level="static").verdict == "PASS"


def test_format_8_changes_only_the_words_of_intervals_whose_ends_read_the_same(packed):
    """Format 8 (the default) writes an interval whose two ends read the same as one value
    ("1.7x faster"); every other line of REPORT.md, and every other file, is format 7's."""
    assert pack.FORMAT_VERSION == 8
    _, seven = _members(packed["seven"].path)
    _, eight = _members(packed["eight"].path)
    changed = sorted(k for k in eight if k.startswith("data/") and eight[k] != seven.get(k))
    assert changed == ["data/REPORT.md", "data/bundle.json", CRATE] and sorted(seven) == sorted(eight)
    old, new = seven["data/REPORT.md"].decode().splitlines(), eight["data/REPORT.md"].decode().splitlines()
    assert len(old) == len(new)
    diff = [(a, b) for a, b in zip(old, new) if a != b]
    assert diff and all(re.search(r"(\S+) to \1", a) and not re.search(r"(\d\S*) to \1 ", b) for a, b in diff)
    assert "| nvrtc_ftz_true 1.7x faster |" in "\n".join(new)
    assert verify_archive(packed["eight"].path, level="static").verdict == "PASS"


def test_the_crate_describes_the_bundle_its_files_the_study_the_software_and_the_gpu(packed):
    doc = _crate(packed["new"].path)
    assert doc["@context"] == "https://w3id.org/ro/crate/1.1/context"
    ents = {e["@id"]: e for e in doc["@graph"]}
    assert [e["@id"] for e in doc["@graph"]][:2] == ["ro-crate-metadata.json", "./"]
    desc = ents["ro-crate-metadata.json"]
    assert desc["@type"] == "CreativeWork" and desc["conformsTo"] == {"@id": "https://w3id.org/ro/crate/1.1"}
    assert desc["about"] == {"@id": "./"}
    root = ents["./"]
    assert root["@type"] == "Dataset" and root["name"] == packed["new"].name
    for prop in ("name", "description", "datePublished", "license"):  # RO-Crate 1.1: the root MUST have them
        assert root.get(prop), prop
    assert root["datePublished"] == "2026-12-01T12:50:40Z"  # the run's recorded finish, not the packing time
    _, files = _members(packed["new"].path)
    payload = sorted(k[len("data/"):] for k in files if k.startswith("data/") and k != CRATE)
    assert [p["@id"] for p in root["hasPart"]] == payload
    for p in payload:
        assert ents[p]["@type"] == "File" and ents[p]["contentSize"] == str(len(files[f"data/{p}"]))
    assert ents["results/run.json"]["encodingFormat"] == "application/json"
    assert ents["#study"]["name"] == "pointwise-fusion-ftz" and "profile full" in ents["#study"]["description"]
    assert ents["#gpu"]["@type"] == "IndividualProduct" and ents["#gpu"]["name"] == "NVIDIA H200"
    versions = {e["name"]: e["softwareVersion"] for e in doc["@graph"] if e["@type"] == "SoftwareApplication"}
    assert versions == {"kbrepro": "0.1.0", "torch": "2.11.0+cu130", "cupy-cuda13x": "14.2.0", "numpy": "2.5.2",
                        "python": "3.12.3", "nvrtc": "13.0", "cuda-runtime": "13.2", "driver": "580.159.04"}
    run = ents["#run"]
    assert run["@type"] == "CreateAction" and (run["startTime"], run["endTime"]) == ("2026-12-01T12:49:59Z",
                                                                                     "2026-12-01T12:50:40Z")
    assert {"@id": "#gpu"} in run["instrument"] and {"@id": "inputs/study/fused_tails.cu"} in run["object"]
    assert {"@id": "results/timings.json"} in run["result"]
    from kbrepro.bundle import scrub

    assert scrub.find_leaks(json.dumps(doc)) == []  # no home, temporary or install path of the machine


def test_the_crate_uses_only_ro_crate_1_1_terms_and_the_stand_in_context_maps_them_alike():
    """rocrate-validator needs the RO-Crate JSON-LD context; offline, the tests serve the copy
    the rocrate package ships. Every term the crate uses maps to the same IRI there as in the
    RO-Crate 1.1 context (TERMS_1_1), so the validation below is the 1.1 one for this crate."""
    import importlib.resources

    shipped = json.loads(importlib.resources.files("rocrate").joinpath("data/ro-crate.jsonld").read_text("utf8"))
    ctx = shipped["@context"]
    doc = json.loads(crate.render(facts.bundle_facts(*_example_inputs())))
    used = set()
    for e in doc["@graph"]:
        used |= {k for k in e if not k.startswith("@")}
        used |= {e["@type"]} if isinstance(e["@type"], str) else set(e["@type"])
    assert used <= set(TERMS_1_1), sorted(used - set(TERMS_1_1))
    assert {t: ctx.get(t) for t in used} == {t: TERMS_1_1[t] for t in used}


def _example_inputs():
    _, files = _members(EXAMPLE)
    payload = {k[len("data/"):]: v for k, v in files.items() if k.startswith("data/")}
    docs = {"run": json.loads(payload["results/run.json"]), "environment": json.loads(payload["environment.json"])}
    return json.loads(payload["bundle.json"]), docs, payload


def _validate_offline(root: Path, severity: str, monkeypatch) -> list[tuple[str, str, str]]:
    """rocrate-validator on the crate at ``root`` against the RO-Crate 1.1 profile, with no
    network: the JSON-LD context is served from the rocrate package's copy. Returns
    ``(severity, check id, message)`` of every issue."""
    import importlib.resources

    import requests
    from rocrate_validator import models, services
    from rocrate_validator.utils import document_loader
    from rocrate_validator.utils import http as rv_http

    ctx = {"@context": json.loads(importlib.resources.files("rocrate").joinpath("data/ro-crate.jsonld")
                                  .read_text("utf8"))["@context"]}
    wanted = "https://w3id.org/ro/crate/1.1/context"

    class _Response:
        status_code = 200
        headers = {"Content-Type": "application/ld+json"}
        text = json.dumps(ctx)
        content = text.encode()

        def json(self):
            return ctx

    def fetch(url):
        if url.rstrip("/") == wanted:
            return ctx
        raise requests.ConnectionError(f"offline: {url}")

    real = rv_http.HttpRequester.__getattr__

    def getattr_(self, name):
        if name == "get":
            return lambda url, *a, **k: _Response() if url.rstrip("/") == wanted else fetch(url)
        return real(self, name)

    monkeypatch.setattr(rv_http.HttpRequester, "__getattr__", getattr_)
    monkeypatch.setattr(document_loader, "_fetch_json_ld", fetch)
    settings = models.ValidationSettings(rocrate_uri=str(root), profile_identifier="ro-crate-1.1",
                                         requirement_severity=getattr(models.Severity, severity),
                                         abort_on_first=False)
    result = services.validate(settings)
    return [(i.severity.name, i.check.identifier if i.check else "", i.message) for i in result.get_issues()]


@pytest.mark.slow
def test_the_crate_validates_against_the_ro_crate_1_1_profile(packed, tmp_path, monkeypatch):
    pytest.importorskip("rocrate_validator", reason="roc-validator (rocrate-validator) is not installed here")
    root = tmp_path / "data"
    _, files = _members(packed["new"].path)
    for k, v in files.items():
        if k.startswith("data/"):
            p = tmp_path / k
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(v)
    assert _validate_offline(root, "REQUIRED", monkeypatch) == []
    # RECOMMENDED: only an author and a publisher are missing (a bundle names no person)
    recommended = _validate_offline(root, "RECOMMENDED", monkeypatch)
    assert sorted({c for _, c, _ in recommended}) == ["ro-crate-1.1_22.2", "ro-crate-1.1_22.3"], recommended
    assert all(s == "RECOMMENDED" for s, _, _ in recommended)


# ------------------------------------------------------------------------------- the verifier


def _repack(src: Path, dst: Path, edit, info_edit=None) -> Path:
    top, files = _members(src)
    payload = {k[len("data/"):]: v for k, v in files.items() if k.startswith("data/")}
    edit(payload)
    info = [tuple(line.split(": ", 1)) for line in files["bag-info.txt"].decode().splitlines()
            if not line.startswith("Payload-Oxum")]
    pack.write_archive(pack.make_bag(top, payload, info_edit(info) if info_edit else info), dst)
    return dst


def _crate_edit(fn):
    def edit(payload):
        doc = json.loads(payload[facts.CRATE_FILE])
        fn(doc)
        payload[facts.CRATE_FILE] = jsonio.dumps(doc).encode()
    return edit


def _entity(doc, i):
    return next(e for e in doc["@graph"] if e["@id"] == i)


@pytest.mark.parametrize("what,edit,fragment", [
    ("another GPU", _crate_edit(lambda d: _entity(d, "#gpu").update(name="NVIDIA B200")),
     "entity #gpu property name: expected NVIDIA H200, found NVIDIA B200"),
    ("another torch", _crate_edit(lambda d: _entity(d, "#software-torch").update(softwareVersion="2.12.0")),
     "softwareVersion"),
    ("another study", _crate_edit(lambda d: _entity(d, "#study").update(name="layernorm-l1-40")), "#study"),
    ("a file left out", _crate_edit(lambda d: d["@graph"].remove(_entity(d, "logs/run.log"))),
     "entity logs/run.log is missing"),
    ("an entity of its own", _crate_edit(lambda d: d["@graph"].append({"@id": "#ad", "@type": "CreativeWork",
                                                                       "name": "buy now"})),
     "describes nothing in the bundle"),
    ("another context", _crate_edit(lambda d: d.update({"@context": "https://w3id.org/ro/crate/1.2/context"})),
     "not the RO-Crate 1.1 context"),
    ("not canonical", lambda p: p.update({facts.CRATE_FILE: p[facts.CRATE_FILE].replace(b"\n  ", b"\n   ", 1)}),
     "canonical"),
    ("missing", lambda p: p.pop(facts.CRATE_FILE), "missing: bundle format 4 carries an RO-Crate"),
])
def test_the_verifier_refuses_a_crate_that_does_not_describe_the_bundle(packed, tmp_path, what, edit, fragment):
    rep = verify_archive(_repack(packed["new"].path, tmp_path / "x.tar", edit), level="static")
    msgs = [p.message for t in rep.tiers for p in t.problems]
    assert rep.exit_code == 1 and any(fragment in m for m in msgs), (what, msgs)
    assert all("RO-Crate" in m or "not in the canonical" in m or "is missing" in m for m in msgs), (what, msgs)


def test_a_format_3_bundle_carries_no_crate(packed, tmp_path):
    _, files = _members(packed["new"].path)
    out = _repack(EXAMPLE, tmp_path / "x.tar", lambda p: p.update({facts.CRATE_FILE: files[CRATE]}))
    rep = verify_archive(out, level="static")
    problems = [(p.file, p.message) for t in rep.tiers for p in t.problems]
    assert rep.exit_code == 1
    assert problems == [(CRATE, "a payload file the packer does not write for these records (not verified by "
                                "anything)")], problems


def test_a_candidate_bundle_carries_a_crate_of_its_candidates(tmp_path):
    from kbrepro.bundle import candidates as bc

    src = ROOT / "examples" / "candidates-quick-20261201T153437.tar"
    top, files = _members(src)
    inputs = {k[len("data/"):]: v for k, v in files.items() if k.startswith("data/")
              and k.split("/")[1] in ("inputs", "results", "provenance") and k != "data/inputs/claims.yaml"}
    bag, meta, _, _ = bc.build_payload(inputs, name=top)
    out = tmp_path / "c.tar"
    pack.write_archive(bag, out)
    assert verify_archive(out, level="static").verdict == "PASS"
    doc = json.loads(bag.payload[facts.CRATE_FILE])
    study = _entity(doc, "#study")
    assert study["name"] == "kernelbench-candidates"
    assert all(c["name"] in study["description"] for c in meta["candidates"])
    assert {"@id": meta["candidates"][0]["file"]} in _entity(doc, "#run")["object"]
    # the crate is refused when edited here too
    forged = tmp_path / "f.tar"
    edit = _crate_edit(lambda d: _entity(d, "#study").update(name="x"))
    payload = dict(bag.payload)
    edit(payload)
    pack.write_archive(dataclasses.replace(bag, payload=payload, summary=b""), forged)
    rep = verify_archive(forged, level="static")
    assert rep.exit_code == 1 and any("RO-Crate" in p.message for t in rep.tiers for p in t.problems)


def test_the_crate_does_not_depend_on_when_or_where_it_is_packed(monkeypatch):
    meta, docs, payload = _example_inputs()
    a = crate.render(facts.bundle_facts(meta, docs, payload))
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    import time

    time.tzset()
    try:
        assert crate.render(facts.bundle_facts(meta, docs, payload)) == a
    finally:
        monkeypatch.undo()
        time.tzset()
    assert a == jsonio.dumps(crate.expected(facts.bundle_facts(meta, docs, payload))).encode()
