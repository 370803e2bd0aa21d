"""Corpus cases of the parsers: bundle bytes that once crashed or hung the verifier.

Each case hands the verifier one hostile construct in one file, with every hash a forger
can recompute recomputed (the BagIt manifests; for the claims spec and the study YAML also
their sha256 in ``bundle.json``, ``claims.json`` and ``run.json``), so that only the bounded
parsers (``harness/jsonio.loads_strict``, ``harness/bounded``) and the timing guards can
object. Expected: a result document that cannot be parsed or validated fails in tier
``documents``; a bundled claims spec that cannot be parsed, is out of bounds or exceeds an
evaluation budget fails in tier ``claims``; a bundled study YAML that cannot be parsed fails
in tier ``documents``; all with exit code 1, and quickly (no case may hang the verifier).

Loaded by ``make_corpus.py`` (``EXTRA_MODULES``): :data:`NAMES` and :func:`build`.
"""
from __future__ import annotations

import hashlib

NAMES = (
    "parser_json_nested_100000", "parser_json_int_5000_digits", "parser_json_count_beyond_int64",
    "parser_json_float_1e999", "parser_timing_zero", "parser_timing_negative",
    "parser_spec_alias_bomb", "parser_spec_nested_100000", "parser_spec_merge_key", "parser_spec_python_tag",
    "parser_spec_int_5000_digits", "parser_spec_jmespath_doubling", "parser_spec_selector_100kb",
    "parser_spec_bootstrap_1e9", "parser_study_alias_bomb",
)

CORRECTNESS = "data/results/correctness.json"
TIMINGS = "data/results/timings.json"
BUNDLE = "data/bundle.json"
CLAIMS = "data/claims.json"
RUN = "data/results/run.json"

# "billion laughs": expanded, the last key would hold 9**9 = 387 420 489 strings
ALIAS_BOMB = ("lol0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
              + "".join(f"lol{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 10))).encode()
# C14's selector: short, and read by no other claim
C14_SELECT = b'select: "compile.variants[*].ftz_evidence.agrees"'
BOOTSTRAP_LINE = b"bootstrap: {level: 0.95, resamples: 10000, seed: 20261201}\n"
# every round of every block, multiplied by 8 four times: 555 x 4096 rounds
DOUBLING = "timings.blocks[].rounds[]" + ".[@, @, @, @, @, @, @, @][]" * 4
# a claim the verifier does not define: judged by the author's definition, so evaluated
AUTHOR_CLAIM = (b'\n  - id: X01\n    sentence: "Every timing round, eight times over, four times."\n    checks:\n'
                b'      - kind: all_equal\n        select: "%s"\n        equals: true\n')


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def build(g, kit) -> list:
    meta = kit.jsonio.loads_strict(g.files[BUNDLE], BUNDLE)
    spec_rel = "data/" + meta["claims"]["file"]
    study_rel = "data/" + meta["study"]["file"]

    def doc_case(name, fragment, problem_file, description):
        return kit.Case(name, f"{name}.tar", "documents", 1, "documents", fragment, problem_file, description)

    def spec_case(name, fragment, description):
        return kit.Case(name, f"{name}.tar", "claims", 1, "claims", fragment, spec_rel,
                        description + "; the spec's sha256 updated in bundle.json and claims.json; "
                        "manifests recomputed")

    def raw_edit(rel, old, new):
        def mutate(f):
            f[rel] = kit._replace_once(f[rel], old, new, rel)
        return mutate

    def time_edit(value):
        def mutate(f):
            def edit(d):
                blk = d["blocks"][0]
                blk["rounds"][0]["times_ms"][blk["arms"][0]] = value
            kit.edit_json(f, TIMINGS, edit)
        return mutate

    def spec_edit(fn):
        """Edit the bundled claims spec's bytes with ``fn`` and re-forge its two hashes."""
        def mutate(f):
            f[spec_rel] = fn(f[spec_rel])
            digest = _sha(f[spec_rel])
            kit.edit_json(f, BUNDLE, lambda d: d["claims"].update(sha256=digest))
            kit.edit_json(f, CLAIMS, lambda d: d["spec"].update(sha256=digest))
        return mutate

    def spec_replace(old, new):
        return spec_edit(lambda raw: kit._replace_once(raw, old, new, spec_rel))

    def study_bomb(f):
        f[study_rel] = f[study_rel] + b"\n" + ALIAS_BOMB
        digest = _sha(f[study_rel])
        kit.edit_json(f, BUNDLE, lambda d: d["study"].update(sha256=digest))
        kit.edit_json(f, RUN, lambda d: d["study"].update(sha256=digest))

    first_err = b'"max_abs_error": 0.0,'
    first_count = b'"element_count": 16777216,'
    return [
        kit._recomputed_case(g, doc_case(
            "parser_json_nested_100000", "nested more than 64 levels deep", CORRECTNESS,
            "the first max_abs_error of correctness.json replaced by arrays nested 100000 deep; manifests recomputed"),
            raw_edit(CORRECTNESS, first_err, b'"max_abs_error": ' + b"[" * 100000 + b"]" * 100000 + b",")),
        kit._recomputed_case(g, doc_case(
            "parser_json_int_5000_digits", "integer of 5000 digits (more than 20)", CORRECTNESS,
            "the first element_count of correctness.json written as an integer of 5000 digits; manifests recomputed"),
            raw_edit(CORRECTNESS, first_count, b'"element_count": ' + b"9" * 5000 + b",")),
        kit._recomputed_case(g, doc_case(
            "parser_json_count_beyond_int64", "integer 9223372036854775808 outside the 64-bit range", CORRECTNESS,
            "the first element_count of correctness.json set to 2**63; manifests recomputed"),
            raw_edit(CORRECTNESS, first_count, b'"element_count": 9223372036854775808,')),
        kit._recomputed_case(g, doc_case(
            "parser_json_float_1e999", "number 1e999 overflows a double", CORRECTNESS,
            "the first max_abs_error of correctness.json written as 1e999 (inf to Python's json); "
            "manifests recomputed"),
            raw_edit(CORRECTNESS, first_err, b'"max_abs_error": 1e999,')),
        kit._recomputed_case(g, doc_case(
            "parser_timing_zero", "0.0 is less than or equal to the minimum of 0", TIMINGS,
            "timings.json: the first time of the first arm of the first block set to 0.0 (a paired ratio's "
            "denominator); manifests recomputed"), time_edit(0.0)),
        kit._recomputed_case(g, doc_case(
            "parser_timing_negative", "-1.5 is less than or equal to the minimum of 0", TIMINGS,
            "timings.json: the first time of the first arm of the first block set to -1.5; manifests recomputed"),
            time_edit(-1.5)),
        kit._recomputed_case(g, spec_case(
            "parser_spec_alias_bomb", "YAML anchors are not allowed (&a0)",
            "a YAML alias bomb (9 levels of 9 aliases, 387 million strings expanded) appended to the bundled "
            "claims spec"), spec_edit(lambda raw: raw + b"\n" + ALIAS_BOMB)),
        kit._recomputed_case(g, spec_case(
            "parser_spec_nested_100000", "nested more than 32 levels deep",
            "a key holding flow sequences nested 100000 deep appended to the bundled claims spec"),
            spec_edit(lambda raw: raw + b"\ndeep: " + b"[" * 100000 + b"]" * 100000 + b"\n")),
        kit._recomputed_case(g, spec_case(
            "parser_spec_merge_key", "merge keys (<<) are not allowed",
            "the bundled claims spec's bootstrap written with a merge key (<<: {...})"),
            spec_replace(BOOTSTRAP_LINE, b"bootstrap:\n  <<: {level: 0.95, resamples: 10000, seed: 20261201}\n")),
        kit._recomputed_case(g, spec_case(
            "parser_spec_python_tag", "is outside the YAML core schema",
            "the bundled claims spec's study name tagged !!python/object/apply:os.system"),
            spec_replace(b"study: pointwise-fusion-ftz\n",
                         b'study: !!python/object/apply:os.system ["true"]\n')),
        kit._recomputed_case(g, spec_case(
            "parser_spec_int_5000_digits", "an integer of 5000 characters (more than 24)",
            "the bundled claims spec's bootstrap seed written as an integer of 5000 digits"),
            spec_replace(BOOTSTRAP_LINE, b"bootstrap: {level: 0.95, resamples: 10000, seed: " + b"9" * 5000 + b"}\n")),
        kit._recomputed_case(g, spec_case(
            "parser_spec_jmespath_doubling", "built a value of more than 1000000 items",
            f"a claim of the author's own (X01, so that the verifier evaluates it) appended to the bundled claims "
            f"spec, selecting {DOUBLING!r}: every timing round multiplied by 8 at each of four steps"),
            spec_edit(lambda raw: raw.rstrip(b"\n") + b"\n" + AUTHOR_CLAIM % DOUBLING.encode())),
        kit._recomputed_case(g, spec_case(
            "parser_spec_selector_100kb", "is 100001 characters, more than the 1000 allowed",
            "claim C14's selector replaced by a JMESPath expression of 100001 characters (a.a.a...)"),
            spec_replace(C14_SELECT, b'select: "a' + b".a" * 50000 + b'"')),
        kit._recomputed_case(g, spec_case(
            "parser_spec_bootstrap_1e9", "1000000000 is greater than the maximum of 100000",
            "the bundled claims spec asks for 10**9 bootstrap resamples"),
            spec_replace(BOOTSTRAP_LINE, b"bootstrap: {level: 0.95, resamples: 1000000000, seed: 20261201}\n")),
        kit._recomputed_case(g, kit.Case(
            "parser_study_alias_bomb", "parser_study_alias_bomb.tar", "documents", 1, "documents",
            "YAML anchors are not allowed (&a0)", study_rel,
            "a YAML alias bomb appended to the bundled study YAML; its sha256 updated in bundle.json and run.json; "
            "manifests recomputed"), study_bomb),
    ]
