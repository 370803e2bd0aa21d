"""Cases: the unit of work a sharded run hands to an engine, and where each one ran.

A **case** is one task digest x one candidate digest x one variant x one seed set: for
KernelBench candidates, one ``ModelNew`` file checked and timed against one pinned task under
one profile (its seeds), with the run's size overrides and extra shapes (the variant). Each
case has its own folder::

    <results>/cases/<case id>/case.json        the case (this module's :class:`Case`, as JSON)
    <results>/cases/<case id>/input/           what the case needs that is not pinned (the candidate file)
    <results>/cases/<case id>/result/          what the case's run wrote (a results folder of one candidate)
    <results>/cases/<case id>/ran_on.json      where it ran (:func:`ran_on`)
    <results>/cases/<case id>/done.json        written last, atomically: the case finished
    <results>/cases/<case id>/error.json       the case failed: {"type", "message"} (one line each)

The **case id** is a digest of the case's fields (:func:`case_id`), never of where or when
it ran, so a verifier recomputes it from the recorded fields and compares (the trust rule).

This module is harness-side: it knows no bundle and imports nothing from :mod:`kbrepro.bundle`.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from kbrepro.errors import UnreadableInputError
from kbrepro.model import sizes as msizes
from kbrepro import schemas
from kbrepro.harness.fingerprint import hash_uuid

#: the kind of case this version defines (a KernelBench candidate against its task)
CASE_KIND = "kernelbench-candidate"
CASE_SCHEMA = "kbrepro/case"
CASE_VERSION = 1
#: a case id: ``c`` and the first 20 hex digits of the sha256 of the case's canonical fields
ID_HEX = 20
CASES_DIR = "cases"
DONE = "done.json"
ERROR = "error.json"
RAN_ON = "ran_on.json"
#: ran_on's keys, in order; every one is present, ``None`` where the machine cannot say
RAN_ON_KEYS = ("host_sha256", "engine", "worker", "device", "gpu_name", "gpu_uuid_sha256", "driver_version",
               "sm_clock_mhz", "memory_clock_mhz")


@dataclass(frozen=True)
class Case:
    """One unit of work. ``task`` is the KernelBench pin path (e.g.
    ``KernelBench/level1/40_LayerNorm.py``) and ``task_sha256`` its digest (64 hex);
    ``candidate`` the bundle-safe candidate name and ``candidate_sha256`` the digest of its
    file's bytes; ``profile`` the candidate profile (``full``, ``quick``); ``seeds`` the
    profile's seed set (ints); ``sizes`` the task's size globals set for the run (name ->
    positive int or tuple of them: :mod:`kbrepro.model.sizes`) and ``extra_shapes`` the extra
    shapes (each such a mapping, in order): together the variant. ``index`` is the case's
    place in its plan (0-based): it orders merged results and is not part of the id."""

    task: str
    task_sha256: str
    candidate: str
    candidate_sha256: str
    profile: str
    seeds: tuple
    sizes: tuple = ()          # ((name, value), ...) sorted by name
    extra_shapes: tuple = ()   # (((name, value), ...), ...) in order
    index: int = field(default=0, compare=False)

    def fields(self) -> dict:
        """The identifying fields as a JSON-ready dict (what :func:`case_id` digests)."""
        return {"kind": CASE_KIND, "task": self.task, "task_sha256": self.task_sha256, "candidate": self.candidate,
                "candidate_sha256": self.candidate_sha256, "profile": self.profile,
                "seeds": [int(s) for s in self.seeds],
                "variant": {"sizes": msizes.to_json(dict(self.sizes)),
                            "extra_shapes": [msizes.to_json(dict(s)) for s in self.extra_shapes]}}

    @property
    def id(self) -> str:
        return case_id(self.fields())

    def to_doc(self) -> dict:
        """``case.json``: schema, version, id, index and the fields."""
        return {"schema": CASE_SCHEMA, "schema_version": CASE_VERSION, "id": self.id, "index": self.index,
                **self.fields()}


def case_id(fields: Mapping) -> str:
    """The id of a case from its fields (:meth:`Case.fields`, or the same keys read from a
    document): ``c`` + the first :data:`ID_HEX` hex digits of the sha256 of their canonical
    JSON (sorted keys, no spaces, ASCII). Deterministic across processes and machines; any
    change of a field changes it. Raises TypeError for fields JSON cannot hold."""
    keys = ("kind", "task", "task_sha256", "candidate", "candidate_sha256", "profile", "seeds", "variant")
    canon = json.dumps({k: fields.get(k) for k in keys}, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return "c" + hashlib.sha256(canon.encode()).hexdigest()[:ID_HEX]


def case_from_doc(doc: Mapping) -> Case:
    """The :class:`Case` a ``case.json`` document describes. Raises UnreadableInputError where
    it is not one (wrong schema or version, a missing or mistyped field, or an id that is not
    the digest of its fields)."""
    problems = schemas.validate(doc, "case") if isinstance(doc, dict) else ["not an object"]
    if problems:
        raise UnreadableInputError(f"case.json is not a case: {str(getattr(problems[0], 'message', problems[0]))[:200]}",
                                   "remove the case folder and run the case again")
    try:
        if doc.get("schema") != CASE_SCHEMA or doc.get("schema_version") != CASE_VERSION:
            raise ValueError(f"not a {CASE_SCHEMA} version {CASE_VERSION} document")
        if doc.get("kind") != CASE_KIND:
            raise ValueError(f"kind is not {CASE_KIND}")
        var = doc["variant"]
        c = Case(task=str(doc["task"]), task_sha256=str(doc["task_sha256"]), candidate=str(doc["candidate"]),
                 candidate_sha256=str(doc["candidate_sha256"]), profile=str(doc["profile"]),
                 seeds=tuple(int(s) for s in doc["seeds"]),
                 sizes=tuple(sorted((str(k), msizes.canonical(v)) for k, v in var["sizes"].items())),
                 extra_shapes=tuple(tuple((str(k), msizes.canonical(v)) for k, v in s.items())
                                    for s in var["extra_shapes"]),
                 index=int(doc["index"]))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UnreadableInputError(f"case.json is not a case: {exc}", "remove the case folder and run the case again") from exc
    if c.id != doc.get("id"):
        raise UnreadableInputError(f"case.json: its id {str(doc.get('id'))[:30]!r} is not the digest of its fields "
                                   f"({c.id})", "the case was edited; remove its folder and run it again")
    return c


def case_dir(results_dir: Path, cid: str) -> Path:
    """``<results_dir>/cases/<cid>``."""
    return Path(results_dir) / CASES_DIR / cid


def case_status(folder: Path) -> str:
    """``done`` (done.json present), ``failed`` (error.json present, no done.json) or ``pending``."""
    folder = Path(folder)
    if (folder / DONE).is_file():
        return "done"
    if (folder / ERROR).is_file():
        return "failed"
    return "pending"


# ---------------------------------------------------------------------------------------------
# where a case ran


def hash_host(name: str) -> str:
    """sha256 hex of a host name (salted with the product's prefix): the report can tell two
    hosts apart without naming either."""
    return hashlib.sha256(("kbrepro-host:" + str(name)).encode()).hexdigest()


def _nvml_by_uuid(uuid: str) -> dict:
    """Driver version and current SM / memory clocks (MHz) of the GPU with this UUID, from
    NVML (its handle looked up by UUID, so CUDA_VISIBLE_DEVICES renumbering cannot pick
    another GPU). Raises whatever pynvml raises."""
    import pynvml  # type: ignore

    pynvml.nvmlInit()
    u = str(uuid)
    if not u.startswith("GPU-") and not u.startswith("MIG-"):
        u = "GPU-" + u
    h = pynvml.nvmlDeviceGetHandleByUUID(u)
    drv = pynvml.nvmlSystemGetDriverVersion()
    return {"driver_version": drv.decode() if isinstance(drv, bytes) else str(drv),
            "sm_clock_mhz": int(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
            "memory_clock_mhz": int(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM))}


def ran_on(device: str, engine: str, worker: str | None = None, host: str | None = None) -> dict:
    """Where this process runs a case: ``host_sha256`` (:func:`hash_host` of the host name),
    ``engine`` (``local``, ``submitit``, ``ray``), ``worker`` (the engine's slot or job id, or
    None), ``device`` (``cuda`` or ``cpu``) and, for a CUDA device, the GPU torch sees as
    device 0: ``gpu_name``, ``gpu_uuid_sha256`` (sha256, never the raw UUID), and from NVML
    ``driver_version``, ``sm_clock_mhz``, ``memory_clock_mhz`` (MHz, sampled now). A value the
    machine cannot give is ``None``. Never raises."""
    out = dict.fromkeys(RAN_ON_KEYS)
    out.update(host_sha256=hash_host(host if host is not None else socket.gethostname()), engine=str(engine),
               worker=None if worker is None else _text(worker, 80), device="cuda" if device.startswith("cuda") else "cpu")
    if out["device"] != "cuda":
        return out
    try:
        import torch

        if not torch.cuda.is_available():
            return out
        props = torch.cuda.get_device_properties(0)
        out["gpu_name"] = _text(props.name, 120)
        uuid = str(getattr(props, "uuid", "") or "")
        if uuid:
            out["gpu_uuid_sha256"] = hash_uuid(uuid)
            try:
                nv = _nvml_by_uuid(uuid)
                out.update(nv, driver_version=_text(nv["driver_version"], 120))
            except Exception:  # no pynvml, or NVML cannot answer: the fields stay None
                pass
    except Exception:
        pass
    return out


def _text(v, limit: int) -> str:
    """A ran_on text field as :func:`check_ran_on` takes it: a raw UUID in it replaced by
    ``uuid?``, any other character outside the plain set by ``?``, at most ``limit``."""
    s = _RAW_UUID.sub("uuid?", str(v))
    return re.sub(r"[^A-Za-z0-9 .\-_:()/+,?]", "?", s)[:limit]


def check_ran_on(doc) -> list[str]:
    """What is wrong with a ran_on record (types only): a list of one-line problems, empty
    when it is one."""
    if not isinstance(doc, dict):
        return ["is not an object"]
    out = []
    if set(doc) != set(RAN_ON_KEYS):
        out.append(f"holds the keys {sorted(doc)[:12]}, not {list(RAN_ON_KEYS)}")
    hexes = ("host_sha256", "gpu_uuid_sha256")
    for k in RAN_ON_KEYS:
        v = doc.get(k)
        if k in hexes:
            ok = (v is None and k != "host_sha256") or (isinstance(v, str) and len(v) == 64 and
                                                        all(ch in "0123456789abcdef" for ch in v))
        elif k in ("sm_clock_mhz", "memory_clock_mhz"):
            ok = v is None or (isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 100000)
        elif k == "engine":
            ok = v in ("local", "submitit", "ray")
        elif k == "device":
            ok = v in ("cuda", "cpu")
        else:  # a GPU name, a driver version, a worker: plain text (no Markdown), never a raw UUID
            ok = v is None or (isinstance(v, str) and len(v) <= 120 and _RAN_ON_TEXT.fullmatch(v) is not None)
            if ok and isinstance(v, str) and _RAW_UUID.search(v):
                out.append(f"{k} holds a raw GPU UUID: ran_on keeps only its sha256 (gpu_uuid_sha256)")
                continue
        if not ok:
            out.append(f"{k} is {str(v)[:40]!r}, not a value of its type")
    return out


#: what a ran_on text field may hold: letters, digits, spaces and ``. - _ : ( ) / + , ?``
_RAN_ON_TEXT = re.compile(r"[A-Za-z0-9 .\-_:()/+,?]*")
#: a GPU or MIG UUID as NVML and CUDA_VISIBLE_DEVICES write it (or its bare hex groups)
_RAW_UUID = re.compile(r"(?i)(GPU|MIG)-[0-9a-f-]{4,}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def cuda_visible_list() -> list[str] | None:
    """The entries of ``CUDA_VISIBLE_DEVICES`` in this process (None where it is unset)."""
    v = os.environ.get("CUDA_VISIBLE_DEVICES")
    if v is None:
        return None
    return [x.strip() for x in v.split(",") if x.strip() != ""]


__all__ = ["Case", "case_id", "case_from_doc", "case_dir", "case_status", "ran_on", "check_ran_on", "hash_host",
           "CASE_KIND", "CASES_DIR", "DONE", "ERROR", "RAN_ON", "RAN_ON_KEYS"]
