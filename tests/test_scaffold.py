"""``python -m kbrepro.harness new-study``: a new study folder for a KernelBench task.

No real KernelBench checkout is needed: each test builds a tiny fake one in ``tmp_path``
(``KernelBench/level1/19_ReLU.py``, a LICENSE, one git commit). The generated folder must
load as a study for every profile, import its binding, parse its claims and pin the fake
checkout byte for byte; every refusal is one error line with its exit code and leaves
nothing behind.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from kbrepro.harness import plugin, scaffold
from kbrepro.harness.kernelbench import KernelBenchCheckout, load_lock
from kbrepro.harness.study import load_study

TASK_SOURCE = b'''import torch
import torch.nn as nn


class Model(nn.Module):
    """A fake KernelBench task for the scaffold tests: ReLU."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


batch_size = 16
dim = 1024


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
'''
LICENSE = b"MIT License (fake, for the scaffold tests)\n"
PROFILES = ("full", "quick", "extended")
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")


def _git(root: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e.invalid", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", "-C", str(root), *args], check=True, env=env, capture_output=True,
                          text=True).stdout.strip()


def _fake_checkout(root: Path, *, git: bool = True) -> Path:
    (root / "KernelBench" / "level1").mkdir(parents=True)
    (root / "KernelBench" / "level1" / "19_ReLU.py").write_bytes(TASK_SOURCE)
    (root / "KernelBench" / "level1" / "20_LeakyReLU.txt").write_bytes(b"not a task file\n")
    (root / "LICENSE").write_bytes(LICENSE)
    if git:
        _git(root, "init", "-q")
        _git(root, "add", "-A")
        _git(root, "commit", "-qm", "fake KernelBench")
    return root


@pytest.fixture()
def kb(tmp_path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    return _fake_checkout(tmp_path / "kb")


def invoke(*args, env=None):
    from kbrepro.harness.__main__ import cli

    try:
        runner = CliRunner(mix_stderr=False)  # click 8.1; 8.2 separates stderr always
    except TypeError:
        runner = CliRunner()
    return runner.invoke(cli, ["new-study", *map(str, args)], env=env)


def _tree(root: Path) -> list[str]:
    """Every path under ``root`` but the fake checkout, for 'nothing left behind'."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                  if p.relative_to(root).parts[0] != "kb")


@pytest.fixture()
def study(kb, tmp_path) -> Path:
    out = tmp_path / "l1_t19_relu"
    r = invoke("--level", 1, "--task", 19, "--kernelbench", kb, "--out", out)
    assert r.exit_code == 0, (r.stdout, r.stderr)
    return out


# ---------------------------------------------------------------------------- the folder
def test_scaffold_writes_the_folder_and_says_what_next(kb, tmp_path):
    out = tmp_path / "l1_t19_relu"
    r = invoke("--level", 1, "--task", 19, "--kernelbench", kb, "--out", out)
    assert r.exit_code == 0, (r.stdout, r.stderr)
    assert sorted(p.name for p in out.iterdir()) == sorted(scaffold.FILES)
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary file left
    text = r.stdout
    assert "l1_t19_relu" in text and "kernel.cu" in text
    assert f"python -m kbrepro.harness run --study {out} --profile quick --out results/" in text
    assert f"--kernelbench {kb}" in text
    assert f"python make_bundle.py pack results/l1_t19_relu-quick --study {out}" in text
    # the fake checkout is not KernelBench at the pinned commit: the user is told before any GPU work
    assert "a verifier refuses its bundles" in text.splitlines()[-1]
    assert r.stderr == ""


def _pinned_checkout(root: Path) -> Path:
    """A plain folder (no git) holding KernelBench's real level-1 task 19 and LICENSE at the
    pinned commit, taken from the committed user-study bundle."""
    import tarfile

    bundle = Path(__file__).resolve().parent / "fixtures" / "user-study-relu-quick.tar"
    with tarfile.open(bundle) as tf:
        for m in tf:
            rel = m.name.split("/", 1)[1] if "/" in m.name else ""
            prefix = "data/inputs/kernelbench/"
            if m.isfile() and rel.startswith(prefix) and not rel.endswith(".lock.json"):
                dest = root / rel[len(prefix):]
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(tf.extractfile(m).read())
    return root


def test_a_plain_folder_of_the_pinned_files_is_enough_and_the_lock_is_the_pins(tmp_path):
    from kbrepro import manifests

    kb = _pinned_checkout(tmp_path / "plain")
    assert not (kb / ".git").exists()
    out = tmp_path / "mine"
    r = invoke("--level", 1, "--task", 19, "--kernelbench", kb, "--out", out)
    assert r.exit_code == 0, (r.stdout, r.stderr)
    assert "warning" not in r.stdout
    lock = json.loads((out / "kernelbench.lock.json").read_text())
    pin = json.loads(manifests.path("kernelbench.pin.json").read_text())
    assert lock["commit"] == pin["commit"]
    assert lock["files"] == {k: pin["files"][k] for k in ("KernelBench/level1/19_ReLU.py", "LICENSE")}


def test_the_command_line_as_a_user_types_it(kb, tmp_path):
    import sys

    out = tmp_path / "typed"
    p = subprocess.run([sys.executable, "-m", "kbrepro.harness", "new-study", "--level", "1", "--task", "19",
                        "--kernelbench", str(kb), "--out", str(out)], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("study l1_t19_relu written to typed/") and "next steps:" in p.stdout
    # not in a clone (no make_bundle.py here): the installed console script packs it
    assert "  3. pack it: kbrepro-make pack results/typed-quick --study typed" in p.stdout
    assert sorted(x.name for x in out.iterdir()) == sorted(scaffold.FILES)
    p = subprocess.run([sys.executable, "-m", "kbrepro.harness", "new-study", "--level", "1", "--task", "19",
                        "--kernelbench", str(kb), "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stderr.startswith("error: --out ") and "is not empty" in p.stderr
    assert len(p.stderr.splitlines()) == 2 and p.stdout == ""


def test_an_existing_empty_folder_is_used(kb, tmp_path):
    out = tmp_path / "empty_study"
    out.mkdir()
    r = invoke("--level", 1, "--task", 19, "--kernelbench", kb, "--out", out)
    assert r.exit_code == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted(scaffold.FILES)


def test_every_profile_loads_with_the_generic_loader(study):
    for profile in PROFILES:
        cfg = load_study(study, profile)
        assert cfg.name == "l1_t19_relu" and cfg.profile == profile
        assert cfg.task_keys == [(1, 19)]
        (v,) = cfg.variants
        assert (v.name, v.route, v.options, v.expected_ftz) == (
            "nvrtc_precise", "nvrtc", ("--std=c++17", "--fmad=false", "--ftz=false"), False)
        assert cfg.variant_sources == {"nvrtc_precise": "kernel.cu"}
        doc = cfg.doc
        assert "witness" not in doc and "extra_shapes" not in doc
        assert doc["correctness"]["distributions"] == ["official_uniform", "normal", "uniform_x100",
                                                       "uniform_x_minus100"]
        assert set(doc["controls"]["graph_mutation"]) >= {"input_scale", "weight_delta"}
        assert doc["predicate"] == {"official": "allclose", "legacy": "legacy_reference_scaled",
                                    "atol": 1.0e-4, "rtol": 1.0e-4}
        assert doc["precision"] == {"allow_tf32_matmul": False, "allow_tf32_cudnn": False,
                                    "float32_matmul_precision": "highest"}
        assert cfg.claims_file == "claims.yaml" and cfg.lock_file == "kernelbench.lock.json"
        # the folder's __init__.py is packaging only: written, but not a file of the study
        assert "binding.py" in cfg.files and "__init__.py" not in cfg.files and (study / "__init__.py").is_file()
        assert sorted(cfg.files) == sorted(f for f in scaffold.FILES if f != "__init__.py")
    full, quick = load_study(study, "full").doc, load_study(study, "quick").doc
    assert len(full["correctness"]["seeds"]) > 1 and quick["correctness"]["seeds"] == [0]
    assert quick["timing"]["rounds"] < full["timing"]["rounds"]
    assert quick["timing"]["warmups"] < full["timing"]["warmups"]
    assert load_study(study, "extended").doc["extras"]["inductor"] is True
    raw = (study / "study.yaml").read_text()
    assert "TODO" in raw and raw.startswith("#")


def test_the_binding_imports_and_names_its_kernel(study):
    binding = plugin.load_binding(study, "binding.py")
    assert isinstance(binding, plugin.StudyBinding)
    assert type(binding).__name__ == "L1T19ReluBinding"
    cfg = load_study(study, "quick")
    assert binding.kernel_names(cfg) == ("candidate_kernel",)
    assert binding.kernelbench_tasks(cfg) == [(1, 19)]
    assert type(cfg.binding()).__name__ == "L1T19ReluBinding"


def test_the_binding_points_at_every_optional_hook(study):
    """Each hook of the contract besides the two it implements is named in a TODO."""
    text = (study / "binding.py").read_text()
    hooks = [n for n, v in vars(plugin.StudyBinding).items()
             if not n.startswith("_") and n not in ("kernel_names", "candidate")]
    assert len(hooks) >= 15
    for name in hooks:
        assert f"``{name}" in text, name
    assert "TODO" in text


class _Kernels:
    def __init__(self):
        self.launches = []

    def launch(self, name, grid, block, args, *, device_index=0, stream=None, shared_bytes=0):
        self.launches.append((name, tuple(grid), tuple(block), args, device_index))


class _Ctx:
    def __init__(self):
        self.kernels = {"nvrtc_precise": _Kernels()}
        self.device_index = 3


def test_the_candidate_launches_as_the_contract_says(study, monkeypatch):
    """Without a GPU: the launch's name, grid, block, arguments and device, on a
    non-contiguous input (the kernel must see a contiguous copy)."""
    torch = pytest.importorskip("torch")
    import numpy

    from kbrepro.kernels.launch import blocks_for

    binding = plugin.load_binding(study, "binding.py")
    module = __import__("sys").modules[type(binding).__module__]
    monkeypatch.setattr(module, "check_float32_cuda", lambda x, what, ndim=None: None)  # CPU tensors here
    ctx = _Ctx()
    fn = binding.candidate(ctx, 19, "nvrtc_precise", model=None)
    x = torch.rand(300, 7).t()
    assert not x.is_contiguous()
    y = fn(x)
    assert y.shape == x.shape and y.dtype == torch.float32 and y.is_contiguous()
    ((name, grid, block, args, dev),) = ctx.kernels["nvrtc_precise"].launches
    assert (name, grid, block, dev) == ("candidate_kernel", (blocks_for(2100),), (256,), 3)
    assert args[1] == y.data_ptr() and args[0] != x.data_ptr()  # a contiguous copy of x
    assert isinstance(args[2], numpy.int64) and int(args[2]) == 2100


def test_the_kernel_stub(study):
    src = (study / "kernel.cu").read_text()
    assert 'extern "C" __global__ void candidate_kernel(const float* x, float* y, long long n)' in src
    assert src.count("__global__") == 1
    assert "replace with your kernel" in src
    src.encode("ascii")


def test_the_claims_parse(study):
    raw = (study / "claims.yaml").read_bytes()
    try:
        from kbrepro.bundle.claims import parse_spec
    except ImportError:  # the tree is mid-refactor: fall back to the schema alone
        from kbrepro import schemas
        from kbrepro.harness import bounded

        spec = bounded.load_yaml(raw, "claims")
        assert schemas.validate(spec, "claims-spec") == []
    else:
        spec = parse_spec(raw, "claims.yaml")
    assert spec["study"] == load_study(study, "full").name == "l1_t19_relu"
    assert spec["bootstrap"] == {"level": 0.95, "resamples": 10000, "seed": 20261201}
    c = {x["id"]: x["checks"] for x in spec["claims"]}
    assert list(c) == ["C01", "C02", "C03"]
    assert c["C01"] == [{"kind": "all_equal", "equals": True,
                         "select": "correctness.full_program[*].checks.nvrtc_precise.official.pass"}]
    assert c["C02"] == [{"kind": "pairs_equal", "select":
                         "correctness.full_program[*].checks.nvrtc_precise.[bit_identical_count, element_count]"}]
    assert c["C03"] == [{"kind": "paired_ratio", "blocks": "timings.blocks[?kind=='study' && scope=='full']",
                         "numerators": ["nvrtc_precise"], "denominator": "eager", "test": "faster"}]
    assert raw.decode().startswith("#") and "bootstrap" in raw.decode()


def test_the_lock_pins_the_checkout(study, kb):
    lock = load_lock(study / "kernelbench.lock.json")  # schema-checked
    assert lock.commit == _git(kb, "rev-parse", "HEAD")
    assert dict(lock.files) == {"KernelBench/level1/19_ReLU.py": hashlib.sha256(TASK_SOURCE).hexdigest(),
                                "LICENSE": hashlib.sha256(LICENSE).hexdigest()}
    assert lock.repository == "https://github.com/ScalingIntelligence/KernelBench.git"
    raw = (study / "kernelbench.lock.json").read_bytes()
    assert raw == (json.dumps(json.loads(raw), indent=2, sort_keys=True) + "\n").encode()  # the committed format
    checkout = KernelBenchCheckout(kb, lock)  # what the engine's set-up checks
    checkout.verify()
    assert checkout.commit_verified_by == "git HEAD and file hashes"
    pytest.importorskip("torch")
    assert hasattr(checkout.load_task(1, 19), "Model")


def test_the_default_name_and_folder(kb, tmp_path, monkeypatch):
    from kbrepro.harness import kernelbench

    monkeypatch.setattr(kernelbench, "PROJECT_ROOT", tmp_path / "project")
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "pyproject.toml").write_text("[project]\nname = 'kbrepro'\n")  # a source checkout
    r = invoke("--level", 1, "--task", 19, "--kernelbench", kb)
    assert r.exit_code == 0, r.stderr
    folder = tmp_path / "project" / "studies" / "l1_t19_relu"
    assert sorted(p.name for p in folder.iterdir()) == sorted(scaffold.FILES)
    r = invoke("--level", 1, "--task", 19, "--kernelbench", kb, "--name", "relu.v2-x")
    assert r.exit_code == 0, r.stderr
    folder2 = tmp_path / "project" / "studies" / "relu_v2_x"
    monkeypatch.undo()
    assert load_study(folder2, "quick").name == "relu.v2-x"
    assert type(plugin.load_binding(folder2, "binding.py")).__name__ == "ReluV2XBinding"


def test_an_installed_package_writes_the_default_folder_here_not_into_site_packages(kb, tmp_path, monkeypatch):
    """After a plain ``pip install .`` the package lives in site-packages (no pyproject.toml
    beside it): a study written there would vanish with the next upgrade."""
    from kbrepro.harness import kernelbench

    installed = tmp_path / "venv" / "lib" / "site-packages" / "kbrepro"
    installed.mkdir(parents=True)
    monkeypatch.setattr(kernelbench, "PROJECT_ROOT", installed)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    r = invoke("--level", 1, "--task", 19, "--kernelbench", kb)
    assert r.exit_code == 0, r.stderr
    assert sorted(p.name for p in (work / "studies" / "l1_t19_relu").iterdir()) == sorted(scaffold.FILES)
    assert not (installed / "studies").exists()


def test_the_checkout_from_the_environment(kb, tmp_path):
    r = invoke("--level", 1, "--task", 19, "--out", tmp_path / "s", env={"KBREPRO_KERNELBENCH": str(kb)})
    assert r.exit_code == 0, r.stderr
    assert "--kernelbench" not in r.stdout


@pytest.mark.parametrize("stem,level,name", [
    ("19_ReLU", 1, "l1_t19_relu"),
    ("53_Gemm_Scaling_Hardtanh_GELU", 2, "l2_t53_gemm_scaling_hardtanh_gelu"),
    ("7_Matmul__With--Odd  Chars", 1, "l1_t7_matmul_with_odd_chars"),
    ("12_", 3, "l3_t12"),
    ("1_" + "Long" * 30, 4, ("l4_t1_" + "long" * 30)[:64]),
])
def test_derived_names(stem, level, name):
    got = scaffold.derive_name(level, stem)
    assert got == name and scaffold.NAME_RE.match(got)


@pytest.mark.parametrize("name,folder", [
    ("l1_t19_relu", "l1_t19_relu"), ("pointwise-fusion.v2", "pointwise_fusion_v2"),
    ("19relu", "study_19relu"), ("import", "import_study"), ("a.b-c", "a_b_c"), ("study", "study"),
])
def test_folder_names_are_identifiers(name, folder):
    got = scaffold.folder_for(name)
    assert got == folder and got.isidentifier()
    cls = scaffold.class_name_for(got)
    assert cls.isidentifier() and cls.endswith("Binding") and cls != "StudyBinding"


def test_the_current_folder_as_out(kb, tmp_path, monkeypatch):
    here = tmp_path / "here_study"
    here.mkdir()
    monkeypatch.chdir(here)
    r = invoke("--level", 1, "--task", 19, "--kernelbench", kb, "--out", ".")
    assert r.exit_code == 0, r.stderr
    assert "--out results/here_study-quick" in r.stdout
    assert sorted(p.name for p in here.iterdir()) == sorted(scaffold.FILES)


# ---------------------------------------------------------------------------- refusals
def _one_error(r, code: int, *fragments: str) -> None:
    assert r.exit_code == code, (r.exit_code, r.stdout, r.stderr)
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.stdout == ""
    lines = r.stderr.rstrip("\n").splitlines()
    assert 1 <= len(lines) <= 2 and lines[0].startswith("error: "), r.stderr
    if len(lines) == 2:
        assert lines[1].startswith("  -> "), r.stderr
    assert "Traceback" not in r.stderr
    for f in fragments:
        assert f in lines[0], (f, r.stderr)


@pytest.mark.parametrize("args,code,fragment", [
    (["--task", 20], 2, "has no task 20"),
    (["--task", 19, "--level", 2], 2, "has no task 19"),
    (["--task", 19, "--name", "Bad_Name"], 2, "study name 'Bad_Name' is not valid"),
    (["--task", 19, "--name", "-x"], 2, "is not valid"),
    (["--task", 19, "--name", "x" * 65], 2, "is not valid"),
    (["--task", 19, "--out", "{tmp}/1study"], 2, "not a Python identifier"),
    (["--task", 19, "--out", "{tmp}/my-study"], 2, "not a Python identifier"),
    (["--task", 19, "--out", "{tmp}/class"], 2, "not a Python identifier"),
    (["--task", 19, "--kernelbench", "{tmp}/nowhere"], 3, "no KernelBench checkout at"),
    (["--task", 0], 2, "--task"),
    (["--task", 19, "--level", 10], 2, "--level"),
    ([], 2, "--task"),
])
def test_refusals(kb, tmp_path, args, code, fragment):
    base = ["--level", 1] if "--level" not in args else []
    args = [str(a).replace("{tmp}", str(tmp_path)) for a in args]
    if not any(a == "--kernelbench" for a in args):
        args += ["--kernelbench", str(kb)]
    if not any(a == "--out" for a in args):
        args += ["--out", str(tmp_path / "new_study")]
    before = _tree(tmp_path)
    r = invoke(*base, *args)
    _one_error(r, code, fragment)
    assert _tree(tmp_path) == before


def test_a_non_empty_folder_is_refused_and_kept(kb, tmp_path):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    before = _tree(tmp_path)
    r = invoke("--level", 1, "--task", 19, "--kernelbench", kb, "--out", out)
    _one_error(r, 2, "is not empty")
    assert _tree(tmp_path) == before and (out / "notes.txt").read_text() == "mine\n"
    (out / "notes.txt").unlink()
    (out / "file_not_folder").write_text("x")
    r = invoke("--level", 1, "--task", 19, "--kernelbench", kb, "--out", out / "file_not_folder")
    _one_error(r, 2, "not a folder")


def test_the_default_folder_taken_is_refused(kb, tmp_path, monkeypatch):
    from kbrepro.harness import kernelbench

    monkeypatch.setattr(kernelbench, "PROJECT_ROOT", tmp_path / "project")
    (tmp_path / "project" / "studies" / "l1_t19_relu").mkdir(parents=True)
    (tmp_path / "project" / "pyproject.toml").write_text("[project]\nname = 'kbrepro'\n")
    (tmp_path / "project" / "studies" / "l1_t19_relu" / "study.yaml").write_text("x: 1\n")
    before = _tree(tmp_path)
    r = invoke("--level", 1, "--task", 19, "--kernelbench", kb)
    _one_error(r, 2, "study folder", "is not empty")
    assert "--name" in r.stderr  # the hint
    assert _tree(tmp_path) == before


@needs_git
def test_checkout_problems(tmp_path):
    """Not a git checkout (no commit to pin), an empty folder, no LICENSE, two task files."""
    plain = _fake_checkout(tmp_path / "plain", git=False)
    (tmp_path / "empty").mkdir()
    nolicense = tmp_path / "nolicense"
    _fake_checkout(nolicense, git=False)
    (nolicense / "LICENSE").unlink()
    _git(nolicense, "init", "-q")
    _git(nolicense, "add", "-A")
    _git(nolicense, "commit", "-qm", "x")
    twice = _fake_checkout(tmp_path / "twice")
    (twice / "KernelBench" / "level1" / "19_ReLU_again.py").write_bytes(TASK_SOURCE)
    before = _tree(tmp_path)
    for root, code, fragment in ((plain, 3, "is not a git checkout, and KernelBench/level1/19_ReLU.py is not"), (tmp_path / "empty", 3, "folder is empty"),
                                 (nolicense, 3, "has no LICENSE"), (twice, 2, "is ambiguous")):
        r = invoke("--level", 1, "--task", 19, "--kernelbench", root, "--out", tmp_path / "s")
        _one_error(r, code, fragment)
        assert _tree(tmp_path) == before


def test_the_python_api_raises_the_product_errors(kb, tmp_path):
    from kbrepro.errors import KernelBenchPinError, OutputPathError, UsageError

    with pytest.raises(KernelBenchPinError):
        scaffold.plan_study(1, 19, kernelbench=tmp_path / "nowhere", out=tmp_path / "s")
    with pytest.raises(UsageError):
        scaffold.plan_study(1, 21, kernelbench=kb, out=tmp_path / "s")
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "x").write_text("x")
    with pytest.raises(OutputPathError):
        scaffold.plan_study(1, 19, kernelbench=kb, out=tmp_path / "s")
    plan = scaffold.plan_study(1, 19, kernelbench=kb, out=tmp_path / "deep" / "er" / "t")
    assert not (tmp_path / "deep").exists()  # planning writes nothing
    assert set(plan.files) == set(scaffold.FILES) and plan.name == "l1_t19_relu"


@pytest.mark.parametrize("exc,code,line", [
    (OSError(28, "No space left on device"), 2, "error: cannot write"),
    (KeyboardInterrupt(), 130, "interrupted; nothing was written"),
])
def test_a_failure_while_writing_leaves_nothing(kb, tmp_path, monkeypatch, exc, code, line):
    from kbrepro.harness import jsonio

    real = jsonio.atomic_write_bytes
    calls = []

    def flaky(path, data):
        calls.append(path)
        if len(calls) == 3:
            raise exc
        real(path, data)

    monkeypatch.setattr(jsonio, "atomic_write_bytes", flaky)
    before = _tree(tmp_path)
    r = invoke("--level", 1, "--task", 19, "--kernelbench", kb, "--out", tmp_path / "a" / "b" / "new_study")
    assert r.exit_code == code, (r.stdout, r.stderr)
    assert r.stderr.splitlines()[0].startswith(line), r.stderr
    assert len(calls) == 3
    assert _tree(tmp_path) == before  # the files written and the folders made are gone


# ---------------------------------------------------------------------------- on a GPU
@pytest.mark.gpu
def test_the_stub_kernel_is_bit_identical_to_torch_relu(study):
    """The stub, compiled as the study compiles it and launched through the binding, gives
    torch.relu's bits, signed zeros, infinities, NaN and subnormals included."""
    import torch

    from kbrepro.kernels import compile as kc
    from kbrepro.kernels.launch import KernelSet

    cfg = load_study(study, "quick")
    binding = cfg.binding()
    props = torch.cuda.get_device_properties(0)
    (v,) = cfg.variants
    b = kc.compile_nvrtc(cfg.file("kernel.cu"), v, f"sm_{props.major}{props.minor}", program_name="kernel.cu")
    ctx = _Ctx()
    ctx.device_index = torch.cuda.current_device()
    ctx.kernels = {v.name: KernelSet(v.name, kc.load_cubin(b.cubin, binding.kernel_names(cfg)))}
    fn = binding.candidate(ctx, 19, v.name, model=None)
    special = torch.tensor([0.0, -0.0, 1e-45, -1e-45, 1e-40, -1e-40, float("inf"), float("-inf"), float("nan"),
                            -1.0, 1.0, 3.4e38, -3.4e38], device="cuda")
    for x in (special, torch.randn(4097, 33, device="cuda").t(), torch.rand(1000, device="cuda") * -100):
        y = fn(x)
        torch.cuda.synchronize()
        assert torch.equal(y.view(torch.int32), torch.relu(x).contiguous().view(torch.int32))
