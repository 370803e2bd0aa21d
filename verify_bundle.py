"""verify_bundle.py: check a bundle archive as untrusted input; replay it where a GPU is.

    python verify_bundle.py BUNDLE.tar                  # static tiers, then replay if a GPU is present
    python verify_bundle.py BUNDLE.tar --level fast     # archive and manifest only
    python verify_bundle.py BUNDLE.tar --level static   # no replay
    python verify_bundle.py BUNDLE.tar --level replay --profile quick --json report.json

Exit codes: 0 every requested tier passed; 1 verification failed; 2 usage error;
3 archive unreadable, unsafe or of an unknown format version; 4 replay impossible here.
This file is the only place where errors become exit codes.
"""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import click

if os.environ.get("CUDA_CACHE_DISABLE") != "1":
    os.environ["CUDA_CACHE_DISABLE"] = "1"

from kbrepro.kernels.errors import ReproError  # noqa: E402


def _short(v, n: int = 60) -> str:
    s = str(v)
    return s if len(s) <= n else s[: n - 3] + "..."


def _print_report(rep, verbose: bool) -> None:
    click.echo(f"bundle  {rep.bundle_name or '?'}  ({rep.archive})")
    if rep.digest:
        man = next((t for t in rep.tiers if t.name == "manifest"), None)
        broken = man is not None and any("digest differs" not in p["message"] for p in man.problems)
        click.echo(f"digest  {rep.digest}" + ("  (of the archive's tag manifest; its manifests do not match the "
                                              "payload, so it identifies nothing)" if broken else ""))
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
            extra = "KernelBench pin, kernel source, cubins, FTZ evidence"
        click.echo(f"{t.number} {t.name:<11} {t.status:<5} {t.seconds:6.2f}s  {extra}")
        for p in t.problems[: 40 if not verbose else None]:
            where = p.get("file") or ""
            if p.get("path"):
                where += f" {p['path']}"
            line = f"    - {where}: {p['message']}"
            if "expected" in p or "found" in p:
                n = 200 if "digest" in p["message"] or "sha256" in p["message"] else 60
                line += f" (expected {_short(p.get('expected'), n)}, found {_short(p.get('found'), n)})"
            click.echo(line)
        if len(t.problems) > 40 and not verbose:
            click.echo(f"    ... {len(t.problems) - 40} more (use --verbose or --json)")
        for n in t.notes:
            click.echo(f"    note: {n}")
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
                click.echo(f"      {c['id']:<4} {str(c['recorded']):<15} | {c['replayed']:<15} {_short(c['sentence'], 70)}")
            tr = t.details.get("timing_ratios", [])
            if tr:
                click.echo(f"    timing ratios: {len(tr) - t.details.get('timing_ratios_outside_tolerance', 0)}/{len(tr)} "
                           "within tolerance of the recording")
            click.echo(f"    cases compared: {t.details.get('cases_compared')}; cubins: "
                       + ", ".join(f"{c['variant']} {'same' if c['same'] else ('not comparable' if c['same'] is None else 'DIFFERENT')}"
                                   for c in t.details.get("cubins", [])))
    click.echo(f"VERDICT {rep.verdict} (exit {rep.exit_code})")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("archive", type=click.Path(dir_okay=False))
@click.option("--level", type=click.Choice(["fast", "static", "replay", "auto"]), default="auto", show_default=True,
              help="fast: archive+manifest; static: + documents, provenance, claims; replay: + rerun on this GPU; "
                   "auto: static, then replay if a GPU is present")
@click.option("--profile", default=None, help="replay profile [default: the bundle's]; 'quick' replays in seconds")
@click.option("--json", "json_out", type=click.Path(dir_okay=False), default=None, help="write the verification report")
@click.option("--expect-digest", default=None, help="fail unless the bundle digest is this sha256")
@click.option("--trust-bundle-code", is_flag=True, help="let replay execute a kernel source this verifier does not know")
@click.option("--kernelbench", type=click.Path(file_okay=False), default=None, help="KernelBench checkout for replay")
@click.option("--ratio-tolerance", type=click.FloatRange(min=0.0, max=10.0), default=0.05, show_default=True,
              help="relative tolerance when comparing replayed timing ratios with the recorded ones")
@click.option("--keep-extracted", type=click.Path(file_okay=False), default=None,
              help="extract into this empty folder and keep it [default: a temporary folder, removed]")
@click.option("-v", "--verbose", is_flag=True, help="list every problem")
def main(archive, level, profile, json_out, expect_digest, trust_bundle_code, kernelbench, ratio_tolerance,
         keep_extracted, verbose) -> None:
    """Verify ARCHIVE tier by tier and print one line per tier and a final verdict."""
    from kbrepro.bundle.verify import verify_archive
    from kbrepro.harness import jsonio

    if expect_digest is not None:
        expect_digest = expect_digest.strip().lower()
        if expect_digest.startswith("sha256:"):
            expect_digest = expect_digest[len("sha256:"):]
        if not re.fullmatch(r"[0-9a-f]{64}", expect_digest):
            raise click.BadParameter("a bundle digest is 64 hexadecimal characters (sha256)",
                                     param_hint="--expect-digest")
    if keep_extracted and level == "fast":
        raise click.UsageError("--keep-extracted has no effect at --level fast (nothing is extracted)")

    def progress(ev):
        click.echo(f"    [{ev['elapsed_s']:6.1f}s] replay {ev['stage']} {ev['event']} {ev['message']}", err=True)

    try:
        rep = verify_archive(Path(archive), level=level, profile=profile, trust=trust_bundle_code,
                             kernelbench=kernelbench, ratio_tolerance=ratio_tolerance, expect_digest=expect_digest,
                             keep_extracted=Path(keep_extracted) if keep_extracted else None, progress=progress)
    except ReproError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    _print_report(rep, verbose)
    if json_out:
        doc = rep.to_doc()
        for t in doc["tiers"]:
            t["details"].pop("recomputed", None)
        jsonio.write_json(Path(json_out), doc)
    sys.exit(rep.exit_code)


if __name__ == "__main__":
    main()
