"""``python -m kbrepro.harness``: run a study into a results folder, write a new study folder,
or rebuild a study's KernelBench lock.

    python -m kbrepro.harness run --profile quick --out results/quick
    python -m kbrepro.harness lock --study studies/<name>
    python -m kbrepro.harness new-study --level 1 --task 19

Exit codes as in DESIGN.md section 6, the same as make_bundle.py's: 0 ok, 1 invalid results,
2 usage (also: an output path that cannot be written), 3 unreadable input (also: an input
path that cannot be read), 4 no GPU or missing dependency, 130 interrupted (Ctrl-C); mapped
at the CLI edge (``kbrepro.cli.edge.EdgeMixin``).
"""
from __future__ import annotations

if __name__ == "__main__":  # Ctrl-C while the imports below run: one line, exit 130
    from kbrepro.process import guard_early_interrupt

    guard_early_interrupt()

import sys
from pathlib import Path

import click

# Our own modules are imported inside the commands, not here: --help and a usage error answer
# without importing the engine, and ``run`` sets CUDA_CACHE_DISABLE before any module that can
# start CUDA loads (kbrepro.harness.run_build.ensure_compile_cache_disabled).
from kbrepro.errors import EnvironmentUnavailableError, Interrupted
from kbrepro.cli.edge import EdgeMixin


def echo_progress(event: dict) -> None:
    mark = {"start": ">", "end": "=", "step": " "}.get(event["event"], " ")
    click.echo(f"[{event['elapsed_s']:7.1f}s] {mark} {event['stage']:<20} {event['message']}", err=True)


class _Group(EdgeMixin, click.Group):
    """Errors, Ctrl-C and unexpected exceptions become one line and an exit code (kbrepro.errors)."""


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """The study harness."""


def _need_gpu(what: str) -> None:
    from kbrepro.process import deferred_sigint

    with deferred_sigint():  # a Ctrl-C inside torch's C++ import would abort
        import torch

    if not torch.cuda.is_available():
        raise EnvironmentUnavailableError(f"{what} needs a CUDA GPU and none is visible",
                                          "run it on a GPU machine")


@cli.command()
@click.option("--study", type=click.Path(), default=None, help="study folder (studies/<name>) or its study.yaml [default: the published study]")
@click.option("--profile", default="full", show_default=True, help="profile of the study YAML (full, quick, ...)")
@click.option("--out", "out", type=click.Path(), required=True, help="results folder to write (new or empty)")
@click.option("--kernelbench", type=click.Path(), default=None,
              help="KernelBench checkout (default: $KBREPRO_KERNELBENCH or the project's KernelBench/ submodule)")
@click.option("--cache-dir", type=click.Path(), default=None, help="our cubin cache (default: none)")
def run(study, profile, out, kernelbench, cache_dir) -> None:
    """Run a study on this GPU and write its result documents into OUT."""
    from kbrepro.harness.run import run_study
    from kbrepro.harness.run_build import ensure_compile_cache_disabled
    from kbrepro.harness.study import check_claims_file, load_study
    from kbrepro.paths import check_input_dir, check_input_path, prepare_output_dir, remove_created

    ensure_compile_cache_disabled()
    if study:
        check_input_path(study, "--study")
    if kernelbench:
        check_input_dir(kernelbench, "--kernelbench")
    cfg = load_study(study, profile)
    binding = cfg.binding()  # imports and validates the binding: a bad study fails before the GPU
    check_claims_file(cfg)
    # the outputs before the GPU (inputs 3, outputs 2, then 4), checked without leaving a folder
    for path, what, empty in ((cache_dir, "--cache-dir", False), (out, "--out", True)):
        if path:
            remove_created(prepare_output_dir(path, what, must_be_empty=empty)[1])
    _need_gpu("the study")
    if cache_dir:
        prepare_output_dir(cache_dir, "--cache-dir", must_be_empty=False)
    out_p, created = prepare_output_dir(out, "--out")
    try:
        doc = run_study(cfg, out_p, kernelbench=kernelbench, cache_dir=Path(cache_dir) if cache_dir else None,
                        progress=echo_progress, binding=binding)
    except KeyboardInterrupt:
        remove_created(created)
        try:
            partial = any(out_p.iterdir())
        except OSError:
            partial = False
        raise Interrupted(f"the study did not finish; its partial results are in {out}" if partial else None) from None
    click.echo(f"complete in {doc['wall_seconds']:.1f} s; documents in {out}")


def run_selftest_cli(json_out: str | None = None) -> int:
    """Run the self-tests on this GPU, print one line per known-bad kernel; returns the exit code.
    Raises ReproError (no GPU: EnvironmentUnavailableError, exit 4; an unwritable ``json_out``:
    OutputPathError, exit 2, checked first) for the CLI edge to report."""
    from kbrepro.process import deferred_sigint

    with deferred_sigint():  # a Ctrl-C inside torch's C++ import would abort
        import torch

    from kbrepro.harness import extras
    from kbrepro.harness.run_build import ensure_compile_cache_disabled
    from kbrepro.harness.selftest import run_selftests

    ensure_compile_cache_disabled()
    if json_out:
        from kbrepro.paths import check_output_file

        check_output_file(json_out, "--json")
    if not torch.cuda.is_available():
        raise EnvironmentUnavailableError("the self-tests need a CUDA GPU", "run them on a GPU machine")
    gbps = extras.copy_gbps(extras.copy_bandwidth(None))
    props = torch.cuda.get_device_properties(0)
    res = run_selftests(gbps, f"sm_{props.major}{props.minor}")
    click.echo(f"copy bandwidth {gbps:.0f} GB/s")
    for r in res["tests"]:
        click.echo(f"{'ok ' if r['as_expected'] else 'BAD'} {r['name']:<30} failed checks: "
                   f"{', '.join(r['failed_checks']) or 'none'}  (expected: {', '.join(r['expected']) or 'none'})")
    if json_out:
        _write_json(Path(json_out), {"schema": "kbrepro/selftest", "schema_version": 1, **res}, "--json")
    return 0 if res["all_as_expected"] else 1


def _write_json(path: Path, doc, what: str) -> None:
    from kbrepro.harness import jsonio
    from kbrepro.errors import OutputPathError

    try:
        jsonio.write_json(path, doc)
    except OSError as exc:
        raise OutputPathError(f"cannot write {what} {path}: {(exc.strerror or type(exc).__name__).lower()}; "
                              "nothing was written", f"choose another {what}") from exc


@cli.command()
@click.option("--json", "json_out", type=click.Path(), default=None, help="write the results as JSON")
def selftest(json_out) -> None:
    """Run the known-bad kernels and show which named check caught each (needs a GPU)."""
    sys.exit(run_selftest_cli(json_out))


@cli.command()
@click.option("--study", "study_path", type=click.Path(), default=None,
              help="study folder whose lock to rewrite [default: the published study]")
def lock(study_path) -> None:
    """Rewrite a study's KernelBench lock from the product's pin (manifests/kernelbench.pin.json).

    The lock lists the task files the study uses (its binding's ``kernelbench_tasks``) and
    LICENSE, with the pin's commit and sha256; no checkout is needed."""
    from kbrepro.harness.kernelbench import KernelBenchLock, load_pin
    from kbrepro.harness.study import default_study_path, load_study
    from kbrepro.paths import check_output_file

    study = load_study(study_path or default_study_path(), "full")
    pin = load_pin()
    keys = sorted(set(study.binding().kernelbench_tasks(study)))
    paths = [pin.task_path(lv, t) for lv, t in keys] + ["LICENSE"]
    lock_path = check_output_file(study.folder / study.lock_file, "lock file")
    doc = KernelBenchLock(pin.repository, pin.commit, {p: pin.files[p] for p in paths}).to_doc()
    _write_json(lock_path, doc, "lock file")
    click.echo(f"lock of study {study.name} written for KernelBench {pin.commit}: {len(paths)} files")


@cli.command("register-studies")
@click.option("--add", "add", type=click.Path(), multiple=True,
              help="a study folder under studies/ to register as shipped (repeatable)")
def register_studies(add) -> None:
    """Rewrite manifests/studies.json: re-hash every shipped study's files (and add --add folders).

    Only a study in this registry is judged by the verifier's own definitions; run it after
    every edit of a shipped study's files."""
    from kbrepro import manifests
    from kbrepro.harness.study import REGISTRY_FILE, registry_doc
    from kbrepro.paths import check_output_file

    doc = registry_doc(add)
    path = check_output_file(manifests.path(REGISTRY_FILE), "registry")
    _write_json(path, doc, "registry")
    click.echo(f"{len(doc['studies'])} studies registered: {', '.join(doc['studies'])}")


@cli.command("new-study")
@click.option("--level", type=click.IntRange(1, 9), required=True, help="KernelBench level of the task")
@click.option("--task", type=click.IntRange(1, 9999), required=True,
              help="KernelBench task id (KernelBench/level<L>/<T>_*.py)")
@click.option("--name", default=None, help="study name [default: from the task file, e.g. l1_t19_relu]")
@click.option("--out", type=click.Path(), default=None,
              help="study folder to write, new or empty; its name must be a Python identifier "
                   "[default: the project's studies/<name>]")
@click.option("--kernelbench", type=click.Path(), default=None,
              help="KernelBench checkout (default: $KBREPRO_KERNELBENCH or the project's KernelBench/ submodule)")
def new_study_cmd(level, task, name, out, kernelbench) -> None:
    """Write a new study folder for a KernelBench task: study.yaml, a kernel stub, its binding, claims and lock."""
    from kbrepro.harness.scaffold import new_study, next_steps

    plan = new_study(level, task, name=name, out=out, kernelbench=kernelbench)
    for line in next_steps(plan):
        click.echo(line)


if __name__ == "__main__":
    from kbrepro.process import run_main

    run_main(cli)
