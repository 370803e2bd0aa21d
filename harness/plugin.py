"""The study plug-in contract: what a study folder's binding module provides.

A study is a folder ``studies/<name>/`` holding ``study.yaml`` (generic keys, schema
``schemas/study.schema.json``), its CUDA sources, its claims YAML, its KernelBench lock and
one Python module (``binding: binding.py``) that defines ``BINDING``, an instance of a
subclass of :class:`StudyBinding`. The engine (:mod:`kbrepro.harness.run`), the packer and
the verifier call only the methods below; they never import a study. A study module may
import ``kbrepro.harness`` and ``kbrepro.kernels`` (never ``kbrepro.bundle``).

What the engine does for every study, in this order: set-up (GPU, precision modes, compile
cache off, KernelBench files verified against the study's lock, fingerprint); compile every
variant (NVRTC or CuPy) and save cubin/PTX/SASS with FTZ evidence; the FTZ witness if the
study has one; per task, full-program correctness over seeds x input distributions for every
variant, the timing-input check, TorchScript, CUDA-graph replay after mutation, the
binding's extra scopes (parts of the program, each with its own reference) and controls,
eligibility, and interleaved timing of every scope against eager, TorchScript (and
Inductor); the extra shapes; then the binding's own stages (probes); then the self-tests.

What a binding decides (each method documents its shapes and dtypes):

* how a task's model is built (:meth:`StudyBinding.model`) and its inputs drawn
  (:meth:`StudyBinding.inputs`), also at another size (:meth:`StudyBinding.model_at`);
* how a compiled variant runs the program (:meth:`StudyBinding.candidate`, required);
* which parts of the program are checked and timed apart (:meth:`StudyBinding.scopes`);
* which controls it adds per task (:meth:`StudyBinding.controls`), how graph mutation
  changes the parameters (:meth:`StudyBinding.mutate`);
* the FTZ witness (:meth:`StudyBinding.witness`);
* its probes (:meth:`StudyBinding.stages`), their documents (:attr:`StudyBinding.documents`)
  and timing blocks (:meth:`StudyBinding.expected_blocks`);
* the sections it adds to REPORT.md (:meth:`StudyBinding.report_sections`), the checks a
  verifier makes of its documents (:meth:`StudyBinding.crosscheck`), and an importer of an
  author's original files (:meth:`StudyBinding.import_originals`).
"""
from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.machinery
import importlib.util
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from kbrepro.errors import UsageError
from kbrepro.harness import kernelbench

#: folders and suffixes never part of a study's file set; ``__init__.py`` is packaging only
#: (a study folder imports as a namespace package; a bundle never carries one)
_SKIP_PARTS = ("__pycache__", "__init__.py")
_SKIP_SUFFIXES = (".pyc", ".pyo")


@dataclass(frozen=True)
class Scope:
    """A part of the program checked and timed on its own (e.g. the pointwise tail after a
    GEMM). ``inputs``: the tensors the part takes (CUDA, float32); ``reference``: the
    PyTorch reference, called as ``reference(*inputs)``; ``candidate(variant)`` returns a
    zero-argument callable that runs the variant's kernel on ``inputs``; ``bytes_moved``:
    bytes one call must read and write at least (for the roofline), or None; ``torchscript``:
    whether a traced TorchScript twin of the reference is checked and timed; ``owner``: the
    ``torch.nn.Module`` whose parameters the reference reads (registered in the traced twin,
    so its parameters stay parameters, not constants)."""

    name: str
    inputs: tuple
    reference: Callable
    candidate: Callable[[str], Callable[[], Any]]
    bytes_moved: int | None = None
    torchscript: bool = True
    owner: Any = None


@dataclass(frozen=True)
class SizedCase:
    """A task built at another size (extra shapes): ``model`` and ``inputs`` (CUDA tensors);
    ``case``: fields recorded in the
    case and the timing block (e.g. ``{"shape_B_K_H": [128, 1024, 1024]}``); ``shape``: the
    output shape recorded with the timing block. Block ids end in
    :meth:`StudyBinding.size_label` of the size (``label`` is informative only)."""

    model: Any
    inputs: tuple
    case: Mapping[str, Any]
    shape: tuple
    label: str = ""


@dataclass(frozen=True)
class WitnessRun:
    """An FTZ witness as a binding defines it. ``make(device)`` builds the witness input
    (a float32 tensor) on ``"cpu"`` or ``"cuda"``; ``reference(x)`` is the PyTorch reference
    on that input, on either device; ``candidate(variant)`` runs the variant on the CUDA
    input and returns its output (float32, the reference's shape). The engine decides by
    itself whether the witness discriminates: on the CPU it computes the reference with
    denormals kept and flushed (``torch.set_flush_denormal``); only elements where the two
    differ may judge a binary."""

    make: Callable[[str], Any]
    reference: Callable[[Any], Any]
    candidate: Callable[[str], Any]
    description: str


class StudyBinding:
    """Base class of a study's binding. Override what the study needs; the defaults fit a
    KernelBench task whose whole ``Model.forward`` the kernel replaces.

    Class attributes:

    * ``documents``: study-only result documents, name -> schema file relative to the study
      folder (the document names itself ``kbrepro/<name>``);
    * ``section_schemas``: schemas of the sections the study adds to product documents,
      document name -> schema file (applied to the whole document, so it should constrain
      only its own keys);
    * ``custom_schema``: schema file of ``study.yaml``'s ``custom`` mapping, or None;
    * ``scope_names``: names of the scopes :meth:`scopes` returns (so the verifier knows them);
    * ``section_names``: names of the per-task control sections :meth:`controls` returns;
    * ``import_log_file``: the name of the author's run log among the files
      :meth:`import_originals` reads (packed as ``logs/run.log``), or None;
    * ``nan_input_paths``: JSON-path fragments of check records (ours or the author's files)
      whose inputs hold NaN or infinities (the predicate audit decides those by equality).
    """

    documents: Mapping[str, str] = {}
    section_schemas: Mapping[str, str] = {}
    custom_schema: str | None = None
    scope_names: tuple[str, ...] = ()
    section_names: tuple[str, ...] = ()
    import_log_file: str | None = None
    nan_input_paths: tuple[str, ...] = ()

    # ------------------------------------------------------------------ static
    def validate(self, study) -> list[str]:
        """Problems of the resolved study definition that only the binding can see (e.g. a
        ``custom`` setting naming a variant the study does not compile), as one-line
        messages; called when the binding is loaded, before any GPU work. Default: none."""
        return []

    def kernel_names(self, study) -> tuple[str, ...]:
        """Entry points of the compiled module every variant must export."""
        raise NotImplementedError("a binding must name its kernels (kernel_names)")

    def kernelbench_tasks(self, study) -> list[tuple[int, int]]:
        """Every ``(level, task)`` whose KernelBench file the run loads (default: the study's
        tasks and the witness task)."""
        out = list(study.task_keys)
        if study.witness_task is not None and study.witness_task not in out:
            out.append(study.witness_task)
        return out

    def stage_names(self, study) -> list[str]:
        """Names of the stages :meth:`stages` runs, in order (the verifier checks them)."""
        return [name for name, _ in self.stages(study)]

    # ------------------------------------------------------------------ building
    def model(self, ctx, task: int, module, seed: int):
        """The task's ``Model`` after ``torch.manual_seed(seed)``, built with the task's
        ``get_init_inputs()`` on the CPU and moved to CUDA, in eval mode."""
        import torch

        torch.manual_seed(seed)
        return module.Model(*module.get_init_inputs()).cuda().eval()

    def inputs(self, ctx, task: int, module) -> tuple:
        """The task's ``get_inputs()`` (drawn from the CPU generator right after
        :meth:`model`), moved to CUDA."""
        return tuple(x.cuda() if hasattr(x, "cuda") else x for x in module.get_inputs())

    def model_at(self, ctx, task: int, module, size: Mapping[str, int], seed: int) -> SizedCase:
        """The task at another size (``extra_shapes[].size`` of the study). The default
        refuses: a study with extra shapes must say how they are built."""
        raise UsageError("this study's binding does not build tasks at other sizes",
                         "remove extra_shapes from study.yaml or implement model_at in the binding")

    def size_label(self, size: Mapping[str, int]) -> str:
        """The id suffix of an extra shape's timing blocks (default ``batch128_dim64``)."""
        return "_".join(f"{k}{v}" for k, v in size.items())

    def candidate(self, ctx, task: int, variant: str, model) -> Callable:
        """A callable running the whole program with ``variant``'s kernels:
        ``fn(*inputs) -> tensor`` of the shape and dtype of ``model(*inputs)``, launched on
        the current CUDA stream (so that CUDA-graph capture records it)."""
        raise NotImplementedError("a binding must say how a variant runs the program (candidate)")

    def scopes(self, ctx, task: int, model, inputs: tuple) -> list[Scope]:
        """Parts of the program checked and timed apart, besides the full program."""
        return []

    def controls(self, ctx, task: int, model, inputs: tuple, scopes: Sequence[Scope]) -> dict[str, list[dict]]:
        """Extra controls of one task: section name -> list of records, each
        ``{"name", "shape", "criterion", "checks": {variant: check}}`` (``ctx.checks``).
        Every check of every record counts for the variant's timing eligibility."""
        return {}

    def mutate(self, ctx, task: int, model, mutation: Mapping[str, float]) -> None:
        """Change the model's parameters in place for the CUDA-graph replay control (the
        engine scales the inputs itself and restores everything afterwards). Default: every
        floating parameter += ``weight_delta``."""
        for p in model.parameters():
            if p.is_floating_point():
                p.data.add_(mutation["weight_delta"])

    def witness(self, ctx, task: int, module, inputs: Sequence[float]) -> WitnessRun | None:
        """The FTZ witness at ``inputs`` (floats), or None if this study has none."""
        return None

    # ------------------------------------------------------------------ probes
    def stages(self, study) -> list[tuple[str, Callable]]:
        """The study's own stages after the per-task stages and extra shapes:
        ``[(name, fn(ctx))]``. Each writes its documents through ``ctx``."""
        return []

    def extra_blocks(self, ctx, task: int, model, inputs: tuple) -> None:
        """Timing blocks a task adds beyond its scopes (e.g. a roofline of its GEMM)."""

    def expected_blocks(self, study) -> dict[str, dict]:
        """id -> ``{"kind", "protocol" (doc), "arms" (list or None)}`` of every timing block
        the study's own stages and :meth:`extra_blocks` write (the verifier checks them)."""
        return {}

    # ------------------------------------------------------------------ bundle side
    def report_sections(self, study_doc: Mapping, documents: Mapping[str, dict]) -> list[str]:
        """Markdown sections for REPORT.md (each starting with ``## ``), rendered only from
        ``documents``; cells must go through ``harness.plugin.md_table``."""
        return []

    def crosscheck(self, study, documents: Mapping[str, dict], imported: bool) -> list[dict]:
        """Problems the verifier finds in the study's own sections and documents, as
        ``{"file", "path", "message", "expected", "found"}`` dicts. Must not raise."""
        return []

    def provenance(self, documents: Mapping[str, dict], files: Mapping[str, bytes]) -> list[dict]:
        """Tier-4 problems the study finds from raw bytes (``files``: bag paths -> bytes, e.g.
        sizes read from the bundled KernelBench task files). Must not raise."""
        return []

    def import_originals(self, folder: Path):
        """Convert an author's original result files in ``folder`` into our documents, or
        None if this study has no importer (see the published study's importer)."""
        return None


# ---------------------------------------------------------------------------- helpers
def md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table; every cell is made one inert line (``|`` escaped)."""
    def cell(v: Any) -> str:
        s = "" if v is None else str(v)
        return s.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")

    out = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return "\n".join(out) + "\n"


def study_files(folder: Path) -> dict[str, bytes]:
    """Every file of a study folder, relative POSIX path -> bytes, sorted; caches and
    compiled Python left out. Raises UsageError on a symlink or a folder deeper than 4."""
    folder = Path(folder)
    out: dict[str, bytes] = {}
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder)
        if any(part in _SKIP_PARTS or part.startswith(".") for part in rel.parts) or p.suffix in _SKIP_SUFFIXES:
            continue
        if p.is_symlink():
            raise UsageError(f"study folder {folder.name}: {rel.as_posix()} is a symbolic link",
                             "copy the file into the study folder")
        if p.is_dir():
            continue
        if len(rel.parts) > 4:
            raise UsageError(f"study folder {folder.name}: {rel.as_posix()} is nested too deep",
                             "keep study files at most three folders deep")
        out[rel.as_posix()] = p.read_bytes()
    return out


def files_digest(files: Mapping[str, bytes]) -> dict[str, str]:
    """sha256 hex of every file, by relative path."""
    return {k: hashlib.sha256(v).hexdigest() for k, v in sorted(files.items())}


def differing(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """The keys, sorted, whose values differ between ``a`` and ``b`` (present in only one counts)."""
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def _package_for(folder: Path) -> str:
    """A module name for a study folder: ``kbrepro.studies.<folder>`` for a folder of the
    product's own ``studies/``, else a private package keyed by the folder's path."""
    folder = folder.resolve()
    own = (kernelbench.PROJECT_ROOT / "studies").resolve()
    if folder.parent == own and folder.name.isidentifier():
        return f"kbrepro.studies.{folder.name}"
    return "kbrepro_study_" + hashlib.sha256(str(folder).encode()).hexdigest()[:16]


def load_binding(folder: Path, module_file: str) -> StudyBinding:
    """Import ``module_file`` of the study folder and return its ``BINDING``.

    The folder is imported as a package, so a binding may import its siblings relatively
    (``from . import tasks``). Raises UsageError if the module is missing, fails to import,
    or has no ``BINDING`` that is a :class:`StudyBinding`.
    """
    folder = Path(folder).resolve()
    path = folder / module_file
    if not path.is_file() or not module_file.endswith(".py"):
        raise UsageError(f"study {folder.name}: binding {module_file} is not a Python file in the study folder",
                         "set 'binding:' in study.yaml to the study's module, e.g. binding.py")
    pkg = _package_for(folder)
    mod_name = f"{pkg}.{module_file[:-3].replace('/', '.')}"
    try:
        if pkg.startswith("kbrepro.studies."):
            module = importlib.import_module(mod_name)
        else:
            if pkg not in sys.modules:  # a namespace package: the folder's __init__.py is never run
                spec = importlib.machinery.ModuleSpec(pkg, None, is_package=True)
                spec.submodule_search_locations = [str(folder)]
                sys.modules[pkg] = importlib.util.module_from_spec(spec)
            module = importlib.import_module(mod_name)
    except UsageError:
        raise
    except Exception as exc:
        raise UsageError(f"study {folder.name}: its binding {module_file} does not import: "
                         f"{type(exc).__name__}: {exc}", "fix the binding module") from exc
    binding = getattr(module, "BINDING", None)
    if not isinstance(binding, StudyBinding):
        raise UsageError(f"study {folder.name}: {module_file} defines no BINDING = <StudyBinding subclass>()",
                         "see harness/plugin.py for the contract")
    problems = contract_problems(binding)
    if problems:
        raise UsageError(f"study {folder.name}: {module_file}: {problems[0]}"
                         + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""),
                         "see harness/plugin.py for the contract (a helper of the binding's own starts with '_')")
    return binding


#: the names the engine, the packer and the verifier read from a binding
HOOKS = tuple(sorted(n for n in vars(StudyBinding) if not n.startswith("_")))
#: how close (difflib ratio) a name of the binding's own may come to a hook's name before it is
#: taken for a misspelled hook (``scope`` for ``scopes``, ``report_section`` for
#: ``report_sections``, ``crosschecks`` for ``crosscheck``)
MISSPELLED_RATIO = 0.8


def contract_problems(binding: StudyBinding) -> list[str]:
    """What of ``binding`` breaks the plug-in contract, as one-line messages: a public name of
    its own class that is not a hook but nearly spells one (a misspelled hook would silently
    leave the default in place), a hook overridden by something of another kind (a method by
    a value, or a value by a method), and a hook method that cannot be called as the engine
    calls it (the base method's positional parameters)."""
    out = []
    own = {}
    for cls in type(binding).__mro__:
        if cls is StudyBinding or cls is object:
            break
        for name, value in vars(cls).items():
            own.setdefault(name, value)
    for name in sorted(own):
        if name.startswith("_"):
            continue
        if name not in HOOKS:
            near = difflib.get_close_matches(name, HOOKS, n=1, cutoff=MISSPELLED_RATIO)
            if near:
                out.append(f"{name!r} is not a hook of the contract; did you mean {near[0]!r}?")
            continue
        base = vars(StudyBinding)[name]
        if callable(base) != callable(getattr(binding, name)):
            out.append(f"{name!r} must be {'a method' if callable(base) else 'a value, not a method'}, "
                       "as in StudyBinding")
            continue
        if callable(base):
            n = len([p for p in inspect.signature(base).parameters.values()
                     if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]) - 1  # (self)
            try:
                inspect.signature(getattr(binding, name)).bind(*([None] * n))
            except TypeError:
                out.append(f"{name}() does not take the {n} argument{'s' if n != 1 else ''} the engine passes "
                           f"({', '.join(list(inspect.signature(base).parameters)[1:])})")
            except ValueError:  # a callable inspect cannot read (a builtin): not ours to judge
                pass
    return out


__all__ = ["StudyBinding", "Scope", "SizedCase", "WitnessRun", "md_table", "study_files", "files_digest",
           "differing", "load_binding", "contract_problems", "HOOKS"]
