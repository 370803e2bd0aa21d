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

import time
from dataclasses import asdict, dataclass
from typing import Callable, Mapping, Sequence

from kbrepro.harness import stats
from kbrepro.model.timing_rules import arm_orders


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

    @classmethod
    def from_doc(cls, doc: Mapping) -> "AdaptiveRule":
        """The rule a protocol document records (``TimingProtocol.to_doc()["adaptive"]``),
        every field present and of its type: positive integers for the counts (``max_rounds``
        at least ``min_rounds``), positive numbers for the half-width (a fraction) and
        ``max_seconds`` (s), ``pairs`` a list of [numerator, denominator] arm names. Raises
        ValueError naming the first field that is not so."""
        if not isinstance(doc, Mapping) or set(doc) != set(cls.__dataclass_fields__):
            raise ValueError(f"the adaptive rule has the fields {sorted(doc) if isinstance(doc, Mapping) else doc!r}; "
                             f"the engine writes {sorted(cls.__dataclass_fields__)}")
        for k in ("min_rounds", "max_rounds", "check_every", "resamples"):
            if isinstance(doc[k], bool) or not isinstance(doc[k], int) or doc[k] < 1:
                raise ValueError(f"the adaptive rule's {k} is not a positive integer")
        for k in ("target_rel_half_width", "max_seconds"):
            if isinstance(doc[k], bool) or not isinstance(doc[k], (int, float)) or not 0 < doc[k] < float("inf"):
                raise ValueError(f"the adaptive rule's {k} is not a positive number")
        if doc["max_rounds"] < doc["min_rounds"]:
            raise ValueError("the adaptive rule's max_rounds is below its min_rounds")
        pairs = doc["pairs"]
        if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 2 and all(isinstance(a, str) for a in p)
                                                  for p in pairs):
            raise ValueError("the adaptive rule's pairs are not a list of [numerator, denominator] arm names")
        return cls(**{**doc, "pairs": tuple(tuple(p) for p in pairs)})


def is_check_point(n: int, rule: AdaptiveRule) -> bool:
    """Whether the engine asks ``rule`` whether to stop after ``n`` rounds: from
    ``min_rounds`` on, every ``check_every`` rounds (and never once ``max_rounds`` ran)."""
    return n >= rule.min_rounds and n % rule.check_every == 0


def pair_ratios(rounds: list[dict], rule: AdaptiveRule) -> dict[str, list[float]]:
    """``"num/den"`` -> the per-round ratios num/den over ``rounds`` (:func:`stats.paired_ratios`)
    of every pair ``rule`` compares. Raises InvalidResultsError as that function does."""
    block = {"rounds": rounds}
    return {f"{num}/{den}": stats.paired_ratios(block, num, den) for num, den in rule.pairs}


def pair_widths(ratios: Mapping[str, Sequence[float]], rule: AdaptiveRule, n: int) -> dict[str, float]:
    """``"num/den"`` -> the relative half-width (a fraction; inf where undefined) of the
    bootstrap interval of the median of ``ratios[pair]`` after ``n`` rounds: ``rule.resamples``
    draws seeded with ``n``."""
    return {k: stats.relative_half_width(stats.bootstrap_median_ci(v, resamples=rule.resamples, seed=n))
            for k, v in ratios.items()}


def first_over_target(ratios: Mapping[str, Sequence[float]], rule: AdaptiveRule, n: int,
                      first: Sequence[str] = ()) -> str | None:
    """The first pair (those in ``first`` before the others) whose width :func:`pair_widths`
    gives is over ``rule.target_rel_half_width``, or None if none is: decided pair by pair
    (:func:`stats.half_width_exceeds`, which mostly needs a few of the resamples)."""
    keys = [k for k in first if k in ratios] + [k for k in ratios if k not in first]
    return next((k for k in keys if stats.half_width_exceeds(ratios[k], rule.target_rel_half_width,
                                                             resamples=rule.resamples, seed=n)), None)


def within_target(ratios: Mapping[str, Sequence[float]], rule: AdaptiveRule, n: int) -> bool:
    """Whether every width :func:`pair_widths` gives is at most ``rule.target_rel_half_width``
    (False without pairs), stopping at the first pair over it (:func:`first_over_target`)."""
    return bool(ratios) and first_over_target(ratios, rule, n) is None


def stop_reason(n: int, rule: AdaptiveRule, elapsed_s: float, within: Callable[[], bool]) -> str | None:
    """Why an adaptive block stops after ``n`` rounds and ``elapsed_s`` seconds of timing, or
    None to go on: ``max_rounds``, then ``max_seconds`` (from 2 rounds on), then, from
    ``min_rounds`` on, ``target_reached`` (``within()`` says every compared pair's interval is
    narrow enough) or ``no_pairs`` (nothing to compare)."""
    if n >= rule.max_rounds:
        return "max_rounds"
    if elapsed_s >= rule.max_seconds and n >= 2:
        return "max_seconds"
    if n >= rule.min_rounds and rule.pairs and within():
        return "target_reached"
    if n >= rule.min_rounds and not rule.pairs:
        return "no_pairs"
    return None


def stopping_state(rounds: list[dict], rule: AdaptiveRule, elapsed_s: float) -> tuple[bool, str | None, dict]:
    """Decide whether an adaptive block may stop. Returns ``(stop, reason, widths)`` where
    ``widths`` maps ``"num/den"`` to the current relative half-width (inf if undefined).
    Pure function of the recorded rounds, so it is testable without a GPU."""
    n = len(rounds)
    widths = pair_widths(pair_ratios(rounds, rule), rule, n)
    reason = stop_reason(n, rule, elapsed_s, lambda: all(w <= rule.target_rel_half_width for w in widths.values()))
    return reason is not None, reason, widths


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
    orders = arm_orders(names, protocol.order_seed)  # the verifier's rule too (model.timing_rules)
    rounds = []
    rule = protocol.adaptive
    outcome = None
    t_start = time.perf_counter()
    limit = rule.max_rounds if rule else protocol.rounds
    while len(rounds) < limit:
        if rule and is_check_point(len(rounds), rule):
            stop, reason, widths = stopping_state(rounds, rule, time.perf_counter() - t_start)
            if stop:
                outcome = {"rounds": len(rounds), "stop_reason": reason, "rel_half_widths": widths}
                break
        order = next(orders)
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
