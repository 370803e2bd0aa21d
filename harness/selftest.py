"""Self-tests: known-bad kernels the harness must catch, each by a named check.

The kernels are the self-test's own (no study's): one pointwise CUDA kernel, ``y = 0.5 x``
(float32, exact in IEEE arithmetic, so a correct build is bit-identical to PyTorch's
``x * 0.5``), built by NVRTC with explicit options, and wrappers that misuse it the way
posted candidates do. Checks (each returns True when the kernel behaves):

* ``official_allclose``: ``torch.allclose(reference, candidate)`` on a discriminating input.
* ``bit_identity``: bit-identical to the reference (for kernels that promise it).
* ``poisoned_rerun``: the freed memory is filled with NaN, the kernel runs again, and its
  output must still equal the reference bit for bit (catches outputs left unwritten, which
  a caching allocator can otherwise fill with the previous correct answer).
* ``input_unchanged``: the input's bits after the call equal its bits before.
* ``capture_stream_guard``: launching inside a CUDA-graph capture raises nothing.
* ``graph_replay_after_mutation``: a captured graph, replayed after the input changed,
  gives the reference of the new input.
* ``physical_speed_limit``: bytes moved / timed duration does not exceed the copy
  bandwidth measured in the same run by more than 10%.
* ``timed_stream_covers_work``: the CUDA-event time on the timed stream is at least 80% of
  the wall time until the whole device is idle (``torch.cuda.synchronize``), over 50 calls;
  work launched on another stream escapes the events but not the device-wide wait.
* ``ftz_evidence``: on subnormal inputs (1e-39, -3e-39: ``0.5 x`` is subnormal too) the
  output is flushed to zero exactly when the binary claims FTZ.

A known-bad kernel is *caught* when at least one of its expected checks fails; the good
control must pass every check. :func:`summarise` is pure (CPU-testable).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable
from kbrepro.harness import checks as hchecks
from kbrepro.kernels import compile as kc
from kbrepro.harness.timing import TimingProtocol, run_block
from kbrepro.kernels.launch import THREADS_PER_BLOCK, KernelSet, LaunchError, blocks_for

CHECKS = ("official_allclose", "bit_identity", "poisoned_rerun", "input_unchanged", "capture_stream_guard",
          "graph_replay_after_mutation", "physical_speed_limit", "timed_stream_covers_work", "ftz_evidence")
#: the order in which :func:`run_selftests` makes the checks (a test's ``failed_checks`` follow it)
RUN_ORDER = ("input_unchanged", "official_allclose", "bit_identity", "poisoned_rerun", "capture_stream_guard",
             "graph_replay_after_mutation", "physical_speed_limit", "timed_stream_covers_work", "ftz_evidence")
#: the correctness checks' input (float32, uniform in [-20, 20]) and the timing checks' larger one
CHECK_SHAPE = (1024, 8192)
TIMING_SHAPE = (8192, 8192)
#: bytes one call must move on the timing input: read x and write y, float32
TIMED_BYTES = 2 * TIMING_SHAPE[0] * TIMING_SHAPE[1] * 4
#: the speed limit: at most this multiple of the run's copy bandwidth
SPEED_LIMIT_FACTOR = 1.1
#: the timed stream covers the work when its event time is at least this fraction of the wall time
COVER_FRACTION = 0.8


@dataclass(frozen=True)
class KnownKernel:
    """One row of the self-test table: a kernel, what is wrong with it, the checks expected to
    catch it (none for the good control, which must pass them all), whether it promises
    bit identity with the reference (``bit_identity`` applies) and whether its FTZ mode is
    witnessed (``ftz_evidence`` applies)."""

    name: str
    description: str
    expect_caught_by: tuple[str, ...]
    promises_bits: bool
    ftz_witnessed: bool


#: the self-tests, in the order they run: the product's own expectations, which a verifier
#: derives a selftest document's ``expected`` and ``as_expected`` from
TABLE = (
    KnownKernel("good_control", "the explicit --ftz=false build, launched on the current stream", (), True, True),
    KnownKernel("all_zero", "returns zeros", ("official_allclose",), False, False),
    KnownKernel("unwritten_output", "returns torch.empty_like(x) without writing it",
                ("poisoned_rerun", "official_allclose"), False, False),
    KnownKernel("mutates_input", "computes in place: the right answer, written over its input", ("input_unchanged",),
                True, True),
    KnownKernel("side_stream", "launches on a side stream that the timed stream never waits for",
                ("capture_stream_guard", "timed_stream_covers_work", "physical_speed_limit"), True, True),
    KnownKernel("ftz_false_label_that_flushes", "compiled with --ftz=true but labelled --ftz=false",
                ("ftz_evidence", "bit_identity"), True, True),
    KnownKernel("fast_math_twin", "compiled with --use_fast_math, labelled as the bit-identical variant",
                ("bit_identity", "ftz_evidence"), True, True),
)


def bits_check(kernel: KnownKernel, bit_identical_count: int) -> bool | None:
    """``bit_identity``: every element of the :data:`CHECK_SHAPE` output bit-identical to the
    reference; None (not applicable) for a kernel that does not promise it."""
    return bit_identical_count == CHECK_SHAPE[0] * CHECK_SHAPE[1] if kernel.promises_bits else None


def apparent_gbps(median_ms: float) -> float:
    """GB/s (1e9 bytes/s) a call moving :data:`TIMED_BYTES` in ``median_ms`` (ms) would need;
    inf for a time that is not positive."""
    return TIMED_BYTES / (median_ms * 1e-3) / 1e9 if median_ms > 0 else float("inf")


def speed_check(median_ms: float, copy_gbps: float | None) -> bool | None:
    """``physical_speed_limit``: :func:`apparent_gbps` at most :data:`SPEED_LIMIT_FACTOR`
    times the run's copy bandwidth ``copy_gbps`` (GB/s); None without one."""
    return None if copy_gbps is None else bool(apparent_gbps(median_ms) <= SPEED_LIMIT_FACTOR * copy_gbps)


def covers(events_ms: float, wall_ms: float) -> bool:
    """``timed_stream_covers_work``: the timed stream's event time (ms) is at least
    :data:`COVER_FRACTION` of the wall time until the device is idle (ms)."""
    return events_ms >= COVER_FRACTION * wall_ms


def covers_work(fn, calls: int = 50, repeats: int = 5) -> tuple[bool, float, float]:
    """Median over ``repeats`` of (event time on the current stream, host wall time until
    the device is idle) for ``calls`` calls of ``fn``, in ms; True if events >= 0.8 x wall."""
    import statistics
    import time

    import torch

    ev, wall = [], []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        torch.cuda.synchronize()
        wall.append((time.perf_counter() - t0) * 1e3)
        ev.append(start.elapsed_time(end))
    e, w = statistics.median(ev), statistics.median(wall)
    return covers(e, w), e, w


@dataclass
class SelfTest:
    name: str
    description: str
    expect_caught_by: tuple[str, ...]  # empty for the good control
    checks: dict = field(default_factory=dict)  # check name -> True (passed) / False (failed) / None (n/a)
    details: dict = field(default_factory=dict)


def summarise(tests: list[SelfTest]) -> dict:
    """Per test: which checks failed (in :data:`RUN_ORDER`, then any other in the order
    given), whether it was caught as expected; overall verdict. Pure: a verifier calls it on
    the recorded outcomes with its own expectations (:data:`TABLE`)."""
    rows = []
    ok = True
    for t in tests:
        names = [c for c in RUN_ORDER if c in t.checks] + [c for c in t.checks if c not in RUN_ORDER]
        failed = [c for c in names if t.checks[c] is False]
        if t.expect_caught_by:
            caught = any(c in failed for c in t.expect_caught_by)
            good = caught
        else:
            caught = bool(failed)
            good = not failed
        ok &= good
        rows.append({"name": t.name, "description": t.description, "expected": list(t.expect_caught_by),
                     "failed_checks": failed, "caught": caught, "as_expected": good, "checks": t.checks,
                     "details": t.details})
    return {"all_as_expected": ok, "tests": rows}


#: the self-test's own kernel: y = 0.5 x, elementwise, float32 (exact, so bit-identical to
#: PyTorch's x * 0.5 unless the binary flushes subnormals)
SOURCE = b"""extern "C" __global__ void scale_half(const float* __restrict__ x, float* __restrict__ y, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * 0.5f;
}
"""
KERNEL = "scale_half"
#: witness inputs: subnormal, so that 0.5 x is subnormal and an FTZ binary returns 0
WITNESS_INPUTS = (1e-39, -3e-39)


def reference(x):
    """PyTorch's reference of :data:`SOURCE`: ``x * 0.5`` (same shape, float32)."""
    return x * 0.5


def run_selftests(copy_gbps: float | None, arch: str, progress: Callable[[str], None] | None = None) -> dict:
    """Run every known-bad kernel and the good control: correctness checks on 1024 x 8192
    float32 inputs uniform in [-20, 20], timing checks at 8192 x 8192. Needs a GPU.
    ``copy_gbps`` is the copy bandwidth (GB/s) measured in this run, for the speed-limit
    check; ``arch``: ``sm_XX`` of the GPU. Returns the ``selftest`` document's body
    (:func:`summarise`). Raises CompileError if NVRTC refuses the kernel."""
    import numpy as np
    import torch


    tol = hchecks.Tolerance(1e-4, 1e-4)

    def build(label, options, expected_ftz):
        v = kc.CompileVariant(label, "nvrtc", tuple(options), expected_ftz)
        b = kc.compile_nvrtc(SOURCE, v, arch, program_name="selftest.cu")
        ks = KernelSet(label, kc.load_cubin(b.cubin, [KERNEL]))

        def run(x, out=None, stream=None):
            y = torch.empty_like(x) if out is None else out
            n = x.numel()
            ks.launch(KERNEL, (blocks_for(n),), (THREADS_PER_BLOCK,), (x.data_ptr(), y.data_ptr(), np.int64(n)),
                      device_index=x.device.index or 0, stream=stream)
            return y
        return run

    good = build("explicit_ftz_false", ("--std=c++11", "--fmad=false", "--ftz=false"), False)
    mislabelled = build("claims_ftz_false_but_flushes", ("--std=c++11", "--fmad=false", "--ftz=true"), False)
    fastmath = build("fast_math_twin", ("--std=c++11", "--use_fast_math"), False)
    g = torch.Generator(device="cuda").manual_seed(42)
    z = (torch.rand(*CHECK_SHAPE, device="cuda", generator=g) * 40 - 20).contiguous()
    # the timing checks use an 8x larger input, so that one call's device time (~0.3 ms on an
    # H200) dwarfs the host's launch time (15-30 us): work that escapes the timed stream then
    # shows clearly, whatever the host's speed
    zbig = (torch.rand(*TIMING_SHAPE, device="cuda", generator=g) * 40 - 20).contiguous()
    ref = reference(z)
    side = torch.cuda.Stream()

    kernels: dict[str, Callable] = {
        "good_control": good,
        "all_zero": lambda x: torch.zeros_like(x),
        "unwritten_output": lambda x: torch.empty_like(x),
        "mutates_input": lambda x: good(x, out=x),
        "side_stream": lambda x: good(x, stream=side),
        "ftz_false_label_that_flushes": mislabelled,
        "fast_math_twin": fastmath,
    }
    witness_x = torch.tensor([list(WITNESS_INPUTS)], device="cuda", dtype=torch.float32)
    witness_ref = reference(witness_x)
    results = []
    for spec in TABLE:
        name, fn, promises_bits = spec.name, kernels[spec.name], spec.promises_bits
        if progress:
            progress(name)
        t = SelfTest(name, spec.description, spec.expect_caught_by)
        x = z.clone()
        before = x.view(torch.int32).clone()
        out = fn(x)
        torch.cuda.synchronize()
        t.checks["input_unchanged"] = bool(torch.equal(x.view(torch.int32), before))
        x.copy_(z)
        out = fn(x)
        torch.cuda.synchronize()
        c = hchecks.compare(ref, out, tol)
        t.checks["official_allclose"] = bool(c["official"]["pass"])
        t.checks["bit_identity"] = bits_check(spec, c["bit_identical_count"])
        t.details["bit_identical_count"] = c["bit_identical_count"]
        del out
        poison = torch.full_like(z, float("nan"))
        del poison
        x.copy_(z)
        out2 = fn(x)
        torch.cuda.synchronize()
        t.checks["poisoned_rerun"] = bool(torch.equal(out2.view(torch.int32), ref.view(torch.int32))) if promises_bits \
            else bool(hchecks.compare(ref, out2, tol)["official"]["pass"])
        del out2
        # capture: the launch must be recorded on the capturing stream
        x.copy_(z)
        gph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(gph):
                gout = fn(x)
            t.checks["capture_stream_guard"] = True
            x.copy_(z * 0.5)
            gph.replay()
            torch.cuda.synchronize()
            ref2 = reference(z * 0.5)
            t.checks["graph_replay_after_mutation"] = bool(hchecks.compare(ref2, gout, tol)["official"]["pass"])
            del gout
        except LaunchError as exc:
            t.checks["capture_stream_guard"] = False
            t.checks["graph_replay_after_mutation"] = None
            t.details["capture_error"] = str(exc).splitlines()[0]
        torch.cuda.synchronize()
        # timing on the current stream, events, on the large input
        xb = zbig.clone()
        blk = run_block({"kernel": lambda: fn(xb)}, TimingProtocol("events", 3, 15, 20, 1))
        torch.cuda.synchronize()
        med = float(np.median([r["times_ms"]["kernel"] for r in blk["rounds"]]))
        gbps = apparent_gbps(med)
        t.details["median_ms"] = med
        t.details["apparent_GBps"] = gbps if gbps != float("inf") else None
        t.checks["physical_speed_limit"] = speed_check(med, copy_gbps)
        xb.copy_(zbig)
        ok, ev_ms, wall_ms = covers_work(lambda: fn(xb))
        t.checks["timed_stream_covers_work"] = ok
        t.details["events_ms_50_calls"], t.details["device_wall_ms_50_calls"] = ev_ms, wall_ms
        del xb
        # FTZ witness against the claimed mode (all these kernels claim --ftz=false)
        wout = fn(witness_x.clone())
        torch.cuda.synchronize()
        flushed = bool(((wout == 0) & (witness_ref != 0)).any().item())
        t.checks["ftz_evidence"] = not flushed if spec.ftz_witnessed else None
        results.append(t)
    torch.cuda.synchronize()
    return summarise(results)
