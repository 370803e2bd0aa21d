"""make_bundle.py: packing existing results (the post's H200 files and our own), determinism,
BagIt validity, and refusal of invalid results with their JSON paths."""
from __future__ import annotations

import json
import re
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import ROOT, SHARED_RUN, sigint_disposition

needs_shared = pytest.mark.skipif(not SHARED_RUN.is_dir(), reason="../shared/data/h200-seed-run is not present")


def _make(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "make_bundle.py", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


@needs_shared
@pytest.mark.slow
def test_packing_the_post_files_twice_gives_identical_archives_that_bagit_validates(tmp_path):
    a, b = tmp_path / "A.tar", tmp_path / "B.tar"
    # the post's own files fail verification (their --ftz=true binary did not flush): refused,
    # unless asked, with the reason on the verify: line
    r = _make("--from-results", str(SHARED_RUN), "--out", str(a))
    assert r.returncode == 1 and not a.exists() and "verify:  FAIL in tier 4 provenance" in r.stdout
    ra = _make("--from-results", str(SHARED_RUN), "--out", str(a), "--allow-failing")
    rb = _make("--from-results", str(SHARED_RUN), "--out", str(b), "--allow-failing")
    assert ra.returncode == 0, ra.stderr
    assert rb.returncode == 0, rb.stderr
    assert a.read_bytes() == b.read_bytes()
    digest = ra.stdout.split("digest:")[1].split()[0]
    assert (tmp_path / "A.tar.sha256-digest").read_text().split()[-1] == digest
    import bagit

    ex = tmp_path / "x"
    with tarfile.open(a) as tf:
        tf.extractall(ex, filter="data")  # our own archive, in a test
    (top,) = list(ex.iterdir())
    bag = bagit.Bag(str(top))
    bag.validate()
    assert bag.info["Bundle-Format"] == "kbrepro-bundle"
    meta = json.loads((top / "data" / "bundle.json").read_text())
    assert meta["source"] == "imported"
    for orig in ("fusion_results.json", "fusion_preserve_denormals.json", "fusion_controls.json",
                 "fusion_ftz_cost.json", "scout.json"):
        assert (top / "data" / "results" / "originals" / orig).read_bytes() == (SHARED_RUN / orig).read_bytes()
    report = (top / "data" / "REPORT.md").read_text()
    assert "| C14 | **fails** |" in report


def _copy_post(tmp_path) -> Path:
    d = tmp_path / "post"
    shutil.copytree(SHARED_RUN, d)
    return d


@needs_shared
@pytest.mark.parametrize("edit,fragment,code", [
    (lambda t: t.replace('"bit_equal_count": 16777216,', '"bit_equal_count": 16777216.0,', 1), "bit_equal_count", 1),
    # a NaN token is not JSON at all (RFC 8259): unreadable input, exit 3, still with its path
    (lambda t: t.replace('"max_abs": 0.0,', '"max_abs": NaN,', 1), "NaN", 3),
    (lambda t: t.replace('"element_count": 16777216,', '', 1), "element_count", 1),
])
def test_invalid_post_results_are_refused_with_their_path_and_nothing_is_written(tmp_path, edit, fragment, code):
    d = _copy_post(tmp_path)
    f = d / "fusion_results.json"
    f.write_text(edit(f.read_text()))
    out = tmp_path / "never.tar"
    r = _make("--from-results", str(d), "--out", str(out))
    assert r.returncode == code, r.stderr
    assert "$.tasks" in r.stderr and fragment in r.stderr
    assert not out.exists() and not list(tmp_path.glob("*.tar*"))


def test_our_own_results_with_problems_are_refused_with_paths(tmp_path):
    src = ROOT / "tests" / "fixtures" / "results-quick-h200"
    d = tmp_path / "r"
    shutil.copytree(src, d)
    doc = json.loads((d / "correctness.json").read_text())
    first = doc["full_program"][0]["checks"]
    v = next(iter(first))
    first[v]["element_count"] = float(first[v]["element_count"])
    del first[v]["official"]
    (d / "correctness.json").write_text(json.dumps(doc))
    (d / "witness.json").write_text((d / "witness.json").read_text().replace('"task": 81', '"task": NaN'))
    r = _make("--from-results", str(d), "--out", str(tmp_path / "x.tar"))
    assert r.returncode in (1, 3), r.stderr
    assert not (tmp_path / "x.tar").exists()
    assert "$.full_program[0].checks" in r.stderr or "witness.json" in r.stderr


def test_no_gpu_default_run_stops_at_once_and_names_the_alternatives():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    r = _make()
    assert r.returncode == 4
    assert "make_bundle.py pack DIR" in r.stderr and "verify_bundle.py" in r.stderr


@needs_shared
def test_usage_errors_exit_2(tmp_path):
    assert _make("--bogus").returncode == 2
    r = _make("--from-results", str(SHARED_RUN), "--out", str(tmp_path / "x.zip"))
    assert r.returncode == 2 and ".tar" in r.stderr
    r = _make("--from-results", str(tmp_path / "missing"))
    assert r.returncode == 3 and "does not exist" in r.stderr
    (tmp_path / "empty").mkdir()
    r = _make("--from-results", str(tmp_path / "empty"))
    assert r.returncode == 3


def _kernelbench_from_example(tmp_path) -> Path:
    from conftest import kernelbench_from_example

    return kernelbench_from_example(tmp_path)


def test_measured_results_without_a_kernelbench_checkout_are_refused(tmp_path):
    src = ROOT / "tests" / "fixtures" / "results-quick-h200"
    r = _make("--from-results", str(src), "--out", str(tmp_path / "q.tar"), "--kernelbench", str(tmp_path / "none"))
    assert r.returncode == 3, r.stderr
    assert "git submodule update --init KernelBench" in r.stderr
    assert not (tmp_path / "q.tar").exists()


@pytest.mark.slow
def test_our_own_quick_results_pack_and_verify_end_to_end(tmp_path):
    """The real quick-profile results of an H200 run: pack twice (identical), verify statically."""
    src = ROOT / "tests" / "fixtures" / "results-quick-h200"
    kb = str(_kernelbench_from_example(tmp_path))
    a, b = tmp_path / "q1.tar", tmp_path / "q2.tar"
    ra = _make("--from-results", str(src), "--out", str(a), "--kernelbench", kb)
    assert ra.returncode == 0, ra.stderr
    assert _make("--from-results", str(src), "--out", str(b), "--kernelbench", kb).returncode == 0
    assert a.read_bytes() == b.read_bytes()
    r = subprocess.run([sys.executable, "verify_bundle.py", str(a), "--level", "static", "--json",
                        str(tmp_path / "rep.json")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads((tmp_path / "rep.json").read_text())
    assert [(t["name"], t["status"]) for t in rep["tiers"]] == [
        ("archive", "PASS"), ("manifest", "PASS"), ("documents", "PASS"), ("provenance", "PASS"), ("claims", "PASS")]


@needs_shared
def test_options_that_do_not_apply_are_refused_and_bad_names_are_usage_errors(tmp_path):
    r = _make("--from-results", str(SHARED_RUN), "--profile", "quick", "--out", str(tmp_path / "x.tar"))
    assert r.returncode == 2 and "--profile" in r.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n")
    r = _make("--from-results", str(SHARED_RUN), "--study", str(bad), "--out", str(tmp_path / "x.tar"))
    assert r.returncode == 3 and "not valid YAML" in r.stderr
    r = _make("--from-results", str(SHARED_RUN), "--name", "has space", "--out", str(tmp_path / "x.tar"))
    assert r.returncode == 2 and "not allowed" in r.stderr
    assert not list(tmp_path.glob("*.tar*"))
    r = _make("--profile", "nope")
    assert r.returncode == 2 and "no profile 'nope'" in r.stderr


@needs_shared
def test_too_few_post_files_is_a_clear_refusal(tmp_path):
    d = tmp_path / "only_scout"
    d.mkdir()
    shutil.copy(SHARED_RUN / "scout.json", d / "scout.json")
    r = _make("--from-results", str(d), "--out", str(tmp_path / "x.tar"))
    assert r.returncode == 1 and "too few of the post's files" in r.stderr and "Traceback" not in r.stderr
    d2 = tmp_path / "only_cost"
    d2.mkdir()
    shutil.copy(SHARED_RUN / "fusion_ftz_cost.json", d2 / "fusion_ftz_cost.json")
    r = _make("--from-results", str(d2), "--out", str(tmp_path / "y.tar"))
    assert r.returncode == 1 and "Traceback" not in r.stderr


def test_archives_honour_the_umask(tmp_path):
    import os
    import stat

    from kbrepro.bundle import pack

    bag = pack.make_bag("b", {"x.txt": b"x"}, [("Bundle-Format", "kbrepro-bundle")])
    old = os.umask(0o022)
    try:
        pack.write_archive(bag, tmp_path / "b.tar")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "b.tar").stat().st_mode) == 0o644


# ---------------------------------------------------------------------------- the study folder packed with the results
FULL_RESULTS = ROOT / "examples" / "results-full-h200"
QUICK_RESULTS = ROOT / "tests" / "fixtures" / "results-quick-h200"
PUBLISHED = ROOT / "studies" / "pointwise_fusion"


@pytest.mark.slow
def test_the_committed_full_bundle_is_reproduced_byte_for_byte_from_its_results(tmp_path):
    (committed,) = (ROOT / "examples").glob("pointwise-fusion-ftz-full-*.tar")
    kb = str(_kernelbench_from_example(tmp_path))
    out = tmp_path / "out" / committed.name
    out.parent.mkdir()
    # the committed example is bundle format 3 (before the RO-Crate file and signatures, issue 14)
    r = _make("--from-results", str(FULL_RESULTS), "--out", str(out), "--kernelbench", kb, "--bundle-format", "3")
    assert r.returncode == 0, r.stderr
    ours, theirs = _members_of(out), _members_of(committed)
    same_renderer = _renderer(ours) == _renderer(theirs)
    # every byte but the renderings; those too where the same matplotlib drew them
    assert {k: v for k, v in ours.items() if same_renderer or "/renderings/" not in k} == \
        {k: v for k, v in theirs.items() if same_renderer or "/renderings/" not in k}
    if same_renderer:
        assert out.read_bytes() == committed.read_bytes()
    digest_file = committed.with_name(committed.name + ".sha256-digest")
    assert out.with_name(out.name + ".sha256-digest").read_bytes() == digest_file.read_bytes()
    with tarfile.open(out) as tf:
        members = [m for m in tf.getmembers() if m.isfile()]
        names = [m.name for m in members]
        top = names[0].split("/", 1)[0]
        meta = json.loads(tf.extractfile(f"{top}/data/bundle.json").read())
    assert meta["schema_version"] == 2 and meta["format_version"] == 3
    # every file of the study folder, under data/inputs/study/, and nothing of the old layout
    study_files = sorted(n.split("/data/inputs/study/", 1)[1] for n in names if "/data/inputs/study/" in n)
    from kbrepro.harness.plugin import study_files as folder_files

    assert study_files == sorted(folder_files(PUBLISHED)) == sorted(meta["study"]["files"])
    assert f"{top}/data/inputs/claims/claims.yaml" in names
    assert not [n for n in names if "/data/inputs/kernels/" in n]


def _members_of(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tf:
        return {m.name: tf.extractfile(m).read() for m in tf if m.isfile()}


def _renderer(members: dict[str, bytes]):
    raw = next((v for k, v in members.items() if k.endswith("/renderings/renderings.json")), None)
    return json.loads(raw)["renderer"] if raw else None


def _digest_of(path: Path) -> str:
    from kbrepro.bundle.verify.checklist import verify_archive

    rep = verify_archive(path, level="static")
    assert rep.exit_code == 0, [p for t in rep.tiers for p in t.problems]
    return rep.digest


def _other_render(name, data):
    """Another renderer: other PNG bytes for the same data, still a PNG as Agg writes them (the
    image data compressed again at another zlib level; module level: worker processes pickle
    it by name)."""
    import struct
    import zlib

    png = _REAL_RENDER(name, data)
    i, chunks = 8, []
    while i < len(png):
        n = int.from_bytes(png[i:i + 4], "big")
        chunks.append((png[i + 4:i + 8], png[i + 8:i + 8 + n]))
        i += 12 + n
    idat = zlib.compress(zlib.decompress(b"".join(b for k, b in chunks if k == b"IDAT")), 1)
    keep = [c for c in chunks if c[0] not in (b"IDAT", b"IEND")] + [(b"IDAT", idat), (b"IEND", b"")]
    return png[:8] + b"".join(struct.pack(">I", len(b)) + k + b + struct.pack(">I", zlib.crc32(k + b))
                              for k, b in keep)


def _other_versions():
    return {"matplotlib": "0.0-other", "numpy": "0", "freetype": "0"}


def _real_render():
    from kbrepro.bundle import plots

    return plots.render


_REAL_RENDER = _real_render()


@pytest.mark.slow
def test_the_quoted_digest_is_the_same_with_any_renderer_or_none(tmp_path, monkeypatch):
    """Issue 12: figures' data are in the payload, their PNGs outside every manifest. Packed
    with this matplotlib, with another renderer (other PNG bytes and versions) and with no
    matplotlib at all, the same results give one digest; each bundle verifies."""
    from kbrepro.bundle import make, plots

    kb = str(_kernelbench_from_example(tmp_path))
    a = make.make_from_results(QUICK_RESULTS, tmp_path / "a.tar", kernelbench=kb)
    monkeypatch.setattr(plots, "render", _other_render)
    monkeypatch.setattr(plots, "renderer_versions", _other_versions)
    b = make.make_from_results(QUICK_RESULTS, tmp_path / "b.tar", kernelbench=kb, pool=None)
    monkeypatch.undo()
    c = make.make_from_results(QUICK_RESULTS, tmp_path / "c.tar", kernelbench=kb, with_plots=False)
    assert _members_of(tmp_path / "a.tar") != _members_of(tmp_path / "b.tar")
    assert _renderer(_members_of(tmp_path / "b.tar"))["matplotlib"] == "0.0-other"
    assert _renderer(_members_of(tmp_path / "c.tar")) is None
    assert a.digest == b.digest == c.digest == _digest_of(tmp_path / "a.tar") == _digest_of(tmp_path / "b.tar") \
        == _digest_of(tmp_path / "c.tar")


@pytest.mark.slow
def test_two_matplotlib_versions_give_the_same_quoted_digest(tmp_path):
    """Issue 12, with a real second matplotlib: 3.10.9 installed beside the one of the test
    environment (pip, into a folder of this test) packs the same results to the same digest.
    Needs the package index; skipped, saying so, where pip cannot fetch it."""
    import subprocess
    import sys

    import matplotlib

    other = "3.10.9" if matplotlib.__version__ != "3.10.9" else "3.9.4"
    site = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site),
                        f"matplotlib=={other}"], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        pytest.skip(f"pip cannot install matplotlib {other} here: {r.stderr.strip().splitlines()[-1:]}")
    kb = str(_kernelbench_from_example(tmp_path))
    mine = tmp_path / "mine.tar"
    assert _make("--from-results", str(QUICK_RESULTS), "--out", str(mine), "--kernelbench", kb).returncode == 0
    theirs = tmp_path / "theirs.tar"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, str(ROOT / "make_bundle.py"), "--from-results", str(QUICK_RESULTS), "--out",
                        str(theirs), "--kernelbench", kb], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    versions = {_renderer(_members_of(mine))["matplotlib"], _renderer(_members_of(theirs))["matplotlib"]}
    assert versions == {matplotlib.__version__, other}
    assert _digest_of(mine) == _digest_of(theirs)
    assert mine.with_name("mine.tar.sha256-digest").read_text().split()[-1] == \
        theirs.with_name("theirs.tar.sha256-digest").read_text().split()[-1]


def _study_copy(tmp_path) -> Path:
    d = tmp_path / "study"
    shutil.copytree(PUBLISHED, d, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "__init__.py"))
    return d


@pytest.mark.slow
def test_an_identical_copy_of_the_study_folder_packs_the_same_bundle(tmp_path):
    kb = str(_kernelbench_from_example(tmp_path))
    a, b = tmp_path / "a.tar", tmp_path / "b.tar"
    assert _make("--from-results", str(QUICK_RESULTS), "--out", str(a), "--kernelbench", kb).returncode == 0
    r = _make("--from-results", str(QUICK_RESULTS), "--out", str(b), "--kernelbench", kb,
              "--study", str(_study_copy(tmp_path) / "study.yaml"))
    assert r.returncode == 0, r.stderr
    assert a.read_bytes() == b.read_bytes()


def _append(rel: str, text: str):
    def edit(folder: Path) -> None:
        with open(folder / rel, "a") as fh:
            fh.write(text)
    return edit


def _retitle(folder: Path) -> None:
    import yaml

    doc = yaml.safe_load((folder / "study.yaml").read_text())
    doc["title"] = "another title"
    (folder / "study.yaml").write_text(yaml.safe_dump(doc))


@pytest.mark.parametrize("edit,fragment", [
    (_retitle, "study.yaml differs from the study definition the run used"),
    (_append("claims.yaml", "\n# edited\n"), "files differ from the ones the run used (claims.yaml)"),
    (_append("binding.py", "\n# edited\n"), "files differ from the ones the run used (binding.py)"),
    (_append("fused_tails.cu", "\n// edited\n"), "files differ from the ones the run used (fused_tails.cu)"),
])
def test_results_are_refused_with_a_study_folder_other_than_the_one_the_run_used(tmp_path, edit, fragment):
    kb = str(_kernelbench_from_example(tmp_path))
    folder = _study_copy(tmp_path)
    edit(folder)
    out = tmp_path / "never.tar"
    r = _make("--from-results", str(QUICK_RESULTS), "--out", str(out), "--kernelbench", kb, "--study", str(folder))
    assert r.returncode == 1, r.stderr
    assert fragment in r.stderr.splitlines()[0] and "Traceback" not in r.stderr
    assert not list(tmp_path.glob("*.tar*"))


def test_results_of_one_study_are_refused_with_another_studys_folder(tmp_path):
    kb = str(_kernelbench_from_example(tmp_path))
    out = tmp_path / "never.tar"
    r = _make("--from-results", str(QUICK_RESULTS), "--out", str(out), "--kernelbench", kb,
              "--study", str(ROOT / "studies" / "layernorm"))
    assert r.returncode == 1, r.stderr
    assert r.stderr.splitlines()[0] == ("error: the results are of study 'pointwise-fusion-ftz'; --study names "
                                        "study 'layernorm-l1-40'"), r.stderr
    assert not list(tmp_path.glob("*.tar*"))


@pytest.mark.parametrize("study", ["studies/layernorm", "studies/pointwise_fusion/study.yaml", None])
def test_the_run_path_reaches_the_run_with_the_named_study(tmp_path, monkeypatch, study):
    """Everything ``make_bundle.py`` does before the GPU run, on a CPU machine: the study
    named by --study (a folder or its study.yaml, or the default) is loaded, its binding
    validated and its claims parsed, then the run starts with that binding; what it leaves
    when the run fails is the empty results folder it made, removed."""
    from kbrepro.bundle import make
    from kbrepro.harness import run as hr

    seen = []

    def fake_run(st, rdir, **kw):
        seen.append((st.name, type(kw["binding"]).__name__, Path(rdir)))
        raise make.InvalidResultsError("stopped by the test", "none")

    monkeypatch.setattr(hr, "run_study", fake_run)
    monkeypatch.setattr(make, "start_workers", lambda n=None: None)
    monkeypatch.setattr(make, "stop_workers", lambda pool: None)
    with pytest.raises(make.InvalidResultsError, match="stopped by the test"):
        make.run_and_make(tmp_path / "b.tar", study_path=None if study is None else str(ROOT / study),
                          profile="quick", kernelbench=None, results_dir=tmp_path / "res", cache_dir=None,
                          claims_path=None)
    (name, binding, rdir), = seen
    assert name == ("layernorm-l1-40" if study == "studies/layernorm" else "pointwise-fusion-ftz")
    assert binding == ("LayerNormBinding" if study == "studies/layernorm" else "PointwiseFusion")
    assert rdir == tmp_path / "res"


def test_a_claims_selector_no_document_can_hold_is_refused_before_the_run(tmp_path, monkeypatch):
    """Issue 12: a --claims typo the schemas can see stops make_bundle.py before the GPU run
    (exit 2), not after minutes of measuring."""
    from kbrepro.bundle import make
    from kbrepro.errors import UsageError
    from kbrepro.harness import run as hr

    ran = []
    monkeypatch.setattr(hr, "run_study", lambda *a, **k: ran.append(1))
    monkeypatch.setattr(make, "start_workers", lambda n=None: None)
    spec = tmp_path / "claims.yaml"
    spec.write_text("schema: kbrepro/claims-spec\nschema_version: 1\nstudy: pointwise-fusion-ftz\n"
                    "bootstrap: {level: 0.95, resamples: 100, seed: 1}\nclaims:\n  - id: Z1\n    sentence: typo\n"
                    "    checks:\n      - kind: all_equal\n        select: \"corectness.full_program[*].x\"\n"
                    "        equals: true\n")
    with pytest.raises(UsageError, match="claim Z1.*corectness"):
        make.run_and_make(tmp_path / "b.tar", study_path=None, profile="quick", kernelbench=None,
                          results_dir=tmp_path / "res", cache_dir=None, claims_path=str(spec))
    assert ran == [] and not (tmp_path / "res").exists()


@pytest.mark.slow
def test_packing_ends_with_the_verdict_verification_will_give(tmp_path):
    """Issue 12: one line says whether verify_bundle.py will pass the bundle."""
    kb = str(_kernelbench_from_example(tmp_path))
    r = _make("--from-results", str(QUICK_RESULTS), "--out", str(tmp_path / "q.tar"), "--kernelbench", kb)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "verify:  PASS at --level static (replay on a GPU: --level replay)"


@pytest.mark.parametrize("allow", [False, True])
@pytest.mark.slow
def test_a_bundle_that_would_fail_verification_is_removed_unless_allowed(tmp_path, monkeypatch, allow):
    from click.testing import CliRunner

    import make_bundle
    from kbrepro.bundle import publish

    kb = str(_kernelbench_from_example(tmp_path))
    monkeypatch.setattr(publish, "predict_verification",
                        lambda p, key=None: ("FAIL", "FAIL in tier 4 provenance: data/results/compile.json: contradicts"))
    out = tmp_path / "q.tar"
    args = ["--from-results", str(QUICK_RESULTS), "--out", str(out), "--kernelbench", kb] + (["--allow-failing"] * allow)
    r = CliRunner().invoke(make_bundle.main, args)
    assert "verify:  FAIL in tier 4 provenance" in r.output
    if allow:
        assert r.exit_code == 0 and out.is_file()
    else:
        assert r.exit_code == 1 and not out.exists() and not out.with_name("q.tar.sha256-digest").exists()
        assert "would fail verification" in r.output and QUICK_RESULTS.is_dir()


@pytest.mark.slow
def test_packing_without_matplotlib_says_the_figures_have_no_picture(tmp_path, monkeypatch):
    """Issue 31: REPORT.md links its figures' PNGs whatever the packer had (its bytes are in the
    digest); packed where matplotlib is missing, the packer says the pictures are not there and
    how to draw them, and --no-plots (asked for) says nothing."""
    from click.testing import CliRunner

    import make_bundle
    from kbrepro.bundle import plots

    def no_matplotlib():
        raise ImportError("No module named 'matplotlib'")

    kb = str(_kernelbench_from_example(tmp_path))
    monkeypatch.setattr(plots, "renderer_versions", no_matplotlib)  # what drawing needs first, missing
    r = CliRunner().invoke(make_bundle.main, ["pack", str(QUICK_RESULTS), "--out", str(tmp_path / "q.tar"),
                                              "--kernelbench", kb])
    assert r.exit_code == 0, r.output
    note = next(ln for ln in r.output.splitlines() if "matplotlib is not installed here" in ln)
    assert "figure links have no picture" in note and "'verify_bundle.py q.tar --plots DIR'" in note
    r = CliRunner().invoke(make_bundle.main, ["pack", str(QUICK_RESULTS), "--out", str(tmp_path / "n.tar"),
                                              "--kernelbench", kb, "--no-plots"])
    assert r.exit_code == 0 and "matplotlib is not installed" not in r.output, r.output


GOLDEN = ROOT / "tests" / "fixtures" / "golden-full-h200"


def test_the_committed_results_give_the_golden_report_claims_summary_and_figure_data(tmp_path):
    """Golden files (issue 12): REPORT.md, claims.json, summary.txt and every figure's data
    that the committed full results give. A change to any of them is deliberate: re-pack the
    example and copy the files again (tests/fixtures/golden-full-h200, README of the tests)."""
    kb = str(_kernelbench_from_example(tmp_path))
    out = tmp_path / "g.tar"
    # format 3, as the committed example whose summary names its digest (format 4 adds the RO-Crate
    # file: every golden file but summary.txt is the same, tests/test_rocrate.py)
    assert _make("--from-results", str(FULL_RESULTS), "--out", str(out), "--kernelbench", kb, "--no-plots",
                 "--bundle-format", "3").returncode == 0
    got = {k.split("/", 1)[1]: v for k, v in _members_of(out).items()}
    want = {"data/REPORT.md": GOLDEN / "REPORT.md", "data/claims.json": GOLDEN / "claims.json",
            "summary.txt": GOLDEN / "summary.txt"}
    want.update({f"data/plots/{p.name}": p for p in (GOLDEN / "plots").iterdir()})
    assert sorted(k for k in got if k.startswith("data/plots/")) == sorted(k for k in want if k.startswith("data/plots/"))
    for k, p in want.items():
        assert got[k] == p.read_bytes(), f"{k} changed: if on purpose, copy it to {p.relative_to(ROOT)}"
    report = got["data/REPORT.md"].decode()
    # C08 read literally fails: task 81's custom program is faster than TorchScript, resolved
    row = next(line for line in report.splitlines() if line.startswith("| C08 |"))
    assert "| **holds** | **fails** |" in row and "81.full" in row and "faster by" in row


@pytest.mark.slow
def test_show_report_prints_the_verified_report_and_summary_and_plots_draws_the_figures(tmp_path):
    r = subprocess.run([sys.executable, "verify_bundle.py", str(next((ROOT / "examples").glob(
        "pointwise-fusion-ftz-full-*.tar"))), "--show-report", "--plots", str(tmp_path / "figs")], cwd=ROOT,
        capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    # REPORT.md laid out for reading (rich), every claim's row there; summary.txt as it is
    claims = json.loads((GOLDEN / "claims.json").read_text())["claims"]
    assert all(re.search(rf"^\s*{c['id']}\s+{c['verdict']}\b", r.stdout, re.M) for c in claims), r.stdout[:3000]
    assert (GOLDEN / "summary.txt").read_text() in r.stdout
    from kbrepro.bundle import plots

    drawn = sorted(p.name for p in (tmp_path / "figs").iterdir())
    assert drawn == sorted(p.stem + ".png" for p in (GOLDEN / "plots").iterdir())
    assert all(plots.png_size((tmp_path / "figs" / n).read_bytes())[0] <= plots.MAX_WIDTH_PX for n in drawn)


def test_a_forged_summary_fails_verification(tmp_path):
    import dataclasses

    from kbrepro.bundle import pack
    from kbrepro.bundle.verify.checklist import verify_archive

    src = next((ROOT / "examples").glob("pointwise-fusion-ftz-full-*.tar"))
    members = _members_of(src)
    top = next(iter(members)).split("/")[0]
    rel = {k.split("/", 1)[1]: v for k, v in members.items()}
    info = [tuple(line.split(": ", 1)) for line in rel["bag-info.txt"].decode().splitlines()
            if not line.startswith("Payload-Oxum")]
    bag = pack.make_bag(top, {k[5:]: v for k, v in rel.items() if k.startswith("data/")}, info,
                        renderings={k[11:]: v for k, v in rel.items() if k.startswith("renderings/")})
    assert pack.tar_bytes(dataclasses.replace(bag, summary=rel["summary.txt"])) == src.read_bytes()
    forged = rel["summary.txt"].replace(b"not holding: C10, C11", b"every claim holds")
    out = tmp_path / "f.tar"
    pack.write_archive(dataclasses.replace(bag, summary=forged), out)
    rep = verify_archive(out, level="static")
    assert rep.digest == bag.digest()  # outside every manifest: the digest cannot show it
    assert rep.exit_code == 1 and any("five-line summary" in p.message for t in rep.tiers for p in t.problems)


@pytest.mark.skipif(not hasattr(__import__("signal"), "pthread_sigmask"), reason="POSIX signal masks")
def test_every_packing_pool_worker_ignores_ctrl_c_so_only_the_parent_reports_it():
    """A Ctrl-C reaches the whole process group: a worker that handles it prints its own
    KeyboardInterrupt traceback (seen on CI, about 1 run in 8, in the --from-results
    interruption test: the figure pool of a run without a warm pool had Python's default
    handler). Both pools' workers ignore it, and none is left with it blocked."""
    from kbrepro.bundle import workers

    here = sigint_disposition()
    pool = workers.start_workers(2)
    try:
        assert {pool.submit(sigint_disposition).result(timeout=60) for _ in range(4)} == {"ignored:unblocked"}
    finally:
        workers.stop_workers(pool)
    pool = workers.worker_pool(2, workers.quiet_worker)  # the figure pool of PlotWorker without a warm pool
    try:
        assert {pool.submit(sigint_disposition).result(timeout=60) for _ in range(4)} == {"ignored:unblocked"}
    finally:
        workers.stop_workers(pool)
    assert sigint_disposition() == here and here.endswith(":unblocked")  # this process: as it was


def test_show_report_of_a_renamed_copy_says_which_file_the_check_line_names(tmp_path):
    """A newcomer's finding: summary.txt's check line names the file the packer wrote, which a
    renamed copy is not; --show-report says so under it (summary.txt itself is sealed)."""
    from click.testing import CliRunner

    from kbrepro import verify_bundle

    src = next((ROOT / "examples").glob("pointwise-fusion-ftz-full-2*.tar"))
    copy = tmp_path / "downloaded.tar"
    copy.write_bytes(src.read_bytes())
    res = CliRunner().invoke(verify_bundle.main, [str(copy), "--level", "static", "--show-report"])
    assert res.exit_code == 0, res.output
    assert f"(its check line names the file the packer wrote, {src.name}; this copy is downloaded.tar)" in res.output
    res = CliRunner().invoke(verify_bundle.main, [str(src), "--level", "static", "--show-report"])
    assert res.exit_code == 0 and "this copy is" not in res.output
