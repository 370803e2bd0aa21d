"""A new study folder for a KernelBench task: ``python -m kbrepro.harness new-study``.

    python -m kbrepro.harness new-study --level 1 --task 19
    python -m kbrepro.harness new-study --level 1 --task 19 --name relu-study --out studies/relu_study

writes ``studies/<folder>/`` (or ``--out``) with everything the engine needs to run the task
with one candidate kernel, as a starting point to edit:

* ``study.yaml``: the generic study definition (``schemas/study.schema.json``), one NVRTC
  variant ``nvrtc_precise`` (``--fmad=false --ftz=false``), profiles full, quick, extended;
* ``kernel.cu``: one ``extern "C"`` elementwise kernel ``candidate_kernel`` (a ReLU body);
* ``binding.py``: ``BINDING``, a :class:`~kbrepro.harness.plugin.StudyBinding` for a
  single-input elementwise program, with a TODO for every optional hook of the contract;
* ``claims.yaml``: three claims (official check, bit identity, faster than eager);
* ``kernelbench.lock.json``: the pinned commit (the checkout's HEAD if its files are not the
  product's pinned ones, with a warning) and the sha256 of the task file and LICENSE;
* ``__init__.py``: so that the folder imports as a package.

Everything is checked before anything is written: the study name, the folder (its name must
be a Python identifier; it must be new or empty), the KernelBench checkout (a git checkout,
:class:`~kbrepro.errors.KernelBenchPinError` otherwise) and the task file (exactly one
``KernelBench/level{L}/{T}_*.py``). The folder is created only then, every file is written
atomically, and a failure part way removes what was written. Errors come from
:mod:`kbrepro.errors`; the CLI edge turns them into exit codes.
"""
from __future__ import annotations

import hashlib
import json
import keyword
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from kbrepro.errors import KernelBenchPinError, OutputPathError, UsageError
from kbrepro import schemas
from kbrepro.harness import bounded, jsonio
from kbrepro.harness.kernelbench import git_head, load_pin, resolve_checkout, KernelBenchLock
from kbrepro.paths import prepare_output_dir, remove_created
from kbrepro.harness import kernelbench as kbpin  # (the module: tests move its PROJECT_ROOT)

#: the study name (``study.yaml`` ``name``, ``claims.yaml`` ``study``)
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
#: what a lock may name (``schemas/kernelbench-lock.schema.json`` ``propertyNames``)
_LOCK_PATH_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
REPOSITORY = "https://github.com/ScalingIntelligence/KernelBench.git"
VARIANT = "nvrtc_precise"
KERNEL = "candidate_kernel"
SOURCE = "kernel.cu"
LOCK = "kernelbench.lock.json"
#: the files a new study folder holds, in the order they are written
FILES = ("__init__.py", SOURCE, "binding.py", "claims.yaml", LOCK, "study.yaml")

_CHECKOUT_HINT = ("pass --kernelbench with a git checkout of KernelBench, set KBREPRO_KERNELBENCH, or run "
                  "'git submodule update --init KernelBench' in the project root")


@dataclass(frozen=True)
class StudyPlan:
    """A study folder ready to be written: ``folder`` (where), ``name`` (the study's name),
    ``files`` (file name -> bytes) and what they were made from."""

    folder: Path
    name: str
    level: int
    task: int
    task_file: str
    commit: str
    checkout: Path
    kernelbench_given: str | None = None
    out_given: bool = False
    files: Mapping[str, bytes] = field(default_factory=dict)
    #: the task file and LICENSE have the product's pinned hashes (else bundles will not verify)
    pinned: bool = True


# ---------------------------------------------------------------------------- names
def derive_name(level: int, task_file_stem: str) -> str:
    """The default study name of a task file: ``19_ReLU`` at level 1 -> ``l1_t19_relu``."""
    task, _, rest = task_file_stem.partition("_")
    slug = re.sub(r"[^a-z0-9]+", "_", rest.lower()).strip("_")
    name = f"l{level}_t{task}" + (f"_{slug}" if slug else "")
    return name[:64].rstrip("._-")


def folder_for(name: str) -> str:
    """A folder name for study ``name`` that is a Python identifier (not a keyword), so the
    folder imports as a package: ``pointwise-fusion.v2`` -> ``pointwise_fusion_v2``."""
    folder = re.sub(r"[^A-Za-z0-9_]", "_", name)
    if not folder or folder[0].isdigit():
        folder = "study_" + folder
    if keyword.iskeyword(folder):
        folder += "_study"
    return folder


def class_name_for(folder: str) -> str:
    """The binding's class name: ``l1_t19_relu`` -> ``L1T19ReluBinding``."""
    cls = "".join(part[:1].upper() + part[1:] for part in folder.split("_") if part) + "Binding"
    return "StudyFolderBinding" if cls == "StudyBinding" else cls  # not the base class's name


def check_name(name: str) -> str:
    """``name`` if it is a valid study name, else UsageError."""
    if not NAME_RE.match(name or ""):
        raise UsageError(f"study name {name!r} is not valid: it must match {NAME_RE.pattern}",
                         "use lower-case letters, digits, '.', '_' and '-' (at most 64, starting with a letter or "
                         "digit), e.g. --name l1_t19_relu")
    return name


def check_folder_name(folder: Path) -> None:
    """UsageError unless the folder's own name is a Python identifier (not a keyword)."""
    base = Path(os.path.abspath(folder)).name
    if not base.isidentifier() or keyword.iskeyword(base):
        raise UsageError(f"--out {folder}: the folder name {base!r} is not a Python identifier, so the study "
                         "cannot import as a package",
                         f"name the folder with letters, digits and '_' (not starting with a digit), e.g. "
                         f"--out {Path(folder).parent / folder_for(base or 'study')}")


# ---------------------------------------------------------------------------- checkout
def find_task(root: Path, level: int, task: int) -> Path:
    """The one ``KernelBench/level{level}/{task}_*.py`` of the checkout. UsageError if none
    or several match (or the name cannot be pinned); KernelBenchPinError if it cannot be listed."""
    folder = root / "KernelBench" / f"level{level}"
    try:
        hits = sorted(p for p in folder.glob(f"{task}_*.py") if p.is_file()) if folder.is_dir() else []
    except OSError as exc:
        raise KernelBenchPinError(f"cannot list {folder}: {(exc.strerror or type(exc).__name__).lower()}",
                                  "check the KernelBench checkout") from exc
    if not hits:
        raise UsageError(f"KernelBench level {level} has no task {task} in {root} "
                         f"(no KernelBench/level{level}/{task}_*.py)",
                         "check --level and --task against the files of KernelBench/level<L>/")
    if len(hits) > 1:
        raise UsageError(f"KernelBench level {level} task {task} is ambiguous in {root}: "
                         + ", ".join(h.name for h in hits),
                         "remove the stray file from the checkout; exactly one task file may match")
    rel = hits[0].relative_to(root).as_posix()
    if not _LOCK_PATH_RE.match(rel):
        raise UsageError(f"task file {rel} has a name the KernelBench lock cannot hold",
                         "rename it with letters, digits, '.', '_' and '-' only")
    return hits[0]


def _checkout(kernelbench) -> tuple[Path, str | None]:
    """The checkout's root and its git HEAD (None for a plain folder of KernelBench files).
    KernelBenchPinError if there is none."""
    root = resolve_checkout(kernelbench)
    try:
        empty = root.is_dir() and not any(True for _ in os.scandir(root))
    except OSError as exc:
        raise KernelBenchPinError(f"cannot read the KernelBench checkout {root}: "
                                  f"{(exc.strerror or type(exc).__name__).lower()}", _CHECKOUT_HINT) from exc
    if not root.is_dir() or empty:
        raise KernelBenchPinError(f"no KernelBench checkout at {root}" + (" (the folder is empty)" if empty else ""),
                                  _CHECKOUT_HINT)
    return root, git_head(root)


def _pinned(rel: str, task_bytes: bytes, license_bytes: bytes) -> bool:
    """Whether the task file and LICENSE are KernelBench's at the product's pinned commit
    (``manifests/kernelbench.pin.json``), which the verifier requires."""
    pin = load_pin()
    return (pin.files.get(rel) == hashlib.sha256(task_bytes).hexdigest()
            and pin.files.get("LICENSE") == hashlib.sha256(license_bytes).hexdigest())


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise KernelBenchPinError(f"cannot read {what} {path}: {(exc.strerror or type(exc).__name__).lower()}",
                                  "check the KernelBench checkout") from exc


def default_studies_folder() -> Path:
    """Where ``new-study`` writes a study without ``--out``: the project's own ``studies/`` in a
    source checkout (``pip install -e .``: pyproject.toml beside the package), else ``studies/``
    in the current folder; never into an installed package (site-packages), where the next
    upgrade would remove the user's study."""
    root = kbpin.PROJECT_ROOT
    return root / "studies" if (root / "pyproject.toml").is_file() else Path.cwd() / "studies"


# ---------------------------------------------------------------------------- planning
def plan_study(level: int, task: int, *, name: str | None = None, out: str | os.PathLike | None = None,
               kernelbench: str | os.PathLike | None = None) -> StudyPlan:
    """Check everything and render every file of the new study; writes nothing.

    Raises UsageError (a bad level/task/name, no task file, a folder name that is not an
    identifier, an output that exists and is not an empty folder: OutputPathError) or
    KernelBenchPinError (no checkout, not a git checkout, LICENSE missing)."""
    if not (1 <= int(level) <= 9) or not (1 <= int(task) <= 9999):
        raise UsageError(f"level {level} task {task} is out of range", "--level is 1..9, --task 1..9999")
    if name is not None:
        check_name(name)
    if out is not None:
        check_folder_name(Path(out))
    root, head = _checkout(kernelbench)
    task_path = find_task(root, level, task)
    if not (root / "LICENSE").is_file():
        raise KernelBenchPinError(f"the KernelBench checkout {root} has no LICENSE file", _CHECKOUT_HINT)
    if name is None:
        name = check_name(derive_name(level, task_path.stem))
    if out is not None:
        folder = Path(out)
        what, hint = "--out", None
    else:
        folder = default_studies_folder() / folder_for(name)
        what, hint = "study folder", "pass another --name, or --out DIR"
    try:  # the checks of prepare_output_dir, without leaving a folder behind
        remove_created(prepare_output_dir(folder, what, must_be_empty=True)[1])
    except OutputPathError as exc:
        raise OutputPathError(exc.message, hint or exc.hint) from None
    rel = task_path.relative_to(root).as_posix()
    task_bytes = _read(task_path, "task file")
    license_bytes = _read(root / "LICENSE", "LICENSE")
    pinned = _pinned(rel, task_bytes, license_bytes)
    if pinned:  # the files are the pinned commit's, whatever the checkout's HEAD (or a plain folder)
        head = load_pin().commit
    elif head is None:
        raise KernelBenchPinError(f"{root} is not a git checkout, and {rel} is not KernelBench's file at the "
                                  "commit this product pins; cannot tell which commit to pin", _CHECKOUT_HINT)
    plan = StudyPlan(folder=folder, name=name, level=int(level), task=int(task), task_file=rel, commit=head,
                     checkout=root, kernelbench_given=None if kernelbench is None else str(kernelbench),
                     out_given=out is not None, pinned=pinned)
    files = render(plan, Path(os.path.abspath(folder)).name,
                   {rel: hashlib.sha256(task_bytes).hexdigest(), "LICENSE": hashlib.sha256(license_bytes).hexdigest()})
    _self_check(files)
    return StudyPlan(**{**plan.__dict__, "files": files})


def _self_check(files: Mapping[str, bytes]) -> None:
    """The rendered study.yaml, claims and lock against their schemas (a defect if not)."""

    for fname, schema in (("study.yaml", "study"), ("claims.yaml", "claims-spec"), (LOCK, "kernelbench-lock")):
        raw = files[fname]
        doc = json.loads(raw) if fname.endswith(".json") else bounded.load_yaml(raw, fname)
        problems = schemas.validate(doc, schema)
        if problems:
            raise RuntimeError(f"the scaffold rendered an invalid {fname}: {problems[0]}")


# ---------------------------------------------------------------------------- writing
def write_study(plan: StudyPlan) -> Path:
    """Create the folder and write every file atomically; on any failure (Ctrl-C included)
    remove what was written and the folders created. Raises OutputPathError."""
    folder, created = prepare_output_dir(plan.folder, "--out" if plan.out_given else "study folder")
    written: list[Path] = []
    try:
        for fname in FILES:
            path = folder / fname
            jsonio.atomic_write_bytes(path, plan.files[fname])
            written.append(path)
    except BaseException as exc:
        for path in written:
            try:
                path.unlink()
            except OSError:
                pass
        remove_created(created)
        if isinstance(exc, OSError):
            why = (exc.strerror or type(exc).__name__).lower()
            raise OutputPathError(f"cannot write {folder / fname}: {why}; nothing was written",
                                  "choose another --out" if plan.out_given else "pass --out DIR") from exc
        raise
    return folder


def new_study(level: int, task: int, *, name: str | None = None, out: str | os.PathLike | None = None,
              kernelbench: str | os.PathLike | None = None) -> StudyPlan:
    """:func:`plan_study` then :func:`write_study`; returns the plan written."""
    plan = plan_study(level, task, name=name, out=out, kernelbench=kernelbench)
    write_study(plan)
    return plan


def _shown(path: Path) -> str:
    """``path`` relative to the working folder where it lies below it, else absolute."""
    p = Path(os.path.abspath(path))
    try:
        return p.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return str(p)


def next_steps(plan: StudyPlan) -> list[str]:
    """The lines the CLI prints after writing ``plan``."""
    d = _shown(plan.folder)
    kb = f" --kernelbench {plan.kernelbench_given}" if plan.kernelbench_given else ""
    # in a clone the project's script is here; after a plain install only its console script is
    make = "python make_bundle.py" if Path("make_bundle.py").is_file() else "kbrepro-make"
    return [
        f"study {plan.name} written to {d}/ ({len(plan.files)} files; KernelBench {plan.task_file} "
        f"at commit {plan.commit[:12]})",
        "next steps:",
        f"  1. write your kernel in {d}/{SOURCE} (the stub is ReLU); adapt {d}/binding.py if the task is not a "
        "single-input elementwise program; fill in the TODOs of study.yaml and claims.yaml",
        f"  2. on a GPU machine: python -m kbrepro.harness run --study {d} --profile quick "
        f"--out results/{Path(os.path.abspath(plan.folder)).name}-quick{kb}",
        f"  3. pack it: {make} pack results/{Path(os.path.abspath(plan.folder)).name}-quick "
        f"--study {d}{kb}",
    ] + ([] if plan.pinned else [
        f"warning: {plan.task_file} or LICENSE is not KernelBench's file at the commit this product pins: the run "
        "will use it, but a verifier refuses its bundles; use a checkout of the pinned commit "
        "(python -m kbrepro.harness lock --study DIR rewrites the lock from the pin)"])


# ---------------------------------------------------------------------------- templates
def render(plan: StudyPlan, folder_name: str, hashes: Mapping[str, str]) -> dict[str, bytes]:
    """Every file of the new study folder, name -> bytes."""
    v = {"name": plan.name, "qname": json.dumps(plan.name), "level": plan.level, "task": plan.task,
         "task_file": plan.task_file, "stem": Path(plan.task_file).stem, "cls": class_name_for(folder_name),
         "variant": VARIANT, "kernel": KERNEL, "source": SOURCE, "lock": LOCK,
         "qtitle": json.dumps(f"KernelBench level {plan.level} task {plan.task} ({Path(plan.task_file).stem}): "
                              "one CUDA kernel for the whole program (TODO: say what the study shows)")}
    lock = KernelBenchLock(repository=REPOSITORY, commit=plan.commit, files=dict(hashes)).to_doc()
    return {
        "__init__.py": _INIT.format(**v).encode("ascii"),
        SOURCE: _KERNEL.format(**v).encode("ascii"),
        "binding.py": _BINDING.format(**v).encode("ascii"),
        "claims.yaml": _CLAIMS.format(**v).encode("ascii"),
        LOCK: jsonio.dumps(lock).encode("ascii"),
        "study.yaml": _STUDY.format(**v).encode("ascii"),
    }


_INIT = '''"""Study {name}: KernelBench level {level} task {task} ({task_file}), one candidate kernel
(written by 'python -m kbrepro.harness new-study'; see study.yaml)."""
'''

_STUDY = """\
# Study {name}: KernelBench level {level} task {task} ({task_file}), the whole Model.forward
# replaced by one CUDA kernel ({source}), compiled by NVRTC with IEEE-precise options.
# Written by 'python -m kbrepro.harness new-study'. Generic keys are validated by
# schemas/study.schema.json; every path is relative to this folder. Profiles override keys of
# the base definition (a deep merge): `full` is the base, `quick` runs in seconds, `extended`
# adds the measurements beyond the base.
#
# TODO, what to fill in:
#   * title: one line saying what the study shows (also the claims' sentences, claims.yaml);
#   * {source}: your kernel; binding.py: how it runs if the task is not one input -> one output
#     elementwise (see the TODOs there and kbrepro/harness/plugin.py);
#   * predicate: the tolerance of the official check (torch.allclose, reference first);
#   * variants: further compile variants to compare (e.g. --ftz=true, or route cupy_rawmodule);
#   * tasks: more tasks need their files' sha256 in {lock} too (the run checks every byte).
schema: kbrepro/study
schema_version: 2
name: {qname}
title: {qtitle}
binding: binding.py
claims: claims.yaml
kernelbench:
  lock: {lock}
tasks:
  - {{level: {level}, task: {task}}}
sources: [{source}]
# The official check is KernelBench's torch.allclose(reference, candidate) at atol and rtol;
# the legacy predicate is recorded beside it. TODO: the tolerance your kernel is held to.
predicate:
  official: allclose
  legacy: legacy_reference_scaled
  atol: 1.0e-4
  rtol: 1.0e-4
precision:
  allow_tf32_matmul: false
  allow_tf32_cudnn: false
  float32_matmul_precision: highest
# TODO: add variants to compare (each compiles {source} unless it names another `source`);
# expected_ftz says whether the binary flushes subnormals, and the run checks it.
variants:
  - name: {variant}
    route: nvrtc
    source: {source}
    options: ["--std=c++17", "--fmad=false", "--ftz=false"]
    expected_ftz: false
correctness:
  seeds: [0, 1, 2, 3, 4]
  # Inputs per seed, in this order, after torch.manual_seed(seed) and the task's Model(...):
  # the task's get_inputs() (CPU generator), then each further distribution drawn on the
  # device from the CUDA generator in the listed order.
  distributions: [official_uniform, normal, uniform_x100, uniform_x_minus100]
# CUDA-graph replay after changing the inputs (scaled in place) and the parameters
# (binding.mutate; by default every floating parameter += weight_delta).
controls:
  graph_mutation:
    input_scale: 0.9
    weight_delta: 1.0e-5
# Interleaved timing of every arm (eager, TorchScript, each eligible variant) in every round.
timing:
  seed: 42
  modes: [events, graph]
  warmups: 8
  rounds: 25
  invocations_per_pair: 5
  order_seed: 913
profiles:
  full: {{}}
  # Beyond the base: Inductor baseline, cold L2, measurement floor, roofline, self-tests,
  # and adaptive stopping of every study timing block.
  extended:
    extras:
      inductor: true
      cold_l2: true
      measurement_floor: true
      roofline: true
      self_test: true
      adaptive:
        target_rel_half_width: 0.005
        min_rounds: 10
        max_rounds: 400
        max_seconds: 6.0
  quick:
    correctness:
      seeds: [0]
    timing:
      warmups: 2
      rounds: 5
      invocations_per_pair: 2
"""

_KERNEL = """\
// {source} of study {name}: the candidate for KernelBench level {level} task {task}
// ({task_file}). Compiled by NVRTC as study.yaml says (variant {variant}:
// --std=c++17 --fmad=false --ftz=false); binding.py launches {kernel} with
// blocks_for(n) blocks of 256 threads on the contiguous float32 input, flattened; the
// grid-stride loop makes any grid correct.
//
// TODO: replace with your kernel. The stub is ReLU as PyTorch's CUDA kernel computes it
// (clamp_min(x, 0): NaN propagates, else fmaxf(x, 0)), so that it is bit-identical to the
// reference on a ReLU task and the generated claims C01 and C02 hold.

extern "C" __global__ void {kernel}(const float* x, float* y, long long n)
{{
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {{
        const float v = x[i];
        y[i] = (v != v) ? v : fmaxf(v, 0.0f);  // replace with your kernel
    }}
}}
"""

_BINDING = '''"""Binding of study {name}: KernelBench level {level} task {task} ({task_file}).

The engine (``kbrepro.harness.run.StudyRun``) calls only the methods of
``kbrepro.harness.plugin.StudyBinding``; read that module for the whole contract. A binding
may import ``kbrepro.harness`` and ``kbrepro.kernels``, never ``kbrepro.bundle``; torch and
numpy are imported inside the methods, so the module imports on a machine without a GPU.
"""
from __future__ import annotations

from kbrepro.harness.plugin import StudyBinding
from kbrepro.kernels.launch import THREADS_PER_BLOCK, blocks_for, check_float32_cuda

#: the entry point of {source} that every variant exports
KERNEL = "{kernel}"


class {cls}(StudyBinding):
    """One input -> one output of the same shape, elementwise, the whole ``Model.forward``
    replaced by ``{kernel}``.

    Optional hooks of the contract (``kbrepro/harness/plugin.py``); the defaults fit a
    KernelBench task whose whole forward the kernel replaces. TODO, where your study needs it:

    * ``model(ctx, task, module, seed)``: how the task's Model is built (default: seeded,
      ``Model(*get_init_inputs())`` on the CPU, then CUDA, eval mode);
    * ``inputs(ctx, task, module)``: how its inputs are drawn (default: ``get_inputs()`` on CUDA);
    * ``model_at(ctx, task, module, size, seed)``: the task at another size, needed only for
      ``extra_shapes`` in study.yaml (default: refuses); ``size_label(size)``: the id suffix of
      its timing blocks (default ``batch128_dim64``);
    * ``scopes(ctx, task, model, inputs)``: parts of the program checked and timed apart, each
      a ``plugin.Scope``; list their names in ``scope_names`` (default: none);
    * ``controls(ctx, task, model, inputs, scopes)``: extra per-task controls; list their
      section names in ``section_names`` (default: none);
    * ``mutate(ctx, task, model, mutation)``: how graph mutation changes the parameters
      (default: every floating parameter += ``weight_delta``);
    * ``witness(ctx, task, module, inputs)``: the FTZ witness, with ``witness:`` in study.yaml
      (default: none);
    * ``kernelbench_tasks(study)``: every KernelBench file the run loads (default: the tasks
      and the witness task);
    * ``stages(study)`` / ``stage_names(study)``: the study's own probes after the per-task
      stages; ``documents`` / ``section_schemas``: their result documents and schemas;
      ``extra_blocks(ctx, task, model, inputs)`` / ``expected_blocks(study)``: timing blocks
      they add (defaults: none);
    * ``custom_schema``: schema of study.yaml's ``custom`` mapping (default: none);
    * ``report_sections(study_doc, documents)``: sections of REPORT.md (default: none);
    * ``crosscheck(study, documents, imported)``: the verifier's checks of the study's own
      documents (default: none); ``provenance(documents, files)``: problems found from the
      bundle's raw bytes, e.g. sizes read from the KernelBench task files (default: none);
    * ``import_originals(folder)``: an importer of an author's original result files
      (default: none), ``import_log_file``: the name of their run log among them;
    * ``nan_input_paths``: JSON-path fragments of records whose inputs hold NaN or infinity,
      for the predicate audit (default: none);
    * ``validate(study)``: problems of study.yaml only the binding can see, e.g. a ``custom``
      setting naming a variant that does not exist (default: none).
    """

    def kernel_names(self, study) -> tuple[str, ...]:
        return (KERNEL,)

    def candidate(self, ctx, task: int, variant: str, model):
        """``fn(x) -> y``: {kernel} of ``variant`` on ``x`` (float32, made contiguous),
        into a new tensor of ``x``'s shape, on the current CUDA stream (so that CUDA-graph
        capture records it). TODO: a task with more inputs, parameters (``model``'s
        weights) or another output shape needs its own arguments here and in {source}."""
        import numpy
        import torch

        kernels = ctx.kernels[variant]
        device_index = ctx.device_index

        def run(x):
            x = x.contiguous()
            check_float32_cuda(x, "the input of {kernel}")
            y = torch.empty_like(x)
            n = x.numel()
            kernels.launch(KERNEL, (blocks_for(n),), (THREADS_PER_BLOCK,),
                           (x.data_ptr(), y.data_ptr(), numpy.int64(n)), device_index=device_index)
            return y

        return run


BINDING = {cls}()
'''

_CLAIMS = """\
# The findings of study {name}, each as a check on the result documents.
# Validated by schemas/claims-spec.schema.json; evaluated by bundle/claims.py.
#
# Values are selected with JMESPath (https://jmespath.org) from a root object whose keys are
# the document names: run, environment, compile, witness, correctness, timings; `live`
# holds checks the evaluator recomputes on its own CPU (the predicate-direction witness).
#
# Timing claims use per-round paired ratios (arms run interleaved in every round) and the
# percentile-bootstrap interval of their median. State every margin here, before any data.
#
# TODO: write the claims your study makes (each sentence a finding, each check what decides
# it); these three are what the stub kernel ({source}) should satisfy on a ReLU task.
schema: kbrepro/claims-spec
schema_version: 1
study: {qname}
bootstrap: {{level: 0.95, resamples: 10000, seed: 20261201}}
claims:
  - id: C01
    sentence: "Every {variant} full-program case passes the official check."
    checks:
      - kind: all_equal
        select: "correctness.full_program[*].checks.{variant}.official.pass"
        equals: true

  - id: C02
    sentence: "Every {variant} full-program case is bit-identical to PyTorch."
    checks:
      - kind: pairs_equal
        select: "correctness.full_program[*].checks.{variant}.[bit_identical_count, element_count]"

  - id: C03
    sentence: "The {variant} kernel is faster than eager PyTorch on the full program (events and graphs)."
    checks:
      - kind: paired_ratio
        blocks: "timings.blocks[?kind=='study' && scope=='full']"
        numerators: [{variant}]
        denominator: eager
        test: faster
"""
