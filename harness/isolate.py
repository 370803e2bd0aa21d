"""A KernelBench candidate (``ModelNew``) runs in a child process; the parent only asks and checks.

The parent (the harness that computes references, checks, times the baselines, packs or
verifies) never imports the candidate. :class:`CandidateProcess` spawns a child that serves
requests over one pipe: ``build`` (load the pinned task and the candidate from bytes, build
``ModelNew`` with the task's init seed), ``draw`` (an input set drawn from a seed by
:mod:`kbrepro.harness.kbtask`, the same bits as the parent's), ``call`` (one call, observed:
input digests before and after, the output's exact type, a poisoned allocator, the profiler's
kernels and streams, work still running after the call returned, threads left behind,
precision flags), ``time`` (CUDA-event timing of the candidate alone) and ``output`` (one kept
output of the last ``time`` request, for a spot check the parent chooses after the fact).

Messages are frames of bytes: a JSON header, then raw tensor bytes named by it. The parent
reads a reply within the request's deadline, bounds every frame, and parses it strictly:
never a pickle, which the candidate could forge into code run by the parent.

What the parent can trust, and what it cannot (red-team passes of issue 11):

* the outputs are the candidate's outputs, whatever forged them: every verdict on correctness
  is the parent's, on its own references, computed from inputs the candidate never touched;
* the parent's own clock around a request is an upper bound on the work the child did in
  that request; a ``time`` reply's event times come from the candidate's process and are
  **claims**: the parent compares them with its clock (``host_clock_agrees``) and asks for one
  of the timed outputs after the fact (``timed_outputs_correct``);
* everything else a reply says about the child (digests, types, kernels, threads, flags) is
  what honest code in the child observed. A candidate that takes over its own interpreter (it
  can read this module's frames) can forge it. The checks catch candidates that cheat through
  the kernel they ship, which is what KernelBench's adversarial tests and the public cheats do;
  they do not stop a candidate that attacks the harness itself;
* by default the child runs as our user with our filesystem and GPU: it can signal the
  parent, write files (the project's own code among them), read or write the parent's memory
  (as root even when the parent is not dumpable), read other processes' GPU memory through the
  driver, or leave processes behind that left its process group. ``run_as`` (the harness reads
  ``KBREPRO_CANDIDATE_UID``) starts it as another user, which closes the first four for an
  unprivileged id. It is not a sandbox; run an untrusted candidate in a container (docs/checks.md).
"""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from kbrepro.errors import CandidateFailure, EnvironmentUnavailableError, ReproError
from kbrepro.harness import ipc

#: seconds a request may take by default (a load_inline build takes about 40 s on the H200)
DEFAULT_TIMEOUT_S = 600.0
#: the largest header frame read from a child, and the raw frames' bytes a request allows by
#: default (a request that expects an output passes twice its reference's bytes: a level-1 task's
#: output of 6 GiB is one frame, read whole; a cap of 2 GiB a frame once failed honest
#: candidates of KernelBench 1/19, 1/23, 1/33 and 1/36 with "a malformed reply")
MAX_HEADER_BYTES = 4 * 1024 * 1024
MAX_FRAME_BYTES = 2 * 1024 * 1024 * 1024
#: the dtypes a reply may carry, and the largest size of one dimension
REPLY_DTYPES = ("float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64", "uint8", "bool")
MAX_DIM = 1 << 31
#: the most checksum chunks a "held" reply may carry (outputs x chunks)
HELD_MAX_CHUNKS = 1 << 22
#: the most frames of a reply, and the deepest nesting of its header
MAX_FRAMES = 64
MAX_REPLY_DEPTH = 8
#: what a reply to each request must hold: field -> accepted Python types (JSON values)
_NUM = (int, float)
REPLY_FIELDS = {
    "build": {"build_s": _NUM, "flags_before": dict, "flags_after_build": dict, "threads": int, "torch": str},
    "call": {"outputs": list, "digests_before": list, "digests_after": list, "threads_before": int,
             "threads_after": int, "call_ms": _NUM, "stream_wait_ms": _NUM, "device_wait_ms": _NUM,
             "flags_after_call": dict},
    "time": {"times_ms": list},
    "time_fresh": {"times_ms": list},
    "held": {"outputs": int, "chunk_sizes": list, "written_by": list},
    "pool": {"count": int},
    "trim": {"kept": int},
    "output": {"tensor": dict},
    "draw": {"count": int},
}


def start_with_env(proc, env: Mapping[str, str]) -> None:
    """Start the spawned ``proc`` (a ``multiprocessing`` process, not started) with the
    environment kbrepro started with (:mod:`kbrepro.harness.startenv`: not what a library
    set in this process since, e.g. Inductor's ``TRITON_PTXAS_PATH``) and ``env`` over it, in
    effect from its first instruction (before it imports torch); this process's own
    environment is restored afterwards."""
    from kbrepro.harness import startenv

    with startenv.launching(env):
        proc.start()


def _printable(text: str) -> str:
    """``text`` with control and non-ASCII characters replaced by ``?``."""
    return "".join(c if " " <= c <= "~" else "?" for c in text)


def _shape_problem(cmd: str, doc: dict) -> str | None:
    """Why a reply's header is not what ``cmd``'s reply holds (types, bounded strings and
    lists), or None."""
    for k, want in REPLY_FIELDS.get(cmd, {}).items():
        v = doc.get(k)
        if not isinstance(v, want) or isinstance(v, bool) and want is not bool:
            return f"{k} is not a {getattr(want, '__name__', 'number')}"
    if cmd == "call":
        outs = doc["outputs"]
        if len(outs) > 16 or not all(isinstance(o, dict) for o in outs):
            return "outputs is not a short list of objects"
        for o in outs:
            if "tensor" in o and not isinstance(o["tensor"], dict):
                return "an output's tensor is not an object"
            for k in ("type", "device", "layout", "grad_fn", "digest", "held_over"):
                if o.get(k) is not None and (not isinstance(o[k], str) or len(o[k]) > 300):
                    return f"an output's {k} is not a short string"
        for k in ("digests_before", "digests_after"):
            if len(doc[k]) > 64 or not all(d is None or isinstance(d, str) and len(d) <= 200 for d in doc[k]):
                return f"{k} is not a short list of digests"
        if not all(isinstance(x, (bool, str)) and len(str(x)) <= 40 for x in doc["flags_after_call"].values()):
            return "flags_after_call holds other values than flags"
        ks = doc.get("kernels")
        if ks is not None and (not isinstance(ks, list) or len(ks) > 5000 or not all(
                isinstance(k, dict) and isinstance(k.get("name"), str) and len(k["name"]) <= 300 for k in ks)):
            return "kernels is not a bounded list of named kernels"
    if cmd in ("time", "time_fresh") and (len(doc["times_ms"]) > 100000 or not all(
            isinstance(x, _NUM) and not isinstance(x, bool) for x in doc["times_ms"])):
        return "times_ms is not a list of numbers"
    if cmd == "held":
        k, n, wb = len(doc["chunk_sizes"]), doc["outputs"], doc["written_by"]
        if not all(type(x) is int and x >= 0 for x in doc["chunk_sizes"]) or k > (1 << 20):
            return "chunk_sizes is not a list of counts"
        if not 0 <= n <= 100000 or len(wb) != n or not all(type(x) is int and 0 <= x < n for x in wb):
            return "written_by is not one invocation per output"
        if n * k > HELD_MAX_CHUNKS or doc.get("frames") != [16 * n * k]:
            return "the checksums are not one frame of a float64 [sum, abs sum] pair per chunk of each output"
    return None


def _not_dumpable() -> None:
    """Make this (the parent's) process not dumpable (Linux ``prctl(PR_SET_DUMPABLE, 0)``): a
    child running as the same, unprivileged user can then neither ptrace it nor open
    ``/proc/<parent>/mem``. It does not stop a child running as root (CAP_SYS_PTRACE); the
    parent also re-checks its references after every call (harness/candidate.py)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError, TypeError):  # not Linux, or no prctl
        pass


def _kill_group(pid: int) -> None:
    """Kill what is left of the child's process group (grandchildren it started and that
    stayed in it; one that made a session of its own escapes: see the module docstring)."""
    import signal

    try:
        os.killpg(pid, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


#: bytes of poison written into the allocator's free memory before a poisoned call
POISON_BYTES = 256 * 1024 * 1024
#: the largest request PyTorch's caching allocator serves from its small pool (kSmallSize)
SMALL_POOL_MAX = 1024 * 1024


@dataclass(frozen=True)
class Reply:
    """A child's reply: ``header`` (parsed JSON object), ``frames`` (raw byte frames it named),
    ``host_ms`` (the parent's clock from sending the request to reading the whole reply)."""

    header: dict
    frames: tuple = ()
    host_ms: float = 0.0


def tensor_frame(t) -> tuple[dict, bytes]:
    """A tensor as ``({"dtype", "shape", "nbytes"}, raw bytes)`` (contiguous, copied to the CPU)."""
    import torch

    c = t.detach().contiguous().to("cpu")
    # reshape(-1): a 0-dim tensor (a scalar output, e.g. a loss) cannot be viewed as bytes as it is
    raw = c.reshape(-1).view(torch.uint8).numpy().tobytes() if c.numel() else b""
    return {"dtype": str(c.dtype).replace("torch.", ""), "shape": list(c.shape), "nbytes": len(raw)}, raw


def _dtype_shape(d: Mapping):
    """The dtype and shape a reply's tensor description names, each checked; raises ValueError."""
    import torch

    if not isinstance(d, Mapping):
        raise ValueError("a tensor description is not an object")
    name = str(d.get("dtype"))
    dtype = getattr(torch, name, None) if name in REPLY_DTYPES else None
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"not a dtype a reply may carry: {d.get('dtype')!r}")
    shape = d.get("shape")
    if not isinstance(shape, list) or len(shape) > 16 or not all(
            type(s) is int and 0 <= s <= MAX_DIM for s in shape):
        raise ValueError(f"not a shape: {shape!r}")
    n = 1
    for s in shape:
        n *= max(s, 1)
    if n > 1 << 50:  # torch's stride computation overflows (a RuntimeError: the harness's, not the reply's)
        raise ValueError(f"not a shape: {shape!r} (too many elements)")
    return dtype, shape


def reply_tensor(d: Mapping, frames, device: str, max_bytes: int = MAX_FRAME_BYTES):
    """The tensor a reply describes, on ``device``: read through CUDA IPC where the description
    carries ``ipc`` (:func:`kbrepro.harness.ipc.open_shared`, on a CUDA ``device`` only, at most
    ``max_bytes`` bytes, as the pipe's frames are bounded), else from the next of ``frames``
    (an iterator; :func:`frame_tensor`). Raises ValueError for anything malformed."""
    if isinstance(d, Mapping) and "ipc" in d:
        if not str(device).startswith("cuda"):
            raise ValueError("an output shared through CUDA IPC in a run without CUDA")
        dtype, shape = _dtype_shape(d)
        return ipc.open_shared(d, dtype, shape, device, max_bytes)
    raw = next(frames, None)
    if raw is None:
        raise ValueError("a tensor without its frame")
    return frame_tensor(d, raw).to(device)


def frame_tensor(d: Mapping, raw: bytes):
    """The CPU tensor a :func:`tensor_frame` describes. Raises ValueError for a dtype outside
    :data:`REPLY_DTYPES`, a bad shape or bytes that do not fill it."""
    import torch

    dtype, shape = _dtype_shape(d)
    name = str(d.get("dtype"))
    n = 1
    for s in shape:
        n *= s
    if len(raw) != n * torch.empty((), dtype=dtype).element_size():
        raise ValueError(f"{len(raw)} bytes do not fill a {name} tensor of shape {shape}")
    if n == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape).clone()


def _send(conn, header: dict, frames: Sequence[bytes] = ()) -> None:
    import json

    conn.send_bytes(json.dumps({**header, "frames": [len(f) for f in frames]}).encode())
    for f in frames:
        conn.send_bytes(f)


# --------------------------------------------------------------------------------------------
# the child


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


class _Server:
    """The child's state; every helper it uses is bound before the candidate is imported."""

    def __init__(self, conn):
        import gc
        import hashlib
        import json
        import weakref

        import torch

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
        # the outputs for "held" and for an "output" request (a spot check); the spent sets are
        # freed by the next request, not in this one: what a request does after its events
        # and before its reply stays the same at any length (the parent's clock sees it)
        self.kept = ys
        return {"times_ms": times}

    def held_outputs(self, h: dict) -> dict:
        """The kept outputs of the last fresh-input request: every output's checksums and which
        invocation's answer each output's memory holds (harness/fresh.py). A request of its own,
        outside the parent's clock of the timed one."""
        self.pool = []
        sums, sizes = self.fresh_timer.checksums(self.kept, int(h.get("weight_seed") or 0))
        return ({"outputs": len(self.kept), "chunk_sizes": sizes, "written_by": self.fresh_timer.written_by(self.kept)},
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
                    _send(self.conn, {"ok": True})
                    return
                fn = {"build": lambda: self.build(h, frames), "model": lambda: self.model(h),
                      "draw": lambda: self.draw(h), "fresh": lambda: self.fresh(h), "call": lambda: self.call(h),
                      "time": lambda: self.time(h), "output": lambda: self.output(h),
                      "pool": lambda: self.pool_draw(h), "time_fresh": lambda: self.time_fresh(h),
                      "held": lambda: self.held_outputs(h),
                      "collect": lambda: self.collect(), "trim": lambda: self.trim()}[cmd]
                out = fn()
                doc, fr = out if isinstance(out, tuple) else (out, [])
                _send(self.conn, {"ok": True, **doc}, fr)
            except BaseException as exc:  # the candidate's failure is reported, whatever it is
                msg = str(exc).splitlines()[0] if str(exc) else ""
                _send(self.conn, {"ok": False, "error": f"{type(exc).__name__}: {msg}"[:300]})


def _die_with_parent(parent: int) -> None:
    """SIGKILL this process when its parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``; set after
    any change of user, which clears it): a parent killed or interrupted leaves no child
    running the candidate on the GPU, and none that prints a BrokenPipeError traceback when
    its reply finds the pipe closed. Where the parent is already gone, exits at once."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):  # not Linux: the quiet exits of serve() remain
        pass
    if os.getppid() != parent:
        os._exit(0)


def _child(conn, uid: int | None = None, parent: int | None = None) -> None:
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
        _die_with_parent(parent)
    try:
        _Server(conn).serve()
    except (BrokenPipeError, ConnectionResetError, EOFError):  # the parent is gone: nobody to answer
        os._exit(0)
    finally:
        conn.close()


# --------------------------------------------------------------------------------------------
# the parent


class CandidateProcess:
    """One spawned child serving one candidate (see the module docstring), as the user id
    ``run_as`` if given (the parent must be root: the child then cannot write the parent's
    files, ptrace it or read its memory). Use as a context manager; :meth:`request` raises :class:`~kbrepro.errors.CandidateFailure` with a one-line
    reason when the child raises, exits, hangs past the deadline or sends a malformed reply
    (the child is then killed: a request after a failure raises too)."""

    def __init__(self, env: Mapping[str, str] | None = None, budget_s: float | None = None,
                 run_as: int | None = None):
        self._env = dict(env or {})
        self.run_as = run_as
        self.proc = self.conn = None
        self.dead: str | None = None
        self.budget_s = budget_s
        self.deadline = None

    def __enter__(self) -> "CandidateProcess":
        _not_dumpable()
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=_child, args=(child, self.run_as, os.getpid()), daemon=True)
        start_with_env(self.proc, self._env)  # the child's extension and Triton cache folders
        child.close()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.proc is None:
            return
        if self.dead is None:
            try:
                self.request({"cmd": "quit"}, timeout_s=10)
            except CandidateFailure:
                pass
        self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout=5)
        _kill_group(self.proc.pid)
        self.conn.close()
        self.proc = None

    def _fail(self, why: str) -> CandidateFailure:
        self.dead = why
        if self.proc is not None and self.proc.is_alive():
            self.proc.kill()
        return CandidateFailure(why)

    def request(self, header: dict, frames: Sequence[bytes] = (), *, timeout_s: float = DEFAULT_TIMEOUT_S,
                max_bytes: int = MAX_FRAME_BYTES) -> Reply:
        """Send one request and wait at most ``timeout_s`` seconds (and no longer than the
        process's whole budget) for its whole reply, whose frames may hold at most
        ``max_bytes`` bytes in all. The reply header is parsed strictly (no NaN, bounded depth
        and size: :func:`kbrepro.harness.jsonio.loads_strict`) and checked against
        :data:`REPLY_FIELDS`; anything else is the candidate's failure."""
        return self.request_while(header, None, frames, timeout_s=timeout_s, max_bytes=max_bytes)[0]

    def request_while(self, header: dict, meanwhile: Callable[[], Any] | None, frames: Sequence[bytes] = (), *,
                      timeout_s: float = DEFAULT_TIMEOUT_S, max_bytes: int = MAX_FRAME_BYTES) -> tuple[Reply, Any]:
        """:meth:`request`, with the parent's own ``meanwhile()`` run after the request is sent
        and before its reply is awaited (the parent's draw of the same set, or its build of the
        task's model, while the child draws or builds: issue 29). Returns the reply and what
        ``meanwhile`` returned. The deadline counts from the send, and ``host_ms`` ends when the
        whole reply was read, not when ``meanwhile`` returned. Where ``meanwhile`` raises, the
        child is stopped (its reply would be read by no one) and the exception propagates: it
        is the harness's or the task's, never the candidate's."""
        from kbrepro.harness import jsonio

        if self.dead is not None:
            raise CandidateFailure(self.dead)
        if self.deadline is None and self.budget_s is not None:  # from the first request: the parent's own
            self.deadline = time.monotonic() + self.budget_s  # work before it (the task's model) is not the candidate's
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise self._fail(f"the candidate used up its budget of {self.budget_s:g} s")
            timeout_s = min(timeout_s, left)
        got: list = []
        ended: list = []

        def read() -> None:  # in a thread, so that a reply that stops half-way cannot outlast the deadline
            try:
                head = self.conn.recv_bytes(MAX_HEADER_BYTES)
                doc = jsonio.loads_strict(head, "a reply", max_bytes=MAX_HEADER_BYTES, max_depth=MAX_REPLY_DEPTH)
                if not isinstance(doc, dict):
                    raise ValueError("the reply is not an object")
                sizes = doc.get("frames", [])
                if not isinstance(sizes, list) or len(sizes) > MAX_FRAMES or not all(
                        type(s) is int and 0 <= s for s in sizes) or sum(sizes) > max_bytes:
                    raise ValueError(f"bad frame list (at most {MAX_FRAMES} frames and {max_bytes} bytes)")
                fr = []
                for s in sizes:
                    b = self.conn.recv_bytes(max(s, 1))
                    if len(b) != s:
                        raise ValueError("a frame of the wrong size")
                    fr.append(b)
                got.append((doc, tuple(fr)))
                ended.append(time.perf_counter())
            except (EOFError, ConnectionResetError):
                got.append("eof")
            except MemoryError:  # an allowed reply this host cannot hold: ours, not the candidate's
                got.append("memory")
            except (OSError, ValueError, UnicodeDecodeError, ReproError) as exc:
                got.append(f"malformed: {type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}")

        t0 = time.perf_counter()
        try:
            _send(self.conn, header, frames)
        except (OSError, BrokenPipeError):
            raise self._fail(self._exit_reason()) from None
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        result = None
        if meanwhile is not None:
            try:
                result = meanwhile()
            except BaseException:
                self._fail("the harness stopped waiting for the candidate's reply")
                raise
        reader.join(max(0.0, timeout_s - (time.perf_counter() - t0)))
        host_ms = ((ended[0] if ended else time.perf_counter()) - t0) * 1e3
        if reader.is_alive():
            raise self._fail(f"the candidate's process did not answer {header.get('cmd')!r} within {timeout_s:g} s")
        out = got[0] if got else "eof"
        if out == "eof":
            raise self._fail(self._exit_reason())
        if out == "memory":
            self.close()
            raise EnvironmentUnavailableError(f"this host ran out of memory reading the reply to {header.get('cmd')!r} "
                                              f"(at most {max_bytes} bytes allowed)",
                                              "run on a host with more memory, or at smaller sizes (--size)")
        if isinstance(out, str):
            raise self._fail(f"a {out} reply to {header.get('cmd')!r}")
        doc, fr = out
        if doc.get("ok") is not True:
            raise CandidateFailure(_printable(str(doc.get("error") or "the candidate failed"))[:300])
        bad = _shape_problem(str(header.get("cmd")), doc)
        if bad:
            raise self._fail(f"a malformed reply to {header.get('cmd')!r}: {bad}")
        return Reply(doc, fr, host_ms), result

    def _exit_reason(self) -> str:
        if self.proc is not None:
            self.proc.join(timeout=5)
            code = self.proc.exitcode
            if code is not None:
                return f"the candidate's process ended with exit code {code}"
        return "the candidate's process closed its pipe"


__all__ = ["CandidateProcess", "Reply", "tensor_frame", "frame_tensor", "DEFAULT_TIMEOUT_S", "REPLY_DTYPES",
           "POISON_BYTES"]
