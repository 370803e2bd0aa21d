"""Typed, frozen records built strictly from parsed JSON: the model's one JSON edge.

A record type is a frozen dataclass whose annotations say exactly what its JSON object holds;
:func:`build` turns a parsed JSON value (``jsonio.loads_strict``'s output: dicts, lists,
str, int, float, bool, None) into that record, or returns the list of every
:class:`~kbrepro.model.problems.Problem` it found. A record that exists is valid: nothing
downstream re-checks types or coerces (DESIGN.md section 3).

What the annotations mean:

* ``int``: a JSON integer (``true`` and ``2.0`` are not); ``float``: any finite JSON number;
  ``bool``, ``str``: exactly those;
* ``Optional[X]``: ``null`` or ``X``; a field **with a default** may be absent (it then takes
  the default), a field without one is required; a key the record does not declare is a
  problem (``model.extra``);
* ``Tuple[X, ...]``: a JSON array of X; ``Tuple[X, Y]``: an array of exactly two;
  ``Mapping[K, V]``: a JSON object (an immutable ``MappingProxyType``);
  ``Literal[a, b]``: one of those values, of the same JSON type;
* ``Annotated[X, Num(...)]``, ``Text(...)``, ``Items(...)``: ranges, lengths and patterns;
  ``Annotated[Union[A, B], OneOf(choose)]``: a record of the type ``choose(raw)`` names;
  ``Annotated[float, NONFINITE]``: also the strings ``"nan"``, ``"inf"``, ``"-inf"`` that
  :func:`kbrepro.harness.jsonio.enc_float` writes, read as floats;
* a field's ``metadata={"json": "pass"}`` names its JSON key where it is not an identifier;
* a record class with ``_open = True`` (a ``ClassVar``) reads an object its schema leaves open:
  keys it does not declare are passed over, not problems;
* a record class may define ``_invariants(self)`` yielding ``(relative path, message)``
  pairs: rules inside one record (a passing check has no failing element). Each is a problem
  ``model.invariant``.

Limits: a path is built for every problem; at most :data:`MAX_PROBLEMS` are kept.
"""
from __future__ import annotations

import collections.abc
import dataclasses
import math
import re
import types
from dataclasses import dataclass
from typing import (Annotated, Any, Callable, Dict, List, Literal, Tuple, Union, get_args, get_origin,
                    get_type_hints)

from kbrepro.model import problems as P
from kbrepro.model.problems import Problem

#: the most problems one build reports (the rest are counted in the last one)
MAX_PROBLEMS = 200


@dataclass(frozen=True)
class Num:
    """A number's range: ``ge``/``gt``/``le``/``lt`` bounds (None: no bound)."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None


@dataclass(frozen=True)
class Text:
    """A string's length bounds and an optional pattern it must match in full."""

    min_len: int = 0
    max_len: int = 1000
    pattern: str | None = None


@dataclass(frozen=True)
class Items:
    """An array's or object's count bounds."""

    min_items: int = 0
    max_items: int = 100_000


@dataclass(frozen=True)
class OneOf:
    """A union of record types told apart by the raw object: ``choose(raw_dict)`` returns the
    record type to build it as, or None (a problem: none of them)."""

    choose: Callable[[dict], Any]
    what: str = "record"


class _NonFinite:
    def __repr__(self) -> str:
        return "NONFINITE"


#: marks a float that may be written as "nan", "inf" or "-inf" (jsonio.enc_float)
NONFINITE = _NonFinite()
_NONFINITE_TEXT = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


class _Bad:
    """The value a failed parse returns (problems were recorded)."""


BAD = _Bad()
_NONE = type(None)
Parser = Callable[[Any, str, List[Problem]], Any]


def jtype(v: Any) -> str:
    """The JSON type name of a parsed value (for messages)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int):
        return "an integer"
    if isinstance(v, float):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, dict):
        return "an object"
    return type(v).__name__


def _add(out: List[Problem], code: str, path: str, message: str) -> None:
    if len(out) < MAX_PROBLEMS:
        out.append(Problem(code, path, message))


def _key_path(path: str, key: str) -> str:
    return f"{path}.{key}" if key.isidentifier() else f"{path}[{key!r}]"


_CACHE: Dict[Any, Parser] = {}


def parser(tp: Any) -> Parser:
    """The parse function of annotation ``tp`` (cached): ``fn(value, path, problems)`` returns
    the typed value, or :data:`BAD` after appending at least one problem."""
    try:
        return _CACHE[tp]
    except (KeyError, TypeError):
        pass
    fn = _make(tp)
    try:
        _CACHE[tp] = fn
    except TypeError:  # an unhashable annotation: not cached
        pass
    return fn


def _make(tp: Any) -> Parser:
    origin = get_origin(tp)
    if origin is Annotated:
        base, *marks = get_args(tp)
        return _constrained(base, marks)
    if dataclasses.is_dataclass(tp):
        return _record(tp)
    if tp is int:
        return _exact(int, "an integer")
    if tp is bool:
        return _exact(bool, "a boolean")
    if tp is str:
        return _exact(str, "a string")
    if tp is float:
        return _float(False)
    if tp is Any:
        return lambda v, path, out: v
    if origin is Literal:
        return _literal(get_args(tp))
    if origin is Union:
        return _union(get_args(tp))
    if origin in (tuple, Tuple):
        args = get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return _array(parser(args[0]), None)
        return _array(None, tuple(parser(a) for a in args))
    if origin in (collections.abc.Mapping, dict):
        k, v = get_args(tp)
        return _mapping(parser(k), parser(v))
    raise TypeError(f"no strict parser for the annotation {tp!r}")


def _exact(kind: type, name: str) -> Parser:
    def parse(v, path, out):
        if type(v) is kind:
            return v
        _add(out, P.TYPE, path, f"is {jtype(v)}, not {name}")
        return BAD
    return parse


def _float(nonfinite: bool) -> Parser:
    def parse(v, path, out):
        t = type(v)
        if t is float:
            if math.isfinite(v):
                return v
            _add(out, P.RANGE, path, "is not a finite number")
            return BAD
        if t is int:
            return float(v)
        if nonfinite and t is str and v in _NONFINITE_TEXT:
            return _NONFINITE_TEXT[v]
        _add(out, P.TYPE, path, f"is {jtype(v)}, not a number")
        return BAD
    return parse


def _literal(values: tuple) -> Parser:
    allowed = [(type(x), x) for x in values]
    shown = ", ".join(repr(x) for x in values[:8])

    def parse(v, path, out):
        if (type(v), v) in allowed:
            return v
        _add(out, P.ENUM, path, f"is not one of {shown}")
        return BAD
    return parse


def _union(args: tuple) -> Parser:
    rest = tuple(a for a in args if a is not _NONE)
    nullable = len(rest) < len(args)
    parsers = [parser(a) for a in rest]

    def parse(v, path, out):
        if v is None:
            if nullable:
                return None
            _add(out, P.TYPE, path, "is null")
            return BAD
        if len(parsers) == 1:
            return parsers[0](v, path, out)
        tried: List[Problem] = []
        for p in parsers:
            mine: List[Problem] = []
            x = p(v, path, mine)
            if x is not BAD:
                return x
            tried += mine
        for p in tried[:3]:
            _add(out, p.code, p.path, p.message)
        return BAD
    return parse


def _array(item: Parser | None, fixed: tuple | None) -> Parser:
    def parse(v, path, out):
        if type(v) is not list:
            _add(out, P.TYPE, path, f"is {jtype(v)}, not an array")
            return BAD
        if fixed is not None and len(v) != len(fixed):
            _add(out, P.LENGTH, path, f"holds {len(v)} items, not {len(fixed)}")
            return BAD
        res, bad = [], False
        for i, x in enumerate(v):
            y = (fixed[i] if fixed is not None else item)(x, f"{path}[{i}]", out)
            bad |= y is BAD
            res.append(y)
        return BAD if bad else tuple(res)
    return parse


def _mapping(key: Parser, val: Parser) -> Parser:
    def parse(v, path, out):
        if type(v) is not dict:
            _add(out, P.TYPE, path, f"is {jtype(v)}, not an object")
            return BAD
        res, bad = {}, False
        for k, x in v.items():
            kp = _key_path(path, k)
            kk = key(k, kp, out)
            y = val(x, kp, out)
            bad |= kk is BAD or y is BAD
            res[kk] = y
        return BAD if bad else types.MappingProxyType(res)
    return parse


def _one_of(pick: OneOf) -> Parser:
    def parse(v, path, out):
        if type(v) is not dict:
            _add(out, P.TYPE, path, f"is {jtype(v)}, not an object")
            return BAD
        cls = pick.choose(v)
        if cls is None:
            _add(out, P.ENUM, path, f"is no known kind of {pick.what}")
            return BAD
        return parser(cls)(v, path, out)
    return parse


def _constrained(base: Any, marks: list) -> Parser:
    pick = next((m for m in marks if isinstance(m, OneOf)), None)
    if pick is not None:
        return _one_of(pick)
    if any(m is NONFINITE for m in marks):
        inner = _float(True) if base is float else parser(base)
    else:
        inner = parser(base)
    checks = [m for m in marks if m is not NONFINITE]

    def parse(v, path, out):
        x = inner(v, path, out)
        if x is BAD or x is None:
            return x
        for m in checks:
            why = _violates(m, x)
            if why:
                _add(out, why[0], path, why[1])
                return BAD
        return x
    return parse


def _violates(m: Any, x: Any) -> tuple[str, str] | None:
    if isinstance(m, Num):
        if isinstance(x, float) and math.isnan(x):
            return None  # a NONFINITE nan: no order to check
        if m.ge is not None and not x >= m.ge:
            return P.RANGE, f"is {x!r}, less than {m.ge:g}"
        if m.gt is not None and not x > m.gt:
            return P.RANGE, f"is {x!r}, not more than {m.gt:g}"
        if m.le is not None and not x <= m.le:
            return P.RANGE, f"is {x!r}, more than {m.le:g}"
        if m.lt is not None and not x < m.lt:
            return P.RANGE, f"is {x!r}, not less than {m.lt:g}"
        return None
    if isinstance(m, Text):
        if not m.min_len <= len(x) <= m.max_len:
            return P.LENGTH, f"holds {len(x)} characters, not {m.min_len} to {m.max_len}"
        if m.pattern is not None and not _regex(m.pattern).fullmatch(x):
            return P.PATTERN, f"does not match {m.pattern}"
        return None
    if isinstance(m, Items):
        if not m.min_items <= len(x) <= m.max_items:
            return P.LENGTH, f"holds {len(x)} items, not {m.min_items} to {m.max_items}"
        return None
    raise TypeError(f"unknown constraint {m!r}")


_REGEX: Dict[str, Any] = {}


def _regex(p: str):
    r = _REGEX.get(p)
    if r is None:
        r = _REGEX[p] = re.compile(p)
    return r


def _record(cls: type) -> Parser:
    hints = get_type_hints(cls, include_extras=True)
    specs = []
    for f in dataclasses.fields(cls):
        key = f.metadata.get("json", f.name)
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory if f.default_factory is not dataclasses.MISSING else None)
        specs.append((f.name, key, hints[f.name], has_default, default, f.default_factory is not dataclasses.MISSING))
    keys = frozenset(s[1] for s in specs)
    compiled: List[tuple] = []
    invariants = getattr(cls, "_invariants", None)
    # a record of an object its schema leaves open: a key it does not declare is not a problem
    is_open = bool(getattr(cls, "_open", False))

    def parse(v, path, out):
        if not compiled:  # built on first use: a record may refer to itself or to later classes
            compiled.extend((n, k, parser(t), hd, d, fac) for n, k, t, hd, d, fac in specs)
        if type(v) is not dict:
            _add(out, P.TYPE, path, f"is {jtype(v)}, not an object")
            return BAD
        bad = False
        for k in () if is_open else v:
            if k not in keys:
                _add(out, P.EXTRA, _key_path(path, str(k)), "is not a field of this record")
                bad = True
        kw = {}
        for name, key, p, has_default, default, factory in compiled:
            if key in v:
                x = p(v[key], _key_path(path, key), out)
                if x is BAD:
                    bad = True
                else:
                    kw[name] = x
            elif has_default:
                kw[name] = default() if factory else default
            else:
                _add(out, P.MISSING, _key_path(path, key), "is missing")
                bad = True
        if bad:
            return BAD
        rec = cls(**kw)
        if invariants is not None:
            broken = False
            for rel, msg in invariants(rec):
                _add(out, P.INVARIANT, f"{path}{rel}", msg)
                broken = True
            if broken:
                return BAD
        return rec
    return parse


def build(cls: type, value: Any, path: str = "$") -> tuple[Any, List[Problem]]:
    """``(record, [])`` where ``value`` is a valid ``cls``, else ``(None, problems)`` with
    every problem found (at most :data:`MAX_PROBLEMS`)."""
    out: List[Problem] = []
    rec = parser(cls)(value, path, out)
    if rec is BAD or out:
        return None, out or [Problem(P.TYPE, path, "is not a valid record")]
    return rec, []


def field(json: str | None = None, **kw) -> Any:
    """``dataclasses.field`` with the JSON key ``json`` (where the Python name differs)."""
    if json is not None:
        kw["metadata"] = {**kw.get("metadata", {}), "json": json}
    return dataclasses.field(**kw)


__all__ = ["Num", "Text", "Items", "OneOf", "NONFINITE", "BAD", "build", "parser", "field", "jtype", "MAX_PROBLEMS"]
