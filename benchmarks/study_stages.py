"""Time the study by stage: run it (GPU) or read an existing results folder's run.json.

    python benchmarks/study_stages.py --run --profile full --out results/bench   # on a GPU
    python benchmarks/study_stages.py --results results/bench                    # report only

Prints each stage's wall time, the total, the ratio to the post's five scripts on the same
GPU model (78.7 s on an H200, from ../shared/data/h200-seed-run/run_all.log) and peak GPU
memory. The goal: ratio <= 0.6.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

POST_SECONDS = 78.7  # scout 8.7 + fusion 26.0 + preserve-denormals 25.9 + controls 5.2 + FTZ cost 6.6 (H200 log)


@click.command()
@click.option("--run", "do_run", is_flag=True, help="run the study now (needs a GPU)")
@click.option("--profile", default="full", show_default=True)
@click.option("--out", type=click.Path(file_okay=False), default="results/bench-stages", show_default=True)
@click.option("--results", type=click.Path(file_okay=False), default=None, help="existing results folder")
def main(do_run, profile, out, results):
    if do_run:
        from kbrepro.harness.run import run_study
        from kbrepro.harness.run_build import ensure_compile_cache_disabled
        from kbrepro.harness.study import load_study

        ensure_compile_cache_disabled()
        t0 = time.perf_counter()
        run = run_study(load_study(None, profile), Path(out))
        process = time.perf_counter() - t0
        results = out
    else:
        if not results:
            raise click.UsageError("pass --run or --results DIR")
        run = json.loads((Path(results) / "run.json").read_text())
        process = None
    click.echo(f"{'stage':<22} {'seconds':>8}")
    for s in run["stages"]:
        click.echo(f"{s['name']:<22} {s['seconds']:8.2f}")
    total = run.get("wall_seconds") or sum(s["seconds"] for s in run["stages"])
    click.echo(f"{'total (study)':<22} {total:8.2f}")
    if process is not None:
        click.echo(f"{'total (with import)':<22} {process:8.2f}")
    click.echo(f"ratio to the post's {POST_SECONDS} s: {total / POST_SECONDS:.3f} (goal <= 0.6)")
    mem = run.get("peak_gpu_memory_bytes", {})
    click.echo(f"peak GPU memory: allocated {mem.get('allocated', 0) / 2**30:.2f} GiB, "
               f"reserved {mem.get('reserved', 0) / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
