"""A sharded run's case records, as the packer and the verifier judge them: the case fields a
candidate record implies (:func:`record_case_fields`, whose digest its ``case.id`` must be),
the problems of a merged candidates.json's case list (:func:`case_problems`), and what a
sharded and an unsharded run of the same cases must agree on (:func:`comparable`,
:func:`differences`).
"""
from __future__ import annotations

import json
import re
from typing import Callable, Mapping

from kbrepro.harness import cases as hcases
from kbrepro.model import protocol
from kbrepro.model.task_inputs import size_globals


#: keys whose values are timings, clocks, host or run-time fields: dropped by :func:`comparable`
#: ``invocations_per_pair`` of a candidate's timing block is calibrated from a measured time
#: (eager PyTorch must fill ``harness.candidate.TARGET_REQUEST_MS``): seen as 18 in one run
#: and 19 in the other of the first H200 equivalence run
#: ``built_sha256`` (a provenance file's hash before the machine's paths were scrubbed out) and
#: ``copied_bytes`` (their built sizes) depend on the build folder's path: a case folder's is
#: longer than an unsharded run's work folder (seen: 113,315 against 113,056 bytes)
VOLATILE_KEYS = frozenset({"started_utc", "finished_utc", "bandwidth", "ran_on", "rounds",
                           "per_call", "roofline", "clocks_start", "clocks_end", "stages", "seconds",
                           "compile_seconds", "host_s", "wall_seconds", "invocations_per_pair",
                           "built_sha256", "copied_bytes",
                           # the parent's clock over two request lengths (their invocation counts
                           # follow from the measured times) and the child's thread counts around
                           # a call (torch starts its pools lazily): host observations, not results
                           "clock", "threads_before", "threads_after"})


#: host shared objects are compared by the device code they hold (``sass_sha256`` of their
#: ``binaries`` entry), not by their bytes: a host compiler names the temporary folder of the
#: build in them and hashes it into the GNU build id, so even a scrubbed ``.so`` differs from
#: build to build (Triton's launcher, seen on the H200: same size, other bytes)
HOST_BINARY_SUFFIXES = (".so",)


VOLATILE_SUFFIXES = ("_ms", "_us", "_ns", "_s", "_seconds", "_utc", "_gbps", "_mhz")


_DURATION = re.compile(r"\b\d+(\.\d+)?([eE][-+]?\d+)? ?(s|ms|us|ns|GB/s|MHz)\b")
#: invocation counts inside a verdict's detail ("over 19 and 239 invocations"): chosen from the
#: measured times, so as volatile as they are
_COUNTS = re.compile(r"\b\d+ and \d+ invocations\b")


def comparable(doc):
    """A copy of a result document without timings, clocks, host and case fields (the
    top-level ``cases`` and each candidate record's ``case``; :data:`VOLATILE_KEYS` and keys
    ending in :data:`VOLATILE_SUFFIXES` at any depth; the ``sha256`` of a host shared object,
    :data:`HOST_BINARY_SUFFIXES`, whose SASS is still compared; durations inside strings, e.g.
    a verdict's ``built in 3.0 s``, become ``<t>``): what a sharded and an unsharded run of
    the same cases must agree on exactly."""
    if isinstance(doc, dict) and isinstance(doc.get("candidates"), list):
        doc = {k: v for k, v in doc.items() if k != "cases"}
        doc["candidates"] = [{k: v for k, v in r.items() if k != "case"} if isinstance(r, dict) else r
                             for r in doc["candidates"]]
    return _comparable(doc)


def _host_binary(d: Mapping) -> bool:
    """A provenance ``files`` or ``binaries`` entry of a host shared object."""
    name = d.get("path", d.get("file"))
    return isinstance(name, str) and name.endswith(HOST_BINARY_SUFFIXES) and "sha256" in d


def _comparable(doc):
    if isinstance(doc, dict):
        host = _host_binary(doc)
        return {k: _comparable(v) for k, v in doc.items()
                if k not in VOLATILE_KEYS and not k.endswith(VOLATILE_SUFFIXES) and not (host and k == "sha256")}
    if isinstance(doc, list):
        return [_comparable(v) for v in doc]
    if isinstance(doc, str):
        return _COUNTS.sub("<n> and <n> invocations", _DURATION.sub("<t>", doc))
    return doc


def record_case_fields(r: Mapping, doc: Mapping, task_source: Callable[[str], bytes | None] | None = None) -> list[dict]:
    """The case fields a candidate record of ``doc`` (candidates.json) implies: what its
    ``case.id`` must be the digest of (the verifier derives them itself, never reading them
    from the ``cases`` list). More than one where the record's extra shape is the run's own
    fallback (:func:`kbrepro.model.protocol.requested_extra_shapes`: a case planned with none
    records the one its run took); ``task_source(task path)`` gives the task's bytes for that
    (None: unknown, only the recorded fields)."""
    cfg = r.get("config") if isinstance(r.get("config"), dict) else {}
    sizes = cfg.get("sizes") or {}
    shapes = cfg.get("extra_shapes") or []
    run_sizes = None
    src = task_source(r.get("task")) if task_source is not None and isinstance(r.get("task"), str) else None
    if src is not None and isinstance(sizes, dict) and isinstance(shapes, list) and all(isinstance(x, dict) for x in shapes):
        try:
            run_sizes = {**size_globals(src), **{k: tuple(v) if isinstance(v, list) else v for k, v in sizes.items()}}
        except (ValueError, SyntaxError, RecursionError, MemoryError, TypeError):
            run_sizes = None
    options = protocol.requested_extra_shapes(shapes, run_sizes) if run_sizes is not None else [shapes]
    return [{"kind": hcases.CASE_KIND, "task": r.get("task"), "task_sha256": r.get("task_sha256"),
             "candidate": r.get("name"), "candidate_sha256": r.get("source_sha256"), "profile": doc.get("profile"),
             "seeds": cfg.get("seeds"), "variant": {"sizes": sizes, "extra_shapes": _json_shapes(e)}} for e in options]


def _json_shapes(shapes: list) -> list:
    """Extra shapes as a JSON document holds them (tuple values as lists)."""
    return [{k: list(v) if isinstance(v, tuple) else v for k, v in s.items()} for s in shapes]


_FIELDS = ("kind", "task", "task_sha256", "candidate", "candidate_sha256", "profile", "seeds", "variant")


def case_problems(doc: Mapping, task_source: Callable[[str], bytes | None] | None = None) -> list[tuple[str, str]]:
    """What is wrong with the case fields of a merged candidates.json (the verifier's check;
    ``(json path, message)`` pairs, empty when consistent): every listed case's id is the
    digest of its fields and its index its place; ids are unique; a done case has no error
    and a failed one has one; ``ran_on`` records are well-typed; every record's ``case.id`` is
    the digest of the fields the record itself implies (:func:`record_case_fields`) and names
    a listed done case whose fields are those; every done case has exactly one record, in plan
    order. A document without ``cases`` and without ``case`` fields has no problems.
    ``task_source``: as :func:`record_case_fields`'s."""
    recs = [r for r in doc.get("candidates") or [] if isinstance(r, dict)]
    listed = doc.get("cases")
    with_case = [i for i, r in enumerate(recs) if "case" in r]
    if listed is None:
        return [(f"$.candidates[{i}].case", "a case field, but the document lists no cases") for i in with_case[:5]]
    out: list[tuple[str, str]] = []
    if not isinstance(listed, list):
        return [("$.cases", "is not a list")]
    ids = []
    for i, c in enumerate(listed):
        at = f"$.cases[{i}]"
        if not isinstance(c, dict):
            out.append((at, "is not an object"))
            continue
        want = hcases.case_id({k: c.get(k) for k in _FIELDS})
        if c.get("id") != want:
            out.append((f"{at}.id", f"is not the digest of the case's fields ({want})"))
        if c.get("index") != i:
            out.append((f"{at}.index", f"is not its place in the list ({i})"))
        if (c.get("status") == "done") != (c.get("error") is None):
            out.append((f"{at}.error", "a done case carries no error and a failed case one"))
        if c.get("ran_on") is not None:
            for p in hcases.check_ran_on(c["ran_on"]):
                out.append((f"{at}.ran_on", p))
        ids.append(c.get("id"))
    if len(set(ids)) != len(ids):
        out.append(("$.cases", "lists a case more than once"))
    by_id = {c.get("id"): c for c in listed if isinstance(c, dict)}
    seen = []
    for i, r in enumerate(recs):
        at = f"$.candidates[{i}].case"
        if "case" not in r or not isinstance(r["case"], dict):
            out.append((at, "missing: a sharded run's every record names its case"))
            continue
        implied = {hcases.case_id(f): f for f in record_case_fields(r, doc, task_source)}
        cid = r["case"].get("id")
        if cid not in implied:
            out.append((f"{at}.id", f"is not the digest of the record's own task, candidate, profile, seeds and "
                        f"variant ({' or '.join(implied)})"))
            continue
        mine = implied[cid]
        c = by_id.get(cid)
        if c is None or c.get("status") != "done":
            out.append((f"{at}.id", "names no done case of the list"))
            continue
        if {k: c.get(k) for k in _FIELDS} != mine:
            out.append((f"{at}.id", "the listed case's fields are not the record's"))
        seen.append(cid)
    done = [c.get("id") for c in listed if isinstance(c, dict) and c.get("status") == "done"]
    if seen != done and not out:
        out.append(("$.candidates", "the records are not the done cases, each exactly once, in plan order"))
    return out


def differences(a, b, path: str = "$", limit: int = 50) -> list[str]:
    """JSON paths where :func:`comparable` ``a`` and ``b`` differ (at most ``limit``)."""
    out: list[str] = []

    def walk(x, y, p):
        if len(out) >= limit:
            return
        if isinstance(x, dict) and isinstance(y, dict):
            for k in sorted(set(x) | set(y)):
                if k not in x or k not in y:
                    out.append(f"{p}.{k}: only in {'the first' if k in x else 'the second'}")
                else:
                    walk(x[k], y[k], f"{p}.{k}")
        elif isinstance(x, list) and isinstance(y, list):
            if len(x) != len(y):
                out.append(f"{p}: {len(x)} items against {len(y)}")
            for i, (u, v) in enumerate(zip(x, y)):
                walk(u, v, f"{p}[{i}]")
        elif x != y:
            out.append(f"{p}: {json.dumps(x)[:60]} against {json.dumps(y)[:60]}")

    walk(comparable(a), comparable(b), path)
    return out


__all__ = ["comparable", "differences", "case_problems", "record_case_fields", "VOLATILE_KEYS"]
