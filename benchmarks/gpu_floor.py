"""The study's GPU-busy floor: the device time of all the work it launches, measured.

    python benchmarks/gpu_floor.py --profile full --json floor.json      # on a GPU

Runs the study once (into a temporary results folder) under ``torch.profiler`` with CUDA
activity only (CUPTI: every kernel, including those a CUDA graph replays, every memcpy and
memset, with device timestamps), and reports the union of those device intervals in
seconds: the time the GPU had work of this study. No wall time of any process can go below
it with the same work; ``benchmarks/vs_post.py`` divides the whole command's wall time by it.
The profiled run itself is slower than an unprofiled one (the profiler's own cost on the
host); the floor counts device time only, which the profiler does not stretch.
"""
from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import click



def busy_seconds(intervals: list[tuple[int, int]]) -> float:
    """The length of the union of ``[start, end)`` intervals in ns, in seconds."""
    total, end = 0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total / 1e9


def device_intervals(prof) -> list[tuple[int, int]]:
    """``(start_ns, end_ns)`` of every device-side event the profiler recorded."""
    out = []
    for e in prof.profiler.kineto_results.events():
        if str(e.device_type()).endswith("CUDA"):
            s = e.start_ns()
            out.append((s, s + e.duration_ns()))
    return out


@click.command()
@click.option("--profile", default="full", show_default=True)
@click.option("--kernelbench", type=click.Path(), default=None)
@click.option("--json", "json_out", type=click.Path(), default=None)
def main(profile, kernelbench, json_out):
    from torch.profiler import ProfilerActivity, profile as tprofile

    from kbrepro.harness.run import run_study
    from kbrepro.harness.run_build import ensure_compile_cache_disabled
    from kbrepro.harness.study import load_study

    ensure_compile_cache_disabled()
    with tempfile.TemporaryDirectory(prefix="kbrepro-floor-") as tmp:
        t0 = time.perf_counter()
        with tprofile(activities=[ProfilerActivity.CUDA]) as prof:
            run_study(load_study(None, profile), Path(tmp) / "results", kernelbench=kernelbench)
        wall = time.perf_counter() - t0
    iv = device_intervals(prof)
    doc = {"profile": profile, "device_events": len(iv), "gpu_busy_s": round(busy_seconds(iv), 3),
           "profiled_wall_s": round(wall, 3)}
    click.echo(json.dumps(doc))
    if json_out:
        Path(json_out).write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
