"""``verify_bundle.py``'s command line (DESIGN.md section 2, ``cli/verify.py``): check a bundle
archive as untrusted input, replay it where a GPU is; the report's terminal lines are
:mod:`kbrepro.cli.render`'s.

Exit codes: 0 every requested tier passed; 1 verification failed; 2 usage error (also: an
output path that cannot be written); 3 archive unreadable, unsafe or of an unknown format
version (also: an input path that cannot be read); 4 replay impossible here; 5 PARTIAL; 130
interrupted (Ctrl-C). Errors become exit codes at the CLI edge (``kbrepro.cli.edge.EdgeMixin``),
a verification's from its verdict and problem codes (``kbrepro.model.problems.verdict_exit``).

Our own modules are imported inside the commands, not here: --help and a usage error answer
in about 0.07 s instead of the 0.5 s the bundle stack takes to import (measured on the 2-core
machine).
"""
from __future__ import annotations

import contextlib
import os
import re
import sys
from pathlib import Path

import click

from kbrepro.errors import EnvironmentUnavailableError, UnreadableInputError, UsageError
from kbrepro.paths import remove_created
from kbrepro.cli.edge import EdgeMixin, other_tools_option, status, stream_gone
from kbrepro.cli.render import claims_tail, print_report, rendered_markdown, short, terminal_text


@contextlib.contextmanager
def _tier_status(name: str):
    """A one-line status on a terminal's stderr while the tiers run (which tier, since when),
    erased when they end; nothing where stderr is not a terminal (a log, a pipe, CI). Yields
    the ``on_tier`` callback of :func:`verify_archive`."""
    with status(f"verifying {short(name, 80)}") as update:
        yield None if update is None else (lambda n, tier: update(f"verifying {short(name, 80)}: tier {n} {tier}"))


class _Command(EdgeMixin, click.Command):
    """Errors, Ctrl-C and unexpected exceptions become one line and an exit code (kbrepro.errors);
    an option of make_bundle.py is named as such (click would suggest a look-alike of ours)."""

    def parse_args(self, ctx, args):
        own = {o for p in self.params if isinstance(p, click.Option) for o in (*p.opts, *p.secondary_opts)}
        for a in args:
            if a == "--":
                break
            if a.startswith("--") and a.split("=", 1)[0] not in own and a.split("=", 1)[0] not in ctx.help_option_names:
                other = other_tools_option(a, "verify_bundle.py")
                if other is not None:
                    raise other
        if args and args[0] in MAKE_COMMANDS and not Path(args[0]).exists():  # a make_bundle.py command
            raise UsageError(f"{args[0]!r} is a command of make_bundle.py; verify_bundle.py takes a bundle to check",
                             f"run 'python make_bundle.py {' '.join(args)}', or give verify_bundle.py an ARCHIVE")
        return super().parse_args(ctx, args)


#: make_bundle.py's subcommands (a word verify_bundle.py would read as an archive's name)
MAKE_COMMANDS = ("study", "candidates", "pack", "keygen", "selftest")


#: Options that act on replay only; refused at --level fast and static.
REPLAY_ONLY = ("profile", "trust_bundle_code", "kernelbench", "ratio_tolerance")
HEX64 = re.compile(r"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")
DIGEST_HINT = "give the 64-hex bundle digest, sha256:<hex>, or the <bundle>.sha256-digest file make_bundle.py wrote"


def study_profiles() -> list[str]:
    """The profile names the studies this verifier ships define (their ``study.yaml``
    files, through the registry ``manifests/studies.json``)."""
    from kbrepro.harness import bounded
    from kbrepro.harness.study import STUDY_FILE, registry, studies_root

    names: set[str] = set()
    for rec in registry().values():
        doc = bounded.load_yaml((studies_root() / rec["folder"] / STUDY_FILE).read_bytes(), STUDY_FILE)
        names |= set((doc or {}).get("profiles") or {}) | {"full"}
    return sorted(names)


def parse_expected_digest(value: str) -> str:
    """``--expect-digest``: the 64-hex digest, ``sha256:<hex>``, or the path of a
    ``<bundle>.sha256-digest`` file (the one 64-hex digest in it). Raises UsageError (2), or
    InputPathError (3) for a digest file that exists but cannot be read."""
    from kbrepro.paths import check_input_file

    v = value.strip().lower()
    if v.startswith("sha256:"):
        v = v[len("sha256:"):].strip()
    if re.fullmatch(r"[0-9a-f]{64}", v):
        return v
    p = Path(value.strip())
    try:
        present = bool(value.strip()) and os.path.lexists(p)
    except (OSError, ValueError):
        present = False
    if not present:
        raise UsageError(f"--expect-digest {short(value.strip(), 70)!r} is neither a bundle digest (64 hexadecimal "
                         "characters, sha256) nor an existing digest file", DIGEST_HINT)
    check_input_file(p, "--expect-digest file")
    try:
        with open(p, "rb") as fh:
            raw = fh.read(65537)
    except OSError as exc:
        raise UnreadableInputError(f"cannot read --expect-digest file {p}: {(exc.strerror or '').lower()}",
                                   DIGEST_HINT) from exc
    try:
        text = raw.decode("ascii").lower()
    except UnicodeDecodeError:
        text = None
    found = sorted(set(HEX64.findall(text))) if text is not None and len(raw) <= 65536 else []
    if len(found) != 1:
        raise UsageError(f"--expect-digest file {p} does not hold exactly one 64-hex digest "
                         f"({'none' if not found else len(found)} found)", DIGEST_HINT)
    return found[0]


@click.command(cls=_Command, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("archive", type=click.Path())
@click.option("--level", type=click.Choice(["fast", "static", "replay", "auto"]), default="auto", show_default=True,
              help="fast: archive+manifest; static: + documents, provenance, claims; replay: + rerun on this GPU; "
                   "auto: static, then replay if a GPU is present")
@click.option("--profile", default=None,
              help="replay profile (one of the bundle's study, e.g. full, quick, extended) [default: the bundle's]; "
                   "'quick' replays in seconds")
@click.option("--json", "json_out", type=click.Path(), default=None, help="write the verification report")
@click.option("--expect-digest", default=None,
              help="fail unless the bundle digest is this sha256 (hex, sha256:<hex>, or a .sha256-digest file)")
@click.option("--trust-bundle-code", is_flag=True,
              help="let replay execute the bundle's own study folder (binding and kernels) when this verifier does "
                   "not ship that study")
@click.option("--kernelbench", type=click.Path(), default=None, help="KernelBench checkout for replay")
@click.option("--ratio-tolerance", type=click.FloatRange(min=0.0, max=10.0), default=0.05, show_default=True,
              help="relative tolerance when comparing replayed timing ratios with the recorded ones")
@click.option("--keep-extracted", type=click.Path(), default=None,
              help="extract into this empty (or new) folder and keep it [default: a temporary folder, removed]")
@click.option("--show-report", is_flag=True,
              help="after a verification that does not fail, print the bundle's REPORT.md and its five-line "
                   "summary for a forum post")
@click.option("--html", "html_out", type=click.Path(), default=None,
              help="after a verification that does not fail, write REPORT.md as one self-contained, inert HTML page "
                   "(no script, no request outside the file; figures embedded only where --check-renderings "
                   "compared their pixels)")
@click.option("--plots", "plots_dir", type=click.Path(), default=None,
              help="draw the bundle's figures from their verified data into this new or empty folder (matplotlib)")
@click.option("--check-renderings", is_flag=True,
              help="draw every figure again from its verified data and compare it byte for byte with the bundle's "
                   "PNG in renderings/ (outside the digest); needs the matplotlib, numpy and freetype versions the "
                   "bundle records, else the result is PARTIAL; without matplotlib it is refused, exit 4 (seconds)")
@click.option("--public-key", "public_key", type=click.Path(), default=None,
              help="the signer's Ed25519 public key (PEM): fail unless the bundle is signed with it (envelopes, "
                   "subjects against the payload, statements against the documents); without it a signature is "
                   "reported by key id, not checked")
@click.option("-v", "--verbose", is_flag=True, help="list every problem")
@click.pass_context
def main(ctx, archive, level, profile, json_out, expect_digest, trust_bundle_code, kernelbench, ratio_tolerance,
         keep_extracted, show_report, html_out, plots_dir, check_renderings, public_key, verbose) -> None:
    """Verify ARCHIVE tier by tier and print one line per tier and a final verdict."""
    from click.core import ParameterSource

    from kbrepro.bundle.verify.checklist import verify_archive
    from kbrepro.harness import jsonio
    from kbrepro.paths import refuse_input_as_output
    from kbrepro.errors import OutputPathError
    from kbrepro.paths import check_input_dir, check_input_file, check_output_file, prepare_output_dir

    # 1. usage: options that do nothing at this level, bad values (exit 2)
    if level in ("fast", "static"):
        given = [p.opts[0] for p in ctx.command.params
                 if p.name in REPLAY_ONLY and ctx.get_parameter_source(p.name) not in (ParameterSource.DEFAULT, None)]
        if given:
            raise UsageError(f"{', '.join(given)} {'acts' if len(given) == 1 else 'act'} on replay only and "
                             f"{'does' if len(given) == 1 else 'do'} nothing at --level {level}",
                             f"drop {', '.join(given)}, or use --level replay (or auto) on a GPU machine")
    if keep_extracted and level == "fast":
        raise UsageError("--keep-extracted has no effect at --level fast (nothing is extracted)",
                         "drop --keep-extracted, or use --level static")
    if (show_report or html_out or plots_dir or check_renderings) and level == "fast":
        given = [o for o, v in (("--show-report", show_report), ("--html", html_out), ("--plots", plots_dir),
                                ("--check-renderings", check_renderings)) if v]
        raise UsageError(f"{', '.join(given)} need{'s' if len(given) == 1 else ''} the documents verified, which "
                         "--level fast does not do", "use --level static (or auto)")
    if plots_dir or check_renderings:
        try:
            from kbrepro.bundle import plots as plots_mod

            plots_mod.renderer_versions()
        except ImportError as exc:
            raise EnvironmentUnavailableError(f"{'--plots' if plots_dir else '--check-renderings'} needs matplotlib, "
                                              "which is not installed",
                                              "pip install matplotlib (in a clone of the project: "
                                              "pip install -e '.[plots]')") from exc
    if profile is not None:
        names = study_profiles()
        if profile not in names:
            raise UsageError(f"--profile {profile!r} is not a profile of any study this verifier ships",
                             f"choose one of: {', '.join(names)}")
    digest_input = expect_digest if expect_digest is not None and os.path.exists(expect_digest) else None
    if expect_digest is not None:
        expect_digest = parse_expected_digest(expect_digest)
    # 2. inputs (exit 3)
    try:
        check_input_file(archive, "ARCHIVE", "check the path of the bundle (.tar or .tar.gz)",
                         folder_hint="give the bundle's .tar or .tar.gz file; an unpacked bundle is not verified "
                         "(its bytes could have changed since it was packed)")
    except UnreadableInputError as exc:  # the messages scripts and tests know, for what the path is
        if not os.path.lexists(archive):
            raise UnreadableInputError(f"no archive at {archive}", exc.hint) from None
        if os.path.isdir(archive):
            raise UnreadableInputError(f"ARCHIVE {archive} is a directory, not a bundle archive", exc.hint) from None
        raise
    if kernelbench:
        check_input_dir(kernelbench, "--kernelbench")
    key = None
    if public_key:
        from kbrepro.bundle import attest

        key = attest.load_public_key(public_key)  # 3 if it cannot be read, 2 if it is not an Ed25519 public key
    # 3. outputs (exit 2), checked before verifying; the folder is made last
    if json_out:
        check_output_file(json_out, "--json")
        refuse_input_as_output(json_out, [archive, digest_input, public_key], "--json")
    if html_out:
        check_output_file(html_out, "--html")
        refuse_input_as_output(html_out, [archive, digest_input, public_key, json_out], "--html")
    if plots_dir:
        remove_created(prepare_output_dir(plots_dir, "--plots")[1])  # checked now, made after verifying
    keep, created = None, []
    # which folders did not exist before: a Ctrl-C that lands while they are being made (before
    # prepare_output_dir returns what it created) must not leave them behind either
    missing = []
    if keep_extracted:
        q = Path(keep_extracted).absolute()
        while not os.path.lexists(q) and q.parent != q:
            missing.append(q)
            q = q.parent

    def progress(ev):
        click.echo(f"    [{ev['elapsed_s']:6.1f}s] replay {ev['stage']} {ev['event']} {ev['message']}", err=True)

    try:
        if keep_extracted:
            keep, created = prepare_output_dir(keep_extracted, "--keep-extracted")
        with _tier_status(Path(archive).name) as on_tier:
            rep = verify_archive(Path(archive), level=level, profile=profile, trust=trust_bundle_code,
                                 kernelbench=kernelbench, ratio_tolerance=ratio_tolerance, expect_digest=expect_digest,
                                 keep_extracted=keep, progress=progress, check_renderings=check_renderings,
                                 public_key=key, on_tier=on_tier)
    except BaseException:
        if keep is not None:  # the folder was empty or new: leave it as it was
            _empty(keep)
            remove_created(created)
        for q in missing:  # deepest first: the folders this command may have made
            if os.path.isdir(q) and not os.path.islink(q):
                _empty(q)
                try:
                    os.rmdir(q)
                except OSError:
                    pass
        raise
    from kbrepro.process import work_done

    work_done()  # verified: a Ctrl-C from here on does not change the result being reported
    if json_out:
        # the report file is written before the verdict is printed: a verdict line is never
        # shown for a verification whose requested report does not exist
        doc = rep.to_doc()
        for t in doc["tiers"]:
            t["details"].pop("recomputed", None)
        try:
            jsonio.write_json(Path(json_out), doc)
        except OSError as exc:
            raise OutputPathError(f"cannot write --json {json_out}: {(exc.strerror or type(exc).__name__).lower()}; "
                                  "no report was written and no verdict is given",
                                  "choose another --json path and verify again") from exc
    # every file asked for is written even when the reader of stdout stopped reading (| head):
    # the terminal lines are then dropped, the files and the verdict's exit code are not
    try:
        print_report(rep, verbose)
    except BrokenPipeError:
        stream_gone()
    if html_out:
        _write_html(rep, Path(html_out))
    if show_report or plots_dir:
        from kbrepro.errors import Interrupted
        from kbrepro.process import imports_done, sigint_seen

        imports_done()  # drawing figures takes seconds: Ctrl-C and SIGTERM stop it (issue 31)
        try:
            _show(Path(archive), rep, show_report, plots_dir)
        except Exception as exc:
            if not sigint_seen():  # (an error a Ctrl-C caused is the interrupt's, as below)
                raise
            raise Interrupted("the verdict above stands" + (f" and --json {json_out} is written" if json_out else "")
                              + (f"; --html {html_out} is written" if html_out else "")
                              + (f"; no figure was kept in {plots_dir}" if plots_dir else "")) from exc
        except KeyboardInterrupt:
            raise Interrupted("the verdict above stands" + (f" and --json {json_out} is written" if json_out else "")
                              + (f"; --html {html_out} is written" if html_out else "")
                              + (f"; no figure was kept in {plots_dir}" if plots_dir else "")) from None
        work_done()
    sys.exit(rep.exit_code)


def _write_html(rep, out: Path) -> None:
    """REPORT.md of a bundle whose verification did not fail, as an inert HTML page at ``out``
    (:mod:`kbrepro.bundle.html_report`), written atomically; for a failed one, a line saying
    why nothing was written."""
    from kbrepro.bundle.html_report import render_html
    from kbrepro.harness import jsonio

    if rep.verdict == "FAIL":
        click.echo(f"--html: {out} not written: the bundle failed verification, so its report is not the data's",
                   err=True)
        return
    compared = [n for t in rep.tiers for n in t.details.get("renderings_compared", ())]
    figures = {n: rep.files[f"renderings/{n}.png"] for n in compared if f"renderings/{n}.png" in rep.files}
    page = render_html(terminal_text(rep.files.get("data/REPORT.md", b"")), title=rep.bundle_name or rep.archive,
                       verdict=rep.verdict, verdict_line=f"VERDICT {rep.verdict} (exit {rep.exit_code}){claims_tail(rep)}"
                       f" (verified at --level {rep.level})" + (f"; not a plain PASS: {short(rep.partial[0], 300)}"
                                                                  if rep.verdict == "PARTIAL" and rep.partial else ""),
                       digest=rep.digest, figures=figures)
    jsonio.atomic_write_bytes(out, page)
    click.echo(f"html    {out} ({len(figures)} figure{'s' if len(figures) != 1 else ''} embedded)", err=True)


def _show(archive: Path, rep, show_report: bool, plots_dir: str | None) -> None:
    """REPORT.md and summary.txt, or the figures drawn from data/plots/*.json, of a bundle whose
    verification did not fail (their bytes were compared with the verifier's own)."""
    if rep.verdict == "FAIL":
        click.echo("not shown: the bundle failed verification, so its report and figures are not the data's", err=True)
        return
    files = rep.files  # the bytes verified, never a second read of a file that may have changed since
    try:
        if show_report:
            _print_report_files(archive, files)
    except BrokenPipeError:
        stream_gone()
    if plots_dir:
        _draw_plots(files, plots_dir)


def _print_report_files(archive: Path, files) -> None:
    """REPORT.md laid out for the terminal, then summary.txt (stdout)."""
    click.echo("\n---- REPORT.md (verified: the verifier renders the same bytes from the records) ----\n")
    click.echo(rendered_markdown(terminal_text(files.get("data/REPORT.md", b""))))
    if any(p.startswith("renderings/") for p in files):
        click.echo("(its figures link to renderings/, outside the digest: their data are verified, their pixels "
                   "only with --check-renderings)")
    elif any(p.startswith("data/plots/") for p in files):
        click.echo("(this bundle carries no pictures: its packer had no matplotlib; the figures' data are verified "
                   f"and 'verify_bundle.py {short(archive.name, 100)} --plots DIR' draws them)")
    if "summary.txt" in files:
        click.echo("---- summary.txt (five lines for a post; the verifier writes the same) ----")
        click.echo(terminal_text(files["summary.txt"]), nl=False)
        first = files["summary.txt"].split(b"\n", 1)[0].decode("ascii", "replace")
        named = re.fullmatch(r"kbrepro bundle ([A-Za-z0-9][A-Za-z0-9._-]{0,79}): digest sha256:[0-9a-f]{64}", first)
        packed_as = f"{named.group(1)}.tar" if named else None
        if packed_as and archive.name != packed_as:
            click.echo(f"(its check line names the file the packer wrote, {short(packed_as, 100)}; this copy is "
                       f"{short(archive.name, 100)})")


def _draw_plots(files, plots_dir: str) -> None:
    """The figures drawn from the verified data/plots/*.json into ``plots_dir`` (none of a
    half set is left; a bundle without figures: said, and no folder made). Its line goes to
    stderr, beside the other files' lines."""
    from kbrepro.bundle import plots as plots_mod
    from kbrepro.harness import jsonio
    from kbrepro.paths import prepare_output_dir

    if not any(p.startswith("data/plots/") and p.endswith(".json") for p in files):
        click.echo(f"plots: this bundle has no figures; nothing was drawn and {plots_dir} was not made", err=True)
        return
    out, created = prepare_output_dir(plots_dir, "--plots")
    drawn: list[Path] = []
    try:
        for p in sorted(files):
            if p.startswith("data/plots/") and p.endswith(".json"):
                name = p[len("data/plots/"):-len(".json")]
                png = plots_mod.render(name, jsonio.loads_strict(files[p], p))
                drawn.append(Path(out) / f"{name}.png")  # (before it is written: an interrupt may land in between)
                jsonio.atomic_write_bytes(drawn[-1], png)
    except BaseException:  # no half set of figures: those drawn are removed, and a folder made here (a
        # Ctrl-C can also surface as another exception, raised by a library's cleanup it cut short)
        for f in drawn:
            try:
                f.unlink()
            except OSError:
                pass
        remove_created(created)
        raise
    n = len(drawn)
    click.echo(f"plots: {n} figures drawn from their verified data into {plots_dir} "
               f"(matplotlib {plots_mod.renderer_versions()['matplotlib']})", err=True)


def _empty(folder: Path) -> None:
    import shutil

    try:
        entries = list(folder.iterdir())
    except OSError:
        return
    for e in entries:
        if e.is_dir() and not e.is_symlink():
            shutil.rmtree(e, ignore_errors=True)
        else:
            try:
                e.unlink()
            except OSError:
                pass
