"""The whole job against the post's own scripts, side by side on one GPU, alternating.

    python benchmarks/vs_post.py --post ../shared/post-scripts --kernelbench KB --json out.json

Runs the post's scripts as published (``run_all.sh``: scout, both fusion runs, controls,
FTZ cost; each run in a fresh copy of its folder, with ``KernelBench`` there a link to
``--kernelbench``, so that every run starts as a new user's would) and ``python
make_bundle.py`` (the full profile, from the shell, into a fresh folder), alternately:
``--pairs`` pairs, the order swapped in every other pair (post then ours, ours then post).
Prints each wall time (the whole process, as a user's shell sees it) and the ratio
ours / post per pair. With ``--floor`` it then runs ``benchmarks/gpu_floor.py`` (the
study's measured GPU-busy time) and prints wall time over that floor.

Environment for our runs: ``--env KEY=VALUE`` (repeatable), e.g. ``KBREPRO_PREFETCH=1`` for
the model prefetch (harness/prefetch.py; off by default until measured), for an A/B.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent


def _post(post: Path, kernelbench: Path, work: Path, log: Path) -> float:
    run = work / "post"
    shutil.copytree(post, run)
    (run / "KernelBench").symlink_to(kernelbench.resolve(), target_is_directory=True)
    t0 = time.perf_counter()
    with open(log, "wb") as f:
        rc = subprocess.run(["bash", str(run / "run_all.sh")], cwd=run, stdout=f, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHON": sys.executable}).returncode
    wall = time.perf_counter() - t0
    if rc != 0:
        raise click.ClickException(f"run_all.sh exited {rc}; see {log}")
    return wall


def _ours(kernelbench: Path, work: Path, log: Path, env: dict, profile: str) -> float:
    t0 = time.perf_counter()
    with open(log, "wb") as f:
        rc = subprocess.run([sys.executable, str(ROOT / "make_bundle.py"), "--profile", profile, "--kernelbench",
                             str(kernelbench), "--results-dir", str(work / "results"), "--out", str(work / "b.tar")],
                            cwd=work, stdout=f, stderr=subprocess.STDOUT, env={**os.environ, **env}).returncode
    wall = time.perf_counter() - t0
    if rc != 0:
        raise click.ClickException(f"make_bundle.py exited {rc}; see {log}")
    return wall


@click.command()
@click.option("--post", "post_dir", type=click.Path(exists=True, file_okay=False), required=True,
              help="the post's scripts (../shared/post-scripts)")
@click.option("--kernelbench", type=click.Path(exists=True, file_okay=False), required=True,
              help="a KernelBench checkout at the pinned commit (its KernelBench/level2 is read)")
@click.option("--pairs", default=2, show_default=True)
@click.option("--profile", default="full", show_default=True)
@click.option("--env", "envs", multiple=True, help="KEY=VALUE for our runs")
@click.option("--floor", is_flag=True, help="also measure the study's GPU-busy floor")
@click.option("--keep", type=click.Path(file_okay=False), default=None, help="keep logs and bundles here")
@click.option("--json", "json_out", type=click.Path(), default=None)
def main(post_dir, kernelbench, pairs, profile, envs, floor, keep, json_out):
    env = dict(e.split("=", 1) for e in envs)
    base = Path(keep or tempfile.mkdtemp(prefix="kbrepro-vs-post-"))
    base.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(pairs):
        order = ("post", "ours") if i % 2 == 0 else ("ours", "post")
        walls = {}
        for who in order:
            work = base / f"pair{i}-{who}"
            work.mkdir()
            log = base / f"pair{i}-{who}.log"
            walls[who] = (_post(Path(post_dir), Path(kernelbench), work, log) if who == "post"
                          else _ours(Path(kernelbench), work, log, env, profile))
            click.echo(f"pair {i + 1} {who:<4} {walls[who]:7.1f} s", err=True)
        rows.append({"pair": i + 1, "order": list(order), "post_s": round(walls["post"], 2),
                     "ours_s": round(walls["ours"], 2), "ratio": round(walls["ours"] / walls["post"], 3)})
    doc = {"profile": profile, "env": env, "pairs": rows,
           "median_ratio": round(statistics.median(r["ratio"] for r in rows), 3)}
    if floor:
        out = base / "floor.json"
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_floor.py"), "--profile", profile,
                        "--kernelbench", str(kernelbench), "--json", str(out)], check=True)
        fl = json.loads(out.read_text())
        doc["gpu_busy_s"] = fl["gpu_busy_s"]
        doc["wall_over_floor"] = [round(r["ours_s"] / fl["gpu_busy_s"], 2) for r in rows]
    click.echo("| pair | order | post, s | make_bundle.py, s | ratio |\n|---|---|---|---|---|")
    for r in rows:
        click.echo(f"| {r['pair']} | {' then '.join(r['order'])} | {r['post_s']} | {r['ours_s']} | {r['ratio']} |")
    if floor:
        click.echo(f"GPU-busy floor {doc['gpu_busy_s']} s; wall / floor {doc['wall_over_floor']}")
    if json_out:
        Path(json_out).write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
