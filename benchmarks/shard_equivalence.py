"""A sharded candidate run against an unsharded one on this machine: same documents, apart from
timings and host fields?

    python benchmarks/shard_equivalence.py --candidate A.py --task 1/88 --candidate B.py --task 1/88 \\
        --size batch_size=1024 --shards 1 --work DIR [--device cuda] [--json out.json]

Runs the candidates once unsharded (``run_candidates``, one parent process, in order) and once
sharded (``bundle/shard.py``, the local engine: one fresh process per case, ``--shards`` at a
time, one GPU each; ``--shards 1`` on one GPU runs the case processes one after the other),
then compares ``results/candidates.json`` and ``results/environment.json`` with
:func:`kbrepro.bundle.case_records.differences` (timings, clocks, host and case fields dropped) and the
input files byte for byte. Prints the wall time of each run and a diff summary; exits 0 when
nothing differs, 1 otherwise. A benchmark, not a test: ``tests/test_gpu_shard.py`` asserts
the same on the GPU.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import click

# the NVRTC/driver compile cache off before CUDA initialises, as make_bundle.py does (DESIGN.md section 4)
if os.environ.get("CUDA_CACHE_DISABLE") != "1":
    from kbrepro.harness.startenv import set_own

    set_own("CUDA_CACHE_DISABLE", "1")


def compare(work: Path, items, *, profile: str, sizes: dict, shards: int, device: str, kernelbench=None) -> dict:
    """Run both ways under ``work`` (``plain/``, ``sharded/``) and compare. Returns a summary:
    wall seconds of each run, the failed cases, and the differences per document."""
    from kbrepro.bundle import candidates as bc
    from kbrepro.bundle import case_records, shard
    from kbrepro.harness import engines

    t0 = time.perf_counter()
    plain = bc.run_candidates(items, profile=profile, kernelbench=kernelbench, results_dir=work / "plain", sizes=sizes,
                              device=device)
    t1 = time.perf_counter()
    eng = engines.make_engine("local", shards=shards, device=device)
    sharded, failed = shard.run_sharded(items, profile=profile, kernelbench=kernelbench, results_dir=work / "sharded",
                                        engine=eng, device=device, sizes=sizes)
    t2 = time.perf_counter()
    out = {"plain_s": round(t1 - t0, 1), "sharded_s": round(t2 - t1, 1), "failed": failed, "documents": {}}
    for rel in ("results/candidates.json", "results/environment.json"):
        a = json.loads((sharded / rel).read_bytes())
        b = json.loads((plain / rel).read_bytes())
        out["documents"][rel] = case_records.differences(a, b, limit=200)
    files = sorted(p.relative_to(plain).as_posix() for p in (plain / "inputs").rglob("*") if p.is_file())
    out["inputs_differ"] = [f for f in files if not (sharded / f).is_file() or
                            (sharded / f).read_bytes() != (plain / f).read_bytes()]
    return out


@click.command()
@click.option("--candidate", "candidates", multiple=True, required=True)
@click.option("--task", "tasks", multiple=True, required=True)
@click.option("--size", "sizes", multiple=True, help="NAME=VALUE, as make_bundle.py --size")
@click.option("--profile", default="quick")
@click.option("--shards", type=int, default=1)
@click.option("--device", type=click.Choice(["cuda", "cpu"]), default="cuda")
@click.option("--kernelbench", default=None)
@click.option("--work", type=click.Path(), required=True, help="an empty or new folder")
@click.option("--json", "json_out", type=click.Path(), default=None)
def main(candidates, tasks, sizes, profile, shards, device, kernelbench, work, json_out):
    if len(tasks) not in (1, len(candidates)):
        raise click.UsageError("one --task for all candidates or one per --candidate")
    items = list(zip(map(Path, candidates), tasks if len(tasks) == len(candidates) else tasks * len(candidates)))
    size_map = {k: int(v) for k, _, v in (s.partition("=") for s in sizes)}
    w = Path(work)
    w.mkdir(parents=True, exist_ok=True)
    if any(w.iterdir()):
        raise click.UsageError(f"{work} is not empty")
    out = compare(w, items, profile=profile, sizes=size_map, shards=shards, device=device, kernelbench=kernelbench)
    click.echo(f"unsharded: {out['plain_s']} s; sharded ({shards} shard(s), one process per case): {out['sharded_s']} s")
    for f in out["failed"]:
        click.echo(f"FAILED case {f['id']} ({f['candidate']}): {f['error']}")
    bad = bool(out["failed"]) or bool(out["inputs_differ"])
    for rel, diffs in out["documents"].items():
        click.echo(f"{rel}: {'same apart from timings and host fields' if not diffs else f'{len(diffs)} difference(s)'}")
        for d in diffs[:30]:
            click.echo(f"    {d}")
        bad = bad or bool(diffs)
    if out["inputs_differ"]:
        click.echo(f"input files that differ: {out['inputs_differ']}")
    if json_out:
        Path(json_out).write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
