"""The dtypes and shapes of a KernelBench task's inputs, derived from its source without running it.

The verifier holds a candidate record's recorded input shapes (the parent's digests,
``dtype|shape|sums``) against what the pinned task's ``get_inputs()`` gives at the run's sizes,
and derives the roofline's bytes from them; it does so with no torch and no execution of the
task. :func:`input_specs` interprets the small part of Python that KernelBench's ``get_inputs``
functions use: module-level integer, float and tuple globals (each size override set right after its own
assignment, so that globals derived from it follow, as ``harness.kbtask.apply_overrides``
runs the task again), local assignments,
``torch.rand``/``randn``/``randint``/``zeros``/``ones``/``empty``/``full`` and their ``_like``
forms, ``torch.triu``/``tril``, shape-keeping tensor methods (``.float()``, ``.softmax(...)``,
``.cuda()``, ``.to(dtype)``...), arithmetic with scalars and broadcasting, ``x.shape``, starred
sizes and list returns. Anything else raises :class:`Undecidable` with the construct named:
a task the rule cannot read is a problem for the verifier, never a shape it guessed.

``tests/test_task_inputs.py`` holds the rule against ``get_inputs()`` run on torch's ``meta``
device, at reduced sizes, for every task of levels 1 to 3 at the pin (where a checkout is
present) and for task sources written for the test.
"""
from __future__ import annotations

import ast
import operator
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Tuple

from kbrepro.model.sizes import SizeValue, is_size

#: bytes per element of the dtypes KernelBench inputs and outputs use
ELEMENT_BYTES = {"torch.float32": 4, "torch.float64": 8, "torch.float16": 2, "torch.bfloat16": 2,
                 "torch.int64": 8, "torch.int32": 4, "torch.int16": 2, "torch.int8": 1, "torch.uint8": 1,
                 "torch.bool": 1, "torch.complex64": 8, "torch.complex128": 16}
_FLOAT = ("torch.float32", "torch.float64", "torch.float16", "torch.bfloat16")
_DTYPE_ALIASES = {"float": "torch.float32", "float32": "torch.float32", "double": "torch.float64",
                  "float64": "torch.float64", "half": "torch.float16", "float16": "torch.float16",
                  "bfloat16": "torch.bfloat16", "long": "torch.int64", "int64": "torch.int64", "int": "torch.int32",
                  "int32": "torch.int32", "int16": "torch.int16", "short": "torch.int16", "int8": "torch.int8",
                  "uint8": "torch.uint8", "bool": "torch.bool"}
#: tensor methods that keep the shape (and the dtype, unless named in _DTYPE_ALIASES)
_KEEP = {"cuda", "cpu", "contiguous", "clone", "detach", "abs", "exp", "log", "sqrt", "relu", "sigmoid", "tanh",
         "softmax", "log_softmax", "normal_", "uniform_", "requires_grad_", "neg", "sign", "round", "floor", "ceil",
         "clamp", "clamp_min", "clamp_max", "mul", "add", "sub", "div", "triu", "tril", "fill_", "zero_"}
_CREATORS = {"rand", "randn", "zeros", "ones", "empty"}
_LIKE = {"rand_like", "randn_like", "zeros_like", "ones_like", "empty_like", "randint_like", "full_like"}
_ARITH = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
          ast.Mod: operator.mod, ast.Pow: operator.pow, ast.Div: operator.truediv}
_MAX_ELEMENTS = 1 << 48


class Undecidable(Exception):
    """The task's ``get_inputs`` uses a construct this rule does not interpret."""


@dataclass(frozen=True)
class TensorSpec:
    """A tensor input's dtype (``torch.float32``) and shape."""

    dtype: str
    shape: Tuple[int, ...]

    @property
    def nbytes(self) -> int:
        """Bytes of the tensor's elements (numel x element size)."""
        n = 1
        for d in self.shape:
            n *= d
        return n * ELEMENT_BYTES[self.dtype]

    def digest_prefix(self) -> str:
        """``dtype|shape`` as :func:`kbrepro.harness.kbtask.fingerprint` writes it."""
        return f"{self.dtype}|{tuple(self.shape)!r}"


class _Torch:
    """The name ``torch`` (and ``torch.nn.functional``...) inside the interpreter."""


_TORCH = _Torch()


def _dtype_of(node: Any) -> str:
    if isinstance(node, str) and node.startswith("torch."):
        return node
    raise Undecidable(f"a dtype {node!r}")


def _shape_arg(args: list) -> Tuple[int, ...]:
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = list(args[0])
    if not all(type(a) is int and a >= 0 for a in args):
        raise Undecidable(f"a size that is not a non-negative integer: {args!r}")
    n = 1
    for a in args:
        n *= a
    if n > _MAX_ELEMENTS:
        raise Undecidable("a tensor of more than 2**48 elements")
    return tuple(args)


def _broadcast(a: Tuple[int, ...], b: Tuple[int, ...]) -> Tuple[int, ...]:
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and 1 not in (x, y):
            raise Undecidable(f"shapes {a} and {b} that do not broadcast")
        out.append(max(x, y) if 1 in (x, y) else x)
    return tuple(reversed(out))


def _promote(a: Any, b: Any, op: type) -> str:
    da = a.dtype if isinstance(a, TensorSpec) else None
    db = b.dtype if isinstance(b, TensorSpec) else None
    dts = [d for d in (da, db) if d]
    if any(d in _FLOAT for d in dts):
        best = [d for d in dts if d in _FLOAT]
        return max(best, key=lambda d: ELEMENT_BYTES[d])
    if op is ast.Div or any(isinstance(x, float) for x in (a, b)):
        return "torch.float32"
    if dts and all(d == "torch.bool" for d in dts) and not any(type(x) is int for x in (a, b)):
        return "torch.bool"
    return "torch.int64"


class _Eval:
    def __init__(self, env: dict):
        self.env = env

    def expr(self, n: ast.AST) -> Any:
        if isinstance(n, ast.Constant):
            if isinstance(n.value, (int, float, str)) or n.value is None:
                return n.value
            raise Undecidable(f"a constant {n.value!r}")
        if isinstance(n, ast.Name):
            if n.id == "torch":
                return _TORCH
            if n.id in self.env:
                v = self.env[n.id]
                if v is _UNKNOWN:
                    raise Undecidable(f"the global {n.id}, which this rule cannot evaluate")
                return v
            raise Undecidable(f"the name {n.id}")
        if isinstance(n, (ast.Tuple, ast.List)):
            out = []
            for e in n.elts:
                if isinstance(e, ast.Starred):
                    v = self.expr(e.value)
                    if not isinstance(v, (tuple, list)):
                        raise Undecidable("a starred value that is not a tuple")
                    out.extend(v)
                else:
                    out.append(self.expr(e))
            return tuple(out) if isinstance(n, ast.Tuple) else list(out)
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
            v = self.expr(n.operand)
            if isinstance(v, TensorSpec):
                return v
            if type(v) in (int, float):
                return -v if isinstance(n.op, ast.USub) else v
            raise Undecidable("a sign on a non-number")
        if isinstance(n, ast.BinOp) and type(n.op) in _ARITH:
            a, b = self.expr(n.left), self.expr(n.right)
            if isinstance(a, TensorSpec) or isinstance(b, TensorSpec):
                sa = a.shape if isinstance(a, TensorSpec) else ()
                sb = b.shape if isinstance(b, TensorSpec) else ()
                if not all(isinstance(x, TensorSpec) or type(x) in (int, float, bool) for x in (a, b)):
                    raise Undecidable("arithmetic of a tensor with a non-number")
                return TensorSpec(_promote(a, b, type(n.op)), _broadcast(sa, sb))
            if type(a) in (int, float) and type(b) in (int, float):
                if type(n.op) in (ast.FloorDiv, ast.Mod, ast.Div) and b == 0:
                    raise Undecidable("a division by zero")
                if isinstance(n.op, ast.Pow) and abs(b) > 64:
                    raise Undecidable("a large power")
                return _ARITH[type(n.op)](a, b)
            if isinstance(a, tuple) and isinstance(b, tuple) and isinstance(n.op, ast.Add):
                return a + b
            raise Undecidable(f"the operation {type(n.op).__name__} on {type(a).__name__} and {type(b).__name__}")
        if isinstance(n, ast.Attribute):
            base = self.expr(n.value)
            if base is _TORCH:
                if n.attr in _DTYPE_ALIASES:
                    return _DTYPE_ALIASES[n.attr]
                if n.attr in ("nn", "functional", "Tensor"):
                    return _TORCH
                return ("torch", n.attr)
            if isinstance(base, TensorSpec):
                if n.attr == "shape":
                    return base.shape
                if n.attr == "dtype":
                    return base.dtype
                if n.attr in ("T", "mT") and len(base.shape) >= 2:
                    tail = base.shape[-2:][::-1] if n.attr == "mT" or len(base.shape) == 2 else None
                    if tail is None:
                        raise Undecidable(".T of a tensor of more than two dimensions")
                    return TensorSpec(base.dtype, base.shape[:-2] + tail)
                return (base, n.attr)
            raise Undecidable(f"the attribute {n.attr}")
        if isinstance(n, ast.Subscript):
            base = self.expr(n.value)
            idx = self.expr(n.slice if not isinstance(n.slice, ast.Index) else n.slice.value)  # type: ignore[attr-defined]
            if isinstance(base, (tuple, list)) and type(idx) is int:
                return base[idx]
            raise Undecidable("a subscript")
        if isinstance(n, ast.Call):
            return self.call(n)
        raise Undecidable(f"the construct {type(n).__name__}")

    def call(self, n: ast.Call) -> Any:
        fn = self.expr(n.func)
        args = []
        for a in n.args:
            if isinstance(a, ast.Starred):
                v = self.expr(a.value)
                if not isinstance(v, (tuple, list)):
                    raise Undecidable("a starred argument that is not a tuple")
                args.extend(v)
            else:
                args.append(self.expr(a))
        kw = {k.arg: self.expr(k.value) for k in n.keywords if k.arg is not None}
        if any(k.arg is None for k in n.keywords):
            raise Undecidable("a ** argument")
        if isinstance(fn, tuple) and len(fn) == 2 and fn[0] == "torch":
            return self._torch(fn[1], args, kw)
        if isinstance(fn, tuple) and len(fn) == 2 and isinstance(fn[0], TensorSpec):
            return self._method(fn[0], fn[1], args, kw)
        raise Undecidable("a call of something other than torch or a tensor method")

    def _torch(self, name: str, args: list, kw: dict) -> Any:
        dtype = _dtype_of(kw["dtype"]) if kw.get("dtype") is not None else None
        if name in _CREATORS:
            return TensorSpec(dtype or "torch.float32", _shape_arg(args if "size" not in kw else [kw["size"]]))
        if name == "full":
            fill = args[1] if len(args) > 1 else kw.get("fill_value")
            default = "torch.int64" if type(fill) is int else "torch.bool" if type(fill) is bool else "torch.float32"
            return TensorSpec(dtype or default, _shape_arg([args[0]] if args else [kw["size"]]))
        if name == "randint":
            pos = [a for a in args]
            size = kw.get("size", pos[-1] if pos else None)
            if size is None or not isinstance(size, (tuple, list)):
                raise Undecidable("torch.randint without a size tuple")
            return TensorSpec(dtype or "torch.int64", _shape_arg([size]))
        if name in _LIKE:
            if not args or not isinstance(args[0], TensorSpec):
                raise Undecidable(f"torch.{name} of a non-tensor")
            return TensorSpec(dtype or ("torch.int64" if name == "randint_like" and False else args[0].dtype),
                              args[0].shape)
        if name in ("triu", "tril", "abs", "exp", "softmax", "log_softmax", "sigmoid", "tanh", "relu", "clone",
                    "sort", "sign"):
            if not args or not isinstance(args[0], TensorSpec):
                raise Undecidable(f"torch.{name} of a non-tensor")
            return args[0]
        if name == "tensor":
            raise Undecidable("torch.tensor")
        raise Undecidable(f"torch.{name}")

    def _method(self, t: TensorSpec, name: str, args: list, kw: dict) -> Any:
        if name in _DTYPE_ALIASES:
            return TensorSpec(_DTYPE_ALIASES[name], t.shape)
        if name == "to" or name == "type":
            dt = kw.get("dtype")
            for a in args:
                if isinstance(a, str) and a.startswith("torch."):
                    dt = a
            return TensorSpec(_dtype_of(dt), t.shape) if dt is not None else t
        if name in _KEEP:
            return t
        if name in ("view", "reshape"):
            shape = args[0] if len(args) == 1 and isinstance(args[0], (tuple, list)) else tuple(args)
            if any(type(d) is not int for d in shape):
                raise Undecidable(f"a {name} with sizes that are not integers")
            known = 1
            for d in shape:
                known *= d if d != -1 else 1
            total = 1
            for d in t.shape:
                total *= d
            shape = tuple(total // known if d == -1 else d for d in shape)
            return TensorSpec(t.dtype, _shape_arg(list(shape)))
        if name == "size":
            return t.shape if not args else t.shape[args[0]]
        raise Undecidable(f"the tensor method .{name}()")


_UNKNOWN = object()


def _globals(tree: ast.Module, sizes: Optional[Mapping[str, SizeValue]] = None) -> dict:
    """Module-level assignments, evaluated in order, each overridden name set to its size
    right after its own assignment (so globals derived from it follow: ``harness.kbtask.
    apply_overrides``); what the rule cannot evaluate is unknown (an error only where a shape
    uses it)."""
    sizes = dict(sizes or {})
    env: dict = {}
    ev = _Eval(env)
    for st in tree.body:
        if isinstance(st, ast.Assign):
            val = st.value
            pairs = []
            for tgt in st.targets:  # a = b = 128 sets both
                if isinstance(tgt, ast.Tuple) and isinstance(val, ast.Tuple) and len(tgt.elts) == len(val.elts):
                    pairs += list(zip(tgt.elts, val.elts))
                else:
                    pairs.append((tgt, val))
            for tg, v in pairs:
                if isinstance(tg, ast.Name):
                    try:
                        x = ev.expr(v)
                        env[tg.id] = x if isinstance(x, (int, float, tuple, str)) and not isinstance(x, bool) \
                            else _UNKNOWN
                    except (Undecidable, ArithmeticError, ValueError, TypeError, IndexError, OverflowError):
                        env[tg.id] = _UNKNOWN
            for tg in st.targets:
                for n in ast.walk(tg):
                    if isinstance(n, ast.Name) and n.id in sizes:
                        env[n.id] = sizes[n.id]
        elif isinstance(st, (ast.FunctionDef, ast.ClassDef)):
            env[st.name] = _UNKNOWN
    return env


def size_globals(src: bytes) -> dict[str, SizeValue]:
    """The task's size globals (no leading ``_``): positive ints and tuples of them
    (:func:`kbrepro.model.sizes.is_size`: ``dim = 4096``, ``kernel_size = (5, 7)``), as its
    module-level assignments give them, read without running it: the names a size override
    may set. Empty for a source that does not parse."""
    try:
        tree = ast.parse(bytes(src))
    except (SyntaxError, ValueError):
        return {}
    return {k: v for k, v in _globals(tree).items() if not k.startswith("_") and is_size(v)}


def reduced_sizes(src: bytes, batch: int = 2, plain: int = 64) -> dict[str, SizeValue]:
    """The overrides of a task run small (the CPU sweep of issue 28): ``batch_size`` cut to
    ``batch``, every other integer size of :func:`size_globals` above ``plain`` cut to
    ``plain``, and so is every entry above ``plain`` of a tuple-valued size (1/100's
    ``input_shape``, 2/1's ``bias_shape`` beside its cut channels); sizes already that small
    are left out."""
    out: dict[str, SizeValue] = {}
    for k, v in size_globals(src).items():
        if type(v) is tuple:
            cut = tuple(min(e, plain) for e in v)
            if cut != v:
                out[k] = cut
            continue
        if type(v) is not int:
            continue
        if k == "batch_size":
            if v > batch:
                out[k] = batch
        elif v > plain:
            out[k] = plain
    return out


def input_specs(src: bytes, sizes: Mapping[str, SizeValue]) -> Tuple[Optional[TensorSpec], ...]:
    """The inputs ``get_inputs()`` of the task ``src`` returns after ``sizes`` were set as its
    globals: a :class:`TensorSpec` per tensor, None per other value. Raises
    :class:`Undecidable` where the source uses a construct the rule does not interpret."""
    try:
        tree = ast.parse(bytes(src))
    except (SyntaxError, ValueError) as exc:
        raise Undecidable(f"the task does not parse: {type(exc).__name__}") from None
    env = _globals(tree, sizes)
    env.update({k: v for k, v in sizes.items()})
    fn = next((st for st in tree.body if isinstance(st, ast.FunctionDef) and st.name == "get_inputs"), None)
    if fn is None or fn.args.args or fn.args.vararg or fn.args.kwonlyargs:
        raise Undecidable("no get_inputs() without arguments")
    local = dict(env)
    ev = _Eval(local)
    try:
        for st in fn.body:
            if isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant) and isinstance(st.value.value, str):
                continue  # a docstring
            if isinstance(st, ast.Assign) and len(st.targets) == 1:
                tgt = st.targets[0]
                val = ev.expr(st.value)
                if isinstance(tgt, ast.Name):
                    local[tgt.id] = val
                elif isinstance(tgt, (ast.Tuple, ast.List)) and isinstance(val, (tuple, list)) \
                        and len(tgt.elts) == len(val) and all(isinstance(e, ast.Name) for e in tgt.elts):
                    for e, v in zip(tgt.elts, val):
                        local[e.id] = v
                else:
                    raise Undecidable("an assignment to something other than names")
                continue
            if isinstance(st, ast.Return) and st.value is not None:
                out = ev.expr(st.value)
                if not isinstance(out, (list, tuple)):
                    raise Undecidable("get_inputs returns something other than a list")
                if not all(isinstance(x, TensorSpec) or x is None or type(x) in (int, float, bool) for x in out):
                    raise Undecidable("get_inputs returns values other than tensors and numbers")
                return tuple(x if isinstance(x, TensorSpec) else None for x in out)
            raise Undecidable(f"the statement {type(st).__name__} in get_inputs")
    except (ArithmeticError, OverflowError, RecursionError, KeyError, IndexError, TypeError, ValueError) as exc:
        raise Undecidable(f"{type(exc).__name__} while reading get_inputs") from None
    raise Undecidable("get_inputs has no return")


def parse_digest(digest: str) -> Optional[TensorSpec]:
    """The dtype and shape of a fingerprint ``dtype|(shape)|sums`` (None if it is not one)."""
    parts = digest.split("|")
    if len(parts) != 3 or parts[0] not in ELEMENT_BYTES:
        return None
    s = parts[1].strip()
    if not (s.startswith("(") and s.endswith(")")):
        return None
    inner = s[1:-1].strip().rstrip(",")
    try:
        shape = tuple(int(x) for x in inner.split(",")) if inner else ()
    except ValueError:
        return None
    if any(d < 0 for d in shape):
        return None
    return TensorSpec(parts[0], shape)


__all__ = ["TensorSpec", "Undecidable", "input_specs", "size_globals", "reduced_sizes", "parse_digest", "ELEMENT_BYTES"]
