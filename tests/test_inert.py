"""Strings a bundle can put into REPORT.md must be inert Markdown (bundle.verify.inert.bad_chars)."""
from __future__ import annotations

import pytest

from kbrepro.bundle.verify import inert as V


@pytest.mark.parametrize("text,table,fragment", [
    ("NVIDIA H200\n\n## Claims", False, "U+000A"),
    ("H200 \u202e", False, "U+202E"),
    ("zero\u200bwidth", False, "U+200B"),
    ("x <!-- hide", False, "active Markdown/HTML"),
    ("<img src=x>", False, "active Markdown/HTML"),
    ("[verified](https://e.example)", False, "active Markdown/HTML"),
    ("![ok](x.png)", False, "active Markdown/HTML"),
    ("[a][1]", False, "active Markdown/HTML"),
    ("`code", False, "active Markdown/HTML"),
    ("&#x202E;", False, "active Markdown/HTML"),
    ("&lt;!--", False, "active Markdown/HTML"),
    ("a | b", True, "splits a table cell"),
    ("**ALL VERIFIED**", True, "emphasis or an autolink"),
    ("~~struck~~", True, "emphasis or an autolink"),
    ("see https://e.example", True, "emphasis or an autolink"),
    ("www.e.example", True, "emphasis or an autolink"),
    ("x" * 1001, False, "more than the 1000"),
])
def test_active_strings_are_refused(text, table, fragment):
    why = V.bad_chars(text, table)
    assert why is not None and fragment in why


@pytest.mark.parametrize("text,table", [
    ("NVIDIA H200", True), ("nvrtc_ftz_true", True), ("2.11.0+cu130", True), ("-I<tmp>/x", False),
    ("max |d| <= atol", False), ("dense [-110,-60] domain", True), ("x * y", False),
])
def test_plain_strings_pass(text, table):
    if text == "-I<tmp>/x":  # the scrubber's placeholder is removed before the check (compile options)
        text = V.SCRUB_PLACEHOLDER.sub("", text)
    assert V.bad_chars(text, table) is None


def test_environment_values_use_a_plain_character_set():
    assert V.ENV_VALUE.match("NVIDIA H200") and V.ENV_VALUE.match("13.0")
    assert not V.ENV_VALUE.match("False **ALL VERIFIED**") and not V.ENV_VALUE.match("a" * 201)
