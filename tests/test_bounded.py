"""Bounded parsers: strict JSON, YAML and JMESPath within budgets, bootstrap and timing guards.

Each bound is checked with the exact error class and a fragment of its one-line message, and
the committed real documents (``examples/results-full-h200/*.json``, ``studies/*/*.yaml``,
the committed bundles' timings) are checked to lie well within every bound.
"""
from __future__ import annotations

import json
import tarfile
import time
from pathlib import Path

import jmespath
import pytest
import yaml

from kbrepro import schemas
from kbrepro.bundle import claims
from kbrepro.harness import bounded, jsonio, stats
from kbrepro.errors import InvalidResultsError, ReproError, UnreadableInputError, UsageError

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "examples" / "results-full-h200"
DOC_NAMES = ("run", "environment", "compile", "witness", "correctness", "timings", "scout")


@pytest.fixture(scope="module")
def docs():
    return {n: jsonio.read_json(RESULTS / f"{n}.json") for n in DOC_NAMES}


def _one_line(exc: ReproError) -> str:
    assert "\n" not in exc.message, exc.message
    return exc.message


# ------------------------------------------------------------------------------ strict JSON


@pytest.mark.parametrize("text,fragment", [
    ("[" * 100000 + "]" * 100000, "nested more than 64 levels deep"),
    ('{"a":' * 65 + "1" + "}" * 65, "nested more than 64 levels deep"),
    ("[" * 200000, "nested more than 64 levels deep"),
    ("[" + "9" * 5000 + "]", "integer of 5000 digits (more than 20)"),
    ('{"n": 123456789012345678901}', "integer of 21 digits"),
    ('{"n": 9223372036854775808}', "outside the 64-bit range"),
    ('{"n": -9223372036854775808}', "outside the 64-bit range"),
    ('{"x": 1e999}', "number 1e999 overflows a double"),
    ('{"x": -1E+400}', "overflows a double"),
    ("[" + "1" * 400 + ".5]", "overflows a double"),
    ('{"a": NaN}', "non-standard JSON token 'NaN'"),
    ('{"a": 1, "a": 2}', "duplicate key 'a'"),
])
def test_loads_strict_refuses_out_of_bounds_json(text, fragment):
    with pytest.raises(UnreadableInputError) as e:
        jsonio.loads_strict(text.encode(), "data/results/x.json")
    msg = _one_line(e.value)
    assert msg.startswith("data/results/x.json is not strict JSON: ") and fragment in msg


def test_loads_strict_bounds_are_exact_and_strings_do_not_count():
    assert jsonio.loads_strict("[" * 64 + "]" * 64) is not None
    assert jsonio.loads_strict('{"a":' * 64 + "1" + "}" * 64)
    assert jsonio.loads_strict('{"s": "' + "[" * 500 + '", "t": "\\"]]]]"}') == {"s": "[" * 500, "t": '"]]]]'}
    assert jsonio.loads_strict('{"n": 9223372036854775807, "m": -9223372036854775807}') == \
        {"n": 2 ** 63 - 1, "m": -(2 ** 63 - 1)}
    assert jsonio.loads_strict("[1e308, 1e-400, 1.5e+99]") == [1e308, 0.0, 1.5e99]
    assert jsonio.loads_strict('"' + "x" * 100 + '"', max_bytes=102) == "x" * 100
    with pytest.raises(UnreadableInputError, match="103 bytes, more than the 102 allowed"):
        jsonio.loads_strict('"' + "x" * 101 + '"', max_bytes=102)
    with pytest.raises(UnreadableInputError, match="nested more than 3 levels deep"):
        jsonio.loads_strict("[[[[]]]]", max_depth=3)
    with pytest.raises(UnreadableInputError, match="not strict JSON: Expecting"):
        jsonio.loads_strict("[1, 2")  # unbalanced: the parser names the problem, not the depth check


def test_nesting_depth_matches_a_walk_on_random_documents():
    import random

    def depth(o):
        if isinstance(o, dict):
            return 1 + max((depth(v) for v in o.values()), default=0)
        if isinstance(o, list):
            return 1 + max((depth(v) for v in o), default=0)
        return 0

    rng = random.Random(20261201)

    def gen(d):
        r = rng.random()
        if d > 10 or r < 0.3:
            return rng.choice([1, 'a]"[{', "x\\", "[[", 2.5, None, "}", "\\\"]"])
        if r < 0.65:
            return [gen(d + 1) for _ in range(rng.randint(0, 3))]
        return {rng.choice(["k", "[", '"{', "z\\"]) + str(i): gen(d + 1) for i in range(rng.randint(0, 3))}

    for _ in range(1000):
        o = gen(0)
        raw = json.dumps(o, indent=rng.choice([None, 1])).encode()
        assert jsonio.nesting_depth(raw) == depth(o)
        assert jsonio.nesting_depth(raw, 3) == min(depth(o), 4)


def test_deep_json_is_refused_quickly_and_never_as_recursion_error():
    t0 = time.perf_counter()
    for raw in (b"[" * 1_000_000, b'{"a":' * 300_000, b"[[]," * 200_000 + b"1" + b"]" * 200_000):
        with pytest.raises(UnreadableInputError, match="nested more than 64"):
            jsonio.loads_strict(raw)
    assert time.perf_counter() - t0 < 2.0


def test_committed_documents_parse_unchanged_within_the_bounds():
    for p in sorted(RESULTS.glob("*.json")):
        raw = p.read_bytes()
        assert jsonio.loads_strict(raw, p.name) == json.loads(raw), p.name
        assert jsonio.nesting_depth(raw) <= jsonio.MAX_JSON_DEPTH // 4, p.name
        assert len(raw) <= jsonio.MAX_JSON_BYTES // 100


def test_loads_strict_stays_cheap_on_the_largest_committed_documents():
    """The added checks cost about 1 ms per 300 KB document (harness/jsonio.py); the bound
    here is loose so that a loaded machine does not fail it."""
    for name in ("correctness", "timings"):
        raw = (RESULTS / f"{name}.json").read_bytes()
        best = min(_timed(jsonio.loads_strict, raw) for _ in range(5))
        plain = min(_timed(json.loads, raw) for _ in range(5))
        assert best < 4 * plain + 0.005, (name, best, plain)


def _timed(fn, *a) -> float:
    t0 = time.perf_counter()
    fn(*a)
    return time.perf_counter() - t0


# ------------------------------------------------------------------------------------ YAML

BOMB = (b'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
        + b"".join(b"%s: &%s [%s]\n" % (bytes([c]), bytes([c]), b",".join([b"*" + bytes([c - 1])] * 9))
                   for c in range(ord("b"), ord("j"))))


@pytest.fixture(params=["default", "pure-python"])
def loader(request, monkeypatch):
    """Every YAML test runs with libyaml (where present) and with the pure-Python parser."""
    if request.param == "pure-python":
        monkeypatch.setattr(bounded, "_LOADERS", [bounded._PyLoader])
    return request.param


@pytest.mark.parametrize("raw,fragment", [
    (BOMB, "YAML anchors are not allowed (&a) at line 1, column 4"),
    (b"a: *x\n", "YAML aliases are not allowed (*x)"),
    (b"base: {x: 1}\nother:\n  <<: {x: 2}\n  y: 3\n", "merge keys (<<) are not allowed at line 3"),
    (b'a: !!python/object/apply:os.system ["true"]\n', "the tag tag:yaml.org,2002:python/object/apply:os.system "
                                                        "is outside the YAML core schema"),
    (b"a: !custom 1\n", "the tag !custom is outside the YAML core schema"),
    (b"a: !!set {x, y}\n", "tag:yaml.org,2002:set is outside the YAML core schema"),
    (b"a: !!binary aGVsbG8=\n", "tag:yaml.org,2002:binary is outside"),
    (b"a: " + b"[" * 100000 + b"]" * 100000, "nested more than 32 levels deep"),
    (b"a: " + b"{a: " * 50000 + b"1" + b"}" * 50000, "nested more than 32 levels deep"),
    (b"a:\n" + b"- " * 100000 + b"x\n", "nested more than 32 levels deep"),
    (b"".join(b" " * i + b"k:\n" for i in range(600)), "nested more than 32 levels deep at line 32"),
    (b"a: [" + b"1," * 12000 + b"1]\n", "more than 10000 YAML nodes"),
    (b"a: " + b"9" * 5000 + b"\n", "an integer of 5000 characters (more than 24)"),
    (b"a: 9223372036854775808\n", "outside the 64-bit range"),
    (b"a: 1.0e+999\n", "the number 1.0e+999 overflows a double"),
    (b"a: 1\nb: 2\na: 3\n", "repeated key 'a' at line 3"),
    (b'a: "' + b"x" * 300000 + b'"\n', "300006 bytes, more than the 262144 allowed"),
])
def test_load_yaml_refuses(loader, raw, fragment):
    t0 = time.perf_counter()
    with pytest.raises(UnreadableInputError) as e:
        bounded.load_yaml(raw, "claims_fusion.yaml")
    assert time.perf_counter() - t0 < 2.0
    msg = _one_line(e.value)
    assert msg.startswith("claims_fusion.yaml is refused: ") and fragment in msg, msg


def test_alias_bomb_is_refused_in_well_under_a_second(loader):
    # expanded, BOMB would hold 9**9 = 387 million strings
    t0 = time.perf_counter()
    with pytest.raises(UnreadableInputError, match="anchors are not allowed"):
        bounded.load_yaml(BOMB, "spec")
    assert time.perf_counter() - t0 < 0.5
    with pytest.raises(UnreadableInputError, match="anchors are not allowed"):
        claims.parse_spec(BOMB, "bomb.yaml")


@pytest.mark.parametrize("raw,fragment", [
    (b"a: [1, 2\n", "is not valid YAML: while parsing a flow sequence"),
    (b'a: "\x01"\n', "is not valid YAML: unacceptable character #x0001"),
    (b"a: 1\n---\nb: 2\n", "expected a single document"),
    (b"? [1, 2]\n: 3\n", "found unhashable key"),
])
def test_load_yaml_syntax_errors_are_one_line(loader, raw, fragment):
    with pytest.raises(UnreadableInputError) as e:
        bounded.load_yaml(raw, "study s.yaml")
    msg = _one_line(e.value)
    assert msg.startswith("study s.yaml is not valid YAML: ") and fragment in msg, msg


def test_load_yaml_core_schema(loader):
    got = bounded.load_yaml(b"d: 2026-12-01\nn: ~\nb: true\ni: 0x10\nf: .inf\ns: !!str 3\nl: [1, {k: v}]\n", "x")
    assert got == {"d": "2026-12-01", "n": None, "b": True, "i": 16, "f": float("inf"), "s": "3",
                   "l": [1, {"k": "v"}]}
    assert bounded.load_yaml(b"a: 1\n" * 1, "x", max_nodes=3) == {"a": 1}
    with pytest.raises(UnreadableInputError, match="more than 2 YAML nodes"):
        bounded.load_yaml(b"a: 1\n", "x", max_nodes=2)


def test_committed_yaml_loads_as_before_within_the_bounds(loader):
    found = sorted((ROOT / "studies").glob("*/*.yaml"))
    assert {p.name for p in found} == {"study.yaml", "claims.yaml"} and len(found) >= 4, found
    for p in found:
        raw = p.read_bytes()
        assert bounded.load_yaml(raw, p.name) == yaml.safe_load(raw), p.name
        assert bounded.load_yaml(raw, p.name, max_nodes=bounded.MAX_YAML_NODES // 25,
                                 max_depth=bounded.MAX_YAML_DEPTH // 4) is not None
        assert len(raw) * 40 <= bounded.MAX_YAML_BYTES


def test_study_yaml_goes_through_the_bounded_loader(tmp_path):
    from kbrepro.harness.study import load_study

    good = (ROOT / "studies" / "pointwise_fusion" / "study.yaml").read_bytes()
    assert load_study(None, "quick").name == "pointwise-fusion-ftz"
    p = tmp_path / "study.yaml"
    p.write_bytes(BOMB)
    with pytest.raises(UnreadableInputError, match=r"study [^ ]*/study\.yaml is refused: YAML anchors"):
        load_study(p)
    p.write_bytes(good.replace(b"name: ", b"name: !!python/name:os.system ", 1))
    with pytest.raises(UnreadableInputError, match="outside the YAML core schema"):
        load_study(p)
    p.write_bytes(b"a: [1, 2\n")
    with pytest.raises(UnreadableInputError, match=r"study [^ ]*/study\.yaml is not valid YAML"):
        load_study(p)
    p.write_bytes(b"a: 1\n")
    with pytest.raises(UsageError, match="not a valid study definition"):
        load_study(p)


# -------------------------------------------------------------------------------- JMESPath


@pytest.mark.parametrize("expr,fragment", [
    ("a" + ".a" * 50000, "is 100001 characters, more than the 1000 allowed"),
    ("a" + ".a" * 300, "has 302 AST nodes, more than the 200 allowed"),
    ("@" + " | [@, @]" * 40, "nests 42 deep, more than the 32 levels allowed"),
    ("`" + "[" * 450 + "]" * 450 + "`", "AST nodes, more than the 200 allowed"),
    ("a[?", "bad JMESPath"),
    ("(" * 600 + "a" + ")" * 600, "characters, more than"),
])
def test_compile_query_refuses(expr, fragment):
    with pytest.raises(UsageError) as e:
        bounded.compile_query(expr, "claims_fusion.yaml: claim C99")
    msg = _one_line(e.value)
    assert msg.startswith("claims_fusion.yaml: claim C99: ") and fragment in msg, msg
    shown = msg.split("JMESPath ", 1)[1]
    quoted = shown[: shown.index(expr[:10]) + 84 + 5]
    assert len(quoted) < 100 and expr[:80] in msg  # the expression, cut to 80 characters


def test_compile_query_refuses_non_strings():
    with pytest.raises(UsageError, match="must be a string, not int"):
        bounded.compile_query(3, "spec")


ROUNDS = "timings.blocks[].rounds[]"
X8 = ".[@, @, @, @, @, @, @, @][]"


@pytest.mark.parametrize("expr,max_steps,fragment", [
    (ROUNDS + X8 * 4, None, "built a value of more than 1000000 items"),                  # 8x per step
    (ROUNDS + ".[@, @][]" * 12, None, "more than 1000000 items"),                          # doubling, flatten
    ("to_string(@" + " | [@, @]" * 25 + ")", None, "built a value of more than 1000000 items (counting shared"),
    ("[@" + " | [@, @]" * 25 + "] | [0] == [1]", None, "more than 1000000 items"),
    ("join('', [to_string(@), to_string(@), to_string(@)])", None, "took more than 250000 steps"),
    ("timings.blocks[*].rounds[*].[@, @, @, @][][*].times_ms.*[]", 10_000, "took more than 10000 steps"),
])
def test_search_budgets_stop_growth(docs, expr, max_steps, fragment):
    root = claims._Root(docs)
    q = bounded.compile_query(expr, "spec: claim X")
    t0 = time.perf_counter()
    with pytest.raises(bounded.QueryBudgetError) as e:
        bounded.search(q, root, max_steps=max_steps or bounded.MAX_STEPS)
    assert time.perf_counter() - t0 < 2.0
    assert isinstance(e.value, InvalidResultsError)
    msg = _one_line(e.value)
    assert msg.startswith("spec: claim X: JMESPath ") and fragment in msg, msg


def test_search_small_budgets_and_shared_budget():
    data = {"a": list(range(100))}
    assert bounded.search(bounded.compile_query("a[*]", "q"), data, max_steps=300) == list(range(100))
    with pytest.raises(bounded.QueryBudgetError, match="took more than 50 steps"):
        bounded.search(bounded.compile_query("a[*]", "q"), data, max_steps=50)
    with pytest.raises(bounded.QueryBudgetError, match="produced a list of 100 items, more than the 99"):
        bounded.search(bounded.compile_query("a", "q"), data, max_items=99)
    shared = bounded.StepBudget(150)
    bounded.search(bounded.compile_query("a[*]", "q"), data, shared=shared)
    assert 100 < shared.used < 150
    with pytest.raises(bounded.QueryBudgetError, match="steps left of the 150 shared"):
        bounded.search(bounded.compile_query("a[*]", "q"), data, shared=shared)


def test_search_turns_python_errors_into_jmespath_errors():
    for expr in ("a[::0]", "floor(to_number('1e999'))"):
        with pytest.raises(jmespath.exceptions.JMESPathError):
            bounded.search(bounded.compile_query(expr, "q"), {"a": [1, 2]})
    assert bounded.search(bounded.compile_query("`1` < 'a'", "q"), {}) is None
    assert bounded.search(bounded.compile_query("a[?@ > `1`]", "q"), {"a": [1, 2, 3]}) == [2, 3]


def test_committed_selectors_lie_well_within_the_budgets(docs):
    spec, _ = claims.load_spec()
    root = claims._Root(docs)
    total = 0
    for c in spec["claims"]:
        for chk in c["checks"]:
            for key in ("select", "blocks"):
                if key not in chk:
                    continue
                q = bounded.compile_query(chk[key], c["id"])
                nodes, depth = bounded._ast_size(q.ast)
                assert len(chk[key]) * 7 < bounded.MAX_QUERY_CHARS
                assert nodes * 9 < bounded.MAX_QUERY_NODES and depth * 2 < bounded.MAX_QUERY_DEPTH
                it = bounded._BoundedInterpreter(q, bounded.MAX_STEPS, bounded.MAX_ITEMS)
                assert it.visit(q.ast, root) == jmespath.search(chk[key], root)
                assert it.steps * 14 < bounded.MAX_STEPS and it.largest * 28 < bounded.MAX_ITEMS, (c["id"], it.steps)
                total += it.steps
    assert total * 12 < claims.MAX_EVALUATION_STEPS


# ---------------------------------------------------------------------------- claims specs


def _spec(check, boot=None):
    return {"schema": "kbrepro/claims-spec", "schema_version": 1, "study": "t",
            "bootstrap": boot or {"level": 0.95, "resamples": 500, "seed": 1},
            "claims": [{"id": "X", "sentence": "s", "checks": [check]}]}


def _raw(spec) -> bytes:
    return yaml.safe_dump(spec).encode()


def test_budget_errors_propagate_and_evaluation_errors_select_nothing(docs):
    bad = _spec({"kind": "all_equal", "select": ROUNDS + X8 * 4, "equals": True})
    with pytest.raises(bounded.QueryBudgetError, match="claim X: JMESPath"):
        claims.evaluate(bad, docs)
    bad_blocks = _spec({"kind": "paired_ratio", "blocks": "timings.blocks" + ".[@, @][]" * 14,
                        "numerators": ["cupy_default"], "denominator": "eager", "test": "faster"})
    with pytest.raises(bounded.QueryBudgetError):
        claims.evaluate(bad_blocks, docs)
    # values() of a document the engine writes but these results lack: nothing to read
    missing = claims.evaluate(_spec({"kind": "all_equal", "select": "values(selftest)", "equals": 1}), docs)
    assert missing["claims"][0]["verdict"] == "not_comparable"
    # a name that is no document at all is a typo (issue 12): an error, not not_comparable
    with pytest.raises(UsageError, match="claim X: select 'values\\(nothing\\)' reads nothing"):
        claims.evaluate(_spec({"kind": "all_equal", "select": "values(nothing)", "equals": 1}), docs)


def test_parse_spec_bounds(docs):
    ok = _spec({"kind": "all_equal", "select": "run.status", "equals": "complete"})
    assert claims.parse_spec(_raw(ok), "s.yaml") == ok
    long = _spec({"kind": "all_equal", "select": "a" * 100_000, "equals": 1})
    with pytest.raises(UsageError, match=r"s.yaml: claim X: JMESPath 'a{80}\.\.\.' is 100000 characters"):
        claims.parse_spec(_raw(long), "s.yaml")
    huge = _spec({"kind": "all_equal", "select": "a", "equals": 1}, {"level": 0.95, "resamples": 10 ** 9, "seed": 1})
    with pytest.raises(UsageError, match="1000000000 is greater than the maximum of 100000"):
        claims.parse_spec(_raw(huge), "s.yaml")
    with pytest.raises(UsageError, match="resamples 1000000000 is not an integer in"):
        claims.evaluate(huge, docs)
    neg_seed = _spec({"kind": "all_equal", "select": "a", "equals": 1}, {"level": 0.95, "resamples": 500, "seed": -1})
    with pytest.raises(UsageError, match="less than the minimum of 0"):
        claims.parse_spec(_raw(neg_seed), "s.yaml")
    with pytest.raises(UnreadableInputError, match="merge keys"):
        claims.parse_spec(b"a: {x: 1}\nb:\n  <<: {y: 2}\n", "s.yaml")


def test_bootstrap_size_is_bounded(docs, monkeypatch):
    chk = {"kind": "paired_ratio", "blocks": "timings.blocks[?kind=='study' && scope=='tail']",
           "numerators": ["cupy_default"], "denominator": "eager_tail", "test": "faster"}
    monkeypatch.setattr(claims, "MAX_INTERVAL_DRAWS", 500 * 24)
    with pytest.raises(UsageError, match="500 resamples of 25 rounds .* needs 12500 draws, more than the 12000"):
        claims.evaluate(_spec(chk), docs)
    monkeypatch.setattr(claims, "MAX_INTERVAL_DRAWS", stats.MAX_DRAWS)
    monkeypatch.setattr(claims, "MAX_EVALUATION_DRAWS", 500 * 25 * 2)
    with pytest.raises(UsageError, match="need more than 25000 bootstrap draws in all"):
        claims.evaluate(_spec(chk), docs)
    with pytest.raises(InvalidResultsError, match="draws, more than the 1000 allowed"):
        stats.bootstrap_median_ci([1.0] * 11, resamples=100, max_draws=1000)
    with pytest.raises(InvalidResultsError, match="not an integer in"):
        stats.bootstrap_median_ci([1.0, 2.0], resamples=10 ** 9)
    with pytest.raises(InvalidResultsError, match="finite"):
        stats.bootstrap_median_ci([1.0, float("nan")], resamples=100)


# ------------------------------------------------------------------------------ zero times


def _block(x, y):
    return {"id": "b1", "arms": ["x", "y"], "rounds": [{"times_ms": {"x": a, "y": b}} for a, b in zip(x, y)]}


@pytest.mark.parametrize("x,y,fragment", [
    ([1.0, 0.0], [1.0, 1.0], "round 1: the x time 0.0 ms is not a positive finite number"),
    ([1.0, 1.0], [0.0, 1.0], "round 0: the y time 0.0 ms"),
    ([1.0, 1.0], [1.0, -2.5], "the y time -2.5 ms"),
    ([1.0, float("inf")], [1.0, 1.0], "the x time inf ms"),
    ([1.0, float("nan")], [1.0, 1.0], "the x time nan ms"),
    ([1.0, True], [1.0, 1.0], "the x time True ms"),
    ([1e-300, 1.0], [1e300, 1.0], "the ratio x/y is 0.0, not a positive finite number"),
])
def test_paired_ratios_refuse_bad_times(x, y, fragment):
    with pytest.raises(InvalidResultsError) as e:
        stats.paired_ratios(_block(x, y), "x", "y")
    assert "timing block 'b1': " in _one_line(e.value) and fragment in e.value.message


def test_paired_ratios_refuse_what_is_not_a_block_and_ratio_verdict_never_divides_by_zero():
    for blk in ({"rounds": 3}, {"rounds": [1]}, {"rounds": [{"times_ms": [1, 2]}]}, [1]):
        with pytest.raises(InvalidResultsError):
            stats.paired_ratios(blk, "x", "y")
    assert claims.ratio_verdict("speedup_within", {"ci_low": 0.0, "ci_high": 0.0}, 0, (2.8, 5.5)) == "fails"
    assert claims.ratio_verdict("speedup_within", {"ci_low": 0.0, "ci_high": 0.3}, 0, (2.8, 5.5)) == "inconclusive"


def test_zero_time_in_a_selected_block_is_an_invalid_result_not_a_crash():
    docs = {"timings": {"blocks": [_block([1.0, 0.0, 1.0], [1.0, 1.0, 1.0])]}}
    chk = {"kind": "paired_ratio", "blocks": "timings.blocks", "numerators": ["x"], "denominator": "y",
           "test": "speedup_within", "range": [1.0, 2.0]}
    with pytest.raises(InvalidResultsError, match="not a positive finite number"):
        claims.evaluate(_spec(chk), docs)
    # a spec that builds blocks of its own is held to the same rule
    forged = dict(chk, blocks="[{id: 'f', arms: ['x', 'y'], rounds: [{times_ms: {x: `0`, y: `1`}}]}]")
    with pytest.raises(InvalidResultsError, match="the x time 0 ms"):
        claims.evaluate(_spec(forged), {})
    odd = claims.evaluate(_spec({"kind": "pairs_equal", "select": "[['a', 'a'], [`1`, `1`]]"}), {})
    assert odd["claims"][0]["checks"][0]["pairs"] == 1


@pytest.mark.slow
def test_timings_schema_refuses_zero_and_negative_times_and_accepts_the_committed_ones():
    doc = jsonio.read_json(RESULTS / "timings.json")
    assert schemas.validate(doc, "timings") == []
    with tarfile.open(next((ROOT / "examples").glob("*-extended-*.tar"))) as tf:
        m = next(m for m in tf if m.name.endswith("/timings.json"))
        assert schemas.validate(jsonio.loads_strict(tf.extractfile(m).read()), "timings") == []
    blk = doc["blocks"][0]
    arm = blk["arms"][0]
    blk["rounds"][0]["times_ms"][arm] = 0.0
    blk["rounds"][1]["times_ms"][arm] = -1.5
    found = [str(p) for p in schemas.validate(doc, "timings")]
    assert any(f"$.blocks[0].rounds[0].times_ms.{arm}: 0.0 is less than or equal to the minimum of 0" in p
               for p in found), found
    assert any("rounds[1]" in p and "-1.5" in p for p in found)
    blk["rounds"] = [blk["rounds"][2]] * 10001
    assert any("is too long" in str(p) for p in schemas.validate(doc, "timings"))


def test_the_indexed_name_filter_gives_what_jmespath_gives_on_random_lists():
    """``base[?field == 'text']`` runs through an index (harness/bounded.py); on random lists of
    records, strings, numbers, nulls and nested values it returns exactly JMESPath's answer,
    in JMESPath's order, also when a budget shares the index between searches."""
    import random

    import jmespath as jp

    from kbrepro.harness import bounded

    rng = random.Random(28)
    words = ["a", "b", "c", "", "1", "true", "null"]
    for trial in range(300):
        def value():
            return rng.choice([rng.choice(words), rng.randint(0, 3), None, True, 1.0, [rng.choice(words)],
                               {"name": rng.choice(words)}])
        recs = [rng.choice([{"name": value(), "v": i}, {"v": i}, value()]) for i in range(rng.randint(0, 12))]
        data = {"candidates": {"candidates": recs}}
        shared = bounded.StepBudget(10 ** 6)
        for w in words:
            for expr in (f"candidates.candidates[?name=='{w}']", f"candidates.candidates[?name=='{w}'].v",
                         f"candidates.candidates[?name=='{w}'] | [0]", f"candidates.candidates[?name==`\"{w}\"`].name"):
                want = jp.search(expr, data)
                assert bounded.search(expr, data) == want, (expr, recs)
                assert bounded.search(expr, data, shared=shared) == want, (expr, recs)


def test_a_claims_spec_may_grow_with_its_records_and_no_further():
    from kbrepro.bundle import claims as cm

    (b,) = (Path(__file__).resolve().parent.parent / "examples").glob("candidates-quick-*.tar")
    with tarfile.open(b) as tf:
        spec = json.loads(next(tf.extractfile(m).read() for m in tf if m.name.endswith("data/inputs/claims.yaml")))
    first = spec["claims"][0]
    spec["claims"] = [{**first, "id": f"K{i}a", "sentence": first["sentence"] + " " + "x" * 1200} for i in range(250)]
    raw = json.dumps(spec).encode()
    assert len(raw) > bounded.MAX_YAML_BYTES
    with pytest.raises(UnreadableInputError, match="more than"):
        cm.parse_spec(raw, "claims")
    assert len(cm.parse_spec(raw, "claims", records=250)["claims"]) == 250
    with pytest.raises(UnreadableInputError, match="more than"):
        cm.parse_spec(raw, "claims", records=20)


def test_load_yaml_and_parse_spec_caches_hand_out_copies_and_never_keep_a_refusal(loader, docs):
    """A verification parses the verifier's own study and claims spec several times; the
    caches must give each caller its own document, and a refused input must raise with the
    caller's ``where`` every time (only a document that parsed is kept)."""
    raw = b"name: s\nlist: [1, 2.5, {k: v}]\n"
    first = bounded.load_yaml(raw, "one.yaml")
    first["list"][2]["k"] = "edited"
    first["name"] = "edited"
    assert bounded.load_yaml(raw, "two.yaml") == {"name": "s", "list": [1, 2.5, {"k": "v"}]}
    for where in ("a.yaml", "b.yaml"):
        with pytest.raises(UnreadableInputError, match=f"^{where} is refused: .*anchors"):
            bounded.load_yaml(b"a: &x 1\n", where)
    with pytest.raises(UnreadableInputError, match="more than 3 YAML nodes"):  # bounds are part of the key
        bounded.load_yaml(raw, "three.yaml", max_nodes=3)
    ok = _spec({"kind": "all_equal", "select": "run.status", "equals": "complete"})
    spec = claims.parse_spec(_raw(ok), "s.yaml")
    spec["claims"][0]["checks"][0]["equals"] = "edited"
    assert claims.parse_spec(_raw(ok), "s.yaml") == ok
    bad = _spec({"kind": "all_equal", "select": "a" * 100_000, "equals": 1})
    for where in ("x.yaml", "y.yaml"):
        with pytest.raises(UsageError, match=f"{where}: claim X: JMESPath"):
            claims.parse_spec(_raw(bad), where)


def test_the_yaml_cache_answers_only_bytes():
    """A memoryview equals and hashes like the bytes it views: it must not reach a document
    cached for those bytes (the loader refuses it), and a bytearray or str is parsed or refused
    as before, never a bare TypeError (red-team finding)."""
    bounded.load_yaml(b"a: 1\n", "cached.yaml")
    for raw in (memoryview(b"a: 1\n"), bytearray(b"a: 1\n"), "a: 1\n"):
        try:
            got = bounded.load_yaml(raw, "other.yaml")
        except UnreadableInputError as exc:
            assert "other.yaml" in exc.message
        else:
            assert got == {"a": 1} and not isinstance(raw, memoryview)
