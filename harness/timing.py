"""Interleaved, paired GPU timing with CUDA events, eagerly or by CUDA graph replay.

Protocol (stored with every block): each arm is called ``warmups`` times; in ``graph``
mode one call is then captured into a CUDA graph and replayed once. Then, for each of
``rounds`` rounds, the arms run in an order shuffled by ``random.Random(order_seed)``; for
each arm the device is synchronised, a start event is recorded on the current stream, the
arm runs ``invocations_per_pair`` times (graph replays in graph mode), an end event is
recorded, and the end event is synchronised. The sample is elapsed time / invocations, in
milliseconds. Every raw sample and each round's order are kept: statistics are derived when
presenting (``harness.stats``), never stored in place of samples.

Compilation and warmup stay outside the timed region; correctness checks run before any
timing (the run loop's job).
"""
from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass
from typing import Callable, Mapping


@dataclass(frozen=True)
class TimingProtocol:
    """``mode``: ``"events"`` or ``"graph"``. Counts are per arm. With ``adaptive`` set,
    ``rounds`` is the minimum and rounds continue as :class:`AdaptiveRule` says."""

    mode: str
    warmups: int
    rounds: int
    invocations_per_pair: int
    order_seed: int
    adaptive: "AdaptiveRule | None" = None
    l2: str = "warm"

    def to_doc(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k not in ("adaptive", "l2")}
        if self.adaptive is not None:
            d["adaptive"] = asdict(self.adaptive)
        if self.l2 != "warm":
            d["l2"] = self.l2
        return d


@dataclass(frozen=True)
class AdaptiveRule:
    """Stop when, for every compared pair (numerator arm, denominator arm), the bootstrap
    interval of the median per-round ratio has a relative half-width at most
    ``target_rel_half_width``; or at ``max_rounds``; or after ``max_seconds`` of timing.
    Checked every ``check_every`` rounds from ``min_rounds`` on, with ``resamples`` draws."""

    target_rel_half_width: float = 0.005
    min_rounds: int = 10
    max_rounds: int = 400
    max_seconds: float = 20.0
    check_every: int = 5
    resamples: int = 1000
    pairs: tuple = ()


def stopping_state(rounds: list[dict], rule: AdaptiveRule, elapsed_s: float) -> tuple[bool, str | None, dict]:
    """Decide whether an adaptive block may stop. Returns ``(stop, reason, widths)`` where
    ``widths`` maps ``"num/den"`` to the current relative half-width (inf if undefined).
    Pure function of the recorded rounds, so it is testable without a GPU."""
    from kbrepro.harness import stats

    n = len(rounds)
    widths = {}
    for num, den in rule.pairs:
        block = {"rounds": rounds}
        ci = stats.bootstrap_median_ci(stats.paired_ratios(block, num, den), resamples=rule.resamples, seed=n)
        widths[f"{num}/{den}"] = stats.relative_half_width(ci)
    if n >= rule.max_rounds:
        return True, "max_rounds", widths
    if elapsed_s >= rule.max_seconds and n >= 2:
        return True, "max_seconds", widths
    if n >= rule.min_rounds and widths and all(w <= rule.target_rel_half_width for w in widths.values()):
        return True, "target_reached", widths
    if n >= rule.min_rounds and not rule.pairs:
        return True, "no_pairs", widths
    return False, None, widths


class ClockWatch:
    """SM/memory clocks and throttle reasons through NVML, sampled once per round.
    ``available`` is False (with ``reason``) where NVML is missing; sampling is then a no-op."""

    def __init__(self, device_index: int = 0):
        self.available = False
        self.reason = None
        try:
            import pynvml  # type: ignore

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(device_index)
            self.available = True
        except Exception as exc:  # no NVML library, no driver, container without access
            self.reason = f"NVML unavailable: {type(exc).__name__}: {exc}"

    def sample(self) -> dict | None:
        if not self.available:
            return None
        n = self._nvml
        try:
            reasons = int(n.nvmlDeviceGetCurrentClocksEventReasons(self._handle)) if hasattr(
                n, "nvmlDeviceGetCurrentClocksEventReasons") else int(n.nvmlDeviceGetCurrentClocksThrottleReasons(self._handle))
            return {"sm_clock_mhz": int(n.nvmlDeviceGetClockInfo(self._handle, n.NVML_CLOCK_SM)),
                    "memory_clock_mhz": int(n.nvmlDeviceGetClockInfo(self._handle, n.NVML_CLOCK_MEM)),
                    "throttle_reasons": reasons, "throttled": bool(reasons & THROTTLE_MASK)}
        except Exception as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}


#: NVML throttle-reason bits that mean the clocks were held down by something other than
#: idleness or the application clock setting (nvml.h: nvmlClocksEventReason*): SW power cap
#: 0x4, HW slowdown 0x8, sync boost 0x10, SW thermal 0x20, HW thermal 0x40, HW power brake 0x80.
THROTTLE_MASK = 0x4 | 0x8 | 0x10 | 0x20 | 0x40 | 0x80


def run_block(arms: Mapping[str, Callable[[], object]], protocol: TimingProtocol,
              clocks: ClockWatch | None = None, flush: Callable[[], None] | None = None) -> dict:
    """Time ``arms`` (name -> zero-argument callable returning its output tensor) under
    ``protocol``. ``flush``, if given, runs before every timed call inside the timed region
    (cold-L2 regime; its own cost must be measured separately and subtracted).

    Returns ``{"protocol", "arms", "rounds": [{"order": [...], "times_ms": {arm: ms},
    "clocks": {...} or absent}]}``. Times are milliseconds per invocation (float).
    Raises RuntimeError from CUDA as is.
    """
    import torch

    names = list(arms)
    runners: dict[str, Callable[[], object]] = {}
    keep = []
    for name, fn in arms.items():
        for _ in range(protocol.warmups):
            fn()
        torch.cuda.synchronize()
        if protocol.mode == "graph":
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                if flush is not None:
                    flush()
                out = fn()
            graph.replay()
            torch.cuda.synchronize()
            keep.append((graph, out))
            runners[name] = graph.replay
        elif protocol.mode == "events":
            if flush is None:
                runners[name] = fn
            else:
                runners[name] = (lambda f: (lambda: (flush(), f())))(fn)
        else:
            raise ValueError(f"unknown timing mode {protocol.mode!r}")
    rng = random.Random(protocol.order_seed)
    rounds = []
    rule = protocol.adaptive
    outcome = None
    t_start = time.perf_counter()
    limit = rule.max_rounds if rule else protocol.rounds
    while len(rounds) < limit:
        if rule and len(rounds) >= rule.min_rounds and len(rounds) % rule.check_every == 0:
            stop, reason, widths = stopping_state(rounds, rule, time.perf_counter() - t_start)
            if stop:
                outcome = {"rounds": len(rounds), "stop_reason": reason, "rel_half_widths": widths}
                break
        order = names[:]
        rng.shuffle(order)
        times = {}
        for name in order:
            run = runners[name]
            torch.cuda.synchronize()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(protocol.invocations_per_pair):
                run()
            end.record()
            end.synchronize()
            times[name] = start.elapsed_time(end) / protocol.invocations_per_pair
        row = {"order": order, "times_ms": times}
        if clocks is not None and clocks.available:
            row["clocks"] = clocks.sample()
        rounds.append(row)
    del keep
    doc = {"protocol": protocol.to_doc(), "arms": names, "rounds": rounds}
    if rule:
        if outcome is None:
            stop, reason, widths = stopping_state(rounds, rule, time.perf_counter() - t_start)
            outcome = {"rounds": len(rounds), "stop_reason": reason or "max_rounds", "rel_half_widths": widths}
        doc["adaptive"] = outcome
    return doc


def throttled(row: dict) -> bool:
    """Whether a round's NVML sample shows clocks held down (:data:`THROTTLE_MASK`)."""
    c = row.get("clocks") or {}
    return bool(int(c.get("throttle_reasons", 0)) & THROTTLE_MASK)
