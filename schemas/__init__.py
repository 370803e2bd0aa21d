"""JSON Schemas (Draft 2020-12) for every document the product writes or reads.

A leaf: imports only the standard library and ``jsonschema``. Each ``<name>.schema.json``
file has ``$id`` ``https://kbrepro.invalid/schemas/<name>.schema.json``; documents name their
schema in a ``schema`` field and its version in ``schema_version``.

Validation reports every violation with its JSON path, not only the first. JSON Schema
numeric bounds let NaN through, so :func:`validate` also walks the document and reports any
non-finite float. Draft 2020-12 counts ``3.0`` as an integer; our validator redefines
``"integer"`` as a JSON number written without a fraction or exponent (a Python ``int``), so
a count of ``3.0`` is refused.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable
from kbrepro.process import deferred_sigint, ignore_sigint_from_now

try:  # the fast pre-check of validate(); the reference validator decides where it is missing
    import jsonschema_rs
except ImportError:  # pragma: no cover - a dependency of the package
    jsonschema_rs = None

SCHEMA_DIR = Path(__file__).resolve().parent
ID_PREFIX = "https://kbrepro.invalid/schemas/"


@dataclass(frozen=True)
class Violation:
    """One problem in a document: JSON path (``$.a.b[3]``), message, and the schema name."""

    path: str
    message: str
    schema: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def available() -> list[str]:
    """Names of the shipped schemas (file stem without ``.schema``)."""
    return sorted(p.name[: -len(".schema.json")] for p in SCHEMA_DIR.glob("*.schema.json"))


@lru_cache(maxsize=None)
def load(name: str, check: bool = False) -> dict:
    """The schema document ``name``; checked against the Draft 2020-12 metaschema.

    Raises ``KeyError`` for an unknown name and ``jsonschema.SchemaError`` for a schema
    that is not itself valid.
    """
    path = SCHEMA_DIR / f"{name}.schema.json"
    if not path.is_file():
        raise KeyError(f"no schema named {name!r}; known: {', '.join(available())}")
    schema = json.loads(path.read_text(encoding="utf-8"))
    if check:  # imported only here: the Python validator costs 0.15 s to import, jsonschema_rs decides most
        from jsonschema import Draft202012Validator

        Draft202012Validator.check_schema(schema)
    return schema


#: the ``$id`` prefix of a study's own schemas: ``<prefix><folder>/schemas/<name>.schema.json``
#: names the file of the product's ``studies/<folder>/`` (so that a study schema's relative
#: ``$ref`` to a sibling resolves)
STUDY_ID_PREFIX = "https://kbrepro.invalid/studies/"
_STUDIES_DIR = Path(__file__).resolve().parent.parent / "studies"
_STUDY_SCHEMA_REL = re.compile(r"^([A-Za-z_][A-Za-z0-9_]{0,80})/schemas/([A-Za-z0-9][A-Za-z0-9._-]{0,120}\.schema\.json)$")


def _retrieve(uri: str):
    """Resolve a study schema's ``$id`` to the product's own copy of that file (and nothing
    else: no network, no other path)."""
    from referencing import Resource
    from referencing.exceptions import NoSuchResource

    m = _STUDY_SCHEMA_REL.match(uri[len(STUDY_ID_PREFIX):]) if uri.startswith(STUDY_ID_PREFIX) else None
    path = _STUDIES_DIR / m.group(1) / "schemas" / m.group(2) if m else None
    if path is None or not path.is_file():
        raise NoSuchResource(ref=uri)
    return Resource.from_contents(json.loads(path.read_text(encoding="utf-8")))


@lru_cache(maxsize=None)
def _registry():
    from referencing import Registry, Resource

    resources = []
    for name in available():
        schema = load(name)
        resources.append((schema.get("$id", ID_PREFIX + f"{name}.schema.json"), Resource.from_contents(schema)))
    return Registry(retrieve=_retrieve).with_resources(resources)


def _strict_integer(_checker, instance) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


@lru_cache(maxsize=None)
def _validator_class():
    from jsonschema import Draft202012Validator, validators

    return validators.extend(
        Draft202012Validator,
        type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _strict_integer))


@lru_cache(maxsize=None)
def _validator(name: str):
    from jsonschema import Draft202012Validator

    return _validator_class()(load(name), registry=_registry(),
                              format_checker=Draft202012Validator.FORMAT_CHECKER)


def json_path(parts: Iterable[Any]) -> str:
    """``$.a.b[3]`` form of a path given as a sequence of keys and indices."""
    out = "$"
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if str(p).isidentifier() else f"[{json.dumps(p)}]")
    return out


def nonfinite_paths(doc: Any, path: tuple = ()) -> list[str]:
    """JSON paths of every float in ``doc`` that is NaN or infinite."""
    found: list[str] = []
    if isinstance(doc, float):
        if not math.isfinite(doc):
            found.append(json_path(path))
    elif isinstance(doc, dict):
        for k, v in doc.items():
            found.extend(nonfinite_paths(v, path + (k,)))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            found.extend(nonfinite_paths(v, path + (i,)))
    return found


@lru_cache(maxsize=None)
def _fast_validator(name: str):
    """A compiled Rust validator (``jsonschema_rs``) of schema ``name``, or None where that
    library is not installed."""
    if jsonschema_rs is None:
        return None
    return jsonschema_rs.Draft202012Validator(load(name), registry=_rs_registry(), validate_formats=True)


@lru_cache(maxsize=1)
def _rs_registry():
    """The product's schemas as one ``jsonschema_rs`` registry, by ``$id``."""
    return jsonschema_rs.Registry([(load(n).get("$id", ID_PREFIX + f"{n}.schema.json"), load(n))
                                   for n in available()])


@lru_cache(maxsize=64)
def _fast_validator_of(schema_json: str):
    """A Rust validator of a shipped study's schema (its JSON text), or None where
    ``jsonschema_rs`` is missing or the schema cannot be compiled by it. Only schemas whose
    every ``$ref`` is local or one of the product's are compiled (nothing is fetched)."""
    if jsonschema_rs is None:
        return None
    schema = json.loads(schema_json)
    refs, stack = [], [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            refs += [v for k, v in node.items() if k == "$ref"]
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    if not all(isinstance(r, str) and (r.startswith("#") or r.startswith(ID_PREFIX)) for r in refs):
        return None
    try:
        return jsonschema_rs.Draft202012Validator(schema, registry=_rs_registry(), validate_formats=True)
    except Exception:  # a schema the Rust library cannot compile: the reference validator decides
        return None


def _bumped(node: Any) -> tuple[Any, bool]:
    """``node`` with every integral float ``x`` replaced by ``x + 0.5``, and whether every
    float is finite. Under the Rust validator, which counts ``3.0`` as an integer as the JSON
    Schema specification does, the bumped twin fails wherever our stricter ``integer`` would.
    Shares every part that holds no integral float (``node`` itself if none does)."""
    if isinstance(node, float):
        if not math.isfinite(node):
            return node, False
        if node != int(node):
            return node, True
        # x + 0.5 is x itself from 2**53 on (every float there is integral): 0.5 then, which
        # fails an integer (and may fail a bound: the reference validator then decides)
        return (node + 0.5 if abs(node) < 2.0 ** 52 else 0.5), True
    if isinstance(node, dict):
        items: Iterable = node.items()
    elif isinstance(node, list):
        items = enumerate(node)
    else:
        return node, True
    out, ok = None, True
    for k, v in items:
        if type(v) in _LEAVES:
            continue
        b, f = _bumped(v)
        ok = ok and f
        if b is not v:
            if out is None:
                out = dict(node) if isinstance(node, dict) else list(node)
            out[k] = b
    return (node if out is None else out), ok


#: exact types :func:`_bumped` leaves as they are without a call
_LEAVES = frozenset({str, int, bool, type(None)})


def validate(doc: Any, name: str) -> list[Violation]:
    """Every violation of schema ``name`` in ``doc``, plus every non-finite float, sorted by
    path. An empty list means the document is valid.

    The reference is the Python ``jsonschema`` validator with the strict ``integer``. Where
    ``jsonschema_rs`` is installed it is used as a fast pre-check, trusted only to say
    "valid", and only when the document AND its twin with every integral float bumped off
    the integers (:func:`_bumped`) are valid and every float is finite; any other answer
    goes to the reference validator for the full list of violations (about 1000x faster on
    the committed 600 KB of documents; ``tests/test_jsonio_schemas.py`` checks that the two
    agree on mutated documents)."""
    fast = _fast_validator(name)
    if fast is not None:
        try:
            twin, finite = _bumped(doc)
            if finite and fast.is_valid(doc) and (twin is doc or fast.is_valid(twin)):
                return []
        except (ValueError, TypeError, OverflowError, RecursionError):
            pass
    out = [Violation(json_path(e.absolute_path), e.message, name) for e in _validator(name).iter_errors(doc)]
    out += [Violation(p, "non-finite number (NaN or Infinity) is not allowed; encode it as a string "
                         "'nan', 'inf' or '-inf' where the schema permits", name) for p in nonfinite_paths(doc)]
    return sorted(set(out), key=lambda v: (v.path, v.message))


def schema_name_of(doc: Any) -> str | None:
    """The schema a document names in its ``schema`` field (``kbrepro/<name>``), or None."""
    if isinstance(doc, dict) and isinstance(doc.get("schema"), str) and doc["schema"].startswith("kbrepro/"):
        return doc["schema"][len("kbrepro/"):]
    return None


def supported_version(name: str) -> int:
    """The ``schema_version`` this code reads for schema ``name`` (its ``const``)."""
    return int(load(name)["properties"]["schema_version"]["const"])


#: keywords an author's (untrusted) schema may not use: Python's regular expressions have no
#: time bound (``^(a|a)+$`` on 40 a's and a '!' backtracks for ever), and dynamic references
#: and formats add nothing a study document needs
UNTRUSTED_REFUSED = ("pattern", "patternProperties", "format", "$dynamicRef", "$recursiveRef", "$dynamicAnchor",
                     "$recursiveAnchor", "contentSchema")
#: bounds of an untrusted schema: nodes and depth
UNTRUSTED_MAX_NODES, UNTRUSTED_MAX_DEPTH = 5000, 24


def untrusted_schema_problems(schema: Any) -> list[str]:
    """Why a schema from a stranger (a study the verifier does not ship) may not be applied,
    as messages; empty if it may. It must be a JSON object, valid under the Draft 2020-12
    meta-schema, within :data:`UNTRUSTED_MAX_NODES` nodes and :data:`UNTRUSTED_MAX_DEPTH`
    levels, use none of :data:`UNTRUSTED_REFUSED`, and ``$ref`` only inside itself (``#...``)
    or the product's own schemas (:data:`ID_PREFIX`)."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    if not isinstance(schema, dict):
        return ["a schema must be a JSON object"]
    out: list[str] = []
    stack, nodes = [(schema, 0, "$")], 0
    while stack and len(out) < 10:
        node, depth, path = stack.pop()
        nodes += 1
        if nodes > UNTRUSTED_MAX_NODES or depth > UNTRUSTED_MAX_DEPTH:
            return [f"larger than {UNTRUSTED_MAX_NODES} nodes or deeper than {UNTRUSTED_MAX_DEPTH} levels"]
        if isinstance(node, dict):
            for k, v in node.items():
                if k in UNTRUSTED_REFUSED:
                    out.append(f"{path}: keyword {k!r} is not allowed in a schema this verifier does not ship")
                if k == "$ref" and not (isinstance(v, str) and (v.startswith("#") or v.startswith(ID_PREFIX))):
                    out.append(f"{path}: $ref {str(v)[:80]!r} points outside the schema and the product's schemas")
                stack.append((v, depth + 1, f"{path}.{k}"))
        elif isinstance(node, list):
            stack.extend((v, depth + 1, f"{path}[{i}]") for i, v in enumerate(node))
    if not out:
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            out.append(f"not a valid JSON Schema: {str(exc.message)[:160]}")
    return out


#: seconds an untrusted schema may spend judging one document (:func:`validate_untrusted`)
UNTRUSTED_SECONDS = 20.0


class UntrustedSchema(dict):
    """A schema from a stranger (a study the verifier does not ship): applied only by
    :func:`validate_untrusted`."""


def _rows(doc: Any, schema: dict, name: str) -> list[tuple]:
    return [(v.path, v.message, v.schema) for v in validate_with(doc, schema, name)]


def validate_untrusted(doc: Any, schema: dict, name: str, seconds: float = UNTRUSTED_SECONDS) -> list[Violation]:
    """:func:`validate_with` for a stranger's schema: refused with one violation at ``$``
    if :func:`untrusted_schema_problems` finds a reason, else applied in a child process
    given ``seconds`` (a small schema can still cost exponential time through ``$ref``
    chains, or quadratic through ``uniqueItems``); past that, one violation says so."""
    import multiprocessing as mp

    why = untrusted_schema_problems(dict(schema))
    if why:
        return [Violation("$", f"the schema cannot be applied: {why[0]}", name)]

    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    with deferred_sigint():  # started with SIGINT blocked: the worker ignores Ctrl-C from its first instruction
        pool = ctx.Pool(1, initializer=ignore_sigint_from_now)
    try:
        rows = pool.apply_async(_rows, (doc, dict(schema), name)).get(timeout=seconds)
    except mp.TimeoutError:
        return [Violation("$", f"the schema took more than {seconds:g} s to apply; a schema this verifier does not "
                               "ship is given no more", name)]
    finally:
        pool.terminate()
        pool.join()
    return [Violation(*r) for r in rows]


def validate_with(doc: Any, schema: dict, name: str) -> list[Violation]:
    """Every violation of the schema document ``schema`` (a study's own schema, which may
    ``$ref`` the shipped ones by ``$id``) in ``doc``, plus every non-finite float, sorted by
    path; ``name`` labels the violations. Uses the strict ``integer`` of :func:`validate`.
    A schema that cannot be applied (unresolvable reference, invalid keyword value) gives one
    violation at ``$`` instead of an exception."""
    if not isinstance(schema, UntrustedSchema):  # the fast pre-check of validate(), for a shipped study's schema
        try:
            fast = _fast_validator_of(json.dumps(schema, sort_keys=True))
            if fast is not None:
                twin, finite = _bumped(doc)
                if finite and fast.is_valid(doc) and fast.is_valid(twin):
                    return []
        except (ValueError, TypeError, OverflowError, RecursionError):
            pass
    from jsonschema import Draft202012Validator  # the reference validator, only where the fast one did not pass

    try:
        v = _validator_class()(schema, registry=_registry(), format_checker=Draft202012Validator.FORMAT_CHECKER)
        out = [Violation(json_path(e.absolute_path), e.message, name) for e in v.iter_errors(doc)]
    except RecursionError:
        return [Violation("$", "the schema cannot be applied: it nests too deep", name)]
    except Exception as exc:  # referencing, re and type errors of a broken schema
        return [Violation("$", f"the schema cannot be applied: {type(exc).__name__}: {str(exc)[:160]}", name)]
    out += [Violation(p, "non-finite number (NaN or Infinity) is not allowed", name) for p in nonfinite_paths(doc)]
    return sorted(set(out), key=lambda x: (x.path, x.message))
