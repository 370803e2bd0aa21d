"""A verified REPORT.md as one self-contained, inert HTML page (``verify_bundle.py --html FILE``).

The page is rendered by the verifier from the bytes it verified (REPORT.md is compared byte for
byte with the report the verifier renders from the records, and every string a bundle can put
into it is held inert first; :mod:`kbrepro.bundle.verify.inert`). It is inert on its own too:

* no script, no event handler, no form, no frame: the Markdown is parsed by markdown-it-py
  (CommonMark and GitHub tables) and every raw HTML block or span of it is escaped as text, but
  for the ``<details><summary>...</summary>`` / ``</details>`` lines the report folds its long
  tables with;
* no request outside the file: a link keeps its text and loses its target, and a figure is
  embedded as a ``data:`` PNG only where its pixels were checked (``--check-renderings``),
  otherwise named in its place; a Content-Security-Policy (``default-src 'none'``) forbids
  anything else a browser might fetch.
"""
from __future__ import annotations

import base64
import html
import re
from typing import Mapping

from markdown_it import MarkdownIt

#: what a browser may load for the page: its own inline style and embedded PNGs, nothing else
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
_DETAILS_OPEN = re.compile(r"^<details><summary>([^<>&\n]{1,200})</summary>\n?$")
_DETAILS_CLOSE = re.compile(r"^</details>\n?$")
_FIGURE = re.compile(r"\.\./renderings/([A-Za-z0-9_-]{1,80})\.png")
_VERDICTS = ("PASS", "PARTIAL", "FAIL")
_STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 75em; padding: 0 1em; color: #1b1b1b; }
header { border: 2px solid #555; padding: .6em 1em; margin-bottom: 1.5em; }
header.pass { border-color: #2e7d32; } header.partial { border-color: #b26a00; } header.fail { border-color: #c62828; }
header p { margin: .2em 0; } code { background: #f2f2f2; padding: 0 .2em; }
table { border-collapse: collapse; margin: 1em 0; display: block; overflow-x: auto; } th, td { border: 1px solid #ccc; padding: .25em .5em; vertical-align: top; }
th { background: #f5f5f5; } img { max-width: 100%; } .figure-missing { color: #555; font-style: italic; }
details { margin: 1em 0; } summary { cursor: pointer; font-weight: 600; }
"""


def _folds_balanced(tokens) -> bool:
    """Whether the report's ``<details>`` lines fold it soundly: each a top-level HTML block of
    its own line, every opening one closed, none nested (otherwise all are shown as text: an
    unclosed one would fold the rest of the page under a summary of someone's choosing)."""
    depth = 0
    for tok in tokens:
        if tok.type != "html_block":
            continue
        for line in tok.content.splitlines(keepends=True):
            if _DETAILS_OPEN.match(line) or _DETAILS_CLOSE.match(line):
                if tok.level != 0 or len(tok.content.splitlines()) != 1:
                    return False
                depth += 1 if _DETAILS_OPEN.match(line) else -1
                if depth not in (0, 1):
                    return False
    return depth == 0


_LINE_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)


def _parser(figures: Mapping[str, bytes]) -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": True}).enable("table")
    rules = md.renderer.rules

    def html_block(tokens, idx, options, env):
        text = tokens[idx].content
        folds = env.get("folds", False)
        out = []
        for line in text.splitlines(keepends=True):
            m = _DETAILS_OPEN.match(line) if folds else None
            if m:
                out.append(f"<details><summary>{html.escape(m.group(1))}</summary>\n")
            elif folds and _DETAILS_CLOSE.match(line):
                out.append("</details>\n")
            else:
                out.append(f"<p>{html.escape(line)}</p>\n")
        return "".join(out)

    def html_inline(tokens, idx, options, env):
        # the one inline tag REPORT.md writes (a line break inside a table cell) is kept, as an
        # element made here; every other inline HTML is text
        if _LINE_BREAK.fullmatch(tokens[idx].content):
            return "<br>"
        return html.escape(tokens[idx].content)

    def link_open(tokens, idx, options, env):
        return '<span class="link">'

    def link_close(tokens, idx, options, env):
        return "</span>"

    def image(tokens, idx, options, env):
        tok = tokens[idx]
        alt = html.escape(tok.content)
        m = _FIGURE.fullmatch(tok.attrGet("src") or "")
        png = figures.get(m.group(1)) if m else None
        if png is None:
            return (f'<span class="figure-missing">[figure {alt}: not embedded; its pixels are embedded only '
                    "when --check-renderings compared them]</span>")
        return f'<img alt="{alt}" src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}">'

    rules["html_block"] = html_block
    rules["html_inline"] = html_inline
    rules["link_open"] = link_open
    rules["link_close"] = link_close
    rules["image"] = image
    return md


def render_html(report_md: str, *, title: str, verdict: str, verdict_line: str, digest: str | None,
                figures: Mapping[str, bytes] | None = None) -> bytes:
    """The HTML page of ``report_md`` (a verified REPORT.md, text), headed by the verification's
    ``verdict`` (PASS, PARTIAL, FAIL), its ``verdict_line`` and the bundle ``digest``.
    ``figures``: figure name -> PNG bytes whose pixels the verifier compared (embedded as
    ``data:`` URIs); others are named, not shown. Returns UTF-8 bytes."""
    md = _parser(figures or {})
    tokens = md.parse(report_md)
    body = md.renderer.render(tokens, md.options, {"folds": _folds_balanced(tokens)})
    kind = verdict.lower() if verdict in _VERDICTS else "unknown"
    head = (f'<header class="{kind}">'
            f"<p><strong>{html.escape(verdict_line)}</strong></p>"
            + (f"<p>bundle digest <code>{html.escape(digest)}</code> (sha256 of its tag manifest)</p>" if digest else "")
            + "<p>Rendered by the verifier from the REPORT.md it verified (the same bytes it renders from the "
              "bundle's records); figures only where their pixels were compared.</p></header>")
    page = ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
            '<meta name="referrer" content="no-referrer">\n'
            f"<title>{html.escape(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n{head}\n<main>\n{body}</main>\n"
            "</body>\n</html>\n")
    return page.encode("utf-8", "replace")  # (a lone surrogate becomes "?", never an exception)


__all__ = ["render_html", "CSP"]
