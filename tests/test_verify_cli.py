"""verify_bundle.py's command line: exit codes, messages that say what to do next, and the
shape of the printed report (one numbered line per tier, then a VERDICT line).

Exit codes (DESIGN.md section 6): 0 pass, 1 verification failed, 2 usage error, 3 archive
unreadable/unsafe/unknown format, 4 replay impossible here.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kbrepro import verify_bundle
from corpus import make_corpus as mc

ROOT = Path(__file__).resolve().parent.parent
TIER_LINE = re.compile(r"^(\d) (\w+)\s+(PASS|FAIL|SKIP)\s+\d+\.\d\ds")
TIER_ORDER = ("archive", "manifest", "documents", "provenance", "claims", "replay")


@pytest.fixture(scope="module")
def good() -> Path:
    found = mc.find_good_bundles(ROOT)
    if not found:
        pytest.skip("no good bundle examples/*-full-*.tar: build one with make_bundle.py (on a GPU) "
                    "or place the published one there")
    if len(found) > 1:
        pytest.fail(f"more than one good bundle in examples/: {[p.name for p in found]}")
    return found[0]


def invoke(*args: str):
    return CliRunner().invoke(verify_bundle.main, list(args))


def tier_lines(stdout: str) -> list[tuple[int, str, str]]:
    return [(int(m.group(1)), m.group(2), m.group(3)) for m in map(TIER_LINE.match, stdout.splitlines()) if m]


def test_help():
    res = invoke("--help")
    assert res.exit_code == 0
    assert "Usage:" in res.stdout and "ARCHIVE" in res.stdout
    for opt in ("--level", "--json", "--expect-digest", "--trust-bundle-code", "--keep-extracted"):
        assert opt in res.stdout
    assert "[fast|static|replay|auto]" in res.stdout
    assert invoke("-h").stdout == res.stdout


def test_help_subprocess():
    p = subprocess.run([sys.executable, "verify_bundle.py", "--help"], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0 and "Usage:" in p.stdout


def test_no_archive_is_a_usage_error():
    res = invoke()
    assert res.exit_code == 2
    assert "Missing argument 'ARCHIVE'" in res.stderr


def test_missing_archive_path(tmp_path):
    """ARCHIVE is ``click.Path(dir_okay=False)`` without ``exists=True``: click lets a missing
    path through and the verifier reports it as unreadable input (exit 3), with a hint."""
    missing = tmp_path / "no-such-bundle.tar"
    res = invoke(str(missing), "--level", "static")
    assert res.exit_code == 3
    assert res.stdout == ""  # no half report
    err = res.stderr.splitlines()
    assert err[0].startswith("error: no archive at ") and "no-such-bundle.tar" in err[0]
    assert err[1] == "  -> check the path of the bundle (.tar or .tar.gz)"
    p = subprocess.run([sys.executable, "verify_bundle.py", str(missing), "--level", "static"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 3 and "check the path of the bundle" in p.stderr


def test_directory_as_archive_is_unreadable_input(tmp_path):
    res = invoke(str(tmp_path), "--level", "static")
    assert res.exit_code == 3
    assert "is a directory" in res.stderr


def test_bogus_level(tmp_path):
    res = invoke(str(tmp_path / "x.tar"), "--level", "bogus")
    assert res.exit_code == 2
    assert "Invalid value for '--level'" in res.stderr and "'bogus'" in res.stderr


def test_bogus_ratio_tolerance(tmp_path):
    res = invoke(str(tmp_path / "x.tar"), "--ratio-tolerance", "five")
    assert res.exit_code == 2 and "--ratio-tolerance" in res.stderr


def test_static_output_one_numbered_line_per_tier(good):
    res = invoke(str(good), "--level", "static")
    assert res.exit_code == 0, res.output
    lines = res.stdout.rstrip().splitlines()
    assert lines[0].startswith("bundle  ") and good.name in lines[0]
    assert re.fullmatch(r"digest  [0-9a-f]{64}", lines[1])
    assert tier_lines(res.stdout) == [(i + 1, n, "PASS") for i, n in enumerate(TIER_ORDER[:5])]
    # each tier line appears once, in order, and the last line is the verdict
    numbered = [ln for ln in lines if re.match(r"^\d ", ln)]
    assert len(numbered) == 5
    assert lines[-1].startswith("VERDICT PASS (exit 0)")


def test_fast_output(good):
    res = invoke(str(good), "--level", "fast")
    assert res.exit_code == 0
    assert tier_lines(res.stdout) == [(1, "archive", "PASS"), (2, "manifest", "PASS")]
    assert res.stdout.rstrip().splitlines()[-1].startswith("VERDICT PASS (exit 0)")


def _no_gpu() -> bool:
    import torch

    return not torch.cuda.is_available()


def test_auto_without_gpu_skips_replay(good):
    if not _no_gpu():
        pytest.skip("a CUDA GPU is present: auto would replay (covered by the gpu tests)")
    res = invoke(str(good))
    assert res.exit_code == 0, res.output
    expected = [(i + 1, n, "PASS") for i, n in enumerate(TIER_ORDER[:5])] + [(6, "replay", "SKIP")]
    assert tier_lines(res.stdout) == expected
    assert "no CUDA GPU here; replay skipped" in res.stdout
    assert res.stdout.rstrip().splitlines()[-1].startswith("VERDICT PASS (exit 0)")


@pytest.mark.slow
def test_replay_without_gpu_exits_4(good, tmp_path):
    if not _no_gpu():
        pytest.skip("a CUDA GPU is present: replay is possible here")
    report = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "verify_bundle.py", str(good), "--level", "replay", "--json", str(report)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 4, p.stdout + p.stderr
    err = p.stderr.splitlines()
    assert "error: replay needs a CUDA GPU and none is visible" in err
    assert any(ln.startswith("  -> ") and "--level static" in ln for ln in err)


def test_report_table_is_checked_against_the_data(tmp_path):
    """A REPORT.md that shows a verdict the data do not give is caught (claims tier)."""
    import hashlib
    import io
    import tarfile

    from kbrepro.bundle import pack

    (good,) = (ROOT / "examples").glob("pointwise-fusion-ftz-full-*.tar")
    files, top = {}, None
    with tarfile.open(good) as tf:
        for m in tf:
            if m.isfile():
                top, rel = m.name.split("/", 1)
                files[rel] = tf.extractfile(m).read()
    report = files["data/REPORT.md"].decode()
    assert "| C10 | **fails** |" in report
    payload = {k[len("data/"):]: v for k, v in files.items() if k.startswith("data/")}
    payload["REPORT.md"] = report.replace("| C10 | **fails** |", "| C10 | **holds** |").encode()
    info = [tuple(line.split(": ", 1)) for line in files["bag-info.txt"].decode().splitlines()
            if not line.startswith("Payload-Oxum")]
    forged = tmp_path / "forged.tar"
    forged.write_bytes(pack.tar_bytes(pack.make_bag(top, payload, info)))
    res = invoke(str(forged), "--level", "static")
    assert res.exit_code == 1
    assert "REPORT.md differs from the report the verifier renders from the records" in res.stdout
    assert "| C10 | **holds** |" in res.stdout and "| C10 | **fails** |" in res.stdout
    assert hashlib.sha256(forged.read_bytes()).hexdigest() != hashlib.sha256(good.read_bytes()).hexdigest()


def _readme_command() -> tuple[str, str]:
    """The bundle and the digest of the README's first verify command."""
    line = next(x for x in (ROOT / "README.md").read_text().splitlines() if x.startswith("python verify_bundle.py "))
    archive, _, digest = line[len("python verify_bundle.py "):].partition(" --expect-digest ")
    return archive.strip(), digest.strip()


def test_the_readmes_first_command_gives_the_output_it_shows():
    """A newcomer's first command (README, "Check a bundle"): the bundle is there, its digest is
    the one quoted, and every line the README shows is what the tool prints (times aside)."""
    archive, digest = _readme_command()
    res = invoke(str(ROOT / archive), "--expect-digest", digest)
    assert res.exit_code == 0, res.output
    readme = (ROOT / "README.md").read_text()
    shown = readme[readme.index("You see one line per tier and a verdict:"):].split("\n\n")[1].splitlines()

    def timeless(x):
        return re.sub(r"\d+\.\d\ds", "", x.strip()).split(" ...")[0].split("; ...")[0]

    printed = [timeless(x) for x in res.output.splitlines()]
    for line in shown:
        assert any(p.startswith(timeless(line)) for p in printed), line


def test_a_machine_without_an_nvidia_driver_skips_the_replay_without_importing_torch():
    """At --level auto, a machine that plainly has no NVIDIA driver skips tier 6 without
    importing torch (a static verification then takes well under a second, not two); the
    verdict and the note are the ones torch's own answer gives."""
    code = ("import sys; from kbrepro.bundle.verify.checklist import no_nvidia_driver, verify_archive; "
            f"none = no_nvidia_driver(); r = verify_archive({str(ROOT / _readme_command()[0])!r}); "
            "print(none, 'torch' in sys.modules, r.verdict, r.tiers[-1].status, r.tiers[-1].notes)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    none, imported, verdict, status, notes = out.stdout.split(" ", 4)
    assert verdict == "PASS" and status == "SKIP" and "no CUDA GPU here; replay skipped" in notes
    if none == "True":  # this machine (CI's has no GPU)
        assert imported == "False"


def test_expect_digest_is_normalised_or_refused():
    archive, digest = _readme_command()
    good = ROOT / archive
    assert invoke(str(good), "--level", "fast", "--expect-digest", f" sha256:{digest.upper()} ").exit_code == 0
    bad = invoke(str(good), "--level", "fast", "--expect-digest", "abc")
    assert bad.exit_code == 2 and "64 hexadecimal" in bad.stderr


def test_profile_may_be_one_of_any_shipped_study(tmp_path, monkeypatch):
    """--profile is checked against the profiles of every study the verifier ships (its
    registry), not only the published study's: a profile only the LayerNorm study defines
    passes the usage check (replay then needs a GPU: exit 4 here)."""
    import shutil

    import yaml

    from kbrepro.harness import study as study_mod

    root = tmp_path / "studies"
    for rec in study_mod.registry().values():
        shutil.copytree(ROOT / "studies" / rec["folder"], root / rec["folder"],
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    ln = root / study_mod.registry()["layernorm-l1-40"]["folder"] / "study.yaml"
    doc = yaml.safe_load(ln.read_text())
    doc["profiles"]["tiny"] = {"correctness": {"seeds": [0]}}
    ln.write_text(yaml.safe_dump(doc))
    (bundle,) = (ROOT / "examples").glob("layernorm-l1-40-full-*.tar")
    refused = invoke(str(bundle), "--level", "replay", "--profile", "tiny")
    assert refused.exit_code == 2 and "'tiny'" in refused.stderr
    monkeypatch.setattr(study_mod, "studies_root", lambda: root)
    assert "tiny" in verify_bundle.study_profiles()
    assert set(verify_bundle.study_profiles()) >= {"full", "quick", "extended", "tiny"}
    if _no_gpu():  # on a GPU this would replay the study
        res = invoke(str(bundle), "--level", "replay", "--profile", "tiny")
        assert "is not a profile of any study" not in res.stderr
        assert res.exit_code == 4 and "replay needs a CUDA GPU" in res.stderr, res.output
    res = invoke(str(bundle), "--level", "replay", "--profile", "tinyy")
    assert res.exit_code == 2 and "tiny" in res.stderr.splitlines()[-1]


def test_the_digest_line_says_it_identifies_nothing_only_when_the_payload_is_not_the_manifests(good, tmp_path):
    """Decided by what tier 2 found (the payload against its manifests), never by a message's
    wording: an edited payload file makes the digest meaningless; a wrong --expect-digest does not."""
    g = mc.load_good(good)
    files = dict(g.files)
    files["data/REPORT.md"] = files["data/REPORT.md"] + b"\n"  # the manifests left as they were
    edited = tmp_path / "edited.tar"
    edited.write_bytes(mc.raw_tar(g.top, files, g.mtime))
    res = invoke(str(edited), "--level", "fast")
    assert res.exit_code == 1
    assert "identifies nothing" in next(x for x in res.output.splitlines() if x.startswith("digest"))
    res = invoke(str(good), "--level", "fast", "--expect-digest", "0" * 64)
    assert res.exit_code == 1 and "bundle digest differs from the one you expected" in res.output
    digest = next(x for x in res.output.splitlines() if x.startswith("digest"))
    assert "identifies nothing" not in digest
    assert "0" * 64 in res.output  # a digest in expected/found is shown whole, not cut to 60 characters
    # the later tiers say why they did not run, without blaming a payload that matches its manifests
    res = invoke(str(good), "--level", "static", "--expect-digest", "0" * 64)
    assert "not the bundle you expected (--expect-digest): its documents are not judged" in res.output
    assert "the payload is not the one the digest names" not in res.output


def test_the_verdict_line_names_the_claims_that_do_not_hold(good):
    """A PASS says the bundle is genuine, not that its claims hold: the VERDICT line counts the
    claims that hold and names the others, from the verdicts the verifier derived itself."""
    res = invoke(str(good), "--level", "static")
    assert res.exit_code == 0
    last = res.stdout.rstrip().splitlines()[-1]
    m = re.fullmatch(r"VERDICT PASS \(exit 0\): (\d+) of (\d+) claims hold; fails: (.+)", last)
    assert m, last
    failing = m.group(3).split(", ")
    assert int(m.group(2)) - int(m.group(1)) == len(failing) >= 1
    assert all(f"{c} " in res.stdout or c in res.stdout for c in failing)
    res = invoke(str(good), "--level", "fast")  # the claims were not evaluated: nothing said of them
    assert res.stdout.rstrip().splitlines()[-1] == "VERDICT PASS (exit 0)"


def test_show_report_says_when_a_bundle_carries_no_pictures():
    """A bundle packed without matplotlib links figures it has no PNG of: --show-report says
    so, and how to draw them (issue 31)."""
    bare = ROOT / "examples" / "formats" / "pointwise-fusion-ftz-full-format6.tar"  # packed without renderings
    res = invoke(str(bare), "--show-report")
    assert res.exit_code == 0
    assert ("(this bundle carries no pictures: its packer had no matplotlib; the figures' data are verified and "
            f"'verify_bundle.py {bare.name} --plots DIR' draws them)") in res.output


def test_show_report_renders_the_markdown_as_plain_text_when_piped(good):
    """--show-report lays REPORT.md out for reading (no raw Markdown: no pipe tables, no HTML
    entities or <details> blocks, no escape sequences when the output is not a terminal)."""
    res = invoke(str(good), "--show-report")
    assert res.exit_code == 0
    report = res.stdout.split("---- REPORT.md", 1)[1].split("\n", 1)[1].split("(its figures link to", 1)[0]
    assert "C10" in report and "Claims" in report
    for raw in ("&lt;", "&gt;", "<details>", "|---|", "\x1b[", "**"):
        assert raw not in report, raw
    assert max(len(x) for x in report.splitlines()) <= 120
    assert all(x == x.rstrip() for x in report.splitlines())


def test_tiers_are_announced_as_they_start(good):
    from kbrepro.bundle.verify.checklist import verify_archive

    seen = []
    rep = verify_archive(good, level="static", on_tier=lambda n, name: seen.append((n, name)))
    assert seen == [(t.number, t.name) for t in rep.tiers] == list(enumerate(TIER_ORDER[:5], 1))


def test_a_terminal_sees_which_tier_runs_and_a_pipe_sees_nothing_of_it(good):
    """On a terminal's stderr a status line names the running tier (then is erased); where
    stderr is not a terminal nothing is added to it."""
    from conftest import run_on_a_terminal

    code, out, seen = run_on_a_terminal([sys.executable, str(ROOT / "verify_bundle.py"), str(good), "--level", "static"])
    assert code == 0
    assert b"verifying " in seen and b"tier 3 documents" in seen
    assert out.rstrip().splitlines()[-1].startswith("VERDICT PASS (exit 0)")
    piped = subprocess.run([sys.executable, str(ROOT / "verify_bundle.py"), str(good), "--level", "static"],
                           capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0 and "verifying" not in piped.stderr


def test_a_table_too_wide_for_its_words_is_shown_row_by_row_and_no_word_is_cut():
    """--show-report's tables: every column at least as wide as its longest word; where the
    words cannot stand side by side, each row's cells under their column's name (a second
    newcomer read 'cupy_de/fault/e/ager_ta/il' at 80 columns)."""
    from kbrepro.cli.render import rendered_markdown

    names = [f"column_{i}" for i in range(9)]
    cells = [f"nvrtc_ftz_false/torchscript_{i}" for i in range(9)]
    wide = "| " + " | ".join(names) + " |\n|" + "---|" * 9 + "\n| " + " | ".join(cells) + " |\n"
    out = rendered_markdown(wide)
    assert all(f"{n}: {c}" in out for n, c in zip(names, cells)), out
    narrow = "| block | a/b | verdict |\n|---|---|---|\n| 81.full.events | nvrtc_ftz_false/torchscript | holds |\n"
    out = rendered_markdown(narrow)
    assert "nvrtc_ftz_false/torchscript" in out and "81.full.events" in out and "block: " not in out
