"""Evidence a measured study run always records, which a check needs, may not be left out or
malformed (bundle/verify/measured.py; the trust rule: missing evidence fails, it never makes a
check quietly undecided). Each forgery below passed verification before: a red-team built it
from the committed examples with the product's own tools (claims.json and REPORT.md derived
again from the edited records, the manifests recomputed), so only the checks can catch it."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kbrepro.bundle.verify.checklist import verify_archive

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from corpus import make_corpus as kit  # noqa: E402 (the corpus kit is a folder of tests/)

FULL = next((ROOT / "examples").glob("pointwise-fusion-ftz-full-*.tar"), None)
EXTENDED = next((ROOT / "examples").glob("pointwise-fusion-ftz-extended-*.tar"), None)
COMPILE, CORRECTNESS = "data/results/compile.json", "data/results/correctness.json"
TIMINGS, WITNESS, ENV = "data/results/timings.json", "data/results/witness.json", "data/environment.json"


def _var(d, name="nvrtc_ftz_true"):
    return next(v for v in d["variants"] if v["name"] == name)


def _block(d, bid):
    return next(b for b in d["blocks"] if b["id"] == bid)


def _sass_counts_off(d):
    ev = next(v for v in d["variants"] if (v.get("ftz_evidence") or {}).get("sass"))["ftz_evidence"]["sass"]
    ev["ftz_instructions"] -= 1


def _a_check(d):
    rec = next(iter(d["tasks"].values()))
    sec = next(v for v in rec.values() if isinstance(v, list))
    chk = next(iter(sec[0]["checks"].values()))
    del chk["max_abs_error"]


FORGERIES = {
    "A the architecture left out": ("full", COMPILE, lambda d: _var(d).update(arch=None), "architecture and the NVRTC"),
    "A2 the NVRTC release left out": ("full", COMPILE, lambda d: _var(d).pop("nvrtc_version"), "NVRTC release"),
    "A3 the options NVRTC received left out": ("full", COMPILE, lambda d: _var(d).update(effective_options=None),
                                               "options NVRTC received"),
    "B the predicate witness's reference a string": (
        "full", CORRECTNESS, lambda d: d["predicate_direction"].update(reference="0.0"), "predicate-direction"),
    "B2 the predicate witness removed": ("full", CORRECTNESS, lambda d: d.pop("predicate_direction"),
                                         "predicate-direction"),
    "C a cold block timed warm": ("extended", TIMINGS, lambda d: _block(d, "53.tail.events.cold").update(l2="warm"),
                                  "timed with a warm L2"),
    "C2 a cold block's flush shrunk": ("extended", TIMINGS, lambda d: _block(d, "53.tail.events.cold").update(
        flush_bytes=1), "the flush before each invocation"),
    "C3 the L2 a cold flush follows from nulled": ("extended", ENV, lambda d: d["fields"]["l2_cache_bytes"].update(
        value=None, reason="not read"), "the L2 size its flush follows from is not recorded"),
    "D the prefix flag left out": ("full", COMPILE, lambda d: _var(d, "cupy_default")["cubin_complete"].pop(
        "loaded_is_prefix"), "loaded cubin is the complete one's prefix"),
    "D2 a cubin's size left out": ("full", COMPILE, lambda d: _var(d)["cubin"].pop("bytes"), "size is not recorded"),
    "E a case's shape left out": ("full", CORRECTNESS, lambda d: d["full_program"][0]["case"].pop("shape"),
                                  "input shape is not recorded"),
    "F the compile record's witness removed": ("full", COMPILE, lambda d: _var(d)["ftz_evidence"].update(witness=None),
                                               "leaves the witness out"),
    "F2 the compile record's witness discriminates flipped": (
        "full", COMPILE, lambda d: _var(d)["ftz_evidence"]["witness"].update(discriminates=False),
        "another task or discrimination"),
    "G a recorded SASS count off by one": ("extended", COMPILE, _sass_counts_off, "recorded SASS FTZ evidence"),
    "G2 a recorded PTX verdict flipped": ("full", COMPILE, lambda d: _var(d)["ftz_evidence"]["ptx"].update(
        says_ftz=not _var(d)["ftz_evidence"]["ptx"]["says_ftz"]), "recorded PTX FTZ evidence"),
    "H a definition's boolean as 0": ("full", CORRECTNESS, lambda d: d["predicate"]["definitions"]["allclose"].update(
        equal_nan=0), "defined differently"),
    "I an environment field the checks compare removed": (
        "full", ENV, lambda d: d["fields"].pop("float32_matmul_precision"), "float32_matmul_precision"),
    "J a CPU reference value off its bits": ("full", WITNESS, lambda d: d["reference_cpu"]["flush"][1].update(
        value="inf"), "CPU reference (flush)"),
    "K flush unsupported yet a flushed reference": ("full", WITNESS, lambda d: d["reference_cpu"].update(
        flush_supported=False), "could not flush subnormals"),
    "L a skipped block that holds rounds": ("full", TIMINGS, lambda d: d["blocks"][0].update(skipped="no reason"),
                                            "marked skipped"),
    "M a check record's max abs error removed": ("full", CORRECTNESS, _a_check, "lacks max_abs_error"),
}


@pytest.fixture(scope="module")
def goods():
    if FULL is None or EXTENDED is None:
        pytest.skip("no committed study examples")
    return {"full": kit.load_good(FULL), "extended": kit.load_good(EXTENDED)}


@pytest.mark.slow
@pytest.mark.parametrize("what", sorted(FORGERIES))
def test_evidence_a_measured_run_records_cannot_be_left_out(goods, tmp_path, what):
    which, rel, edit, fragment = FORGERIES[what]
    good = goods[which]
    files = dict(good.files)
    kit.edit_json(files, rel, edit)
    kit.trust_module().reforge(files)
    forged = tmp_path / "forged.tar"
    forged.write_bytes(kit.repack(good, files))
    rep = verify_archive(forged, level="static")
    msgs = [p.message for t in rep.tiers for p in t.problems]
    assert rep.verdict == "FAIL", what
    assert any(fragment in m for m in msgs), msgs
