"""Whether a new run measured the same thing as a committed bundle: claims and timing ratios.

    python benchmarks/ratio_drift.py RECORDED.tar NEW.tar [--tolerance 0.05] [--json out.json]

Reads both bundles with the verifier's own strict archive reader (nothing is extracted),
then compares them exactly as replay does (``bundle.verify.compare.compare_replay``): every timing
ratio of a block both ran (per-round paired ratios to the block's first arm; median and
percentile-bootstrap interval with the recorded claims' bootstrap settings) reproduces when
the two intervals, each widened by ``--tolerance`` (relative), overlap; verdicts and
bit-identity counts must match case by case; and every claim must keep its verdict. This
is the check issue 13 asks of a faster run: the speed-ups (model prefetch, parallel
compilation, cheaper garbage collection) change when the CPU work happens, never what the
timed rounds measure. Exit status 0 when everything reproduces, 1 otherwise.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

DOCS = ("run", "environment", "compile", "witness", "correctness", "timings", "scout", "claims")


def documents(path: Path) -> dict:
    """The result documents of a bundle (``data/results/*.json`` and ``data/claims.json``),
    parsed with the strict JSON reader. Raises click.ClickException on an unreadable archive."""
    from kbrepro.bundle.archive import read_archive
    from kbrepro.harness import jsonio

    a = read_archive(path)
    if a.problems:
        raise click.ClickException(f"{path}: {a.problems[0]['message']}")
    out = {}
    for name in DOCS:
        raw = a.files.get(f"data/results/{name}.json", a.files.get(f"data/{name}.json"))
        if raw is not None:
            out[name] = jsonio.loads_strict(raw)
    return out


@click.command()
@click.argument("recorded", type=click.Path(dir_okay=False, exists=True))
@click.argument("new", type=click.Path(dir_okay=False, exists=True))
@click.option("--tolerance", default=0.05, show_default=True, type=float)
@click.option("--json", "json_out", type=click.Path(), default=None)
def main(recorded, new, tolerance, json_out):
    from kbrepro.bundle.verify.compare import compare_replay

    r, n = documents(Path(recorded)), documents(Path(new))
    boot = r["claims"]["bootstrap"] if "bootstrap" in r.get("claims", {}) else {"level": 0.95, "resamples": 10000,
                                                                                 "seed": 20261201}
    same = r["run"].get("profile") == n["run"].get("profile")
    problems, details = compare_replay(r, n, same_profile=same, ratio_tolerance=tolerance, boot=boot)
    ratios = details["timing_ratios"]
    within = sum(1 for q in ratios if q["within"])
    rv = {c["id"]: c["verdict"] for c in r["claims"]["claims"]}
    nv = {c["id"]: c["verdict"] for c in n["claims"]["claims"]}
    kept = sorted(k for k in rv if nv.get(k) == rv[k])
    moved = sorted(k for k in set(rv) | set(nv) if nv.get(k) != rv.get(k))
    click.echo(f"timing ratios: {within}/{len(ratios)} within the intervals widened by {tolerance:.0%}; "
               f"{details['timing_ratios_excused']} excused")
    for q in ratios:
        if not q["within"]:
            click.echo(f"  {q['block']} {q['ratio']}: {q['recorded']:.4f} -> {q['replayed']:.4f}"
                       f"{' (excused: ' + q['excused'] + ')' if q['excused'] else ''}")
    click.echo(f"cases compared: {details['cases_compared']}")
    click.echo(f"claims: {len(kept)}/{len(rv)} keep their verdict" + (f"; changed: {', '.join(moved)}" if moved else ""))
    click.echo(f"problems: {len(problems)}")
    for p in problems[:20]:
        click.echo(f"  {p['file']} {p.get('path', '')}: {p['message']}")
    if json_out:
        Path(json_out).write_text(json.dumps({"ratios_within": within, "ratios": len(ratios),
                                              "excused": details["timing_ratios_excused"],
                                              "claims_kept": len(kept), "claims": len(rv), "claims_changed": moved,
                                              "problems": problems}, indent=1) + "\n")
    sys.exit(0 if not problems and not moved else 1)


if __name__ == "__main__":
    main()
