"""What a bundle says about itself, in one typed record: the facts its RO-Crate metadata file
(:mod:`kbrepro.bundle.crate`) and its signed in-toto statements (:mod:`kbrepro.bundle.attest`)
are written from.

:func:`bundle_facts` is a function of the bag's payload alone (``bundle.json``, the result
documents and the payload files' bytes), so the packer and the verifier derive the same
record: the packer writes the crate and the statements from it, the verifier derives it again
from the documents it has checked and compares (the trust rule). Nothing here reads the
machine it runs on: no clock, no environment, no path.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Mapping
from urllib.parse import quote

from kbrepro.bundle import kinds

#: the RO-Crate metadata file, a payload file of bundle format 4 (candidate format 3): the
#: payload folder ``data/`` is the RO-Crate root (RO-Crate 1.1, "Adding RO-Crate to BagIt")
CRATE_FILE = "ro-crate-metadata.json"
#: the date an undated run is published under: the epoch the archive's member times use
UNDATED = "1970-01-01T00:00:00Z"

_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_ID_CHARS = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True)
class FileRef:
    """One payload file: ``path`` relative to ``data/``, its ``sha256`` and ``size_bytes``,
    its ``role`` in the bundle (see :func:`role_of`) and its media type."""

    path: str
    sha256: str
    size_bytes: int
    role: str
    media_type: str


@dataclass(frozen=True)
class Software:
    """A piece of software the run used, as recorded in ``environment.json``: ``key`` (a
    stable identifier), ``name``, ``version`` and its package URL (purl)."""

    key: str
    name: str
    version: str
    purl: str


@dataclass(frozen=True)
class Gpu:
    """The GPU the run measured on, as recorded in ``environment.json``."""

    name: str
    compute_capability: str | None
    sm_count: int | None
    memory_bytes: int | None


@dataclass(frozen=True)
class Candidate:
    """A KernelBench candidate of a candidate bundle: its name, file and task (pin paths)."""

    name: str
    file: str
    task: str


@dataclass(frozen=True)
class BundleFacts:
    """The facts of one bundle. ``kind``: ``study`` (``kbrepro-bundle``) or ``candidates``
    (``kbrepro-candidate-bundle``); ``study``, ``profile`` and ``title``: the study (for
    candidates: ``kernelbench-candidates`` and a title naming them); ``source``: measured or
    imported; ``started_utc``/``finished_utc``: the run's own recorded times (or None);
    ``files``: every payload file but the RO-Crate file, sorted by path; ``software``: torch,
    CuPy, NumPy, Python, NVRTC, the CUDA runtime and the driver, where recorded;
    ``options``: the options of the run and of the packer that shaped the bundle."""

    kind: str
    format: str
    format_version: int
    name: str
    study: str
    profile: str
    title: str
    source: str
    started_utc: str | None
    finished_utc: str | None
    kernelbench_repository: str | None
    kernelbench_commit: str | None
    product_version: str | None
    product_commit: str | None
    gpu: Gpu | None
    software: tuple[Software, ...]
    files: tuple[FileRef, ...]
    claims_file: str
    options: tuple[tuple[str, object], ...]
    candidates: tuple[Candidate, ...] = ()

    def by_role(self, *roles: str) -> list[FileRef]:
        return [f for f in self.files if f.role in roles]

    @property
    def date_published(self) -> str:
        """The run's finish time, else its start, else :data:`UNDATED`."""
        return self.finished_utc or self.started_utc or UNDATED

    @property
    def product_git_commit(self) -> str | None:
        """The product's commit if it is a clean 40-hex git commit (not ``...-dirty``)."""
        return self.product_commit if self.product_commit and _HEX40.match(self.product_commit) else None


_MEDIA = {".json": "application/json", ".md": "text/markdown", ".yaml": "application/yaml", ".yml": "application/yaml",
          ".py": "text/x-python", ".cu": "text/x-cuda", ".cuh": "text/x-cuda", ".cpp": "text/x-c++src",
          ".h": "text/x-chdr", ".log": "text/plain", ".txt": "text/plain", ".ptx": "text/plain", ".sass": "text/plain",
          ".ninja": "text/plain", ".ttir": "text/plain", ".ttgir": "text/plain", ".llir": "text/plain",
          ".source": "text/plain"}


def media_type(path: str) -> str:
    """The media type of a payload file by its suffix (``application/octet-stream`` for
    binaries: cubins, shared objects); KernelBench's ``LICENSE`` is text."""
    name = path.rsplit("/", 1)[-1]
    if name == "LICENSE":
        return "text/plain"
    dot = name.rfind(".")
    return _MEDIA.get(name[dot:] if dot > 0 else "", "application/octet-stream")


def role_of(kind: str, path: str, kernel_sources: set[str]) -> str:
    """The role of a payload file (``path`` under ``data/``) in a bundle of ``kind``:
    ``metadata``, ``report``, ``claims``, ``figure_data``, ``result``, ``original`` (the post's
    own files of an imported study), ``binary``, ``log``, ``kernel_source`` (a study's CUDA
    sources, a candidate's file), ``study_file``, ``kernelbench_lock``, ``kernelbench_file``,
    ``claims_spec``, ``build_provenance`` (a candidate's build files)."""
    if path == "bundle.json":
        return "metadata"
    if path == "REPORT.md":
        return "report"
    if path == "claims.json":
        return "claims"
    if path.startswith("plots/"):
        return "figure_data"
    if path.startswith("results/originals/"):
        return "original"
    if path.startswith("results/") or path == "environment.json":
        return "result"
    if path.startswith("binaries/"):
        return "binary"
    if path.startswith("logs/"):
        return "log"
    if path.startswith("inputs/kernelbench/"):
        return "kernelbench_lock" if path.endswith(".lock.json") else "kernelbench_file"
    if path.startswith("inputs/claims"):
        return "claims_spec"
    if path.startswith("inputs/study/"):
        return "kernel_source" if path[len("inputs/study/"):] in kernel_sources else "study_file"
    if path.startswith("inputs/candidates/"):
        return "kernel_source"
    if path.startswith("provenance/"):
        return "build_provenance"
    return "other"


def _d(v) -> dict:
    return v if isinstance(v, dict) else {}


def _field(env: Mapping, key: str):
    return _d(_d(_d(env).get("fields")).get(key)).get("value")


def _text(v) -> str | None:
    return None if v is None or isinstance(v, (dict, list)) else str(v)


def _utc(v) -> str | None:
    return v if isinstance(v, str) and _UTC.match(v) else None


def ident(text: str) -> str:
    """``text`` as a fragment of a JSON-LD ``@id`` (``[A-Za-z0-9._-]``, others as ``_``)."""
    return _ID_CHARS.sub("_", text)[:80]


def purl(kind: str, name: str, version: str, namespace: str | None = None) -> str:
    """A package URL (github.com/package-url/purl-spec): ``pkg:<kind>/[<namespace>/]<name>@<version>``,
    the version percent-encoded (``2.11.0+cu130`` -> ``2.11.0%2Bcu130``)."""
    ns = f"{quote(namespace, safe='')}/" if namespace else ""
    return f"pkg:{kind}/{ns}{quote(name.lower() if kind == 'pypi' else name, safe='')}@{quote(version, safe='')}"


def software_of(env: Mapping) -> tuple[Software, ...]:
    """torch, every CuPy distribution, NumPy, Python, NVRTC, the CUDA runtime and the driver
    as ``environment.json`` records them (unrecorded ones are left out)."""
    out: list[Software] = []

    def add(key, name, version, kind, namespace=None):
        v = _text(version)
        if v:
            out.append(Software(key, name, v, purl(kind, name, v, namespace)))

    add("torch", "torch", _field(env, "torch_version"), "pypi")
    cupys = _field(env, "cupy_distributions")
    for c in sorted((c for c in cupys if isinstance(c, dict)) if isinstance(cupys, list) else [],
                    key=lambda c: str(c.get("name"))):
        if isinstance(c.get("name"), str):
            add(ident(c["name"]), c["name"], c.get("version"), "pypi")
    add("numpy", "numpy", _field(env, "numpy_version"), "pypi")
    add("python", "python", _field(env, "python_version"), "generic")
    add("nvrtc", "nvrtc", _field(env, "nvrtc_version"), "generic", "nvidia")
    add("cuda-runtime", "cuda-runtime", _field(env, "cuda_runtime_version"), "generic", "nvidia")
    add("nvidia-driver", "driver", _field(env, "driver_version"), "generic", "nvidia")
    return tuple(out)


def gpu_of(env: Mapping) -> Gpu | None:
    name = _text(_field(env, "gpu_name"))
    if not name:
        return None
    sms, mem = _field(env, "sm_count"), _field(env, "memory_bytes")
    return Gpu(name, _text(_field(env, "compute_capability")), sms if isinstance(sms, int) else None,
               mem if isinstance(mem, int) else None)


def _files(kind: str, files: Mapping[str, bytes], kernel_sources: set[str]) -> tuple[FileRef, ...]:
    return tuple(FileRef(p, hashlib.sha256(files[p]).hexdigest(), len(files[p]), role_of(kind, p, kernel_sources),
                         media_type(p))
                 for p in sorted(files) if p != CRATE_FILE)


def bundle_facts(meta: Mapping, documents: Mapping[str, Mapping], files: Mapping[str, bytes]) -> BundleFacts:
    """The facts of a bundle from its ``bundle.json`` (``meta``), its result documents by name
    (``run``, ``environment``, ... for a study; ``candidates``, ``environment`` for candidates)
    and its payload ``files`` (path under ``data/`` -> bytes; the RO-Crate file, if there, is
    left out). Never raises on odd values: a field that is not what the schema says becomes
    None (the verifier reports such documents in its own tiers)."""
    meta = _d(meta)
    env = _d(documents.get("environment"))
    if meta.get("format") == kinds.FORMAT:
        doc = _d(documents.get("candidates"))
        cands = tuple(Candidate(str(c.get("name")), str(c.get("file")), str(c.get("task")))
                      for c in meta.get("candidates") or [] if isinstance(c, dict))
        cfg = _d((doc.get("candidates") or [{}])[0].get("config")) if isinstance(doc.get("candidates"), list) \
            and doc.get("candidates") and isinstance(doc["candidates"][0], dict) else {}
        title = "KernelBench candidates " + ", ".join(f"{c.name} ({c.task})" for c in cands)
        options = (("claims", _d(meta.get("claims")).get("file")), ("extra_claims", _d(meta.get("claims")).get("extra")),
                   ("extra_shapes", cfg.get("extra_shapes")), ("name", meta.get("name")), ("sizes", cfg.get("sizes")))
        kb = _d(doc.get("kernelbench"))
        return BundleFacts(
            kind="candidates", format=str(meta.get("format")), format_version=meta.get("format_version"),
            name=str(meta.get("name")), study=kinds.KIND, profile=str(meta.get("profile")), title=title,
            source=str(meta.get("source")), started_utc=_utc(doc.get("started_utc")),
            finished_utc=_utc(doc.get("finished_utc")), kernelbench_repository=_text(kb.get("repository")),
            kernelbench_commit=_text(kb.get("commit")), product_version=_text(_d(meta.get("product")).get("version")),
            product_commit=_text(_d(meta.get("product")).get("commit")), gpu=gpu_of(env), software=software_of(env),
            files=_files("candidates", files, set()), claims_file=str(_d(meta.get("claims")).get("file")),
            options=options, candidates=cands)
    run = _d(documents.get("run"))
    st = _d(meta.get("study"))
    resolved = _d(_d(run.get("study")).get("resolved"))
    sources = {s for s in resolved.get("sources") or [] if isinstance(s, str)}
    kb = _d(run.get("kernelbench"))
    options = (("claims", _d(meta.get("claims")).get("file")), ("name", meta.get("name")),
               ("results", meta.get("source")))
    return BundleFacts(
        kind="study", format=str(meta.get("format")), format_version=meta.get("format_version"),
        name=str(meta.get("name")), study=str(st.get("name")), profile=str(st.get("profile")),
        title=str(resolved.get("title") or st.get("name")), source=str(meta.get("source")),
        started_utc=_utc(run.get("started_utc")), finished_utc=_utc(run.get("finished_utc")),
        kernelbench_repository=_text(kb.get("repository")),
        kernelbench_commit=_text(kb.get("commit") or _d(meta.get("kernelbench")).get("commit")),
        product_version=_text(_d(meta.get("product")).get("version")),
        product_commit=_text(_d(meta.get("product")).get("commit")), gpu=gpu_of(env), software=software_of(env),
        files=_files("study", files, sources), claims_file=str(_d(meta.get("claims")).get("file")), options=options)
