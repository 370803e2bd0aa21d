"""Selectors against the documents' schemas: a JMESPath selector of a claims spec that reads a
path no document can hold is a typo, refused as a usage error rather than evaluated to a silent
``not_comparable`` (bundle/claims.py evaluates the claims; this module checks their selectors).
"""
from __future__ import annotations

from typing import Any, Mapping

from kbrepro.errors import UsageError
from kbrepro.harness import bounded
from kbrepro import schemas
from kbrepro.bundle.documents import OUR_DOCUMENTS

_CUT = 300


def _cut(text: str, n: int = _CUT) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[:n] + "..."



def _resolve(node: Any, root: Mapping) -> tuple[Any, Mapping]:
    """``node`` with its ``$ref`` followed (within ``root`` or into another shipped schema)."""
    for _ in range(20):
        if not isinstance(node, Mapping) or "$ref" not in node:
            return node, root
        file, _, frag = str(node["$ref"]).partition("#")
        if file:
            try:
                root = schemas.load(file.rsplit("/", 1)[-1][: -len(".schema.json")])
            except KeyError:
                return None, root
        node = root
        for part in [p for p in frag.split("/") if p]:
            node = node.get(part) if isinstance(node, Mapping) else None
    return None, root


def _child(state, name: str):
    """(schema of field ``name`` of an object of schema ``state``, or None: any) and whether
    the schema forbids the field. A schema that does not list properties closed (with
    ``additionalProperties: false``) allows any field."""
    if state is None:
        return None, False
    node, root = _resolve(*state)
    if not isinstance(node, Mapping) or any(k in node for k in ("anyOf", "oneOf", "allOf", "patternProperties")):
        return None, False
    props = node.get("properties")
    if isinstance(props, Mapping) and name in props:
        return (props[name], root), False
    extra = node.get("additionalProperties", True)
    if extra is False and isinstance(props, Mapping) and node.get("type", "object") == "object":
        return None, True
    return ((extra, root) if isinstance(extra, Mapping) else None), False


def _items(state):
    if state is None:
        return None
    node, root = _resolve(*state)
    it = node.get("items") if isinstance(node, Mapping) else None
    return (it, root) if isinstance(it, Mapping) else None


def _lists(state, name: str) -> bool:
    """Whether the schema ``state`` names field ``name`` among its properties."""
    if state is None:
        return False
    node, _ = _resolve(*state)
    props = node.get("properties") if isinstance(node, Mapping) else None
    return isinstance(props, Mapping) and name in props


class _Unlisted(list):
    """The paths a selector reads as fields that no schema at that place names (appended
    by :func:`_walk` through ``bad.unlisted``)."""


def _walk(node: Mapping, state, path: str, bad: list) -> Any:
    """The schema state after selector AST ``node`` applied to a value of schema ``state``
    (None: not known), appending to ``bad`` each field a closed schema forbids (and, when
    ``bad`` has an ``unlisted`` list, to that each field no schema there names)."""
    kind, kids = node.get("type"), node.get("children") or []
    if kind == "field":
        child, forbidden = _child(state, node["value"])
        here = f"{path}.{node['value']}" if path else node["value"]
        if forbidden:
            bad.append(here)
        elif hasattr(bad, "unlisted") and not _lists(state, node["value"]):
            bad.unlisted.append(here)
        return child
    if kind == "subexpression":  # a.b.c may parse as one subexpression of three children
        for k in kids:
            state = _walk(k, state, path, bad)
            path = _path_of(k, path)
        return state
    if kind == "index_expression":
        return _items(_walk(kids[0], state, path, bad))
    if kind in ("projection", "filter_projection"):
        elem = _items(_walk(kids[0], state, path, bad))
        at = _path_of(kids[0], path) + "[]"
        if kind == "filter_projection":
            _walk(kids[2], elem, at, bad)
        _walk(kids[1], elem, at, bad)
        return None
    if kind == "value_projection":
        left = _walk(kids[0], state, path, bad)
        node_, root = _resolve(*left) if left is not None else (None, None)
        extra = node_.get("additionalProperties") if isinstance(node_, Mapping) else None
        _walk(kids[1], (extra, root) if isinstance(extra, Mapping) else None, _path_of(kids[0], path) + ".*", bad)
        return None
    if kind == "identity" or kind == "current":
        return state
    for k in kids:  # comparisons, functions, pipes, multi-selects: each operand read from here
        if isinstance(k, Mapping):
            _walk(k, state if kind != "pipe" or k is kids[0] else None, path, bad)
    return None


def _path_of(node: Mapping, path: str) -> str:
    if node.get("type") == "field":
        return f"{path}.{node['value']}" if path else node["value"]
    if node.get("type") == "subexpression":
        for k in node["children"]:
            path = _path_of(k, path)
        return path
    return path + "[]" if node.get("type") in ("index_expression", "projection", "flatten") else path


#: the most values the data walk of :func:`_absent_fields` follows at one place of a selector
MAX_WALK_VALUES = 200_000


def _absent_fields(node: Mapping, vals, path: str, out: set) -> Any:
    """The values selector AST ``node`` reaches from ``vals`` (a list of values, or None: not
    followed), a superset (filters are not applied: every element is kept), adding to ``out``
    each field path read where objects are present and none of them holds the field. Paths
    are spelled as :func:`_walk` spells them."""
    kind, kids = node.get("type"), node.get("children") or []

    def items(vs):
        if vs is None:
            return None
        got = [x for v in vs if isinstance(v, list) for x in v]
        return got if len(got) <= MAX_WALK_VALUES else None

    if kind == "field":
        if vals is None:
            return None
        objs = [v for v in vals if isinstance(v, Mapping)]
        name = node["value"]
        if objs and not any(name in o for o in objs):
            out.add(f"{path}.{name}" if path else name)
        return [o[name] for o in objs if name in o]
    if kind == "subexpression":
        for k in kids:
            vals = _absent_fields(k, vals, path, out)
            path = _path_of(k, path)
        return vals
    if kind in ("index_expression", "flatten"):
        return items(_absent_fields(kids[0], vals, path, out))
    if kind in ("projection", "filter_projection"):
        elem = items(_absent_fields(kids[0], vals, path, out))
        at = _path_of(kids[0], path) + "[]"
        if kind == "filter_projection":
            _absent_fields(kids[2], elem, at, out)
        _absent_fields(kids[1], elem, at, out)
        return None
    if kind == "value_projection":
        left = _absent_fields(kids[0], vals, path, out)
        elem = None if left is None else [x for v in left if isinstance(v, Mapping) for x in v.values()]
        _absent_fields(kids[1], elem, _path_of(kids[0], path) + ".*", out)
        return None
    if kind in ("identity", "current"):
        return vals
    for k in kids:
        if isinstance(k, Mapping):
            _absent_fields(k, vals if kind != "pipe" or k is kids[0] else None, path, out)
    return None


def selector_problems(expr: str, documents: Mapping[str, Any]) -> list[str]:
    """Paths that selector ``expr`` reads and that can never exist: a root name that is
    neither a document of ``documents``, one of the engine's documents, nor ``live``; a
    field that a document's schema (``schemas/<name>.schema.json``) forbids where that schema
    lists an object's fields closed; and a field that no schema at its place names (an open
    object, or a document without a schema) and that none of the objects ``documents`` holds
    at that place has (a typo below the top of a document: the data show what is there).
    A field a schema names but these documents lack (another profile's) is not judged."""

    names = set(documents) | set(OUR_DOCUMENTS) | {"live", "candidates"}
    root: dict = {"type": "object", "properties": {}, "additionalProperties": False}
    for n in names:
        try:
            schemas.load(n)
            root["properties"][n] = {"$ref": f"{n}.schema.json"}
        except KeyError:
            root["properties"][n] = {}
    bad = _Unlisted()
    bad.unlisted = []
    ast = bounded.parsed_ast(expr)
    _walk(ast, (root, root), "", bad)
    if bad.unlisted:
        absent: set = set()
        _absent_fields(ast, [dict(documents)], "", absent)
        bad += [p for p in dict.fromkeys(bad.unlisted) if p in absent and p.split(".", 1)[0] in documents]
    return list(bad)


def check_selectors(spec: Mapping, documents: Mapping[str, Any], where: str = "claims") -> None:
    """Raise UsageError naming the claim and the path when a selector of ``spec`` reads a
    path that can never exist in ``documents`` (see :func:`selector_problems`), so that a
    typo is an error, not a silent ``not_comparable``."""
    for c in spec["claims"]:
        for chk in c["checks"]:
            for key in ("select", "blocks"):
                if key in chk:
                    bad = selector_problems(chk[key], documents)
                    if bad:
                        raise UsageError(f"{where}: claim {c['id']}: {key} {_cut(chk[key], 120)!r} reads "
                                         f"{', '.join(bad[:3])}, which no document holds (its schema does not allow "
                                         "that field, or names no such field and the documents hold none)",
                                         "fix the selector; the document schemas are in schemas/")


__all__ = ["check_selectors", "selector_problems", "MAX_WALK_VALUES"]
