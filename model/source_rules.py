"""What a candidate's source says it is: plain PyTorch, or a file that brings kernels of its own.

``custom_kernel_ran`` catches a candidate presented as a custom kernel whose calls run only
library kernels (PyTorch's, cuBLAS, Inductor's fused Triton kernels). A candidate that is plain
PyTorch presents no kernel of its own: the reference itself, or ``torch.compile`` of it, as
KernelBench's baselines are. For such a file the check has nothing to catch and stays undecided
(the candidate is "not a custom kernel", a PARTIAL verdict), never a catch (issue 28).

The rule is one function, :func:`plain_pytorch`, read by the engine and by the verifier from the
candidate's bundled bytes. It fails closed: a file is plain only if Python parses it, every
import is of an allowed module, and no name, attribute or string of it could bring or reach a
kernel of its own or hide what it imports (``exec``, ``getattr``, ``__import__``, a CUDA source
string). Anything else is judged as a custom kernel (a cheat that defines a kernel it never
launches, as ``tests/gpu_candidates/cheat_pytorch_fallback.py`` does, stays caught).
"""
from __future__ import annotations

import ast
import re
import warnings
from typing import Optional

#: the modules a plain PyTorch candidate may import, exactly (the pinned tasks' own imports)
ALLOWED_MODULES = frozenset({"__future__", "torch", "torch.nn", "torch.nn.functional", "torch.nn.init", "math", "typing",
                             "collections", "collections.abc", "itertools", "einops", "numpy"})
#: names a plain file never reads: they run, compile or import code the parser cannot see
DENIED_NAMES = frozenset({"exec", "eval", "compile", "__import__", "getattr", "setattr", "delattr", "globals",
                          "locals", "vars", "open", "__builtins__", "breakpoint", "importlib", "type"})
#: attributes a plain file never reads (besides every ``_private`` one but ``self._x``): kernel
#: builders and loaders, code from strings or files, and the ways around the rule
DENIED_ATTRS = frozenset({"cpp_extension", "jiterator", "library", "load_inline", "load_library", "dlpack",
                          "from_dlpack", "sys", "os", "importlib", "subprocess", "builtins", "ctypes", "cdll", "CDLL",
                          "system", "popen", "ctypeslib", "load", "loads", "save", "hub", "package", "get_type_hints",
                          "ForwardRef", "serialization", "pickle", "jit", "CompilationUnit", "ops", "classes",
                          "import_module", "memory", "CUDAPluggableAllocator", "tofile", "fromfile", "DataSource",
                          "lib", "testing", "f2py", "read_array", "singledispatch", "singledispatchmethod", "register",
                          "custom_op", "triton_op", "wrap_triton", "fx", "export", "compiler", "utils", "backends",
                          "modules_to_load", "cudart", "graphs", "nvtx", "profiler", "distutils",
                          "load_module", "exec_module", "find_spec"})
#: attribute names that hop into a module the allowed ones re-export (``torch.inspect.enum.bltns``,
#: ``typing.operator``) or reach a frame's or code object's builtins and globals
DENIED_HOPS = frozenset({"inspect", "operator", "functools", "types", "bltns", "enum", "copyreg", "contextlib", "io",
                         "platform", "threading", "multiprocessing", "dataclasses", "stdlib_re", "re", "weakref",
                         "warnings", "traceback", "linecache", "tokenize", "codecs", "pathlib", "shutil", "tempfile",
                         "socket", "signal", "glob", "json", "zipfile", "tarfile", "runpy", "pkgutil", "site",
                         "textwrap", "string", "struct", "mmap", "gc", "atexit", "marshal", "dis", "code", "codeop",
                         "exec", "eval", "__import__", "getattr", "setattr", "delattr", "globals", "locals", "vars",
                         "open", "breakpoint", "attrgetter", "methodcaller", "itemgetter"})
#: prefixes of frame, code and generator attributes (``gi_frame.f_builtins``)
DENIED_PREFIXES = ("f_", "co_", "gi_", "cr_", "ag_", "tb_", "func_")
#: a coding declaration (PEP 263) on a file's first two lines: any but UTF-8 makes Python read
#: other text than the rule parsed
CODING = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")
#: the dunder attributes a plain file may read
ALLOWED_DUNDERS = frozenset({"__init__", "__name__", "__doc__"})
#: strings no plain file holds: kernel sources and compiler inputs (a first line only: strings
#: built at run time are caught by what would compile them, never by this)
DENIED_TEXT = ("__global__", 'extern "C"', "__device__", "#include", ".entry", "@triton", "triton.jit", "load_inline",
               "cpp_extension", "jiterator", "load_library", "__import__")
#: the largest source this rule parses (bytes); a larger file is not plain
MAX_SOURCE = 1 << 20


def _methods(tree: ast.AST) -> set:
    """The functions defined directly in a class body (their first parameter is the instance
    or the class)."""
    return {id(f) for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for f in c.body
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _self_is_own(tree: ast.AST, nodes: list) -> bool:
    """Whether ``self``/``cls`` is only ever a method's own first parameter: never assigned,
    never another parameter, never a parameter of a function outside a class body."""
    methods = _methods(tree)
    for n in nodes:
        if isinstance(n, ast.Name) and n.id in ("self", "cls") and not isinstance(n.ctx, ast.Load):
            return False
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = n.args
            params = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs] + \
                [x.arg for x in (a.vararg, a.kwarg) if x is not None]
            first = params[:1] if id(n) in methods and (a.posonlyargs + a.args) else []
            if any(p in ("self", "cls") for p in params[len(first):]) or \
                    (first and first[0] in ("self", "cls") and id(n) not in methods):
                return False
        if isinstance(n, (ast.Global, ast.Nonlocal)) and set(n.names) & {"self", "cls"}:
            return False
    return True


def _names_ok(tree: ast.AST, nodes: list) -> bool:
    """No read of a denied name or attribute, no ``_private`` attribute but of ``self``/``cls``
    (never a dunder outside :data:`ALLOWED_DUNDERS`), no string annotation (evaluated later by
    ``typing`` or ``functools``), no denied text in a string, no class pattern (``case
    C(attr=x)`` reads attributes by name)."""
    own_ok = _self_is_own(tree, nodes)
    for n in nodes:
        if isinstance(n, ast.MatchClass):
            return False
        if isinstance(n, ast.Name) and (n.id in DENIED_NAMES or n.id.startswith("__") and n.id != "__name__"):
            return False  # a module's own dunders (__loader__, __spec__, __builtins__) reach importers
        if isinstance(n, ast.Attribute):
            a = n.attr
            own = own_ok and isinstance(n.value, ast.Name) and n.value.id in ("self", "cls")  # the model's own attribute
            if a in DENIED_ATTRS and not own or a in DENIED_HOPS or a.startswith(DENIED_PREFIXES) and not own:
                return False
            if a.startswith("__") and a.endswith("__"):
                if a not in ALLOWED_DUNDERS:
                    return False
            elif a.startswith("_") and not own:
                return False
        if isinstance(n, ast.Constant) and isinstance(n.value, (str, bytes)):
            text = n.value if isinstance(n.value, str) else n.value.decode("latin-1")
            if any(t in text for t in DENIED_TEXT):
                return False
        ann = getattr(n, "annotation", None) if isinstance(n, (ast.arg, ast.AnnAssign)) else \
            getattr(n, "returns", None) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
        if ann is not None and any(isinstance(x, ast.Constant) and isinstance(x.value, str) for x in ast.walk(ann)):
            return False
    return True


def plain_pytorch(source: Optional[bytes]) -> Optional[str]:
    """A one-line description if the candidate file ``source`` (bytes as bundled) is plain
    PyTorch, else None: None for a missing, undecodable or unparsable file, one of more than
    :data:`MAX_SOURCE` bytes, one with an import of a module outside :data:`ALLOWED_MODULES`
    (``from M import x``: M allowed, x neither private nor denied), a relative import, a read of a name of
    :data:`DENIED_NAMES`, of an attribute of :data:`DENIED_ATTRS` or of a ``_private`` one
    (but ``self._x``), a string annotation, or a string holding one of :data:`DENIED_TEXT`.
    Never raises."""
    if not isinstance(source, bytes) or len(source) > MAX_SOURCE:
        return None
    try:
        text = source.decode("utf-8")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(text)
        nodes = list(ast.walk(tree))
        if not _names_ok(tree, nodes):
            return None
        for line in source.splitlines()[:2]:
            m = CODING.match(line)
            if m and m.group(1).lower().replace(b"_", b"-") not in (b"utf-8", b"utf8"):
                return None
    except (UnicodeDecodeError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    imported: set[str] = set()
    for n in nodes:
        if isinstance(n, ast.Import):
            mods = [a.name for a in n.names]
        elif isinstance(n, ast.ImportFrom):  # from an allowed module, names that are neither private nor denied
            if n.level or not n.module or any(a.name == "*" or a.name.startswith("_") or a.name in DENIED_ATTRS
                                              or a.name in DENIED_NAMES for a in n.names):
                return None
            mods = [n.module]
        else:
            continue
        for m in mods:
            if m not in ALLOWED_MODULES:
                return None
            imported.add(m.split(".")[0])
    return "plain PyTorch: the file imports only " + ", ".join(sorted(imported - {"__future__"}) or ["nothing"]) + \
        " and defines no kernel of its own"


__all__ = ["plain_pytorch", "ALLOWED_MODULES", "DENIED_NAMES", "DENIED_ATTRS", "ALLOWED_DUNDERS", "DENIED_TEXT"]
