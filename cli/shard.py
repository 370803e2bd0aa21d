"""``python -m kbrepro.bundle.shard``: the commands of a sharded candidate run (:mod:`kbrepro.bundle.shard`):
``plan`` writes the plan and case folders and runs nothing, ``run`` runs the cases not done yet
(``--max-cases K`` a call) and merges them, ``run-case`` runs one case again here, ``merge``
merges the cases into the results folder. docs/sharding.md shows a whole run.
"""
from __future__ import annotations

import contextlib
import json
from pathlib import Path

import click

from kbrepro.bundle import candidates as bc
from kbrepro.bundle.shard import plan_device, plan_folder, run_case_folder, run_lock, run_plan
from kbrepro.bundle.shard_merge import PLAN, is_sharded, load_plan, merge_cases, write_merged
from kbrepro.cli.edge import EdgeMixin
from kbrepro.errors import UsageError
from kbrepro.harness import engines
from kbrepro.harness.engines import run_case
from kbrepro.harness.kernelbench import load_pin
from kbrepro.paths import check_input_dir, prepare_output_dir


def build() -> click.Group:
    """The ``python -m kbrepro.bundle.shard`` command group (plan, run, run-case, merge)."""
    class _Group(EdgeMixin, click.Group):
        pass

    @click.group(cls=_Group)
    def cli():
        """Cases of a sharded candidate run."""
    @cli.command("run-case")
    @click.argument("folder", type=click.Path())
    def run_case_cmd(folder):
        """Run (again) the case in FOLDER (RESULTS/cases/<id>) in this process."""
        check_input_dir(folder, "FOLDER", "pass a case folder, RESULTS/cases/<id>")
        results = Path(folder).resolve().parent.parent
        # a case of a sharded results folder is run under that folder's run lock, as a run's are
        with run_lock(results) if (results / PLAN).is_file() else contextlib.nullcontext():
            run_case(run_case_folder, folder, {"KBREPRO_WORKER": "run-case"})
        click.echo(f"case {Path(folder).name}: done")

    @cli.command("plan")
    @click.option("--candidate", "candidates", multiple=True, type=click.Path(), required=True)
    @click.option("--task", "tasks", multiple=True, required=True, help="one for all candidates or one per candidate")
    @click.option("--profile", default="full", show_default=True)
    @click.option("--size", "sizes", multiple=True,
                  help="NAME=VALUE, as make_bundle.py --size (VALUE 8, (4096,) or 5,7)")
    @click.option("--kernelbench", type=click.Path(), default=None)
    @click.option("--device", type=click.Choice(["cuda", "cpu"]), default="cuda", show_default=True)
    @click.option("--results-dir", "results_dir", type=click.Path(), required=True, help="a new or empty folder")
    def plan_cmd(candidates, tasks, profile, sizes, kernelbench, device, results_dir):
        """Write the plan and case folders of a sharded candidate run, and run nothing (then: run)."""
        pairs = bc.pair_candidates(candidates, tasks, load_pin())
        if kernelbench:
            check_input_dir(kernelbench, "--kernelbench")
        size_map = bc.parse_size_options(sizes)
        prepare_output_dir(results_dir, "--results-dir")
        folders = plan_folder(pairs, profile=profile, kernelbench=kernelbench,
                              results_dir=Path(results_dir), device=device, engine="local", sizes=size_map or None)
        click.echo(f"planned {len(folders)} case(s) in {results_dir}; run them with 'python -m kbrepro.bundle.shard "
                   f"run {results_dir}'")

    @cli.command("run")
    @click.argument("results", type=click.Path())
    @click.option("--shards", type=int, default=None, help="at most N cases at once [default: 1]")
    @click.option("--engine", type=click.Choice(["local", "submitit", "ray"]), default="local", show_default=True)
    @click.option("--engine-opt", "engine_opts", multiple=True, help="KEY=VALUE, as make_bundle.py --engine-opt")
    @click.option("--max-cases", type=int, default=None,
                  help="run at most this many of the cases not done yet, then merge (a long study in slices)")
    def run_cmd(results, shards, engine, engine_opts, max_cases):
        """Run the cases of RESULTS (a sharded run's folder) that are not done, then merge them
        into RESULTS/results; pack with make_bundle.py pack RESULTS."""
        check_input_dir(results, "RESULTS", "pass the folder a sharded run wrote")
        if not is_sharded(Path(results)):
            raise UsageError(f"{results} holds no {PLAN}", "pass the folder a sharded run wrote")
        if max_cases is not None and max_cases < 1:
            raise UsageError(f"--max-cases {max_cases} is not a positive number", "e.g. --max-cases 5")
        eng = engines.make_engine(engine, shards=shards, device=plan_device(Path(results)),
                                  opts=engines.parse_opts(engine_opts))
        _, failed = run_plan(Path(results), eng, max_cases=max_cases, progress=lambda m: click.echo(m, err=True))
        click.echo(f"cases not done: {len(failed)}" + ("" if failed else f"; pack with make_bundle.py pack "
                                                                          f"{results}"))
        for f in failed:
            click.echo(f"not done: case {f['id']} ({f['candidate']} on {f['task']}): {f['error']}")

    @cli.command("merge")
    @click.argument("results", type=click.Path())
    def merge_cmd(results):
        """Merge the finished cases of RESULTS (a sharded run's folder) into RESULTS/results."""
        check_input_dir(results, "RESULTS", "pass the folder a sharded run wrote")
        if not is_sharded(Path(results)):
            raise UsageError(f"{results} holds no {PLAN}", "pass the folder a sharded run wrote")
        with run_lock(Path(results)):
            files, failed = merge_cases(load_plan(Path(results)))
            write_merged(Path(results), files)
        click.echo(f"merged {len(json.loads(files['results/candidates.json'])['cases']) - len(failed)} case(s) "
                   f"into {Path(results) / 'results'}")
        for f in failed:
            click.echo(f"failed:  case {f['id']} ({f['candidate']} on {f['task']}): {f['error']}")

    return cli


__all__ = ["build"]
