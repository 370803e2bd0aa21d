"""The one inertness rule for text a person reads (a leaf module: it imports nothing of kbrepro): a bundle's strings shown in Markdown (REPORT.md,
the replay matrix) or on a terminal never act as anything but the characters they are.

* :func:`is_inert` decides whether a line of text, shown in Markdown, renders as exactly its own
  characters: printable ASCII only (no control, bidi or other non-ASCII character), no autolink
  (``://``, ``www.``, ``@``), and a CommonMark parse (markdown-it-py, with GitHub's
  strike-through and tables) that finds nothing but plain text equal to the input: no emphasis,
  link, image, code span, HTML, entity or escape.
* :func:`md` shows a bundle string in Markdown: each character outside a plain set becomes
  ``?`` and ``[]`` become ``()`` (so no bracket, angle bracket, backtick, ``|`` or non-ASCII
  character is ever written), cut to ``limit``; if what remains is still not inert (``**x**``,
  ``&lt;``, ``https://...``, ``a*b*c``), every ASCII punctuation character is backslash-escaped,
  which CommonMark shows literally. Plain text is written unchanged, so reports of plain data
  keep their bytes.
* :func:`terminal` shows a bundle string on a terminal: printable ASCII as is, anything else
  escaped as Python's ``ascii()`` escapes it (no escape sequence, carriage return or bidi
  control reaches the terminal), cut to ``limit``.
"""
from __future__ import annotations

import re
from functools import lru_cache

#: what md() keeps as it is: letters, digits, space and plain punctuation (anything else is '?')
_KEEP = re.compile(r"[^A-Za-z0-9 .,:;=+\-*/_%#'\"!?&{}~^()]")
_PUNCT = re.compile(r"([!-/:-@\\^-`{-~])")
_AUTOLINK = re.compile(r"://|www\.|@", re.IGNORECASE)
#: text that no rule of is_inert can refuse (the common case, decided without a parse): printable
#: ASCII without a character CommonMark gives a meaning to mid-line (emphasis, strike-through,
#: code, links, HTML, entities, escapes) and without an autolink
_PLAIN = re.compile(r"[ -~]*\Z")
_ACTIVE = re.compile(r"[*_~`\[\]<>&\\]|://|www\.|@", re.IGNORECASE)


@lru_cache(maxsize=1)
def _parser():
    from markdown_it import MarkdownIt  # a well-kept CommonMark parser (markdown-it-py)

    return MarkdownIt("commonmark").enable(["strikethrough", "table"])


def is_inert(text: str) -> bool:
    """Whether ``text`` (one line) renders in Markdown as exactly its own characters."""
    if _PLAIN.match(text) and not _ACTIVE.search(text):
        return True
    if not (text.isascii() and text.isprintable()) or _AUTOLINK.search(text):
        return False
    tokens = _parser().parseInline(text)
    kids = [k for t in tokens for k in (t.children or [])]
    return all(k.type == "text" for k in kids) and "".join(k.content for k in kids) == text


def md(text, limit: int = 300) -> str:
    """``text`` shown inline or in a table cell of Markdown, inert by construction (see the
    module docstring); at most ``limit`` characters of the input are kept."""
    s = _KEEP.sub("?", str(text).replace("[", "(").replace("]", ")"))[:limit]
    return s if is_inert(s) else _PUNCT.sub(r"\\\1", s)


def terminal(text, limit: int | None = 200) -> str:
    """``text`` as one printable ASCII line for a terminal (``ascii()`` escapes), cut to
    ``limit`` characters (with ``...``; None: not cut)."""
    s = str(text)
    if not (s.isascii() and s.isprintable()):
        s = ascii(s)[1:-1]
    return s if limit is None or len(s) <= limit else s[: max(0, limit - 3)] + "..."


__all__ = ["is_inert", "md", "terminal"]
