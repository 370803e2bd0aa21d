"""Packing overhead: everything make_bundle does after the study has run.

    python benchmarks/packing.py RESULTS_DIR [--repeat 5]

Times load + validate + claims + report + plots + archive for RESULTS_DIR (ours or the
post's files) and prints each repeat and the median. ``--prewarm`` first starts the worker
pool and waits until it is warm, as ``python make_bundle.py`` does while the study runs, so
the figure is the overhead after a study; without it the first repeat pays cold imports.
Goal: under 2 s for the full bundle.
"""
from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


@click.command()
@click.argument("results", type=click.Path(file_okay=False, exists=True))
@click.option("--repeat", default=5, show_default=True)
@click.option("--prewarm/--no-prewarm", default=True, show_default=True,
              help="start and warm the worker pool before timing, as make_bundle.py does during the study")
def main(results, repeat, prewarm):
    import os

    from kbrepro.bundle import make, workers

    times = []
    pool = None
    if prewarm:
        pool = workers.start_workers()
        futs = [pool.submit(time.sleep, 0.2) for _ in range(os.cpu_count() or 1)]
        for f in futs:
            f.result()
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repeat):
            t0 = time.perf_counter()
            made = make.make_from_results(Path(results), Path(tmp) / f"b{i}.tar", pool=pool)
            times.append(time.perf_counter() - t0)
            click.echo(f"repeat {i}: {times[-1]:.3f} s  ({made.size_bytes:,} bytes, digest {made.digest[:16]})")
    if pool is not None:
        pool.shutdown()
    click.echo(f"median {statistics.median(times):.3f} s, first {times[0]:.3f} s "
               f"({'warm workers' if prewarm else 'cold imports'}); goal < 2 s")


if __name__ == "__main__":
    main()
