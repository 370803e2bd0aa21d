"""Strict JSON in and out, and atomic writes.

Documents never contain NaN or Infinity tokens: :func:`enc_float` turns a non-finite float
into the string ``"nan"``, ``"inf"`` or ``"-inf"`` (schemas allow these strings only where
a value may legitimately be non-finite), and :func:`dumps` refuses any non-finite float that
was not encoded. :func:`loads_strict` refuses the tokens ``NaN``, ``Infinity`` and
``-Infinity``, and duplicate object keys, which Python's ``json`` accepts by default.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from kbrepro.kernels.errors import UnreadableInputError


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
    """Canonical text: sorted keys, two-space indent, trailing newline, ASCII only.
    Raises ValueError on a non-finite float."""
    return json.dumps(doc, indent=2, sort_keys=True, allow_nan=False, ensure_ascii=True) + "\n"


def _no_constants(token: str):
    raise ValueError(f"non-standard JSON token {token!r}")


def _no_duplicates(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def loads_strict(text: str | bytes, where: str = "document") -> Any:
    """Parse JSON, refusing NaN/Infinity tokens and duplicate keys.
    Raises :class:`UnreadableInputError` naming ``where``."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        return json.loads(text, parse_constant=_no_constants, object_pairs_hook=_no_duplicates)
    except (ValueError, UnicodeDecodeError) as exc:
        raise UnreadableInputError(f"{where} is not strict JSON: {exc}",
                                   "the file is truncated, hand-edited or not JSON: regenerate it, or restore it from "
                                   "its source (strict JSON has no NaN/Infinity tokens and no repeated keys)") from exc


def read_json(path: Path) -> Any:
    """:func:`loads_strict` of a file. Raises UnreadableInputError if unreadable."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise UnreadableInputError(f"cannot read {path}: {exc.strerror}", "check the path") from exc
    return loads_strict(data, where=str(Path(path).name))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and a rename, so a
    crash never leaves a half-written file under the final name."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; give the file the mode open() would
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_json(path: Path, doc: Any) -> None:
    """Atomically write ``doc`` as canonical strict JSON (:func:`dumps`)."""
    atomic_write_bytes(path, dumps(doc).encode("ascii"))
