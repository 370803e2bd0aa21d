"""Strict JSON in and out, and atomic writes.

Documents never contain NaN or Infinity tokens: :func:`enc_float` turns a non-finite float
into the string ``"nan"``, ``"inf"`` or ``"-inf"`` (schemas allow these strings only where
a value may legitimately be non-finite), and :func:`dumps` refuses any non-finite float that
was not encoded. :func:`loads_strict` refuses the tokens ``NaN``, ``Infinity`` and
``-Infinity``, and duplicate object keys, which Python's ``json`` accepts by default, and
reads hostile bytes within bounds: size, nesting depth, integer digits and range, and
numbers that overflow a double (see its docstring for the limits and their sources).
"""
from __future__ import annotations

import json
import math
import os
import re
import tempfile
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import Any

from kbrepro.errors import UnreadableInputError
from kbrepro.process import deferred_sigint


def enc_float(x: float | None):
    """A float for JSON: finite -> float, NaN -> ``"nan"``, +-inf -> ``"inf"``/``"-inf"``."""
    if x is None:
        return None
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def dec_float(v) -> float | None:
    """Inverse of :func:`enc_float`."""
    if v is None:
        return None
    if isinstance(v, str):
        return {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}[v]
    return float(v)


def dumps(doc: Any) -> str:
    """Canonical text: sorted keys, two-space indent, trailing newline, ASCII only: exactly
    ``json.dumps(doc, indent=2, sort_keys=True, allow_nan=False, ensure_ascii=True) + "\\n"``.
    Raises ValueError on a non-finite float (and what ``json.dumps`` raises otherwise).

    Documents of plain ``dict`` (string keys), ``list``, ``str``, ``int``, ``float``,
    ``bool`` and ``None`` are written by :func:`_canonical`, about twice as fast as the
    standard library's indenting encoder (pure Python there); anything else (a tuple, a
    subclass, a non-string key, a non-finite float, a cycle) goes to ``json.dumps`` itself.
    ``tests/test_jsonio_schemas.py`` compares the two on random and committed documents."""
    out: list[str] = []
    try:
        _canonical(doc, "", out.append)
    except (_Unusual, RecursionError):
        return json.dumps(doc, indent=2, sort_keys=True, allow_nan=False, ensure_ascii=True) + "\n"
    out.append("\n")
    return "".join(out)


class _Unusual(Exception):
    """A value :func:`_canonical` leaves to ``json.dumps``."""


def _canonical(o: Any, indent: str, app) -> None:
    """Append the canonical text of ``o`` at ``indent`` (the standard library's layout for
    ``indent=2``: an empty container is ``[]``/``{}``, every item on its own line)."""
    t = type(o)
    if t is str:
        app(encode_basestring_ascii(o))
    elif t is dict:
        if not o:
            app("{}")
            return
        inner = indent + "  "
        sep = "{\n" + inner
        keys = list(o)
        if any(type(k) is not str for k in keys):
            raise _Unusual()
        keys.sort()
        for k in keys:
            app(sep)
            app(encode_basestring_ascii(k))
            app(": ")
            _canonical(o[k], inner, app)
            sep = ",\n" + inner
        app("\n" + indent + "}")
    elif t is list:
        if not o:
            app("[]")
            return
        inner = indent + "  "
        sep = "[\n" + inner
        for v in o:
            app(sep)
            _canonical(v, inner, app)
            sep = ",\n" + inner
        app("\n" + indent + "]")
    elif t is float:
        if not math.isfinite(o):
            raise _Unusual()
        app(float.__repr__(o))
    elif o is True:
        app("true")
    elif o is False:
        app("false")
    elif o is None:
        app("null")
    elif t is int:
        app(int.__repr__(o))
    else:
        raise _Unusual()


def _no_constants(token: str):
    raise ValueError(f"non-standard JSON token {token!r}")


def _no_duplicates(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


#: Default bounds of :func:`loads_strict`. The largest committed document
#: (``examples/results-full-h200/timings.json``) is 352 KB and nests 8 levels deep; these
#: leave two orders of magnitude of room while keeping a hostile document's cost bounded.
MAX_JSON_BYTES = 64 * 1024 * 1024
MAX_JSON_DEPTH = 64
#: An integer token may have at most this many digits; it is checked on the token's text,
#: before ``int()`` runs (CPython's own limit is 4300 digits, and conversion is quadratic).
MAX_INT_DIGITS = 20
#: Integers must lie in the signed 64-bit range ``(-2**63, 2**63)``: the product writes no
#: larger value, and other JSON readers (and numpy) cannot hold one.
INT_LIMIT = 2 ** 63

# a JSON string token (escapes included); a string never contains an unescaped quote
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET_OR_QUOTE = bytes(b for b in range(256) if b not in b'[]{}"')
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_SQUARE = bytes.maketrans(b"{}", b"[]")  # objects and arrays nest alike


def _parse_int(token: str) -> int:
    digits = len(token) - (token[0] == "-")
    if digits > MAX_INT_DIGITS:
        raise ValueError(f"integer of {digits} digits (more than {MAX_INT_DIGITS})")
    v = int(token)
    if not -INT_LIMIT < v < INT_LIMIT:
        raise ValueError(f"integer {token} outside the 64-bit range (magnitude >= 2**63)")
    return v


def _parse_float(token: str) -> float:
    v = float(token)
    if v == math.inf or v == -math.inf:
        raise ValueError(f"number {token[:24]}{'...' if len(token) > 24 else ''} overflows a double")
    return v


_DIGITS_TO_ZERO = bytes.maketrans(b"0123456789+E", b"00000000000e")


def _numbers_need_checks(data: bytes) -> bool:
    """False when no number token of ``data`` can be out of bounds, so that the per-token
    hooks (about 1.5 ms on a 300 KB document) can be skipped. Without a run of 19 digits an
    integer is below 10**18 < 2**63, and so is a float's integer part; without ``e`` followed
    by three digits or by ``+`` and two (``e-`` cannot overflow), a float is below 10**117.
    Strings are not removed first: a match inside one (a hash) only costs the slow path."""
    t = data.translate(_DIGITS_TO_ZERO)
    return b"0" * 19 in t or b"e000" in t


def nesting_depth(data: bytes, limit: int = MAX_JSON_DEPTH) -> int:
    """Maximum nesting depth of arrays and objects in JSON text ``data`` (0 for a scalar),
    or ``limit + 1`` if it is deeper than ``limit``; computed on the bytes, without parsing.
    String tokens are removed, brackets kept, and innermost pairs removed one level per pass.
    Exact for valid JSON; for invalid JSON some number (the parser then reports the real
    problem). Cost: about 0.5 ms on the 352 KB ``timings.json``; at most ``limit + 1`` passes
    of ``bytes.replace`` on a hostile document."""
    if b"\\" in data:
        outside = _STRING.sub(b"", data).translate(_SQUARE, _NOT_BRACKET)
    else:
        # no escapes: a string is a quote, non-quotes, a quote. Keep only quotes and
        # brackets; an adjacent pair of quotes encloses no bracket and can go (this keeps
        # the parity of every later quote), and what remains is small.
        outside = data.translate(None, _NOT_BRACKET_OR_QUOTE).replace(b'""', b"")
        if b'"' in outside:
            outside = _STRING.sub(b"", outside)
        outside = outside.translate(_SQUARE)
    if b"[" * (limit + 1) in outside:  # the common hostile shape, found at once
        return limit + 1
    depth = 0
    while outside:
        if depth > limit:
            return limit + 1
        inner = outside.replace(b"[]", b"")
        if len(inner) == len(outside):  # unbalanced: not JSON
            return depth
        outside, depth = inner, depth + 1
    return depth


def loads_strict(text: str | bytes, where: str = "document", *, max_bytes: int = MAX_JSON_BYTES,
                 max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Parse JSON ``text`` (UTF-8 bytes or str) strictly and within bounds.

    Refused: the tokens ``NaN``, ``Infinity`` and ``-Infinity``; duplicate object keys;
    input longer than ``max_bytes`` bytes (default :data:`MAX_JSON_BYTES`, 64 MiB);
    arrays/objects nested deeper than ``max_depth`` levels (default :data:`MAX_JSON_DEPTH`,
    64; checked on the raw bytes before parsing, so no ``RecursionError`` can occur);
    integer tokens of more than :data:`MAX_INT_DIGITS` (20) digits (refused before
    conversion) or of magnitude >= 2**63; numbers that overflow a double (``1e999``).

    Raises :class:`UnreadableInputError` with a one-line message naming ``where``.
    """
    try:
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        if len(data) > max_bytes:
            raise ValueError(f"{len(data)} bytes, more than the {max_bytes} allowed")
        if nesting_depth(data, max_depth) > max_depth:
            raise ValueError(f"arrays/objects nested more than {max_depth} levels deep")
        text = data.decode("utf-8")
        if _numbers_need_checks(data):
            return json.loads(text, parse_constant=_no_constants, object_pairs_hook=_no_duplicates,
                              parse_int=_parse_int, parse_float=_parse_float)
        return json.loads(text, parse_constant=_no_constants, object_pairs_hook=_no_duplicates)
    except (ValueError, UnicodeError, RecursionError) as exc:
        msg = " ".join(str(exc).split()) if not isinstance(exc, RecursionError) else "nested too deep"
        raise UnreadableInputError(f"{where} is not strict JSON: {msg}",
                                   "the file is truncated, hand-edited or not JSON: regenerate it, or restore it from "
                                   "its source (strict JSON has no NaN/Infinity tokens, no repeated keys, integers "
                                   "within 64 bits and finite numbers)") from exc


def read_json(path: Path) -> Any:
    """:func:`loads_strict` of a file. Raises UnreadableInputError if unreadable."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise UnreadableInputError(f"cannot read {path}: {exc.strerror}", "check the path") from exc
    return loads_strict(data, where=str(Path(path).name))


def atomic_write_all(files) -> None:
    """Write every ``(path, data)`` of ``files`` together: each to a temporary file beside its
    final name first (the slow part, where a failure or Ctrl-C leaves every final name as it
    was), then the renames one after the other with Ctrl-C and SIGTERM held, so an
    interruption never leaves one file new and another old (an archive and the digest file
    beside it). Raises OSError (every temporary file removed) if a write fails."""
    temps: list[tuple[str, Path]] = []
    try:
        for path, data in files:
            path = Path(path)
            with deferred_sigint():  # a Ctrl-C right after mkstemp would leave the file behind
                fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
                temps.append((tmp, path))
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(fd, 0o666 & ~umask)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        with deferred_sigint():
            while temps:
                tmp, path = temps[0]
                os.replace(tmp, path)
                temps.pop(0)
    finally:
        with deferred_sigint():  # a second interrupt must not cut the cleanup short
            for tmp, _ in temps:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and a rename, so a
    crash never leaves a half-written file under the final name."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = None
    try:
        with deferred_sigint():  # a Ctrl-C right after mkstemp would leave the file behind
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; give the file the mode open() would
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if tmp is not None:
            with deferred_sigint():  # a second interrupt must not cut the cleanup short
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
        raise


def write_json(path: Path, doc: Any) -> None:
    """Atomically write ``doc`` as canonical strict JSON (:func:`dumps`)."""
    atomic_write_bytes(path, dumps(doc).encode("ascii"))
