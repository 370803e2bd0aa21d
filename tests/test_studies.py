"""Studies as plug-ins: the product knows no study, the registry is the folders, each shipped
study has a verifying bundle, the published claims keep their verdicts, and a study the
verifier does not ship is judged as the author's (partial) and replayed only on trust."""
from __future__ import annotations

import json
import sys
import tarfile
import types
from pathlib import Path

import pytest

from kbrepro import manifests
from kbrepro.bundle import claims as claims_mod
from kbrepro.bundle.verify.checklist import verify_archive
from kbrepro.errors import UsageError
from kbrepro.harness import bounded, jsonio, plugin
from kbrepro.harness.kernelbench import load_lock
from kbrepro.harness.study import load_study, registry, registry_doc, studies_root

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
EXAMPLES = ROOT / "examples"
#: the published study's own names: none may appear in the generic product code
STUDY_NAMES = ("fused_tail", "cupy_default", "nvrtc_ftz_true", "nvrtc_ftz_false", "scaling_factor",
               "bias_task_rows", "tiny_value", "scout")
PRODUCT = ("harness", "bundle", "kernels", "schemas", "make_bundle.py", "verify_bundle.py")
USER_BUNDLE = FIXTURES / "user-study-relu-quick.tar"


def _mentions(root: Path, tops, names) -> list[str]:
    hits = []
    for top in tops:
        p = root / top
        files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file() and "__pycache__" not in f.parts)
        for f in files:
            text = f.read_bytes().decode("utf-8", "replace").lower()
            hits += [f"{f.relative_to(root)}: {n}" for n in names if n.lower() in text]
    return hits


def test_product_code_names_none_of_the_published_studys_names():
    assert _mentions(ROOT, PRODUCT, STUDY_NAMES) == []


def test_the_name_scan_finds_a_name_where_there_is_one(tmp_path):
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "x.py").write_text("# the Scout stage\n")
    (tmp_path / "make_bundle.py").write_text("V = 'nvrtc_ftz_true'\n")
    assert _mentions(tmp_path, ("harness", "make_bundle.py"), STUDY_NAMES) == [
        "harness/x.py: scout", "make_bundle.py: nvrtc_ftz_true"]


def test_the_registry_is_the_study_folders_as_they_are():
    doc = jsonio.loads_strict(manifests.path("studies.json").read_bytes(), "studies.json")
    assert doc == registry_doc(), "a shipped study changed: run 'python -m kbrepro.harness register-studies'"
    assert len(doc["studies"]) >= 2
    for name, rec in doc["studies"].items():
        folder = studies_root() / rec["folder"]
        assert load_study(folder, "full").name == name
        assert "study.yaml" in rec["files"] and "__init__.py" not in rec["files"]


def test_registering_refuses_a_folder_outside_studies(tmp_path):
    with pytest.raises(UsageError, match="not a folder directly under"):
        registry_doc(add=[tmp_path])


def test_every_shipped_study_loads_at_every_profile_and_its_lock_is_a_subset_of_the_pin():
    pin = load_lock(manifests.path("kernelbench.pin.json"))
    assert pin.commit == "423217d9fda91e0c2d67e4a43bf62f96f6d104f1"
    assert len([p for p in pin.files if p.startswith("KernelBench/")]) == 270 and "LICENSE" in pin.files
    for name, rec in registry().items():
        folder = studies_root() / rec["folder"]
        doc = bounded.load_yaml((folder / "study.yaml").read_bytes(), "study.yaml")
        for profile in ["full", *sorted(doc.get("profiles") or {})]:
            st = load_study(folder, profile)
            assert st.profile == profile
        st = load_study(folder, "full")
        lock = load_lock(folder / st.lock_file)
        assert lock.commit == pin.commit
        assert all(pin.files.get(p) == h for p, h in lock.files.items()), name
        # the lock is exactly what 'python -m kbrepro.harness lock' derives from the pin
        keys = sorted(set(st.binding().kernelbench_tasks(st)))
        assert sorted(lock.files) == sorted([pin.task_path(lv, t) for lv, t in keys] + ["LICENSE"]), name


@pytest.mark.parametrize("name", sorted(registry()))
def test_every_shipped_study_has_an_example_bundle_that_verifies(name):
    bundles = sorted(EXAMPLES.glob(f"{name}-full-*.tar"))
    assert bundles, f"no examples/{name}-full-*.tar"
    rep = verify_archive(bundles[-1], level="static")
    assert (rep.verdict, rep.exit_code, rep.partial) == ("PASS", 0, [])
    docs = next(t for t in rep.tiers if t.name == "documents")
    assert docs.details["study"] == {"name": name, "profile": "full", "judged_by": "verifier"}
    prov = next(t for t in rep.tiers if t.name == "provenance")
    assert prov.details["kernel_source_known"] is True


def test_the_published_claims_give_the_same_verdicts_on_the_results_committed_before_the_redesign():
    """``published-v1``: the result documents and claims.json of the bundle published before
    studies became folders; the study folder's claims file judges them identically."""
    v1 = FIXTURES / "published-v1"
    docs = {p.stem: json.loads(p.read_text()) for p in v1.glob("*.json") if p.stem != "claims"}
    old = json.loads((v1 / "claims.json").read_text())
    spec, _ = claims_mod.load_spec(studies_root() / "pointwise_fusion" / "claims.yaml")
    new = claims_mod.evaluate(spec, docs, source="recorded")
    assert [(c["id"], c["verdict"]) for c in new["claims"]] == [(c["id"], c["verdict"]) for c in old["claims"]]
    old.pop("spec")

    def before_literal(x):  # the literal readings (issue 12) are additions: every other field is as it was
        if isinstance(x, dict):
            return {k: before_literal(v) for k, v in x.items() if k not in ("literal_verdict", "literal", "resolved")}
        return [before_literal(v) for v in x] if isinstance(x, list) else x

    assert before_literal(json.loads(jsonio.dumps(new))) == old
    assert [c["id"] for c in new["claims"] if c["literal_verdict"] != c["verdict"]] == ["C08"]
    assert [c["id"] for c in new["claims"] if c["verdict"] == "fails"] == ["C10", "C11"]


def test_the_second_study_claims_correctness_bits_and_speed_against_every_baseline():
    spec, _ = claims_mod.load_spec(studies_root() / "layernorm" / "claims.yaml")
    denominators = {chk.get("denominator") for c in spec["claims"] for chk in c["checks"]}
    assert {"eager", "torchscript", "inductor"} <= denominators
    text = json.dumps(spec)
    assert "bit_identical" in text and "official.pass" in text


def test_a_study_the_verifier_does_not_ship_is_judged_as_the_authors():
    rep = verify_archive(USER_BUNDLE, level="static")
    assert (rep.verdict, rep.exit_code) == ("PARTIAL", 5)
    assert all(t.status == "PASS" for t in rep.tiers)
    assert any("not one this verifier ships" in r for r in rep.partial)
    assert any("author's definitions" in r for r in rep.partial)
    tiers = {t.name: t for t in rep.tiers}
    assert tiers["documents"].details["study"]["judged_by"] == "author"
    assert tiers["provenance"].details["kernel_source_known"] is False


def _user_bundle_files() -> tuple[str, dict[str, bytes], int]:
    files = {}
    with tarfile.open(USER_BUNDLE) as tf:
        for m in tf:
            top = m.name.split("/")[0]
            if m.isfile():
                files[m.name.split("/", 1)[1]] = tf.extractfile(m).read()
            mtime = m.mtime
    return top, files, mtime


def _reseal(tmp_path: Path, top: str, files: dict[str, bytes], mtime: int, info_study: str | None = None) -> Path:
    from kbrepro.bundle import pack

    info = []
    for line in files["bag-info.txt"].decode().splitlines():
        k, v = line.split(": ", 1)
        if k == "Study" and info_study is not None:
            v = info_study
        if k != "Payload-Oxum":
            info.append((k, v))
    payload = {p[len("data/"):]: b for p, b in files.items() if p.startswith("data/")}
    out = tmp_path / "forged.tar"
    out.write_bytes(pack.tar_bytes(pack.make_bag(top, payload, info), mtime=mtime))
    return out


def test_a_users_study_that_takes_a_shipped_name_fails(tmp_path):
    """The author renames the study to the shipped LayerNorm study (every record rewritten
    and resealed): the bundled folder is not the verifier's, so it fails, not partial."""
    top, files, mtime = _user_bundle_files()
    shipped = "layernorm-l1-40"
    raw = files["data/inputs/study/study.yaml"]
    assert b"name: \"l1_t19_relu\"" in raw
    raw = raw.replace(b'name: "l1_t19_relu"', f'name: "{shipped}"'.encode())
    files["data/inputs/study/study.yaml"] = raw
    import hashlib

    sha = hashlib.sha256(raw).hexdigest()
    for rel in ("data/bundle.json", "data/results/run.json"):
        doc = json.loads(files[rel])
        doc["study"]["name"] = shipped
        doc["study"]["sha256"] = sha
        doc["study"]["files"]["study.yaml"] = sha
        files[rel] = jsonio.dumps(doc).encode()
    forged = _reseal(tmp_path, top, files, mtime, info_study=f"{shipped} (quick)")
    rep = verify_archive(forged, level="static")
    assert rep.exit_code == 1
    msgs = [p.message for t in rep.tiers for p in t.problems]
    assert any("differs from this verifier's own" in m and "a bundle cannot redefine" in m for m in msgs), msgs


@pytest.fixture()
def fake_gpu(monkeypatch):
    """Replay's preconditions met on a CPU machine: a 'GPU' and a 'CuPy', and a run_study
    that records which study folder replay would run and writes nothing."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setitem(sys.modules, "cupy", types.ModuleType("cupy"))
    calls = []

    def fake_run_study(study, out, **kw):
        calls.append((study.folder, dict(study.files), kw.get("binding")))
        raise UsageError("stopped by the test after the study was chosen", "none")

    from kbrepro.harness import run as hr

    monkeypatch.setattr(hr, "run_study", fake_run_study)
    return calls


def test_replay_of_a_study_the_verifier_does_not_ship_is_refused_without_trust(fake_gpu):
    rep = verify_archive(USER_BUNDLE, level="replay")
    replay = rep.tiers[-1]
    assert replay.name == "replay" and replay.status == "FAIL" and rep.exit_code == 1
    assert "replay refused" in replay.problems[0].message
    assert "--trust-bundle-code" in replay.problems[0].message
    assert fake_gpu == []


def test_replay_with_trust_runs_the_bundles_own_study_folder(fake_gpu):
    _, files, _ = _user_bundle_files()
    with pytest.raises(UsageError, match="stopped by the test"):
        verify_archive(USER_BUNDLE, level="replay", trust=True)
    (folder, study_files, binding), = fake_gpu
    bundled = {p[len("data/inputs/study/"):]: b for p, b in files.items() if p.startswith("data/inputs/study/")}
    assert study_files == bundled
    assert studies_root().resolve() not in Path(folder).resolve().parents
    assert isinstance(binding, plugin.StudyBinding) and type(binding).__name__ == "MyReluBinding"
    assert not Path(folder).exists(), "the bundle's study folder is removed after replay"


def test_replay_of_a_shipped_study_runs_the_verifiers_own_folder(fake_gpu):
    (bundle,) = EXAMPLES.glob("layernorm-l1-40-full-*.tar")
    with pytest.raises(UsageError, match="stopped by the test"):
        verify_archive(bundle, level="replay")
    (folder, study_files, binding), = fake_gpu
    assert Path(folder).resolve() == (studies_root() / "layernorm").resolve()
    assert study_files == plugin.study_files(studies_root() / "layernorm")


# ------------------------------------------------------------------ the contract, a fixture study


def _fixture_study(tmp: Path) -> Path:
    """A minimal study folder that is neither shipped study: a sibling module imported
    relatively, an ``__init__.py`` that must never run, and caches that are not study files."""
    f = tmp / "fixture_study"
    (f / "__pycache__").mkdir(parents=True)
    (f / "__pycache__" / "binding.cpython-311.pyc").write_bytes(b"\0")
    (f / ".hidden").write_text("x")
    (f / "__init__.py").write_text("raise RuntimeError('a study package __init__ must never run')\n")
    (f / "helpers.py").write_text("NAMES = ('k0', 'k1')\n")
    (f / "binding.py").write_text(
        "from kbrepro.harness.plugin import StudyBinding\n"
        "from . import helpers\n\n\n"
        "class Fixture(StudyBinding):\n"
        "    scope_names = ('half',)\n\n"
        "    def kernel_names(self, study):\n"
        "        return helpers.NAMES\n\n"
        "    def candidate(self, ctx, task, variant, model):\n"
        "        return lambda *xs: xs[0]\n\n\n"
        "BINDING = Fixture()\n")
    return f


def test_a_binding_imports_as_a_namespace_package_and_its_init_never_runs(tmp_path):
    f = _fixture_study(tmp_path)
    b = plugin.load_binding(f, "binding.py")
    assert b.kernel_names(None) == ("k0", "k1") and b.scope_names == ("half",)
    assert b.stage_names(None) == [] and b.expected_blocks(None) == {} and b.import_originals(f) is None
    assert b.nan_input_paths == () and b.import_log_file is None
    assert sorted(plugin.study_files(f)) == ["binding.py", "helpers.py"]


def test_a_binding_without_BINDING_or_that_fails_to_import_is_one_usage_error(tmp_path):
    f = _fixture_study(tmp_path)
    (f / "nobinding.py").write_text("X = 1\n")
    (f / "broken.py").write_text("import no_such_module_anywhere\n")
    with pytest.raises(UsageError, match="defines no BINDING"):
        plugin.load_binding(f, "nobinding.py")
    with pytest.raises(UsageError, match="does not import: ModuleNotFoundError") as exc:
        plugin.load_binding(f, "broken.py")
    assert "\n" not in exc.value.message
    with pytest.raises(UsageError, match="is not a Python file"):
        plugin.load_binding(f, "missing.py")


def test_a_symlink_in_a_study_folder_is_refused(tmp_path):
    f = _fixture_study(tmp_path)
    (f / "link.cu").symlink_to(f / "helpers.py")
    with pytest.raises(UsageError, match="symbolic link"):
        plugin.study_files(f)
