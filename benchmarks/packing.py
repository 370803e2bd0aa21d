"""Packing overhead: everything make_bundle does after the study has run.

    python benchmarks/packing.py RESULTS_DIR [--repeat 5]

Times load + validate + claims + report + plots + archive for RESULTS_DIR (ours or the
post's files) and prints each repeat and the median. Goal: under 2 s for the full bundle.
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
def main(results, repeat):
    from bundle import make

    times = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repeat):
            t0 = time.perf_counter()
            made = make.make_from_results(Path(results), Path(tmp) / f"b{i}.tar")
            times.append(time.perf_counter() - t0)
            click.echo(f"repeat {i}: {times[-1]:.3f} s  ({made.size_bytes:,} bytes, digest {made.digest[:16]})")
    click.echo(f"median {statistics.median(times):.3f} s, first (cold imports) {times[0]:.3f} s; goal < 2 s")


if __name__ == "__main__":
    main()
