"""The candidate records of a bundle or a results folder, loaded once and held to every rule.

:func:`load` is the one way the packer and the verifier read ``results/candidates.json``: the
strict typed records (:mod:`kbrepro.model.candidates`), the verdicts of every named check
derived again from them (:mod:`kbrepro.harness.cheats`), and the completeness and derivation
rules (:mod:`kbrepro.model.candidate_rules`) over the records, the pinned task sources and the
bundled SASS. Its result is a :class:`Loaded`: the typed document, the derived verdicts per
candidate, and every problem found (empty: the records can be believed as far as the rules go).
"""
from __future__ import annotations

import hashlib
import json
import statistics
from dataclasses import dataclass
from typing import Callable, Mapping, Optional

from kbrepro.harness import cheats, cheats_v2
from kbrepro.model import candidate_rules as rules
from kbrepro.model import candidates as mc
from kbrepro.model import problems as P
from kbrepro.model.problems import Problem
from kbrepro.model.source_rules import plain_pytorch
from kbrepro.model.timing_rules import sass_archs


@dataclass(frozen=True)
class Loaded:
    """``doc`` (None where the document is not a valid record), ``verdicts`` (candidate name
    -> the derived verdicts, in :data:`cheats.CHECKS` order) and ``problems``."""

    doc: Optional[mc.CandidatesDoc]
    verdicts: Mapping[str, tuple]
    problems: tuple


def load(raw_doc: object, files: Mapping[str, bytes], task_source: Callable[[mc.CandidateRecord], Optional[bytes]],
         *, prefix: str = "") -> Loaded:
    """The records of the parsed ``results/candidates.json`` ``raw_doc``. ``files``: the
    payload (``prefix`` + relative path -> bytes) the SASS listings are read from;
    ``task_source(record)``: the pinned task's bytes for a record (None where it cannot be
    trusted: the caller reports that). Problems carry JSON paths into candidates.json."""
    doc, problems = mc.load(raw_doc)
    if doc is None:
        return Loaded(None, {}, tuple(problems))
    env = _environment(files.get(f"{prefix}results/environment.json"))
    payload = {k[len(prefix):]: v for k, v in files.items() if k.startswith(prefix)}
    archs = sass_archs(v.decode("utf-8", "replace") for k, v in payload.items()
                       if k.startswith("provenance/") and "/sass/" in k and k.endswith(".sass"))
    out: list[Problem] = list(rules.document_problems(doc, env.get("gpu_name"), env.get("compute_capability"),
                                                      env.get("l2_raw"), archs, env.get("torch_version")))
    if env and env.get("torch_version") is None and any(r.observations.build is not None and r.observations.build.torch
                                                        for r in doc.candidates):
        out.append(Problem(P.INCOMPLETE, "$.candidates", "the candidates' processes recorded their torch; "
                           "environment.json does not: the two cannot be held together", None, None))
    verdicts: dict[str, tuple] = {}
    for i, rec in enumerate(doc.candidates):
        try:
            vs = cheats_v2.derive_any(doc.schema_version, rec.observations, rec.timing, rec.blocks, doc.predicate.atol,
                                      doc.predicate.rtol, rec.config.no_extra_shape, plain_pytorch(payload.get(rec.file)))
        except (KeyError, IndexError, TypeError, ValueError, ArithmeticError, statistics.StatisticsError) as exc:
            # the record is well typed, yet a check's derivation cannot read it (a round without an
            # arm, an empty list of calls): evidence the check needs, missing, fails that record
            out.append(Problem(P.INCOMPLETE, f"$.candidates[{i}]", "its records lack evidence the named checks are "
                               f"derived from ({type(exc).__name__})", None, None))
            vs = ()
        verdicts[rec.name] = vs
        custom = dict((v.name, v.passed) for v in vs).get("custom_kernel_ran")
        ev = rules.Evidence(task_source(rec), payload, env.get("l2_cache_bytes"), env.get("gpu_name"),
                            env.get("flags") or {})
        out += rules.record_problems(doc, i, ev, cheats.custom_kernels(rec.observations), custom)
    return Loaded(doc, verdicts, tuple(out))


def _environment(raw: Optional[bytes]) -> dict:
    """The environment facts the rules hold records against (GPU name, compute capability, L2
    bytes), as environment.json states them (its schema is checked elsewhere); empty where
    unreadable."""
    if raw is None:  # no environment.json: its own rule fails the bundle; nothing to hold records against
        return {}
    try:
        fields = json.loads(raw).get("fields") or {}
        name = (fields.get("gpu_name") or {}).get("value")
        cc = (fields.get("compute_capability") or {}).get("value")
        torch_version = (fields.get("torch_version") or {}).get("value")
        l2 = (fields.get("l2_cache_bytes") or {}).get("value")
        flags = {k: (fields.get(f) or {}).get("value") for k, f in ENV_FLAGS.items()}
    except (ValueError, AttributeError):
        return {}
    return {"gpu_name": name if isinstance(name, str) else None, "compute_capability": cc if isinstance(cc, str) else None,
            "l2_cache_bytes": l2 if type(l2) is int and l2 > 0 else None, "l2_raw": l2,
            "torch_version": torch_version if isinstance(torch_version, str) else None,
            "flags": {k: v if isinstance(v, (bool, str)) else None for k, v in flags.items()}}


#: the precision flags environment.json records (harness/fingerprint.py), by the name the
#: candidate's records give them (:class:`kbrepro.model.scalars.Flags`)
ENV_FLAGS = {"allow_tf32_matmul": "tf32_matmul", "allow_tf32_cudnn": "tf32_cudnn",
             "float32_matmul_precision": "float32_matmul_precision"}


def file_problems(doc: Mapping, files: Mapping[str, bytes]) -> list[str]:
    """Each candidate file and task file of the candidates document ``doc`` that is missing
    from ``files`` (results-folder path -> bytes) or is not the one its record hashed."""
    out = []
    for r in doc["candidates"]:
        for rel, want in ((r["file"], r["source_sha256"]), (f"inputs/kernelbench/{r['task']}", r["task_sha256"])):
            if files.get(rel) is None or hashlib.sha256(files[rel]).hexdigest() != want:
                out.append(f"{rel} is missing or is not the file candidate {r['name']} ran with")
    return out


__all__ = ["Loaded", "load", "file_problems"]
