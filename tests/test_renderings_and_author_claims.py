"""Issue 12, after a red-team pass: the renderings/ folder (outside the digest) held to the
packer's exact form and, with --check-renderings, to the pixels its verified data give; no
renderings in candidate bundles; the author's own claims marked in REPORT.md and summary.txt;
--show-report prints the bytes it verified; recorded claims of a shape the evaluator never
writes are a named failure, not a crash."""
from __future__ import annotations

import json
import shutil
import struct
import zlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import kernelbench_from_example
from corpus import make_corpus as mc
from kbrepro import verify_bundle
from kbrepro.bundle import archive as arc
from kbrepro.bundle import candidates as bc
from kbrepro.bundle import plots
from kbrepro.bundle.verify.checklist import verify_archive
from kbrepro.harness import jsonio

ROOT = Path(__file__).resolve().parent.parent
(FULL,) = (ROOT / "examples").glob("pointwise-fusion-ftz-full-*.tar")
(CAND,) = (ROOT / "examples").glob("candidates-full-*.tar")


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _png(w: int, h: int, rows: bytes | None = None, colour: int = 6, extra: bytes = b"") -> bytes:
    rows = rows if rows is not None else b"".join(b"\x00" + b"\xff" * (w * 4) for _ in range(h))
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, colour, 0, 0, 0)) + extra
            + _chunk(b"IDAT", zlib.compress(rows)) + _chunk(b"IEND", b""))


def test_png_problem_accepts_the_packers_pngs_and_refuses_what_it_never_writes():
    files = arc.read_archive(FULL).files
    real = [v for k, v in files.items() if k.startswith("renderings/") and k.endswith(".png")]
    assert real and all(plots.png_problem(p) is None for p in real)
    assert plots.png_problem(_png(4, 3)) is None
    good = real[0]
    flipped = bytearray(good)
    flipped[60] ^= 1  # inside the first IDAT: its CRC no longer matches
    cases = {
        "CRC": bytes(flipped),
        "after the IEND": good + b"<script>alert(1)</script>",
        "not within": _png(1600, 2 ** 31 - 1, rows=b""),  # a viewer-side bomb: nothing is inflated
        "0 x 0": _png(0, 0, rows=b""),
        "other than pHYs and IDAT": _png(4, 3, extra=_chunk(b"tEXt", b"Comment\x00all claims hold")),
        "not the 51 bytes": _png(4, 3, rows=b"\x00" * 10),
        "unknown filter": _png(4, 3, rows=b"".join(b"\x09" + b"\xff" * 16 for _ in range(3))),
        "8-bit RGB": _png(4, 3, colour=3),
        "signature": b"GIF89a" + good[6:],
        "larger than": good + b"\x00" * (plots.MAX_PNG_BYTES + 1),
    }
    for fragment, png in cases.items():
        why = plots.png_problem(png)
        assert why is not None and fragment in why, (fragment, why)


def _forge(files: dict, pngs: dict, renderer: dict) -> dict:
    """``files`` with renderings/ replaced by ``pngs`` and the renderings.json a forger writes
    for them (the exact form the packer writes, with the verified data's sha256)."""
    out = {k: v for k, v in files.items() if not k.startswith("renderings/")}
    for n, png in pngs.items():
        out[f"renderings/{n}.png"] = png
    data = {n: files[f"data/plots/{n}.json"] for n in pngs}
    out["renderings/renderings.json"] = plots.renderings_doc(pngs, data, renderer)
    return out


@pytest.fixture(scope="module")
def drawn():
    """The full example's figures drawn here from their verified data, and a forged C10
    figure: C10 fails, the forged picture shows every comparison holding."""
    pytest.importorskip("matplotlib")
    g = mc.load_good(FULL)
    figs = {k[len("data/plots/"):-5]: jsonio.loads_strict(v, k) for k, v in g.files.items()
            if k.startswith("data/plots/")}
    pngs = {n: plots.render(n, d) for n, d in figs.items()}
    c10 = json.loads(json.dumps(figs["claim_C10"]))
    assert {it["verdict"] for it in c10["items"]} != {"holds"}
    for it in c10["items"]:
        it["verdict"] = "holds"
    c10["title"] = c10["title"].replace("fails", "holds")
    return g, pngs, plots.render("claim_C10", c10)


def _verify(tmp_path: Path, g, files: dict, name: str, **kw):
    out = tmp_path / f"{name}.tar"
    out.write_bytes(mc.repack(g, files))
    return verify_archive(out, level="static", **kw)


@pytest.mark.slow
def test_a_forged_picture_passes_the_structure_checks_and_fails_when_drawn_again(tmp_path, drawn):
    g, pngs, forged = drawn
    here = plots.renderer_versions()
    honest = _verify(tmp_path, g, _forge(g.files, pngs, here), "honest", check_renderings=True)
    assert honest.verdict == "PASS", [t.problems for t in honest.tiers]
    assert honest.digest == verify_archive(FULL, level="fast").digest  # the renderings are outside the digest
    assert any("byte-identical" in n for t in honest.tiers for n in t.notes)
    bad = _forge(g.files, {**pngs, "claim_C10": forged}, here)
    static = _verify(tmp_path, g, bad, "forged")
    assert static.verdict == "PASS"  # outside the digest, a valid PNG: only its pixels lie
    assert any("only with --check-renderings" in n for t in static.tiers for n in t.notes)
    checked = _verify(tmp_path, g, bad, "forged2", check_renderings=True)
    assert checked.verdict == "FAIL"
    msgs = [(p.file, p.message) for t in checked.tiers for p in t.problems]
    assert msgs == [("renderings/claim_C10.png", msgs[0][1])] and "does not show the verified data" in msgs[0][1]
    # another renderer's versions draw other bytes: nothing is compared, and the result says so
    other = _verify(tmp_path, g, _forge(g.files, pngs, {**here, "matplotlib": "3.0.0"}), "other",
                    check_renderings=True)
    assert other.verdict == "PARTIAL" and any("matplotlib 3.0.0" in r for r in other.partial)


@pytest.mark.slow
def test_every_figure_has_its_rendering_and_renderings_json_is_the_packers(tmp_path, drawn):
    g, pngs, _ = drawn
    here = plots.renderer_versions()
    dropped = {n: p for n, p in pngs.items() if n not in ("claim_C10", "claim_C11")}
    r = _verify(tmp_path, g, _forge(g.files, dropped, here), "dropped")
    assert r.verdict == "FAIL"
    assert {p.file for t in r.tiers for p in t.problems} == {"renderings/claim_C10.png", "renderings/claim_C11.png"}
    files = _forge(g.files, pngs, here)
    doc = json.loads(files["renderings/renderings.json"])
    doc["verified"] = "PASS: every claim holds"
    files["renderings/renderings.json"] = jsonio.dumps(doc).encode()
    r = _verify(tmp_path, g, files, "extra_field")
    assert r.verdict == "FAIL" and "exact form" in str([p.message for t in r.tiers for p in t.problems])


def test_a_candidate_bundle_carries_no_renderings(tmp_path):
    import dataclasses

    from kbrepro.bundle import pack

    files = arc.read_archive(CAND).files
    top = json.loads(files["data/bundle.json"])["name"]
    info = [tuple(line.split(": ", 1)) for line in files["bag-info.txt"].decode().splitlines()
            if not line.startswith("Payload-Oxum")]
    bag = pack.make_bag(top, {p[5:]: v for p, v in files.items() if p.startswith("data/")}, info,
                        renderings={"claim_K1d.png": _png(8, 8), "renderings.json": b'{"figures": []}'})
    bag = dataclasses.replace(bag, summary=files["summary.txt"])
    out = tmp_path / "cand.tar"
    out.write_bytes(pack.tar_bytes(bag))
    r = verify_archive(out, level="static")
    assert r.verdict == "FAIL"
    assert {p.file for t in r.tiers for p in t.problems} == {"renderings/claim_K1d.png",
                                                                 "renderings/renderings.json"}


def test_show_report_prints_the_bytes_it_verified_not_a_second_read(tmp_path, monkeypatch):
    """The archive is swapped right after verification (another process, a sync client):
    --show-report still prints what was verified, with no escape sequence reaching the
    terminal."""
    from kbrepro.bundle.verify import checklist as verify_mod

    arch = tmp_path / "b.tar"
    shutil.copy(FULL, arch)
    real = verify_mod.verify_archive

    def swapped(path, **kw):
        rep = real(path, **kw)
        Path(path).write_bytes(b"\x1b]0;forged\x07" * 100)
        return rep

    monkeypatch.setattr(verify_mod, "verify_archive", swapped)
    res = CliRunner().invoke(verify_bundle.main, [str(arch), "--level", "static", "--show-report"])
    assert res.exit_code == 0, res.output
    assert "Claims" in res.output and "C10" in res.output and "\x1b" not in res.output and "forged" not in res.output
    from kbrepro.cli.render import terminal_text

    assert terminal_text("a\x1b]0;x\x07b\r\n\u202ec".encode()) == "a\ufffd]0;x\ufffdb\ufffd\n\ufffdc"


def test_recorded_claims_of_a_shape_the_evaluator_never_writes_fail_by_name(tmp_path):
    g = mc.load_good(FULL)
    doc = json.loads(g.files["data/claims.json"])
    it = next(c for c in doc["claims"] if c["id"] == "C10")["checks"][0]["items"][0]
    del it["block"]
    files = {**g.files, "data/claims.json": jsonio.dumps(doc).encode()}
    r = _verify(tmp_path, g, files, "keyerror")
    assert r.verdict == "FAIL" and r.exit_code == 1
    assert any(p.file == "data/claims.json" for t in r.tiers for p in t.problems)


EXTRA_STUDY_CLAIM = '''
  - id: C10b
    sentence: "The fused tail's speed-up over the eager tail lies in the post's range of 2.8x to 5.5x."
    checks:
      - kind: paired_ratio
        blocks: "timings.blocks[?kind=='study' && scope=='tail']"
        numerators: [cupy_default, nvrtc_ftz_false, nvrtc_ftz_true]
        denominator: eager_tail
        test: speedup_within
        range: [0.001, 1000]
'''


def test_the_authors_own_study_claim_is_marked_in_the_report_and_the_summary(tmp_path):
    """C10b repeats the failing C10's sentence with a range that always holds: REPORT.md and
    summary.txt (which --show-report prints and a post pastes) say it is the author's."""
    from kbrepro.bundle.make import make_from_results

    own = (ROOT / "studies/pointwise_fusion/claims.yaml").read_text()
    spec = tmp_path / "claims.yaml"
    spec.write_text(own.rstrip("\n") + "\n" + EXTRA_STUDY_CLAIM)
    out = tmp_path / "b.tar"
    make_from_results(ROOT / "examples/results-full-h200", out, kernelbench=str(kernelbench_from_example(tmp_path)),
                      claims_path=str(spec), with_plots=False)
    files = arc.read_archive(out).files
    report = files["data/REPORT.md"].decode()
    row = next(line for line in report.splitlines() if line.startswith("| C10b |"))
    assert "the author's own claim" in row and "0.001x to 1000x" in row
    assert "**1 of these claims are the author's own**" in report
    assert not any("author's own" in line for line in report.splitlines() if line.startswith("| C10 |"))
    summary = files["summary.txt"].decode()
    assert "the author's own claims: C10b" in summary and "PARTIAL" in summary
    r = verify_archive(out, level="static")
    assert r.verdict == "PARTIAL", [t.problems for t in r.tiers]


def test_the_authors_own_candidate_claim_is_marked_too(tmp_path):
    files = arc.read_archive(CAND).files
    d = tmp_path / "res"
    for p, v in files.items():
        rel = p[len("data/"):]
        if p.startswith("data/") and rel.startswith(("inputs/", "results/", "provenance/")) and \
                rel != "inputs/claims.yaml":
            (d / rel).parent.mkdir(parents=True, exist_ok=True)
            (d / rel).write_bytes(v)
    spec = json.loads(files["data/inputs/claims.yaml"])
    k1d = next(c for c in spec["claims"] if c["id"] == "K1d")
    extra = {"schema": spec["schema"], "schema_version": spec["schema_version"], "study": spec["study"],
             "bootstrap": spec["bootstrap"],
             "claims": [{"id": "X1", "sentence": k1d["sentence"],
                         "checks": [{**k1d["checks"][0], "test": "speedup_within", "range": [0.001, 1000]}]}]}
    (tmp_path / "extra.json").write_text(json.dumps(extra))
    out = tmp_path / "c.tar"
    bc.pack_results(d, out, claims_path=str(tmp_path / "extra.json"), allow_failing=True)
    got = arc.read_archive(out).files
    row = next(line for line in got["data/REPORT.md"].decode().splitlines() if line.startswith("| X1 |"))
    assert "the author's own claim" in row and "**holds**" in row
    assert "the author's own claims: X1" in got["summary.txt"].decode()
    r = verify_archive(out, level="static")
    assert r.verdict == "PARTIAL", [t.problems for t in r.tiers]


def test_level_fast_says_what_it_does_not_check(tmp_path):
    r = verify_archive(FULL, level="fast")
    assert r.verdict == "PASS"
    assert any("summary.txt and renderings/ are not checked" in n for t in r.tiers for n in t.notes)
