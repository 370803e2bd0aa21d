"""A candidate's timing stage: the baselines, the timing blocks, the parent's clock over two
request lengths, and per-call times (issue 27; DESIGN.md section 7a, "Timing a candidate").

Every timed invocation, in every arm, computes on an input set of its own that no other
invocation of its request saw, drawn with the task's own ``get_inputs()`` on the device from
the seeds :func:`~kbrepro.model.protocol.pool_seed` gives, right before the arm's request
(harness/fresh.py). Every arm of a round gets the same sets, drawn the same way in its own
process, so the ratios compare like with like; drawing happens outside the timed region and
nothing but the invocations (and the cold-L2 flush, as before) runs inside it.

* **Timed outputs, all of them, checked after the fact.** Each request keeps every output and,
  after its end event, checksums it in chunks (weighted sums and sums of |y|); the parent holds
  every invocation's checksums against those of its own eager outputs on the same set
  (:func:`~kbrepro.model.protocol.checksum_agrees`, the allowance of allclose summed over a
  chunk). An output buffer the candidate reused holds only its last writer's answer, which is
  held against that writer's set; the others count as aliased. Each round records counts, the
  worst deviation and a sample with the raw checksums (every failing invocation, up to 8, and
  2 passing ones drawn after the fact), from which the verifier derives the verdict again.
* **The parent's clock over two lengths.** After the warm block, requests of ``n1`` and
  ``n2`` invocations alternate (:data:`~kbrepro.model.protocol.CLOCK_REPEATS` each); the
  slope of the parent's clock over the two lengths cancels a request's fixed cost and is the
  time per invocation the candidate's own timer must agree with, at any request length.
Every arm keeps its outputs (eager's are the reference the candidate's are held against);
before each invocation of a baseline that replays CUDA graphs (:data:`GRAPHED`) the loop marks a
CUDA-graph step, so it may reuse its static outputs, which are kept and never read. No other arm,
and never the candidate, gets the mark: it costs host time per invocation (a launch-bound
ratio moves with it) and loads torch's compiler.

* **Per call on fresh sets**, candidate and eager alike (each call synchronised alone), with
  one output per round spot-checked in full; and on one repeated set.

What still differs between a timed and a checked call, and why it cannot matter, is written
in docs/timing.md.
"""
from __future__ import annotations

import math
import random
import secrets
import time
from typing import Any, Mapping

import numpy as np

from kbrepro.errors import CandidateFailure
from kbrepro.harness.candidate_calls import Ctx, checked, clone, first, reference, seed_for, sync
from kbrepro.harness.checks import compare
from kbrepro.harness.fresh import FreshTimer
from kbrepro.harness.wire import HELD_MAX_CHUNKS, reply_tensor
from kbrepro.model import candidates as mc
from kbrepro.model import protocol
from kbrepro.model.timing_rules import arm_orders

#: the baselines that replay CUDA graphs (torch.compile's max-autotune mode): a CUDA-graph step
#: is marked before each of their timed invocations
GRAPHED = ("compile_max_autotune",)
#: the most failing and passing invocations a round's sample records
SAMPLE_FAILING = 8
SAMPLE_PASSING = 2


def _traced(model, xs):
    import torch

    with torch.no_grad():
        return torch.jit.trace(model, tuple(clone(xs)), check_trace=False)


def baselines(c: Ctx, xs: list, ref) -> tuple[dict, dict]:
    """Callables of the baseline arms (each takes an input set) and, per arm, its build
    seconds and its check on the timing input ``xs``."""
    import torch

    arms, info = {}, {}
    for name in c.cfg.baselines:
        t0 = time.perf_counter()
        try:
            if name == "eager":
                fn = c.model
            elif name == "torchscript":
                fn = _traced(c.model, xs)
            elif name == "compile_default":
                fn = torch.compile(c.model)
            elif name == "compile_max_autotune":
                fn = torch.compile(c.model, mode="max-autotune")
            else:
                raise ValueError(f"unknown baseline {name}")
            with torch.no_grad():
                rng = seed_for(c, "timing_input")  # the random state the reference was computed after
                if rng is not None:
                    torch.manual_seed(rng)
                out = first(fn(*xs))
            sync(c.dev)
        except Exception as exc:  # a baseline that cannot run is recorded, not fatal
            info[name] = {"skipped": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"}
            continue
        info[name] = {"build_s": time.perf_counter() - t0, "compare": compare(first(ref), out.detach(), c.tol)}
        arms[name] = fn
    return arms, info


def _collect(c: Ctx) -> None:
    """Ask the child for a full collection before a timing request, outside the clock the
    parent holds around that request (the timing request then turns the collector off)."""
    c.proc.request({"cmd": "collect"}, timeout_s=c.cfg.call_timeout_s)


def _held_reply(c: Ctx, weight_seed: int) -> dict:
    """The candidate's checksums of its last fresh-input request (a request of its own, after
    the timed one and outside its clock), with weights from ``weight_seed`` (drawn by the
    parent after the outputs exist): ``checksums`` a float64 array ``(outputs, chunks, 2)``
    (one binary frame, whose size the reply's check ties to its counts), ``chunk_sizes``,
    ``written_by``."""
    rep = c.proc.request({"cmd": "held", "weight_seed": weight_seed}, timeout_s=c.cfg.call_timeout_s,
                         max_bytes=16 * HELD_MAX_CHUNKS)
    h = rep.header
    sums = np.frombuffer(rep.frames[0], dtype="<f8").reshape(h["outputs"], len(h["chunk_sizes"]), 2)
    return {"checksums": sums, "chunk_sizes": h["chunk_sizes"], "written_by": h["written_by"]}


def _candidate(c: Ctx, seed: int, n: int, flush_bytes: int, per_call: bool = False) -> tuple[Any, float]:
    """One fresh-input request of the candidate: its pool of ``n`` sets drawn from ``seed`` and
    collected (one request), then ``n`` invocations timed. Returns the reply and its time per
    invocation (ms)."""
    c.proc.request({"cmd": "pool", "seed": seed, "n": n}, timeout_s=c.cfg.call_timeout_s)
    rep = c.proc.request({"cmd": "time_fresh", "n": n, "flush": flush_bytes, "per_call": per_call,
                          "rng": seed_for(c, seed)},
                         timeout_s=c.cfg.call_timeout_s, max_bytes=64 << 20)
    ts = rep.header.get("times_ms")
    if not (isinstance(ts, list) and ts and all(isinstance(t, (int, float)) and not isinstance(t, bool) and t > 0
                                                 for t in ts)):
        raise CandidateFailure(f"a timing reply without positive times: {str(ts)[:80]}")
    return rep, float(ts[0])


def _held(cand: Mapping, ref, sizes: list, atol: float, rtol: float, rng: random.Random) -> dict:
    """Every invocation's checksums held against the reference's on the set its memory answers
    (``written_by``): counts, the worst deviation over the allowance and a sample of raw
    checksums (module docstring). ``cand["checksums"]`` and ``ref`` are float64 arrays
    ``(outputs, chunks, 2)`` (:meth:`FreshTimer.checksums`); an output whose chunk sizes differ
    from the reference's fails whole (chunk -1), and so does one held against a set the
    reference has none of. Each row is decided by
    :func:`~kbrepro.model.protocol.checksums_agree` over all its chunks at once; a failing
    row records its first failing chunk."""
    sums = np.asarray(cand.get("checksums"), dtype=np.float64).reshape(-1, len(sizes), 2) \
        if sizes and cand.get("chunk_sizes") == sizes else None
    wb = list(cand.get("written_by") or [])
    ref = np.asarray(ref, dtype=np.float64)
    n = len(wb)
    failing, sampled, worst = [], [], 0.0
    aliased = sum(1 for i, w in enumerate(wb) if w != i)
    if sums is None or sums.shape[0] != n or not sizes:
        return {"n": n, "aliased": aliased, "failing": n, "worst": 1e300,
                "sample": sorted([[i, w, -1, None, None, None, None, 0] for i, w in enumerate(wb)][:SAMPLE_FAILING])}
    w_idx = np.asarray(wb, dtype=np.int64)
    known = w_idx < ref.shape[0]
    want = np.full_like(sums, np.nan)
    want[known] = ref[w_idx[known]]
    m = np.asarray(sizes, dtype=np.float64)
    verdict = protocol.checksums_agree(sums, want, m, atol, rtol)  # (outputs, chunks): 1, 0 or -1
    bad = (verdict == 0).any(axis=1) | ~known
    for i in np.flatnonzero(bad).tolist():
        w = wb[i]
        if not known[i]:
            failing.append([i, w, -1, None, None, None, None, 0])
            worst = float("inf")
            continue
        k = int(np.flatnonzero(verdict[i] == 0)[0])
        rc, rr = _pair(sums[i, k]), _pair(want[i, k])
        failing.append([i, w, k, rc[0], rc[1], rr[0], rr[1], sizes[k]])
        if None in rc or None in rr:  # a finite output where the reference is not: no ratio, failing
            worst = float("inf")
        else:  # the larger deviation of the two sums over the allowance (at least 1 when failing)
            allow = sizes[k] * atol + rtol * rc[1] + protocol.CHECKSUM_FLOAT_SLACK * (rc[1] + rr[1]) + 1e-300
            worst = max(worst, abs(rc[0] - rr[0]) / allow, abs(rc[1] - rr[1]) / allow)
    passing = np.flatnonzero(~bad).tolist()
    for i in rng.sample(passing, min(SAMPLE_PASSING, len(passing))):  # the draw picks by position only
        rc, rr = _pair(sums[i, 0]), _pair(want[i, 0])
        sampled.append([i, wb[i], 0, rc[0], rc[1], rr[0], rr[1], sizes[0]])
    sample = failing[:SAMPLE_FAILING] + sampled
    return {"n": n, "aliased": aliased, "failing": len(failing), "worst": worst if worst != float("inf") else 1e300,
            "sample": sorted(sample)}


def _pair(v) -> list:
    """A chunk's two float64 sums as JSON numbers, None where not finite."""
    return [float(x) if math.isfinite(x) else None for x in v.tolist()]


def block(c: Ctx, arms: dict, ft: FreshTimer, *, l2: str, rounds: int, flush_bytes: int, io_bytes: int,
          budget: int) -> dict:
    """One timing block (warm or cold L2): every arm once per round in a seeded shuffled order,
    each on fresh sets (module docstring); the candidate's outputs held against eager's. No
    request holds more than ``budget`` bytes of sets (its warmups, the calibration and the
    timed requests; at least one set)."""
    import torch

    cfg = c.cfg
    names = [*arms, "candidate"]
    flush = torch.empty(flush_bytes, dtype=torch.uint8, device=c.dev) if flush_bytes else None
    warm = protocol.pool_seed(cfg.timing_seed, f"{l2}-warmup", 0)
    nw = protocol.invocations_with_pool(max(1, cfg.warmups), io_bytes, budget)
    pool = ft.draw_pool(c.task, warm, nw, separate=False)
    for name, fn in arms.items():
        ft.region(fn, pool, nw, flush, graph_steps=name in GRAPHED, rng=seed_for(c, warm))
    del pool
    _candidate(c, warm, nw, flush_bytes)
    # invocations per request: enough that eager fills TARGET_REQUEST_MS (timed here, on fresh
    # sets), capped so that every invocation's inputs and output fit the pool
    cal = ft.draw_pool(c.task, protocol.pool_seed(cfg.timing_seed, f"{l2}-calibration", 0),
                       protocol.invocations_with_pool(cfg.invocations_per_pair, io_bytes, budget), separate=False)
    eager_ms = ft.region(arms["eager"], cal, len(cal), flush)[0] if "eager" in arms else None
    del cal
    inv = protocol.invocations_with_pool(protocol.invocations_per_request(cfg.invocations_per_pair, eager_ms),
                                         io_bytes, budget)
    # the orders and the draw the verifier derives again (model.protocol, model.timing_rules: one copy)
    orders = arm_orders(names, protocol.block_order_seed(cfg.order_seed, l2))
    pick = random.Random(protocol.spot_check_seed(cfg.order_seed, l2))
    rows = []
    for r in range(rounds):
        order = next(orders)
        seed = protocol.pool_seed(cfg.timing_seed, l2, r)
        times, host, cand, ref, sizes, chk_ms = {}, {}, None, None, None, 0.0
        weight_seed, eager_ys = secrets.randbits(62), None
        for name in order:
            if name == "candidate":
                rep, times[name] = _candidate(c, seed, inv, flush_bytes)
                host[name] = rep.host_ms
                cand = _held_reply(c, weight_seed)
            else:
                pool = ft.draw_pool(c.task, seed, inv, separate=False)
                times[name], ys = ft.region(arms[name], pool, inv, flush, graph_steps=name in GRAPHED,
                                            rng=seed_for(c, seed))
                if name == "eager":
                    eager_ys = ys
                del pool, ys
        t0 = time.perf_counter()
        ref, sizes = ft.checksums(eager_ys or [], weight_seed)  # eager always runs (model/protocol.py)
        chk_ms = (time.perf_counter() - t0) * 1e3
        del eager_ys
        outputs = _held(cand, ref, sizes, c.tol.atol, c.tol.rtol, pick)
        rows.append({"order": order, "times_ms": times, "host_ms": host, "outputs": outputs, "checksum_ms": chk_ms})
    proto = {"mode": "events", "warmups": nw, "rounds": rounds, "invocations_per_pair": inv,
             "order_seed": protocol.block_order_seed(cfg.order_seed, l2), "l2": l2, "inputs": "fresh",
             "calibration_ms": eager_ms, "io_bytes": io_bytes, "pool_bytes": budget}
    blk = {"id": f"{c.spec.name}/{l2}", "candidate": c.spec.name, "l2": l2, "mode": "events", "protocol": proto,
           "arms": names, "rounds": rows}
    if flush_bytes:
        blk["flush_bytes"] = flush_bytes
    checked(mc.Block, blk, "timing block")
    return blk


def clock(c: Ctx, warm: Mapping) -> dict:
    """The parent's clock over requests of two lengths (module docstring): ``n1`` the warm
    block's invocations per request, ``n2`` from :func:`~kbrepro.model.protocol.clock_extra_invocations`
    on the block's median reported time (capped by the pool's bytes), alternated
    :data:`~kbrepro.model.protocol.CLOCK_REPEATS` times each."""
    cfg = c.cfg
    n1 = warm["protocol"]["invocations_per_pair"]
    med = protocol.roofline_median_ms([r["times_ms"]["candidate"] for r in warm["rounds"]])
    n2 = min(protocol.clock_extra_invocations(n1, med),
             protocol.invocations_with_pool(protocol.MAX_CLOCK_INVOCATIONS, warm["protocol"]["io_bytes"],
                                            warm["protocol"]["pool_bytes"]))
    n2 = max(n2, n1 + 1)
    out = {"n1": n1, "n2": n2, "host1_ms": [], "host2_ms": [], "reported1_ms": [], "reported2_ms": []}
    for k in range(protocol.CLOCK_REPEATS):
        for n, key in ((n1, "1"), (n2, "2")):
            rep, t = _candidate(c, protocol.pool_seed(cfg.timing_seed, f"clock{key}", k), n, 0)
            out[f"host{key}_ms"].append(rep.host_ms)
            out[f"reported{key}_ms"].append(t)
    return out


def per_call(c: Ctx, ft: FreshTimer, xs_timing: list, budget: int, io_bytes: int) -> dict:
    """Per-call times (each call synchronised alone) on fresh sets, of the candidate and of
    eager on the same sets, with one candidate output per round (its index drawn by the
    parent's seeded generator, never sent before the candidate answered) checked in full
    against the parent's reference; and on the one repeated timing input. A round's sets come
    in requests of at most ``budget`` bytes (``io_bytes`` a set; the first request's seed is
    the round's, as when one request held them all)."""
    cfg = c.cfg
    k = cfg.fresh_sets
    fit = protocol.invocations_with_pool(k, io_bytes, budget)
    rng = random.Random(cfg.order_seed + 4)
    fresh, eager, spots, repeat = [], [], [], []
    for r in range(cfg.fresh_rounds):
        j = rng.randrange(k)
        times, eager_times = [], []
        for start in range(0, k, fit):
            n = min(fit, k - start)
            seed = protocol.pool_seed(cfg.timing_seed, f"percall{start}" if start else "percall", r)
            rep, _ = _candidate(c, seed, n, 0, per_call=True)
            times += list(rep.header.get("times_ms") or [])
            pool = ft.draw_pool(c.task, seed, n, separate=False)
            eager_times += ft.per_call(c.model, pool, seed_for(c, seed))
            if start <= j < start + n:
                spots.append(_spot(c, pool, seed, r, j, start, n))
            del pool
        fresh.append({"round": r, "times_ms": times})
        checked(mc.CallRound, fresh[-1], "per-call times")
        eager.append({"round": r, "times_ms": eager_times})
        _collect(c)
        rep = c.proc.request({"cmd": "time", "ids": ["timing"], "n": k, "per_call": True},
                             timeout_s=cfg.call_timeout_s)
        repeat.append({"round": r, "times_ms": list(rep.header.get("times_ms") or [])})
        checked(mc.CallRound, repeat[-1], "per-call times")
    return {"fresh": fresh, "eager_fresh": eager, "repeat": repeat, "spot_checks": spots, "sets_per_round": k}


def _spot(c: Ctx, pool: list, seed: int, r: int, j: int, start: int, n: int) -> dict:
    """The spot check of round ``r``: the candidate's output of call ``j`` (of the round; the
    request's calls ``start`` to ``start + n``) against the parent's reference on the set its
    memory answers."""
    size = first(c.refs[next(iter(c.refs))]) if c.refs else None
    nbytes = int(size.numel() * size.element_size()) if size is not None else 1 << 30
    got = c.proc.request({"cmd": "output", "index": j - start}, timeout_s=c.cfg.call_timeout_s,
                         max_bytes=2 * nbytes + 4096)
    w = got.header.get("written_by")  # a reused output buffer holds the answer of the last call that wrote it
    w = w if isinstance(w, int) and not isinstance(w, bool) and j - start <= w < n else j - start
    ref = first(reference(c.model, pool[w], seed_for(c, seed, w)))  # the random state of the candidate's call w
    try:
        out = reply_tensor(got.header.get("tensor") or {}, iter(got.frames), str(ref.device), 2 * nbytes + 4096)
        cmp = compare(ref, out, c.tol)
    except ValueError as exc:
        cmp = {"shape_match": False, "official": {"pass": False}, "error": str(exc)[:200]}
    return {"round": r, "index": j, "written_by": start + w, "compare": cmp}


def timing_stage(c: Ctx, timing: dict, blocks: list, xs: list, ref, bandwidth_gbps) -> None:
    """The whole timing stage (harness/candidate.py): baselines, the warm block, the clock,
    the cold block, per-call times and the roofline's inputs, written into ``timing`` and
    ``blocks`` as they finish."""
    import torch

    ft = FreshTimer(torch, c.dev)
    t0 = time.perf_counter()

    def say(what: str) -> None:
        c.progress(f"{c.spec.name}: timing: {what} ({time.perf_counter() - t0:.1f} s)")

    arms, info = baselines(c, xs, ref)
    say("baselines built")
    timing["baselines"] = info
    out_bytes = sum(int(r.numel() * r.element_size()) for r in (ref if isinstance(ref, tuple) else (ref,)))
    in_bytes = sum(int(x.numel() * x.element_size()) for x in xs if isinstance(x, torch.Tensor))
    io = in_bytes + out_bytes
    # what the checking pass and the builds left in both processes' caches goes back to the
    # device first; the requests' sets then take a share of what is free (protocol.pool_bytes)
    c.proc.request({"cmd": "trim"}, timeout_s=c.cfg.call_timeout_s)
    torch.cuda.empty_cache()
    budget = protocol.pool_bytes(int(torch.cuda.mem_get_info(torch.device(c.dev))[0]))
    blocks.append(block(c, arms, ft, l2="warm", rounds=c.cfg.rounds, flush_bytes=0, io_bytes=io, budget=budget))
    say("warm block")
    timing["clock"] = clock(c, blocks[0])
    say("clock")
    if c.cfg.cold_l2:
        l2 = int(torch.cuda.get_device_properties(0).L2_cache_size)
        blocks.append(block(c, arms, ft, l2="cold", rounds=c.cfg.cold_rounds, flush_bytes=2 * l2,
                            io_bytes=io, budget=budget))
    say("cold block")
    timing["per_call"] = per_call(c, ft, xs, budget, io)
    say("per call")
    med = protocol.roofline_median_ms([r["times_ms"]["candidate"] for r in blocks[0]["rounds"]])
    timing["roofline"] = {"bytes_moved": in_bytes + out_bytes, "median_ms": med, "bandwidth_gbps": bandwidth_gbps}


__all__ = ["baselines", "block", "clock", "per_call", "timing_stage"]
