"""``python -m kbrepro.harness``: run a study into a results folder, or rebuild the KernelBench lock.

    python -m kbrepro.harness run --profile quick --out results/quick
    python -m kbrepro.harness lock --kernelbench KernelBench

Exit codes as in DESIGN.md section 6 (mapped here, at the CLI edge).
"""
from __future__ import annotations

import sys
from pathlib import Path

import click

from kbrepro.kernels.errors import ReproError


def echo_progress(event: dict) -> None:
    mark = {"start": ">", "end": "=", "step": " "}.get(event["event"], " ")
    click.echo(f"[{event['elapsed_s']:7.1f}s] {mark} {event['stage']:<20} {event['message']}", err=True)


@click.group()
def cli() -> None:
    """The study harness."""


@cli.command()
@click.option("--study", type=click.Path(dir_okay=False), default=None, help="study YAML (default: manifests/study_fusion.yaml)")
@click.option("--profile", default="full", show_default=True, help="profile of the study YAML (full, quick, ...)")
@click.option("--out", "out", type=click.Path(file_okay=False), required=True, help="results folder to write")
@click.option("--kernelbench", type=click.Path(file_okay=False), default=None,
              help="KernelBench checkout (default: $KBREPRO_KERNELBENCH or ./KernelBench)")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None, help="our cubin cache (default: none)")
def run(study, profile, out, kernelbench, cache_dir) -> None:
    """Run a study on this GPU and write its result documents into OUT."""
    from kbrepro.harness.run import ensure_compile_cache_disabled, run_study
    from kbrepro.harness.study import load_study

    ensure_compile_cache_disabled()
    try:
        cfg = load_study(study, profile)
        out_p = Path(out)
        out_p.mkdir(parents=True, exist_ok=True)
        doc = run_study(cfg, out_p, kernelbench=kernelbench, cache_dir=Path(cache_dir) if cache_dir else None,
                        progress=echo_progress)
    except ReproError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    click.echo(f"complete in {doc['wall_seconds']:.1f} s; documents in {out}")


def run_selftest_cli(json_out: str | None = None) -> int:
    """Run the self-tests on this GPU, print one line per known-bad tail; returns the exit code."""
    import torch

    from kbrepro.harness import extras, jsonio
    from kbrepro.harness.run import ensure_compile_cache_disabled
    from kbrepro.harness.selftest import run_selftests

    ensure_compile_cache_disabled()
    if not torch.cuda.is_available():
        click.echo("error: the self-tests need a CUDA GPU\n  -> run them on a GPU machine", err=True)
        return 4
    gbps = extras.copy_gbps(extras.copy_bandwidth(None))
    props = torch.cuda.get_device_properties(0)
    res = run_selftests(gbps, f"sm_{props.major}{props.minor}")
    click.echo(f"copy bandwidth {gbps:.0f} GB/s")
    for r in res["tests"]:
        click.echo(f"{'ok ' if r['as_expected'] else 'BAD'} {r['name']:<30} failed checks: "
                   f"{', '.join(r['failed_checks']) or 'none'}  (expected: {', '.join(r['expected']) or 'none'})")
    if json_out:
        jsonio.write_json(Path(json_out), {"schema": "kbrepro/selftest", "schema_version": 1, **res})
    return 0 if res["all_as_expected"] else 1


@cli.command()
@click.option("--json", "json_out", type=click.Path(dir_okay=False), default=None)
def selftest(json_out) -> None:
    """Run the known-bad tails and show which named check caught each (needs a GPU)."""
    sys.exit(run_selftest_cli(json_out))


@cli.command()
@click.option("--kernelbench", type=click.Path(file_okay=False), default=None)
@click.option("--task", "task_ids", type=int, multiple=True, default=(14, 51, 53, 81, 95), show_default=True)
@click.option("--level", type=int, default=2, show_default=True)
def lock(kernelbench, task_ids, level) -> None:
    """Rewrite manifests/kernelbench.lock.json from a checkout (its git HEAD is the commit)."""
    from kbrepro import manifests
    from kbrepro.harness import jsonio
    from kbrepro.harness.kernelbench import git_head, make_lock, resolve_checkout

    root = resolve_checkout(kernelbench)
    head = git_head(root)
    if head is None:
        click.echo(f"error: {root} is not a git checkout; cannot tell its commit", err=True)
        sys.exit(3)
    paths = []
    for t in task_ids:
        hits = sorted(root.glob(f"KernelBench/level{level}/{t}_*.py"))
        if len(hits) != 1:
            click.echo(f"error: task {t} not found in {root}", err=True)
            sys.exit(3)
        paths.append(str(hits[0].relative_to(root)))
    paths.append("LICENSE")
    doc = make_lock(root, "https://github.com/ScalingIntelligence/KernelBench.git", head, paths).to_doc()
    jsonio.write_json(manifests.path("kernelbench.lock.json"), doc)
    click.echo(f"lock written for commit {head}: {len(paths)} files")


if __name__ == "__main__":
    cli()
