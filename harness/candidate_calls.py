"""A candidate's checked calls: the parent's side of the checking pass, the re-drawn weights and
the extra shapes (harness/candidate.py runs them as stages; harness/candidate_timing.py times).

Every call runs in the candidate's child (harness/isolate.py; the child's side is
harness/candidate_server.py) on inputs the parent drew from the same seeds (harness/kbtask.py);
the parent compares each output with its own reference under the official predicate and records
the case (:func:`case`). Each part of the record is held to the model's typed record as it is
written (:func:`checked`): a value the model refuses that the child reported is the candidate's
malformed reply, one the parent computed a defect of ours.
"""
from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from kbrepro.errors import CandidateFailure, InvalidResultsError
from kbrepro.harness import jsonio, kbtask
from kbrepro.harness.checks import CHUNK_ELEMENTS, Tolerance, compare
from kbrepro.harness.isolate import CandidateProcess
from kbrepro.harness.wire import reply_tensor
from kbrepro.model import candidates as mc
from kbrepro.model import protocol, strict
from kbrepro.model import sizes as msizes
from kbrepro.model.protocol import CandidateConfig


@dataclass(frozen=True)
class CandidateSpec:
    """A candidate and its task: ``name`` (bundle-safe), ``source`` (the candidate file's
    bytes), ``task_path`` (the KernelBench path in the pin) and ``task_source`` (its bytes)."""

    name: str
    source: bytes
    task_path: str
    task_source: bytes


@dataclass
class Ctx:
    spec: CandidateSpec
    cfg: CandidateConfig
    dev: str
    tol: Tolerance
    proc: CandidateProcess
    task: Any
    model: Any
    progress: Callable[[str], None]
    obs: dict = field(default_factory=dict)
    refs: dict = field(default_factory=dict)
    #: whether the task's forward draws random numbers (found before the checking pass): then,
    #: and only then, every checked call and timed request starts from a seeded random state
    #: (:func:`seed_for`); for any other task the random state tells no call from another
    seeded: bool = False
    #: the parent's official draws kept for sets drawn again (the child keeps its own)
    sets: kbtask.SetCache = field(default_factory=kbtask.SetCache)


def seed_for(c: "Ctx", tag: str, offset: int = 0) -> int | None:
    """The seed of torch's generators before the call ``tag`` names (its reference's, or a
    timed request's, by its pool seed as an int: a seed derived from it, so that the random
    state at entry does not hand the candidate its inputs' seed), plus ``offset`` (a per-call
    request's call index); None where the task draws no random numbers in its forward
    (:func:`draws_random`)."""
    if not c.seeded:
        return None
    return protocol.call_rng_seed(f"request/{tag}" if isinstance(tag, int) else tag) + offset


def _copy_or_self(model):
    """A deep copy of ``model``; the model itself where it cannot be copied (a module holding
    something deepcopy refuses: judged on the model, as before copies, rather than raising)."""
    try:
        return copy.deepcopy(model)
    except Exception:  # noqa: BLE001 - any refusal of deepcopy
        return model


def draws_random(model, xs) -> bool:
    """Whether the task's forward draws random numbers: the outputs on ``xs`` of two copies of
    ``model``, each called once, after two different seeds, differ (NaN equal to NaN). The
    copies keep ``model`` and the process's random state as they were (a forward that draws
    only on its first call, or that updates running statistics, is judged as the child's
    model will first run). A forward that differs from run to run for another reason (float
    atomics) counts too: seeding its calls costs nothing."""
    import torch

    with torch.random.fork_rng(devices=list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []):
        a = reference(_copy_or_self(model), xs, 1)
        b = reference(_copy_or_self(model), xs, 2)
    a, b = (a if isinstance(a, tuple) else (a,)), (b if isinstance(b, tuple) else (b,))
    for x, y in zip(a, b):
        if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
            continue
        if x.shape != y.shape or x.dtype != y.dtype:
            return True
        same = (x == y)
        if x.is_floating_point() or x.is_complex():
            same = same | (torch.isnan(x) & torch.isnan(y))
        if not bool(same.all()):
            return True
    return False




def digest(x) -> str | None:
    return kbtask.fingerprint(x)


def clone(xs):
    import torch

    return [x.clone() if isinstance(x, torch.Tensor) else x for x in xs]


def ref_range(ref) -> list:
    """The smallest and largest finite values of ``ref`` (floats; ``[None, None]`` where none
    is finite), computed a chunk at a time (harness.checks.CHUNK_ELEMENTS): a float64 copy of a
    whole 7.5 GB output (KernelBench 1/36 at its own size) once ran the parent out of GPU memory."""
    import torch

    r = ref.detach().reshape(-1)
    lo = hi = None
    for i in range(0, r.numel(), CHUNK_ELEMENTS):
        part = r[i:i + CHUNK_ELEMENTS].double()
        f = part[torch.isfinite(part)]
        if f.numel():
            a, b = float(f.min()), float(f.max())
            lo, hi = (a, b) if lo is None else (min(lo, a), max(hi, b))
    return [lo, hi]


def first(y):
    return y[0] if isinstance(y, (tuple, list)) else y


def sync(dev: str) -> None:
    import torch

    if dev.startswith("cuda"):
        torch.cuda.synchronize()


#: fields of a record whose values the candidate's child reports (everything else the parent
#: computes): a value the model refuses there is the candidate's malformed reply, elsewhere ours
CHILD_FIELDS = frozenset({"digests_before", "digests_after", "threads_before", "threads_after", "call_ms",
                          "stream_wait_ms", "device_wait_ms", "flags_after_call", "output", "held_over", "build_s",
                          "flags_before", "flags_after_build", "threads", "torch", "times_ms", "kernels",
                          "marker_stream"})


def checked(cls: type, doc: Any, what: str) -> Any:
    """``doc`` (a part of the record being written) as the model's typed ``cls``. Raises
    CandidateFailure where the model refuses a value the child reported (a malformed reply)
    and InvalidResultsError where it refuses one the harness computed (a defect of ours)."""
    try:
        plain = json.loads(jsonio.dumps(doc))
    except ValueError as exc:  # a non-finite float: only a child's reply carries one
        raise CandidateFailure(f"a malformed reply ({what}): {exc}") from None
    rec, problems = strict.build(cls, plain)
    if not problems:
        return rec
    p = problems[0]
    fields = set(re.findall(r"\.([A-Za-z_][A-Za-z0-9_]*)", p.path))
    if fields & CHILD_FIELDS:
        raise CandidateFailure(f"a malformed reply ({what}): {p.path[2:]} {p.message}"[:300])
    raise InvalidResultsError(f"internal error: the harness wrote a {what} its own model refuses: {p}"[:400],
                              "report this as a bug (KBREPRO_DEBUG=1 shows where)")


def failing(ref) -> dict:
    n = int(ref.numel())
    return {"shape_match": False, "element_count": n, "bit_identical_count": 0,
            "official": {"pass": False, "failing_count": n, "worst_ratio": None},
            "legacy": {"pass": False, "failing_count": n, "worst_ratio": None}}


def worst_compare(cmps: Sequence[Mapping]) -> Mapping:
    """The record of a case of several outputs (``harness.checks.compare`` of each): the failing
    one with the most failing elements that are not NaN pairs, then the most failing elements
    (a NaN-only failure of one output must not stand for a wrong other one: protocol 2 passes a
    NaN-only case); the first where every output passes."""
    bad = [x for x in cmps if not x["official"]["pass"]]
    if not bad:
        return cmps[0]
    return max(bad, key=lambda x: (x["official"]["failing_count"] - (x.get("nonfinite") or {}).get("nan_both", 0),
                                   x["official"]["failing_count"]))


def case(c: Ctx, cid: str, kind: str, xs_parent: list, ref, *, set_id: str, model: str = "main",
          poison: int | None = None, profile: bool = False, others: Mapping | None = None,
          rng: int | None = None) -> dict:
    """One call of the candidate on the child's set ``set_id`` (the same values as
    ``xs_parent``), compared with ``ref`` (a tensor, or a tuple of them: every output is
    compared, the case's record is the worst), torch's generators seeded with ``rng`` right
    before it (the seed ``ref`` was computed after: :func:`reference`). Appends the case to the
    observations. Raises
    CandidateFailure when the parent's own reference changed during the call (a child that
    writes into the parent's memory)."""
    import torch

    refs = tuple(ref) if isinstance(ref, (tuple, list)) else (ref,)
    ref = refs[0]
    before = [kbtask.fingerprint(r) for r in refs]
    req = {"cmd": "call", "id": set_id, "model": model, "profile": profile, "case": cid}
    if rng is not None:
        req["rng"] = int(rng)
    if poison is not None:
        req.update(poison=poison, poison_chunk=int(ref.numel() * ref.element_size()))
    nbytes = sum(int(r.numel() * r.element_size()) for r in refs if isinstance(r, torch.Tensor))
    rep = c.proc.request(req, timeout_s=c.cfg.call_timeout_s, max_bytes=2 * nbytes + 4096)
    if [kbtask.fingerprint(r) for r in refs] != before:
        raise CandidateFailure("the parent's reference changed while the candidate ran: its process wrote into ours")
    h = rep.header
    outs = h.get("outputs") or []
    o = outs[0] if outs else {"type": "nothing", "plain": False}
    case = {"id": cid, "kind": kind, "set": set_id, "model": model, "reference_device": str(ref.device),
            "reference_range": ref_range(ref), "digests_parent": [digest(x) for x in xs_parent],
            "output": {k: o.get(k) for k in ("type", "plain", "device", "layout", "grad_fn", "digest")},
            "output_count": len(outs), "reference_count": len(refs)}
    for k in ("digests_before", "digests_after", "threads_before", "threads_after", "call_ms", "stream_wait_ms",
              "device_wait_ms", "flags_after_call"):
        case[k] = h.get(k)
    case["host_ms"] = rep.host_ms
    earlier = {e.get("id") for e in c.obs.get("cases", [])}
    case["held_over"] = next((o["held_over"] for o in outs if o.get("held_over") in earlier), None)
    if poison is not None:
        case["poison_byte"] = poison
    frames = iter(rep.frames)
    got = []
    left = 2 * nbytes + 4096  # what the reply may hold in all, shared or piped (the request's max_bytes)
    for oi in outs:
        try:
            got.append(reply_tensor(oi["tensor"], frames, str(ref.device), left) if "tensor" in oi else None)
            left -= int(got[-1].numel() * got[-1].element_size()) if got[-1] is not None else 0
        except ValueError as exc:
            case["output"]["unreadable"] = str(exc)[:200]
            got.append(None)
    if len(got) != len(refs) or any(g is None for g in got):
        case["compare"] = failing(ref)
    else:
        cmps = [compare(r.detach(), g.to(r.device), c.tol) for r, g in zip(refs, got)]
        case["compare"] = worst_compare(cmps)
        out = got[0]
        if not case["compare"]["official"]["pass"] and others:
            firsts = {k: (r[0] if isinstance(r, tuple) else r) for k, r in others.items()}
            case["matches_other"] = sorted(k for k, r in firsts.items() if k != cid and tuple(r.shape) == tuple(out.shape)
                                           and r.dtype == out.dtype and bool(torch.allclose(r, out, atol=c.tol.atol,
                                                                                            rtol=c.tol.rtol)))
    checked(mc.Case, case, f"case {cid}")
    if profile and h.get("kernels") is not None:
        prof = {"kernels": h.get("kernels") or [], "marker_stream": h.get("marker_stream")}
        checked(mc.Profile, prof, "profiled call")
        c.obs["profile"] = prof
    c.obs.setdefault("cases", []).append(case)
    return case


def draw(c: Ctx, set_id: str, seed: int, dist: str, *, into: str | None = None, task=None, overrides=None,
         keep: tuple = ()):
    """The set ``set_id`` drawn in the child (or its values written ``into`` an earlier set's
    tensors) and in the parent at the same time (each on its own CPU generator, the same
    bits), whose copy is returned. The child first drops every set it
    holds but ``keep`` (and ``into``): no later call reads them, and a level-1 task's sets of
    16 GiB each ran an honest candidate's process out of memory (KernelBench 1/45)."""
    req = {"cmd": "draw", "id": set_id, "seed": seed, "distribution": dist, "keep": [*keep, *([into] if into else [])]}
    if into:
        req["into"] = into
    if overrides:
        req["overrides"] = dict(overrides)
    return c.proc.request_while(req, lambda: kbtask.draw_inputs(task or c.task, seed, dist, c.dev, c.sets if task is None else None),
                                timeout_s=c.cfg.call_timeout_s)[1]


def reference(model, xs, rng: int | None = None):
    """The task's outputs on copies of ``xs``: a tensor, or a tuple of them; torch's generators
    seeded with ``rng`` right before the call where given
    (:func:`~kbrepro.model.protocol.call_rng_seed`)."""
    import torch

    with torch.no_grad():
        args = clone(xs)
        if rng is not None:
            torch.manual_seed(int(rng))
        y = model(*args)
    return tuple(y) if isinstance(y, (tuple, list)) else y


def checking_pass(c: Ctx) -> None:
    refs = c.refs
    first = None
    for s in c.cfg.seeds:
        for d in c.cfg.distributions:
            sid = f"s{s}/{d}"
            xs = draw(c, sid, s, d, keep=(first[0],) if first else ())
            if first is None:
                c.seeded = draws_random(c.model, xs)
            rng = seed_for(c, sid)
            refs[sid] = reference(c.model, xs, rng)
            case(c, sid, d, xs, refs[sid], set_id=sid, others=refs, rng=rng)
            first = first or (sid, s, d)
    sid0, s0, d0 = first
    s1 = c.cfg.seeds[1] if len(c.cfg.seeds) > 1 else s0 + 1
    xs = draw(c, sid0, s1, "official", into=sid0)  # new values in the first set's tensors
    key = protocol.same_buffers_reference(c.cfg)
    refs.setdefault(key, reference(c.model, xs, seed_for(c, key)))
    case(c, "same_buffers", "same_buffers", xs, refs[key], set_id=sid0, others=refs, rng=seed_for(c, key))
    xs = draw(c, "repeat", s0, d0)  # the first set is no longer read
    rng0 = seed_for(c, sid0)  # the cases below are held against the first set's reference
    case(c, "repeat", "repeat", xs, refs[sid0], set_id="repeat", others=refs, rng=rng0)
    for i, byte in enumerate(c.cfg.poison_bytes):
        case(c, f"poison{i}", "poison", xs, refs[sid0], set_id="repeat", poison=byte, others=refs, rng=rng0)
    case(c, "profiled", "profiled", xs, refs[sid0], set_id="repeat", profile=True, others=refs, rng=rng0)


def after_timing(c: Ctx, task_src: bytes) -> None:
    import torch

    s0 = c.cfg.seeds[0]
    # re-drawn weights: ModelNew and Model both built after another seed
    other = c.proc.request_while({"cmd": "model", "name": "redrawn", "seed": c.cfg.redrawn_seed},
                                 lambda: kbtask.build_model(c.task, c.task.Model, c.cfg.redrawn_seed, c.dev),
                                 timeout_s=c.cfg.call_timeout_s)[1]
    xs = draw(c, "redrawn", s0, "official")
    rng = seed_for(c, "redrawn_weights")
    case(c, "redrawn_weights", "redrawn_weights", xs, reference(other, xs, rng), set_id="redrawn", model="redrawn",
         rng=rng)
    del other
    shapes = [tuple(d.items()) for d in protocol.checked_extra_shapes(
        [dict(s) for s in c.cfg.extra_shapes], c.cfg.no_extra_shape, kbtask.size_globals(c.task))]
    c.obs["extra_shapes"] = [msizes.to_json(dict(s)) for s in shapes]  # a tuple as a JSON array
    for i, ov in enumerate(shapes):
        ov = dict(ov)
        t = kbtask.load_task(task_src, f"kbrepro_task_shape{i}")
        kbtask.apply_overrides(t, {**dict(c.cfg.sizes), **ov})
        m = c.proc.request_while({"cmd": "model", "name": f"shape{i}", "seed": s0, "overrides": ov},
                                 lambda: kbtask.build_model(t, t.Model, s0, c.dev), timeout_s=c.cfg.call_timeout_s)[1]
        xs = draw(c, f"shape{i}", s0, "official", task=t, overrides=ov)
        rng = seed_for(c, f"shape{i}")
        case(c, f"shape{i}", "extra_shape", xs, reference(m, xs, rng), set_id=f"shape{i}", model=f"shape{i}", rng=rng)
        del m, xs
        torch.cuda.empty_cache() if c.dev.startswith("cuda") else None


__all__ = ["CandidateSpec", "Ctx", "seed_for", "draws_random", "case", "worst_compare", "draw", "reference", "checking_pass", "after_timing", "checked", "first", "sync", "clone",
           "CHILD_FIELDS"]
