"""Bounded parsers for bytes that may be hostile: YAML and JMESPath.

A bundle received from a stranger carries a claims spec and a study definition (YAML) whose
claims select values with JMESPath. Both languages let a few bytes ask for unbounded work:
YAML aliases expand exponentially ("billion laughs"), nesting recurses in the composer, and
a JMESPath expression can double a list at every step (``[@, @][]``) or share one value many
times so that comparing or serialising it takes exponential time. This module reads both
within explicit budgets and turns every overrun into one of the product's errors:

* :func:`load_yaml`: a safe loader (a :class:`yaml.SafeLoader` subclass; where PyYAML has
  libyaml, its C parser under the same Python composer, constructor and resolver) that
  refuses anchors and aliases, merge keys (``<<``), tags outside the YAML core schema (null,
  bool, int, float, str, seq, map), repeated mapping keys, nesting deeper than
  ``max_depth``, more than ``max_nodes`` nodes, input beyond ``max_bytes``, and integers of
  more than :data:`MAX_YAML_INT_CHARS` characters or beyond 64 bits. Scalars that YAML 1.1
  would turn into timestamps stay strings (as in the YAML 1.2 core schema). Errors:
  :class:`UnreadableInputError`.
* :func:`compile_query`: JMESPath compilation bounded in length, AST size and AST depth.
  Errors: :class:`UsageError`.
* :func:`search`: evaluation with a :class:`jmespath.visitor.TreeInterpreter` subclass that
  counts steps (node visits, plus the size of every value a comparison or a function reads)
  and checks the size of every intermediate list, object and string, and the tree size of
  every value the query builds. Errors: :class:`QueryBudgetError`.

Imports only the standard library, ``yaml``, ``jmespath`` and ``kbrepro.errors``.
"""
from __future__ import annotations

import copy
import functools
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import jmespath
import jmespath.exceptions
import jmespath.visitor
import yaml
import yaml.composer
import yaml.constructor

from kbrepro.errors import InvalidResultsError, UnreadableInputError, UsageError

# ------------------------------------------------------------------------------------ YAML

#: Default bounds of :func:`load_yaml`. The committed YAML files are small
#: (the published study's ``claims.yaml``: 5.9 KB, 276 nodes, 7 levels counting scalars;
#: its ``study.yaml``: about 3.3 KB, 300 nodes, 6 levels). The bounds leave about
#: 40x on size, 30x on nodes and 4x on depth; composing 10 000 nodes takes about 0.3 s with
#: libyaml and 1.5 s with the pure-Python parser on a slow core.
MAX_YAML_BYTES = 256 * 1024
MAX_YAML_DEPTH = 32
MAX_YAML_NODES = 10_000
#: An integer scalar may have at most this many characters (sign, prefix, digits and ``_``
#: separators included); checked before conversion. Values must lie in (-2**63, 2**63).
MAX_YAML_INT_CHARS = 24
INT_LIMIT = 2 ** 63

_CORE = "tag:yaml.org,2002:"
CORE_TAGS = frozenset(_CORE + t for t in ("null", "bool", "int", "float", "str", "seq", "map"))
_MERGE = _CORE + "merge"


class _Refused(yaml.MarkedYAMLError):
    """A bound or a forbidden construct, with the position where it was found."""

    def __init__(self, problem: str, mark):
        super().__init__(problem=problem, problem_mark=mark)


class _Bounds:
    """The checks, mixed into a loader before its composer and constructor."""

    _max_depth = MAX_YAML_DEPTH
    _max_nodes = MAX_YAML_NODES
    _depth = _nodes = 0

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise _Refused(f"YAML aliases are not allowed (*{event.anchor})", event.start_mark)
        if event.anchor is not None:
            raise _Refused(f"YAML anchors are not allowed (&{event.anchor})", event.start_mark)
        tag = getattr(event, "tag", None)
        if tag not in (None, "!") and tag not in CORE_TAGS:
            raise _Refused(f"the tag {tag} is outside the YAML core schema", event.start_mark)
        self._nodes += 1
        if self._nodes > self._max_nodes:
            raise _Refused(f"more than {self._max_nodes} YAML nodes", event.start_mark)
        self._depth += 1
        if self._depth > self._max_depth:
            raise _Refused(f"nested more than {self._max_depth} levels deep", event.start_mark)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if node.tag == _MERGE:
            raise _Refused("merge keys (<<) are not allowed", node.start_mark)
        if node.tag not in CORE_TAGS:
            raise _Refused(f"the tag {node.tag} is outside the YAML core schema", node.start_mark)
        return node

    def construct_mapping(self, node, deep=False):
        mapping = super().construct_mapping(node, deep=deep)
        if len(mapping) != len(node.value):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise _Refused(f"repeated key {str(key)[:40]!r}", key_node.start_mark)
                seen.add(key)
        return mapping

    def construct_yaml_int(self, node):
        text = self.construct_scalar(node)
        if len(text) > MAX_YAML_INT_CHARS:
            raise _Refused(f"an integer of {len(text)} characters (more than {MAX_YAML_INT_CHARS})",
                           node.start_mark)
        value = super().construct_yaml_int(node)
        if not -INT_LIMIT < value < INT_LIMIT:
            raise _Refused(f"the integer {text} is outside the 64-bit range (magnitude >= 2**63)", node.start_mark)
        return value

    def construct_yaml_float(self, node):
        value = super().construct_yaml_float(node)
        if value in (float("inf"), float("-inf")) and "inf" not in self.construct_scalar(node).lower():
            raise _Refused(f"the number {self.construct_scalar(node)[:24]} overflows a double", node.start_mark)
        return value


# keep only the core schema's implicit tags (and merge, to refuse it by name): YAML 1.1
# timestamps and the '=' value key resolve as plain strings
_RESOLVERS = {first: [(tag, rx) for tag, rx in resolvers if tag in CORE_TAGS or tag == _MERGE]
              for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}


class _PyLoader(_Bounds, yaml.SafeLoader):
    """Pure-Python scanner and parser (used where PyYAML was built without libyaml)."""

    yaml_implicit_resolvers = _RESOLVERS

    def fetch_flow_collection_start(self, TokenClass):
        # the scanner reads up to 1024 characters ahead for a simple key at every open flow
        # level: refuse deep flow nesting here, before the composer sees it (quadratic cost)
        if self.flow_level >= self._max_depth:
            raise _Refused(f"nested more than {self._max_depth} levels deep", self.get_mark())
        super().fetch_flow_collection_start(TokenClass)


_LOADERS = [_PyLoader]
if getattr(yaml, "__with_libyaml__", False):
    import yaml.cyaml

    class _CLoader(_Bounds, yaml.composer.Composer, yaml.cyaml.CParser, yaml.constructor.SafeConstructor,
                   yaml.resolver.Resolver):
        """libyaml's scanner and parser (about 10x faster), with the Python composer (so
        that the bounds above apply node by node) and the safe constructor."""

        yaml_implicit_resolvers = _RESOLVERS

        def __init__(self, stream):
            yaml.cyaml.CParser.__init__(self, stream)
            yaml.composer.Composer.__init__(self)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)

    _LOADERS.insert(0, _CLoader)

for _cls in _LOADERS:
    _cls.add_constructor(_CORE + "int", _Bounds.construct_yaml_int)
    _cls.add_constructor(_CORE + "float", _Bounds.construct_yaml_float)


def _where_in(mark) -> str:
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


def _one_line(text) -> str:
    return " ".join(str(text).split())


def load_yaml(raw: bytes, where: str, *, max_bytes: int = MAX_YAML_BYTES, max_depth: int = MAX_YAML_DEPTH,
              max_nodes: int = MAX_YAML_NODES) -> Any:
    """Parse one YAML document from ``raw`` (bytes or str) within bounds.

    Refuses (see the module docstring): input over ``max_bytes`` bytes (default 256 KiB),
    nesting deeper than ``max_depth`` (32), more than ``max_nodes`` nodes (10 000), anchors,
    aliases, merge keys, tags outside the core schema, repeated keys, out-of-range integers
    and numbers that overflow a double. Work is linear in the input: the first anchor is
    refused before anything expands.

    Raises :class:`UnreadableInputError` with a one-line message naming ``where``: ``"WHERE
    is not valid YAML: PROBLEM at line L, column C"`` for syntax errors, ``"WHERE is refused:
    PROBLEM at line L, column C"`` for a bound or a forbidden construct.
    """
    hint = "fix the YAML (plain block mappings and sequences of scalars; no anchors, aliases, merge keys or tags)"
    size = len(raw.encode("utf-8") if isinstance(raw, str) else raw)
    if size > max_bytes:
        raise UnreadableInputError(f"{where} is refused: {size} bytes, more than the {max_bytes} allowed", hint)
    key = (_LOADERS[0], raw, max_depth, max_nodes) if type(raw) is bytes and size <= _CACHE_MAX_BYTES else None
    if key is not None and key in _CACHE:
        _CACHE.move_to_end(key)
        return copy.deepcopy(_CACHE[key])
    doc = _load_yaml(raw, where, hint, max_depth, max_nodes)
    if key is not None:
        _CACHE[key] = copy.deepcopy(doc)
        if len(_CACHE) > _CACHE_ENTRIES:
            _CACHE.popitem(last=False)
    return doc


#: :func:`load_yaml` keeps the documents it parsed from its last few small inputs (a
#: verification reads the verifier's own study definition and claims spec several times);
#: each caller gets its own copy. Only a document that parsed within its bounds is kept.
_CACHE: OrderedDict = OrderedDict()
_CACHE_ENTRIES = 16
_CACHE_MAX_BYTES = 64 * 1024


def _load_yaml(raw, where: str, hint: str, max_depth: int, max_nodes: int) -> Any:
    """:func:`load_yaml` after its size check, without the cache."""
    loader = None
    try:
        loader = _LOADERS[0](raw)
        loader._max_depth, loader._max_nodes = max_depth, max_nodes
        return loader.get_single_data()
    except _Refused as exc:
        raise UnreadableInputError(f"{where} is refused: {exc.problem}{_where_in(exc.problem_mark)}", hint) from exc
    except yaml.MarkedYAMLError as exc:
        if "maximum nesting depth" in str(exc.problem):
            # libyaml of PyYAML >= 6.0.4 stops deep nesting in its own parser, before our depth check
            raise UnreadableInputError(f"{where} is refused: nested more than {max_depth} levels deep"
                                       f"{_where_in(exc.problem_mark)}", hint) from exc
        ctx = f"{_one_line(exc.context)}: " if exc.context else ""
        raise UnreadableInputError(f"{where} is not valid YAML: {ctx}{_one_line(exc.problem)}"
                                   f"{_where_in(exc.problem_mark)}", hint) from exc
    except yaml.YAMLError as exc:  # ReaderError: bad encoding or a control character
        raise UnreadableInputError(f"{where} is not valid YAML: {_one_line(exc)}", hint) from exc
    except (RecursionError, ValueError, TypeError, OverflowError) as exc:  # defence in depth
        raise UnreadableInputError(f"{where} is not valid YAML: {type(exc).__name__}: {_one_line(exc)[:200]}",
                                   hint) from exc
    finally:
        if loader is not None:
            loader.dispose()


# -------------------------------------------------------------------------------- JMESPath

#: Default bounds of :func:`compile_query`. The committed selectors
#: (the published study's ``claims.yaml``) are at most 132 characters, 21 AST nodes and 6 levels
#: deep; the bounds leave 7x, 9x and 5x.
MAX_QUERY_CHARS = 1000
MAX_QUERY_NODES = 200
MAX_QUERY_DEPTH = 32
#: Default budgets of :func:`search`. The committed selectors on the committed documents
#: (``examples/results-full-h200``) take at most 16 700 steps each (78 000 in all) and build
#: values of at most 35 000 items (measured by ``tests/test_bounded.py``); the budgets leave
#: 15x and 28x room and stop a hostile query within about 0.3 s.
MAX_STEPS = 250_000
MAX_ITEMS = 1_000_000
_SHOWN = 80


def _shown(expr: str) -> str:
    return repr(expr if len(expr) <= _SHOWN else expr[:_SHOWN] + "...")


class QueryBudgetError(InvalidResultsError):
    """A JMESPath evaluation exceeded its step or size budget (:func:`search`). Derives from
    :class:`InvalidResultsError` (exit code 1): the data or the spec asked for unbounded work."""


class StepBudget:
    """Steps shared by several :func:`search` calls, e.g. every selector of one claims
    evaluation: ``total`` steps in all; ``used`` counts what the searches took so far."""

    def __init__(self, total: int):
        self.total = int(total)
        self.used = 0
        # what the searches of one evaluation share, over data that does not change meanwhile
        # (a caller that changes the data between searches must use a budget per search):
        # tree sizes (id -> (value kept alive, size)) and the name indexes of filters
        self.weights: dict[int, tuple[Any, int]] = {}
        self.indexes: dict[tuple[int, str], tuple[Any, dict]] = {}

    @property
    def left(self) -> int:
        return max(0, self.total - self.used)


@dataclass(frozen=True)
class Query:
    """A compiled, bounded JMESPath query: its text, where it came from, and its AST."""

    expression: str
    where: str
    ast: dict = field(repr=False, compare=False)


def _ast_size(ast: dict) -> tuple[int, int]:
    """(number of nodes, depth) of a JMESPath AST; a literal's value counts its items."""
    nodes, depth, stack = 0, 0, [(ast, 1)]
    while stack:
        node, d = stack.pop()
        nodes += 1
        depth = max(depth, d)
        if node.get("type") == "literal":
            nodes += _literal_items(node.get("value"))
        for child in node.get("children", ()):
            if isinstance(child, dict):
                stack.append((child, d + 1))
    return nodes, depth


def _literal_items(value) -> int:
    n, stack = 0, [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            n += len(v)
            stack.extend(v.values())
        elif isinstance(v, list):
            n += len(v)
            stack.extend(v)
    return n


@functools.lru_cache(maxsize=8192)
def parsed_ast(expr: str) -> dict:
    """The AST of ``expr`` (read, never changed, by every Query made from it): a claims spec of
    250 records names 1,500 selectors, each compiled three times by the verifier, and
    JMESPath's own cache keeps 128."""
    return jmespath.compile(expr).parsed


def compile_query(expr: str, where: str, *, max_chars: int = MAX_QUERY_CHARS, max_nodes: int = MAX_QUERY_NODES,
                  max_depth: int = MAX_QUERY_DEPTH) -> Query:
    """Compile JMESPath ``expr`` (from ``where``, e.g. ``"claims.yaml: claim C03"``).

    Refuses an expression that is not a string, longer than ``max_chars`` characters
    (default 1000), that does not parse, or whose AST has more than ``max_nodes`` nodes
    (200; a literal counts its items) or is deeper than ``max_depth`` (32).

    Raises :class:`UsageError` naming ``where`` and the expression (cut to 80 characters).
    """
    hint = "see https://jmespath.org for the syntax; selectors in a claims spec are short paths and filters"
    if not isinstance(expr, str):
        raise UsageError(f"{where}: a JMESPath expression must be a string, not {type(expr).__name__}", hint)
    if len(expr) > max_chars:
        raise UsageError(f"{where}: JMESPath {_shown(expr)} is {len(expr)} characters, more than the "
                         f"{max_chars} allowed", hint)
    try:
        ast = parsed_ast(expr)
    except jmespath.exceptions.JMESPathError as exc:
        raise UsageError(f"{where}: bad JMESPath {_shown(expr)}: {_one_line(exc)[:200]}", hint) from exc
    except (RecursionError, ValueError, TypeError) as exc:
        raise UsageError(f"{where}: bad JMESPath {_shown(expr)}: {type(exc).__name__}", hint) from exc
    nodes, depth = _ast_size(ast)
    if nodes > max_nodes:
        raise UsageError(f"{where}: JMESPath {_shown(expr)} has {nodes} AST nodes, more than the {max_nodes} "
                         "allowed", hint)
    if depth > max_depth:
        raise UsageError(f"{where}: JMESPath {_shown(expr)} nests {depth} deep, more than the {max_depth} "
                         "levels allowed", hint)
    return Query(expression=expr, where=where, ast=ast)


# node types whose result is a value the interpreter builds (not a part of the input)
_BUILDS = frozenset({"multi_select_list", "multi_select_dict", "projection", "value_projection",
                     "filter_projection", "flatten", "function_expression", "slice", "literal"})


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class _BoundedInterpreter(jmespath.visitor.TreeInterpreter):
    """Counts steps and checks sizes; see :func:`search`."""

    def __init__(self, query: Query, max_steps: int, max_items: int, shared: StepBudget | None = None):
        super().__init__()
        self._q, self._max_items = query, max_items
        self._shared = shared
        self._max_steps = max_steps if shared is None else min(max_steps, shared.left)
        self.steps = 0
        self.largest = 0
        # id -> (value kept alive, tree size); shared by the searches of one evaluation
        self._weights: dict[int, tuple[Any, int]] = shared.weights if shared is not None else {}
        self._indexes: dict[tuple[int, str], tuple[Any, dict]] = shared.indexes if shared is not None else {}

    def _over(self, what: str):
        raise QueryBudgetError(
            f"{self._q.where}: JMESPath {_shown(self._q.expression)} {what}",
            "the query asks for unbounded work: a bundled claims spec must select values with short paths "
            "and filters (see harness/bounded.py for the budgets)")

    def _charge(self, n: int) -> None:
        self.steps += n
        if self.steps > self._max_steps:
            if self._shared is not None and self._max_steps == self._shared.left:
                self._over(f"took more than the {self._max_steps} steps left of the {self._shared.total} shared by "
                           "all queries of this evaluation")
            self._over(f"took more than {self._max_steps} steps")

    def weight(self, value) -> int:
        """Tree size of ``value``: 1 per node, plus the length of every string, counting a
        value shared several times once per occurrence (as a serialiser or a comparison
        would meet it). Memoised per object, so a shared value costs its size once."""
        if not isinstance(value, (list, dict)):
            return 1 + len(value) if isinstance(value, str) else 1
        memo = self._weights
        got = memo.get(id(value))
        if got is not None:
            return got[1]
        stack = [(value, False)]
        while stack:
            v, done = stack.pop()
            if id(v) in memo:
                continue
            children = v.values() if isinstance(v, dict) else v
            if done:
                w = 1 + (sum(len(k) for k in v) if isinstance(v, dict) else 0)
                for c in children:
                    if isinstance(c, (list, dict)):
                        w += memo[id(c)][1]
                    else:
                        w += 1 + len(c) if isinstance(c, str) else 1
                    if w > self._max_items:  # no need to count further
                        break
                memo[id(v)] = (v, w)
                continue
            stack.append((v, True))
            stack.extend((c, False) for c in children if isinstance(c, (list, dict)) and id(c) not in memo)
            if len(stack) > 2 * self._max_items:
                self._over(f"reads a value of more than {self._max_items} items")
        return memo[id(value)][1]

    def _check_size(self, node_type: str, result) -> None:
        if isinstance(result, (list, dict, str)):
            n = len(result)
            if n > self._max_items:
                self._over(f"produced a {type(result).__name__} of {n} items, more than the {self._max_items} allowed")
            if node_type in _BUILDS and not isinstance(result, str):
                w = self.weight(result)
                self.largest = max(self.largest, w)
                if w > self._max_items:
                    self._over(f"built a value of more than {self._max_items} items (counting shared parts "
                               "once per use)")

    def visit(self, node, *args, **kwargs):
        self._charge(1)
        result = super().visit(node, *args, **kwargs)
        self._check_size(node["type"], result)
        return result

    def visit_comparator(self, node, value):
        left = self.visit(node["children"][0], value)
        right = self.visit(node["children"][1], value)
        # a comparison may read both operands whole
        self._charge(min(self.weight(left), self.weight(right)))
        func = self.COMPARATOR_FUNC[node["value"]]
        if node["value"] in self._EQUALITY_OPS:
            return func(left, right)
        # ordering: numbers with numbers, strings with strings; anything else is null
        if not ((_is_number(left) and _is_number(right)) or (isinstance(left, str) and isinstance(right, str))):
            return None
        return func(left, right)

    def visit_filter_projection(self, node, value):
        """``base[?field == 'text']`` (a claims selector picking one record by name) through an
        index of the base list by that field's string values, built once per list and search
        group: the same elements in the same order as JMESPath's scan (a string equals only an
        equal string), at one step per element of the list instead of a comparison each
        (250 records, 1,500 selectors: 375,000 comparisons before). Any other filter scans."""
        cmp = node["children"][2]
        kids = cmp.get("children") or []
        if not (cmp.get("type") == "comparator" and cmp.get("value") == "eq" and len(kids) == 2
                and kids[0].get("type") == "field" and kids[1].get("type") == "literal"
                and isinstance(kids[1].get("value"), str)):
            return super().visit_filter_projection(node, value)
        base = self.visit(node["children"][0], value)
        if not isinstance(base, list):
            return None
        self._charge(len(base))
        key = (id(base), kids[0]["value"])
        got = self._indexes.get(key)
        if got is None:
            index: dict = {}
            for i, el in enumerate(base):
                v = el.get(kids[0]["value"]) if isinstance(el, dict) else None
                if isinstance(v, str):
                    index.setdefault(v, []).append(i)
            got = self._indexes[key] = (base, index)
        collected = []
        for i in got[1].get(kids[1]["value"], ()):
            current = self.visit(node["children"][1], base[i])
            if current is not None:
                collected.append(current)
        return collected

    def visit_function_expression(self, node, value):
        args = [self.visit(child, value) for child in node["children"]]
        # a function may read (and copy, sort, serialise) its arguments whole
        self._charge(sum(self.weight(a) for a in args if not isinstance(a, jmespath.visitor._Expression)))
        return self._functions.call_function(node["value"], args)


def search(compiled: Query | str, data: Any, *, max_steps: int = MAX_STEPS, max_items: int = MAX_ITEMS,
           shared: StepBudget | None = None) -> Any:
    """Evaluate ``compiled`` (from :func:`compile_query`; a plain string is compiled first
    with the default bounds, ``where`` ``"query"``) on ``data`` within budgets.

    A step is one AST node visit, plus, for a comparison, the size of its smaller operand
    and, for a function call, the size of its arguments (what they may read). More than
    ``max_steps`` steps (default :data:`MAX_STEPS`), an intermediate list, object or string
    longer than ``max_items`` (default :data:`MAX_ITEMS`), or a built value whose tree size
    (shared parts counted per use, strings by length) exceeds ``max_items`` raises
    :class:`QueryBudgetError`. JMESPath's own errors (``jmespath.exceptions.JMESPathError``,
    e.g. ``values()`` of null) propagate unchanged, and the Python errors an evaluation can
    raise (a slice step of 0, ``floor()`` of infinity) are raised as ``JMESPathError`` too.
    The result is returned as JMESPath gives it. With ``shared``, the search may also take
    no more than ``shared.left`` steps, and adds the steps it took to ``shared.used``.
    """
    if not isinstance(compiled, Query):
        compiled = compile_query(compiled, "query")
    interp = _BoundedInterpreter(compiled, max_steps, max_items, shared)
    try:
        return interp.visit(compiled.ast, data)
    except RecursionError:
        interp._over("nests too deep to evaluate")
    except (ValueError, TypeError, ArithmeticError) as exc:
        if isinstance(exc, jmespath.exceptions.JMESPathError):
            raise
        # e.g. a slice step of 0, floor() of infinity: an evaluation error like JMESPath's own
        raise jmespath.exceptions.JMESPathError(
            f"{compiled.where}: JMESPath {_shown(compiled.expression)}: {type(exc).__name__}: "
            f"{_one_line(exc)[:200]}") from exc
    finally:
        if shared is not None:
            shared.used += interp.steps


__all__ = ["load_yaml", "compile_query", "parsed_ast", "search", "Query", "QueryBudgetError", "StepBudget", "MAX_YAML_BYTES",
           "MAX_YAML_DEPTH", "MAX_YAML_NODES", "MAX_QUERY_CHARS", "MAX_QUERY_NODES", "MAX_QUERY_DEPTH",
           "MAX_STEPS", "MAX_ITEMS"]
