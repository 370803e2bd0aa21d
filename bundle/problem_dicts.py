"""The problem dicts the content checks of a bundle return (:mod:`bundle.crosscheck`,
:mod:`bundle.derived_facts`), and the readers they share of values that come from a bundle
(never trusted to have their type)::

    {"file": "data/...", "path": "$.json.path" or None, "message": "one line",
     "expected": ... (optional), "found": ... (optional)}
"""
from __future__ import annotations

from typing import Any

#: strings from a bundle are cut to about this many characters in a problem
CUT = 120


def cut(x: Any) -> Any:
    """Strings from the bundle cut to about :data:`CUT` characters (other values as they are)."""
    if isinstance(x, str) and len(x) > CUT:
        return x[:CUT] + "..."
    return x


def problem(file: str | None, path: str | None, message: str, expected: Any = None, found: Any = None) -> dict:
    """One problem dict: ``message`` on one line, ``expected`` and ``found`` (when not None) cut."""
    out = {"file": file, "path": path, "message": " ".join(str(message).split())}
    if expected is not None:
        out["expected"] = cut(expected)
    if found is not None:
        out["found"] = cut(found)
    return out


def as_dict(x: Any) -> dict:
    """``x`` if it is a dict, else an empty one."""
    return x if isinstance(x, dict) else {}


def as_list(x: Any) -> list:
    """``x`` if it is a list, else an empty one."""
    return x if isinstance(x, list) else []


def is_int(x: Any) -> bool:
    """An int that is not a bool."""
    return isinstance(x, int) and not isinstance(x, bool)


def number(x: Any) -> float | None:
    """A recorded number (int, float, or the encoded ``"inf"``/``"-inf"``/``"nan"``) as a
    float; None for anything else (null, bool, other strings)."""
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, str) and x in ("inf", "-inf", "nan", "Infinity", "-Infinity", "NaN"):
        return float(x.replace("Infinity", "inf"))
    return None
