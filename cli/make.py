"""``make_bundle.py``'s command line (DESIGN.md §2, ``cli/make.py``): one subcommand per thing it
makes, each declaring only its own options.

    python make_bundle.py [study] [--profile quick] [--out X.tar]      # run a study on this GPU, pack it
    python make_bundle.py candidates --candidate F.py --task 1/88       # run KernelBench candidates, pack them
    python make_bundle.py pack RESULTS [--out X.tar] [--sign KEY]       # pack results that exist (no GPU)
    python make_bundle.py keygen DIR                                    # an Ed25519 key pair for --sign
    python make_bundle.py selftest                                      # the harness self-tests on this GPU

The form before subcommands stays: with no subcommand the options choose one (``--candidate``,
``--candidate-dir``, ``--task``, ``--size``, ``--extra-shape``: candidates; ``--from-results DIR``:
pack; ``--keygen DIR``: keygen; ``--self-test``: selftest; else study). Either way an option of
another subcommand is one usage error naming where it applies (:meth:`_Group.parse_args`), the
one rule that replaces the "X does not apply to Y" ladders.

Our own modules are imported inside the commands (an entry point: ``--help`` and a usage error
answer in about 0.07 s instead of the 0.5 s the bundle stack takes to import, and nothing loads
CUDA before ``make_bundle.py`` set CUDA_CACHE_DISABLE).
"""
from __future__ import annotations

import difflib
import sys
import time
from pathlib import Path

import click

from kbrepro.cli.edge import EdgeMixin, echo, other_tools_option, status
from kbrepro.errors import EnvironmentUnavailableError, Interrupted, UsageError

# ---------------------------------------------------------------------------------------------
# the options, each written once; a subcommand names the ones it takes

_P = click.Path()
OPTIONS: dict[str, tuple[tuple[str, ...], dict]] = {
    "study": (("--study",), dict(type=_P, help="study folder (studies/<name>) or its study.yaml "
                                               "[default: studies/pointwise_fusion]")),
    "profile": (("--profile",), dict(help="profile of a new run: full (default), quick; a study also extended")),
    "out": (("--out",), dict(type=_P, help="archive to write (.tar or .tar.gz) [default: <bundle name>.tar]")),
    "kernelbench": (("--kernelbench",), dict(type=_P, help="KernelBench checkout [default: $KBREPRO_KERNELBENCH or "
                                                           "the project's KernelBench/ submodule]")),
    "results_dir": (("--results-dir",), dict(type=_P, help="where a new run writes its documents; a candidate run "
                                                           "stopped before it finished resumes in its folder "
                                                           "[default: results/<study>-<profile>-<UTC>]")),
    "claims": (("--claims",), dict(type=_P, help="claims YAML [default: the study's own claims file]")),
    "cache_dir": (("--cache-dir",), dict(type=_P, help="our cubin cache [default: none]")),
    "name": (("--name",), dict(help="bundle name [default: <study>-<profile>-<run start UTC>]")),
    "no_plots": (("--no-plots",), dict(is_flag=True, help="draw no renderings (the figures' data are packed all the "
                                                          "same; the digest does not change)")),
    "allow_failing": (("--allow-failing",), dict(is_flag=True, help=(
        "keep a bundle that will fail verification (a study), or pack a candidate bundle even when a candidate is "
        "caught or a default claim fails"))),
    "sign": (("--sign",), dict(type=_P, help=(
        "sign the bundle with this Ed25519 private key (PEM, as 'openssl genpkey -algorithm ed25519' or keygen "
        "writes it): in-toto statements (SLSA provenance, the claims' test result) in DSSE envelopes, a tag file "
        "the digest covers; the key never enters the bundle"))),
    "bundle_format": (("--bundle-format",), dict(type=int, help="the bundle format to write [default: the newest]")),
    "candidates": (("--candidate", "candidates"), dict(multiple=True, type=_P, help=(
        "a KernelBench candidate file (defines ModelNew); repeat for several; needs --task"))),
    "candidate_dir": (("--candidate-dir",), dict(type=_P, help=(
        "a folder of candidates, one file per task named <level>_<task>[_name].py (e.g. 1_19.py): a whole level "
        "in one run and one bundle; instead of --candidate and --task"))),
    "tasks": (("--task", "tasks"), dict(multiple=True, help=(
        "the task a --candidate solves: LEVEL/TASK (e.g. 1/88) or a KernelBench path of the pin; one for all "
        "candidates or one per --candidate, in order"))),
    "sizes": (("--size", "sizes"), dict(multiple=True, help=(
        "a candidate run at other sizes: NAME=VALUE sets the task's size global (repeatable, recorded); VALUE of "
        "the kind of the task's own value: an integer (batch_size=8) or a tuple of 1 to 8 positive integers, in "
        "parentheses or not, a one-entry tuple with its comma (input_shape=(4096,) or input_shape=4096, and "
        "kernel_size=(5,7) or kernel_size=5,7)"))),
    "extra_shapes": (("--extra-shape", "extra_shapes"), dict(multiple=True, help=(
        "an extra shape each candidate is checked at: NAME=VALUE[,NAME=VALUE], VALUE as --size's "
        "(kernel_size=(3,5),batch_size=4) [default: batch_size // 2]"))),
    "shards": (("--shards",), dict(type=int, help=(
        "run each candidate x task as its own case, at most N at once (local engine: one process per GPU, so N <= "
        "the GPUs; submitit on Slurm: the array's parallelism)"))),
    "engine": (("--engine",), dict(type=click.Choice(["local", "submitit", "ray"]), help=(
        "what runs the cases [default with --shards: local]; submitit needs kbrepro[cluster], ray needs "
        "kbrepro[ray]"))),
    "engine_opts": (("--engine-opt", "engine_opts"), dict(multiple=True, help=(
        "an engine parameter KEY=VALUE (repeatable): the submitit executor's parameters (cluster=local or slurm, "
        "slurm_partition, timeout_min, gpus_per_node...), the ray address, the local gpus=0,1"))),
    "device": (("--device",), dict(type=click.Choice(["cuda", "cpu"]), help=(
        "cuda (default) or cpu (a run without timings, profiler or poisoned allocator)"))),
    # the spellings of the form before subcommands, accepted where they route to
    "from_results": (("--from-results", "from_results"), dict(type=_P, hidden=True)),
    "keygen": (("--keygen", "keygen_dir"), dict(type=_P, hidden=True)),
    "self_test": (("--self-test", "self_test"), dict(is_flag=True, hidden=True)),
}
PACKING = ("out", "kernelbench", "claims", "name", "allow_failing", "sign", "bundle_format")


def _no_empty_path(ctx, param, value):
    """A path option or argument given as the empty string is refused (it would mean the current
    folder, or fall back to the default, without saying so)."""
    if value == "" or (isinstance(value, tuple) and "" in value):
        raise click.BadParameter("an empty path; give a file or folder name", ctx=ctx, param=param)
    return value


def options(*names: str, **helps: str):
    """Click decorators for the options ``names`` of :data:`OPTIONS`, in that order; ``helps``:
    a subcommand's own help text of an option, by name."""
    def deco(f):
        for n in reversed(names):
            decls, kw = OPTIONS[n]
            kw = {**kw, "help": helps[n]} if n in helps else dict(kw)
            if kw.get("type") is _P:
                kw["callback"] = _no_empty_path
            f = click.option(*decls, **{"default": None, **kw} if not kw.get("is_flag") else kw)(f)
        return f
    return deco


#: what each subcommand makes, as the usage errors name it
WHAT = {"study": "a study run", "candidates": "KernelBench candidate runs",
        "pack": "packing results that exist (pack, --from-results)", "keygen": "keygen", "selftest": "selftest"}
#: the spellings of the form before subcommands: the first one given chooses the subcommand
LEGACY = (("--self-test", "selftest"), ("--keygen", "keygen"), ("--from-results", "pack"),
          *((o, "candidates") for o in ("--candidate", "--candidate-dir", "--task", "--size", "--extra-shape")))
LONE = {"keygen": "--keygen", "selftest": "--self-test"}


class _Group(EdgeMixin, click.Group):
    """Errors, Ctrl-C and unexpected exceptions become one line and an exit code (kbrepro.errors);
    the form without a subcommand is routed (:data:`LEGACY`)."""

    def list_commands(self, ctx):
        return list(WHAT)

    def _table(self) -> dict[str, tuple[bool, bool, set[str]]]:
        """Every option spelling -> (takes a value, repeatable, the subcommands that accept it)."""
        table: dict[str, tuple[bool, bool, set[str]]] = {}
        for name, cmd in self.commands.items():
            for p in cmd.params:
                if isinstance(p, click.Option):
                    for o in (*p.opts, *p.secondary_opts):
                        table.setdefault(o, (not p.is_flag, bool(p.multiple), set()))[2].add(name)
        return table

    def parse_args(self, ctx, args):
        args = list(args)
        if args and args[0] in ctx.help_option_names:
            return super().parse_args(ctx, args)
        legacy = not args or args[0].startswith("-")
        if not legacy and args[0] not in self.commands:
            if args[0] == "verify" or args[0].endswith((".tar", ".tar.gz", ".tgz")):  # a bundle to check
                archive = args[1] if args[0] == "verify" and len(args) > 1 else args[0]
                raise UsageError(f"make_bundle.py makes bundles; {args[0]!r} is not one of its commands",
                                 f"to check a bundle, run 'python verify_bundle.py {archive}'")
            return super().parse_args(ctx, args)  # click's "No such command"
        table = self._table()
        rest = args if legacy else args[1:]
        given, unknown = _given(rest, table)
        sub = next((s for o, s in LEGACY if o in given), "study") if legacy else args[0]
        if any(h in rest[: rest.index("--")] if "--" in rest else h in rest for h in ctx.help_option_names):
            return super().parse_args(ctx, [sub, "--help"])  # --help wins: the subcommand's own help
        if unknown:  # suggested from every spelling of every subcommand, the older ones included
            other = other_tools_option(unknown, "make_bundle.py")
            if other is not None:
                raise other
            # (a subcommand given: its own context, so the next step is its --help, not the group's)
            raise click.NoSuchOption(unknown, possibilities=difflib.get_close_matches(unknown, list(table), 3, 0.6),
                                     ctx=ctx if legacy else click.Context(self.commands[sub], info_name=sub, parent=ctx))
        twice = [o for o in dict.fromkeys(given) if not table[o][1] and given.count(o) > 1]
        if twice:
            raise UsageError(f"{twice[0]} given {given.count(twice[0])} times; it takes one value",
                             f"give {twice[0]} once")
        foreign = [o for o in dict.fromkeys(given) if sub not in table[o][2]]
        if foreign:
            got = ", ".join(foreign)
            if sub in LONE:
                form = LONE[sub] if legacy else sub
                raise UsageError(f"{form} takes no other option (got {got})",
                                 f"run 'python make_bundle.py {sub}{' DIR' if sub == 'keygen' else ''}' alone")
            one = len(foreign) == 1
            owners = [WHAT[s] for s in WHAT if s not in LONE and all(s in table[o][2] for o in foreign)]
            raise UsageError(f"{got} {'does' if one else 'do'} not apply to {WHAT[sub]}",
                             f"drop {'it' if one else 'them'}" + (f"; {'it applies' if one else 'they apply'} to "
                                                                  f"{' and '.join(owners)}" if owners else
                                                                  f"; see 'python make_bundle.py {sub} --help'"))
        return super().parse_args(ctx, [sub, *rest])


def _given(args: list[str], table: dict[str, tuple[bool, bool, set[str]]]) -> tuple[list[str], str | None]:
    """The known option spellings in ``args``, in order (a value token is skipped, ``--x=v`` read
    as ``--x``), and the first unknown ``--option`` (None if every one is known)."""
    out, unknown, i = [], None, 0
    while i < len(args):
        t = args[i]
        if t == "--":
            break
        name, eq, _ = t.partition("=")
        if name in table:
            out.append(name)
            if table[name][0] and not eq:
                i += 1
        elif name.startswith("--") and unknown is None:
            unknown = name
        i += 1
    return out, unknown


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Run a study or KernelBench candidates on this GPU, validate every result, and pack a
    deterministic, verifiable bundle; or pack results that exist. Without a subcommand: study
    (the options before subcommands still choose one: --candidate, --from-results, --keygen,
    --self-test)."""


# ---------------------------------------------------------------------------------------------
# the subcommands


@main.command("study")
@options("study", "profile", "results_dir", "cache_dir", "no_plots", *PACKING,
         profile="profile of the run: full (default), quick, extended",
         results_dir="where the run writes its documents [default: results/<study>-<profile>-<UTC>]",
         allow_failing="keep a bundle that will fail verification (its results are kept either way)",
         bundle_format="the bundle format to write [default: the newest]; an older one writes REPORT.md as that "
                       "format did, 3 the layout before signatures and RO-Crate (cannot be signed); the formats: "
                       "docs/bundle-format.md")
def study_cmd(study, profile, results_dir, cache_dir, no_plots, out, kernelbench, claims, name, allow_failing, sign,
              bundle_format) -> None:
    """Run a study on this GPU (the published one by default), validate, and pack it."""
    from kbrepro.bundle import make
    from kbrepro.bundle.assemble import unpublished_removed_on_error
    from kbrepro.bundle.kinds import STUDY
    from kbrepro.harness.run import early_prefetch
    from kbrepro.harness.study import load_study
    from kbrepro.paths import prepare_output_dir, remove_created
    from kbrepro.process import deferred_sigint

    _refuse_signed_failing(sign, allow_failing)
    make._check_name(name)
    STUDY.check_format(STUDY.newest if bundle_format is None else bundle_format, sign is not None)
    _refuse_out_over_inputs(out, claims, sign, study)
    # usage first, then the inputs (exit 3), then the outputs (exit 2), then the GPU (4), all before any work
    key = _study_inputs(study, claims, kernelbench, sign, out)
    profile = profile or "full"
    cfg = load_study(study, profile)  # a bad study or profile is reported before anything else
    if cache_dir:
        remove_created(prepare_output_dir(cache_dir, "--cache-dir", must_be_empty=False)[1])
    if results_dir:
        remove_created(prepare_output_dir(results_dir, "--results-dir")[1])
    t0 = time.perf_counter()
    prefetcher = early_prefetch(cfg, kernelbench)  # the model builds start while torch loads here
    with unpublished_removed_on_error():
        try:
            with deferred_sigint():  # a Ctrl-C inside torch's C++ import would abort
                import torch

            if not torch.cuda.is_available():
                raise EnvironmentUnavailableError(
                    "no CUDA GPU here: the study cannot run on this machine",
                    "to pack results that exist, run 'python make_bundle.py pack DIR'; to check a bundle, "
                    "run 'python verify_bundle.py ARCHIVE'")
            made, run_doc = make.run_and_make(Path(out) if out else None, study_path=study, profile=profile,
                                              kernelbench=kernelbench,
                                              results_dir=Path(results_dir) if results_dir else None,
                                              cache_dir=Path(cache_dir) if cache_dir else None, claims_path=claims,
                                              progress=_progress, name=name, with_plots=not no_plots,
                                              bundle_format=STUDY.newest if bundle_format is None else bundle_format,
                                              sign=sign, prefetcher=prefetcher, unpublished=True)
        finally:
            if prefetcher is not None:
                prefetcher.close()
        _summary(made, f"; study run {run_doc['wall_seconds']:.1f} s; whole command {time.perf_counter() - t0:.1f} s",
                 allow_failing=allow_failing, public_key=key.public if key else None, results_dir=made.results)


@main.command("pack")
@click.argument("results", required=False, type=_P, callback=_no_empty_path)
@options("from_results", "study", "no_plots", *PACKING,
         study="study results: the study folder (or its study.yaml) the results belong to [default: the study "
               "the results name]; refused for candidate results",
         no_plots="study results: draw no renderings (the figures' data are packed all the same); refused for "
                  "candidate results",
         kernelbench="study results: the KernelBench checkout the task files are taken from [default: "
                     "$KBREPRO_KERNELBENCH or the project's KernelBench/ submodule]; refused for candidate results",
         claims="claims YAML added to or replacing the default claims [default: the study's, or the candidates' "
                "default claims]",
         name="bundle name [default: from the results: <study>-<profile>-<run start UTC> or "
              "candidates-<profile>-<run start UTC>]",
         allow_failing="keep a study bundle that will fail verification, or pack candidates even when one is caught "
                       "or a default claim fails",
         bundle_format="the bundle format to write [default: the newest that holds the results]")
def pack_cmd(results, from_results, study, no_plots, out, kernelbench, claims, name, allow_failing, sign,
             bundle_format) -> None:
    """Pack the results folder RESULTS a run wrote (a study's, the post's original files, or
    candidates'): validated, no GPU needed."""
    from kbrepro.bundle import candidates as bc
    from kbrepro.bundle import make
    from kbrepro.bundle.assemble import unpublished_removed_on_error
    from kbrepro.bundle.kinds import CANDIDATES, STUDY
    from kbrepro.paths import check_input_dir, check_input_file

    if (results is None) == (from_results is None):
        raise UsageError("pack needs the results folder, once", "e.g. python make_bundle.py pack results/<name>")
    folder = results if results is not None else from_results
    # usage first (2), whatever the results' kind, then the inputs (3)
    make._check_name(name)
    if bundle_format is not None and not any(bundle_format in k.versions for k in (STUDY, CANDIDATES)):
        STUDY.check_format(bundle_format, False)
    _refuse_out_over_inputs(out, claims, sign, study)
    check_input_dir(folder, "--from-results" if from_results is not None else "RESULTS",
                    "pass the folder a run wrote, e.g. results/<name>")
    if bc.is_candidate_results(Path(folder)):
        wrong = [o for o, v in (("--study", study), ("--no-plots", no_plots), ("--kernelbench", kernelbench))
                 if v is not None and v is not False]
        if wrong:
            one = len(wrong) == 1
            raise UsageError(f"{', '.join(wrong)} {'does' if one else 'do'} not apply to candidate results",
                             f"drop {'it' if one else 'them'}: candidate results carry their tasks")
        if bundle_format is not None:  # else the newest format that holds the results (kinds.format_for)
            CANDIDATES.check_format(bundle_format, sign is not None)
        key = make.load_key(sign)
        if claims:
            check_input_file(claims, "--claims")
        if out:
            make.check_out_path(Path(out))
        with unpublished_removed_on_error():
            with status(f"packing {folder}"):
                made = bc.pack_results(Path(folder), Path(out) if out else None, claims_path=claims, name=name,
                                       allow_failing=allow_failing, bundle_format=bundle_format, sign=sign,
                                       unpublished=True)
            _summary(made, public_key=key.public if key else None, allow_failing=allow_failing, own_run=True,
                     results_dir=Path(folder))
        return
    _refuse_signed_failing(sign, allow_failing)
    bundle_format = STUDY.newest if bundle_format is None else bundle_format
    STUDY.check_format(bundle_format, sign is not None)
    key = _study_inputs(study, claims, kernelbench, sign, out)
    with unpublished_removed_on_error():
        with status(f"packing {folder}"):
            made = make.make_from_results(Path(folder), Path(out) if out else None, kernelbench=kernelbench,
                                          study_path=study, claims_path=claims, name=name, with_plots=not no_plots,
                                          bundle_format=bundle_format, sign=sign, unpublished=True)
        _summary(made, allow_failing=allow_failing, public_key=key.public if key else None, results_dir=Path(folder))


@main.command("candidates")
@options("candidates", "candidate_dir", "tasks", "sizes", "extra_shapes", "profile", "results_dir", "device",
         "shards", "engine", "engine_opts", *PACKING,
         profile="profile of the run: full (default) or quick",
         results_dir="where the run writes its documents; a run stopped before it finished resumes in its folder "
                     "[default: results/candidates-<profile>-<UTC>]",
         claims="claims YAML added to the candidates' default claims (the author's own, marked as such)",
         name="bundle name [default: candidates-<profile>-<run start UTC>]",
         allow_failing="pack the bundle even when a candidate is caught or a default claim fails",
         bundle_format="the bundle format to write [default: the newest]; an older one writes REPORT.md as that "
                       "format did; a new run writes timing protocol 2, which formats 2 and 3 cannot hold; the "
                       "formats: docs/bundle-format.md")
def candidates_cmd(candidates, candidate_dir, tasks, sizes, extra_shapes, profile, results_dir, device, shards, engine,
                   engine_opts, out, kernelbench, claims, name, allow_failing, sign, bundle_format) -> None:
    """Run KernelBench candidates (files defining ModelNew) against their tasks, then pack them;
    with --shards/--engine each candidate x task runs as its own case (docs/sharding.md)."""
    from kbrepro.bundle import candidates as bc
    from kbrepro.bundle import checkpoint, make
    from kbrepro.bundle.assemble import unpublished_removed_on_error
    from kbrepro.bundle.kinds import CANDIDATES, SCHEMA_VERSION, format_for
    from kbrepro.harness.candidate import PROFILES
    from kbrepro.harness.kernelbench import load_pin
    from kbrepro.paths import check_input_dir, check_input_file, prepare_output_dir, remove_created
    from kbrepro.process import deferred_sigint

    if candidate_dir is not None:
        if candidates or tasks:
            raise UsageError("--candidate-dir names the candidates and their tasks: drop --candidate and --task",
                             "e.g. python make_bundle.py candidates --candidate-dir my_level1/ --profile quick")
        check_input_dir(candidate_dir, "--candidate-dir", "pass a folder of <level>_<task>.py candidate files")
        pairs = bc.candidates_in(Path(candidate_dir))
        candidates, tasks = tuple(str(p) for p, _ in pairs), tuple(t for _, t in pairs)
    make._check_name(name)
    if bundle_format is not None:  # a new run writes the newest results: a format that cannot hold them is refused now
        CANDIDATES.check_format(bundle_format, sign is not None)
        format_for(SCHEMA_VERSION, bundle_format)
    _refuse_out_over_inputs(out, claims, sign, *candidates)
    key = make.load_key(sign)
    if claims:
        check_input_file(claims, "--claims")
    if out:
        make.check_out_path(Path(out))
    if not candidates or not tasks:
        raise UsageError("a candidate bundle needs --candidate FILE and --task LEVEL/TASK",
                         "e.g. python make_bundle.py candidates --candidate my_kernel.py --task 1/88")
    paired = bc.pair_candidates(candidates, tasks, load_pin())
    if kernelbench:
        check_input_dir(kernelbench, "--kernelbench", make.KB_HINT)
    size_map = bc.parse_size_options(sizes)
    shapes = tuple(bc.parse_extra_shape(s) for s in extra_shapes)
    profile = profile or "full"
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
    rdir = Path(results_dir) if results_dir else \
        Path("results") / f"candidates-{profile}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    # a folder holding an unfinished run of these candidates: the run resumes there
    if not (eng is None and results_dir and checkpoint.holds_progress(rdir)):
        if (rdir / "results" / "candidates.json").is_file():  # a finished run (its packing stopped, or done)
            raise UsageError(f"--results-dir {rdir} holds a finished candidate run",
                             f"pack it with: python make_bundle.py pack {rdir}; or choose another --results-dir")
        remove_created(prepare_output_dir(rdir, "--results-dir")[1])
    with deferred_sigint():
        import torch

    # the cases of a cluster engine run on the cluster's GPUs, not on this (login) host's
    if device == "cuda" and (eng is None or eng.name == "local") and not torch.cuda.is_available():
        raise EnvironmentUnavailableError("no CUDA GPU here: a candidate cannot run on this machine",
                                          "run on a GPU machine, pack results that exist with 'pack DIR', "
                                          "or check the candidates without timings with --device cpu")
    t0 = time.perf_counter()

    def say(m):
        echo(f"[{time.perf_counter() - t0:7.1f}s] {m}", err=True)

    if eng is not None:
        from kbrepro.bundle import shard

        rdir.mkdir(parents=True, exist_ok=True)
        try:
            _, failed = shard.run_sharded(paired, profile=profile, kernelbench=kernelbench, results_dir=rdir,
                                          engine=eng, device=device, sizes=size_map, extra_shapes=shapes, progress=say)
        except KeyboardInterrupt as exc:
            if isinstance(exc, Interrupted) or not any(rdir.iterdir()):
                raise
            # the cases that finished are kept in their folder; the shard command runs the rest
            raise Interrupted(f"the sharded run stopped; its folder {rdir} is kept with the cases that finished: "
                              f"run the rest with 'python -m kbrepro.bundle.shard run {rdir}', then pack it with "
                              f"'python make_bundle.py pack {rdir}'") from None
        for f in failed:
            echo(f"failed:  case {f['id']} ({f['candidate']} on {f['task']}): {f['error']}", err=True)
    else:
        bc.run_candidates(paired, profile=profile, kernelbench=kernelbench, results_dir=rdir, progress=say,
                          extra_shapes=shapes, sizes=size_map, device=device)
    with unpublished_removed_on_error():
        try:
            with status(f"packing {rdir}"):
                made = bc.pack_results(rdir, Path(out) if out else None, claims_path=claims, name=name,
                                       allow_failing=allow_failing, bundle_format=bundle_format, sign=sign,
                                       unpublished=True)
        except KeyboardInterrupt as exc:
            if isinstance(exc, Interrupted):
                raise
            raise Interrupted(f"the run finished and its results are kept in {rdir}; no bundle was written: pack "
                              f"them with 'make_bundle.py pack {rdir}{f' --out {out}' if out else ''}'") from None
        _summary(made, own_run=True, extra=f"; whole command {time.perf_counter() - t0:.1f} s; results in {rdir}",
                 public_key=key.public if key else None, allow_failing=allow_failing, results_dir=rdir)


@main.command("keygen")
@click.argument("folder", required=False, type=_P, callback=_no_empty_path)
@options("keygen")
def keygen_cmd(folder, keygen_dir) -> None:
    """Write a new Ed25519 key pair for --sign into FOLDER (bundle-signing-key.pem, mode 0600, and
    bundle-signing-key.pub.pem for verify_bundle.py --public-key); never overwrites a file."""
    from kbrepro.bundle import attest

    if (folder is None) == (keygen_dir is None):
        raise UsageError("keygen needs the folder to write the key pair into, once",
                         "e.g. python make_bundle.py keygen keys/")
    priv, pub, kid = attest.write_key_pair(folder if folder is not None else keygen_dir,
                                           "FOLDER" if folder is not None else "--keygen")
    echo(f"private key: {priv}  (mode 0600; keep it, never share it; sign with --sign {priv})")
    echo(f"public key:  {pub}  (give it to readers: verify_bundle.py X.tar --public-key {pub})")
    echo(f"key id:      {kid}  (sha256 of the public key's DER SubjectPublicKeyInfo)")


@main.command("selftest")
@options("self_test")
def selftest_cmd(self_test) -> None:
    """Run the harness self-tests (known-bad kernels it must catch) on this GPU."""
    from kbrepro.harness.__main__ import run_selftest_cli

    sys.exit(run_selftest_cli(None))


# ---------------------------------------------------------------------------------------------
# what the subcommands share


def _study_inputs(study, claims, kernelbench, sign, out):
    """The inputs of a study bundle (exit 3), its signing key (a key that cannot be read 3, or
    used 2) and its ``--out`` (2), checked before any work; returns the key (None: unsigned)."""
    from kbrepro.bundle import make
    from kbrepro.paths import check_input_dir, check_input_file, check_input_path

    if study:
        check_input_path(study, "--study")
    if claims:
        check_input_file(claims, "--claims")
    if kernelbench:
        check_input_dir(kernelbench, "--kernelbench", make.KB_HINT)
    key = make.load_key(sign)
    if out:
        make.check_out_path(Path(out))
    return key


def _refuse_out_over_inputs(out, *inputs) -> None:
    """An ``--out`` (or the digest file beside it) that is one of the command's input files would
    destroy it: refused (exit 2) before any work."""
    from kbrepro.bundle import pack
    from kbrepro.paths import refuse_input_as_output

    if out is not None:
        refuse_input_as_output(out, inputs, "--out")
        refuse_input_as_output(out + pack.DIGEST_SUFFIX, inputs, "--out (its .sha256-digest)")


def _refuse_signed_failing(sign, allow_failing) -> None:
    if sign is not None and allow_failing:
        raise UsageError("--sign and --allow-failing: a signed bundle must pass verification",
                         "drop --allow-failing to sign, or drop --sign to keep a failing bundle")


def _progress(event: dict) -> None:
    mark = {"start": ">", "end": "=", "step": " "}.get(event["event"], " ")
    echo(f"[{event['elapsed_s']:7.1f}s] {mark} {event['stage']:<20} {event['message']}", err=True)


def _summary(made, extra: str = "", allow_failing: bool = False, public_key=None, own_run: bool = False,
             results_dir: Path | None = None) -> None:
    """What was packed (a candidate bundle: what its checks caught), then one line: whether
    ``verify_bundle.py`` will pass the bundle (its static tiers, run here; for a signed bundle
    with the signer's public key). A bundle that would fail is removed again (exit 1, the
    results are kept) unless ``allow_failing``; a signed one always (:func:`kbrepro.bundle.publish.publish`).
    ``own_run``: the results are this command's own run (a failure is then a defect of ours)."""
    from kbrepro.bundle import publish
    from kbrepro.errors import Interrupted, ReproError

    lines = [f"bundle:  {made.path}", f"size:    {made.size_bytes:,} bytes",
             f"digest:  {made.digest}  (sha256 of tagmanifest-sha256.txt)"]
    if made.signed_by:
        lines.append(f"signed:  key id {made.signed_by} (attestations.intoto.jsonl: SLSA provenance and the claims' "
                     "test result)")
    lines.append("claims:  " + ", ".join(f"{k} {v}" for k, v in made.claims_summary.items()))
    lines += [f"caught:  {k} by {', '.join(v)}" for k, v in getattr(made, "caught", {}).items()]
    lines.append(f"packing: {made.pack_seconds:.2f} s{extra}")
    lines += [f"note:    {n}" for n in made.notes]
    if getattr(made, "undrawn_figures", 0):
        lines.append(f"note:    matplotlib is not installed here: the bundle has no renderings/, so REPORT.md's "
                     f"{made.undrawn_figures} figure links have no picture; their data are packed (data/plots/) and "
                     f"'verify_bundle.py {made.path.name} --plots DIR' draws them where matplotlib is (pip install -e "
                     "'.[plots]'); the digest is the same either way")
    # printed once the self-verification has ended: an interrupted one removes the bundle, and
    # nothing then names a bundle that is not there
    try:
        publish.publish(made.path, signed=bool(made.signed_by), allow_failing=allow_failing, public_key=public_key,
                        own_run=own_run, echo=lines.append, results_dir=results_dir)
    except Interrupted:
        raise
    except ReproError:  # removed as failing: what was packed, and the verify: line that says where it fails
        for line in lines:
            echo(line)
        raise
    for line in lines:
        echo(line)
