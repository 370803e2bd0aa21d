"""The replay matrix: replay reports of one bundle from several machines merged into one table
(GPU kind x claim, recorded against replayed), Markdown and JSON; reports read as hostile
input (one-line errors with the documented exit codes)."""
from __future__ import annotations

import json
import random
import tarfile
from pathlib import Path

import pytest

from kbrepro.bundle import candidates as bc
from kbrepro.bundle import matrix
from kbrepro.bundle.verify.checklist import verify_archive
from kbrepro.errors import UnreadableInputError, UsageError
from kbrepro.harness import jsonio
from test_cli_misuse import cli, one_error
from test_shard import LN, SIZES, _kb


@pytest.fixture(scope="module")
def replay_report(tmp_path_factory):
    """A real replay report of a candidate bundle (tier 6 run with the candidates' run replaced
    by the bundle's own results: the comparison and the report are what is tested, not the GPU)."""
    import torch

    from kbrepro.bundle.verify import candidate as vc

    d = tmp_path_factory.mktemp("matrix")
    kb = _kb(d)
    (d / "ln.py").write_bytes(LN)
    res = bc.run_candidates([(d / "ln.py", "1/40")], profile="quick", kernelbench=str(kb), results_dir=d / "res",
                            sizes=SIZES, device="cpu")
    made = bc.pack_results(res, d / "b.tar")
    with tarfile.open(made.path) as tf:
        doc = json.loads(next(tf.extractfile(x).read() for x in tf if x.name.endswith("data/results/candidates.json")))
        env = json.loads(next(tf.extractfile(x).read() for x in tf if x.name.endswith("data/results/environment.json")))

    def fake_run(items, *, results_dir, **kw):
        calls.append(kw)
        (Path(results_dir) / "results").mkdir(parents=True)
        (Path(results_dir) / "results" / "candidates.json").write_bytes(jsonio.dumps(doc).encode())
        here = json.loads(json.dumps(env))
        here["fields"]["gpu_name"] = {"value": "NVIDIA H200", "source": "test"}
        (Path(results_dir) / "results" / "environment.json").write_bytes(jsonio.dumps(here).encode())
        return Path(results_dir)

    calls: list = []
    mp = pytest.MonkeyPatch()
    mp.setattr(vc.bc, "run_candidates", fake_run)
    mp.setattr(torch.cuda, "is_available", lambda: True)
    try:
        rep = verify_archive(made.path, level="replay", trust=True)
    finally:
        mp.undo()
    # the replay runs the candidates at the sizes they were packed with, under their packed names
    assert [(c["sizes"], c["names"], c["profile"]) for c in calls] == [(SIZES, ["ln"], "quick")]
    out = rep.to_doc()
    for t in out["tiers"]:
        t["details"].pop("recomputed", None)
    return json.loads(jsonio.dumps(out))


def test_a_candidate_replay_report_lists_every_claim_and_the_gpu_it_ran_on(replay_report):
    t6 = next(t for t in replay_report["tiers"] if t["number"] == 6)
    ids = [c["id"] for c in t6["details"]["claims"]]
    assert ids and ids[0] == "K1a" and all(c["recorded"] == c["replayed"] for c in t6["details"]["claims"])
    gpu = next(r for r in t6["details"]["environment"] if r["field"] == "gpu_name")
    assert gpu["here"] == "NVIDIA H200" and gpu["recorded"] is None and not gpu["same"]


def _as(report: dict, gpu: str, flip: str | None = None, source_driver: str = "580.1", edited: bool = False) -> bytes:
    """The report as another machine would write it: its GPU, its driver, and a claim flipped
    (its replay tier and verdict then FAIL, as the verifier writes them; ``edited``: left as
    they were, as a hand-edited report would)."""
    r = json.loads(json.dumps(report))
    t6 = next(t for t in r["tiers"] if t["number"] == 6)
    if flip and not edited:
        t6["status"], r["verdict"] = "FAIL", "FAIL"
    for row in t6["details"]["environment"]:
        if row["field"] == "gpu_name":
            row["here"] = gpu
        if row["field"] == "driver_version":
            row["here"] = source_driver
    for c in t6["details"]["claims"]:
        if c["id"] == flip:
            c["replayed"] = "fails"
    return jsonio.dumps(r).encode()


def test_the_matrix_is_one_table_gpu_kind_by_claim_marking_what_changed(replay_report):
    raws = [("h200-a.json", _as(replay_report, "NVIDIA H200")), ("h200-b.json", _as(replay_report, "NVIDIA H200")),
            ("a100.json", _as(replay_report, "NVIDIA A100-SXM4-80GB", flip="K1b"))]
    reps = [matrix.parse_report(raw, src) for src, raw in raws]
    doc = matrix.build(reps)
    for seed in range(3):  # pure: the order of the reports does not matter
        shuffled = reps[:]
        random.Random(seed).shuffle(shuffled)
        assert matrix.build(shuffled) == doc
    (b,) = doc["bundles"]
    assert [g["kind"] for g in b["gpus"]] == ["NVIDIA A100-SXM4-80GB", "NVIDIA H200"]
    assert [len(g["reports"]) for g in b["gpus"]] == [1, 2]
    k1b = next(c for c in b["claims"] if c["id"] == "K1b")
    assert k1b["recorded"] == "holds" and k1b["replayed"] == {"NVIDIA A100-SXM4-80GB": ["fails"],
                                                              "NVIDIA H200": ["holds", "holds"]}
    md = matrix.render(doc)
    row = next(line for line in md.splitlines() if line.startswith("| K1b |"))
    assert row.endswith("| holds | **fails** | holds x2 |"), row
    assert "| claim | sentence | recorded | NVIDIA A100-SXM4-80GB | NVIDIA H200 |" in md
    assert f"Bundle digest `{replay_report['digest']}`" in md


def test_strings_from_a_report_cannot_inject_markdown(replay_report):
    rep = matrix.parse_report(_as(replay_report, "GPU <script>x</script> | [link](http://e.x)"), "r.json")
    md = matrix.render(matrix.build([rep]))
    assert "<script>" not in md and "](" not in md and "http://" not in md  # no tag, link or autolink
    assert r"GPU \?script\?x\?\/script\? \? \(link\)\(http\:\/\/e\.x\)" in md  # punctuation escaped: literal text


@pytest.mark.parametrize("edit,exc,fragment", [
    (lambda r: b"{not json", UnreadableInputError, "not strict JSON"),
    (lambda r: b'{"schema": "kbrepro/candidates"}', UnreadableInputError, "is not a verification report"),
    (lambda r: jsonio.dumps({**r, "verdict": "GREAT"}).encode(), UnreadableInputError, "not a valid verification"),
    (lambda r: jsonio.dumps({**r, "level": "static", "tiers": [t for t in r["tiers"] if t["number"] < 6]}).encode(),
     UsageError, "holds no replay"),
    (lambda r: _as(r, "X", flip=None).replace(b'"replayed": "holds"', b'"replayed": "great"', 1), UnreadableInputError,
     "verdict is not one of"),
])
def test_a_hostile_report_is_one_clear_error(replay_report, edit, exc, fragment):
    with pytest.raises(exc, match=fragment):
        matrix.parse_report(edit(replay_report), "r.json")


def test_the_command_writes_markdown_and_json_and_refuses_bad_input(replay_report, tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_bytes(_as(replay_report, "NVIDIA H200"))
    b.write_bytes(_as(replay_report, "NVIDIA L4", flip="K1a"))
    res = cli("matrix", a, b, "--out", tmp_path / "m.md", "--json", tmp_path / "m.json")
    assert res.code == 0, res.err
    assert "2 GPU kind(s), 2 report(s)" in res.out
    md = (tmp_path / "m.md").read_text()
    assert "| NVIDIA H200 | NVIDIA L4 |" in md
    doc = json.loads((tmp_path / "m.json").read_text())
    assert doc["schema"] == "kbrepro/replay-matrix" and doc["bundles"][0]["gpus"][1]["kind"] == "NVIDIA L4"
    assert str(tmp_path) not in json.dumps(doc)  # sources by file name, never by folder
    printed = cli("matrix", a)
    assert printed.code == 0 and printed.out.startswith("# Replay matrix")
    (tmp_path / "bad.json").write_text("[1, 2")
    one_error(cli("matrix", a, tmp_path / "bad.json"), 3, "bad.json", "not strict JSON")
    one_error(cli("matrix"), 2, "no report given")
    one_error(cli("matrix", a, "--out", a), 2, "one of this command's inputs")
    one_error(cli("matrix", tmp_path / "missing.json"), 3, "missing.json")
    static = json.loads(a.read_bytes())
    static["tiers"] = [t for t in static["tiers"] if t["number"] < 6]
    (tmp_path / "static.json").write_bytes(jsonio.dumps(static).encode())
    one_error(cli("matrix", tmp_path / "static.json"), 2, "holds no replay")


def test_emphasis_and_entities_from_a_report_are_escaped(replay_report):
    # '**holds**' in a GPU name would look like the matrix's own marker of a changed verdict
    rep = matrix.parse_report(_as(replay_report, "**holds** _x_ ~~y~~ ^z^ &#124;"), "r.json")
    md = matrix.render(matrix.build([rep]))
    line = next(x for x in md.splitlines() if x.startswith("- "))
    assert line.startswith(r"- \*\*holds\*\* \_x\_ \~\~y\~\~ \^z\^ \&\#124\;: 1 replay(s)"), line
    assert "**holds**" not in md and "&#124;" not in md


def _flipped(report: dict, status: str, verdict: str) -> bytes:
    r = json.loads(_as(report, "NVIDIA H200", flip="K1b", edited=True))
    r["verdict"] = verdict
    next(t for t in r["tiers"] if t["number"] == 6)["status"] = status
    return jsonio.dumps(r).encode()


def test_a_report_whose_verdicts_contradict_its_claims_is_refused(replay_report):
    # the verifier fails its replay tier on a holds/fails flip: a passing tier with one was edited
    with pytest.raises(UnreadableInputError, match="flips between holds and fails"):
        matrix.parse_report(_as(replay_report, "NVIDIA H200", flip="K1b", edited=True), "r.json")
    with pytest.raises(UnreadableInputError, match="its verdict (is )?PASS"):
        matrix.parse_report(_flipped(replay_report, "FAIL", "PASS"), "r.json")
    ok = matrix.parse_report(_flipped(replay_report, "FAIL", "FAIL"), "r.json")
    assert ("K1b", "holds", "fails") in [(c[0], c[2], c[3]) for c in ok.claims]


def test_one_replay_counts_once(replay_report, tmp_path):
    a = tmp_path / "a.json"
    a.write_bytes(_as(replay_report, "NVIDIA H200"))
    (tmp_path / "copy.json").write_bytes(a.read_bytes())
    one_error(cli("matrix", a, a), 2, "the same report as")
    one_error(cli("matrix", a, tmp_path / "copy.json"), 2, "the same report as")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.json").write_bytes(_as(replay_report, "NVIDIA H200", source_driver="580.2"))
    one_error(cli("matrix", a, tmp_path / "sub" / "a.json"), 2, "have one file name")
    assert not (tmp_path / "m.md").exists()
