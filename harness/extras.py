"""Measurements beyond the published study (study YAML ``extras``):

* ``measurement_floor``: the cost of an empty CUDA-event pair and of an empty-kernel launch
  (events and graph replay): nothing measured with events is meaningful below these.
* ``roofline``: device-to-device copy bandwidth measured in the same run (bytes read +
  written / time), the scopes' bytes moved, and each task's GEMM timed alone
  (2*B*K*H FLOP / time) for its achieved FP32 rate.
* ``cold_l2``: timing with a write of at least twice the L2 size before every timed call
  (:class:`L2Flush`); a flush-only arm runs in the same rounds so that its cost can be
  subtracted round by round.
* ``inductor``: ``torch.compile`` (Inductor, ``dynamic=False``) of the full program and of
  the kernel, with compile time measured apart from any timing.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

from kbrepro.harness.timing import ClockWatch, TimingProtocol, run_block
from kbrepro.model import protocol
from kbrepro.kernels import compile as kc
from kbrepro.kernels.launch import _StreamRef

EMPTY_KERNEL_SOURCE = b'extern "C" __global__ void kb_empty() {}\n'


def flush_bytes(l2_bytes: int, factor: float = 2.0) -> int:
    """The bytes a cold-L2 flush writes on a device whose L2 holds ``l2_bytes``: ``factor``
    times it, at least 1 MiB (the engine's :class:`L2Flush` and the verifier use this rule)."""
    return max(int(l2_bytes * factor), 1 << 20)


@dataclass
class L2Flush:
    """Writes ``bytes`` (>= 2 x the device's L2) of a device buffer; the write evicts what
    the L2 held. ``factor`` is the multiple of the L2 size used."""

    nbytes: int
    buffer: object

    @classmethod
    def for_device(cls, factor: float = 2.0) -> "L2Flush":
        import torch

        l2 = int(torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size)
        n = flush_bytes(l2, factor)
        return cls(nbytes=n, buffer=torch.empty(n, dtype=torch.uint8, device="cuda"))

    def __call__(self) -> None:
        self.buffer.fill_(0x5A)


def empty_kernel():
    """A launchable do-nothing kernel on the current stream (compiled with NVRTC)."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    v = kc.CompileVariant("kb_empty", "nvrtc", ("--std=c++11",), False)
    b = kc.compile_nvrtc(EMPTY_KERNEL_SOURCE, v, f"sm_{props.major}{props.minor}", program_name="empty.cu")
    fn = kc.load_cubin(b.cubin, ["kb_empty"])["kb_empty"]

    def launch():
        fn((1,), (1,), (), stream=_StreamRef(torch.cuda.current_stream().cuda_stream))

    return launch


#: the measurement-floor blocks, in the order they run: (id, arm, protocol); every one times
#: a single arm with events or graph replay (the empty event pair: events only)
FLOOR_BLOCKS = (
    ("floor.empty_event_pair", "empty_event_pair",
     TimingProtocol(mode="events", warmups=10, rounds=50, invocations_per_pair=1, order_seed=1)),
    ("floor.empty_kernel.events", "empty_kernel",
     TimingProtocol(mode="events", warmups=10, rounds=30, invocations_per_pair=100, order_seed=1)),
    ("floor.empty_kernel.graph", "empty_kernel",
     TimingProtocol(mode="graph", warmups=10, rounds=30, invocations_per_pair=100, order_seed=1)),
)
#: the copy-bandwidth block: its id, arms (in order), protocol and the bytes copied each way
COPY_ID = "copy.d2d"
COPY_ARMS = ("memcpy", "elementwise")
#: the copy block's protocol: the model's rule (model/protocol.py), which the verifier holds blocks to
COPY_PROTOCOL = TimingProtocol(*protocol.COPY_PROTOCOL[:4], order_seed=protocol.COPY_PROTOCOL[4])
COPY_BYTES = 1 << 30


def floor_fields() -> dict[str, dict]:
    """Block id -> every field of a :func:`measurement_floor` block but its rounds (JSON
    form): what the engine writes, for a verifier to compare with."""
    return {bid: {"id": bid, "task": 0, "scope": "floor", "mode": p.mode, "kind": "floor", "protocol": p.to_doc(),
                  "arms": [arm]} for bid, arm, p in FLOOR_BLOCKS}


def copy_fields(nbytes: int = COPY_BYTES) -> dict:
    """Every field of a :func:`copy_bandwidth` block of ``nbytes`` but its rounds (JSON form);
    ``bytes_moved`` counts both directions (read + written)."""
    return {"id": COPY_ID, "task": 0, "scope": "copy", "mode": COPY_PROTOCOL.mode, "kind": "copy",
            "bytes_moved": 2 * nbytes, "protocol": COPY_PROTOCOL.to_doc(), "arms": list(COPY_ARMS)}


def measurement_floor(clocks: ClockWatch | None) -> list[dict]:
    """Blocks for the empty event pair and the empty kernel (events and graph), as
    :data:`FLOOR_BLOCKS` says."""
    import torch

    fields = floor_fields()
    fns = {"empty_event_pair": lambda: None}  # an event pair with nothing between: no work
    out = []
    for bid, arm, proto in FLOOR_BLOCKS:
        if arm not in fns:  # compiled once, after the event pair was timed
            fns[arm] = empty_kernel()
        out.append({**fields[bid], **run_block({arm: fns[arm]}, proto, clocks)})
    torch.cuda.synchronize()
    return out


def copy_bandwidth(clocks: ClockWatch | None, nbytes: int = COPY_BYTES) -> dict:
    """Device-to-device copy of ``nbytes`` read + ``nbytes`` written, graph replays, two ways:
    ``memcpy`` (``Tensor.copy_``, a cudaMemcpyAsync) and ``elementwise`` (``torch.mul(src, 1,
    out=dst)``, PyTorch's vectorised elementwise kernel). The faster one is the copy bandwidth
    (:func:`copy_gbps`): on the H200 the memcpy path reached about 2.8 TB/s, well below what a
    kernel streams, so it alone would understate the physical limit."""
    import torch

    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").uniform_()
    dst = torch.empty_like(src)
    fns = {"memcpy": lambda: dst.copy_(src), "elementwise": lambda: torch.mul(src, 1.0, out=dst)}
    blk = run_block({a: fns[a] for a in COPY_ARMS}, COPY_PROTOCOL, clocks)
    del src, dst
    torch.cuda.empty_cache()
    return {**copy_fields(nbytes), **blk}


def copy_gbps(block: dict) -> float:
    """Copy bandwidth in GB/s (bytes read + written) of a :func:`copy_bandwidth` block: the
    faster arm's median. Raises KeyError, TypeError or ValueError on a block of another shape."""
    return protocol.copy_gbps(block["bytes_moved"], [r["times_ms"] for r in block["rounds"]], block["arms"])


def gemm_flops(batch: int, in_features: int, out_features: int) -> int:
    """Floating-point operations of one ``(batch, in_features) x (in_features, out_features)``
    matrix product: a multiply and an add per term, ``2 B K H`` (the bias add is not counted)."""
    return 2 * batch * in_features * out_features


def tflops(flops: int, median_ms: float) -> float:
    """The rate in TFLOP/s (1e12 per second) of ``flops`` operations done in ``median_ms`` (ms)."""
    return flops / (median_ms * 1e-3) / 1e12


def inductor_settings() -> dict:
    """What is known about the numerics Inductor will use, read from this process."""
    import torch

    out = {"torch": torch.__version__, "mode": "default", "dynamic": False}
    try:
        import triton

        out["triton"] = triton.__version__
    except Exception as exc:
        out["triton"] = f"unavailable: {exc}"
    try:
        from torch._inductor import config as ic

        for key in ("emulate_precision_casts", "fallback_random", "max_autotune"):
            if hasattr(ic, key):
                out[key] = getattr(ic, key)
    except Exception as exc:  # pragma: no cover
        out["config"] = f"unreadable: {exc}"
    # paths (cache folders, the ptxas Triton uses) say where this machine keeps things, not how
    # the kernels compute: recorded as "<path>" so that no machine path reaches a bundle
    out["env"] = {k: ("<path>" if v.startswith(("/", "~")) else v) for k, v in os.environ.items()
                  if k.startswith(("TORCHINDUCTOR_", "TRITON_"))}
    return out


def compile_timed(fn, *args):
    """``torch.compile(fn, dynamic=False)`` and its first call, timed; returns (compiled, seconds)."""
    import torch

    compiled = torch.compile(fn, dynamic=False)
    torch.cuda.synchronize()
    t = time.perf_counter()
    compiled(*args)
    torch.cuda.synchronize()
    return compiled, time.perf_counter() - t
