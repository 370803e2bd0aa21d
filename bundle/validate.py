"""Validation of result documents: schema (every violation, with its JSON path), strict
JSON, finiteness, supported ``schema_version``, and internal consistency (counts within
totals, verdicts that match their counts, files that match their recorded hashes, rounds
that match their protocol, witness verdicts that match their bits)."""
from __future__ import annotations

import hashlib
from typing import Any, Iterator, Mapping

from kbrepro import schemas
from kbrepro.errors import UsageError
from kbrepro.harness import jsonio
from kbrepro.harness.run_build import witness_flushes
from kbrepro.model.problems import CONTRADICTS, SCHEMA, UNKNOWN_VERSION, Problem


def walk_objects(node: Any, path: str = "$") -> Iterator[tuple[str, dict]]:
    """(JSON path, object) for every JSON object in ``node``, depth first."""
    if isinstance(node, dict):
        yield path, node
        for k, v in node.items():
            yield from walk_objects(v, f"{path}.{k}" if str(k).isidentifier() else f'{path}["{k}"]')
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from walk_objects(v, f"{path}[{i}]")


def _walk_checks(node: Any) -> Iterator[tuple[str, dict]]:
    """(path, check dict) for every check-like object (element_count, official, bit count)."""
    for path, d in walk_objects(node):
        if "element_count" in d and "official" in d and "bit_identical_count" in d:
            yield path, d


def study_schemas(study, binding) -> dict[str, list[dict]]:
    """The schemas a study adds, by document name: its own documents' schemas and the
    schemas of its sections of our documents (``StudyBinding.documents`` and
    ``section_schemas``, files of the study folder). Raises UsageError for a schema file the
    study does not hold or that is not JSON."""
    out: dict[str, list[dict]] = {}
    if binding is None:
        return out
    for name, rel in [*sorted((binding.documents or {}).items()), *sorted((binding.section_schemas or {}).items())]:
        try:
            out.setdefault(name, []).append(jsonio.loads_strict(study.file(rel), where=rel))
        except ValueError as exc:
            raise UsageError(f"study {study.name}: {rel} is not valid JSON: {exc}", "fix the study's schema") from exc
    return out


def _apply(doc: Any, sch: dict, name: str) -> list:
    """A study's schema applied: a stranger's (``schemas.UntrustedSchema``) with a time bound."""
    if isinstance(sch, schemas.UntrustedSchema):
        return schemas.validate_untrusted(doc, sch, name)
    return schemas.validate_with(doc, sch, name)


def schema_problems(name: str, doc: Any, extra: Mapping[str, list] | None = None) -> list[Problem]:
    """Schema violations of a document that names itself ``kbrepro/<name>``, each a
    :class:`~kbrepro.model.problems.Problem` of file ``<name>.json`` and code
    :data:`~kbrepro.model.problems.SCHEMA`; an unsupported ``schema_version`` is reported alone
    (the schema of another version cannot judge the rest), with code
    :data:`~kbrepro.model.problems.UNKNOWN_VERSION`. ``extra``: a study's schemas by document
    name (:func:`study_schemas`); a study's own document is judged by them alone, one of ours by
    ours and then by the study's section schemas."""
    where = f"{name}.json"

    def bad(path: str, message: str, code: str = SCHEMA) -> list[Problem]:
        return [Problem(code, path, message, file=where)]

    def version(supported: int) -> list[Problem]:
        return bad("$.schema_version", f"unsupported version {doc.get('schema_version')!r} (this verifier reads "
                   f"{supported})", UNKNOWN_VERSION)

    if not isinstance(doc, dict):
        return bad("$", "not a JSON object")
    if doc.get("schema") != f"kbrepro/{name}":
        return bad("$.schema", f"expected 'kbrepro/{name}', found {doc.get('schema')!r}")
    own = list((extra or {}).get(name, []))
    try:
        supported = schemas.supported_version(name)
    except KeyError:
        if not own:
            return bad("$.schema", f"no schema named {name!r}")
        props = own[0].get("properties") if isinstance(own[0], dict) else None
        sv = props.get("schema_version") if isinstance(props, dict) else None
        supported = sv.get("const") if isinstance(sv, dict) else None
        if not isinstance(supported, int) or isinstance(supported, bool):
            return bad("$.schema", f"the study's schema of {name} gives no integer schema_version const")
        if doc.get("schema_version") != supported:
            return version(supported)
        return [Problem(SCHEMA, v.path, v.message, file=where) for sch in own for v in _apply(doc, sch, name)]
    if doc.get("schema_version") != supported:
        return version(supported)
    out = [Problem(SCHEMA, v.path, v.message, file=where) for v in schemas.validate(doc, name)]
    out += [Problem(SCHEMA, v.path, v.message, file=where) for sch in own for v in _apply(doc, sch, name)]
    return out


def _p(file: str, path: str, message: str) -> Problem:
    return Problem(CONTRADICTS, path, message, file=file)


def consistency_problems(documents: Mapping[str, Any], files: Mapping[str, bytes], *,
                         file_hashes: bool = True) -> list[Problem]:
    """Internal contradictions between and within documents, each a :class:`~kbrepro.model.problems.Problem`
    (code ``record.contradicts``) naming the document file (``run.json``), the JSON path and
    what contradicts what; ``str()`` of one is ``file: path: message``. ``files`` maps payload
    paths (relative to the results folder / ``data/``) to bytes, for hash checks of the files
    the compile records name (``file_hashes``; the verifier leaves them to its provenance tier)."""
    out: list[Problem] = []
    for name, doc in documents.items():
        for path, chk in _walk_checks(doc):
            n, bits = chk.get("element_count"), chk.get("bit_identical_count")
            if isinstance(n, int) and isinstance(bits, int) and bits > n:
                out.append(_p(f"{name}.json", f"{path}.bit_identical_count", f"{bits} exceeds element_count {n}"))
            for pred in ("official", "legacy", "equal_nan_stress"):
                r = chk.get(pred)
                if not isinstance(r, dict):
                    continue
                fc = r.get("failing_count")
                if isinstance(fc, int) and isinstance(n, int) and fc > n:
                    out.append(_p(f"{name}.json", f"{path}.{pred}.failing_count", f"{fc} exceeds element_count {n}"))
                if isinstance(fc, int) and r.get("pass") is not None and (fc == 0) != bool(r["pass"]):
                    out.append(_p(f"{name}.json", f"{path}.{pred}", f"pass={r['pass']} contradicts failing_count={fc}"))
            if isinstance(n, int) and isinstance(bits, int) and bits == n and n > 0:
                off = chk.get("official")
                nf = chk.get("nonfinite") or {}
                if isinstance(off, dict) and off.get("pass") is False and not nf.get("reference_nan"):
                    out.append(_p(f"{name}.json", path, "bit-identical with no NaN yet official pass=false"))
    comp = documents.get("compile")
    if isinstance(comp, dict) and file_hashes:
        for i, v in enumerate(comp.get("variants", [])):
            for key in ("cubin", "cubin_complete", "ptx", "sass"):
                ref = v.get(key)
                if not isinstance(ref, dict):
                    continue
                data = files.get(ref.get("file", ""))
                if data is None:
                    out.append(_p("compile.json", f"$.variants[{i}].{key}.file", f"{ref.get('file')} is not in the results"))
                elif hashlib.sha256(data).hexdigest() != ref.get("sha256"):
                    out.append(_p("compile.json", f"$.variants[{i}].{key}.sha256", f"does not match {ref.get('file')}"))
    tim = documents.get("timings")
    if isinstance(tim, dict):
        for i, b in enumerate(tim.get("blocks", [])):
            proto = b.get("protocol", {})
            arms = set(b.get("arms", []))
            rounds = b.get("rounds", [])
            if not rounds:
                chk = b.get("checks") or {}
                if not (isinstance(b.get("skipped"), str) and b.get("kind") not in ("study", "cold_l2", "extra_shape")
                        and any((c or {}).get("official", {}).get("pass") is False for c in chk.values())):
                    out.append(_p("timings.json", f"$.blocks[{i}].rounds", "a block without rounds; only a probe's block "
                                  "whose variant failed its check on the timing input is skipped"))
                continue
            if not proto.get("adaptive") and len(rounds) != proto.get("rounds"):
                out.append(_p("timings.json", f"$.blocks[{i}].rounds", f"{len(rounds)} rounds, protocol says {proto.get('rounds')}"))
            for j, r in enumerate(rounds):
                if set(r.get("times_ms", {})) != arms:
                    out.append(_p("timings.json", f"$.blocks[{i}].rounds[{j}].times_ms", "arms differ from the block's arms"))
                    break
    wit = documents.get("witness")
    if isinstance(wit, dict) and "outputs" in wit:

        ref_bits = [r["bits"] for r in wit["outputs"].get("reference", [])]
        rc = wit.get("reference_cpu") or {}
        keep, flush = rc.get("keep") or [], rc.get("flush") or []
        disc = [i for i, (a, b) in enumerate(zip(keep, flush)) if a.get("bits") != b.get("bits")]
        for n, ver in wit.get("verdicts", {}).items():
            rows = wit["outputs"].get(n, [])
            got = [r["bits"] for r in rows]
            if ver.get("bit_identical_to_reference") != (got == ref_bits):
                out.append(_p("witness.json", f"$.verdicts.{n}.bit_identical_to_reference", "contradicts the recorded bits"))
            try:
                want = witness_flushes(rows, keep, flush, disc) if len(rows) == len(keep) == len(flush) else None
            except (KeyError, TypeError, ValueError, IndexError):
                want = None
            if ver.get("flushes") != want:
                out.append(_p("witness.json", f"$.verdicts.{n}.flushes", "contradicts the recorded values"))
    run = documents.get("run")
    if isinstance(run, dict) and run.get("status") not in ("complete", "imported"):
        fail = run.get("failure") or {}
        out.append(_p("run.json", "$.status", f"the run is {run.get('status')!r}"
                      + (f" (stage {fail.get('stage')}: {fail.get('error')})" if fail else "")))
    return out
