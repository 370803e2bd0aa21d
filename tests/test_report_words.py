"""REPORT.md and summary.txt in a person's words (issue 31), from study format 6 and candidate
format 5 on; the formats before keep the words they were packed with (the verifier renders
each format's own text, so the committed examples still verify byte for byte)."""
from __future__ import annotations

import pytest

from kbrepro.bundle import candidate_report, kinds, pack, report, wording

NEW = {"format": pack.FORMAT_NAME, "format_version": kinds.STUDY.readable_since}
OLD = {"format": pack.FORMAT_NAME, "format_version": kinds.STUDY.readable_since - 1}
NEW_C = {"format": kinds.FORMAT, "format_version": kinds.CANDIDATES.readable_since}
OLD_C = {"format": kinds.FORMAT, "format_version": kinds.CANDIDATES.readable_since - 1}


def _item(resolved, lo, hi):
    return {"numerator": "a", "resolved": resolved, "ci_low": lo, "ci_high": hi}


@pytest.mark.parametrize("item,words", [
    (_item("numerator_slower", 1.86, 2.01), "a 1.9x to 2.0x slower"),       # was "slower by 86 to 1e+02 %"
    (_item("numerator_faster", 0.0303, 0.0333), "a 30x to 33x faster"),     # was "faster by 97 to 97 %"
    (_item("numerator_faster", 0.958, 0.969), "a faster by 3.1 to 4.2 %"),
    (_item("numerator_slower", 1.004, 1.009), "a slower by 0.40 to 0.90 %"),
    (_item("numerator_slower", 1.2, 1.6), "a 1.2x to 1.6x slower"),
    (_item("none", 0.99, 1.01), "no resolved difference"),
])
def test_a_difference_is_written_as_a_person_writes_it(item, words):
    got = wording.difference(item, "b", report.readable(NEW))
    assert got == words
    assert "e+" not in got


def test_formats_before_keep_their_words():
    assert not report.readable(OLD) and not report.readable(OLD_C)
    assert report.readable(NEW) and report.readable(NEW_C)
    assert wording.difference(_item("numerator_slower", 1.86, 2.01), "b", report.readable(OLD)) == \
        "a slower by 86 to 1e+02 %"
    assert not report.readable({"format": "another", "format_version": 99})
    assert not report.readable({"format": pack.FORMAT_NAME, "format_version": True})


def _claims(n_items):
    items = [{"block": f"b{i}", "numerator": "a", "median_ratio": 0.5, "ci_low": 0.45, "ci_high": 0.55,
              "verdict": "holds", "literal": "holds", "resolved": "numerator_faster"} for i in range(n_items)]
    return {"evaluated_on": "recorded", "summary": {"holds": 1},
            "claims": [{"id": "C1", "verdict": "holds", "sentence": "a is faster", "checks": [
                {"kind": "paired_ratio", "test": "faster", "denominator": "b", "items": items}]}]}


def test_one_comparison_is_singular():
    assert "(1 comparison, worst first)" in report.claims_section(_claims(1), None, True)
    assert "(2 comparisons, worst first)" in report.claims_section(_claims(2), None, True)
    assert "(1 comparisons, worst first)" in report.claims_section(_claims(1), None, False)  # the old format's text


def _doc(device="cuda", sizes=None):
    return {"device": device, "candidates": [{"name": "relu", "config": {"sizes": sizes or {}}}]}


def test_a_cpu_run_and_other_sizes_are_said_first():
    lines = candidate_report.conditions_lines({"candidates": _doc("cpu", {"batch_size": 8, "dim": [64]})})
    text = "\n".join(lines)
    assert "**Ran on a CPU**" in text and "undecided" in text
    assert "**Not at the tasks' own sizes**" in text and "relu at batch_size=8, dim=(64,)" in text
    assert candidate_report.conditions_lines({"candidates": _doc()}) == []


def test_the_summary_says_cpu_and_sizes_on_its_second_line():
    env = {"fields": {"torch_version": {"value": "2.13.0"}}}
    claims = {"summary": {"holds": 1}, "claims": [{"id": "K1a", "verdict": "holds"}]}
    new = report.post_summary({**NEW_C, "name": "x"}, {"candidates": _doc("cpu", {"batch_size": 8}), "environment": env},
                              claims, "0" * 64).splitlines()
    assert len(new) == 5
    assert new[1].startswith("CPU run (--device cpu): correctness only, no timings; torch 2.13.0")
    assert new[1].endswith("at sizes other than the tasks' own for 1 candidate")
    old = report.post_summary({**OLD_C, "name": "x"}, {"candidates": _doc("cpu"), "environment": env}, claims,
                              "0" * 64).splitlines()
    assert old[1].startswith("GPU ")  # what format 4 wrote, kept for its bundles


def test_a_pass_a_cpu_cannot_give_is_shown_undecided_with_what_was_recorded():
    doc = {"device": "cpu", "predicate": {"atol": 1e-4, "rtol": 1e-4},
           "candidates": [{"name": "relu", "task": "level1/19_ReLU.py", "task_sha256": "0" * 64,
                           "source_sha256": "1" * 64, "config": {"sizes": {}}, "blocks": [], "timing": {},
                           "provenance": {}, "verdicts": [
                               {"name": "ran", "passed": True, "detail": "it ran"},
                               {"name": "no_work_after_return", "passed": True,
                                "detail": "the device was idle within 0.000 ms"}]}]}
    claims = {"claims": [], "summary": {}}
    new = candidate_report.render_report({**NEW_C, "name": "x", "profile": "quick"}, doc, claims)
    assert "| no_work_after_return | undecided on a CPU | a CPU run has no device streams to wait on; recorded: " \
           "the device was idle within 0.000 ms |" in new
    assert "| ran | pass | it ran |" in new and new.index("**Ran on a CPU**") < new.index("## Verdict")
    old = candidate_report.render_report({**OLD_C, "name": "x", "profile": "quick"}, doc, claims)
    assert "| no_work_after_return | pass |" in old and "Ran on a CPU" not in old
    # from the tidy words on, what a CPU could not measure is not quoted as if it were a result
    tidy = candidate_report.render_report({**TIDY_C, "name": "x", "profile": "quick"}, doc, claims)
    assert "| no_work_after_return | undecided on a CPU | a CPU run has no device streams to wait on |" in tidy
    assert "0.000 ms" not in tidy


def test_the_report_piped_is_plain_ascii_text():
    """``--show-report`` piped or redirected: plain text (the frames were box-drawing characters,
    a figure's name came with a picture emoji), and a cell's <br> a separator."""
    from kbrepro.cli.render import rendered_markdown

    md = "# Title\n\n| arm | ms |\n|---|---|\n| eager | 1<br>2 |\n\n![claim C10](../renderings/claim_C10.png)\n"
    text = rendered_markdown(md)
    assert text.isascii(), [c for c in text if not c.isascii()]
    assert "Title" in text and "eager" in text and "1; 2" in text and "claim C10" in text


def test_a_long_name_in_a_terminal_table_is_folded_never_cut():
    """A newcomer's finding: the terminal table cut long arm names with an ellipsis
    (``nvrtc_ftz_tru...`` twice in one row); a cell is now folded onto the next line, whole."""
    from kbrepro.cli.render import rendered_markdown

    cells = ["81.full.events", "nvrtc_ftz_false/torchscript", "0.9903", "[0.9892, 0.9913]", "r >= 1 - 0.02",
             "holds", "inconclusive", "nvrtc_ftz_false faster by 0.87 to 1.1 %"]
    md = ("| block | a/b | median r | interval | test | verdict | literal | difference |\n|" + "---|" * 8 + "\n| "
          + " | ".join(cells) + " |\n")
    text = rendered_markdown(md)
    assert "\u2026" not in text and "..." not in text
    # every character of the long name is there, in column order: its first part, then the rest
    # on the following lines of the same column
    lines = text.splitlines()
    (row,) = [i for i, line in enumerate(lines) if "81.full.events" in line]
    col = lines[row].index("nvrtc_ftz_")
    width = len(lines[row][col:].split()[0])
    pieces = [line[col:col + width].strip() for line in lines[row:] if len(line) > col]
    assert "".join(pieces).startswith("nvrtc_ftz_false/torchscript"), pieces
    words = text.split()
    assert all(w in words for c in cells for w in c.split()), words  # every word whole, none cut in pieces


def test_worst_first_means_nearest_to_failing_first():
    """C09 of the published study listed 53, 81, 95 in task order under "worst first" (a
    newcomer's finding): within a verdict the comparison nearest to failing its test comes first."""
    def item(block, lo, hi):
        return {"block": block, "numerator": "a", "median_ratio": (lo + hi) / 2, "ci_low": lo, "ci_high": hi,
                "verdict": "holds", "literal": "holds", "resolved": "numerator_faster"}
    claims = {"evaluated_on": "recorded", "summary": {"holds": 1}, "claims": [{
        "id": "C9", "verdict": "holds", "sentence": "a is faster", "checks": [{
            "kind": "paired_ratio", "test": "faster", "denominator": "b",
            "items": [item("53", 0.60, 0.61), item("81", 0.31, 0.32), item("95", 0.80, 0.95)]}]}]}
    new = report.claims_section(claims, None, True)
    assert new.index("| 95 |") < new.index("| 53 |") < new.index("| 81 |")
    assert "95 a/b" in new.split("\n| C9 |")[1].split("\n")[0]  # what decides it: the nearest to failing
    old = report.claims_section(claims, None, False)
    assert old.index("| 53 |") < old.index("| 81 |") < old.index("| 95 |")  # the order format 5 wrote


def test_a_candidate_that_never_ran_is_not_said_to_differ_nor_to_lack_a_batch_size():
    """A newcomer's finding (candidate format 5): a candidate that never built was said to have
    had no extra shape because "the task has no batch size to vary", and to be "not
    bit-identical: at least one checked case differs" although no case ran. Format 6 says what
    happened; format 5 keeps its words."""
    from kbrepro.bundle import checkpoint

    rec = {"name": "broken", "verdicts": [{"name": "ran", "passed": False, "detail": "SyntaxError"}],
           "observations": {"cases": []}, "config": {}, "blocks": []}
    doc = {"predicate": {"atol": 1e-4, "rtol": 1e-4}, "candidates": [rec]}
    new = {c["id"]: c for c in candidate_report.default_claims(doc, 6)["claims"]}
    assert new["K1b"]["sentence"].endswith("(no extra shape: the candidate did not run).")
    assert new["K1f"]["sentence"] == "broken is bit-identical to PyTorch in every checked case."
    assert new["K1a"]["sentence"].endswith("(all 1 of its checks decide here).")
    old = {c["id"]: c for c in candidate_report.default_claims(doc, 5)["claims"]}
    assert "no batch size to vary" in old["K1b"]["sentence"] and "differs in bits" in old["K1f"]["sentence"]
    assert checkpoint.summary_line({**rec, "seconds": 1.0}).endswith("DID NOT RUN (its build or first call failed; "
                                                                     "the 'ran' check says why)")


TIDY = {"format": pack.FORMAT_NAME, "format_version": kinds.STUDY.tidy_since}
TIDY_C = {"format": kinds.FORMAT, "format_version": kinds.CANDIDATES.tidy_since}


@pytest.mark.parametrize("item,before,words", [
    (_item("numerator_faster", 0.6758, 0.6798), "a faster by 32 to 32 %", "a faster by 32 %"),  # seen in a report
    (_item("numerator_faster", 0.0329, 0.0331), "a 30x to 30x faster", "a 30x faster"),
    (_item("numerator_slower", 3.01, 3.04), "a 3.0x to 3.0x slower", "a 3.0x slower"),
    (_item("numerator_slower", 1.1001, 1.1004), "a slower by 10 to 10 %", "a slower by 10 %"),
    (_item("numerator_faster", 0.958, 0.969), "a faster by 3.1 to 4.2 %", "a faster by 3.1 to 4.2 %"),
    (_item("numerator_faster", 0.0303, 0.0333), "a 30x to 33x faster", "a 30x to 33x faster"),
])
def test_an_interval_whose_ends_read_the_same_is_one_value_from_the_tidy_formats(item, before, words):
    """Study format 8 and candidate format 7 on (issue 31): "faster by 42 %", never "42 to 42"; an
    interval whose ends differ reads as before; the formats before keep "42 to 42"."""
    assert report.readable(TIDY) == report.readable(TIDY_C) == 2
    assert report.readable(NEW) == report.readable(NEW_C) == 1
    assert wording.difference(item, "b", report.readable(NEW)) == before
    assert wording.difference(item, "b", report.readable(TIDY)) == words


def test_a_cpu_report_of_the_tidy_formats_speaks_of_no_timing_it_has_not():
    cpu = {"candidates": _doc("cpu", {"batch_size": 8})}
    assert "Every check holds for these sizes only." in "\n".join(candidate_report.conditions_lines(cpu, 2))
    assert "Every check and timing holds" in "\n".join(candidate_report.conditions_lines(cpu, 1))  # format 6's text
    gpu = {"candidates": _doc("cuda", {"batch_size": 8})}
    assert "Every check and timing holds" in "\n".join(candidate_report.conditions_lines(gpu, 2))
    no_ratio = {"evaluated_on": "recorded", "summary": {"holds": 1},
                "claims": [{"id": "K1a", "verdict": "holds", "sentence": "passes", "checks": []}]}
    assert "ratio convention" not in report.claims_section(no_ratio, None, 2, timed=False)
    assert "ratio convention" in report.claims_section(no_ratio, None, 1, timed=False)
    assert "ratio convention" in report.claims_section(no_ratio, None, 2, timed=True)
