"""Rules over a candidate's provenance records: every binary a record describes is a bundled
provenance file with its hash, and a kernel a passing ``custom_kernel_ran`` names is defined in a
bundled binary's SASS and symbols. :mod:`kbrepro.model.candidate_rules` calls them.
"""
from __future__ import annotations

import re
from typing import Iterable, Iterator, Mapping

from kbrepro.model import problems as P
from kbrepro.model.candidates import CandidateRecord
from kbrepro.model.problems import Problem


def _p(code: str, path: str, msg: str, expected=None, found=None) -> Problem:
    return Problem(code, path, msg, expected, found)


def provenance_file(rec: CandidateRecord, path: str):
    return next((f for f in rec.provenance.files if f.path == path), None)


def binary_problems(rec: CandidateRecord, at: str, files: Mapping[str, bytes]) -> Iterator[Problem]:
    """Every binary the record describes is a copied provenance file with that hash (as
    built), and its SASS listing lies in the candidate's own sass/ folder."""
    for j, b in enumerate(rec.provenance.binaries):
        f = provenance_file(rec, b.file)
        if f is None or not f.copied or b.sha256 not in (f.sha256, f.built_sha256):
            yield _p(P.CONTRADICTS, f"{at}.provenance.binaries[{j}].file", "is not a bundled provenance file with "
                     "this hash: a binary nobody can inspect", None, b.file)
        if b.sass_file is not None and not b.sass_file.startswith(f"provenance/{rec.name}/sass/"):
            yield _p(P.CONTRADICTS, f"{at}.provenance.binaries[{j}].sass_file", f"lies outside provenance/{rec.name}/sass/")


def binaries_with_sass(rec: CandidateRecord, files: Mapping[str, bytes]) -> list[tuple[frozenset, bytes]]:
    """``(functions its SASS listing defines, the binary's bytes)`` per bundled binary."""
    out = []
    for b in rec.provenance.binaries:
        f = provenance_file(rec, b.file)
        if b.sass_file is None or f is None or f.bundle_path is None:
            continue
        sass = files.get(b.sass_file, b"").decode("utf-8", "replace")
        out.append((sass_functions([sass]), files.get(f.bundle_path, b"")))
    return out


def in_binary(function: str, data: bytes) -> bool:
    """The kernel's symbol name is in the binary's bytes (its ELF string table)."""
    return function.encode("ascii", "replace") in data


def kernel_base_name(profiled: str) -> str:
    """The identifier a profiler's (demangled) kernel name defines: ``void ns::k<4>(float*)``
    gives ``k``."""
    s = profiled.split("(", 1)[0].strip()
    depth, out = 0, []
    for ch in s:  # drop template arguments
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    s = "".join(out).split()[-1] if "".join(out).split() else ""
    return s.rsplit("::", 1)[-1]


def defines(functions: Iterable[str], profiled: str) -> bool:
    """Whether a binary whose SASS lists ``functions`` (mangled or plain names) defines the
    kernel the profiler named ``profiled``: the plain name, or its Itanium-mangled source name
    (``<length><name>``) inside a mangled one."""
    base = kernel_base_name(profiled)
    if not base:
        return False
    mangled = f"{len(base)}{base}"
    return any(f == base or (f.startswith("_Z") and mangled in f) for f in functions)


_SASS_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)\s*$", re.MULTILINE)


def sass_functions(sass_texts: Iterable[str]) -> frozenset[str]:
    """The kernel names cuobjdump's SASS listings define (``Function : name`` lines)."""
    out: set[str] = set()
    for t in sass_texts:
        out.update(_SASS_FUNCTION.findall(t))
    return frozenset(out)


__all__ = ["binary_problems", "binaries_with_sass", "in_binary", "kernel_base_name", "defines", "sass_functions"]
