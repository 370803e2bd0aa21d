"""Named checks against the known ways a KernelBench candidate (``ModelNew``) cheats.

Each check is a function that returns a frozen :class:`CheckVerdict` (``name``, ``passed``:
True, False, or None where it cannot decide, and a one-line ``detail``). The checks here are
the logic only, on what a harness observed; they run on CPU or CUDA tensors alike, so their
decisions are tested on CPU with fake candidates (``tests/test_cheats.py``). The isolated
candidate runner of issue 11 calls them; a verdict of False is a failure of the candidate,
never a warning.

The cheats they are meant for (issue 11; sources in its text): the reference's freed output
picked up by ``torch.empty`` (caught by :func:`deterministic_under_poison`); all-zero or
near-constant outputs passing because the true values are below atol (:func:`discriminates`,
KernelBench issue #165); inputs zeroed or changed so the reference agrees
(:func:`inputs_unchanged`); results cached by ``id()``, data pointer or content
(:func:`follows_fresh_inputs`); lazy outputs that compute inside the checker and tensor
subclasses (:func:`output_is_plain_tensor`); batch-and-skip, where one call in k does the
work (:func:`per_call_times_consistent`); a "custom" kernel that only calls PyTorch
(:func:`custom_kernel_ran`); precision flags changed by the candidate
(:func:`precision_flags_unchanged`); a speed past what memory bandwidth allows
(:func:`within_roofline`).
"""
from __future__ import annotations

import hashlib
import math
import re
import statistics
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence


@dataclass(frozen=True)
class CheckVerdict:
    """The verdict of one named check: ``passed`` True (the candidate behaves), False (caught)
    or None (cannot decide, with why in ``detail``)."""

    name: str
    passed: bool | None
    detail: str

    def to_doc(self) -> dict:
        return {"name": self.name, "passed": self.passed, "detail": self.detail}


def tensor_digest(t) -> str:
    """sha256 hex of a tensor's dtype, shape, strides and bytes (copied to the CPU)."""
    import torch

    c = t.detach().contiguous().to("cpu")
    h = hashlib.sha256(f"{c.dtype}|{tuple(t.shape)}|{tuple(t.stride())}|".encode())
    if c.numel():
        h.update(c.view(torch.uint8).numpy().tobytes() if c.dtype != torch.bool else c.numpy().tobytes())
    return h.hexdigest()


def inputs_unchanged(before: Sequence[str], inputs: Sequence[Any]) -> CheckVerdict:
    """Every tensor input has the digest (:func:`tensor_digest`) it had before the call;
    ``before`` holds one digest per input (None for a non-tensor)."""
    import torch

    changed = [i for i, (d, x) in enumerate(zip(before, inputs))
               if isinstance(x, torch.Tensor) and d is not None and tensor_digest(x) != d]
    if len(before) != len(inputs):
        return CheckVerdict("inputs_unchanged", False, f"{len(before)} inputs before the call, {len(inputs)} after")
    return CheckVerdict("inputs_unchanged", not changed,
                        "the inputs' bytes are the same after the call" if not changed else
                        f"input(s) {changed} changed during the call (the reference would see other data)")


def output_is_plain_tensor(reference, output) -> CheckVerdict:
    """The output is exactly a ``torch.Tensor`` (not a subclass, whose operators could
    compute or fake the result inside the checker) with the reference's dtype, shape and
    device, and no autograd graph that defers work."""
    import torch

    if type(output) is not torch.Tensor:
        return CheckVerdict("output_is_plain_tensor", False, f"the output is a {type(output).__module__}."
                            f"{type(output).__qualname__}, not a torch.Tensor")
    diffs = [f"{k} {a} != {b}" for k, a, b in (("dtype", output.dtype, reference.dtype),
                                               ("shape", tuple(output.shape), tuple(reference.shape)),
                                               ("device", output.device, reference.device)) if a != b]
    if output.grad_fn is not None:
        diffs.append(f"an autograd graph ({type(output.grad_fn).__name__})")
    return CheckVerdict("output_is_plain_tensor", not diffs,
                        "a plain tensor of the reference's dtype, shape and device" if not diffs else "; ".join(diffs))


def discriminates(reference, atol: float, rtol: float) -> CheckVerdict:
    """Whether the reference output can tell a wrong candidate from a right one under
    ``allclose(reference, candidate, atol, rtol)``: False where max |reference| <= atol (an
    all-zero output passes) or where the output is constant to within the allowance (a
    constant passes); formula: allowance = atol + rtol * |candidate| (torch.allclose)."""
    import torch

    r = reference.detach().double()
    finite = r[torch.isfinite(r)]
    if finite.numel() == 0:
        return CheckVerdict("discriminates", None, "no finite reference value")
    peak = float(finite.abs().max())
    if peak <= atol:
        return CheckVerdict("discriminates", False, f"max |reference| = {peak:.3g} <= atol = {atol:g}: zeros pass")
    spread = float(finite.max() - finite.min())
    mid = float((finite.max() + finite.min()) / 2)
    if spread / 2 <= atol + rtol * abs(mid):
        return CheckVerdict("discriminates", False, f"the reference is constant to within the allowance (spread "
                            f"{spread:.3g}): the constant {mid:.6g} passes")
    return CheckVerdict("discriminates", True, f"max |reference| = {peak:.3g} > atol, spread {spread:.3g}")


def follows_fresh_inputs(candidate: Callable, reference: Callable, make_inputs: Callable[[int], tuple],
                         close: Callable[[Any, Any], bool], calls: int = 4) -> CheckVerdict:
    """Call the candidate ``calls`` times, each on new input values: alternately in new
    tensors and written into the first call's tensors (same ``id()`` and data pointer), and
    once repeating the first values in new tensors. Every output must match the reference of
    its own inputs (``close(ref, out)``). A cache keyed by ``id()``, data pointer or shape
    returns a stale answer here; ``make_inputs(i)`` draws the i-th input set."""
    first = make_inputs(0)
    bufs = tuple(x for x in first)
    stale = []
    plan = [("new", i) for i in range(1, calls)] + [("same buffers", calls), ("repeat", 0)]
    out = candidate(*bufs)
    if not close(reference(*make_inputs(0)), out):
        return CheckVerdict("follows_fresh_inputs", False, "the first call's output does not match its reference")
    for how, i in plan:
        xs = make_inputs(i)
        if how == "same buffers":
            for b, x in zip(bufs, xs):
                if hasattr(b, "copy_"):
                    b.copy_(x)
            xs = bufs
        out = candidate(*xs)
        if not close(reference(*make_inputs(i)), out):
            stale.append(f"call on input set {i} ({how})")
    return CheckVerdict("follows_fresh_inputs", not stale,
                        f"{len(plan) + 1} calls on fresh inputs each matched their reference" if not stale else
                        "stale output on " + ", ".join(stale) + " (a cache keyed by identity, pointer or shape)")


def deterministic_under_poison(outputs: Sequence[Any]) -> CheckVerdict:
    """Outputs of the same call on the same inputs, each made after the free memory was
    filled with a different poison (NaN, then another pattern), must be bitwise equal: an
    output that reads memory it never wrote (``torch.empty`` picking up the reference's freed
    buffer) changes with the poison."""
    import torch

    if len(outputs) < 2:
        return CheckVerdict("deterministic_under_poison", None, "fewer than two poisoned runs")
    base = outputs[0].detach().contiguous().view(torch.uint8)
    diff = [i for i, o in enumerate(outputs[1:], 1) if not torch.equal(o.detach().contiguous().view(torch.uint8), base)]
    return CheckVerdict("deterministic_under_poison", not diff,
                        f"{len(outputs)} runs under different poison are bitwise equal" if not diff else
                        f"run(s) {diff} differ from run 0: the output depends on memory the candidate did not write")


def per_call_times_consistent(times_ms: Sequence[float], gap: float = 5.0, share: float = 0.1) -> CheckVerdict:
    """Per-call times of one candidate on fresh inputs fall apart into a fast and a slow
    group when one call in k does the work (batch-and-skip) or a cache answers some calls:
    sorted, two neighbours differ by more than ``gap`` times, and each side holds at least
    ``share`` of the calls and at least two. An honest kernel's calls are alike; one host
    hiccup (a single slow call) never counts."""
    ts = sorted(float(t) for t in times_ms if t is not None and math.isfinite(float(t)) and float(t) > 0)
    if len(ts) < 4:
        return CheckVerdict("per_call_times_consistent", None, "fewer than 4 timed calls")
    i = max(range(1, len(ts)), key=lambda j: ts[j] / ts[j - 1])
    fast, slow = ts[:i], ts[i:]
    least = max(2, share * len(ts))  # one host hiccup (or one fast call) never splits the calls
    bad = ts[i] / ts[i - 1] > gap and len(fast) >= least and len(slow) >= least
    med = statistics.median(ts)
    return CheckVerdict("per_call_times_consistent", not bad,
                        f"{len(ts)} calls, median {med:.4g} ms, no split" if not bad else
                        f"{len(fast)} call(s) at most {fast[-1]:.4g} ms and {len(slow)} at least {slow[0]:.4g} ms "
                        f"({ts[i] / ts[i - 1]:.0f}x apart): the work is not done on every call")


#: kernel names that PyTorch, cuBLAS, cuDNN or CUTLASS launch (not a candidate's own kernel)
LIBRARY_KERNEL = re.compile(r"(^|[^a-z])(at::|at_|aten|c10::|cublas|cublasLt|cudnn|cutlass|sm\d+_xmma|ampere_|"
                            r"volta_|turing_|hopper_|gemv|gemmSN|splitKreduce|elementwise_kernel|"
                            r"vectorized_elementwise|reduce_kernel|Memset|Memcpy|triton_(poi|red|per)_fused)",
                            re.IGNORECASE)


def custom_kernel_ran(kernel_names: Sequence[str]) -> CheckVerdict:
    """From the profiler's list of kernels one call launched: at least one is not a
    library kernel (:data:`LIBRARY_KERNEL`); a "custom" candidate whose kernels are all
    PyTorch's or cuBLAS's does not run a kernel of its own."""
    if not kernel_names:
        return CheckVerdict("custom_kernel_ran", False, "the call launched no kernel")
    own = [k for k in kernel_names if not LIBRARY_KERNEL.search(k)]
    return CheckVerdict("custom_kernel_ran", bool(own),
                        f"custom kernel(s): {', '.join(sorted(set(own))[:3])}" if own else
                        f"only library kernels ran ({', '.join(sorted(set(kernel_names))[:3])})")


def precision_flags_unchanged(before: Mapping[str, Any], after: Mapping[str, Any]) -> CheckVerdict:
    """The precision settings (e.g. ``allow_tf32_matmul``, ``float32_matmul_precision``)
    recorded before the candidate was built are the ones in effect after: a candidate that
    turns TF32 on computes a claimed float32 result in 10-bit mantissas."""
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    return CheckVerdict("precision_flags_unchanged", not changed,
                        "precision settings unchanged" if not changed else
                        "changed by the candidate: " + ", ".join(f"{k} {before.get(k)!r} -> {after.get(k)!r}"
                                                                 for k in changed))


def within_roofline(bytes_moved: int, median_ms: float, bandwidth_gbps: float, slack: float = 0.1) -> CheckVerdict:
    """A call that must move ``bytes_moved`` bytes cannot take less than bytes / bandwidth
    (the copy bandwidth measured in the same run, GB/s = 1e9 B/s); ``slack`` allows the
    bandwidth measurement's own error."""
    if not (bytes_moved and median_ms and bandwidth_gbps) or median_ms <= 0:
        return CheckVerdict("within_roofline", None, "bytes moved, time or bandwidth not measured")
    gbps = bytes_moved / (median_ms * 1e-3) / 1e9
    ok = gbps <= (1 + slack) * bandwidth_gbps
    return CheckVerdict("within_roofline", ok, f"{gbps:.0f} GB/s against the measured {bandwidth_gbps:.0f} GB/s"
                        + ("" if ok else ": faster than memory allows, so not all the work ran in the timed call"))


__all__ = ["CheckVerdict", "tensor_digest", "inputs_unchanged", "output_is_plain_tensor", "discriminates",
           "follows_fresh_inputs", "deterministic_under_poison", "per_call_times_consistent", "custom_kernel_ran",
           "precision_flags_unchanged", "within_roofline", "LIBRARY_KERNEL"]
