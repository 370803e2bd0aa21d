"""make_bundle.py: run the study on this GPU, validate, and pack one deterministic bundle.

    python make_bundle.py                               # full study on this GPU -> <name>.tar
    python make_bundle.py --profile quick --out q.tar   # the quick profile
    python make_bundle.py --from-results DIR --out X.tar   # pack existing results (no GPU)
    python make_bundle.py --keygen keys/                # an Ed25519 key pair for --sign
    python make_bundle.py --from-results DIR --sign keys/bundle-signing-key.pem   # a signed bundle

Exit codes: 0 ok, 1 invalid results, 2 usage (also: an output path that cannot be written),
3 unreadable input (also: an input path that cannot be read), 4 no GPU or missing
dependency, 130 interrupted (Ctrl-C). Errors become exit codes here, at the CLI edge
(``kbrepro.cli.edge.EdgeMixin``).
"""
from __future__ import annotations

if __name__ == "__main__":  # Ctrl-C while the imports below run: one line, exit 130
    try:
        from kbrepro.process import guard_early_interrupt, require_installed
    except ImportError:  # run before installing: one line with the next step, exit 4
        import sys

        sys.stderr.write("error: kbrepro is not installed for this Python\n  -> in the project folder: "
                         "pip install -e . (README), then run this again\n")
        sys.exit(4)
    guard_early_interrupt()
    require_installed()

import os
import sys
import time
from pathlib import Path

import click

# Our own modules are imported inside the commands, not here: --help and a usage error answer
# in about 0.07 s instead of the 0.5 s the bundle stack takes to import (measured on the 2-core
# machine), and none of them loads before CUDA_CACHE_DISABLE is set below.
# The NVRTC/driver compile cache must be off before CUDA initialises (DESIGN.md section 4).
if os.environ.get("CUDA_CACHE_DISABLE") != "1":
    from kbrepro.harness.startenv import set_own  # what the processes it starts inherit too

    set_own("KBREPRO_CACHE_DISABLE_SET_BY", "make_bundle.py")
    set_own("CUDA_CACHE_DISABLE", "1")

from kbrepro.errors import EnvironmentUnavailableError, UsageError  # noqa: E402
from kbrepro.cli.edge import EdgeMixin, status  # noqa: E402


def _progress(event: dict) -> None:
    mark = {"start": ">", "end": "=", "step": " "}.get(event["event"], " ")
    click.echo(f"[{event['elapsed_s']:7.1f}s] {mark} {event['stage']:<20} {event['message']}", err=True)


def _summary(made, extra: str = "", allow_failing: bool = False, public_key=None, own_run: bool = False) -> None:
    """What was packed (a candidate bundle: what its checks caught), then one line: whether
    ``verify_bundle.py`` will pass the bundle (its static tiers, run here; for a signed bundle
    with the signer's public key). A bundle that would fail is removed again (exit 1, the
    results are kept) unless ``allow_failing``; a signed one always (:func:`kbrepro.bundle.publish.publish`).
    ``own_run``: the results are this command's own run (a failure is then a defect of ours)."""
    from kbrepro.bundle import publish

    click.echo(f"bundle:  {made.path}")
    click.echo(f"size:    {made.size_bytes:,} bytes")
    click.echo(f"digest:  {made.digest}  (sha256 of tagmanifest-sha256.txt)")
    if made.signed_by:
        click.echo(f"signed:  key id {made.signed_by} (attestations.intoto.jsonl: SLSA provenance and the claims' "
                   "test result)")
    click.echo("claims:  " + ", ".join(f"{k} {v}" for k, v in made.claims_summary.items()))
    for k, v in getattr(made, "caught", {}).items():
        click.echo(f"caught:  {k} by {', '.join(v)}")
    click.echo(f"packing: {made.pack_seconds:.2f} s{extra}")
    for n in made.notes:
        click.echo(f"note:    {n}")
    publish.publish(made.path, signed=bool(made.signed_by), allow_failing=allow_failing, public_key=public_key,
                    own_run=own_run, echo=click.echo)

class _Command(EdgeMixin, click.Command):
    """Errors, Ctrl-C and unexpected exceptions become one line and an exit code (kbrepro.errors)."""


RUN_ONLY = ("profile", "results_dir", "cache_dir")
SHARD_OPTS = ("shards", "engine", "engine_opts", "device")


@click.command(cls=_Command, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--study", type=click.Path(), default=None,
              help="study folder (studies/<name>) or its study.yaml [default: studies/pointwise_fusion]")
@click.option("--profile", default=None, help="profile of the study for a new run: full (default), quick, extended")
@click.option("--out", type=click.Path(), default=None,
              help="archive to write (.tar or .tar.gz) [default: <bundle name>.tar]")
@click.option("--kernelbench", type=click.Path(), default=None,
              help="KernelBench checkout [default: $KBREPRO_KERNELBENCH or the project's KernelBench/ submodule]")
@click.option("--from-results", "from_results", type=click.Path(), default=None,
              help="pack results that already exist (ours, or the post's original files); needs no GPU")
@click.option("--results-dir", type=click.Path(), default=None,
              help="where a new run writes its documents; a candidate run stopped before it finished resumes in its folder [default: results/<study>-<profile>-<UTC>]")
@click.option("--claims", type=click.Path(), default=None,
              help="claims YAML [default: the study's own claims file]")
@click.option("--cache-dir", type=click.Path(), default=None, help="our cubin cache [default: none]")
@click.option("--name", default=None, help="bundle name [default: <study>-<profile>-<run start UTC>]")
@click.option("--no-plots", is_flag=True, help="draw no renderings (the figures' data are packed all the same; the digest does not change)")
@click.option("--candidate", "candidates", multiple=True, type=click.Path(),
              help="a KernelBench candidate file (defines ModelNew); repeat for several; needs --task")
@click.option("--candidate-dir", "candidate_dir", type=click.Path(), default=None,
              help="a folder of candidates, one file per task named <level>_<task>[_name].py (e.g. 1_19.py): "
                   "a whole level in one run and one bundle; instead of --candidate and --task")
@click.option("--task", "tasks", multiple=True,
              help="the task a --candidate solves: LEVEL/TASK (e.g. 1/88) or a KernelBench path of the pin; "
                   "one for all candidates or one per --candidate, in order")
@click.option("--size", "sizes", multiple=True,
              help="a candidate run at other sizes: NAME=VALUE sets the task's size global (repeatable, recorded); "
                   "VALUE of the kind of the task's own value: an integer (batch_size=8) or a tuple of 1 to 8 "
                   "positive integers, in parentheses or not, a one-entry tuple with its comma "
                   "(input_shape=(4096,) or input_shape=4096, and kernel_size=(5,7) or kernel_size=5,7)")
@click.option("--extra-shape", "extra_shapes", multiple=True,
              help="an extra shape each candidate is checked at: NAME=VALUE[,NAME=VALUE], VALUE as --size's "
                   "(kernel_size=(3,5),batch_size=4) [default: batch_size // 2]")
@click.option("--allow-failing", is_flag=True,
              help="keep a bundle that will fail verification (a study), or pack a candidate bundle even when a "
                   "candidate is caught or a default claim fails")
@click.option("--sign", "sign", type=click.Path(), default=None,
              help="sign the bundle with this Ed25519 private key (PEM, as 'openssl genpkey -algorithm ed25519' or "
                   "--keygen writes it): in-toto statements (SLSA provenance, the claims' test result) in DSSE "
                   "envelopes, a tag file the digest covers; the key never enters the bundle")
@click.option("--keygen", "keygen", type=click.Path(), default=None,
              help="only write a new Ed25519 key pair for --sign into this folder (bundle-signing-key.pem, mode 0600, "
                   "and bundle-signing-key.pub.pem for verify_bundle.py --public-key); never overwrites; takes no "
                   "other option")
@click.option("--bundle-format", "bundle_format", type=int, default=None,
              help="the bundle format to write [default: the newest, 5, with the RO-Crate metadata file and, in "
                   "REPORT.md, the rounds each timing block holds; candidates: the newest that holds the results, 4 "
                   "for timing protocol 2]; 4 gives an adaptive block's minimum rounds there; 3 (candidates: 2 or "
                   "3 for results of timing protocol 1) is the layout of the bundles packed before signatures and "
                   "RO-Crate, as the committed examples are (cannot be signed)")
@click.option("--shards", "shards", type=int, default=None,
              help="candidates: run each candidate x task as its own case, at most N at once (local engine: one "
                   "process per GPU, so N <= the GPUs; submitit on Slurm: the array's parallelism)")
@click.option("--engine", "engine", type=click.Choice(["local", "submitit", "ray"]), default=None,
              help="candidates: what runs the cases [default with --shards: local]; submitit needs "
                   "kbrepro[cluster], ray needs kbrepro[ray]")
@click.option("--engine-opt", "engine_opts", multiple=True,
              help="an engine parameter KEY=VALUE (repeatable): the submitit executor's parameters (cluster=local or "
                   "slurm, slurm_partition, timeout_min, gpus_per_node...), the ray address, the local gpus=0,1")
@click.option("--device", "device", type=click.Choice(["cuda", "cpu"]), default=None,
              help="candidates: cuda (default) or cpu (a run without timings, profiler or poisoned allocator)")
@click.option("--self-test", "self_test", is_flag=True,
              help="only run the harness self-tests (known-bad kernels it must catch) on this GPU; takes no other option")
@click.pass_context
def main(ctx, study, profile, out, kernelbench, from_results, results_dir, claims, cache_dir, name, no_plots,
         candidates, candidate_dir, tasks, sizes, extra_shapes, allow_failing, sign, keygen, bundle_format, shards, engine,
         engine_opts, device, self_test) -> None:
    """Run the study, validate every result, and pack a deterministic, verifiable bundle."""
    from click.core import ParameterSource

    given = [p for p in ctx.command.params if p.name not in ("self_test", "keygen")
             and ctx.get_parameter_source(p.name) not in (ParameterSource.DEFAULT, None)]
    if self_test:
        if given or keygen is not None:
            raise UsageError(f"--self-test takes no other option (got "
                             f"{', '.join([p.opts[0] for p in given] + (['--keygen'] if keygen is not None else []))})",
                             "run 'python make_bundle.py --self-test' alone")
        from kbrepro.harness.__main__ import run_selftest_cli

        sys.exit(run_selftest_cli(None))
    if keygen is not None:
        if given:
            raise UsageError(f"--keygen takes no other option (got {', '.join(p.opts[0] for p in given)})",
                             "run 'python make_bundle.py --keygen DIR' alone, then sign with --sign DIR/"
                             "bundle-signing-key.pem")
        _keygen(keygen)
        return
    if sign is not None and allow_failing and not (candidates or tasks or sizes or extra_shapes or (
            from_results and _candidate_results(from_results))):
        raise UsageError("--sign and --allow-failing: a signed bundle must pass verification",
                         "drop --allow-failing to sign, or drop --sign to keep a failing bundle")
    from kbrepro.bundle import make
    from kbrepro.paths import check_input_dir, check_input_file, check_input_path, prepare_output_dir, remove_created

    sharding = [p.opts[0] for p in given if p.name in SHARD_OPTS]
    if candidate_dir is not None:
        if candidates or tasks or from_results:
            raise UsageError("--candidate-dir names the candidates and their tasks: drop --candidate, --task and "
                             "--from-results", "e.g. python make_bundle.py --candidate-dir my_level1/ --profile quick")
        from kbrepro.bundle import candidates as bc

        check_input_dir(candidate_dir, "--candidate-dir", "pass a folder of <level>_<task>.py candidate files")
        pairs = bc.candidates_in(Path(candidate_dir))
        candidates, tasks = tuple(str(p) for p, _ in pairs), tuple(t for _, t in pairs)
    if candidates or tasks or sizes or extra_shapes or (from_results and _candidate_results(from_results)):
        _candidates_main(given, candidates, tasks, sizes, extra_shapes, allow_failing, profile, out, kernelbench,
                         from_results, results_dir, claims, name, sign, bundle_format,
                         shard_args=(shards, engine, engine_opts, device))
        return
    if sharding:
        raise UsageError(f"{', '.join(sharding)} {'applies' if len(sharding) == 1 else 'apply'} to KernelBench "
                         "candidate runs (cases are candidates x tasks); a study runs in one process",
                         "drop them, or shard candidates: --candidate FILE --task L/T ... --shards N")
    from kbrepro.bundle import pack

    bundle_format = pack.FORMAT_VERSION if bundle_format is None else bundle_format
    make.check_bundle_format(bundle_format, sign is not None)

    # usage first, then the inputs (exit 3), then the outputs (exit 2), all before any work
    if from_results:
        extra = [p.opts[0] for p in given if p.name in RUN_ONLY]
        if extra:
            raise UsageError(f"{', '.join(extra)} {'applies' if len(extra) == 1 else 'apply'} to a new run, "
                             "not to --from-results",
                             "results from --from-results already carry their profile; drop "
                             + ", ".join(extra))
        check_input_dir(from_results, "--from-results", "pass the folder a run wrote, e.g. results/<name>")
    if study:
        check_input_path(study, "--study")
    if claims:
        check_input_file(claims, "--claims")
    if kernelbench:
        check_input_dir(kernelbench, "--kernelbench", make.KB_HINT)
    key = make.load_key(sign)  # a key that cannot be read (3) or used (2), before any work
    public_key = key.public if key else None
    if out:
        make.check_out_path(Path(out))
    if from_results:
        with status(f"packing {from_results}"):
            made = make.make_from_results(Path(from_results), Path(out) if out else None, kernelbench=kernelbench,
                                          study_path=study, claims_path=claims, name=name, with_plots=not no_plots,
                                          bundle_format=bundle_format, sign=sign)
        _summary(made, allow_failing=allow_failing, public_key=public_key)
        return
    from kbrepro.harness.study import load_study

    profile = profile or "full"
    cfg = load_study(study, profile)  # a bad study or profile is reported before anything else
    # the outputs before the GPU (inputs 3, outputs 2, then 4), checked without leaving a folder
    if cache_dir:
        remove_created(prepare_output_dir(cache_dir, "--cache-dir", must_be_empty=False)[1])
    if results_dir:
        remove_created(prepare_output_dir(results_dir, "--results-dir")[1])
    from kbrepro.process import deferred_sigint
    from kbrepro.harness.run import early_prefetch

    t0 = time.perf_counter()
    prefetcher = early_prefetch(cfg, kernelbench)  # the model builds start while torch loads here
    try:
        with deferred_sigint():  # a Ctrl-C inside torch's C++ import would abort
            import torch

        if not torch.cuda.is_available():
            raise EnvironmentUnavailableError(
                "no CUDA GPU here: the study cannot run on this machine",
                "to pack results that exist, run 'python make_bundle.py --from-results DIR'; to check a bundle, "
                "run 'python verify_bundle.py ARCHIVE'")
        made, run_doc = make.run_and_make(Path(out) if out else None, study_path=study, profile=profile,
                                          kernelbench=kernelbench,
                                          results_dir=Path(results_dir) if results_dir else None,
                                          cache_dir=Path(cache_dir) if cache_dir else None, claims_path=claims,
                                          progress=_progress, name=name, with_plots=not no_plots,
                                          bundle_format=bundle_format, sign=sign, prefetcher=prefetcher)
    finally:
        if prefetcher is not None:
            prefetcher.close()
    _summary(made, f"; study run {run_doc['wall_seconds']:.1f} s; whole command {time.perf_counter() - t0:.1f} s",
             allow_failing=allow_failing, public_key=public_key)


def _keygen(folder: str) -> None:
    """--keygen DIR: a new Ed25519 key pair (bundle.attest.write_key_pair), never over a file."""
    from kbrepro.bundle import attest

    priv, pub, kid = attest.write_key_pair(folder)
    click.echo(f"private key: {priv}  (mode 0600; keep it, never share it; sign with --sign {priv})")
    click.echo(f"public key:  {pub}  (give it to readers: verify_bundle.py X.tar --public-key {pub.name})")
    click.echo(f"key id:      {kid}  (sha256 of the public key's DER SubjectPublicKeyInfo)")


def _candidate_results(folder: str) -> bool:
    from kbrepro.bundle import candidates as bc

    try:
        return Path(folder).is_dir() and bc.is_candidate_results(Path(folder))
    except OSError:  # a path that cannot be read: the checks of the study path report it
        return False


def _candidates_main(given, candidates, tasks, sizes, extra_shapes, allow_failing, profile, out, kernelbench,
                     from_results, results_dir, claims, name, sign=None, bundle_format=None,
                     shard_args=(None, None, (), None)) -> None:
    """make_bundle.py for KernelBench candidates: run and pack, or pack --from-results; with
    --shards/--engine, each candidate x task runs as its own case (bundle/shard.py)."""
    shards, engine, engine_opts, device = shard_args
    from kbrepro.bundle import candidates as bc
    from kbrepro.bundle import make
    from kbrepro.paths import check_input_dir, check_input_file, prepare_output_dir, remove_created

    wrong = [p.opts[0] for p in given if p.name in ("study", "cache_dir", "no_plots")]
    if wrong:
        raise UsageError(f"{', '.join(wrong)} {'does' if len(wrong) == 1 else 'do'} not apply to KernelBench candidates",
                         "drop them; a candidate bundle needs --candidate FILE --task LEVEL/TASK")
    make._check_name(name)
    if bundle_format is not None:  # else the newest format that holds the results (bc.format_for)
        make.check_bundle_format(bundle_format, sign is not None, bc.FORMAT_VERSIONS, bc.CRATE_SINCE)
    key = make.load_key(sign)
    if claims:
        check_input_file(claims, "--claims")
    if out:
        make.check_out_path(Path(out))
    if from_results:
        extra = [p.opts[0] for p in given if p.name in ("candidates", "tasks", "sizes", "extra_shapes", "profile",
                                                          "results_dir") + SHARD_OPTS]
        if extra:
            raise UsageError(f"{', '.join(extra)} {'applies' if len(extra) == 1 else 'apply'} to a new run, not to "
                             "--from-results",
                             "results already carry their candidates, tasks and profile")
        check_input_dir(from_results, "--from-results", "pass the folder a candidate run wrote")
        with status(f"packing {from_results}"):
            made = bc.pack_results(Path(from_results), Path(out) if out else None, claims_path=claims, name=name,
                                   allow_failing=allow_failing, bundle_format=bundle_format, sign=sign)
        _summary(made, public_key=key.public if key else None, allow_failing=allow_failing, own_run=True)
        return
    if not candidates or not tasks:
        raise UsageError("a candidate bundle needs --candidate FILE and --task LEVEL/TASK",
                         "e.g. python make_bundle.py --candidate my_kernel.py --task 1/88")
    from kbrepro.harness.kernelbench import load_pin

    paired = bc.pair_candidates(candidates, tasks, load_pin())
    if kernelbench:
        check_input_dir(kernelbench, "--kernelbench", make.KB_HINT)
    size_map = bc.parse_size_options(sizes)
    shapes = tuple(bc.parse_extra_shape(s) for s in extra_shapes)
    profile = profile or "full"
    from kbrepro.harness.candidate import PROFILES

    if profile not in PROFILES:
        raise UsageError(f"unknown profile {profile!r} for candidates", f"use one of {', '.join(PROFILES)}")
    device = device or "cuda"
    if engine_opts and engine is None:
        raise UsageError("--engine-opt without --engine", "name the engine the options are for, e.g. --engine submitit")
    eng = None
    if shards is not None or engine is not None:
        from kbrepro.harness import engines

        # a bad engine, option or shard count (2) or a missing package (4) before any folder is made
        eng = engines.make_engine(engine or "local", shards=shards, device=device,
                                  opts=engines.parse_opts(engine_opts))
    rdir = Path(results_dir) if results_dir else Path("results") / f"candidates-{profile}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    from kbrepro.bundle import checkpoint

    # a folder holding an unfinished run of these candidates: the run resumes there
    if not (eng is None and results_dir and checkpoint.holds_progress(rdir)):
        if (rdir / "results" / "candidates.json").is_file():  # a finished run (its packing stopped, or done)
            raise UsageError(f"--results-dir {rdir} holds a finished candidate run",
                             f"pack it with: python make_bundle.py --from-results {rdir}; or choose another --results-dir")
        remove_created(prepare_output_dir(rdir, "--results-dir")[1])
    from kbrepro.process import deferred_sigint

    with deferred_sigint():
        import torch

    # the cases of a cluster engine run on the cluster's GPUs, not on this (login) host's
    if device == "cuda" and (eng is None or eng.name == "local") and not torch.cuda.is_available():
        raise EnvironmentUnavailableError("no CUDA GPU here: a candidate cannot run on this machine",
                                          "run on a GPU machine, pack results that exist with --from-results DIR, "
                                          "or check the candidates without timings with --device cpu")
    t0 = time.perf_counter()

    def say(m):
        click.echo(f"[{time.perf_counter() - t0:7.1f}s] {m}", err=True)

    if eng is not None:
        from kbrepro.bundle import shard

        rdir.mkdir(parents=True, exist_ok=True)
        _, failed = shard.run_sharded(paired, profile=profile, kernelbench=kernelbench,
                                      results_dir=rdir, engine=eng, device=device, sizes=size_map,
                                      extra_shapes=shapes, progress=say)
        for f in failed:
            click.echo(f"failed:  case {f['id']} ({f['candidate']} on {f['task']}): {f['error']}", err=True)
    else:
        bc.run_candidates(paired, profile=profile, kernelbench=kernelbench,
                          results_dir=rdir, progress=say, extra_shapes=shapes, sizes=size_map, device=device)
    with status(f"packing {rdir}"):
        made = bc.pack_results(rdir, Path(out) if out else None, claims_path=claims, name=name,
                               allow_failing=allow_failing, bundle_format=bundle_format, sign=sign)
    _summary(made, own_run=True, extra=f"; whole command {time.perf_counter() - t0:.1f} s; results in {rdir}",
                       public_key=key.public if key else None, allow_failing=allow_failing)


if __name__ == "__main__":
    from kbrepro.process import run_main

    run_main(main)
