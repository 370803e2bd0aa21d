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

Environment for our runs: ``--env KEY=VALUE`` (repeatable), e.g. ``KBREPRO_PREFETCH=0``
to run without the model prefetch (harness/prefetch.py), for an A/B.

``--pycache DIR``: both sides run with Python's bytecode cache in ``DIR``
(``PYTHONPYCACHEPREFIX``, ``PYTHONDONTWRITEBYTECODE`` unset), filled by one untimed run of
each first. A machine image that writes no bytecode (the lent H200's sets
``PYTHONDONTWRITEBYTECODE=1`` and ships no ``.pyc``) makes every Python process compile
torch from source, about 5 s each; an installed torch elsewhere has its bytecode. Both
conditions are worth a number: the machine as found, and the machine as a usual install.
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


def _post(post: Path, kernelbench: Path, work: Path, log: Path, env: dict | None = None) -> float:
    run = work / "post"
    shutil.copytree(post, run)
    (run / "KernelBench").symlink_to(kernelbench.resolve(), target_is_directory=True)
    t0 = time.perf_counter()
    with open(log, "wb") as f:
        rc = subprocess.run(["bash", str(run / "run_all.sh")], cwd=run, stdout=f, stderr=subprocess.STDOUT,
                            env={**_base_env(env or {}), "PYTHON": sys.executable}).returncode
    wall = time.perf_counter() - t0
    if rc != 0:
        raise click.ClickException(f"run_all.sh exited {rc}; see {log}")
    return wall


def _ours(kernelbench: Path, work: Path, log: Path, env: dict, profile: str) -> float:
    t0 = time.perf_counter()
    with open(log, "wb") as f:
        rc = subprocess.run([sys.executable, str(ROOT / "make_bundle.py"), "--profile", profile, "--kernelbench",
                             str(kernelbench), "--results-dir", str(work / "results"), "--out", str(work / "b.tar")],
                            cwd=work, stdout=f, stderr=subprocess.STDOUT, env=_base_env(env)).returncode
    wall = time.perf_counter() - t0
    if rc != 0:
        raise click.ClickException(f"make_bundle.py exited {rc}; see {log}")
    return wall


def _base_env(extra: dict) -> dict:
    """This process's environment with ``extra`` on top; a value of None removes the key."""
    out = {**os.environ, **{k: v for k, v in extra.items() if v is not None}}
    for k, v in extra.items():
        if v is None:
            out.pop(k, None)
    return out


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
@click.option("--pycache", type=click.Path(file_okay=False), default=None,
              help="both sides with Python's bytecode cache in this folder, warmed by one untimed run each")
@click.option("--json", "json_out", type=click.Path(), default=None)
def main(post_dir, kernelbench, pairs, profile, envs, floor, keep, pycache, json_out):
    env = dict(e.split("=", 1) for e in envs)
    kernelbench = str(Path(kernelbench).resolve())  # every run has a folder of its own as cwd
    base = Path(keep or tempfile.mkdtemp(prefix="kbrepro-vs-post-"))
    base.mkdir(parents=True, exist_ok=True)
    both = {}
    if pycache:
        Path(pycache).mkdir(parents=True, exist_ok=True)
        both = {"PYTHONPYCACHEPREFIX": str(Path(pycache).resolve()), "PYTHONDONTWRITEBYTECODE": None}
        for who in ("post", "ours"):
            work = base / f"warm-{who}"
            work.mkdir()
            t = (_post(Path(post_dir), Path(kernelbench), work, base / f"warm-{who}.log", both) if who == "post"
                 else _ours(Path(kernelbench), work, base / f"warm-{who}.log", {**env, **both}, profile))
            click.echo(f"warm-up {who:<4} {t:7.1f} s (untimed: fills the bytecode cache)", err=True)
    rows = []
    for i in range(pairs):
        order = ("post", "ours") if i % 2 == 0 else ("ours", "post")
        walls = {}
        for who in order:
            work = base / f"pair{i}-{who}"
            work.mkdir()
            log = base / f"pair{i}-{who}.log"
            walls[who] = (_post(Path(post_dir), Path(kernelbench), work, log, both) if who == "post"
                          else _ours(Path(kernelbench), work, log, {**env, **both}, profile))
            click.echo(f"pair {i + 1} {who:<4} {walls[who]:7.1f} s", err=True)
        rows.append({"pair": i + 1, "order": list(order), "post_s": round(walls["post"], 2),
                     "ours_s": round(walls["ours"], 2), "ratio": round(walls["ours"] / walls["post"], 3)})
    doc = {"profile": profile, "env": env, "bytecode_cache": bool(pycache), "pairs": rows,
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
