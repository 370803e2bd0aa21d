"""The problems the content checks of a bundle return (:mod:`bundle.crosscheck`,
:mod:`bundle.derived_facts`), each a :class:`kbrepro.model.problems.Problem` (the one problem
type), and the readers they share of values that come from a bundle (never trusted to have
their type).
"""
from __future__ import annotations

from typing import Any

from kbrepro.model.problems import CONTRADICTS, STUDY_CHECK, Problem

#: strings from a bundle are cut to about this many characters in a problem
CUT = 120


def cut(x: Any) -> Any:
    """Strings from the bundle cut to about :data:`CUT` characters (other values as they are)."""
    if isinstance(x, str) and len(x) > CUT:
        return x[:CUT] + "..."
    return x


def problem(file: str | None, path: str | None, message: str, expected: Any = None, found: Any = None,
            code: str = CONTRADICTS) -> Problem:
    """One :class:`Problem` of ``file`` at JSON ``path``: ``message`` on one line, ``expected`` and
    ``found`` (when not None) cut; ``code`` by default :data:`~kbrepro.model.problems.CONTRADICTS`
    (the bundle's data contradict themselves or the verifier's derivation)."""
    return Problem(code, path, " ".join(str(message).split()), None if expected is None else cut(expected),
                   None if found is None else cut(found), file)


def from_study(items: Any, hook: str) -> list[Problem]:
    """The problems a study plug-in's ``hook`` (``crosscheck``, ``provenance``) returned, as
    :class:`Problem` s of code :data:`~kbrepro.model.problems.STUDY_CHECK`. The plug-in contract
    (:class:`kbrepro.harness.plugin.StudyBinding`) returns dicts ``{"file", "path", "message",
    "expected", "found"}``; anything else is itself a problem (a check that cannot be read
    fails, it never passes quietly)."""
    out: list[Problem] = []
    for i, d in enumerate(items if isinstance(items, (list, tuple)) else [items]):
        if not (isinstance(d, dict) and isinstance(d.get("message"), str)
                and all(d.get(k) is None or isinstance(d.get(k), str) for k in ("file", "path"))):
            out.append(Problem(STUDY_CHECK, None, f"the study's {hook} check returned something that is not a "
                               f"problem (item {i}: {cut(type(d).__name__)})"))
            continue
        out.append(Problem(STUDY_CHECK, d.get("path"), " ".join(d["message"].split()),
                           None if d.get("expected") is None else cut(d["expected"]),
                           None if d.get("found") is None else cut(d["found"]), d.get("file")))
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
