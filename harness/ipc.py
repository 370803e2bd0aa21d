"""A candidate's outputs read by the parent through CUDA IPC, never copied through the pipe (issue 29).

Through the pipe, an output of 4.3 GB (KernelBench 1/33 at its own size) cost about 13 s per
call on the H200: a copy to the host, two copies into and out of the pipe, two more in the
parent, and one back to the device (``benchmarks/timing_parts.py``; about 130 s of a 250 s
candidate). Through CUDA IPC it costs two device-to-device copies.

The child (:func:`share`) copies the output into a buffer of its own (the candidate's tensor
is written over right after the reply: ``candidate_server.Server.register``), shares that buffer's
allocation (``UntypedStorage._share_cuda_``, what ``torch.multiprocessing`` sends for a CUDA
tensor) and keeps it alive until its next request. The parent (:func:`open_shared`) never
unpickles anything: it reads the handle's fields from the reply's JSON header, checks each,
maps the allocation (``UntypedStorage._new_shared_cuda``), checks with the driver
(``cuMemGetAddressRange``) that the bytes it will read lie inside the allocation the handle
names (a child that claims a larger buffer would make the parent read past it, an illegal
address that ends the parent's CUDA context), copies the bytes into memory of its own and
drops the mapping before its next request. What it reads is the candidate's output, whatever
wrote it, as with the pipe; the verdicts are the parent's, on its copy.

The pipe stays for CPU runs, for empty outputs, for any output the child cannot share (an
expandable segment's handle), and for every output with ``KBREPRO_OUTPUT_IPC=0``.

Left open (reasoned, not shown on a GPU): torch's consumer side opens the ref-counter file the
child names (checked to be one of torch's ``/torch_<pid>_<n>_<n>`` names) and decrements it when
the mapping is dropped; a child that frees or unmaps its buffer while the parent copies can end
the parent's CUDA context (a harness error, never a PASS).
"""
from __future__ import annotations

import base64
import ctypes
import re
from typing import Any, Mapping

#: torch's ref-counter files (``at::NewProcessWideShmHandle``) and their size in counters
#: (``CUDA_IPC_REF_COUNTER_FILE_SIZE``)
_REF_COUNTER_NAME = re.compile(rb"/torch_[0-9]+_[0-9]+_[0-9]+")
_REF_COUNTER_SLOTS = 10000
#: the largest field a reply may carry, and torch's handle of a plain ``cudaMalloc`` allocation
#: (``CUDACachingAllocator::shareIpcHandle``): a version byte (2 up to torch 2.12, 3 in 2.13),
#: the type ``c``, the 64-byte ``cudaIpcMemHandle_t``. Any other handle is refused: the type
#: ``e`` (an expandable segment) makes torch divide by a size the child chooses, and a zero
#: ends the parent (SIGFPE)
_MAX_HANDLE = 512
_HANDLE_BYTES = 66


def _b64(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(bytes(b)).decode()


def share(t, keep: list) -> dict:
    """The child's side: a copy of the CUDA tensor ``t`` (contiguous) in a new buffer, shared;
    the buffer is appended to ``keep`` (the caller keeps it alive until the parent has read
    it). Returns the JSON-ready ``ipc`` fields :func:`open_shared` reads. Raises
    RuntimeError where the buffer cannot be shared."""
    import torch

    s = torch.empty(t.shape, dtype=t.dtype, device=t.device)
    s.copy_(t)
    torch.cuda.synchronize(t.device)  # the parent waits on no event of ours: the copy is done here
    dev, handle, size, offset, rc, rc_off, ev, ev_sync = s.untyped_storage()._share_cuda_()
    if len(handle) != _HANDLE_BYTES or handle[1:2] != b"c":  # an expandable segment: the pipe instead
        raise RuntimeError("not a handle of a plain cudaMalloc allocation")
    keep.append(s)
    return {"device": int(dev), "handle": _b64(handle), "size": int(size), "offset": int(offset),
            "ref_counter": _b64(rc), "ref_counter_offset": int(rc_off), "event": _b64(ev),
            "event_sync": bool(ev_sync)}


def _bytes(d: Mapping, key: str, *, optional: bool = False) -> bytes | None:
    v = d.get(key)
    if v is None and optional:
        return None
    if not isinstance(v, str) or len(v) > 2 * _MAX_HANDLE:
        raise ValueError(f"ipc.{key} is not a short base64 string")
    try:
        return base64.b64decode(v, validate=True)
    except ValueError:
        raise ValueError(f"ipc.{key} is not base64") from None


def _int(d: Mapping, key: str, lo: int, hi: int) -> int:
    v = d.get(key)
    if type(v) is not int or not lo <= v <= hi:
        raise ValueError(f"ipc.{key} is not an integer in [{lo}, {hi}]")
    return v


def _allocation(ptr: int) -> tuple[int, int]:
    """The base address and size of the device allocation that holds ``ptr`` (the driver's
    ``cuMemGetAddressRange``). Raises ValueError where the driver knows no such allocation."""
    lib = ctypes.CDLL("libcuda.so.1")
    base, size = ctypes.c_uint64(0), ctypes.c_size_t(0)
    fn = lib.cuMemGetAddressRange_v2
    fn.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t), ctypes.c_uint64]
    err = fn(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(ptr))
    if err != 0:
        raise ValueError(f"the driver knows no allocation at the shared address (CUresult {err})")
    return int(base.value), int(size.value)


def check_fields(d: Any, nbytes: int) -> dict:
    """The ``ipc`` fields of a reply, each checked (types, bounds, torch's ref-counter file
    name), for a tensor of ``nbytes`` bytes; raises ValueError naming the first bad one. Needs
    no GPU."""
    if not isinstance(d, dict):
        raise ValueError("ipc is not an object")
    out = {"device": _int(d, "device", 0, 1023), "handle": _bytes(d, "handle"),
           "size": _int(d, "size", 1, 1 << 48), "offset": _int(d, "offset", 0, 1 << 48),
           "ref_counter": _bytes(d, "ref_counter"), "ref_counter_offset": _int(d, "ref_counter_offset", 0,
                                                                              _REF_COUNTER_SLOTS - 1),
           "event": _bytes(d, "event", optional=True) or b""}
    h = out["handle"]
    if len(h) != _HANDLE_BYTES or h[1:2] != b"c":
        raise ValueError("ipc.handle is not torch's handle of a plain cudaMalloc allocation")
    if not _REF_COUNTER_NAME.fullmatch(out["ref_counter"]):
        raise ValueError("ipc.ref_counter is not one of torch's ref-counter files")
    if out["size"] < nbytes:
        raise ValueError(f"the shared buffer ({out['size']} bytes) is smaller than the tensor ({nbytes} bytes)")
    return out


def open_shared(meta: Mapping, dtype, shape: list, device, max_bytes: int) -> Any:
    """The parent's side: the tensor ``dtype`` x ``shape`` (contiguous) the child shared under
    ``meta["ipc"]``, copied into a new tensor of the parent's on ``device`` (a CUDA device of
    this process); the mapping is dropped before it returns. The parent never waits on an
    event of the child's (one behind an endless kernel would hang it: the child synchronises
    before it replies) and reads only inside the one allocation the handle maps. Raises
    ValueError for a malformed or inconsistent handle or a tensor of more than ``max_bytes``
    bytes (the candidate's malformed reply)."""
    import torch

    n = 1
    for s in shape:
        n *= s
    nbytes = n * torch.empty((), dtype=dtype).element_size()
    if nbytes > max_bytes:
        raise ValueError(f"an output of {nbytes} bytes, more than the {max_bytes} this reply may hold")
    f = check_fields(meta.get("ipc"), nbytes)
    dev = torch.device(device)
    if dev.type != "cuda" or f["device"] != (dev.index if dev.index is not None else torch.cuda.current_device()):
        raise ValueError(f"the shared buffer is on device {f['device']}, not on {device}")
    try:
        st = torch.UntypedStorage._new_shared_cuda(f["device"], f["handle"], f["size"], f["offset"], f["ref_counter"],
                                                   f["ref_counter_offset"], f["event"], False)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"the shared buffer cannot be opened: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
                         ) from None
    try:
        # the mapping starts at data_ptr - offset; the whole of [mapping, data_ptr + size) must lie
        # in the one allocation that holds the mapping's start: an offset that reaches into
        # another allocation (the parent's own references) is refused
        start = st.data_ptr() - f["offset"]
        base, size = _allocation(start)
        if st.nbytes() != f["size"] or start < base or start + f["offset"] + f["size"] > base + size:
            raise ValueError("the shared buffer reaches past the allocation it names")
        view = torch.empty(0, dtype=dtype, device=st.device).set_(st, 0, shape)
        out = torch.empty(shape, dtype=dtype, device=dev)
        out.copy_(view)
        torch.cuda.current_stream(dev).synchronize()
        del view
        return out
    finally:
        del st


__all__ = ["share", "open_shared", "check_fields"]
