"""The bundle's RO-Crate 1.1 metadata file (``data/ro-crate-metadata.json``), so that a research
repository can index a bundle: the bundle, its files, the study, the software and the GPU.

Placement (RO-Crate 1.1, appendix "Implementation notes", "Adding RO-Crate to BagIt"): the
bag's payload folder ``data/`` is the RO-Crate root, so the metadata file is a payload file,
listed in ``manifest-sha256.txt`` and covered by the bundle digest (and, in a signed bundle,
a subject of the statements). It is part of every bundle from study format 4 and candidate
format 3 on; older bundles carry none.

What it holds (every value derived from the payload by :func:`kbrepro.bundle.facts.bundle_facts`):

- the metadata descriptor (``conformsTo`` ``https://w3id.org/ro/crate/1.1``) and the root
  data entity ``./``: a ``Dataset`` named after the bundle, its description, ``datePublished``
  (the run's recorded finish, else start, else 1970-01-01), ``hasPart`` every payload file;
  ``about`` the study, ``mentions`` the run;
- one ``File`` per payload file (``contentSize`` in bytes, ``encodingFormat``, a description
  of its role);
- ``#study`` (``CreativeWork``: the study's name, title and profile; for candidates, the
  candidates and their tasks);
- ``#run`` (``CreateAction``, RO-Crate 1.1 "Provenance of entities"): start and end times,
  ``instrument`` the software and the GPU, ``object`` the inputs, ``result`` the documents;
- ``#software-<name>`` (``SoftwareApplication``, ``softwareVersion``, a package URL as
  ``identifier``): kbrepro, torch, CuPy, NumPy, Python, NVRTC, the CUDA runtime, the driver;
- ``#gpu`` (``IndividualProduct``, RO-Crate 1.1 "Equipment used to create files").

- ``#license`` (the licence the RO-Crate 1.1 root MUST name): a bundle grants none of its own,
  so the entity says which licence the bundled KernelBench files carry (their ``LICENSE`` is in
  the bag) and that the rest is its author's to licence.

Not asserted: an author or publisher (a bundle names no person; the RO-Crate 1.1 profile only
RECOMMENDS them). The packer builds the crate with the ``rocrate`` library
(:func:`render`); the verifier never imports it: :func:`expected` writes the same graph with
this module's own code from the facts it derived again, and :func:`problems` compares the
bundle's file with it, entity by entity.
"""
from __future__ import annotations

import json
from typing import Mapping

from kbrepro.bundle.facts import CRATE_FILE, BundleFacts
from kbrepro.bundle.verify.core import safe_text
from kbrepro.errors import InvalidResultsError, UnreadableInputError
from kbrepro.harness import jsonio

CONTEXT = "https://w3id.org/ro/crate/1.1/context"
PROFILE = "https://w3id.org/ro/crate/1.1"
VERSION = "1.1"
#: the largest RO-Crate file the verifier parses
MAX_CRATE_BYTES = 8 * 1024 * 1024

_ROLE_TEXT = {
    "metadata": "bundle metadata (kbrepro/bundle)", "report": "the report for a forum post, rendered from the records",
    "claims": "the claims and their verdicts", "figure_data": "the numbers of a figure",
    "result": "a result document", "original": "an original result file of the post",
    "binary": "a compiled binary or its listing", "log": "the run log (scrubbed)",
    "kernel_source": "a kernel source", "study_file": "a file of the study definition",
    "kernelbench_lock": "the study's KernelBench lock", "kernelbench_file": "a pinned KernelBench file",
    "claims_spec": "the claims specification", "build_provenance": "a build file of a candidate", "other": "a file",
}
_INPUT_ROLES = ("kernel_source", "study_file", "kernelbench_lock", "kernelbench_file", "claims_spec", "original")
_RESULT_ROLES = ("result", "binary", "log", "claims", "figure_data", "report", "build_provenance")


def _ref(i: str) -> dict:
    return {"@id": i}


def _software_entities(f: BundleFacts) -> list[dict]:
    out = [{"@id": "#software-kbrepro", "@type": "SoftwareApplication", "name": "kbrepro",
            "softwareVersion": f.product_version or "unknown",
            "identifier": f"pkg:generic/kbrepro@{f.product_version or 'unknown'}",
            "description": f"the product that ran and packed the study (commit {f.product_commit or 'unknown'})"}]
    for s in f.software:
        out.append({"@id": f"#software-{s.key}", "@type": "SoftwareApplication", "name": s.name,
                    "softwareVersion": s.version, "identifier": s.purl})
    return out


def _gpu_entity(f: BundleFacts) -> dict | None:
    g = f.gpu
    if g is None:
        return None
    parts = [f"compute capability {g.compute_capability}" if g.compute_capability else None,
             f"{g.sm_count} SMs" if g.sm_count is not None else None,
             f"{g.memory_bytes} bytes of memory" if g.memory_bytes is not None else None]
    return {"@id": "#gpu", "@type": "IndividualProduct", "name": g.name,
            "description": "the GPU the run measured on: " + (", ".join(p for p in parts if p) or "no details recorded")}


def _study_entity(f: BundleFacts) -> dict:
    if f.kind == "candidates":
        text = f"{f.title}; profile {f.profile}"
    else:
        text = f"{f.title}; profile {f.profile}; results {f.source}"
    return {"@id": "#study", "@type": "CreativeWork", "name": f.study, "description": text}


def _run_entity(f: BundleFacts, instruments: list[str]) -> dict:
    run = {"@id": "#run", "@type": "CreateAction",
           "name": f"{'imported' if f.source == 'imported' else 'measured'} run of {f.study} ({f.profile})",
           "instrument": [_ref(i) for i in instruments],
           "object": [_ref(x.path) for x in f.by_role(*_INPUT_ROLES)],
           "result": [_ref(x.path) for x in f.by_role(*_RESULT_ROLES)],
           "actionStatus": _ref("http://schema.org/CompletedActionStatus")}
    if f.started_utc:
        run["startTime"] = f.started_utc
    if f.finished_utc:
        run["endTime"] = f.finished_utc
    return run


def _root_props(f: BundleFacts) -> dict:
    kind = "KernelBench candidates" if f.kind == "candidates" else f"study {f.study}"
    return {"name": f.name, "datePublished": f.date_published, "identifier": f.name,
            "description": f"kbrepro reproducibility bundle ({f.format} {f.format_version}) of {kind}, profile "
                           f"{f.profile}: {f.title}", "about": _ref("#study"), "mentions": _ref("#run"),
            "license": _ref("#license")}


LICENSE_ENTITY = {"@id": "#license", "@type": "CreativeWork", "name": "no licence granted by the bundle",
                  "description": "The bundle grants no licence of its own. The KernelBench files it carries "
                                 "(inputs/kernelbench/) are under KernelBench's licence, inputs/kernelbench/LICENSE; "
                                 "the results, kernels and other files are their author's to licence."}


def _file_props(x) -> dict:
    return {"contentSize": str(x.size_bytes), "encodingFormat": x.media_type, "description": _ROLE_TEXT[x.role]}


def _context_entities(f: BundleFacts) -> list[dict]:
    software = _software_entities(f)
    gpu = _gpu_entity(f)
    instruments = [e["@id"] for e in software] + (["#gpu"] if gpu else [])
    out = [_study_entity(f), _run_entity(f, sorted(instruments)), dict(LICENSE_ENTITY)] + software + \
        ([gpu] if gpu else [])
    return out


def _ordered(graph: list[dict]) -> list[dict]:
    """The metadata descriptor, the root data entity, then every other entity by ``@id``."""
    head = {CRATE_FILE: 0, "./": 1}
    return sorted(graph, key=lambda e: (head.get(e.get("@id"), 2), str(e.get("@id"))))


def expected(f: BundleFacts) -> dict:
    """The RO-Crate JSON-LD of a bundle, written with this module's own code (the verifier's
    reference; the packer checks :func:`render` against it)."""
    root = {"@id": "./", "@type": "Dataset", **_root_props(f), "hasPart": [_ref(x.path) for x in f.files]}
    descriptor = {"@id": CRATE_FILE, "@type": "CreativeWork", "conformsTo": _ref(PROFILE), "about": _ref("./")}
    files = [{"@id": x.path, "@type": "File", **_file_props(x)} for x in f.files]
    return {"@context": CONTEXT, "@graph": _ordered([descriptor, root, *files, *_context_entities(f)])}


def render(f: BundleFacts) -> bytes:
    """The RO-Crate metadata file of a bundle, made with the ``rocrate`` library (RO-Crate
    1.1, no preview, no dates but the run's own), in canonical JSON (sorted keys, two-space
    indent, ASCII) with the graph in :func:`_ordered` order. Raises InvalidResultsError if the
    library's crate differs from :func:`expected` (a ``rocrate`` release that writes another
    graph: the verifier would refuse the bundle)."""
    from rocrate.model.contextentity import ContextEntity
    from rocrate.rocrate import ROCrate

    crate = ROCrate(gen_preview=False, version=VERSION)
    for k, v in _root_props(f).items():
        crate.root_dataset[k] = v
    for x in f.files:
        crate.add_file(source=None, dest_path=x.path, properties=_file_props(x))
    for e in _context_entities(f):
        props = {k: v for k, v in e.items() if k != "@id"}
        crate.add(ContextEntity(crate, identifier=e["@id"], properties=props))
    doc = crate.metadata.generate()
    doc = json.loads(json.dumps(doc))
    doc["@graph"] = _ordered(doc.get("@graph") or [])
    want = expected(f)
    if doc != want:
        diff = _first_differences(doc, want)
        raise InvalidResultsError("internal error: the rocrate library wrote another RO-Crate than this product "
                                  f"expects ({'; '.join(diff[:3])})",
                                  "install a rocrate release this product supports (pyproject.toml), or report this")
    return jsonio.dumps(doc).encode("ascii")


def _show(v, n: int = 80) -> str:
    return safe_text(json.dumps(v, sort_keys=True) if not isinstance(v, str) else v, n)


def _first_differences(found: Mapping, want: Mapping, limit: int = 20) -> list[str]:
    """What differs between two RO-Crate documents, entity by entity (messages)."""
    out: list[str] = []
    if found.get("@context") != want.get("@context"):
        out.append(f"@context is {_show(found.get('@context'))}, not the RO-Crate 1.1 context {CONTEXT}")
    fg = found.get("@graph")
    if not isinstance(fg, list) or not all(isinstance(e, dict) for e in fg):
        return out + ["@graph is not a list of entities"]
    ids = [e.get("@id") for e in fg]
    if len(set(map(str, ids))) != len(ids):
        out.append("two entities share an @id")
    have = {str(e.get("@id")): e for e in fg}
    mine = {e["@id"]: e for e in want["@graph"]}
    for i in sorted(set(mine) - set(have)):
        out.append(f"entity {_show(i)} is missing")
    for i in sorted(set(have) - set(mine)):
        out.append(f"entity {_show(i)} describes nothing in the bundle")
    for i in sorted(set(mine) & set(have)):
        a, b = have[i], mine[i]
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                out.append(f"entity {_show(i)} property {_show(k, 40)}: expected {_show(b.get(k))}, "
                           f"found {_show(a.get(k)) if k in a else '(none)'}")
                if len(out) >= limit:
                    return out
    if not out and [e.get("@id") for e in fg] != [e["@id"] for e in want["@graph"]]:
        out.append("the entities are not in the packer's order (descriptor, root, then by @id)")
    return out[:limit]


def problems(raw: bytes | None, f: BundleFacts) -> list[str]:
    """What is wrong with a bundle's RO-Crate file ``raw`` (None: absent) against the facts
    the verifier derived (``f``): not strict canonical JSON, not the RO-Crate 1.1 context,
    entities missing, extra or with other values than the documents give. Returns messages."""
    if raw is None:
        return [f"missing: bundle format {f.format_version} carries an RO-Crate metadata file"]
    try:
        doc = jsonio.loads_strict(raw, f"data/{CRATE_FILE}", max_bytes=MAX_CRATE_BYTES)
    except UnreadableInputError as exc:
        return [exc.message]
    if not isinstance(doc, dict):
        return ["not a JSON-LD object"]
    if jsonio.dumps(doc).encode("ascii") != raw:
        return ["not in the canonical JSON form the packer writes (sorted keys, two-space indent, ASCII)"]
    want = expected(f)
    if doc == want:
        return []
    extra = sorted(set(doc) - {"@context", "@graph"})
    out = [f"top-level keys other than @context and @graph: {', '.join(map(_show, extra))}"] if extra else []
    return out + _first_differences(doc, want) or ["differs from the RO-Crate this verifier writes from the documents"]
