"""Claims as checks: evaluate a claims spec (a study's ``claims.yaml``) on result documents.

Each claim has checks; each check selects values with JMESPath and decides a verdict:

``holds`` / ``fails`` / ``inconclusive`` (a timing interval too wide to decide) /
``not_comparable`` (the documents hold nothing the check can read).

A claim's verdict combines its checks: any ``fails`` -> fails; else any ``not_comparable``
-> not_comparable; else any ``inconclusive`` -> inconclusive; else holds. A claim that
``requires`` other claims is ``not_comparable`` unless they all hold (its measured verdict
is kept beside): e.g. an FTZ-cost comparison means nothing if the ``--ftz=true`` binary
did not flush. Every check stores the numbers it was decided on.

Timing tests on the per-round paired ratio r = t_numerator / t_denominator (median and its
bootstrap interval [lo, hi], see ``harness.stats``), with margin m:

* ``faster``: holds if hi < 1; fails if lo >= 1.
* ``not_faster``: holds if lo >= 1 - m; fails if hi < 1 - m.
* ``not_slower``: holds if hi <= 1 + m; fails if lo > 1 + m.
* ``equivalent``: holds if 1 - m <= lo and hi <= 1 + m; fails if hi < 1 - m or lo > 1 + m.
* ``speedup_within [a, b]`` on the speed-up 1/r: holds if a <= 1/hi and 1/lo <= b; fails if
  1/lo < a or 1/hi > b.

Otherwise inconclusive.

Each comparison also records its **literal** verdict (the same test with margin 0: the
sentence read word for word) and whether the interval **resolves** a difference at all
(:func:`difference_resolved`); each check and claim records ``literal_verdict`` beside its
margin-based ``verdict``, so a report can say "holds within the margin, but the difference is
resolved: a is faster by 0.7 to 0.9 %".
"""
from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any, Mapping

import jmespath

from kbrepro.bundle.claim_selectors import _CUT, _cut, check_selectors, selector_problems  # noqa: F401
from kbrepro import schemas
from kbrepro.harness import bounded
from kbrepro.harness import checks as hchecks
from kbrepro.harness import stats
from kbrepro.harness.study import load_study
from kbrepro.harness.jsonio import dec_float, enc_float
from kbrepro.errors import InvalidResultsError, ReproError, UnreadableInputError, UsageError

VERDICTS = ("holds", "fails", "inconclusive", "not_comparable")


def load_spec(path: str | Path | None = None) -> tuple[dict, bytes]:
    """Read and validate a claims spec; returns ``(spec, raw bytes)``.
    Raises UnreadableInputError / UsageError (see :func:`parse_spec`)."""
    if path is None:

        st = load_study(None, "full")
        return parse_spec(st.file(st.claims_file), st.claims_file), st.file(st.claims_file)
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise UnreadableInputError(f"cannot read claims {p}: {exc.strerror}", "check the path") from exc
    return parse_spec(raw, p.name), raw


#: Bounds of the bootstrap a claims spec may ask for (see ``harness.stats``): resamples per
#: interval (also the schema's maximum), draws (resamples x rounds) per interval, and draws
#: over one :func:`evaluate`. The committed spec asks for 10 000 resamples; the committed
#: extended bundle needs 4 000 000 draws for its largest interval (400 rounds) and 81 300 000
#: in all (about 3 s on this project's 2-core development machine); the bounds leave 10x,
#: 2.5x and 3x.
MAX_RESAMPLES = stats.MAX_RESAMPLES
MAX_INTERVAL_DRAWS = stats.MAX_DRAWS
MAX_EVALUATION_DRAWS = 250_000_000
#: JMESPath steps (see :func:`harness.bounded.search`) shared by all selectors of one
#: :func:`evaluate`; the committed spec takes about 78 000 on the committed documents.
MAX_EVALUATION_STEPS = 1_000_000
#: a candidate bundle's claims grow with its records (six default claims each, selectors that
#: filter the records by name): per record, this many more bytes and nodes of claims YAML and
#: JMESPath steps are allowed over the bounds above (the model holds at most 256 records)
SPEC_BYTES_PER_RECORD = 4096
SPEC_NODES_PER_RECORD = 200
STEPS_PER_RECORD = 20_000
def _check_bootstrap(boot, where: str) -> None:
    """Raise UsageError unless ``boot`` asks for a bootstrap within the bounds above."""
    hint = "use the committed spec's bootstrap: {level: 0.95, resamples: 10000, seed: 20261201}"
    if not isinstance(boot, Mapping):
        raise UsageError(f"{where}: bootstrap must be an object", hint)
    r = boot.get("resamples")
    if isinstance(r, bool) or not isinstance(r, int) or not 1 <= r <= MAX_RESAMPLES:
        raise UsageError(f"{where}: bootstrap resamples {_cut(r, 40)} is not an integer in [1, {MAX_RESAMPLES}]", hint)
    lv = boot.get("level")
    if isinstance(lv, bool) or not isinstance(lv, (int, float)) or not 0 < lv < 1:
        raise UsageError(f"{where}: bootstrap level {_cut(lv, 40)} is not in (0, 1)", hint)
    sd = boot.get("seed")
    if isinstance(sd, bool) or not isinstance(sd, int) or not 0 <= sd < 2 ** 63:
        raise UsageError(f"{where}: bootstrap seed {_cut(sd, 40)} is not an integer in [0, 2**63)", hint)


def parse_spec(raw: bytes, where: str = "claims", records: int = 0) -> dict:
    """Parse and validate claims-spec bytes (YAML), treating them as hostile.

    The YAML is read by :func:`harness.bounded.load_yaml` (size, depth, node count; no
    anchors, aliases, merge keys or tags); every selector is compiled by
    :func:`harness.bounded.compile_query` (length, AST size and depth); the bootstrap must
    lie within :data:`MAX_RESAMPLES`. Raises UnreadableInputError (not YAML, or out of
    bounds) or UsageError (schema violations, bad or oversized JMESPath, bootstrap out of
    bounds); every message is one line per problem and names ``where``. ``records``: the
    candidate records the claims are about (:data:`SPEC_BYTES_PER_RECORD` and
    :data:`SPEC_NODES_PER_RECORD` more each).
    """
    n = max(0, int(records))
    spec = bounded.load_yaml(raw, where, max_bytes=bounded.MAX_YAML_BYTES + n * SPEC_BYTES_PER_RECORD,
                             max_nodes=bounded.MAX_YAML_NODES + n * SPEC_NODES_PER_RECORD)
    problems = schemas.validate(spec, "claims-spec")
    if problems:
        raise UsageError(f"{where} is not a valid claims spec:\n" + "\n".join(f"  {_cut(p)}" for p in problems[:20]),
                         "fix it; the schema is schemas/claims-spec.schema.json")
    _check_bootstrap(spec["bootstrap"], where)
    for c in spec["claims"]:
        for chk in c["checks"]:
            for key in ("select", "blocks"):
                if key in chk:
                    bounded.compile_query(chk[key], f"{where}: claim {c['id']}")
    return spec


def combine(verdicts: list[str]) -> str:
    if not verdicts:
        return "not_comparable"
    for v in ("fails", "not_comparable", "inconclusive"):
        if v in verdicts:
            return v
    return "holds"


def _select(expr: str, root: Mapping, where: str = "claims", shared: bounded.StepBudget | None = None) -> list:
    """Values ``expr`` selects from ``root`` (a list; a single value is wrapped), evaluated
    by :func:`harness.bounded.search`. A JMESPath error at evaluation time (e.g. ``values()``
    of a document the results do not hold) selects nothing; a budget overrun
    (:class:`harness.bounded.QueryBudgetError`) and a bad or oversized expression
    (UsageError) propagate."""
    query = bounded.compile_query(expr, where)
    try:
        found = bounded.search(query, root, shared=shared)
    except jmespath.exceptions.JMESPathError:
        return []  # e.g. values() of a document the results do not hold: nothing to read
    if found is None:
        return []
    return found if isinstance(found, list) else [found]


def _real(v) -> bool:
    """A finite float or a 64-bit int (not a bool): what a count or a pair member must be
    (a query can compute larger ints, e.g. ``sum()`` of ``ceil(`1e308`)``)."""
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return -2 ** 63 < v < 2 ** 63
    return isinstance(v, float) and math.isfinite(v)


def _num(v) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        return dec_float(v)
    except (KeyError, ValueError, TypeError, OverflowError):
        return None


def _check_values(chk: Mapping, root: Mapping, where: str = "claims", shared: bounded.StepBudget | None = None) -> dict:
    kind = chk["kind"]
    vals = _select(chk["select"], root, where, shared)
    out = {"kind": kind, "select": chk["select"], "count": len(vals)}
    if not vals:
        return {**out, "verdict": "not_comparable", "why": "the selection is empty"}
    if kind == "all_equal":
        bad = [i for i, v in enumerate(vals) if v != chk["equals"]]
        out.update(equals=chk["equals"], mismatches=len(bad), first_mismatches=[vals[i] for i in bad[:5]])
        return {**out, "verdict": "fails" if bad else "holds"}
    if kind == "pairs_equal":
        pairs = [v for v in vals if isinstance(v, list) and len(v) == 2 and _real(v[0]) and _real(v[1])]
        if not pairs:
            return {**out, "verdict": "not_comparable", "why": "no complete pairs (counts not recorded)"}
        bad = [p for p in pairs if p[0] != p[1]]
        out.update(pairs=len(pairs), unequal=len(bad), first_unequal=bad[:5],
                   min_fraction=enc_float(min(p[0] / p[1] if p[1] else 1.0 for p in pairs)))
        return {**out, "verdict": "fails" if bad else "holds"}
    if kind == "fraction_at_least":
        pairs = [v for v in vals if isinstance(v, list) and len(v) == 2 and _real(v[0]) and _real(v[1]) and v[1]]
        if not pairs:
            return {**out, "verdict": "not_comparable", "why": "no complete pairs (counts not recorded)"}
        fr = [p[0] / p[1] for p in pairs]
        out.update(threshold=chk["value"], min_fraction=enc_float(min(fr)), pairs=len(pairs))
        return {**out, "verdict": "holds" if min(fr) >= chk["value"] else "fails"}
    if kind == "compare":
        nums = [_num(v) for v in vals]
        if any(n is None for n in nums):
            return {**out, "verdict": "not_comparable", "why": "a selected value is not a number"}
        op = chk["op"]
        test = {"<": lambda a: a < chk["value"], "<=": lambda a: a <= chk["value"], "==": lambda a: a == chk["value"],
                ">=": lambda a: a >= chk["value"], ">": lambda a: a > chk["value"]}[op]
        bad = [n for n in nums if not test(n)]
        # a recorded "inf" (e.g. max_abs_error where the allowance is exceeded without bound)
        # decides the test as the float it is and is written back as the string JSON allows
        out.update(op=op, value=chk["value"], min=enc_float(min(nums)), max=enc_float(max(nums)), violations=len(bad))
        return {**out, "verdict": "fails" if bad else "holds"}
    if kind == "criterion_pass":
        failing, n = [], 0
        for ctl in vals:
            if not isinstance(ctl, dict):
                continue
            crit = ctl.get("criterion", "official")
            ctl_checks = ctl.get("checks")
            for variant, res in ctl_checks.items() if isinstance(ctl_checks, dict) else []:
                r = res.get(crit) if isinstance(res, dict) and isinstance(crit, str) else None
                n += 1
                if not (isinstance(r, dict) and r.get("pass") is True):
                    failing.append(_cut(f"{ctl.get('name')}/{variant} ({crit})", 120))
        out.update(checked=n, failing=failing[:10])
        if n == 0:
            return {**out, "verdict": "not_comparable", "why": "no control checks"}
        return {**out, "verdict": "fails" if failing else "holds"}
    raise UsageError(f"unknown check kind {kind!r}", "see schemas/claims-spec.schema.json")


def ratio_verdict(test: str, ci: Mapping, margin: float = 0.0, rng: tuple[float, float] | None = None) -> str:
    """Verdict of a timing test on a ratio interval (see the module docstring)."""
    lo, hi = ci.get("ci_low"), ci.get("ci_high")
    if lo is None or hi is None:
        return "inconclusive"
    m = margin
    if test == "faster":
        return "holds" if hi < 1 else ("fails" if lo >= 1 else "inconclusive")
    if test == "not_faster":
        return "holds" if lo >= 1 - m else ("fails" if hi < 1 - m else "inconclusive")
    if test == "not_slower":
        return "holds" if hi <= 1 + m else ("fails" if lo > 1 + m else "inconclusive")
    if test == "equivalent":
        if 1 - m <= lo and hi <= 1 + m:
            return "holds"
        return "fails" if (hi < 1 - m or lo > 1 + m) else "inconclusive"
    if test == "speedup_within":
        a, b = rng
        # ratios are positive (harness.stats refuses non-positive times); an interval
        # reaching 0 still gives a speed-up, infinite, and never a ZeroDivisionError
        s_lo = 1.0 / hi if hi > 0 else math.inf
        s_hi = 1.0 / lo if lo > 0 else math.inf
        if a <= s_lo and s_hi <= b:
            return "holds"
        return "fails" if (s_hi < a or s_lo > b) else "inconclusive"
    raise UsageError(f"unknown timing test {test!r}", "use faster, not_faster, not_slower, equivalent, speedup_within")


def _check_ratio(chk: Mapping, root: Mapping, boot: Mapping, memo: dict | None = None, where: str = "claims",
                 spent: list | None = None, shared: bounded.StepBudget | None = None) -> dict:
    blocks = [b for b in _select(chk["blocks"], root, where, shared) if isinstance(b, dict)]
    out = {"kind": "paired_ratio", "blocks": chk["blocks"], "test": chk["test"], "denominator": chk["denominator"],
           "margin": chk.get("margin", 0.0), "range": chk.get("range"), "items": []}
    for b in blocks:
        arms = b.get("arms")
        if not isinstance(arms, list):
            continue
        for num in chk["numerators"]:
            if num not in arms or chk["denominator"] not in arms:
                continue
            key = (b.get("id") if isinstance(b.get("id"), str) else None, id(b), num, chk["denominator"])
            if memo is not None and key in memo:
                ci = memo[key]
            else:
                ratios = stats.paired_ratios(b, num, chk["denominator"])
                draws = boot["resamples"] * len(ratios)
                if draws > MAX_INTERVAL_DRAWS:
                    raise UsageError(f"{where}: a bootstrap of {boot['resamples']} resamples of {len(ratios)} rounds "
                                     f"(block {_cut(b.get('id'), 60)}) needs {draws} draws, more than the "
                                     f"{MAX_INTERVAL_DRAWS} allowed", "ask for fewer bootstrap resamples")
                if spent is not None:
                    spent[0] += draws
                    if spent[0] > MAX_EVALUATION_DRAWS:
                        raise UsageError(f"{where}: the paired-ratio checks need more than {MAX_EVALUATION_DRAWS} "
                                         "bootstrap draws in all", "ask for fewer bootstrap resamples or fewer "
                                         "paired-ratio checks")
                ci = stats.bootstrap_median_ci(ratios, level=boot["level"], resamples=boot["resamples"],
                                               seed=boot["seed"], max_draws=MAX_INTERVAL_DRAWS)
                if memo is not None:
                    memo[key] = ci
            rng = tuple(chk["range"]) if chk.get("range") else None
            v = ratio_verdict(chk["test"], ci, chk.get("margin", 0.0), rng)
            out["items"].append({"block": b.get("id"), "task": b.get("task"), "mode": b.get("mode"),
                                 "numerator": num, "rounds": ci["n"], "median_ratio": ci["median"],
                                 "ci_low": ci["ci_low"], "ci_high": ci["ci_high"], "verdict": v,
                                 "literal": ratio_verdict(chk["test"], ci, 0.0, rng),
                                 "resolved": difference_resolved(ci)})
    if not out["items"]:
        return {**out, "verdict": "not_comparable", "literal_verdict": "not_comparable",
                "why": "no selected block has both arms"}
    return {**out, "verdict": combine([i["verdict"] for i in out["items"]]),
            "literal_verdict": combine([i["literal"] for i in out["items"]])}


def difference_resolved(ci: Mapping) -> str | None:
    """What a ratio interval [lo, hi] of t_numerator / t_denominator says about a difference,
    whatever the claim's margin: ``"numerator_faster"`` (hi < 1), ``"numerator_slower"``
    (lo > 1), ``"none"`` (the interval holds 1: no resolved difference), or None (no interval)."""
    lo, hi = ci.get("ci_low"), ci.get("ci_high")
    if lo is None or hi is None:
        return None
    return "numerator_faster" if hi < 1 else "numerator_slower" if lo > 1 else "none"


def live_section() -> dict:
    """What the evaluator recomputes on its own CPU."""
    return {"predicate_direction": hchecks.predicate_direction_witness()}


class _Root(dict):
    """The JMESPath root: the documents, plus ``live`` computed only when a query reads it
    (it imports torch, which costs a second). JMESPath reads fields through ``.get``."""

    def get(self, key, default=None):
        if key == "live" and "live" not in self:
            self["live"] = live_section()
        return super().get(key, default)


def record_count(documents: Mapping[str, Any]) -> int:
    """The candidate records of ``documents`` (``candidates.candidates``), 0 for a study."""
    doc = documents.get("candidates") if isinstance(documents, Mapping) else None
    recs = doc.get("candidates") if isinstance(doc, Mapping) else None
    return len(recs) if isinstance(recs, list) else 0


def evaluate(spec: Mapping, documents: Mapping[str, Any], *, source: str = "recorded") -> dict:
    """Evaluate every claim of ``spec`` on ``documents`` (document name -> document).
    Returns the ``claims`` document (schemas/claims.schema.json).

    Selectors run within the budgets of :func:`harness.bounded.search` and share
    :data:`MAX_EVALUATION_STEPS` steps (and :data:`STEPS_PER_RECORD` per candidate record); the bootstrap within
    :data:`MAX_RESAMPLES`, :data:`MAX_INTERVAL_DRAWS` and :data:`MAX_EVALUATION_DRAWS`.
    Raises :class:`harness.bounded.QueryBudgetError` (InvalidResultsError) when a selector
    exceeds its budget, UsageError for a bad selector or a bootstrap out of bounds, and
    InvalidResultsError (``harness.stats``) for a selected timing block with a zero,
    negative or non-finite time or not shaped as a timing block."""
    root = _Root(documents)
    boot = spec["bootstrap"]
    _check_bootstrap(boot, "claims spec")
    check_selectors(spec, documents, "claims spec")
    memo: dict = {}
    spent = [0]
    shared = bounded.StepBudget(MAX_EVALUATION_STEPS + STEPS_PER_RECORD * record_count(documents))
    out = []
    for c in spec["claims"]:
        results = []
        where = f"claim {c['id']}"
        for chk in c["checks"]:
            r = (_check_ratio(chk, root, boot, memo, where, spent, shared) if chk["kind"] == "paired_ratio"
                 else _check_values(chk, root, where, shared))
            results.append(r)
        out.append({"id": c["id"], "sentence": c["sentence"], "verdict": combine([r["verdict"] for r in results]),
                    "literal_verdict": combine([r.get("literal_verdict", r["verdict"]) for r in results]),
                    "checks": results})
    by_id = {c["id"]: c for c in out}
    for c, claim in zip(out, spec["claims"]):
        unmet = [r for r in claim.get("requires", []) if by_id.get(r, {}).get("verdict") != "holds"]
        if unmet:
            c["measured_verdict"] = c["verdict"]
            c["verdict"] = "not_comparable"
            c["why"] = ("depends on " + ", ".join(f"{r} ({by_id.get(r, {}).get('verdict', 'missing')})" for r in unmet)
                        + ", which does not hold: the data cannot support this claim")
    summary = {v: sum(1 for c in out if c["verdict"] == v) for v in VERDICTS}
    return {"schema": "kbrepro/claims", "schema_version": 1, "study": spec["study"], "evaluated_on": source,
            "bootstrap": dict(boot), "claims": out, "summary": summary}


def spec_ids(raw: bytes | None) -> frozenset:
    """The claim ids a claims spec defines (empty for none or an unreadable one: then every
    claim shown is marked as the author's). Raises nothing."""
    if raw is None:
        return frozenset()
    try:
        return frozenset(c["id"] for c in parse_spec(raw, "claims")["claims"])
    except ReproError:
        return frozenset()


def own_ids(spec_raw: bytes | None, study_claims_raw: bytes | None) -> frozenset | None:
    """The claim ids REPORT.md and summary.txt treat as the study's own: None (every claim
    is) where the packed spec is the study folder's claims file byte for byte, else the ids
    that file defines (:func:`spec_ids`); the packer and the verifier both call this."""
    if spec_raw is not None and spec_raw == study_claims_raw:
        return None
    return spec_ids(study_claims_raw)


def spec_sha256(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def compare_verdicts(recorded: Mapping, recomputed: Mapping) -> list[str]:
    """Claims whose recorded verdict differs from the recomputed one, as messages."""
    rec = {c["id"]: c["verdict"] for c in recorded.get("claims", [])}
    new = {c["id"]: c["verdict"] for c in recomputed.get("claims", [])}
    problems = []
    for cid in sorted(set(rec) | set(new)):
        if rec.get(cid) != new.get(cid):
            problems.append(f"claim {cid}: recorded verdict {rec.get(cid)!r}, the data give {new.get(cid)!r}")
    return problems


__all__ = ["load_spec", "parse_spec", "spec_ids", "own_ids", "evaluate", "compare_verdicts", "ratio_verdict", "difference_resolved",
           "combine", "VERDICTS",
           "InvalidResultsError"]
