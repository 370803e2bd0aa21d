"""The replay matrix: replay reports from several machines merged into one table a post can link.

``verify_bundle.py X.tar --level replay --json R.json`` on each machine writes a verification
report whose replay tier (6) lists every claim recorded against replayed and this machine's
environment beside the recorded one (study and candidate bundles alike). This module reads
such reports, as untrusted input, and writes, per bundle (by digest), one table: a row per
claim, a column per GPU kind (the GPU name the replaying machine reports), each cell the
verdict(s) replayed there, marked where it differs from the verdict recorded when packed::

    python -m kbrepro.bundle.matrix R1.json R2.json ... --out matrix.md --json matrix.json

Exit codes (the CLI edge, as every entry point): 0 written; 2 usage (no report, a report of
another level, an output that is an input or cannot be written); 3 a report that cannot be
read, is not strict JSON, is not a verification report or is malformed.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from kbrepro import inert as inert_rule, schemas
from kbrepro.errors import UnreadableInputError, UsageError
from kbrepro.harness import jsonio
from kbrepro.cli.edge import EdgeMixin
from kbrepro.paths import check_input_file, check_output_file, refuse_input_as_output

SCHEMA = "kbrepro/replay-matrix"
#: the largest report read (bytes) and the most reports, claims and GPU kinds taken
MAX_REPORT_BYTES = 32 * 1024 * 1024
MAX_REPORTS = 64
MAX_CLAIMS = 2000
VERDICTS = ("holds", "fails", "inconclusive", "not_comparable")
def inert(text, limit: int = 200) -> str:
    """``text`` shown in matrix.md: the one inertness rule (:func:`kbrepro.inert.md`)."""
    return inert_rule.md(text, limit)


@dataclass(frozen=True)
class Replay:
    """One replay report, reduced to what the matrix shows: ``source`` (the report file's
    name, no folder), ``bundle`` (name), ``digest`` (64 hex), ``verdict`` (the report's:
    PASS, PARTIAL, FAIL), ``replay_status`` (tier 6: PASS or FAIL), ``gpu`` (GPU name here),
    ``recorded_gpu`` (GPU name when packed), ``driver`` (driver version here, or None),
    ``claims`` (tuple of ``(id, sentence, recorded verdict, replayed verdict)``)."""

    source: str
    bundle: str
    digest: str
    verdict: str
    replay_status: str
    gpu: str
    recorded_gpu: str
    driver: str | None
    claims: tuple


def _bad(src: str, what: str) -> UnreadableInputError:
    return UnreadableInputError(f"{src}: {what}", "give the JSON report 'verify_bundle.py X.tar --level replay --json "
                                                  "R.json' wrote, unedited")


def _str(v, src, what, limit=400) -> str:
    if not isinstance(v, str) or len(v) > limit:
        raise _bad(src, f"{what} is not a string of at most {limit} characters")
    return v


def parse_report(raw: bytes, src: str) -> Replay:
    """A :class:`Replay` from a report's bytes. Raises UnreadableInputError (exit 3) for
    bytes that are not strict JSON, not a verification report (its schema) or whose replay
    tier is malformed; UsageError (exit 2) for a report without a replay (verified at another
    level, or the replay skipped)."""
    doc = jsonio.loads_strict(raw, src, max_bytes=MAX_REPORT_BYTES)
    if not isinstance(doc, dict) or doc.get("schema") != "kbrepro/verification-report":
        raise _bad(src, "is not a verification report (schema kbrepro/verification-report)")
    problems = schemas.validate(doc, "verification-report")
    if problems:
        raise _bad(src, "is not a valid verification report: " + str(getattr(problems[0], "message", problems[0]))[:200])
    tiers = [t for t in doc["tiers"] if t.get("number") == 6]
    if not tiers or tiers[0]["status"] == "SKIP":
        raise UsageError(f"{src}: holds no replay (level {doc['level']}"
                         + (", replay skipped" if tiers else "") + ")",
                         "verify on a GPU with 'verify_bundle.py X.tar --level replay --json R.json' and give that")
    det = tiers[0].get("details") or {}
    claims, env = det.get("claims"), det.get("environment")
    if not isinstance(claims, list) or not isinstance(env, list) or len(claims) > MAX_CLAIMS:
        raise _bad(src, "its replay tier lists no claims or no environment (a report of an older verifier?)")
    rows = {}
    for r in env:
        if not isinstance(r, dict) or not isinstance(r.get("field"), str):
            raise _bad(src, "an environment row is not an object with a field name")
        rows[r["field"]] = r
    gpu = (rows.get("gpu_name") or {}).get("here")
    rec_gpu = (rows.get("gpu_name") or {}).get("recorded")
    drv = (rows.get("driver_version") or {}).get("here")
    out = []
    for i, c in enumerate(claims):
        if not isinstance(c, dict):
            raise _bad(src, f"claim {i} is not an object")
        cid = _str(c.get("id"), src, f"claim {i}'s id", 64)
        sent = _str(c.get("sentence"), src, f"claim {cid}'s sentence", 2000)
        recd, repl = c.get("recorded"), c.get("replayed")
        for v, what in ((recd, "recorded"), (repl, "replayed")):
            if v is not None and v not in VERDICTS:
                raise _bad(src, f"claim {cid}: the {what} verdict is not one of {', '.join(VERDICTS)}")
        out.append((cid, sent, recd, repl))
    if len({c[0] for c in out}) != len(out):
        raise _bad(src, "lists a claim twice")
    # compared, never believed: the verifier fails its replay tier (and the verdict) on a claim
    # that flips between holds and fails, so a report whose tier passes with such a flip was edited
    flips = [c[0] for c in out if {c[2], c[3]} == {"holds", "fails"}]
    if flips and (tiers[0]["status"] != "FAIL" or doc["verdict"] != "FAIL"):
        raise _bad(src, f"claim {flips[0]} flips between holds and fails on replay, yet its replay tier says "
                        f"{tiers[0]['status']} and its verdict {doc['verdict']} (the report was edited)")
    if tiers[0]["status"] == "FAIL" and doc["verdict"] != "FAIL":
        raise _bad(src, f"its replay tier failed, yet its verdict is {doc['verdict']} (the report was edited)")
    return Replay(source=Path(src).name, bundle=str(doc.get("bundle_name") or "?"), digest=str(doc.get("digest") or "?"),
                  verdict=doc["verdict"], replay_status=tiers[0]["status"],
                  gpu=str(gpu) if isinstance(gpu, str) and gpu else "unknown GPU",
                  recorded_gpu=str(rec_gpu) if isinstance(rec_gpu, str) and rec_gpu else "unknown GPU",
                  driver=str(drv) if isinstance(drv, str) else None, claims=tuple(out))


def build(replays: Sequence[Replay]) -> dict:
    """The matrix document (schema ``kbrepro/replay-matrix``): per bundle (sorted by name,
    digest), its GPU kinds (sorted) with the reports of each (sorted by source) and, per claim
    (in the first report's order, then any others), the recorded verdict and the verdicts
    replayed on each kind. Pure: the same reports in any order give the same document."""
    groups: dict[tuple, list[Replay]] = {}
    for r in replays:
        groups.setdefault((r.bundle, r.digest), []).append(r)
    bundles = []
    for (name, digest), rs in sorted(groups.items()):
        rs = sorted(rs, key=lambda r: (r.gpu, r.source, r.driver or ""))
        kinds = sorted({r.gpu for r in rs})
        order: list[str] = []
        info: dict[str, dict] = {}
        for r in sorted(rs, key=lambda r: r.source):
            for cid, sent, recd, repl in r.claims:
                if cid not in info:
                    order.append(cid)
                    info[cid] = {"id": cid, "sentence": sent, "recorded": recd, "replayed": {k: [] for k in kinds}}
                elif info[cid]["recorded"] != recd:
                    info[cid]["recorded_disagrees"] = True
                info[cid]["replayed"][r.gpu].append(repl)
        for c in info.values():
            c["replayed"] = {k: sorted(v, key=lambda x: (x is None, str(x))) for k, v in c["replayed"].items()}
        bundles.append({"bundle": name, "digest": digest, "recorded_gpu": sorted({r.recorded_gpu for r in rs}),
                        "gpus": [{"kind": k, "reports": [{"source": r.source, "verdict": r.verdict,
                                                          "replay": r.replay_status, "driver": r.driver}
                                                         for r in rs if r.gpu == k]} for k in kinds],
                        "claims": [info[c] for c in order]})
    doc = {"schema": SCHEMA, "schema_version": 1, "bundles": bundles}

    problems = schemas.validate(doc, "replay-matrix")
    if problems:  # the reports were parsed and checked above: this is a defect of this module
        raise AssertionError(f"replay matrix invalid: {problems[0]}")
    return doc


def _cell(recorded, replayed: list) -> str:
    if not replayed:
        return "-"
    counts: dict = {}
    for v in replayed:
        counts[v] = counts.get(v, 0) + 1
    parts = []
    for v, n in counts.items():
        label = "not replayed" if v is None else str(v).replace("_", " ")
        label = f"**{label}**" if v != recorded else label
        parts.append(label + (f" x{n}" if n > 1 else ""))
    return ", ".join(parts)


def render(matrix: Mapping) -> str:
    """The matrix as Markdown: per bundle a heading (name, digest), the GPU kinds and their
    reports, and the table claim x (recorded, each GPU kind); a replayed verdict that differs
    from the recorded one is bold. Every value from a report is made inert (:func:`inert`)."""
    lines = ["# Replay matrix", "",
             "Each bundle's claims, as recorded when it was packed and as replayed by `verify_bundle.py --level "
             "replay` on each GPU kind. **Bold**: the replay's verdict differs from the recorded one; xN: N replays "
             "on that kind gave it.", ""]
    for b in matrix["bundles"]:
        lines += [f"## {inert(b['bundle'], 120)}", "", f"Bundle digest `{inert(b['digest'], 64)}`; recorded on "
                  + ", ".join(inert(g, 80) for g in b["recorded_gpu"]) + ".", ""]
        for g in b["gpus"]:
            reps = "; ".join(f"{inert(r['source'], 80)}: {inert(r['verdict'], 10)}, replay {inert(r['replay'], 10)}"
                             + (f", driver {inert(r['driver'], 40)}" if r["driver"] else "") for r in g["reports"])
            lines.append(f"- {inert(g['kind'], 80)}: {len(g['reports'])} replay(s) ({reps})")
        kinds = [g["kind"] for g in b["gpus"]]
        lines += ["", "| claim | sentence | recorded | " + " | ".join(inert(k, 60) for k in kinds) + " |",
                  "|---|---|---|" + "---|" * len(kinds)]
        for c in b["claims"]:
            rec = str(c["recorded"]).replace("_", " ") if c["recorded"] is not None else "-"
            if c.get("recorded_disagrees"):
                rec += " (reports disagree)"
            lines.append(f"| {inert(c['id'], 64)} | {inert(c['sentence'], 200)} | {rec} | "
                         + " | ".join(_cell(c["recorded"], c["replayed"][k]) for k in kinds) + " |")
        lines.append("")
    return "\n".join(lines)


def main_cli():
    import click

    class _Command(EdgeMixin, click.Command):
        pass

    @click.command(cls=_Command, context_settings={"help_option_names": ["-h", "--help"]})
    @click.argument("reports", nargs=-1, type=click.Path())
    @click.option("--out", type=click.Path(), default=None, help="the Markdown table [default: print it]")
    @click.option("--json", "json_out", type=click.Path(), default=None, help="the matrix as JSON")
    def main(reports, out, json_out):
        """Merge replay reports (verify_bundle.py --level replay --json) into one table: GPU kind x claim."""
        if not reports:
            raise UsageError("no report given", "python -m kbrepro.bundle.matrix R1.json R2.json --out matrix.md")
        if len(reports) > MAX_REPORTS:
            raise UsageError(f"{len(reports)} reports, more than {MAX_REPORTS}", "merge fewer at once")
        if out and json_out and Path(out).absolute() == Path(json_out).absolute():
            raise UsageError("--out and --json are the same file", "give two paths")
        for r in reports:
            check_input_file(r, "REPORT")
        for o, opt in ((out, "--out"), (json_out, "--json")):
            if o:
                check_output_file(o, opt)
                refuse_input_as_output(o, list(reports), opt)
        replays = []
        seen_bytes: dict[str, str] = {}
        seen_names: dict[str, str] = {}
        for r in reports:
            try:
                raw = Path(r).read_bytes()
            except OSError as exc:
                raise UnreadableInputError(f"cannot read {r}: {exc.strerror}", "check the path") from exc
            # one replay counts once: the same report twice (or a copy of it) would read as
            # "x2, two replays agreed"; and sources are named by file name only
            import hashlib

            digest = hashlib.sha256(raw).hexdigest()
            if digest in seen_bytes:
                raise UsageError(f"{r} is the same report as {seen_bytes[digest]} (the same bytes): one replay counts "
                                 "once", "give each machine's report once")
            name = Path(r).name
            if name in seen_names:
                raise UsageError(f"{r} and {seen_names[name]} have one file name, and the matrix names its sources by "
                                 "file name", "rename one, e.g. after its machine")
            seen_bytes[digest], seen_names[name] = str(r), str(r)
            replays.append(parse_report(raw, str(r)))
        matrix = build(replays)
        md = render(matrix)
        if json_out:
            jsonio.write_json(Path(json_out), matrix)
        if out:
            jsonio.atomic_write_bytes(Path(out), md.encode())
            click.echo(f"matrix:  {out} ({sum(len(b['claims']) for b in matrix['bundles'])} claims x "
                       f"{sum(len(b['gpus']) for b in matrix['bundles'])} GPU kind(s), {len(replays)} report(s))")
        else:
            click.echo(md, nl=False)
        if json_out:
            click.echo(f"json:    {json_out}")

    return main


if __name__ == "__main__":
    from kbrepro.process import run_main

    run_main(main_cli())


__all__ = ["Replay", "parse_report", "build", "render", "inert", "SCHEMA"]
