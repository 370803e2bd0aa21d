"""A forger's packer for candidate bundles: the product's own packer, used as a library, with
its record checks switched off (a forger's copy of the code would not run them).

Every derived file agrees with the edited records: the verdicts are derived again from the
edited observations where the model can read them (kept as recorded otherwise), the claims
are evaluated again, REPORT.md, summary.txt, the RO-Crate file and the manifests are written
again. Only the verifier's own expectations can catch the lie.
"""
from __future__ import annotations

import contextlib
import json
import tarfile
from pathlib import Path
from typing import Callable
from unittest import mock

from kbrepro import schemas
from kbrepro.bundle import candidate_records, case_records, pack
from kbrepro.bundle import candidates as bc
from kbrepro.harness import cheats, cheats_v2, jsonio
from kbrepro.model import candidates as mc
from kbrepro.model.source_rules import plain_pytorch


def _lenient(raw_doc, files, task_source, *, prefix=""):
    doc, _ = mc.load(raw_doc)
    if doc is not None:
        verdicts = {r.name: cheats_v2.derive_any(doc.schema_version, r.observations, r.timing, r.blocks,
                                              doc.predicate.atol, doc.predicate.rtol, r.config.no_extra_shape,
                                              plain_pytorch(files.get(f"{prefix}{r.file}")))
                    for r in doc.candidates}
    else:
        verdicts = {r.get("name"): tuple(cheats.CheckVerdict(v["name"], v["passed"], v["detail"])
                                         for v in r.get("verdicts") or [])
                    for r in raw_doc.get("candidates") or [] if isinstance(r, dict)}
    return candidate_records.Loaded(doc, verdicts, ())


@contextlib.contextmanager
def checks_off():
    """The packer's record and schema checks switched off (inside the block only)."""
    with mock.patch.object(candidate_records, "load", _lenient), \
            mock.patch.object(schemas, "validate", lambda doc, name: []), \
            mock.patch.object(case_records, "case_problems", lambda doc, task_source=None: []), \
            mock.patch.object(candidate_records, "file_problems", lambda doc, files: []):
        yield


def members(path: Path) -> tuple[str, dict[str, bytes]]:
    """The bundle's name and its ``data/`` files (relative to ``data/``)."""
    with tarfile.open(path) as tf:
        files = {m.name.split("/", 1)[1]: tf.extractfile(m).read() for m in tf if m.isfile()}
    name = files["bag-info.txt"].decode().split("External-Identifier: ", 1)[1].split("\n", 1)[0]
    return name, {k[len("data/"):]: v for k, v in files.items() if k.startswith("data/")}


def forge(example: Path, edit: Callable[[dict, dict], None], out: Path, *, bundle_format: int | None = None) -> Path:
    """Pack ``example``'s results again after ``edit(candidates_doc, files)`` (``files``: the
    results folder's files, editable), with :func:`checks_off`; writes and returns ``out``."""
    name, payload = members(example)
    files = {k: v for k, v in payload.items() if k.split("/")[0] in ("inputs", "results", "provenance")
             and k != "inputs/claims.yaml"}
    doc = json.loads(files["results/candidates.json"])
    edit(doc, files)
    files["results/candidates.json"] = jsonio.dumps(doc).encode()
    kw = {} if bundle_format is None else {"bundle_format": bundle_format}
    with checks_off():
        bag, _, _, _ = bc.build_payload(files, name=name, **kw)
    pack.write_archive(bag, out)
    return out
