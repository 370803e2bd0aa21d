"""The forged candidate bundles of tests/corpus/cases_candidates.py (issue 26), each packed with
the product's own packer as a library, fail static verification with exit 1 in their tier and
name the problem; the controls (the example packed again, a genuine sharded run, a genuine
caught candidate) still verify and name their catch; what a reader sees stays inert."""
from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

import forge_candidates as fc
from corpus import cases_candidates as cc
from kbrepro import inert
from kbrepro.bundle.verify.checklist import verify_archive

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def _verify(path: Path):
    rep = verify_archive(path, level="static")
    failing = [t for t in rep.tiers if t.status == "FAIL"]
    problems = [f"{p.path} {p.message}" for t in failing for p in t.problems]
    return rep, failing, problems


@pytest.mark.parametrize("name", cc.NAMES)
def test_a_forged_candidate_bundle_fails_in_its_tier_and_names_the_problem(tmp_path, name):
    case = cc.by_name(name)
    out = fc.forge(EXAMPLES / case.example, case.edit, tmp_path / f"{name}.tar")
    rep, failing, problems = _verify(out)
    assert rep.exit_code == case.exit_code, (name, rep.verdict, problems)
    assert failing and failing[0].name == case.tier, (name, [t.name for t in failing], problems)
    assert any(case.fragment in p for p in problems), (name, problems)


def test_every_class_of_the_red_team_has_cases():
    assert {c.cls for c in cc.CASES} >= {1, 2, 3, 4, 5}
    assert len(cc.CASES) == len(set(cc.NAMES))


@pytest.mark.parametrize("example,fmt", [(cc.QUICK, 2), (cc.FULL, 2), (cc.V2, 4)])
def test_the_examples_packed_again_with_no_edit_verify_pass(tmp_path, example, fmt):
    rep, failing, problems = _verify(fc.forge(EXAMPLES / example, lambda d, f: None, tmp_path / "same.tar",
                                              bundle_format=fmt))
    assert rep.verdict == "PASS", problems


def test_a_genuine_sharded_run_with_each_case_s_copy_block_passes(tmp_path):
    rep, failing, problems = _verify(fc.forge(EXAMPLES / cc.QUICK, lambda d, f: cc._sharded(d, True),
                                              tmp_path / "sharded.tar"))
    assert rep.verdict == "PASS", problems


def test_a_genuine_caught_candidate_still_verifies_and_names_its_catch(tmp_path):
    def caught(doc, files):  # the call changed its inputs: what a candidate that zeroes x leaves
        c = cc._case(doc, "repeat")
        d = c["digests_after"][0]
        c["digests_after"][0] = d[:-1] + ("0" if d[-1] != "0" else "1")
    rep, failing, problems = _verify(fc.forge(EXAMPLES / cc.QUICK, caught, tmp_path / "caught.tar"))
    assert rep.verdict == "PASS", problems
    notes = [n for t in rep.tiers for n in t.notes]
    assert any("was CAUGHT by inputs_unchanged" in n for n in notes), notes


HOSTILE = "**bold** [link](https://evil.invalid) <b>x</b> &lt; \u202etxt.exe \x1b[31m ~~s~~"


def _hostile_names(doc, files, ran_on=True):
    """Markup, a bidi override and an escape sequence arriving through a kernel name and ran_on
    text (a sharded run; hcases.check_ran_on refuses it there)."""
    cc._sharded(doc, True)
    prof = cc._c(doc)["observations"]["profile"]
    prof["kernels"][0]["name"] = HOSTILE
    prof["kernels"].append({"name": "elementwise_add_kernel(float const*, float const*, float*, int)",
                            "stream": prof["marker_stream"]})
    if not ran_on:
        return
    doc["cases"][0]["ran_on"] = {"host_sha256": "a" * 64, "engine": "local", "worker": HOSTILE[:100],
                                 "device": "cuda", "gpu_name": HOSTILE[:100], "gpu_uuid_sha256": None,
                                 "driver_version": HOSTILE[:100], "sm_clock_mhz": 1980, "memory_clock_mhz": 3201}


def test_markup_bidi_and_escapes_from_a_bundle_reach_no_reader_active(tmp_path, capsys):
    out = fc.forge(EXAMPLES / cc.QUICK, _hostile_names, tmp_path / "hostile.tar")
    rep, failing, problems = _verify(out)
    with tarfile.open(out) as tf:
        report = next(tf.extractfile(m).read() for m in tf if m.name.endswith("data/REPORT.md")).decode()
    assert "\u202e" not in report and "\x1b" not in report
    html = MarkdownIt("commonmark").enable(["strikethrough", "table"]).render(report)
    assert "<strong>bold" not in html and "evil.invalid\"" not in html and "<b>" not in html and "<s>" not in html
    assert "\\&lt\\;" in report and "&lt; \u202e" not in report  # the bundle's entity shown as text
    from click.testing import CliRunner
    import verify_bundle  # noqa: F401 (the CLI module)
    res = CliRunner().invoke(verify_bundle.main, [str(out), "--level", "static", "--show-report"])
    assert "\x1b" not in res.output and "\u202e" not in res.output


def test_a_report_as_the_packer_before_the_inertness_rule_wrote_it_fails(tmp_path):
    """A REPORT.md carrying a kernel name's markup unescaped is not the report this verifier
    renders: a forum reader never sees it as verified."""
    import dataclasses

    from kbrepro.bundle import pack
    out = fc.forge(EXAMPLES / cc.QUICK, lambda d, f: _hostile_names(d, f, False), tmp_path / "h.tar")
    rep, failing, problems = _verify(out)
    assert rep.verdict == "PASS", problems  # the kernel name shown inert: nothing to refuse
    name, payload = fc.members(out)
    rep_md = payload["REPORT.md"].decode()
    doc = json.loads(payload["results/candidates.json"])
    detail = next(v["detail"] for v in doc["candidates"][0]["verdicts"] if v["name"] == "custom_kernel_ran")
    legacy = re.sub(r"[^A-Za-z0-9 .,:;=+\-*/_%#'\"!?&{}~^()]", "?", detail.replace("[", "(").replace("]", ")"))[:300]
    old = rep_md.replace(f"| custom_kernel_ran | pass | {inert.md(detail)} |", f"| custom_kernel_ran | pass | {legacy} |")
    assert old != rep_md and "**bold**" in old
    payload["REPORT.md"] = old.encode()
    with tarfile.open(out) as tf:
        info = next(tf.extractfile(m).read() for m in tf if m.name.endswith("/bag-info.txt")).decode()
    keys = [ln.split(": ", 1) for ln in info.splitlines() if ": " in ln]
    bag = pack.make_bag(name, payload, [(k, v) for k, v in keys if k in pack.BAG_INFO_KEYS])
    pack.write_archive(dataclasses.replace(bag), tmp_path / "old.tar")
    rep, failing, problems = _verify(tmp_path / "old.tar")
    assert rep.exit_code == 1 and any("REPORT.md is not the report this verifier renders" in p for p in problems), \
        problems


def test_a_check_that_cannot_decide_on_a_gpu_run_makes_the_verdict_partial(tmp_path):
    def differ(doc, files):  # two poisoned outputs that differ in bits but both pass: not decided
        c = cc._case(doc, "poison1")
        d = c["output"]["digest"]
        c["output"]["digest"] = d[:-1] + ("0" if d[-1] != "0" else "1")
        c["compare"]["bit_identical_count"] = c["compare"]["element_count"] - 1
    rep, failing, problems = _verify(fc.forge(EXAMPLES / cc.QUICK, differ, tmp_path / "undecided.tar"))
    assert rep.verdict == "PARTIAL" and rep.exit_code == 5, problems
    assert any("deterministic_under_poison cannot decide" in r for r in rep.partial), rep.partial
