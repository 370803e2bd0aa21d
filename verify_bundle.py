"""verify_bundle.py: check a bundle archive as untrusted input; replay it where a GPU is.

    python verify_bundle.py BUNDLE.tar                  # static tiers, then replay if a GPU is present
    python verify_bundle.py BUNDLE.tar --level fast     # archive and manifest only
    python verify_bundle.py BUNDLE.tar --level static   # no replay
    python verify_bundle.py BUNDLE.tar --level replay --profile quick --json report.json
    python verify_bundle.py BUNDLE.tar --public-key signer.pub.pem   # a signed bundle, signed by this key

Exit codes: 0 every requested tier passed; 1 verification failed; 2 usage error (also: an
output path that cannot be written); 3 archive unreadable, unsafe or of an unknown format
version (also: an input path that cannot be read); 4 replay impossible here; 130
interrupted (Ctrl-C). Errors become exit codes here, at the CLI edge
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

import contextlib
import os
import re
import sys
from pathlib import Path

import click

# Our own modules are imported inside the commands, not here: --help and a usage error answer
# in about 0.07 s instead of the 0.5 s the bundle stack takes to import (measured on the 2-core
# machine), and nothing is imported before the guard above ran.

if os.environ.get("CUDA_CACHE_DISABLE") != "1":
    from kbrepro.harness.startenv import set_own  # what the processes it starts inherit too

    set_own("CUDA_CACHE_DISABLE", "1")

from kbrepro.inert import terminal  # noqa: E402
from kbrepro.errors import EnvironmentUnavailableError, UnreadableInputError, UsageError  # noqa: E402
from kbrepro.paths import remove_created
from kbrepro.cli.edge import EdgeMixin, status


#: a sha256 digest, shown whole in a problem's expected/found (other values are cut to 60 characters)
_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")


def _short(v, n: int = 60) -> str:
    """``v`` as printable ASCII for the terminal (the one inertness rule), cut to ``n``."""
    return terminal(v, n)


@contextlib.contextmanager
def _tier_status(name: str):
    """A one-line status on a terminal's stderr while the tiers run (which tier, since when),
    erased when they end; nothing where stderr is not a terminal (a log, a pipe, CI). Yields
    the ``on_tier`` callback of :func:`verify_archive`."""
    with status(f"verifying {_short(name, 80)}") as update:
        yield None if update is None else (lambda n, tier: update(f"verifying {_short(name, 80)}: tier {n} {tier}"))


def _claims_tail(rep) -> str:
    """What the VERDICT line adds about the claims the verifier evaluated again: how many hold
    and which do not (a PASS says the bundle is genuine, not that every claim holds)."""
    verdicts = {k: v for t in rep.tiers if t.status == "PASS" for k, v in (t.details.get("verdicts") or {}).items()}
    if rep.verdict == "FAIL" or not verdicts:
        return ""
    held = sum(v == "holds" for v in verdicts.values())
    other: dict[str, list[str]] = {}
    for k, v in verdicts.items():
        if v != "holds":
            other.setdefault(v, []).append(_short(k, 32))
    return (f": {held} of {len(verdicts)} claim{'s' if len(verdicts) != 1 else ''} hold"
            + "".join(f"; {v}: {', '.join(ids)}" for v, ids in sorted(other.items())))


def _print_report(rep, verbose: bool) -> None:
    click.echo(f"bundle  {rep.bundle_name or '?'}  ({rep.archive})")
    if rep.digest:
        broken = not rep.payload_matches_manifests
        click.echo(f"digest  {rep.digest}" + ("  (of the archive's tag manifest; its manifests do not match the "
                                              "payload, so it identifies nothing)" if broken else ""))
    if rep.signature is not None:
        click.echo(rep.signature.line())  # "signed by key id <hex>, not checked" / "..., checked ..." / "not signed"
        if (getattr(rep.signature, "signed", False) and not getattr(rep.signature, "checked", False)
                and not getattr(rep.signature, "key_refused", False)):
            click.echo("        (the key id is what the envelope says; anyone can write any key id, and only "
                       "--public-key checks the signature)")
        elif getattr(rep.signature, "checked", False) and getattr(rep, "level", None) == "fast":
            click.echo("        (at --level fast the signed statements are not compared with the documents; "
                       "--level static compares them)")
    for t in rep.tiers:
        extra = ""
        if t.name == "archive" and t.details:
            extra = f"{t.details.get('members')} members, {t.details.get('bytes'):,} bytes"
        elif t.name == "manifest" and t.details:
            extra = f"{t.details.get('payload_files')} payload files hashed"
        elif t.name == "documents" and t.details.get("documents"):
            extra = ", ".join(t.details["documents"])
        elif t.name == "claims" and t.details.get("verdicts"):
            counts = {}
            for v in t.details["verdicts"].values():
                counts[v] = counts.get(v, 0) + 1
            extra = ("recorded verdicts " + ("follow from" if t.status == "PASS" else "checked against")
                     + " the data: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        elif t.name == "provenance" and t.status == "PASS":
            extra = ", ".join(t.details.get("checked", [])) or "nothing to check"
        click.echo(f"{t.number} {t.name:<11} {t.status:<5} {t.seconds:6.2f}s  {extra}")
        for p in t.problems[: 40 if not verbose else None]:
            where = p.file or ""
            if p.path:
                where += f" {p.path}"
            line = f"    - {where}: {p.message}"
            if p.expected is not None or p.found is not None:
                n = 200 if any(_HEX_DIGEST.fullmatch(str(v)) for v in (p.expected, p.found)) else 60
                line += f" (expected {_short(p.expected, n)}, found {_short(p.found, n)})"
            click.echo(line)
        if len(t.problems) > 40 and not verbose:
            click.echo(f"    ... {len(t.problems) - 40} more (use --verbose or --json)")
        for n in t.notes:
            click.echo(f"    note: {_short(n, 100000)}")
        if t.name == "replay" and t.status != "SKIP" and t.details.get("environment"):
            click.echo("    environment (recorded | here; * can change bits):")
            for r in t.details["environment"]:
                if r["field"] in ("env",) and r["same"]:
                    continue
                mark = "*" if r["bits"] else " "
                diff = "" if r["same"] else "   <- differs"
                click.echo(f"     {mark} {r['field']:<24} {_short(r['recorded'], 34):<34} | {_short(r['here'], 34)}{diff}")
            click.echo("    claims (recorded | replayed):")
            for c in t.details.get("claims", []):
                click.echo(f"      {_short(c['id'], 64):<4} {str(c['recorded']):<15} | {c['replayed']:<15} {_short(c['sentence'], 70)}")
            tr = t.details.get("timing_ratios", [])
            if tr:
                inside = sum(1 for r in tr if r["within"])
                excused = [r for r in tr if not r["within"] and r.get("excused")]
                click.echo(f"    timing ratios: {inside}/{len(tr)} reproduce (the two bootstrap intervals, widened by "
                           f"the tolerance, overlap)" + (f"; {len(excused)} more differ, not failed:" if excused else ""))
                for r in excused[:20]:
                    click.echo(f"      {r['block']} {r['ratio']} {r['recorded']:.3f} -> {r['replayed']:.3f}: {r['excused']}")
            if t.details.get("not_replayed"):
                click.echo(f"    recorded cases not replayed: {t.details['not_replayed']} "
                           f"(profile {t.details.get('profile')}, recorded at {t.details.get('recorded_profile')})")
            if "cases_compared" in t.details:  # a study's replay (a candidate bundle's compares its checks)
                click.echo(f"    cases compared: {t.details.get('cases_compared')}; cubins: "
                           + ", ".join(f"{c['variant']} {'same' if c['same'] else ('not comparable' if c['same'] is None else 'DIFFERENT')}"
                                       for c in t.details.get("cubins", [])))
    author = [c for t in rep.tiers for c in t.details.get("author_claims", [])]
    if author:
        click.echo("author's claims (judged by the bundle's own definitions, not this verifier's):")
        for c in author:
            click.echo(f"    {_short(c['id'], 32):<6} {_short(c['verdict'], 16):<15} {_short(c['sentence'], 80)}")
    if rep.partial:
        click.echo("not a plain PASS: every check this verifier could make passed, but" if rep.verdict == "PARTIAL"
                   else "besides the failures above, this rests on the author's side, not the verifier's:")
        for r in rep.partial:
            click.echo(f"    - {_short(r, 100000)}")
    click.echo(f"VERDICT {rep.verdict} (exit {rep.exit_code}){_claims_tail(rep)}")


class _Command(EdgeMixin, click.Command):
    """Errors, Ctrl-C and unexpected exceptions become one line and an exit code (kbrepro.errors)."""


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
        raise UsageError(f"--expect-digest {_short(value.strip(), 70)!r} is neither a bundle digest (64 hexadecimal "
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
                                              "which is not installed", "pip install 'kbrepro[plots]'") from exc
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
        check_input_file(archive, "ARCHIVE", "check the path of the bundle (.tar or .tar.gz)")
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
    try:
        _print_report(rep, verbose)
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
                                  + (f"; no figure was kept in {plots_dir}" if plots_dir else "")) from exc
            except KeyboardInterrupt:
                raise Interrupted("the verdict above stands" + (f" and --json {json_out} is written" if json_out else "")
                                  + (f"; no figure was kept in {plots_dir}" if plots_dir else "")) from None
            work_done()
    except BrokenPipeError:  # the reader stopped reading (| head): the verdict's exit code all the same
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())  # nothing left to flush into a closed pipe at exit
        os.close(fd)
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
    page = render_html(_terminal_text(rep.files.get("data/REPORT.md", b"")), title=rep.bundle_name or rep.archive,
                       verdict=rep.verdict, verdict_line=f"VERDICT {rep.verdict} (exit {rep.exit_code}){_claims_tail(rep)}"
                       f" at --level {rep.level}", digest=rep.digest, figures=figures)
    jsonio.atomic_write_bytes(out, page)
    click.echo(f"html    {out} ({len(figures)} figure{'s' if len(figures) != 1 else ''} embedded)", err=True)


def _show(archive: Path, rep, show_report: bool, plots_dir: str | None) -> None:
    """REPORT.md and summary.txt, or the figures drawn from data/plots/*.json, of a bundle whose
    verification did not fail (their bytes were compared with the verifier's own)."""
    from kbrepro.paths import prepare_output_dir

    if rep.verdict == "FAIL":
        click.echo("not shown: the bundle failed verification, so its report and figures are not the data's", err=True)
        return
    files = rep.files  # the bytes verified, never a second read of a file that may have changed since
    if show_report:
        click.echo("\n---- REPORT.md (verified: the verifier renders the same bytes from the records) ----\n")
        click.echo(_rendered_markdown(_terminal_text(files.get("data/REPORT.md", b""))))
        if any(p.startswith("renderings/") for p in files):
            click.echo("(its figures link to renderings/, outside the digest: their data are verified, their pixels "
                       "only with --check-renderings)")
        if "summary.txt" in files:
            click.echo("---- summary.txt (five lines for a post; the verifier writes the same) ----")
            click.echo(_terminal_text(files["summary.txt"]), nl=False)
    if plots_dir:
        from kbrepro.bundle import plots as plots_mod
        from kbrepro.harness import jsonio

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
                   f"(matplotlib {plots_mod.renderer_versions()['matplotlib']})")


def _rendered_markdown(text: str) -> str:
    """REPORT.md rendered for reading (rich's Markdown: headings, tables laid out, entities
    decoded, HTML blocks such as ``<details>`` left out, links never made terminal hyperlinks):
    in colour at the terminal's width on a terminal, plain text 120 columns wide otherwise
    (piped or redirected). Every line's trailing blanks cut."""
    import io
    import shutil

    from rich.console import Console
    from rich.markdown import Markdown

    tty = sys.stdout.isatty()
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=tty, color_system="standard" if tty else None, no_color=not tty,
                      width=shutil.get_terminal_size((120, 40)).columns if tty else 120, emoji=False, highlight=False)
    console.print(Markdown(text, hyperlinks=False))
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines())


def _terminal_text(raw: bytes) -> str:
    """``raw`` as UTF-8 text for a terminal: control characters other than newline and tab
    (escape sequences, carriage returns) and bidi controls shown as U+FFFD, never sent."""
    import unicodedata

    text = raw.decode("utf-8", "replace")
    return "".join(c if c in "\n\t" or (unicodedata.category(c) not in ("Cc", "Cf") and c != "\x7f") else "\ufffd"
                   for c in text)


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


if __name__ == "__main__":
    from kbrepro.process import run_main

    run_main(main)
