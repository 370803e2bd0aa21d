"""The KernelBench-candidate study kind: check, time and trace one ``ModelNew`` against its task.

:func:`run_candidate` takes a candidate file's bytes and the pinned task file's bytes and
returns one JSON-ready record (``candidates.json``, schema ``kbrepro/candidates``): what the
harness observed, the verdicts of :mod:`kbrepro.harness.cheats` derived from it, the timing
blocks, and the provenance of what the candidate built. Steps, in order:

1. **build** in a spawned child (:class:`~kbrepro.harness.isolate.CandidateProcess`): task and
   candidate from bytes, ``ModelNew`` after ``torch.manual_seed(seed)`` with the task's
   ``get_init_inputs()`` (KernelBench's order), precision flags recorded before the import
   and restored after the build; the child's extension and Triton cache folders are ours;
   the parent's clock gives the compile time, kept apart from every timing;
2. **checking pass**: every seed x input distribution, then the same values written into the
   first set's tensors, a repeat in new tensors, two calls after poisoning the allocator's
   free memory with different bytes, one profiled call; each call's output compared by the
   parent with its own reference (``Model`` with the same init seed, on its own draw of the
   same inputs) under the official predicate, ``torch.allclose(reference, candidate)``;
3. **timing**: rounds of the arms in a shuffled order (``random.Random(order_seed)``), the
   baselines (eager, TorchScript, ``torch.compile`` default and max-autotune) timed here with
   CUDA events, the candidate timed in its child with CUDA events and clocked here around each
   request; warm L2, then cold L2 (a flush of ``flush_bytes`` written before every invocation,
   inside the timed region, in every arm); then per-call times on fresh device-drawn input
   sets with one output picked after each round and checked, and on one repeated set;
4. re-drawn weights and extra shapes (size globals of the task overridden), each checked;
5. provenance: every file of the extension build (sources, ``build.ninja`` with the exact
   nvcc and host-compiler command lines, the ``.so``), the cubins and SASS inside it
   (``cuobjdump``) with FTZ evidence, Triton's cache (cubin, PTX, metadata), tool versions.

Raises nothing for the candidate's failures (they are its verdicts); raises
EnvironmentUnavailableError where ``device`` is CUDA and none is present.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from kbrepro.errors import CandidateFailure, InvalidResultsError
from kbrepro.harness import cheats, jsonio, kbtask
from kbrepro.harness.checks import Tolerance, compare
from kbrepro.harness.isolate import CandidateProcess, frame_tensor
from kbrepro.model import candidates as mc
from kbrepro.model import protocol, strict
from kbrepro.model.protocol import BASELINES, PROFILES, CandidateConfig  # noqa: F401 (the engine's names)

#: the largest provenance file copied into a bundle, and the most per candidate
MAX_PROVENANCE_FILE = 32 * 1024 * 1024
MAX_PROVENANCE_TOTAL = 96 * 1024 * 1024
MAX_PROVENANCE_FILES = 500
#: build outputs never copied (object files are the .so's inputs; the .so is kept; ninja's own
#: logs and dependency databases hold machine paths and no evidence)
_SKIP_SUFFIXES = (".o", ".d", ".lock", ".pyc", ".ninja_deps", ".ninja_log")


@dataclass(frozen=True)
class CandidateSpec:
    """A candidate and its task: ``name`` (bundle-safe), ``source`` (the candidate file's
    bytes), ``task_path`` (the KernelBench path in the pin) and ``task_source`` (its bytes)."""

    name: str
    source: bytes
    task_path: str
    task_source: bytes


@dataclass
class _Ctx:
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


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _digest(x) -> str | None:
    return kbtask.fingerprint(x)


def _clone(xs):
    import torch

    return [x.clone() if isinstance(x, torch.Tensor) else x for x in xs]


def _ref_range(ref) -> list:
    import torch

    r = ref.detach().double()
    f = r[torch.isfinite(r)]
    return [float(f.min()), float(f.max())] if f.numel() else [None, None]


def _first(y):
    return y[0] if isinstance(y, (tuple, list)) else y


def _sync(dev: str) -> None:
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


def _failing(ref) -> dict:
    n = int(ref.numel())
    return {"shape_match": False, "element_count": n, "bit_identical_count": 0,
            "official": {"pass": False, "failing_count": n, "worst_ratio": None},
            "legacy": {"pass": False, "failing_count": n, "worst_ratio": None}}


def _case(c: _Ctx, cid: str, kind: str, xs_parent: list, ref, *, set_id: str, model: str = "main",
          poison: int | None = None, profile: bool = False, others: Mapping | None = None) -> dict:
    """One call of the candidate on the child's set ``set_id`` (the same values as
    ``xs_parent``), compared with ``ref`` (a tensor, or a tuple of them: every output is
    compared, the case's record is the worst). Appends the case to the observations. Raises
    CandidateFailure when the parent's own reference changed during the call (a child that
    writes into the parent's memory)."""
    import torch

    refs = tuple(ref) if isinstance(ref, (tuple, list)) else (ref,)
    ref = refs[0]
    before = [kbtask.fingerprint(r) for r in refs]
    req = {"cmd": "call", "id": set_id, "model": model, "profile": profile, "case": cid}
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
            "reference_range": _ref_range(ref), "digests_parent": [_digest(x) for x in xs_parent],
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
    for oi in outs:
        raw = next(frames, None) if "tensor" in oi else None
        try:
            got.append(frame_tensor(oi["tensor"], raw) if raw is not None else None)
        except ValueError as exc:
            case["output"]["unreadable"] = str(exc)[:200]
            got.append(None)
    if len(got) != len(refs) or any(g is None for g in got):
        case["compare"] = _failing(ref)
    else:
        cmps = [compare(r.detach(), g.to(r.device), c.tol) for r, g in zip(refs, got)]
        case["compare"] = next((x for x in cmps if not x["official"]["pass"]), cmps[0])
        out = got[0].to(ref.device)
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


def _draw(c: _Ctx, set_id: str, seed: int, dist: str, *, into: str | None = None, task=None, overrides=None):
    req = {"cmd": "draw", "id": set_id, "seed": seed, "distribution": dist}
    if into:
        req["into"] = into
    if overrides:
        req["overrides"] = dict(overrides)
    c.proc.request(req, timeout_s=c.cfg.call_timeout_s)
    return kbtask.draw_inputs(task or c.task, seed, dist, c.dev)


def _reference(model, xs):
    """The task's outputs on copies of ``xs``: a tensor, or a tuple of them."""
    import torch

    with torch.no_grad():
        y = model(*_clone(xs))
    return tuple(y) if isinstance(y, (tuple, list)) else y


def _checking_pass(c: _Ctx) -> None:
    refs = c.refs
    first = None
    for s in c.cfg.seeds:
        for d in c.cfg.distributions:
            sid = f"s{s}/{d}"
            xs = _draw(c, sid, s, d)
            refs[sid] = _reference(c.model, xs)
            _case(c, sid, d, xs, refs[sid], set_id=sid, others=refs)
            first = first or (sid, s, d)
    sid0, s0, d0 = first
    s1 = c.cfg.seeds[1] if len(c.cfg.seeds) > 1 else s0 + 1
    xs = _draw(c, sid0, s1, "official", into=sid0)  # new values in the first set's tensors
    key = f"s{s1}/official"
    refs.setdefault(key, _reference(c.model, xs))
    _case(c, "same_buffers", "same_buffers", xs, refs[key], set_id=sid0, others=refs)
    xs = _draw(c, "repeat", s0, d0)
    _case(c, "repeat", "repeat", xs, refs[sid0], set_id="repeat", others=refs)
    for i, byte in enumerate(c.cfg.poison_bytes):
        _case(c, f"poison{i}", "poison", xs, refs[sid0], set_id="repeat", poison=byte, others=refs)
    _case(c, "profiled", "profiled", xs, refs[sid0], set_id="repeat", profile=True, others=refs)


def _traced(model, xs):
    import torch

    with torch.no_grad():
        return torch.jit.trace(model, tuple(_clone(xs)), check_trace=False)


def _baselines(c: _Ctx, xs: list, ref) -> tuple[dict, dict]:
    """Callables of the baseline arms and, per arm, its build seconds and its check."""
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
                out = _first(fn(*xs))
            _sync(c.dev)
        except Exception as exc:  # a baseline that cannot run is recorded, not fatal
            info[name] = {"skipped": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"}
            continue
        info[name] = {"build_s": time.perf_counter() - t0, "compare": compare(_first(ref), out.detach(), c.tol)}
        arms[name] = (lambda f: (lambda: f(*xs)))(fn)
    return arms, info


def _collect(c: "_Ctx") -> None:
    """Ask the child for a full collection before a timing request, outside the clock the
    parent holds around that request (the timing request then turns the collector off)."""
    c.proc.request({"cmd": "collect"}, timeout_s=c.cfg.call_timeout_s)


def _time_local(fn, n: int, flush=None) -> float:
    import torch

    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.no_grad():
        a.record()
        for i in range(n):
            if flush is not None:
                flush.fill_(i & 0xFF)
            fn()
        b.record()
    b.synchronize()
    return a.elapsed_time(b) / n


def _block(c: _Ctx, arms: dict, *, l2: str, rounds: int, flush_bytes: int) -> dict:
    import torch

    cfg = c.cfg
    names = [*arms, "candidate"]
    flush = torch.empty(flush_bytes, dtype=torch.uint8, device=c.dev) if flush_bytes else None
    with torch.no_grad():
        for fn in arms.values():
            for _ in range(cfg.warmups):
                fn()
    _collect(c)
    c.proc.request({"cmd": "time", "ids": ["timing"], "n": cfg.warmups, "flush": flush_bytes},
                   timeout_s=cfg.call_timeout_s)
    # invocations per timed region: at least the profile's, and enough that eager PyTorch (timed
    # here, by the parent) fills TARGET_REQUEST_MS, so that a request's fixed cost (pipe, JSON,
    # synchronisation: a few tenths of a ms) is small beside the time a candidate reports
    eager_ms = _time_local(arms["eager"], cfg.invocations_per_pair, flush) if "eager" in arms else None
    inv = protocol.invocations_per_request(cfg.invocations_per_pair, eager_ms)
    rng = random.Random(cfg.order_seed + (1 if l2 == "cold" else 0))
    rows = []
    for _ in range(rounds):
        order = names[:]
        rng.shuffle(order)
        times, host = {}, {}
        for name in order:
            if name == "candidate":
                _collect(c)
                rep = c.proc.request({"cmd": "time", "ids": ["timing"], "n": inv,
                                      "flush": flush_bytes}, timeout_s=cfg.call_timeout_s)
                ts = rep.header.get("times_ms")
                if not (isinstance(ts, list) and len(ts) == 1 and isinstance(ts[0], (int, float))
                        and not isinstance(ts[0], bool) and ts[0] > 0):
                    raise CandidateFailure(f"a timing reply without one positive time: {str(ts)[:80]}")
                times[name], host[name] = float(ts[0]), rep.host_ms
            else:
                times[name] = _time_local(arms[name], inv, flush)
        rows.append({"order": order, "times_ms": times, "host_ms": host})
    proto = {"mode": "events", "warmups": cfg.warmups, "rounds": rounds, "invocations_per_pair": inv,
             "order_seed": cfg.order_seed + (1 if l2 == "cold" else 0), "l2": l2}
    blk = {"id": f"{c.spec.name}/{l2}", "candidate": c.spec.name, "l2": l2, "mode": "events", "protocol": proto,
           "arms": names, "rounds": rows}
    if flush_bytes:
        blk["flush_bytes"] = flush_bytes
    return blk


def _fresh_sets(c: _Ctx, xs_like: list, seeds: list[int]) -> list[list]:
    import torch

    out = []
    for s in seeds:
        g = torch.Generator(device=c.dev).manual_seed(int(s))
        out.append([torch.randn(x.shape, generator=g, dtype=x.dtype, device=c.dev)
                    if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in xs_like])
    return out


def _per_call(c: _Ctx, xs_timing: list) -> dict:
    cfg = c.cfg
    k = cfg.fresh_sets
    rng = random.Random(cfg.order_seed + 2)
    fresh, spots, repeat = [], [], []
    for r in range(cfg.fresh_rounds):
        seeds = [rng.randrange(1, 2 ** 62) for _ in range(k)]
        ids = [f"fresh{j}" for j in range(k)]
        c.proc.request({"cmd": "fresh", "like": "timing", "ids": ids, "seeds": seeds}, timeout_s=cfg.call_timeout_s)
        _collect(c)
        rep = c.proc.request({"cmd": "time", "ids": ids, "n": k, "per_call": True, "keep": True},
                             timeout_s=cfg.call_timeout_s)
        fresh.append({"round": r, "times_ms": list(rep.header.get("times_ms") or [])})
        checked(mc.CallRound, fresh[-1], "per-call times")
        j = rng.randrange(k)
        size = _first(c.refs[next(iter(c.refs))]) if c.refs else None
        nbytes = int(size.numel() * size.element_size()) if size is not None else 1 << 30
        got = c.proc.request({"cmd": "output", "index": j}, timeout_s=cfg.call_timeout_s, max_bytes=2 * nbytes + 4096)
        # a reused output buffer holds the answer of the last call that wrote it
        w = got.header.get("written_by")
        w = w if isinstance(w, int) and not isinstance(w, bool) and j <= w < k else j
        mine = _fresh_sets(c, xs_timing, [seeds[w]])[0]
        ref = _first(_reference(c.model, mine))  # the timed outputs are checked on the first output
        try:
            out = frame_tensor(got.header.get("tensor") or {}, got.frames[0] if got.frames else b"").to(ref.device)
            cmp = compare(ref, out, c.tol)
        except ValueError as exc:
            cmp = {"shape_match": False, "official": {"pass": False}, "error": str(exc)[:200]}
        spots.append({"round": r, "index": j, "written_by": w, "compare": cmp})
        _collect(c)
        rep = c.proc.request({"cmd": "time", "ids": ["timing"], "n": k, "per_call": True},
                             timeout_s=cfg.call_timeout_s)
        repeat.append({"round": r, "times_ms": list(rep.header.get("times_ms") or [])})
        checked(mc.CallRound, repeat[-1], "per-call times")
    return {"fresh": fresh, "repeat": repeat, "spot_checks": spots, "sets_per_round": k}


def _after_timing(c: _Ctx, task_src: bytes) -> None:
    import torch

    s0 = c.cfg.seeds[0]
    # re-drawn weights: ModelNew and Model both built after another seed
    c.proc.request({"cmd": "model", "name": "redrawn", "seed": c.cfg.redrawn_seed}, timeout_s=c.cfg.call_timeout_s)
    other = kbtask.build_model(c.task, c.task.Model, c.cfg.redrawn_seed, c.dev)
    xs = _draw(c, "redrawn", s0, "official")
    _case(c, "redrawn_weights", "redrawn_weights", xs, _reference(other, xs), set_id="redrawn", model="redrawn")
    del other
    shapes = c.cfg.extra_shapes or tuple(tuple(d.items()) for d in protocol.default_extra_shapes(
        kbtask.size_globals(c.task)))
    c.obs["extra_shapes"] = [dict(s) for s in shapes]
    for i, ov in enumerate(shapes):
        ov = dict(ov)
        t = kbtask.load_task(task_src, f"kbrepro_task_shape{i}")
        kbtask.apply_overrides(t, {**dict(c.cfg.sizes), **ov})
        m = kbtask.build_model(t, t.Model, s0, c.dev)
        c.proc.request({"cmd": "model", "name": f"shape{i}", "seed": s0, "overrides": ov},
                       timeout_s=c.cfg.call_timeout_s)
        xs = _draw(c, f"shape{i}", s0, "official", task=t, overrides=ov)
        _case(c, f"shape{i}", "extra_shape", xs, _reference(m, xs), set_id=f"shape{i}", model=f"shape{i}")
        del m, xs
        torch.cuda.empty_cache() if c.dev.startswith("cuda") else None


def _tool_version(cmd: list[str], line: int = -1) -> str | None:
    """One line of ``cmd``'s output (``nvcc --version`` ends with its build, ``c++ --version``
    starts with its name and version)."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = [ln for ln in (p.stdout or p.stderr).strip().splitlines() if ln.strip()]
    return out[line][:200] if out else None


def _ninja_commands(text: str) -> dict:
    """The variables of a ``build.ninja`` torch writes that make the command lines: the
    compilers, their flags, the link flags, and the rule lines themselves."""
    keep = ("cxx", "nvcc", "cflags", "post_cflags", "cuda_cflags", "cuda_post_cflags", "cuda_dlink_post_cflags",
            "ldflags")
    out, rules = {}, []
    for line in text.splitlines():
        k, sep, v = line.partition(" = ")
        if sep and k.strip() in keep:
            out[k.strip()] = v.strip()
        elif line.strip().startswith("command = "):
            rules.append(line.strip()[len("command = "):])
    out["commands"] = rules
    return out


def _triton_version() -> str | None:
    """Triton's version from the installed distribution's metadata (read, never imported)."""
    from importlib import metadata

    try:
        return metadata.version("triton")
    except metadata.PackageNotFoundError:
        return None


def _walk_files(root: Path):
    """Regular files under ``root`` (sorted, relative POSIX paths), never following a
    symbolic link, at most :data:`MAX_PROVENANCE_FILES` of them."""
    out = []
    for d, dirs, names in os.walk(root, followlinks=False):
        dirs.sort()
        for n in sorted(names):
            p = Path(d) / n
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if not __import__("stat").S_ISREG(st.st_mode):
                continue
            out.append((p, st.st_size))
            if len(out) >= MAX_PROVENANCE_FILES:
                return out
    return out


def _read_bounded(p: Path, size: int) -> tuple[str, bytes | None]:
    """sha256 of the file, streamed, and its bytes when at most :data:`MAX_PROVENANCE_FILE`
    (opened without following a link: O_NOFOLLOW)."""
    h = hashlib.sha256()
    keep = size <= MAX_PROVENANCE_FILE
    chunks = []
    fd = os.open(p, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            h.update(b)
            if keep:
                chunks.append(b)
                keep = sum(map(len, chunks)) <= MAX_PROVENANCE_FILE
    return h.hexdigest(), (b"".join(chunks) if keep else None)


def collect_provenance(name: str, ext_dir: Path, triton_dir: Path, out_dir: Path,
                       tools: Mapping[str, str | None] | None = None) -> dict:
    """Copy what the candidate built into ``out_dir`` (a folder the parent made after the
    child ended: ``ext/...``, ``triton/...``, ``sass/...``) and describe it: files with sha256
    and bytes (at most :data:`MAX_PROVENANCE_FILES`; regular files only, no link followed; a
    file over :data:`MAX_PROVENANCE_FILE` or past :data:`MAX_PROVENANCE_TOTAL` listed with its
    hash, not copied), the ``build.ninja`` command lines (at most 20 builds), cubins and SASS
    from ``cuobjdump`` with FTZ evidence (kernels.compile), tool versions. ``tools``: the
    absolute paths of nvcc, cuobjdump and the host compiler, resolved before the child ran."""
    from kbrepro.kernels.compile import sass_ftz_counts, sass_says_ftz

    tools = dict(tools) if tools is not None else {"nvcc": shutil.which("nvcc"), "cuobjdump": shutil.which("cuobjdump"),
                                                   "cxx": shutil.which(os.environ.get("CXX", "c++"))}
    files, total, builds = [], 0, []
    for root, kind in ((ext_dir, "ext"), (triton_dir, "triton")):
        if not root.is_dir() or root.is_symlink():
            continue
        for p, size in _walk_files(root):
            if p.suffix in _SKIP_SUFFIXES or p.name in _SKIP_SUFFIXES:
                continue
            try:
                digest, data = _read_bounded(p, size)
            except OSError:
                continue
            rel = f"{kind}/{p.relative_to(root).as_posix()}"
            rec = {"path": rel, "sha256": digest, "bytes": size if data is None else len(data), "copied": False}
            if data is not None and total + len(data) <= MAX_PROVENANCE_TOTAL:
                dst = out_dir / rel
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.write_bytes(data)
                total += len(data)
                rec["copied"] = True
            files.append(rec)
            if p.name == "build.ninja" and data is not None and len(builds) < 20:
                builds.append({"path": rel, **_ninja_commands(data.decode("utf-8", "replace"))})
    binaries = []
    cuobjdump = tools.get("cuobjdump")
    for rec in [f for f in files if f["copied"] and (f["path"].endswith(".so") or f["path"].endswith(".cubin"))][:200]:
        src = out_dir / rec["path"]  # the parent's copy, whose hash is recorded
        entry = {"file": rec["path"], "sha256": rec["sha256"]}
        if cuobjdump is None:
            entry["sass"] = None
            entry["reason"] = "cuobjdump not found"
            binaries.append(entry)
            continue
        try:
            sass = subprocess.run([cuobjdump, "-sass", str(src)], capture_output=True, text=True, timeout=120).stdout
            elves = subprocess.run([cuobjdump, "-lelf", str(src)], capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.TimeoutExpired) as exc:
            entry["reason"] = f"cuobjdump failed: {type(exc).__name__}"
            binaries.append(entry)
            continue
        stem = rec["path"].replace("/", "_")
        if sass.strip():
            dst = out_dir / "sass" / f"{stem}.sass"
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_text(sass)
            counts = sass_ftz_counts(sass)
            entry.update(sass_file=f"sass/{stem}.sass", sass_sha256=_sha(sass.encode()), ftz_counts=counts,
                         sass_says_ftz=sass_says_ftz(counts))
        entry["elf"] = [ln.split(":", 1)[-1].strip() for ln in elves.splitlines() if "ELF file" in ln][:50]
        binaries.append(entry)
    versions = {"nvcc": _tool_version([tools["nvcc"], "--version"]) if tools.get("nvcc") else None,
                "cxx": _tool_version([tools["cxx"], "--version"], 0) if tools.get("cxx") else None,
                "cuobjdump": _tool_version([cuobjdump, "--version"]) if cuobjdump else None}
    versions["triton"] = tools.get("triton")
    kinds = sorted({"load_inline" for b in builds} | {"triton" for f in files if f["path"].startswith("triton/")
                                                      and f["path"].endswith(".cubin")})
    return {"files": files, "builds": builds, "binaries": binaries, "versions": versions, "built_with": kinds,
            "copied_bytes": total, "dir": str(out_dir)}


#: the environment variable naming the user id a candidate's child runs as (the parent must be root)
UID_ENV = "KBREPRO_CANDIDATE_UID"


def candidate_uid() -> int | None:
    """The user id of ``$KBREPRO_CANDIDATE_UID`` (e.g. 65534, nobody), or None where unset.
    Raises UsageError for a value that is not a positive integer or a parent that is not root
    (only root can start a process as another user)."""
    from kbrepro.errors import UsageError

    v = os.environ.get(UID_ENV)
    if not v:
        return None
    if not v.isdigit() or int(v) == 0:
        raise UsageError(f"{UID_ENV}={v!r} is not a user id other than root's", f"e.g. {UID_ENV}=65534")
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        raise UsageError(f"{UID_ENV} needs the harness to run as root (it starts the candidate as that user)",
                         f"unset {UID_ENV}, or run as root, or in a container (README)")
    return int(v)


def run_candidate(spec: CandidateSpec, cfg: CandidateConfig, workdir: Path, *, device: str = "cuda",
                  progress: Callable[[str], None] | None = None, bandwidth_gbps: float | None = None) -> dict:
    """Check, time and trace ``spec`` as the module docstring says, in ``workdir`` (the
    child's build folders; provenance is copied to ``workdir/provenance``). Returns the
    candidate's record; ``bandwidth_gbps`` (device copy bandwidth) feeds the roofline check."""
    import torch

    say = progress or (lambda m: None)
    workdir = Path(workdir)
    ext, tri = workdir / "build" / "extensions", workdir / "build" / "triton"
    ext.mkdir(parents=True, exist_ok=True)
    tri.mkdir(parents=True, exist_ok=True)
    env = {"TORCH_EXTENSIONS_DIR": str(ext), "TRITON_CACHE_DIR": str(tri), "CUDA_CACHE_DISABLE": "1"}
    run_as = candidate_uid()
    if run_as is not None:  # the child's own folders, and a home of its own for the caches it writes
        home = workdir / "build" / "home"
        home.mkdir(parents=True, exist_ok=True)
        for d in (workdir / "build", ext, tri, home):
            os.chown(d, run_as, run_as)
        env.update(HOME=str(home), TRITON_HOME=str(home), XDG_CACHE_HOME=str(home))
    tol = Tolerance(cfg.atol, cfg.rtol)
    task = kbtask.load_task(spec.task_source, "kbrepro_reference_task")
    kbtask.apply_overrides(task, dict(cfg.sizes))
    model = kbtask.build_model(task, task.Model, cfg.seeds[0], device)
    rec: dict = {"name": spec.name, "source_sha256": _sha(spec.source), "task": spec.task_path,
                 "task_sha256": _sha(spec.task_source), "config": cfg.to_doc(), "stages": []}
    blocks: list = []
    timing: dict = {}
    obs: dict = {"failure": None}
    t_all = time.perf_counter()
    # what the parent runs after the child started is loaded before it: a child that plants a
    # module on sys.path (it runs as our user) must not get it imported here
    import importlib

    importlib.import_module("kbrepro.kernels.compile")  # collect_provenance's FTZ evidence
    try:
        importlib.import_module("triton")
    except Exception:  # Triton is optional
        pass
    tools = {"nvcc": shutil.which("nvcc"), "cuobjdump": shutil.which("cuobjdump"),
             "cxx": shutil.which(os.environ.get("CXX", "c++")), "triton": _triton_version()}
    with CandidateProcess(env, budget_s=cfg.budget_s, run_as=run_as) as proc:
        c = _Ctx(spec, cfg, device, tol, proc, task, model, say, obs)

        def stage(name: str, fn: Callable[[], None]) -> bool:
            t0 = time.perf_counter()
            say(f"{spec.name}: {name}")
            try:
                fn()
                return True
            except CandidateFailure as exc:
                obs["failure"] = f"{name}: {exc.message}"[:400]
                say(f"{spec.name}: {name} failed: {exc.message}")
                return False
            except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
                # a reply of the right shape whose values still broke our handling of it
                obs["failure"] = f"{name}: a malformed reply: {type(exc).__name__}: {str(exc)[:160]}"[:400]
                say(f"{spec.name}: {name} failed: {obs['failure']}")
                return False
            finally:
                rec["stages"].append({"name": name, "seconds": time.perf_counter() - t0})

        def build() -> None:
            t0 = time.perf_counter()
            flags = {"allow_tf32_matmul": False, "allow_tf32_cudnn": True, "float32_matmul_precision": "highest",
                     "allow_fp16_reduced_precision_reduction": True, "allow_bf16_reduced_precision_reduction": True,
                     "cudnn_deterministic": False, "cudnn_benchmark": False}
            rep = proc.request({"cmd": "build", "device": device, "seed": cfg.seeds[0], "flags": flags,
                                "overrides": dict(cfg.sizes)},
                               [spec.source, spec.task_source], timeout_s=cfg.build_timeout_s)
            build_rec = {"host_s": time.perf_counter() - t0, **{k: rep.header.get(k) for k in (
                "build_s", "flags_before", "flags_after_build", "threads", "torch")}}
            checked(mc.Build, build_rec, "build reply")
            obs["build"] = build_rec

        def timing_stage() -> None:
            xs = _draw(c, "timing", cfg.timing_seed, "official")
            ref = _reference(model, xs)
            _case(c, "timing_input", "official", xs, ref, set_id="timing")
            arms, info = _baselines(c, xs, ref)
            timing["baselines"] = info
            blocks.append(_block(c, arms, l2="warm", rounds=cfg.rounds, flush_bytes=0))
            if cfg.cold_l2 and device.startswith("cuda"):
                l2 = int(torch.cuda.get_device_properties(0).L2_cache_size)
                blocks.append(_block(c, arms, l2="cold", rounds=cfg.cold_rounds, flush_bytes=2 * l2))
            timing["per_call"] = _per_call(c, xs)
            out_bytes = sum(int(r.numel() * r.element_size()) for r in (ref if isinstance(ref, tuple) else (ref,)))
            in_bytes = sum(int(x.numel() * x.element_size()) for x in xs if isinstance(x, torch.Tensor))
            med = protocol.roofline_median_ms([r["times_ms"]["candidate"] for r in blocks[0]["rounds"]])
            timing["roofline"] = {"bytes_moved": in_bytes + out_bytes, "median_ms": med,
                                  "bandwidth_gbps": bandwidth_gbps}

        ok = stage("build", build)
        ok = ok and stage("checking pass", lambda: _checking_pass(c))
        ok = ok and (not device.startswith("cuda") or stage("timing", timing_stage))
        ok = ok and stage("weights and shapes", lambda: _after_timing(c, spec.task_source))
    rec["seconds"] = time.perf_counter() - t_all
    rec["compile_seconds"] = (obs.get("build") or {}).get("host_s")
    say(f"{spec.name}: provenance")
    import tempfile

    # a folder made now, after the child is gone, so that it cannot have been prepared by it
    rec["provenance"] = collect_provenance(spec.name, ext, tri, Path(tempfile.mkdtemp(prefix="provenance-",
                                                                                      dir=workdir)), tools)
    rec["provenance_dir"] = rec["provenance"].pop("dir")
    rec["observations"] = obs
    rec["timing"] = timing
    rec["blocks"] = blocks
    # the verdicts, from the typed records (the packer and the verifier derive them again)
    typed = (checked(mc.Observations, obs, "observations"), checked(mc.Timing, timing, "timing record"),
             tuple(checked(mc.Block, b, "timing block") for b in blocks))
    rec["verdicts"] = [v.to_doc() for v in cheats.derive(*typed, cfg.atol, cfg.rtol)]
    return rec


def with_overrides(cfg: CandidateConfig, **kw) -> CandidateConfig:
    """A copy of ``cfg`` with fields replaced (the CLI's options)."""
    return replace(cfg, **kw)


__all__ = ["CandidateConfig", "CandidateSpec", "PROFILES", "BASELINES", "run_candidate", "collect_provenance",
           "with_overrides"]
