"""Where a candidate's run spends its time, on a GPU: the parent under cProfile, the
candidate's child process under cProfile too (benchmarks/profsite/sitecustomize.py), and the
run's own progress stamps.

    PYTHONPATH=benchmarks/profsite:$PYTHONPATH python benchmarks/stage_profile.py \\
        CANDIDATE TASK [--size NAME=VALUE ...] [--profile quick] --out DIR

Writes ``DIR/progress.txt`` (every progress line with its second), ``DIR/parent.txt`` and
``DIR/child.txt`` (the 45 functions with the most cumulative and own time), and the results
folder under ``DIR/res``. The numbers of benchmarks/RESULTS.md ("Issue 27, the timing stage by
part") come from here.
"""
from __future__ import annotations

import cProfile
import io
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))


def _top(stats: pstats.Stats, n: int = 45) -> str:
    out = io.StringIO()
    stats.stream = out
    stats.sort_stats("cumulative").print_stats(n)
    stats.sort_stats("tottime").print_stats(n)
    return out.getvalue()


@click.command()
@click.argument("candidate", type=click.Path(exists=True, dir_okay=False))
@click.argument("task")
@click.option("--size", "sizes", multiple=True, help="NAME=VALUE")
@click.option("--profile", default="quick")
@click.option("--device", default="cuda", help="cuda, or cpu (a smoke test: no timing stage)")
@click.option("--out", required=True, type=click.Path(file_okay=False))
def main(candidate, task, sizes, profile, device, out):
    from kbrepro.bundle import candidates as bc

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    child_dir = os.environ.get("KBREPRO_PROF_CHILD_DIR") or tempfile.mkdtemp()
    os.makedirs(child_dir, exist_ok=True)
    os.chmod(child_dir, 0o1777)  # the child may run as another user
    t0 = time.perf_counter()
    lines = []

    def say(m: str) -> None:
        lines.append(f"{time.perf_counter() - t0:8.2f} {m}")
        print(lines[-1], flush=True)

    prof = cProfile.Profile()
    prof.enable()
    bc.run_candidates([(Path(candidate), task)], profile=profile, kernelbench=None, results_dir=out / "res",
                      progress=say, sizes={k: int(v) for k, v in (s.split("=", 1) for s in sizes)} or None,
                      device=device)
    prof.disable()
    (out / "progress.txt").write_text("\n".join(lines) + "\n")
    (out / "parent.txt").write_text(_top(pstats.Stats(prof)))
    kids = sorted(Path(child_dir).glob("prof-*.out"))
    if kids:
        (out / "child.txt").write_text(_top(pstats.Stats(*[str(k) for k in kids])))
    print(f"{len(kids)} child profiles; total {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
