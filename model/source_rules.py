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
import warnings
from typing import Optional

#: the top-level modules a plain PyTorch candidate may import (the pinned tasks' own imports,
#: and the standard library's pure helpers); ``torch`` less :data:`DENIED_TORCH`
ALLOWED_MODULES = frozenset({"__future__", "torch", "math", "typing", "collections", "itertools", "functools",
                             "numbers", "dataclasses", "enum", "einops", "numpy"})
#: the torch modules that build, load or register kernels of a file's own
DENIED_TORCH = ("torch.utils.cpp_extension", "torch.cuda.jiterator", "torch._C", "torch.library",
                "torch.utils.dlpack", "torch._inductor", "torch._dynamo")
#: names a plain file never uses: they run or import code the parser cannot see
DENIED_NAMES = frozenset({"exec", "eval", "compile", "__import__", "getattr", "setattr", "delattr", "globals",
                          "locals", "vars", "open", "__builtins__", "breakpoint", "importlib", "input"})
#: attributes a plain file never reads: kernel builders, loaders and the ways around the rule
DENIED_ATTRS = frozenset({"cpp_extension", "jiterator", "_C", "library", "load_inline", "load_library",
                          "dlpack", "from_dlpack", "_inductor", "_dynamo", "__dict__", "__getattribute__",
                          "__globals__", "__builtins__", "__subclasses__", "__code__", "__import__", "sys", "os",
                          "importlib", "subprocess", "builtins", "_utils_internal",
                          "ctypes", "cdll", "CDLL", "__class__", "__bases__", "__mro__", "__loader__", "__spec__",
                          "system", "popen", "_ops", "ctypeslib", "load", "loads", "_load", "hub", "package",
                          "get_type_hints", "ForwardRef", "_evaluate", "__annotations__"})
#: strings no plain file holds: kernel sources and compiler inputs
DENIED_TEXT = ("__global__", 'extern "C"', ".entry", ".version", ".target", "__device__", "#include", "@triton",
               "triton.jit", "load_inline", "cpp_extension", "jiterator", "load_library", "__import__", "import ")
#: the largest source this rule parses (bytes); a larger file is not plain
MAX_SOURCE = 1 << 20


def plain_pytorch(source: Optional[bytes]) -> Optional[str]:
    """A one-line description if the candidate file ``source`` (bytes as bundled) is plain
    PyTorch, else None: None for a missing, undecodable or unparsable file, one of more than
    :data:`MAX_SOURCE` bytes, or one with an import outside :data:`ALLOWED_MODULES` (or of
    :data:`DENIED_TORCH`), a name of :data:`DENIED_NAMES`, an attribute of :data:`DENIED_ATTRS`
    or a string holding one of :data:`DENIED_TEXT`. Never raises."""
    if not isinstance(source, bytes) or len(source) > MAX_SOURCE:
        return None
    try:
        text = source.decode("utf-8")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(text)
        nodes = list(ast.walk(tree))
    except (UnicodeDecodeError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    imported: set[str] = set()
    for n in nodes:
        if isinstance(n, ast.Import):
            mods = [a.name for a in n.names]
        elif isinstance(n, ast.ImportFrom):
            if n.level or not n.module:
                return None
            mods = [n.module] + [f"{n.module}.{a.name}" for a in n.names]
        elif isinstance(n, ast.Name):
            if n.id in DENIED_NAMES:
                return None
            continue
        elif isinstance(n, ast.Attribute):
            if n.attr in DENIED_ATTRS:
                return None
            continue
        elif isinstance(n, ast.Constant) and isinstance(n.value, (str, bytes)):
            s = n.value if isinstance(n.value, str) else n.value.decode("latin-1")
            if any(t in s for t in DENIED_TEXT):
                return None
            continue
        else:
            continue
        for m in mods:
            if m.split(".")[0] not in ALLOWED_MODULES or any(m == d or m.startswith(d + ".") for d in DENIED_TORCH):
                return None
            imported.add(m.split(".")[0])
    return "plain PyTorch: the file imports only " + ", ".join(sorted(imported - {"__future__"}) or ["nothing"]) + \
        " and defines no kernel of its own"


__all__ = ["plain_pytorch", "ALLOWED_MODULES", "DENIED_TORCH", "DENIED_NAMES", "DENIED_ATTRS", "DENIED_TEXT"]
