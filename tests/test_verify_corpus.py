"""The named bad-bundle corpus (tests/corpus/make_corpus.py) against the real verifier CLI.

The good bundle is the single ``examples/*-full-*.tar`` (or, while only the development
placeholder exists, ``examples/*-full.tar``). The corpus is built from it into a temporary
folder; every bad archive is verified with ``python verify_bundle.py ARCHIVE --level static
--json REPORT`` in a subprocess (cwd the project root, TMPDIR a fresh folder that must be
empty again afterwards), and one case per failure class again in-process through click's
``CliRunner``. Each case must give its exact exit code, fail in exactly its tier (every other
tier run passes or is skipped), and print its message fragment naming the right file.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from kbrepro import schemas
from corpus import make_corpus as mc

pytestmark = pytest.mark.slow  # run by .ci/run: python -m pytest -q --slow -m slow

ROOT = Path(__file__).resolve().parent.parent
VERIFY = ROOT / "verify_bundle.py"
TIER_ORDER = ("archive", "manifest", "documents", "provenance", "claims", "replay")
ESCAPES = ("escape_dotdot", "escape_absolute", "symlink_escape", "hardlink_outside")
ESCAPE_NAMES = ("escape.json", "outside")

# Every case fails in exactly its intended tier (DESIGN.md section 6). These two tables once
# recorded where the verifier departed from that; they are empty and must stay so.
TIER_DEVIATIONS: dict = {}
NO_REPORT: tuple = ()
UNREADABLE = ("not_a_tar", "truncated")


def find_good() -> Path | None:
    found = mc.find_good_bundles(ROOT)
    if len(found) > 1:
        pytest.fail(f"more than one good bundle in examples/: {[p.name for p in found]}; keep one *-full-*.tar")
    return found[0] if found else None


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str
    report: dict | None
    tmpdir: Path
    cwd: Path


def run_cli(archive: Path, base: Path, tag: str, *args: str, cwd: Path | None = None) -> Run:
    """``verify_bundle.py ARCHIVE --level static --json REPORT`` (``args`` override), run in
    a subprocess with TMPDIR a fresh folder under ``base``."""
    tmpdir = base / f"tmpdir-{tag}"
    tmpdir.mkdir()
    report = base / f"report-{tag}.json"
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    argv = [sys.executable, str(VERIFY), str(archive), *(args or ("--level", "static")), "--json", str(report)]
    p = subprocess.run(argv, cwd=cwd or ROOT, env=env, capture_output=True, text=True, timeout=120)
    doc = json.loads(report.read_text(encoding="utf-8")) if report.exists() else None
    return Run(p.returncode, p.stdout, p.stderr, doc, tmpdir, cwd or ROOT)


def tag_manifest_digest(archive: Path) -> str:
    with tarfile.open(archive) as tf:
        m = next(m for m in tf if m.name.endswith("/tagmanifest-sha256.txt"))
        return hashlib.sha256(tf.extractfile(m).read()).hexdigest()


def content_digest(archive: Path) -> str:
    """The digest an honest packer would give this archive's payload (tag files recomputed)."""
    with tarfile.open(archive) as tf:
        top = tf.getmembers()[0].name.split("/")[0]
        files = {m.name.split("/", 1)[1]: tf.extractfile(m).read() for m in tf if m.isreg() and "/" in m.name}
    from kbrepro.bundle import pack

    info = [tuple(line.split(": ", 1)) for line in files["bag-info.txt"].decode().splitlines()
            if not line.startswith("Payload-Oxum")]
    payload = {p[len("data/"):]: b for p, b in files.items() if p.startswith("data/")}
    return pack.make_bag(top, payload, info).digest()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    good = find_good()
    if good is None:
        pytest.skip("no good bundle examples/*-full-*.tar: build one with make_bundle.py (on a GPU) "
                    "or place the published one there")
    base = tmp_path_factory.mktemp("verify-corpus")
    outdir = base / "corpus"
    cases = {c.name: c for c in mc.build_corpus(good, outdir)}
    runs_dir = base / "runs"
    runs_dir.mkdir()
    work = [(name, outdir / c.file, None) for name, c in cases.items()]
    for name in ESCAPES:  # again, from a fresh empty working folder
        cwd = runs_dir / f"cwd-{name}"
        cwd.mkdir()
        work.append((f"{name}@cwd", outdir / cases[name].file, cwd))
    work.append(("good", good, None))
    with ThreadPoolExecutor(max_workers=max(2, min(8, os.cpu_count() or 2))) as ex:
        futures = {tag: ex.submit(run_cli, path, runs_dir, tag, cwd=cwd) for tag, path, cwd in work}
        runs = {tag: f.result() for tag, f in futures.items()}
    return {"good": good, "base": base, "outdir": outdir, "cases": cases, "runs": runs, "runs_dir": runs_dir}


# ---------------------------------------------------------------------------------- corpus


def test_corpus_json_lists_every_case_and_builds_deterministically(corpus, tmp_path):
    doc = json.loads((corpus["outdir"] / mc.CORPUS_JSON).read_text(encoding="utf-8"))
    assert [c["name"] for c in doc["cases"]] == list(mc.CASE_NAMES)
    for c in doc["cases"]:
        assert set(c) >= {"file", "failure_class", "exit_code", "tier", "fragment"}
        assert (corpus["outdir"] / c["file"]).is_file()
        assert c["exit_code"] in (1, 3, 5) and c["tier"] in TIER_ORDER[:5]
    assert doc["good"]["digest"] == tag_manifest_digest(corpus["good"])
    assert mc.load_corpus(corpus["outdir"]) == list(corpus["cases"].values())
    again = mc.build_corpus(corpus["good"], tmp_path / "again")
    for c in again:
        assert (tmp_path / "again" / c.file).read_bytes() == (corpus["outdir"] / c.file).read_bytes(), c.name
    # every bad archive differs from the good one, and from every other bad archive
    blobs = [(corpus["outdir"] / c.file).read_bytes() for c in again]
    assert len({hashlib.sha256(b).hexdigest() for b in blobs}) == len(blobs)
    assert corpus["good"].read_bytes() not in blobs


def test_corpus_script_cli(corpus, tmp_path):
    out = tmp_path / "cli"
    script = str(ROOT / "tests" / "corpus" / "make_corpus.py")
    p = subprocess.run([sys.executable, script, str(corpus["good"]), str(out)], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert f"{len(mc.CASE_NAMES)} cases" in p.stdout
    assert sorted(x.name for x in out.iterdir()) == sorted([c.file for c in mc.load_corpus(out)] + [mc.CORPUS_JSON])
    assert [c.name for c in mc.load_corpus(out)] == list(mc.CASE_NAMES)
    bad = subprocess.run([sys.executable, script, str(tmp_path / "nope.tar"), str(tmp_path / "x")], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "error:" in bad.stderr


def test_good_bundle_passes_static(corpus):
    r = corpus["runs"]["good"]
    assert r.code == 0, r.stdout + r.stderr
    assert schemas.validate(r.report, "verification-report") == []
    assert [(t["name"], t["status"]) for t in r.report["tiers"]] == [(n, "PASS") for n in TIER_ORDER[:5]]
    assert r.report["digest"] == tag_manifest_digest(corpus["good"]) == content_digest(corpus["good"])
    assert r.stdout.rstrip().splitlines()[-1].startswith("VERDICT PASS (exit 0)")


def _expected(case: mc.Case) -> tuple[str, str, str | None]:
    return TIER_DEVIATIONS.get(case.name, (case.tier, case.fragment, case.problem_file))


def _check_report(case: mc.Case, r: Run, archive: Path) -> None:
    tier, fragment, problem_file = _expected(case)
    doc = r.report
    assert doc is not None, f"{case.name}: no JSON report written\n{r.stdout}{r.stderr}"
    assert schemas.validate(doc, "verification-report") == []
    if case.exit_code == 5:  # not a plain PASS: the bundle brings definitions the verifier does not know
        assert doc["exit_code"] == 5 and doc["verdict"] == "PARTIAL"
        assert [t["name"] for t in doc["tiers"]] == list(TIER_ORDER[:5])
        assert all(t["status"] == "PASS" for t in doc["tiers"]), [t["problems"] for t in doc["tiers"]]
        assert any(fragment in p for p in doc["partial_reasons"]), doc["partial_reasons"]
        assert fragment in r.stdout and "not a plain PASS" in r.stdout
        assert r.stdout.rstrip().splitlines()[-1].startswith("VERDICT PARTIAL (exit 5)")
        return
    assert doc["exit_code"] == case.exit_code and doc["verdict"] == "FAIL"
    names = [t["name"] for t in doc["tiers"]]
    assert names == list(TIER_ORDER[: len(names)])
    assert [t["number"] for t in doc["tiers"]] == list(range(1, len(names) + 1))
    failing = [t["name"] for t in doc["tiers"] if t["status"] == "FAIL"]
    assert failing == [tier], f"{case.name}: failing tiers {failing}, expected exactly [{tier!r}]"
    i = names.index(tier)
    assert all(t["status"] == "PASS" for t in doc["tiers"][:i])
    assert all(t["status"] in ("PASS", "SKIP") for t in doc["tiers"][i + 1:])
    if case.exit_code == 1:  # verification failure: every static tier is accounted for
        assert names == list(TIER_ORDER[:5])
    else:  # exit 3: the verifier stops at the tier that found the archive unreadable/unknown
        assert names[-1] == tier
    problems = doc["tiers"][i]["problems"]
    assert any(fragment in p["message"] for p in problems), (fragment, problems)
    if problem_file is not None:
        assert any(p["file"] == problem_file and fragment in p["message"] for p in problems), (problem_file, problems)
    # the human lines say the same: a numbered FAIL line for the tier, the fragment, the verdict
    assert f"{i + 1} {tier:<11} FAIL" in r.stdout
    assert fragment in r.stdout
    assert r.stdout.rstrip().splitlines()[-1] == f"VERDICT FAIL (exit {case.exit_code})"
    if tier == "archive":
        assert doc["digest"] is None
    else:
        assert doc["digest"] == tag_manifest_digest(archive)


#: cases that edit only the renderings/ folder, which no manifest lists (issue 12)
OUTSIDE_DIGEST = {"rt_plot_not_png"}


@pytest.mark.parametrize("name", mc.CASE_NAMES)
def test_case_via_subprocess(corpus, name):
    case = corpus["cases"][name]
    archive = corpus["outdir"] / case.file
    r = corpus["runs"][name]
    good_digest = tag_manifest_digest(corpus["good"])
    assert r.code == case.exit_code, f"{name}: exit {r.code}, expected {case.exit_code}\n{r.stdout}{r.stderr}"
    assert list(r.tmpdir.iterdir()) == [], f"{name}: the verifier left files in TMPDIR"
    if name in NO_REPORT:
        assert r.report is None and r.stdout == ""
        err = r.stderr.strip().splitlines()
        assert err[0].startswith("error: ") and case.fragment in err[0]
        assert err[1].startswith("  -> ")  # what to do next
        return
    _check_report(case, r, archive)
    if name in OUTSIDE_DIGEST:
        # a rendering swapped: outside every manifest, so the digest is the good one's, and the
        # verifier still fails the bundle (the PNG is not what renderings.json describes)
        assert r.report["digest"] == good_digest
    elif case.failure_class != "archive" and case.failure_class != "integrity":
        # manifests recomputed: the manifest tier passes, and the digest gives the forgery away
        assert r.report["digest"] != good_digest


@pytest.mark.parametrize("name", ["payload_byte_flipped", "extra_file", "missing_file", "manifest_edited_to_match"])
def test_integrity_cases_cannot_pass_under_the_quoted_digest(corpus, name, tmp_path):
    """The tag manifest is untouched in these cases, so the digest the verifier reports is
    the good bundle's (it is by definition the sha256 of tagmanifest-sha256.txt); but the
    content's own digest differs, and the quoted digest does not let the archive pass."""
    archive = corpus["outdir"] / corpus["cases"][name].file
    good_digest = tag_manifest_digest(corpus["good"])
    assert corpus["runs"][name].report["digest"] == good_digest
    assert content_digest(archive) != good_digest
    r = run_cli(archive, tmp_path, "expect", "--level", "fast", "--expect-digest", good_digest)
    assert r.code == 1
    assert [(t["name"], t["status"]) for t in r.report["tiers"]] == [("archive", "PASS"), ("manifest", "FAIL")]


@pytest.mark.parametrize("name", ESCAPES)
def test_escape_cases_write_nothing_outside(corpus, name):
    r = corpus["runs"][f"{name}@cwd"]
    case = corpus["cases"][name]
    assert r.code == 3, r.stdout + r.stderr
    _check_report(case, r, corpus["outdir"] / case.file)
    assert list(r.cwd.iterdir()) == [], "the verifier wrote into its working folder"
    assert list(r.tmpdir.iterdir()) == [], "the verifier left files in TMPDIR"
    base, outdir = corpus["base"], corpus["outdir"]
    strays = [p for p in base.rglob("*") if p.name in ESCAPE_NAMES and outdir not in p.parents]
    assert strays == []
    for above in (base.parent, base.parent.parent, ROOT, ROOT.parent):
        assert not any((above / n).exists() for n in ESCAPE_NAMES)
    assert not (Path("/") / "abs" / "escape.json").exists()


@pytest.mark.parametrize("name", ["escape_dotdot", "payload_byte_flipped", "document_nan", "cubin_swapped",
                                  "claims_verdict_forged", "truncated"])
def test_case_via_click_runner(corpus, name, tmp_path, monkeypatch):
    """One case per failure class in-process: same exit code and tier as the subprocess."""
    import tempfile

    from kbrepro import verify_bundle

    monkeypatch.setenv("TMPDIR", str(tmp_path / "t"))
    (tmp_path / "t").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", None)
    made = []
    real_mkdtemp = tempfile.mkdtemp

    def mkdtemp(*a, **k):
        made.append(Path(real_mkdtemp(*a, **k)))
        return str(made[-1])

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    case = corpus["cases"][name]
    report = tmp_path / "report.json"
    res = CliRunner().invoke(verify_bundle.main, [str(corpus["outdir"] / case.file), "--level", "static",
                                                  "--json", str(report)])
    assert res.exit_code == case.exit_code, res.output
    # bundles past the manifest tier are extracted into a folder under TMPDIR, removed afterwards
    # (a payload that fails its manifest is never extracted: nothing after it is judged)
    assert len(made) == (0 if case.failure_class in ("archive", "integrity") else 1)
    assert all(d.parent == tmp_path / "t" and not d.exists() for d in made)
    assert list((tmp_path / "t").iterdir()) == []
    if name in NO_REPORT:
        assert not report.exists() and case.fragment in res.stderr
        return
    doc = json.loads(report.read_text(encoding="utf-8"))
    assert schemas.validate(doc, "verification-report") == []
    tier, fragment, _ = _expected(case)
    assert [t["name"] for t in doc["tiers"] if t["status"] == "FAIL"] == [tier]
    assert fragment in res.stdout
    sub = corpus["runs"][name].report
    assert [(t["name"], t["status"], t["problems"]) for t in doc["tiers"]] == \
        [(t["name"], t["status"], t["problems"]) for t in sub["tiers"]]


# ----------------------------------------------------------------------------- levels, digest


def test_fast_level_stops_after_the_manifest(corpus, tmp_path):
    flipped = run_cli(corpus["outdir"] / "payload_byte_flipped.tar", tmp_path, "fast1", "--level", "fast")
    assert flipped.code == 1
    assert [(t["name"], t["status"]) for t in flipped.report["tiers"]] == [("archive", "PASS"), ("manifest", "FAIL")]
    assert "data/results/correctness.json" in flipped.stdout
    forged = run_cli(corpus["outdir"] / "claims_verdict_forged.tar", tmp_path, "fast2", "--level", "fast")
    assert forged.code == 0, forged.stdout
    assert [(t["name"], t["status"]) for t in forged.report["tiers"]] == [("archive", "PASS"), ("manifest", "PASS")]
    assert forged.stdout.rstrip().splitlines()[-1].startswith("VERDICT PASS (exit 0)")
    assert list(forged.tmpdir.iterdir()) == [] and list(flipped.tmpdir.iterdir()) == []


def test_expect_digest(corpus, tmp_path):
    good = corpus["good"]
    digest = tag_manifest_digest(good)
    wrong = hashlib.sha256(b"not this bundle").hexdigest()
    r = run_cli(good, tmp_path, "wrong", "--level", "fast", "--expect-digest", wrong)
    assert r.code == 1
    man = r.report["tiers"][1]
    assert man["status"] == "FAIL"
    assert any(p["message"].startswith("bundle digest differs from the one you expected: this archive is bundle ") and p["expected"] == wrong
               and p["found"] == digest for p in man["problems"])
    assert "bundle digest differs from the one you expected" in r.stdout
    ok = run_cli(good, tmp_path, "right", "--level", "fast", "--expect-digest", digest.upper())
    assert ok.code == 0, ok.stdout


# ------------------------------------------------ points of the design that once failed


def test_cubin_swap_is_caught_by_provenance(corpus):
    case = corpus["cases"]["cubin_swapped"]
    doc = corpus["runs"]["cubin_swapped"].report
    assert [t["name"] for t in doc["tiers"] if t["status"] == "FAIL"] == [case.tier] == ["provenance"]


@pytest.mark.parametrize("name", UNREADABLE)
def test_unreadable_archive_still_gets_a_report(corpus, name):
    r = corpus["runs"][name]
    assert r.report is not None
    assert [(t["name"], t["status"]) for t in r.report["tiers"]] == [("archive", "FAIL")]


def test_archive_cut_at_a_member_boundary_is_truncated(corpus, tmp_path):
    raw = corpus["good"].read_bytes()
    cut = next(off for _, off, _, _ in mc.member_offsets(raw) if off >= len(raw) // 2)
    archive = tmp_path / "cut_at_boundary.tar"
    archive.write_bytes(raw[:cut])
    r = run_cli(archive, tmp_path, "cut")
    assert r.code == 3, r.stdout + r.stderr
    assert [(t["name"], t["status"]) for t in r.report["tiers"]] == [("archive", "FAIL")]


def test_bag_info_is_held_to_the_packers_bytes_not_only_to_its_keys(tmp_path):
    """Issue 14's red team: a second space after a colon, or a trailing one, re-hashed into
    the tag manifest (a new digest), passed with the right keys in the right order."""
    from corpus import make_corpus as mc
    from kbrepro.bundle.verify.checklist import verify_archive

    g = mc.load_good(mc.find_good_bundles(Path(__file__).resolve().parent.parent)[0])
    for n, edit in enumerate((lambda b: b.replace(b"Bag-Software-Agent: ", b"Bag-Software-Agent:  ", 1),
                              lambda b: b.replace(b"\n", b" \n", 1))):
        files = dict(g.files)
        files["bag-info.txt"] = edit(files["bag-info.txt"])
        assert files["bag-info.txt"] != g.files["bag-info.txt"]
        tags = sorted(t for t in ("bagit.txt", "bag-info.txt", "manifest-sha256.txt") if t in files)
        files["tagmanifest-sha256.txt"] = "".join(
            f"{hashlib.sha256(files[t]).hexdigest()}  {t}\n" for t in tags).encode()
        out = tmp_path / f"b{n}.tar"
        out.write_bytes(mc.raw_tar(g.top, files, g.mtime))
        rep = verify_archive(out, level="fast")
        msgs = [p.message for t in rep.tiers for p in t.problems]
        assert rep.exit_code == 1 and any("one space after each colon" in m for m in msgs), msgs
