"""The values of a KernelBench task's size globals: one rule for the command line, the run, the
child process and the verifier.

A size is a positive integer (``batch_size = 16``) or a tuple of 1 to :data:`MAX_DIMS` positive
integers (``input_shape = (32768,)``, ``kernel_size = (5, 7)``), every integer at most
:data:`MAX_SIZE`. The typed model and the harness hold a tuple as a Python ``tuple`` (frozen,
hashable); the JSON documents hold it as an array of integers (:func:`to_json`), read back with
:func:`canonical`. A size replaces a task's global only by a value of the same kind
(:func:`same_kind`: an integer for an integer, a tuple of as many entries for a tuple).

On the command line (``--size NAME=VALUE``, ``--extra-shape NAME=VALUE[,NAME=VALUE]``) VALUE is
an integer (``8``) or a tuple of integers, with or without parentheses: ``(4096,)``,
``4096,``, ``(5,7)``, ``5,7``; ``(4096)`` is refused (a one-entry tuple is ``(4096,)``).
:func:`parse_pair` reads one pair and :func:`split_pairs` an extra shape's pairs; neither
evaluates anything.
"""
from __future__ import annotations

import re
from typing import Any, Mapping, Optional, Tuple, Union

#: the largest integer a size may hold, and the most entries of a tuple-valued size
MAX_SIZE = 1 << 24
MAX_DIMS = 8
#: a size's value: an int, or a tuple of ints
SizeValue = Union[int, Tuple[int, ...]]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_INT = re.compile(r"-?[0-9]{1,12}")
#: the commas of an extra shape that start another NAME=VALUE pair (a tuple's commas do not)
_PAIR_COMMA = re.compile(r",(?=\s*[A-Za-z_][A-Za-z0-9_]*\s*=)")
#: what a VALUE may be, for messages
SYNTAX = "a positive integer or a tuple of 1 to 8 of them, as (4096,), 4096, (5,7) or 5,7"


def _positive(v: Any) -> bool:
    return type(v) is int and 0 < v <= MAX_SIZE


def is_size(v: Any) -> bool:
    """Whether ``v`` is a size: a positive ``int`` at most :data:`MAX_SIZE`, or a ``tuple`` of
    1 to :data:`MAX_DIMS` of them (a list, a bool or an empty tuple is not)."""
    return _positive(v) or (type(v) is tuple and 0 < len(v) <= MAX_DIMS and all(_positive(x) for x in v))


def same_kind(a: Any, b: Any) -> bool:
    """Whether ``a`` may replace ``b``: both ints, or both tuples of the same length."""
    return (type(a) is int and type(b) is int) or (type(a) is tuple and type(b) is tuple and len(a) == len(b))


def text(v: Any) -> str:
    """``v`` as the command line writes it: ``8``, ``(4096,)``, ``(5, 7)``."""
    return repr(v)


def _kind(v: Any) -> str:
    if type(v) is tuple:
        return f"a tuple of {len(v)} integer{'s' if len(v) != 1 else ''}"
    return "an integer" if type(v) is int else f"a {type(v).__name__}"


def value_problem(name: str, v: Any, own: Any) -> Optional[str]:
    """Why ``v`` cannot be the value of the task's size global ``name``, whose own value is
    ``own`` (a :func:`is_size` value): it is not a size, or not of the kind of ``own``
    (:func:`same_kind`); None where it can. The one copy of this rule: the run refuses such a
    value before it starts, the child refuses it in ``apply_overrides``, the verifier refuses a
    record that holds one."""
    if not is_size(v):
        return f"sets {name} to {text(v)}, which is not {SYNTAX}"
    if not same_kind(v, own):
        return f"sets {name} to {text(v)}, {_kind(v)}, where the task's {name} is {text(own)}, {_kind(own)}"
    return None


def canonical(v: Any) -> Any:
    """A value as the model holds it: a JSON array (a list) as a tuple, anything else as it is
    (whether it is a size is :func:`value_problem`'s to say)."""
    return tuple(v) if isinstance(v, (list, tuple)) else v


def canonical_map(m: Optional[Mapping[str, Any]]) -> dict:
    """``{name: canonical(value)}`` of a sizes mapping (None: empty)."""
    return {k: canonical(v) for k, v in (m or {}).items()}


def to_json(m: Mapping[str, Any]) -> dict:
    """A sizes mapping for a JSON document: each tuple as a list of its integers."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in m.items()}


def parse_value(s: str) -> SizeValue:
    """The VALUE of ``NAME=VALUE`` (module docstring) as an int or a tuple of ints. Raises
    ValueError with the reason, in a few words (malformed, a zero or negative entry, too large,
    too many entries)."""
    s = s.strip()
    paren = s.startswith("(") and s.endswith(")")
    inner = s[1:-1].strip() if paren else s
    if paren and inner and "," not in inner:
        raise ValueError(f"({inner}) is not a tuple (a one-entry tuple is written ({inner},))")
    parts = inner.split(",")
    if len(parts) > 1 and parts[-1].strip() == "":
        parts.pop()  # one trailing comma: (4096,) or 4096,
    if not all(_INT.fullmatch(p.strip()) for p in parts):
        raise ValueError(f"{s or 'an empty VALUE'} is not {SYNTAX}")
    nums = tuple(int(p) for p in parts)
    if any(n <= 0 for n in nums):
        raise ValueError("a size of zero or less (every entry is a positive integer)")
    if any(n > MAX_SIZE for n in nums):
        raise ValueError(f"a size over {MAX_SIZE}")
    if len(nums) > MAX_DIMS:
        raise ValueError(f"a tuple of {len(nums)} entries, more than {MAX_DIMS}")
    return nums if "," in inner else nums[0]


def parse_pair(item: str) -> Tuple[str, SizeValue]:
    """``NAME=VALUE`` as ``(name, value)`` (:func:`parse_value`). Raises ValueError with the
    reason."""
    k, sep, v = item.partition("=")
    if not sep or not _NAME.fullmatch(k.strip()):
        raise ValueError("no NAME= (a Python name and =)")
    return k.strip(), parse_value(v)


def split_pairs(s: str) -> list[str]:
    """An extra shape's ``NAME=VALUE[,NAME=VALUE...]`` split into its pairs: at the commas
    followed by a NAME and ``=``, never at a tuple's (``kernel_size=5,7,batch_size=2``)."""
    return _PAIR_COMMA.split(s)


__all__ = ["MAX_SIZE", "MAX_DIMS", "SizeValue", "SYNTAX", "is_size", "same_kind", "text", "value_problem",
           "canonical", "canonical_map", "to_json", "parse_value", "parse_pair", "split_pairs"]
