"""Predicate audit of historical result files: could any saved classification change when
the reference-scaled (legacy) check is replaced by the official, candidate-scaled
``torch.allclose(reference, candidate, atol, rtol)``?

    kbrepro-audit FILE_OR_DIR [...] [--json report.json]
    python -m kbrepro.bundle.audit ../shared/data/h200-seed-run

Reads our result documents (``correctness.json`` and a study's own documents), an author's
original files (the formats a shipped study's importer reads) and bundle archives
(``.tar``/``.tar.gz``, read without extraction). For every saved finite case it reports the worst ratio to the
allowance under each predicate, how close it is to the threshold 1, and whether the
classification could change.

What can be concluded where a file kept only the maximum ratio (the post's format): the
rule of :func:`harness.checks.legacy_margin_verdict` bounds the official ratio by the saved
legacy one, so a case whose worst legacy ratio is at most 1/(1+rtol) passes under both,
and one above 1/(1-rtol) fails under both; in between, the summary cannot decide, and the
audit says so. Non-finite elements are outside any ratio: the legacy helper counts a NaN
pair as equal, the official predicate never does, so an input that holds NaN passes the
legacy check and fails the official one whatever the ratios say; the audit lists such
cases separately instead of folding them into the margin statement.
"""
from __future__ import annotations

if __name__ == "__main__":  # Ctrl-C while the imports below run: one line, exit 130
    from kbrepro.process import guard_early_interrupt

    guard_early_interrupt()

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from kbrepro.bundle.validate import walk_objects
from kbrepro.harness import jsonio
from kbrepro.harness.checks import Tolerance, legacy_margin_verdict
from kbrepro.errors import InputPathError, OutputPathError, ReproError, UnreadableInputError
from kbrepro.cli.edge import EdgeMixin
from kbrepro.paths import check_input_dir, check_input_file, check_output_file, refuse_input_as_output
from kbrepro.bundle.archive import read_archive
from kbrepro.harness.study import find_study, load_study, registry
from kbrepro.process import work_done

DEFAULT_TOL = Tolerance(1e-4, 1e-4)


@dataclass
class Case:
    file: str
    path: str
    legacy_pass: bool | None
    legacy_ratio: float | None
    official_pass: bool | None
    official_ratio: float | None
    official_source: str  # "recorded", "derived", "undecidable"
    could_change: bool | None
    nan_input: bool
    reason: str


@dataclass
class FileAudit:
    file: str
    format: str
    cases: list[Case] = field(default_factory=list)


def _num(v) -> float | None:
    try:
        return jsonio.dec_float(v) if v is not None else None
    except (KeyError, ValueError, TypeError):
        return None


_MARKERS: tuple[str, ...] | None = None


def _nan_markers() -> tuple[str, ...]:
    """JSON-path fragments of records whose inputs hold NaN or infinities, as the shipped
    studies' bindings name them (``StudyBinding.nan_input_paths``)."""
    global _MARKERS
    if _MARKERS is None:
        found: list[str] = []
        for name in sorted(registry()):
            try:
                found += list(getattr(load_study(find_study(name)).binding(), "nan_input_paths", ()) or ())
            except ReproError:
                continue
        _MARKERS = tuple(dict.fromkeys(found))
    return _MARKERS


def _nan_context(path: str) -> bool:
    return any(s in path for s in _nan_markers())


def audit_document(doc: Any, file: str, tol: Tolerance = DEFAULT_TOL) -> FileAudit:
    """Audit one parsed document (ours or the post's)."""
    ours = isinstance(doc, dict) and str(doc.get("schema", "")).startswith("kbrepro/")
    fa = FileAudit(file=file, format=doc.get("schema") if ours else "post format")
    for path, d in walk_objects(doc):
        if ours and "official" in d and "legacy" in d and "element_count" in d:
            off, leg = d.get("official") or {}, d.get("legacy") or {}
            nan_input = bool((d.get("nonfinite") or {}).get("reference_nan")) or (
                not off and "imported" in d and _nan_context(path))
            orat, lrat = _num(off.get("worst_ratio")), _num(leg.get("worst_ratio"))
            if off.get("derived_from"):
                src = "derived"
            elif off:
                src = "recorded"
            else:
                src = "undecidable"
            change = None if not off or not leg else (off.get("pass") != leg.get("pass"))
            fa.cases.append(Case(file, path, leg.get("pass"), lrat, off.get("pass"), orat, src, change, nan_input,
                                 off.get("derived_from") or ("both predicates recorded" if off and leg else "not recorded")))
        elif not ours and "max_budget_ratio" in d:
            ratio = _num(d.get("max_budget_ratio"))
            max_abs = _num(d.get("max_abs"))
            legacy_pass = d.get("pass")
            nan_input = _nan_context(path) or bool(d.get("bad_special"))
            verdict, why = legacy_margin_verdict(ratio, max_abs, tol)
            if nan_input:
                fa.cases.append(Case(file, path, legacy_pass, ratio, None, None, "undecidable", None, True,
                                     "input holds NaN or non-finite mismatches: the official predicate never counts a "
                                     "NaN pair close, the legacy helper does; ratios cannot settle it"))
                continue
            fa.cases.append(Case(file, path, legacy_pass, ratio, verdict, None,
                                 "derived" if verdict is not None else "undecidable",
                                 None if verdict is None else (verdict != legacy_pass), False, why))
    return fa


def audit_path(p: Path, tol: Tolerance = DEFAULT_TOL) -> list[FileAudit]:
    """Audit a JSON file, a folder of JSON files, or a bundle archive."""
    p = Path(p)
    if p.is_dir():
        out = []
        for f in sorted(p.glob("*.json")):
            out += audit_path(f, tol)
        return out
    if p.name.endswith((".tar", ".tar.gz", ".tgz")):
        contents = read_archive(p)
        if contents.problems:
            raise UnreadableInputError(f"{p.name} is not a safe archive: {contents.problems[0].message}",
                                       "run verify_bundle.py on it first")
        results = {rel: data for rel, data in contents.files.items()
                   if rel.endswith(".json") and rel.startswith("data/results/")}
        originals = {rel: d for rel, d in results.items() if rel.startswith("data/results/originals/")}
        # an imported bundle: audit the post's original files, not their conversion (no double counting)
        chosen = originals or results
        return [audit_document(jsonio.loads_strict(data, rel), f"{p.name}:{rel}", tol)
                for rel, data in sorted(chosen.items())]
    return [audit_document(jsonio.read_json(p), p.name, tol)]


def summarise(files: list[FileAudit]) -> dict:
    cases = [c for f in files for c in f.cases]
    finite = [c for c in cases if not c.nan_input]
    could = [c for c in finite if c.could_change]
    undecidable = [c for c in finite if c.could_change is None]
    margins_leg = [abs(1 - c.legacy_ratio) for c in finite if c.legacy_ratio is not None]
    margins_off = [abs(1 - c.official_ratio) for c in finite if c.official_ratio is not None]
    return {
        "files": len([f for f in files if f.cases]), "cases": len(cases), "finite_cases": len(finite),
        "nan_input_cases": len(cases) - len(finite),
        "saved_legacy_ratios": sum(1 for c in cases if c.legacy_ratio is not None),
        "classification_changes": len(could), "undecidable": len(undecidable),
        "closest_legacy_distance": min(margins_leg) if margins_leg else None,
        "closest_official_distance": min(margins_off) if margins_off else None,
        "changes": [f"{c.file} {c.path}" for c in could],
        "undecidable_cases": [f"{c.file} {c.path}: {c.reason}" for c in undecidable],
    }


class _Command(EdgeMixin, click.Command):
    """Errors, Ctrl-C and unexpected exceptions become one line and an exit code (kbrepro.errors)."""


def _check_inputs(paths) -> list[Path]:
    """Every path given must be a readable file or folder; in a folder, every ``*.json``
    entry must be a readable regular file or folder (a FIFO would block the read).
    Raises InputPathError (3)."""
    import os
    import stat

    out = []
    for raw in paths:
        p = Path(raw)
        try:
            is_dir = stat.S_ISDIR(os.stat(p).st_mode)
        except OSError:
            is_dir = False
        if not is_dir:
            out.append(check_input_file(p, "input"))
            continue
        check_input_dir(p, "input folder")
        try:
            entries = sorted(p.glob("*.json"))
        except OSError as exc:
            raise InputPathError(f"cannot list input folder {p}: {(exc.strerror or '').lower()}",
                                 "check the folder's permissions") from exc
        for e in entries:
            try:
                sub_dir = stat.S_ISDIR(os.stat(e).st_mode)
            except OSError:
                sub_dir = False
            if sub_dir:
                _check_inputs([e])
            else:
                check_input_file(e, "input file", "make it a readable file, or move it out of the folder")
        out.append(p)
    return out


@click.command(cls=_Command, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--atol", type=float, default=1e-4, show_default=True)
@click.option("--rtol", type=float, default=1e-4, show_default=True)
@click.option("--json", "json_out", type=click.Path(), default=None, help="write the audit as JSON")
@click.option("-v", "--verbose", is_flag=True, help="one line per case")
def main(paths, atol, rtol, json_out, verbose) -> None:
    """Audit saved correctness results for classifications that the predicate direction could change."""
    import math

    if not (math.isfinite(atol) and atol >= 0 and math.isfinite(rtol) and 0 <= rtol < 1):
        raise click.UsageError("--atol must be finite and >= 0, --rtol finite and in [0, 1)")

    tol = Tolerance(atol, rtol)
    # inputs (exit 3), then the output (exit 2), before any work
    checked = _check_inputs(paths)
    if json_out:
        check_output_file(json_out, "--json")

        refuse_input_as_output(json_out, list(paths) + [getattr(c, "path", c) for c in checked], "--json")
    files, failed = [], []
    for p in checked:
        try:
            files += audit_path(p, tol)
        except ReproError as exc:
            failed.append(exc)
            click.echo(f"error: {exc}", err=True)
    s = summarise(files)
    if s["cases"] == 0:
        if len(failed) < len(checked):  # what was read held no case (what was not read said why above)
            click.echo("error: no saved correctness cases found in the given files\n  -> give result documents "
                       "(correctness.json or a study's own), the post's original JSON files, or a bundle archive",
                       err=True)
        sys.exit(failed[0].exit_code if failed else 3)
    for f in files:
        if not f.cases:
            continue
        fin = [c for c in f.cases if not c.nan_input]
        lm = min((abs(1 - c.legacy_ratio) for c in fin if c.legacy_ratio is not None), default=None)
        click.echo(f"{f.file:<48} {len(f.cases):5d} cases  closest |1 - legacy ratio| "
                   f"{'n/a' if lm is None else f'{lm:.6g}'}  changes {sum(1 for c in fin if c.could_change)}  "
                   f"undecidable {sum(1 for c in fin if c.could_change is None)}  NaN-input {len(f.cases) - len(fin)}")
        if verbose:
            for c in f.cases:
                click.echo(f"    {c.path}: legacy {c.legacy_pass} ratio {c.legacy_ratio} -> official {c.official_pass} "
                           f"({c.official_source}); {c.reason}")
    click.echo(f"files {s['files']}, cases {s['cases']} ({s['saved_legacy_ratios']} saved legacy ratios), "
               f"finite {s['finite_cases']}: classification changes {s['classification_changes']}, "
               f"undecidable {s['undecidable']}; NaN-input controls {s['nan_input_cases']} (decided by equality, "
               "not by ratios)")
    if s["closest_legacy_distance"] is not None:
        click.echo(f"closest |1 - worst legacy ratio| {s['closest_legacy_distance']:.6g}; a case can change only if its worst "
                   f"legacy ratio lies in (1/(1+rtol), 1/(1-rtol)] = ({1 / (1 + rtol):.6g}, {1 / (1 - rtol):.6g}]")
    if json_out:
        doc = {"schema": "kbrepro/audit-report", "schema_version": 1, "atol": atol, "rtol": rtol, "summary": s,
               "files": [{"file": f.file, "format": f.format, "cases": [c.__dict__ for c in f.cases]} for f in files]}
        for f in doc["files"]:
            for c in f["cases"]:
                for k in ("legacy_ratio", "official_ratio"):
                    c[k] = jsonio.enc_float(c[k])

        work_done()  # the audit is complete: a Ctrl-C from here on does not change its result
        try:
            jsonio.write_json(Path(json_out), doc)
        except OSError as exc:
            raise OutputPathError(f"cannot write --json {json_out}: {(exc.strerror or type(exc).__name__).lower()}; "
                                  "nothing was written", "choose another --json path") from exc
    if failed:
        sys.exit(failed[0].exit_code)


if __name__ == "__main__":
    from kbrepro.process import run_main

    run_main(main)
