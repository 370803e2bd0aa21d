"""Corpus cases of derived facts: a study bundle that states a fact the verifier computes
itself from the raw records (DESIGN.md section 6, "Fail closed"; bundle/derived_facts.py).

Each case edits the committed extended-profile example (self-tests, adaptive stopping, the
copy and floor blocks, GEMM blocks) as the strongest forger would: after the edit of
``data/results/*.json``, claims.json is re-evaluated, REPORT.md, the figures' data and
summary.txt are derived again with the product's code (``cases_trust.reforge``), and both
BagIt manifests are recomputed, so that every derived file agrees with the edited records
and only the verifier's own derivation can object.

Loaded by ``make_corpus.py`` (``EXTRA_MODULES``): :data:`NAMES` and :func:`build`.
"""
from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

from kbrepro.bundle import pack
from kbrepro.harness import jsonio, timing

NAMES = (
    "derived_selftest_as_expected_forged", "derived_selftest_expectation_edited",
    "derived_adaptive_rounds_truncated", "derived_adaptive_stopped_late", "derived_report_min_rounds_in_format_5",
    "derived_gemm_width_doubled",
    "derived_copy_bytes_doubled", "derived_floor_protocol_edited", "derived_selftest_speed_limit_forged",
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TIMINGS = "data/results/timings.json"
SELFTEST = "data/results/selftest.json"
META = "data/bundle.json"
REPORT = "data/REPORT.md"


def _trust():
    name = "kbrepro_corpus_cases_trust"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parent / "cases_trust.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


def extended_example() -> Path:
    """The committed extended-profile bundle of the published study."""
    (path,) = sorted(EXAMPLES.glob("pointwise-fusion-ftz-extended-*.tar"))
    return path


def _edit(f: dict, rel: str, fn) -> None:
    doc = jsonio.loads_strict(f[rel], rel)
    fn(doc)
    f[rel] = jsonio.dumps(doc).encode("ascii")


def _block(d: dict, bid: str) -> dict:
    return next(b for b in d["blocks"] if b["id"] == bid)


def _test(d: dict, name: str) -> dict:
    return next(t for t in d["tests"] if t["name"] == name)


def _rule(b: dict) -> timing.AdaptiveRule:
    return timing.AdaptiveRule.from_doc(b["protocol"]["adaptive"])


def _restate(b: dict, reason: str) -> None:
    """The adaptive outcome a forger writes for the block's (edited) rounds: their count, the
    given reason, and the half-widths the product's stopping rule gives for them."""
    rule = _rule(b)
    n = len(b["rounds"])
    b["adaptive"] = {"rounds": n, "stop_reason": reason,
                     "rel_half_widths": timing.pair_widths(timing.pair_ratios(b["rounds"], rule), rule, n)}


def _as_format_5(f: dict, info: list) -> list:
    """``f`` turned into a bundle of format 5 as its packer writes it (bundle.json's format,
    an RO-Crate file, derived again by ``reforge``); returns bag-info's fields to match."""
    from kbrepro.bundle import facts

    _edit(f, META, lambda d: d.update(format_version=5))
    f[f"data/{facts.CRATE_FILE}"] = b"{}"  # written again by reforge, from the records
    return [(k, "5" if k == "Bundle-Format-Version" else v) for k, v in info]


def build(g, kit) -> list:
    ext = kit.load_good(extended_example())
    out = []

    def forged(name, tier, fragment, problem_file, description, mutate, after=None, fmt5=False):
        f = dict(ext.files)
        info = _as_format_5(f, ext.info()) if fmt5 else ext.info()
        mutate(f)
        _trust().reforge(f)
        if after:  # an edit of what reforge derives
            after(f)
            _trust().refresh_crate(f)
        payload = {p[len("data/"):]: b for p, b in f.items() if p.startswith("data/")}
        rend = {p[len("renderings/"):]: b for p, b in f.items() if p.startswith("renderings/")}
        bag = kit.with_summary(pack.make_bag(ext.top, payload, info, renderings=rend))
        data = pack.tar_bytes(bag, mtime=ext.mtime)
        if data == ext.raw:
            raise ValueError(f"{name}: the mutation changed nothing")
        out.append((kit.Case(name, f"{name}.tar", "derived", 1, tier, fragment, problem_file,
                             description + "; claims.json, REPORT.md and the figures re-derived; manifests "
                             "recomputed"), data))

    # ---------------------------------------------------------------- 1. self-test expectations
    def as_expected(f):
        def edit(d):
            t = _test(d, "fast_math_twin")
            t["checks"]["ftz_evidence"] = True  # not caught any more: no expected check failed
            t["failed_checks"], t["caught"] = [], False  # ... while as_expected and all_as_expected stay true
        _edit(f, SELFTEST, edit)

    forged("derived_selftest_as_expected_forged", "documents",
           "self-test fast_math_twin: as_expected is not what its recorded outcomes and this verifier's expectations "
           "give", SELFTEST,
           "selftest.json: fast_math_twin's ftz_evidence outcome recorded as passed (failed_checks and caught "
           "updated), its 'as expected' and all_as_expected left true", as_expected)

    def expectation(f):
        def edit(d):
            t = _test(d, "all_zero")
            t["checks"]["official_allclose"] = True  # the zeros pass the official check ...
            t["failed_checks"].remove("official_allclose")
            t["expected"] = ["poisoned_rerun"]  # ... and the expectation is moved to a check that still fails
        _edit(f, SELFTEST, edit)

    forged("derived_selftest_expectation_edited", "documents",
           "self-test all_zero: expected is not what this verifier's table says", SELFTEST,
           "selftest.json: all_zero passes official_allclose and its expected catch is changed to poisoned_rerun, "
           "so that its recorded 'as expected' (true) follows from the edited expectation", expectation)

    # ---------------------------------------------------------------- 2. adaptive stopping
    def truncated(f):
        def edit(d):
            b = _block(d, "53.tail.events")  # ran 400 rounds (max_rounds) ...
            del b["rounds"][55:]              # ... recorded as stopped at 55 with the target reached
            _restate(b, "target_reached")
        _edit(f, TIMINGS, edit)

    forged("derived_adaptive_rounds_truncated", "documents",
           "block 53.tail.events: stopped after 55 rounds by 'target_reached'; the stopping rule, applied to the "
           "recorded rounds, stops there only by max_seconds", TIMINGS,
           "timings.json: block 53.tail.events (400 rounds, stopped at max_rounds) cut to its first 55 rounds, its "
           "outcome restated as target_reached after 55 with the half-widths the rule gives for them", truncated)

    def late(f):
        def edit(d):
            b = _block(d, "95.tail.graph.cold")  # the target was reached after 35 rounds
            rng = random.Random(b["protocol"]["order_seed"])
            extra = []
            for j in range(len(b["rounds"]) + 5):
                order = list(b["arms"])
                rng.shuffle(order)
                if j >= len(b["rounds"]):  # five more rounds, in the seeded order, times of earlier ones
                    src = b["rounds"][j - len(b["rounds"])]
                    extra.append({**src, "order": order})
            b["rounds"] += extra
            _restate(b, "target_reached")
        _edit(f, TIMINGS, edit)

    forged("derived_adaptive_stopped_late", "documents",
           "block 95.tail.graph.cold: the stopping rule stops after 35 rounds (target_reached), yet the block "
           "holds 40", TIMINGS,
           "timings.json: block 95.tail.graph.cold (stopped after 35 rounds, target reached) given five more rounds "
           "(the seeded arm order, times of its first rounds), its outcome restated for 40", late)

    def min_rounds_report(f):
        from kbrepro.bundle import report

        meta = jsonio.loads_strict(f[META], META)
        text = f[REPORT].decode("utf-8")
        old = report.timing_section(jsonio.loads_strict(f[TIMINGS], TIMINGS), 3)
        new = report.timing_section(jsonio.loads_strict(f[TIMINGS], TIMINGS), meta["format_version"])
        if new not in text or old == new:
            raise ValueError("derived_report_min_rounds_in_format_5: the timing tables are not in REPORT.md")
        f[REPORT] = text.replace(new, old).encode("utf-8")

    forged("derived_report_min_rounds_in_format_5", "claims",
           "REPORT.md differs from the report the verifier renders from the records", REPORT,
           "the extended example as a format 5 bundle whose REPORT.md gives an adaptive block's minimum rounds "
           "('10 rounds' for 53.tail.events, which holds 400), as format 3 did", lambda f: None,
           after=min_rounds_report, fmt5=True)

    # ---------------------------------------------------------------- 3. GEMM FLOP/s
    def width(f):
        def edit(d):
            b = _block(d, "81.gemm.graph")
            b["shape"][1] *= 2
            b["flops"] *= 2
        _edit(f, TIMINGS, edit)

    forged("derived_gemm_width_doubled", "documents",
           "block 81.gemm.graph: the GEMM's output 1024 x 16384 is not the size of the task's output", TIMINGS,
           "timings.json: block 81.gemm.graph's output width and flops both doubled (2 B K H of the edited shape; "
           "REPORT.md's TFLOP/s doubled)", width)

    # ---------------------------------------------------------------- 4. copy and floor blocks
    forged("derived_copy_bytes_doubled", "documents",
           "block copy.d2d: bytes_moved is not what the engine writes", TIMINGS,
           "timings.json: the copy block's bytes_moved doubled (REPORT.md's copy bandwidth doubled, every kernel's "
           "fraction of it halved)",
           lambda f: _edit(f, TIMINGS, lambda d: _block(d, "copy.d2d").update(bytes_moved=2 ** 32)))

    forged("derived_floor_protocol_edited", "documents",
           "block floor.empty_kernel.events: protocol is not what the engine writes", TIMINGS,
           "timings.json: the empty-kernel floor block's protocol says 10 invocations per timed region, not 100",
           lambda f: _edit(f, TIMINGS, lambda d: _block(d, "floor.empty_kernel.events")["protocol"].update(
               invocations_per_pair=10)))

    def speed(f):
        def edit(d):
            t = _test(d, "all_zero")  # 8872 GB/s apparent, over 1.1 x the run's copy bandwidth of 4232 GB/s
            t["checks"]["physical_speed_limit"] = True
            t["failed_checks"].remove("physical_speed_limit")
        _edit(f, SELFTEST, edit)

    forged("derived_selftest_speed_limit_forged", "documents",
           "self-test all_zero: physical_speed_limit does not follow from the recorded details and the run's copy "
           "bandwidth", SELFTEST,
           "selftest.json: all_zero's speed-limit check recorded as passed (failed_checks updated), although its "
           "apparent 8872 GB/s exceeds 1.1 x the copy bandwidth the run's copy block gives", speed)
    return out
