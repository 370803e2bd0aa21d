"""Rules over a candidate's provenance records: every binary a record describes is a bundled
provenance file with its hash, and a kernel a passing ``custom_kernel_ran`` names is defined in a
bundled binary's SASS and symbols. :mod:`kbrepro.model.candidate_rules` calls them.
"""
from __future__ import annotations

import hashlib
import re
from typing import Iterable, Iterator, Mapping

#: the longest path component a bundle holds (a tar header's name field; bundle/pack.py)
MAX_COMPONENT = 100


def fit_component(part: str, limit: int = MAX_COMPONENT) -> str:
    """``part`` if it is at most ``limit`` characters, else its first ``limit - 17`` characters,
    ``-`` and the first 16 hex digits of its SHA-256: the same short name wherever it is derived
    (Inductor names its Triton binaries after every fused op: ``triton/<52-character
    hash>/triton_poi_fused_max_pool2d_with_indices_unsqueeze_0.cubin``'s SASS listing took a name
    of 140 characters, which no bundle can hold)."""
    if len(part) <= limit:
        return part
    return f"{part[:limit - 17]}-{hashlib.sha256(part.encode()).hexdigest()[:16]}"

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


#: the variables of a ``build.ninja`` torch writes for ``load_inline`` that make its command lines
NINJA_KEYS = ("cxx", "nvcc", "cflags", "post_cflags", "cuda_cflags", "cuda_post_cflags", "cuda_dlink_post_cflags",
              "ldflags")
#: the most build records one candidate holds
MAX_BUILDS = 20


def ninja_commands(text: str) -> dict:
    """The compilers, flags and rule command lines of a ``build.ninja`` torch wrote: each
    ``<key> = <value>`` line of :data:`NINJA_KEYS` (last one wins) and every rule's
    ``command = ...`` line in order (``commands``)."""
    out: dict = {}
    rules = []
    for line in text.splitlines():
        k, sep, v = line.partition(" = ")
        if sep and k.strip() in NINJA_KEYS:
            out[k.strip()] = v.strip()
        elif line.strip().startswith("command = "):
            rules.append(line.strip()[len("command = "):])
    out["commands"] = rules
    return out


def _flags(value) -> object:
    """A command line with every word that names a path (holds ``/`` or ``<``) masked: packing
    scrubs the machine's paths from the bundled build file, so the flags are compared, and the
    folders they name are not (bundles packed before the records were derived from the
    scrubbed file hold the unscrubbed paths)."""
    if isinstance(value, (list, tuple)):
        return [_flags(v) for v in value]
    if not isinstance(value, str):
        return value
    return " ".join("<path>" if ("/" in w or "<" in w) else w for w in value.split())


#: the packer copies a file the candidate built when it is at most MAX_PROVENANCE_FILE bytes
#: and the files copied before it (in the record's order) leave room under MAX_PROVENANCE_TOTAL;
#: any other is listed with its hash (harness/candidate.py collect_provenance)
MAX_PROVENANCE_FILE = 32 * 1024 * 1024
MAX_PROVENANCE_TOTAL = 96 * 1024 * 1024
#: the source files of a load_inline build (with its build.ninja): never left out
BUILD_SOURCES = (".cu", ".cuh", ".cpp", ".cc", ".cxx", ".c", ".h", ".hpp")
#: how far scrubbing may have moved the copied sizes the record holds from those the rule read
SCRUB_MARGIN = 1024 * 1024


def copy_problems(rec: CandidateRecord, at: str) -> Iterator[Problem]:
    """A file the candidate built is left out only where the packer's rule leaves it out, by
    the recorded sizes in the record's order (:data:`MAX_PROVENANCE_FILE`,
    :data:`MAX_PROVENANCE_TOTAL`; within :data:`SCRUB_MARGIN` of the total, as packing scrubs
    paths from the copied files after the rule ran): a build.ninja or kernel source left out
    otherwise fails, its flags and code being the run's word alone."""
    total = 0
    for j, f in enumerate(rec.provenance.files):
        name = f.path.rsplit("/", 1)[-1]
        if not f.copied and f.path.startswith("ext/") and (name == "build.ninja" or name.endswith(BUILD_SOURCES)):
            # the flags in effect and the code the checks speak of: a size recorded beside them,
            # which nothing in the bundle can confirm, never excuses them
            yield _p(P.INCOMPLETE, f"{at}.provenance.files[{j}].copied", f"{f.path}: a load_inline build's "
                     "build.ninja and sources are what its flags and code are derived from; it is not in the bundle",
                     True, False)
            return
        if f.copied:
            total += f.bytes
        elif f.bytes <= MAX_PROVENANCE_FILE and total + f.bytes <= MAX_PROVENANCE_TOTAL - SCRUB_MARGIN:
            yield _p(P.DERIVED, f"{at}.provenance.files[{j}].copied", f"{f.path}: not copied, yet the packer copies a "
                     f"file of {f.bytes} bytes after {total} copied bytes (at most {MAX_PROVENANCE_FILE} a file, "
                     f"{MAX_PROVENANCE_TOTAL} in all)", True, False)
            return


def build_problems(rec: CandidateRecord, at: str, files: Mapping[str, bytes]) -> Iterator[Problem]:
    """The compiler flags in effect are derived from the bundled ``build.ninja`` files: one
    build record per copied ``build.ninja`` (in file order, at most :data:`MAX_BUILDS`), each
    equal to :func:`ninja_commands` of the bundled bytes (paths masked, :func:`_flags`). A
    record of a file that is not bundled fails: its flags are the run's word alone."""
    ninjas = [f for f in rec.provenance.files if f.path.rsplit("/", 1)[-1] == "build.ninja" and f.copied
              and f.bundle_path is not None][:MAX_BUILDS]
    paths = [b.path for b in rec.provenance.builds]
    if paths != [f.path for f in ninjas]:
        yield _p(P.DERIVED, f"{at}.provenance.builds", "are not one record per bundled build.ninja",
                 [f.path for f in ninjas], paths)
        return
    for j, (b, f) in enumerate(zip(rec.provenance.builds, ninjas)):
        data = files.get(f.bundle_path)
        if data is None:
            yield _p(P.INCOMPLETE, f"{at}.provenance.builds[{j}]", "its build.ninja is not in the bundle", f.bundle_path)
            continue
        derived = ninja_commands(data.decode("utf-8", "replace"))
        for k in ("commands",) + NINJA_KEYS:
            if _flags(getattr(b, k)) != _flags(derived.get(k)):
                yield _p(P.DERIVED, f"{at}.provenance.builds[{j}].{k}", "is not what the bundled build.ninja says",
                         derived.get(k), getattr(b, k))


def sass_functions(sass_texts: Iterable[str]) -> frozenset[str]:
    """The kernel names cuobjdump's SASS listings define (``Function : name`` lines)."""
    out: set[str] = set()
    for t in sass_texts:
        out.update(_SASS_FUNCTION.findall(t))
    return frozenset(out)


__all__ = ["MAX_PROVENANCE_FILE", "MAX_PROVENANCE_TOTAL", "copy_problems", "MAX_COMPONENT", "fit_component", "NINJA_KEYS", "MAX_BUILDS", "ninja_commands", "build_problems", "binary_problems", "binaries_with_sass", "in_binary", "kernel_base_name", "defines", "sass_functions"]
