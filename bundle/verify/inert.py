"""Strings a bundle can put into REPORT.md must be inert Markdown (tier 3): one line, no
control or bidi character, no HTML, link, image or backtick, no ``|`` in a table cell.
"""
from __future__ import annotations

import json
import re
import unicodedata

from kbrepro import schemas
from kbrepro.bundle import claims as claims_mod
from kbrepro.bundle.documents import DOC_PATHS
from kbrepro.bundle.verify.core import Bundle, MAX_SHOWN_CHARS, Tier, trusted_studies


#: what makes a string active in Markdown or HTML wherever REPORT.md shows it: the start of an
#: HTML tag or comment, a link or image, a code-span backtick (line breaks, control and bidi
#: characters are refused separately)
_MD_ACTIVE = re.compile(r"<[A-Za-z!/?]|\]\(|\]\[|\]:|!\[|`|&(#|[A-Za-z][A-Za-z0-9]*;)")


#: in the fields REPORT.md shows in its tables, header and notes, emphasis, strike-through and
#: autolinks too
_MD_STRICT = re.compile(r"\*|~~|__|https?://|www\.", re.IGNORECASE)


#: an environment value shown in REPORT.md's header: a conservative character set, bounded
ENV_VALUE = re.compile(r"^[A-Za-z0-9 .,:;()+/=@#_-]{0,200}$")
#: within that set, what Markdown still reads as emphasis (an underscore at a word's edge) or as
#: an extended autolink (an e-mail address, a URL)
_ENV_ACTIVE = re.compile(r"(^|[^A-Za-z0-9])_|_($|[^A-Za-z0-9])|[A-Za-z0-9._+-]@[A-Za-z0-9-]+\.|://|www\.",
                         re.IGNORECASE)


def env_value_problem(text: str) -> str | None:
    """Why an environment value may not be shown in REPORT.md or summary.txt, or None: outside
    :data:`ENV_VALUE`'s characters or length, or emphasis or an autolink within them."""
    if not ENV_VALUE.match(text):
        return "characters outside [A-Za-z0-9 .,:;()+/=@#_-] or more than 200"
    m = _ENV_ACTIVE.search(text)
    return f"Markdown emphasis or an autolink ({m.group(0)!r})" if m else None


SCRUB_PLACEHOLDER = re.compile(r"<(site-packages|dist-packages|tmp|home|path|project)>")


#: where the engine writes those placeholders: compile options, Inductor's recorded environment
_SCRUBBED_FIELD = re.compile(r"(\.options|\.inductor\.settings\.env\.[A-Za-z_][A-Za-z0-9_]*$)")


#: fields REPORT.md never shows, whose product-written text holds formulas ('max |d| <= atol')
_UNSHOWN = re.compile(r"\.(derived_from|definitions|inequality|imported|program_log)(\.|\[|$)"
                      r"|^\$\.claims\[\d+\]\.checks\[\d+\]\.(select|blocks)$")


#: fields REPORT.md shows inside a table, where a '|' would split the cell
_IN_TABLE = re.compile(r"^\$\.(fields\.[^.]+\.value|variants\[\d+\]\.(name|route|effective_options)"
                       r"|claims\[\d+\]\.(id|sentence|why|verdict|measured_verdict|checks\[\d+\]\.(why|items))"
                       r"|blocks\[\d+\]\.(id|arms|skipped|adaptive|kind|mode|scope)|tests\[\d+\]"
                       r"|tasks\.[^.]+\.inductor\.settings)")


_SHOWN_META = re.compile(r"^\$\.(name|notes|study|source|kernelbench\.reason)")


#: strings no rule of :func:`bad_chars` can refuse (and that pass ``ENV_VALUE``): letters,
#: digits and ``.,:;()+/=-`` and single underscores, at most 200 characters, with neither
#: ``://`` nor ``www.`` in them; the common case, decided without the per-character scan
_PLAIN = re.compile(r"(?!.*(?:://|www\.))(?:[A-Za-z0-9 .,:;()+/=-]|_(?!_)){0,200}\Z", re.IGNORECASE | re.DOTALL)


def bad_chars(text: str, in_table: bool, strict: bool | None = None) -> str | None:
    """Why ``text`` is not inert where REPORT.md shows it, or None."""
    if _PLAIN.match(text):
        return None

    for ch in text:
        cat = unicodedata.category(ch)
        if cat[0] == "C" or cat in ("Zl", "Zp"):
            return f"a control, format or line-break character (U+{ord(ch):04X})"
    m = _MD_ACTIVE.search(text)
    if m:
        return f"active Markdown/HTML ({m.group(0)!r})"
    if len(text) > MAX_SHOWN_CHARS:
        return f"{len(text)} characters, more than the {MAX_SHOWN_CHARS} a report line may show"
    if in_table if strict is None else strict:
        m = _MD_STRICT.search(text)
        if m:
            return f"Markdown emphasis or an autolink ({m.group(0)!r})"
    if in_table and "|" in text:
        return "a '|', which splits a table cell"
    return None


def inert_strings(b: Bundle, t: Tier) -> None:
    """Every string of the documents, bundle.json and claims.json is inert where REPORT.md may
    show it: one line, no control or bidi characters, no HTML tag or comment, link, image or
    backtick, and no '|' in a table cell. Otherwise a GPU name holding a line break and an HTML
    comment opener re-renders byte for byte and hides the real claims table from a forum
    reader. Allowed beyond that: the scrubber's placeholders (``<site-packages>``...) in compile
    options (shown as code), and the sentences of the claims the verifier itself defines."""
    docs = b.documents
    own_sentences: set[str] = set()
    for st in ([b.trusted] if b.trusted is not None else [x for x in trusted_studies().values() if x.intact]):
        own_sentences |= {c["sentence"] for c in claims_mod.parse_spec(st.claims_raw)["claims"]}
    roots = [("data/bundle.json", b.meta)] + [("data/claims.json" if n == "claims" else f"data/{DOC_PATHS[n]}", d)
                                              for n, d in docs.items()]
    plain_keys: dict = {}  # a key's _PLAIN verdict; keys repeat across records
    for file, root in roots:
        found = 0
        stack = [(None, "$", root)]  # (parent chain, key, node): a path is spelled only when needed
        while stack and found < 20:
            parent, key, node = stack.pop()
            if isinstance(node, dict):
                chain = (parent, key)
                for k, v in node.items():
                    plain = plain_keys.get(k)
                    if plain is None:
                        plain = plain_keys[k] = isinstance(k, str) and _PLAIN.match(k) is not None
                    if plain and not isinstance(v, (str, dict, list)):
                        continue  # a plain key of a number, bool or null: nothing to check, no path
                    why = None if plain else bad_chars(str(k), True)
                    if why:
                        t.fail(file, f"a key holds {why}", path=_spelled(chain, k), found=str(k))
                        found += 1
                    stack.append((chain, k, v))
            elif isinstance(node, list):
                chain = (parent, key)
                stack.extend((chain, i, v) for i, v in enumerate(node) if isinstance(v, (str, dict, list)))
            elif isinstance(node, str):
                if _PLAIN.match(node):
                    continue  # inert wherever it is shown
                path = _spelled(parent, key)
                text = node
                if (file.endswith("compile.json") and "options" in path) or \
                        (file.endswith("correctness.json") and _SCRUBBED_FIELD.search(path)):
                    text = SCRUB_PLACEHOLDER.sub("", text)
                if file == "data/environment.json" and re.match(r"^\$\.fields\.[^.]+\.value", path) and \
                        env_value_problem(node):
                    t.fail(file, f"an environment value REPORT.md shows holds {env_value_problem(node)}", path=path,
                           found=node)
                    found += 1
                    continue
                shown = not _UNSHOWN.search(path) and not (file == "data/claims.json" and node in own_sentences)
                table = bool(_IN_TABLE.match(path))
                strict = table or (file == "data/bundle.json" and bool(_SHOWN_META.match(path)))
                why = bad_chars(text, table, strict) if shown else \
                    bad_chars(_MD_ACTIVE.sub("", text).replace("|", ""), False)
                if why:
                    t.fail(file, f"a string REPORT.md may show holds {why}", path=path, found=node)
                    found += 1


def candidate_strings(b: Bundle, t: Tier) -> None:
    """A candidate bundle's strings that REPORT.md and summary.txt show as they are: every
    environment value (:func:`env_value_problem`: the GPU, driver and torch lines of the
    five-line summary a post quotes) and every claim's sentence and reason (inert Markdown, as
    a study's: an author's claim is shown beside the verifier's)."""
    env = b.files.get("data/results/environment.json")
    try:
        fields = json.loads(env).get("fields") if env is not None else None
    except ValueError:
        fields = None  # the documents check fails it
    for name, field in sorted((fields or {}).items()):
        value = field.get("value") if isinstance(field, dict) else None
        why = env_value_problem(value) if isinstance(value, str) else None
        if why:
            t.fail("data/results/environment.json", f"an environment value REPORT.md and summary.txt show holds "
                   f"{why}", path=f"$.fields.{name}.value", found=value)
    try:
        claims = json.loads(b.files.get("data/claims.json") or b"{}")
    except ValueError:
        claims = {}  # the claims check fails it
    for i, c in enumerate((claims.get("claims") if isinstance(claims, dict) else None) or []):
        for key in ("id", "sentence", "why"):
            text = c.get(key) if isinstance(c, dict) else None
            why = bad_chars(text, True, True) if isinstance(text, str) else None
            if why:
                t.fail("data/claims.json", f"a string REPORT.md shows holds {why}", path=f"$.claims[{i}].{key}",
                       found=text)


def _spelled(parent, key) -> str:
    """The JSONPath of ``key`` under the parent chain ``parent`` (nested ``(parent, key)``
    pairs from the root ``(None, "$")``): ``$.a[3].b``, ``$["odd key"]``."""
    parts = []
    while parent is not None:  # the root's own key is "$"
        parts.append(key)
        parent, key = parent
    return schemas.json_path(reversed(parts))
