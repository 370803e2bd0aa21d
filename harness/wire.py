"""The frames between the harness and a candidate's child (:mod:`.isolate`, :mod:`.candidate_server`):
a JSON header, then raw tensor bytes it names; the bounds the parent holds every reply to
(frame sizes, dtypes, dimensions, nesting, the fields each reply must hold), and the tensors
read back from frames or from a CUDA IPC handle (:mod:`.ipc`). Never a pickle: the candidate
could forge one into code run by the parent.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from kbrepro.harness import ipc


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


def shape_problem(cmd: str, doc: dict) -> str | None:
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


def dtype_shape(d: Mapping):
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
        dtype, shape = dtype_shape(d)
        return ipc.open_shared(d, dtype, shape, device, max_bytes)
    raw = next(frames, None)
    if raw is None:
        raise ValueError("a tensor without its frame")
    return frame_tensor(d, raw).to(device)


def frame_tensor(d: Mapping, raw: bytes):
    """The CPU tensor a :func:`tensor_frame` describes. Raises ValueError for a dtype outside
    :data:`REPLY_DTYPES`, a bad shape or bytes that do not fill it."""
    import torch

    dtype, shape = dtype_shape(d)
    name = str(d.get("dtype"))
    n = 1
    for s in shape:
        n *= s
    if len(raw) != n * torch.empty((), dtype=dtype).element_size():
        raise ValueError(f"{len(raw)} bytes do not fill a {name} tensor of shape {shape}")
    if n == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape).clone()


def send_frames(conn, header: dict, frames: Sequence[bytes] = ()) -> None:
    import json

    conn.send_bytes(json.dumps({**header, "frames": [len(f) for f in frames]}).encode())
    for f in frames:
        conn.send_bytes(f)


__all__ = ["Reply", "tensor_frame", "frame_tensor", "reply_tensor", "send_frames", "shape_problem", "REPLY_DTYPES", "REPLY_FIELDS", "MAX_FRAME_BYTES", "HELD_MAX_CHUNKS"]
