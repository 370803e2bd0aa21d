"""The child side of a candidate's process (:mod:`.isolate`): it builds the pinned task and the
candidate, then serves the parent's requests (``build``, ``draw``, ``call``, ``time``,
``time_fresh``, ``held``, ``output``, ...) over one pipe, each reply observed by honest code
in the child and sent as frames (:mod:`.wire`). :func:`child_main` is the process's entry
point: its own process group, another user where asked, SIGKILL when the parent dies.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any, Mapping

from kbrepro.errors import CandidateFailure
from kbrepro.process import die_with_parent
from kbrepro.harness import ipc
from kbrepro.harness.wire import send_frames, tensor_frame


#: bytes of poison written into the allocator's free memory before a poisoned call
POISON_BYTES = 256 * 1024 * 1024


#: the largest request PyTorch's caching allocator serves from its small pool (kSmallSize)
SMALL_POOL_MAX = 1024 * 1024


def _flags() -> dict:
    import torch

    return {"allow_tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
            "allow_tf32_cudnn": bool(torch.backends.cudnn.allow_tf32),
            "float32_matmul_precision": str(torch.get_float32_matmul_precision()),
            "allow_fp16_reduced_precision_reduction":
                bool(torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction),
            "allow_bf16_reduced_precision_reduction":
                bool(torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction),
            "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
            "cudnn_benchmark": bool(torch.backends.cudnn.benchmark)}


def _set_flags(f: Mapping) -> None:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = bool(f["allow_tf32_matmul"])
    torch.backends.cudnn.allow_tf32 = bool(f["allow_tf32_cudnn"])
    torch.set_float32_matmul_precision(str(f["float32_matmul_precision"]))
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = bool(
        f["allow_fp16_reduced_precision_reduction"])
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = bool(
        f["allow_bf16_reduced_precision_reduction"])
    torch.backends.cudnn.deterministic = bool(f["cudnn_deterministic"])
    torch.backends.cudnn.benchmark = bool(f["cudnn_benchmark"])


class Server:
    """The child's state; every helper it uses is bound before the candidate is imported."""

    def __init__(self, conn):
        import gc
        import hashlib
        import json
        import weakref

        import torch

        # imported once the child serves, after its user, group and death signal are set: kbtask
        # and fresh import torch, which the child must not load before (harness/isolate.py)
        from kbrepro.harness import kbtask
        from kbrepro.harness.fresh import FreshTimer

        self.conn, self.torch, self.kbtask, self.json, self.sha = conn, torch, kbtask, json, hashlib.sha256
        self.fresh_timer = FreshTimer(torch, "cuda") if torch.cuda.is_available() else None
        self.pool: list = []
        #: outputs shared with the parent through CUDA IPC, kept until its next request
        self.shared: list = []
        self.sets = kbtask.SetCache()  # official draws kept for sets drawn again (kbtask.draw_inputs)
        #: outputs through CUDA IPC (harness/ipc.py) unless KBREPRO_OUTPUT_IPC=0 (the pipe, as before)
        self.output_ipc = os.environ.get("KBREPRO_OUTPUT_IPC", "1") != "0"
        self.perf, self.thread_count = time.perf_counter, threading.active_count
        self.Event, self.Tensor = torch.cuda.Event, torch.Tensor
        self.manual_seed = torch.manual_seed  # bound before a candidate's code runs here
        self.inputs: dict[str, list] = {}
        self.models: dict[str, Any] = {}
        self.kept: list = []
        # (case, weak reference to an earlier output's storage, its address, its bytes)
        self.held: list = []
        self.weakref, self.gc = weakref.ref, gc
        self.gc_after = False
        self.marker = self.flush_buf = None
        self.task = self.cand = None
        self.base_sizes: dict = {}
        self.device = "cpu"

    # -- helpers ----------------------------------------------------------------------------
    def digest(self, x) -> str | None:
        return self.kbtask.fingerprint(x)

    def sync(self) -> None:
        if self.device.startswith("cuda"):
            self.torch.cuda.synchronize()

    def poison(self, byte: int, chunk: int) -> None:
        """Fill free allocator memory with ``byte`` and give it back to the caching
        allocator, so a ``torch.empty`` of the next call reads poison, not zeros or old data.
        Blocks of ``chunk`` bytes (the reference output's size, so that an output allocation
        is served from a poisoned block) and of 2 MiB, :data:`POISON_BYTES` in all or at least
        four chunks."""
        torch = self.torch
        if not self.device.startswith("cuda"):
            return
        torch.cuda.empty_cache()
        sizes = [2 * 1024 * 1024] * 32
        if chunk > SMALL_POOL_MAX:
            sizes += [chunk] * max(4, POISON_BYTES // chunk)
        elif chunk > 0:
            # The caching allocator serves a request of at most 1 MiB from 2 MiB segments of its
            # small pool, best fit first: blocks of ``chunk`` bytes take every free fragment of the
            # segments still in use that an output could be served from, and blocks of 1 MiB
            # poison POISON_BYTES of fresh segments (freed, they merge back into whole segments
            # that serve any later small request). Before, POISON_BYTES // chunk blocks of
            # ``chunk`` bytes: 524,288 allocations for a 512-byte output, 6 s per poisoned call.
            st = torch.cuda.memory_stats(self.device)
            free = st.get("reserved_bytes.small_pool.current", 0) - st.get("allocated_bytes.small_pool.current", 0)
            rounded = -(-chunk // 512) * 512
            sizes += [chunk] * (max(0, free) // rounded + 4) + [SMALL_POOL_MAX] * (POISON_BYTES // SMALL_POOL_MAX)
        bufs = [torch.full((n,), byte, dtype=torch.uint8, device=self.device) for n in sizes]
        self.sync()
        del bufs

    # -- requests ----------------------------------------------------------------------------
    def build(self, h: dict, frames: list) -> dict:
        torch = self.torch
        self.device = h["device"]
        if "flags" in h and self.device.startswith("cuda"):
            _set_flags(h["flags"])
        before = _flags()
        t0 = self.perf()
        self.task = self.kbtask.load_task(frames[1], "kbrepro_task")
        self.base_sizes = dict(h.get("overrides") or {})  # the run's sizes: another shape goes on these
        self.kbtask.apply_overrides(self.task, self.base_sizes)
        # a module of its own, with its source in linecache, so that code reading its source
        # (Triton's @jit, inspect) finds it as it would find a file
        import linecache
        import sys
        import types

        text = frames[0].decode("utf-8", "replace")
        fname = "kbrepro_candidate.py"
        linecache.cache[fname] = (len(text), None, text.splitlines(True), fname)
        mod = types.ModuleType("kbrepro_candidate")
        mod.__file__ = fname
        sys.modules["kbrepro_candidate"] = mod
        exec(compile(frames[0], fname, "exec"), mod.__dict__)
        cand = mod.__dict__
        if "ModelNew" not in cand:
            raise CandidateFailure("the candidate defines no ModelNew")
        self.cand = cand
        self.kbtask.follow_sizes(cand, self.task)
        self.models["main"] = self.kbtask.build_model(self.task, cand["ModelNew"], int(h["seed"]), self.device)
        if self.device.startswith("cuda"):
            self.marker = torch.empty(1, device=self.device)
        self.sync()
        secs = self.perf() - t0
        after = _flags()
        _set_flags(before) if self.device.startswith("cuda") else None
        return {"build_s": secs, "flags_before": before, "flags_after_build": after, "threads": self.thread_count(),
                "torch": torch.__version__}

    def model(self, h: dict) -> dict:
        """A second instance with other weights (``seed``), or at other sizes (the run's sizes and
        this shape's, never an earlier shape's)."""
        if h.get("overrides"):
            self.kbtask.apply_overrides(self.task, {**self.base_sizes, **h["overrides"]}, reset=True)
        self.kbtask.follow_sizes(self.cand, self.task)
        self.models[h["name"]] = self.kbtask.build_model(self.task, self.cand["ModelNew"], int(h["seed"]),
                                                         self.device)
        self.sync()
        return {}

    def draw(self, h: dict) -> dict:
        """A set drawn with the task's ``get_inputs()`` (``into``: its values written into an
        earlier set's tensors); every set not named in ``keep`` is dropped first."""
        if "keep" in h:
            keep = set(h["keep"] or ())
            self.inputs = {k: v for k, v in self.inputs.items() if k in keep}
        if h.get("overrides"):
            self.kbtask.apply_overrides(self.task, {**self.base_sizes, **h["overrides"]}, reset=True)
        xs = self.kbtask.draw_inputs(self.task, int(h["seed"]), h["distribution"], self.device,
                                     None if h.get("overrides") else self.sets)  # a shape's set is drawn once
        if h.get("into"):  # the new values written into an earlier set's tensors (same id() and pointers)
            for a, b in zip(self.inputs[h["into"]], xs):
                if isinstance(a, self.Tensor):
                    a.copy_(b)
            self.sync()
            return {"count": len(xs)}
        self.inputs[h["id"]] = xs
        return {"count": len(xs)}

    def fresh(self, h: dict) -> dict:
        """Input sets for fresh-input timing: each floating tensor of the set ``like`` redrawn
        as standard normal values on the device from ``torch.Generator(device).manual_seed(s)``."""
        torch = self.torch
        like = self.inputs[h["like"]]
        for k, s in zip(h["ids"], h["seeds"]):
            g = torch.Generator(device=self.device).manual_seed(int(s))
            self.inputs[k] = [torch.randn(x.shape, generator=g, dtype=x.dtype, device=self.device)
                              if isinstance(x, self.Tensor) and x.is_floating_point() else x for x in like]
        self.sync()
        return {}

    def call(self, h: dict) -> tuple[dict, list]:
        xs = self.inputs[h["id"]]
        model = self.models[h.get("model", "main")]
        digests_before = [self.digest(x) for x in xs]
        # earlier outputs in reference cycles are freed before the poison, and no collection
        # runs while the call is clocked
        collecting = self.gc.isenabled()
        self.collect()
        if h.get("poison") is not None:
            self.poison(int(h["poison"]), int(h.get("poison_chunk") or 0))
        threads_before = self.thread_count()
        self.gc.disable()
        try:
            return self._call(h, xs, model, digests_before, threads_before)
        finally:
            if collecting:
                self.gc.enable()

    def _call(self, h: dict, xs: list, model, digests_before: list, threads_before: int) -> tuple[dict, list]:
        torch = self.torch
        prof = None
        cuda = self.device.startswith("cuda")
        if h.get("rng") is not None:  # the random state the parent's reference started from
            self.manual_seed(int(h["rng"]))
        t0 = self.perf()
        if h.get("profile") and cuda:
            from torch.profiler import ProfilerActivity, profile

            prof = profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU])
            prof.__enter__()
        stream = torch.cuda.current_stream() if cuda else None
        if prof is not None:
            self.marker.fill_(1.0)  # a kernel of ours on the calling stream: its stream id is the caller's
        elif cuda:  # the calling stream busy at entry, as in back-to-back timed calls (harness/fresh.py)
            self.fresh_timer.busy()
        with torch.no_grad():
            y = model(*xs)
        returned = self.perf()
        stream_done = device_done = returned
        if cuda:
            stream.synchronize()
            stream_done = self.perf()
            torch.cuda.synchronize()
            device_done = self.perf()
        kernels = marker = None
        if prof is not None:
            prof.__exit__(None, None, None)
            kernels, marker = self.trace_kernels(prof)
        ys = y if isinstance(y, (tuple, list)) else (y,)
        outs, frames, taken = [], [], []
        for v in ys:
            rec = {"type": f"{type(v).__module__}.{type(v).__qualname__}", "plain": type(v) is self.Tensor}
            if isinstance(v, self.Tensor):
                t = v.detach()
                rec.update(device=str(t.device), layout=str(t.layout), requires_grad=bool(v.requires_grad),
                           grad_fn=type(v.grad_fn).__name__ if v.grad_fn is not None else None)
                if t.dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16,
                               torch.int32, torch.int64, torch.uint8, torch.bool) and t.layout == torch.strided:
                    plain = t.as_subclass(self.Tensor) if type(v) is not self.Tensor else t
                    rec["tensor"] = self.out_tensor(plain, frames)
                    rec["digest"] = self.kbtask.fingerprint(t)
                    rec["held_over"] = self.held_by(plain, xs, taken, model)
            outs.append(rec)
        doc = {"outputs": outs, "digests_before": digests_before, "digests_after": [self.digest(x) for x in xs],
               "threads_before": threads_before, "threads_after": self.thread_count(),
               "call_ms": (returned - t0) * 1e3, "stream_wait_ms": (stream_done - returned) * 1e3,
               "device_wait_ms": (device_done - stream_done) * 1e3, "flags_after_call": _flags(),
               "kernels": kernels, "marker_stream": marker}
        for t in taken:  # the caller owns its output: written over once read (see register)
            self.register(t, h.get("case"))
        self.sync()
        return doc, frames

    def out_tensor(self, t, frames: list) -> dict:
        """An output for the parent: shared through CUDA IPC (a copy kept in ``self.shared``
        until the next request) where it is a non-empty CUDA tensor, else its bytes appended
        to ``frames``. Returns its description."""
        if t.is_cuda and t.numel() and self.output_ipc:
            try:
                return {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
                        "nbytes": int(t.numel() * t.element_size()), "ipc": ipc.share(t, self.shared)}
            except RuntimeError:  # an allocation that cannot be shared: the pipe
                pass
        meta, raw = tensor_frame(t)
        frames.append(raw)
        return meta

    @staticmethod
    def _span(t) -> tuple[int, int]:
        st = t.untyped_storage()
        return int(st.data_ptr()), int(st.nbytes())

    def held_by(self, t, xs, taken: list, model=None) -> str | None:
        """The case whose output's memory ``t`` shares while that output is still alive (the
        candidate kept it: a cache, or a reused output buffer), or None. ``t`` goes on
        ``taken`` (to be written over) unless it shares memory with the call's inputs, with the
        model's parameters or buffers (an output that is a view of a weight is the model's
        state, not a cache), or with an output already taken."""
        p, n = self._span(t)
        if n == 0:
            return None
        own = [x for x in xs if isinstance(x, self.Tensor)] + list(taken)
        if model is not None and hasattr(model, "parameters"):
            try:
                own += [w for w in model.parameters()] + [w for w in model.buffers()]
            except Exception:  # a model whose parameters cannot be listed: only the inputs count
                pass
        for x in own:
            q, m = self._span(x)
            if p < q + m and q < p + n:
                return None
        taken.append(t)
        for case, ref, q, m in self.held:
            if ref() is not None and p < q + m and q < p + n:
                return case
        return None

    def register(self, t, case: Any) -> None:
        """Remember ``t``'s memory (weakly) under the call's ``case`` and write over it: NaN
        for floating dtypes, every bit flipped for integers and booleans. An honest candidate
        never reads an output it returned; one that returns it again without recomputing it
        returns what we wrote (a cache), one that recomputes into it (a CUDA graph's static
        output) is still right."""
        try:
            ref = self.weakref(t.untyped_storage())
        except TypeError:  # a storage without weak references: nothing to remember
            return
        torch = self.torch
        try:
            if t.is_floating_point():
                t.fill_(float("nan"))
                written = bool(torch.isnan(t).all())
            else:  # every integer or boolean element changes
                before = t.clone()
                t.bitwise_not_()
                written = not bool((t == before).any())
        except RuntimeError:  # elements sharing memory (an expanded output) cannot be written over
            written = False
        if not written:  # not remembered: a later output in this memory proves nothing either way
            return
        p, n = self._span(t)
        self.held.append((case if isinstance(case, str) else None, ref, p, n))
        del self.held[:-256]

    def trace_kernels(self, prof) -> tuple[list, Any]:
        """Kernels of a profiled call, in start order, from the profiler's trace: name and
        stream; the first is the marker, whose stream is returned apart."""
        import os as _os
        import tempfile

        fd, path = tempfile.mkstemp(suffix=".json")
        _os.close(fd)
        try:
            prof.export_chrome_trace(path)
            with open(path, "rb") as f:
                events = self.json.loads(f.read()).get("traceEvents", [])
        finally:
            _os.unlink(path)
        ks = sorted(((e.get("ts", 0), str(e.get("name", ""))[:300], (e.get("args") or {}).get("stream"))
                     for e in events if isinstance(e, dict) and e.get("cat") == "kernel"), key=lambda k: k[0])
        if not ks:
            return [], None
        return [{"name": n, "stream": st} for _, n, st in ks[1:]], ks[0][2]

    def time(self, h: dict) -> dict:
        """``n`` calls on the input sets ``ids`` (cycled), as one CUDA-event interval
        (``per_call`` false) or one interval per call; ``flush`` bytes are written before
        each call inside the timed region (cold L2). Keeps the outputs when ``keep``."""
        torch = self.torch
        model = self.models[h.get("model", "main")]
        sets = [self.inputs[k] for k in h["ids"]]
        n, per_call, keep = int(h["n"]), bool(h.get("per_call")), bool(h.get("keep"))
        flush = None
        if h.get("flush"):  # allocated once: a first cudaMalloc inside a request would count as its time
            if self.flush_buf is None or self.flush_buf.numel() != int(h["flush"]):
                self.flush_buf = torch.empty(int(h["flush"]), dtype=torch.uint8, device=self.device)
            flush = self.flush_buf
        self.kept = []
        times = []
        # the collector as in a checked call (collected, then off): its state tells no call apart.
        # The parent asks for the collection in a request of its own ("collect") just before, so
        # that it stays outside the clock the parent holds around this request (host_ms): a full
        # collection with torch loaded takes tens of ms, which host_clock_agrees would count as
        # time the candidate's timer did not report
        collecting = self.gc.isenabled()
        self.gc.disable()
        try:
            self._time_loop(model, sets, n, per_call, keep, flush, times)
        finally:
            if collecting:
                self.gc.enable()
        return {"times_ms": times}

    def pool_draw(self, h: dict) -> dict:
        """Input sets for a fresh-input timing request (``n`` from ``seed``), drawn by the task's own
        ``get_inputs()`` on the device (harness/fresh.py); the sets of the last request are freed.
        Then the full collection of :meth:`collect` (the timing request that follows turns the
        collector off): one request, outside the parent's clock of the timed one."""
        self.pool = []
        self.kept = []
        self.pool = self.fresh_timer.draw_pool(self.task, int(h["seed"]), int(h["n"]))
        self.sync()
        self.collect()
        return {"count": len(self.pool)}

    def time_fresh(self, h: dict) -> dict:
        """``n`` invocations back to back, each on its own set of the pool (harness/fresh.py),
        timed with CUDA events (``flush`` bytes written before each inside the region). The
        outputs are kept for the "held" request that follows; the pool is freed by the next
        request (:meth:`held_outputs`, :meth:`output` or :meth:`pool_draw`)."""
        torch = self.torch
        model = self.models[h.get("model", "main")]
        n = int(h["n"])
        flush = None
        if h.get("flush"):
            if self.flush_buf is None or self.flush_buf.numel() != int(h["flush"]):
                self.flush_buf = torch.empty(int(h["flush"]), dtype=torch.uint8, device=self.device)
            flush = self.flush_buf
        # the collector stays off until the next request starts (serve): turned on here, its
        # first collection would walk every kept output inside this request's clock, a cost
        # that grows with the invocations (3.6 ms at 20,000 on a CPU)
        self.gc_after = self.gc_after or self.gc.isenabled()
        self.gc.disable()
        rng = int(h["rng"]) if h.get("rng") is not None else None
        if h.get("per_call"):
            times, ys = self.fresh_timer.per_call_kept(model, self.pool[:n], rng)
        else:
            ms, ys = self.fresh_timer.region(model, self.pool, n, flush, rng=rng)
            times = [ms]
        # every stream of this process's device idle before the reply: work the candidate left
        # queued (on a stream of its own, to slow the parent's baselines timed next, or to finish
        # its outputs after the end event) lands inside the parent's clock of this request
        self.fresh_timer._sync()
        # the outputs for "held" and for an "output" request (a spot check); the spent sets are
        # freed by the next request, not in this one: what a request does after its events
        # and before its reply stays the same at any length (the parent's clock sees it)
        self.kept = ys
        return {"times_ms": times}

    def held_outputs(self, h: dict) -> dict:
        """The kept outputs of the last fresh-input request: every output's checksums and which
        invocation's answer each output's memory holds (harness/fresh.py). A request of its own,
        outside the parent's clock of the timed one."""
        # read before the spent sets are freed (a finalizer on an input is the candidate's code,
        # which could write the outputs then), and never through a subclass's methods
        ft = self.fresh_timer
        kept = [y if ft.plain(y) else None for y in self.kept]
        sums, sizes = ft.checksums(kept, int(h.get("weight_seed") or 0))
        written = ft.written_by(kept)
        self.pool = []
        return ({"outputs": len(kept), "chunk_sizes": sizes, "written_by": written},
                [sums.astype("<f8", copy=False).tobytes()])

    def trim(self) -> dict:
        """Before the timing stage: the checking pass's input sets (all but the timing input's,
        which the per-call repeats time), kept outputs and pool are dropped, and the freed memory
        goes back to the device (``torch.cuda.empty_cache``), where the parent measures what the
        timing stage's requests may take (protocol.pool_bytes). Replies how many sets it kept."""
        self.inputs = {k: v for k, v in self.inputs.items() if k == "timing"}
        self.pool, self.kept = [], []
        self.gc.collect()
        if self.device.startswith("cuda"):
            self.torch.cuda.empty_cache()
        return {"kept": len(self.inputs)}

    def collect(self) -> dict:
        """A full collection, asked for by the parent before each timing request (outside its
        clock); the timing request then turns the collector off, as a checked call does. The
        survivors are then frozen (``gc.freeze``, Python's documented remedy for long-lived
        heaps): the next collection walks only what was made since, so its cost does not grow
        with what torch, Triton and the candidate imported (with torch's compiler loaded a full
        collection took 0.18 s on the H200, 6 s of a launch-bound candidate's timing stage). A
        checked call collects the same way."""
        self.gc.collect()
        self.gc.freeze()
        return {}

    def _time_loop(self, model, sets: list, n: int, per_call: bool, keep: bool, flush, times: list) -> None:
        torch = self.torch
        with torch.no_grad():
            torch.cuda.synchronize()
            if per_call:
                for i in range(n):
                    if flush is not None:
                        flush.fill_(i & 0xFF)
                    a, b = self.Event(enable_timing=True), self.Event(enable_timing=True)
                    a.record()
                    y = model(*sets[i % len(sets)])
                    b.record()
                    b.synchronize()
                    times.append(a.elapsed_time(b))
                    if keep:
                        self.kept.append(y)
            else:
                a, b = self.Event(enable_timing=True), self.Event(enable_timing=True)
                a.record()
                for i in range(n):
                    if flush is not None:
                        flush.fill_(i & 0xFF)
                    y = model(*sets[i % len(sets)])
                    if keep:
                        self.kept.append(y)
                b.record()
                b.synchronize()
                times.append(a.elapsed_time(b) / n)
            torch.cuda.synchronize()

    def output(self, h: dict) -> tuple[dict, list]:
        """Kept output ``index``, and ``written_by``: the last kept call whose output shares
        its memory (itself, unless the candidate reuses an output buffer, as a CUDA graph's
        static output does: the memory then holds that later call's answer)."""
        self.pool = []
        first = [y[0] if isinstance(y, (tuple, list)) else y for y in self.kept]
        j = int(h["index"])
        y = first[j]
        p, n = self._span(y)
        last = j
        for k in range(j + 1, len(first)):
            if isinstance(first[k], self.Tensor):
                q, m = self._span(first[k])
                if n and m and p < q + m and q < p + n:
                    last = k
        frames: list = []
        return {"tensor": self.out_tensor(y.detach().as_subclass(self.Tensor), frames), "written_by": last}, frames

    def serve(self) -> None:
        while True:
            try:
                raw = self.conn.recv_bytes()
            except (EOFError, OSError):
                return
            h = self.json.loads(raw)
            frames = [self.conn.recv_bytes() for _ in h.get("frames", [])]
            cmd = h.get("cmd")
            if self.shared:  # the parent has copied what it was shared (it asks nothing before)
                self.shared = []
                self.torch.cuda.ipc_collect()
            if self.gc_after:  # a timing request left the collector off until now
                self.gc_after = False
                self.gc.enable()
            try:
                if cmd == "quit":
                    send_frames(self.conn, {"ok": True})
                    return
                fn = {"build": lambda: self.build(h, frames), "model": lambda: self.model(h),
                      "draw": lambda: self.draw(h), "fresh": lambda: self.fresh(h), "call": lambda: self.call(h),
                      "time": lambda: self.time(h), "output": lambda: self.output(h),
                      "pool": lambda: self.pool_draw(h), "time_fresh": lambda: self.time_fresh(h),
                      "held": lambda: self.held_outputs(h),
                      "collect": lambda: self.collect(), "trim": lambda: self.trim()}[cmd]
                out = fn()
                doc, fr = out if isinstance(out, tuple) else (out, [])
                send_frames(self.conn, {"ok": True, **doc}, fr)
            except BaseException as exc:  # the candidate's failure is reported, whatever it is
                msg = str(exc).splitlines()[0] if str(exc) else ""
                send_frames(self.conn, {"ok": False, "error": f"{type(exc).__name__}: {msg}"[:300]})


def child_main(conn, uid: int | None = None, parent: int | None = None) -> None:
    try:
        os.setpgid(0, 0)  # a group of its own: what it starts is killed with it (not what leaves the group)
    except OSError:
        pass
    if uid is not None:  # another user before anything of the candidate's (or torch) is loaded
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        os.umask(0o077)
    if parent is not None:
        die_with_parent(signal.SIGKILL, parent)
    try:
        Server(conn).serve()
    except (BrokenPipeError, ConnectionResetError, EOFError):  # the parent is gone: nobody to answer
        os._exit(0)
    finally:
        conn.close()


__all__ = ["Server", "child_main", "POISON_BYTES", "SMALL_POOL_MAX"]
