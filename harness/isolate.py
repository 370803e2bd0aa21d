"""Running a KernelBench candidate (``ModelNew``) in a child process it cannot escape into ours.

The parent (the harness that checks, packs or verifies) never imports the candidate. It
sends the child the candidate's source bytes, the task's source bytes, the seeds and the
input tensors (as raw bytes with dtype and shape), and gets back the outputs the same way,
with per-call times measured by timer functions the child bound before the candidate was
imported. References are computed in the parent, from the pinned task file, on memory the
candidate never saw; comparisons run in the parent with the harness's own predicates. So a
candidate that patches ``torch.allclose``, the timers or the statistics changes only its own
process, and a crash, ``os._exit`` or hang is a named failure, not ours.

The reply is JSON bytes (tensors base64-encoded), read with a size bound and parsed
strictly: never a pickle, which the candidate could forge into code run by the parent.

What this does not stop (a red-team pass of this module, issue 11): the candidate runs in
the same interpreter as :func:`_child`, so it can read ``_child``'s frame (the inputs, the
task, the pipe) and send a reply of its own, with times it made up: **per-call times from the
child are not evidence**, and a candidate can compute every answer during the warm-up call.
It runs as our user on our filesystem, so it can signal or stop the parent, write the
project's files, or leave processes behind in another session. It is not a sandbox; timing
in a process the candidate cannot reach, and an unprivileged, isolated child, are the next
step. What it does stop: the parent never unpickles, imports or executes the candidate's
data, a reply is read within the deadline and bounded in size, and a malformed reply is a
named failure.
"""
from __future__ import annotations

import multiprocessing as mp
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from kbrepro.errors import ReproError

#: seconds a child may take by default (a load_inline build takes about 40 s on the H200)
DEFAULT_TIMEOUT_S = 600.0
#: the largest reply read from a child (JSON with base64 tensors; a parsed JSON document of n
#: bytes can take about 25n of memory)
MAX_REPLY_BYTES = 64 * 1024 * 1024
#: the dtypes a reply may carry, and the largest size of one dimension
REPLY_DTYPES = ("float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64", "uint8", "bool")
MAX_DIM = 1 << 31


@dataclass(frozen=True)
class CandidateRun:
    """What came back from a child: ``ok`` (the child finished), ``outputs`` (one list of
    CPU tensors per input set), ``times_ms`` (per-call host times, measured with timers the
    child bound before importing the candidate), ``error`` (a one-line reason when not ok:
    an exception, an exit code, a timeout) and ``seconds`` (wall time of the child)."""

    ok: bool
    outputs: tuple = ()
    times_ms: tuple = ()
    error: str | None = None
    seconds: float = 0.0
    notes: tuple = field(default_factory=tuple)


def pack_tensor(t) -> dict:
    """A tensor as JSON data: ``{"dtype", "shape", "b64"}`` (contiguous, CPU, base64 bytes)."""
    import base64

    import torch

    c = t.detach().contiguous().to("cpu")
    raw = c.view(torch.uint8).numpy().tobytes() if c.numel() else b""
    return {"dtype": str(c.dtype).replace("torch.", ""), "shape": list(c.shape), "b64": base64.b64encode(raw).decode()}


def unpack_tensor(d: dict):
    """The tensor :func:`pack_tensor` packed (a new CPU tensor). Raises ValueError for a
    dtype name that is not a torch dtype or bytes that do not fill the shape."""
    import torch

    import base64
    import binascii

    name = str(d.get("dtype"))
    dtype = getattr(torch, name, None) if name in REPLY_DTYPES else None
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"not a torch dtype of a reply: {d.get('dtype')!r}")
    raw_shape = d.get("shape", [])
    if not isinstance(raw_shape, list) or len(raw_shape) > 16 or not all(
            isinstance(s, int) and not isinstance(s, bool) for s in raw_shape):
        raise ValueError(f"not a shape: {raw_shape!r}")
    shape = list(raw_shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"a negative size in {shape}")
    if any(s > MAX_DIM for s in shape):
        raise ValueError(f"a dimension over {MAX_DIM} in {shape}")
    try:
        raw = base64.b64decode(str(d.get("b64", "")), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"not base64: {exc}") from exc
    n = 1
    for s in shape:
        n *= s
    if len(raw) != n * torch.empty((), dtype=dtype).element_size():
        raise ValueError(f"{len(raw)} bytes do not fill a {dtype} tensor of shape {shape}")
    if n == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape).clone()


def _child(conn, candidate_src: bytes, task_src: bytes, seed: int, inputs: list, device: str) -> None:
    """The child's whole life: bind the timers, import the task and the candidate from
    bytes, build ``ModelNew`` as the task builds ``Model`` (same seed, same init inputs), run
    it on every input set, send back plain data."""
    import json as _json

    perf = time.perf_counter  # bound before the candidate runs: patching time.* later changes nothing here
    dumps, send = _json.dumps, conn.send_bytes

    def reply(doc: dict) -> None:
        send(dumps(doc).encode())

    try:
        import types

        import torch

        task = types.ModuleType("kbrepro_task")
        exec(compile(task_src, "task.py", "exec"), task.__dict__)
        cand = types.ModuleType("kbrepro_candidate")
        cand.__dict__.update({k: v for k, v in task.__dict__.items() if k in ("get_inputs", "get_init_inputs")})
        exec(compile(candidate_src, "candidate.py", "exec"), cand.__dict__)
        if not hasattr(cand, "ModelNew"):
            reply({"ok": False, "error": "the candidate defines no ModelNew"})
            return
        torch.manual_seed(seed)
        model = cand.ModelNew(*task.get_init_inputs()).to(device)
        outs, times = [], []
        for xs in inputs:
            args = [unpack_tensor(x).to(device) if isinstance(x, dict) else x for x in xs]
            t0 = perf()
            y = model(*args)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            times.append((perf() - t0) * 1e3)
            ys = y if isinstance(y, (tuple, list)) else (y,)
            outs.append([pack_tensor(v) if isinstance(v, torch.Tensor) else {"not_a_tensor": type(v).__name__}
                         for v in ys])
        reply({"ok": True, "outputs": outs, "times_ms": times})
    except BaseException as exc:  # the candidate's failure is reported, whatever it is
        try:
            reply({"ok": False, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]})
        except Exception:
            pass
    finally:
        conn.close()


def run_candidate(candidate_src: bytes, task_src: bytes, *, seed: int, inputs: Sequence[Sequence[Any]],
                  device: str = "cpu", timeout_s: float = DEFAULT_TIMEOUT_S) -> CandidateRun:
    """Run ``ModelNew`` of ``candidate_src`` (a KernelBench candidate file's bytes) against
    the task ``task_src`` in a spawned child: built after ``torch.manual_seed(seed)`` with the
    task's ``get_init_inputs()``, called once per input set of ``inputs`` (each a sequence of
    tensors, sent as bytes, moved to ``device`` in the child). Returns a
    :class:`CandidateRun`; raises nothing for the candidate's failures (exception, exit,
    hang past ``timeout_s``, malformed reply)."""
    import torch

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    packed = [[pack_tensor(x) if isinstance(x, torch.Tensor) else x for x in xs] for xs in inputs]
    proc = ctx.Process(target=_child, args=(child, bytes(candidate_src), bytes(task_src), int(seed), packed, device),
                       daemon=True)
    t0 = time.perf_counter()
    proc.start()
    child.close()
    import threading

    from kbrepro.harness import jsonio

    got: list = []

    def read() -> None:  # in a thread, so that a reply that stops half-way cannot outlast the deadline
        try:
            got.append(parent.recv_bytes(MAX_REPLY_BYTES))
        except (EOFError, ConnectionResetError):  # the child ended without a reply
            pass
        except OSError:
            got.append(None)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reply = None
    try:
        reader.join(timeout_s)
        if reader.is_alive():
            proc.kill()  # closes the child's end: the reader ends
            reader.join(5)
        elif got:
            try:
                reply = jsonio.loads_strict(got[0], "the candidate's reply", max_bytes=MAX_REPLY_BYTES) \
                    if got[0] is not None else {"ok": False, "error": "a malformed or oversized reply"}
            except (ValueError, ReproError):
                reply = {"ok": False, "error": "a malformed or oversized reply"}
    finally:
        proc.join(timeout=5)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=5)
        parent.close()
    secs = time.perf_counter() - t0
    if reply is None:
        why = (f"the candidate's process did not answer within {timeout_s:g} s" if secs >= timeout_s or
               proc.exitcode in (None, -9) else
               f"the candidate's process ended with exit code {proc.exitcode} and no result")
        return CandidateRun(False, error=why, seconds=secs)
    if not isinstance(reply, dict) or not reply.get("ok"):
        return CandidateRun(False, error=str((reply or {}).get("error") if isinstance(reply, dict) else
                                             "a malformed reply")[:300], seconds=secs)
    try:
        outs = tuple(tuple(unpack_tensor(v) if isinstance(v, dict) and "b64" in v else v for v in row)
                     for row in reply["outputs"])
        times = tuple(float(t) for t in reply["times_ms"])
    except Exception as exc:  # whatever the reply makes torch raise is the candidate's failure
        return CandidateRun(False, error=f"a malformed reply: {type(exc).__name__}: {str(exc)[:200]}", seconds=secs)
    if len(outs) != len(inputs):
        return CandidateRun(False, error=f"{len(outs)} outputs for {len(inputs)} input sets", seconds=secs)
    return CandidateRun(True, outputs=outs, times_ms=times, seconds=secs)


__all__ = ["CandidateRun", "run_candidate", "pack_tensor", "unpack_tensor", "DEFAULT_TIMEOUT_S"]
