"""make_bundle.py: run the study on this GPU, validate, and pack one deterministic bundle.

    python make_bundle.py                               # full study on this GPU -> <name>.tar
    python make_bundle.py --profile quick --out q.tar   # the quick profile
    python make_bundle.py --from-results DIR --out X.tar   # pack existing results (no GPU)

Exit codes: 0 ok, 1 invalid results, 2 usage, 3 unreadable input, 4 no GPU or missing
dependency. This file is the only place where errors become exit codes.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import click

# The NVRTC/driver compile cache must be off before CUDA initialises (DESIGN.md section 4).
if os.environ.get("CUDA_CACHE_DISABLE") != "1":
    os.environ["KBREPRO_CACHE_DISABLE_SET_BY"] = "make_bundle.py"
    os.environ["CUDA_CACHE_DISABLE"] = "1"

from kbrepro.kernels.errors import EnvironmentUnavailableError, ReproError  # noqa: E402


def _progress(event: dict) -> None:
    mark = {"start": ">", "end": "=", "step": " "}.get(event["event"], " ")
    click.echo(f"[{event['elapsed_s']:7.1f}s] {mark} {event['stage']:<20} {event['message']}", err=True)


def _summary(made, extra: str = "") -> None:
    click.echo(f"bundle:  {made.path}")
    click.echo(f"size:    {made.size_bytes:,} bytes")
    click.echo(f"digest:  {made.digest}  (sha256 of tagmanifest-sha256.txt)")
    click.echo("claims:  " + ", ".join(f"{k} {v}" for k, v in made.claims_summary.items()))
    click.echo(f"packing: {made.pack_seconds:.2f} s{extra}")
    for n in made.notes:
        click.echo(f"note:    {n}")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--study", type=click.Path(dir_okay=False), default=None,
              help="study YAML [default: manifests/study_fusion.yaml]")
@click.option("--profile", default=None, help="profile of the study for a new run: full (default), quick, extended")
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="archive to write (.tar or .tar.gz) [default: <bundle name>.tar]")
@click.option("--kernelbench", type=click.Path(file_okay=False), default=None,
              help="KernelBench checkout [default: $KBREPRO_KERNELBENCH or ./KernelBench]")
@click.option("--from-results", "from_results", type=click.Path(file_okay=False), default=None,
              help="pack results that already exist (ours, or the post's original files); needs no GPU")
@click.option("--results-dir", type=click.Path(file_okay=False), default=None,
              help="where a new run writes its documents [default: results/<study>-<profile>-<UTC>]")
@click.option("--claims", type=click.Path(dir_okay=False), default=None,
              help="claims YAML [default: manifests/claims_fusion.yaml]")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None, help="our cubin cache [default: none]")
@click.option("--name", default=None, help="bundle name [default: <study>-<profile>-<run start UTC>]")
@click.option("--no-plots", is_flag=True, help="leave plots out")
@click.option("--self-test", "self_test", is_flag=True,
              help="only run the harness self-tests (known-bad tails it must catch) on this GPU")
def main(study, profile, out, kernelbench, from_results, results_dir, claims, cache_dir, name, no_plots,
         self_test) -> None:
    """Run the study, validate every result, and pack a deterministic, verifiable bundle."""
    from kbrepro.bundle import make

    if self_test:
        from kbrepro.harness.__main__ import run_selftest_cli

        sys.exit(run_selftest_cli(None))
    try:
        if from_results:
            if results_dir or cache_dir or profile:
                raise click.UsageError("--profile, --results-dir and --cache-dir apply to a new run; "
                                       "results from --from-results already carry their profile")
            made = make.make_from_results(Path(from_results), Path(out) if out else None, kernelbench=kernelbench,
                                          study_path=study, claims_path=claims, name=name, with_plots=not no_plots)
            _summary(made)
            return
        from kbrepro.harness.study import load_study

        profile = profile or "full"
        load_study(study, profile)  # a bad study or profile is reported before anything else
        import torch

        if not torch.cuda.is_available():
            raise EnvironmentUnavailableError(
                "no CUDA GPU here: the study cannot run on this machine",
                "to pack results that exist, run 'python make_bundle.py --from-results DIR'; to check a bundle, "
                "run 'python verify_bundle.py ARCHIVE'")
        t0 = time.perf_counter()
        made, run_doc = make.run_and_make(Path(out) if out else None, study_path=study, profile=profile,
                                          kernelbench=kernelbench, results_dir=Path(results_dir) if results_dir else None,
                                          cache_dir=Path(cache_dir) if cache_dir else None, claims_path=claims,
                                          progress=_progress)
        _summary(made, f"; study run {run_doc['wall_seconds']:.1f} s; whole command {time.perf_counter() - t0:.1f} s")
    except ReproError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
