"""What the cross-document checks share: where each document lies in the bag, the documents a
run must carry, the FTZ rule read from compile options (:func:`expected_ftz`, one copy for the
packer's records and the verifier), and small readers of untrusted values.
"""
from __future__ import annotations

import json
import re
import struct
from typing import Any, Iterator, Mapping

from kbrepro.bundle import documents
from kbrepro.bundle import evidence as pd


_d, _l = pd.as_dict, pd.as_list


class _DocFiles(dict):
    """Bag path of a document by name, ours and any study's, from the one registry
    (:func:`kbrepro.bundle.documents.bag_path`); ``.get`` gives ``default`` for a name no
    document may have."""

    def __missing__(self, name: str) -> str:
        return documents.bag_path(name)

    def get(self, name, default=None):  # noqa: D401 (dict API)
        try:
            return self[name]
        except (KeyError, TypeError):
            return default


DOC_FILE = _DocFiles()

#: documents a run of any study writes whatever its profile and source (harness/run.py; the
#: registry's required ones); the witness (a study with one), selftest (``extras.self_test``)
#: and the study's own documents are checked against the study
MEASURED_REQUIRED = IMPORTED_REQUIRED = documents.REQUIRED


ZERO_BITS = ("0x00000000", "0x80000000")


CUT = pd.CUT


ELF_MAGIC = b"\x7fELF"


EM_CUDA = 190


PTX_RELEASE = re.compile(rb"^//\s*Cuda compilation tools, release (\d+)\.(\d+)", re.MULTILINE)


PTX_TARGET = re.compile(rb"^\s*\.target\s+(sm_\d+[a-z]?)", re.MULTILINE)


SASS_TARGET = re.compile(r"^\s*code for (sm_\d+[a-z]?)", re.MULTILINE)


ARCH = re.compile(r"^(?:sm|compute)_(\d+)[a-z]?$")


def f32_bits(x: float) -> str:
    """IEEE-754 binary32 bits of ``x`` (rounded to float32) as ``0x%08x``."""
    try:
        return "0x%08x" % struct.unpack("<I", struct.pack("<f", x))[0]
    except (OverflowError, struct.error):
        return "overflow"


def is_measured(meta: Mapping) -> bool:
    return meta.get("source") != "imported"


def is_imported(documents: Mapping[str, dict], meta: Mapping | None = None) -> bool:
    if meta is not None and meta.get("source") == "imported":
        return True
    return _d(documents.get("run")).get("status") == "imported"


def variants(documents: Mapping[str, dict]) -> list[dict]:
    return [v for v in _l(_d(documents.get("compile")).get("variants")) if isinstance(v, dict)]


def walk(node: Any, path: str = "$") -> Iterator[tuple[str, dict]]:
    if isinstance(node, dict):
        yield path, node
        for k, v in node.items():
            if isinstance(v, (dict, list)):
                yield from walk(v, f"{path}.{k}" if str(k).isidentifier() else f'{path}["{k}"]')
    elif isinstance(node, list):
        for i, v in enumerate(node):
            if isinstance(v, (dict, list)):
                yield from walk(v, f"{path}[{i}]")


def checks_of(node: Any) -> Iterator[tuple[str, dict]]:
    for path, d in walk(node):
        if "element_count" in d and "bit_identical_count" in d and "official" in d:
            yield path, d


def ftz_from_options(options: list[str], default: bool) -> bool:
    """The verifier's rule for the FTZ mode an NVRTC option list gives: the last ``--ftz=`` /
    ``-ftz=`` option decides; ``--use_fast_math`` / ``-use_fast_math`` implies ftz=true
    unless a later explicit ``--ftz=false`` overrides it (NVRTC reads options in order);
    ``default`` where nothing says."""
    mode = default
    for o in options:
        o = str(o)
        if o in ("--use_fast_math", "-use_fast_math"):
            mode = True
        m = re.match(r"^--?ftz=(true|false|1|0)$", o)
        if m:
            mode = m.group(1) in ("true", "1")
    return mode


def expected_ftz(study) -> dict[str, bool]:
    """The FTZ mode each compile variant of the verifier's own ``study`` (a
    :class:`kbrepro.harness.study.StudyConfig`) must have: ``{variant name: ftz}``.

    Derived from the variant's route and options by the verifier's rule, never from any
    ``expected_ftz`` field: the ``cupy_rawmodule`` route ends up with ``-ftz=true``
    whatever it is given (CuPy's ``RawModule(code=...)`` appends it after the caller's
    options, see kernels/compile.py), so it is always True; the ``nvrtc`` route: the last
    ``--ftz=``/``-ftz=`` option, ``--use_fast_math`` implying true, default false.
    """
    out = {}
    for v in study.variants:
        opts = [str(o) for o in v.options]
        out[v.name] = True if v.route == "cupy_rawmodule" else ftz_from_options(opts, False)
    return out


def check_passes(chk: Any, pred: str) -> bool | None:
    r = _d(chk).get(pred)
    if isinstance(r, dict) and isinstance(r.get("pass"), bool):
        return r["pass"]
    return None


def as_int(x: Any) -> Any:
    try:
        return int(x)
    except (TypeError, ValueError):
        return x


def same(a: Any, b: Any) -> bool:
    """Whether two JSON values are the same JSON: as their canonical text, so that ``true`` is
    not ``1`` and ``371.0`` is not ``371`` (Python's ``==`` says both are; the engine writes
    one of them, and a study's YAML the other only where it wrote so itself)."""
    return json.dumps(norm(a), sort_keys=True) == json.dumps(norm(b), sort_keys=True)


def norm(x: Any) -> Any:
    """JSON-shaped copy (tuples as lists) for comparisons."""
    if isinstance(x, (list, tuple)):
        return [norm(v) for v in x]
    if isinstance(x, Mapping):  # a parsed document's dict, or a record's MappingProxyType
        return {str(k): norm(v) for k, v in x.items()}
    return x
