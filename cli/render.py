"""Verification results as terminal lines (DESIGN.md section 2, ``cli/render.py``): the tiers
and their problems, the VERDICT line, REPORT.md laid out for a terminal. Every string that comes
from a bundle goes through the one inertness rule (:func:`kbrepro.inert.terminal`) first."""
from __future__ import annotations

import re
import sys
import unicodedata

import click

from kbrepro.inert import terminal

#: a sha256 digest, shown whole in a problem's expected/found (other values are cut to 60 characters)
_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")


def short(v, n: int = 60) -> str:
    """``v`` as printable ASCII for the terminal (the one inertness rule), cut to ``n``."""
    return terminal(v, n)


def claims_tail(rep) -> str:
    """What the VERDICT line adds about the claims the verifier evaluated again: how many hold
    and which do not (a PASS says the bundle is genuine, not that every claim holds)."""
    verdicts = {k: v for t in rep.tiers if t.status == "PASS" for k, v in (t.details.get("verdicts") or {}).items()}
    if rep.verdict == "FAIL" or not verdicts:
        return ""
    held = sum(v == "holds" for v in verdicts.values())
    other: dict[str, list[str]] = {}
    for k, v in verdicts.items():
        if v != "holds":
            other.setdefault(v, []).append(short(k, 32))
    return (f": {held} of {len(verdicts)} claim{'s' if len(verdicts) != 1 else ''} hold"
            + "".join(f"; {v}: {', '.join(ids)}" for v, ids in sorted(other.items())))


def print_report(rep, verbose: bool) -> None:
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
        click.echo(f"{t.number} {t.name:<11} {t.status:<5} {t.seconds:6.2f}s  {extra}".rstrip())
        for p in t.problems[: 40 if not verbose else None]:
            where = p.file or ""
            if p.path:
                where += f" {p.path}"
            line = f"    - {where}: {p.message}"
            if p.expected is not None or p.found is not None:
                n = 200 if any(_HEX_DIGEST.fullmatch(str(v)) for v in (p.expected, p.found)) else 60
                line += f" (expected {short(p.expected, n)}, found {short(p.found, n)})"
            click.echo(line)
        if len(t.problems) > 40 and not verbose:
            click.echo(f"    ... {len(t.problems) - 40} more (use --verbose or --json)")
        for n in t.notes:
            click.echo(f"    note: {short(n, 100000)}")
        if t.name == "replay" and t.status != "SKIP" and t.details.get("environment"):
            click.echo("    environment (recorded | here; * can change bits):")
            for r in t.details["environment"]:
                if r["field"] in ("env",) and r["same"]:
                    continue
                mark = "*" if r["bits"] else " "
                diff = "" if r["same"] else "   <- differs"
                click.echo(f"     {mark} {r['field']:<24} {short(r['recorded'], 34):<34} | {short(r['here'], 34)}{diff}")
            click.echo("    claims (recorded | replayed):")
            for c in t.details.get("claims", []):
                click.echo(f"      {short(c['id'], 64):<4} {str(c['recorded']):<15} | {c['replayed']:<15} {short(c['sentence'], 70)}")
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
            click.echo(f"    {short(c['id'], 32):<6} {short(c['verdict'], 16):<15} {short(c['sentence'], 80)}")
    if rep.partial:
        click.echo("not a plain PASS: every check this verifier could make passed, but" if rep.verdict == "PARTIAL"
                   else "besides the failures above, this rests on the author's side, not the verifier's:")
        for r in rep.partial:
            click.echo(f"    - {short(r, 100000)}")
    click.echo(f"VERDICT {rep.verdict} (exit {rep.exit_code}){claims_tail(rep)}")


def rendered_markdown(text: str) -> str:
    """REPORT.md rendered for reading (rich's Markdown: headings, tables laid out, entities
    decoded, HTML blocks such as ``<details>`` left out, links never made terminal hyperlinks):
    in colour at the terminal's width on a terminal, plain ASCII-framed text 120 columns wide
    otherwise (piped or redirected). Every line's trailing blanks cut."""
    import io
    import shutil

    from rich import box
    from rich.console import Console
    from rich.markdown import Markdown, TableElement
    from rich.table import Table
    from rich.text import Text

    class _FoldingTable(TableElement):
        # rich's own table cuts a word longer than its column with an ellipsis
        # (nvrtc_ftz_tru...); a report's names and numbers are folded onto the next line instead
        def __rich_console__(self, console, options):
            heads = [c.content for c in (self.header.row.cells if self.header is not None and self.header.row is not None
                                         else ())]
            rows = [[c.content for c in row.cells] for row in (self.body.rows if self.body is not None else ())]
            cols = [[heads[i], *(r[i] for r in rows if i < len(r))] for i in range(len(heads))]
            text = [[getattr(c, "plain", str(c)) for c in col] for col in cols]
            least = [max((len(w) for x in col for w in x.split()), default=1) for col in text]  # the longest word
            most = [max((len(x) for x in col), default=1) for col in text]  # a cell on one line
            room = options.max_width - 3 * len(heads)  # (each column's padding and rule)
            if heads and sum(least) > room:
                # the words cannot stand side by side (a narrow terminal, many columns): one row
                # after another, each cell under its column's name, never a name cut into pieces
                for row in rows:
                    for head, cell in zip(heads, row):
                        yield Text.assemble((f"{getattr(head, 'plain', head)}: ", "bold"), cell)
                    yield Text("")
                return
            # every column at least its longest word; the room left shared by what each could use
            spare, want = room - sum(least), [m - n for m, n in zip(most, least)]
            widths = [n + (min(w, spare * w // sum(want)) if sum(want) else 0) for n, w in zip(least, want)]
            table = Table(box=box.SIMPLE_HEAVY)
            for head, width in zip(heads, widths):
                table.add_column(head, overflow="fold", width=width)
            for row in rows:
                table.add_row(*row)
            yield table

    class _Markdown(Markdown):
        elements = {**Markdown.elements, "table_open": _FoldingTable}

    tty = sys.stdout.isatty()
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=tty, color_system="standard" if tty else None, no_color=not tty,
                      width=shutil.get_terminal_size((120, 40)).columns if tty else 120, emoji=False, highlight=False)
    # REPORT.md breaks lines inside a table cell with <br>, which a terminal table cannot show
    console.print(_Markdown(re.sub(r"<br\s*/?>", "; ", text, flags=re.IGNORECASE), hyperlinks=False))
    out = buf.getvalue()
    if not tty:  # plain text: the frames in ASCII, the picture mark rich puts before a figure's name dropped
        out = out.translate(_ASCII_FRAMES).replace("\U0001f306 ", "")
    return "\n".join(line.rstrip() for line in out.splitlines())


def _frame_char(c: str) -> str:
    name = unicodedata.name(c, "")
    horizontal, vertical = "HORIZONTAL" in name, "VERTICAL" in name
    if horizontal and not vertical:
        return "=" if ("HEAVY" in name or "DOUBLE" in name) else "-"
    if vertical and not horizontal:
        return "|"
    return "+"


#: Unicode box-drawing characters (U+2500 to U+257F) to ASCII: - = | +
_ASCII_FRAMES = {cp: _frame_char(chr(cp)) for cp in range(0x2500, 0x2580)}


def terminal_text(raw: bytes) -> str:
    """``raw`` as UTF-8 text for a terminal: control characters other than newline and tab
    (escape sequences, carriage returns) and bidi controls shown as U+FFFD, never sent."""
    import unicodedata

    text = raw.decode("utf-8", "replace")
    return "".join(c if c in "\n\t" or (unicodedata.category(c) not in ("Cc", "Cf") and c != "\x7f") else "\ufffd"
                   for c in text)


__all__ = ["short", "claims_tail", "print_report", "rendered_markdown", "terminal_text"]
