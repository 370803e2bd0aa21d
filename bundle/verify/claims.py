"""Tier 5 of a study bundle: claims judged by the verifier's own spec (the study's, for a study
it ships), claims.json compared with the verifier's evaluation in full, REPORT.md compared byte
for byte with the report the verifier renders from the records (with the author's sections,
which must be inert), and a signed bundle's statements.
"""
from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from typing import Mapping

from kbrepro.bundle import pack
from kbrepro.bundle import claims as claims_mod
from kbrepro.bundle import report as report_mod
from kbrepro.harness import jsonio
from kbrepro.errors import ReproError
from kbrepro.bundle.verify.core import Bundle, MAX_SHOWN_CHARS, Tier, json_diffs, safe_text
from kbrepro.bundle.verify.described import statements_check
from kbrepro.bundle.verify.layout import figures


def _compare_specs(own: Mapping, theirs: Mapping, rel: str, t: Tier, b: Bundle) -> dict:
    """The spec that judges the bundle when the bundled claims spec is not byte-identical to
    the verifier's own: every claim the verifier defines must be defined identically (else a
    problem), and is judged by the verifier's definition; claims only the bundle defines are
    the author's (the result becomes partial). Returns the judging spec, claims in the
    bundled order followed by any the bundle left out."""
    if theirs.get("study") != own.get("study"):
        t.fail(rel, f"the claims spec is for study {safe_text(theirs.get('study'))!r}; this verifier's claims for "
               f"this study are for {own.get('study')!r}", expected=own.get("study"), found=theirs.get("study"))
    if theirs.get("bootstrap") != own.get("bootstrap"):
        t.fail(rel, "the bootstrap settings differ from this verifier's spec", path="$.bootstrap",
               expected=own.get("bootstrap"), found=theirs.get("bootstrap"))
    ours = {c["id"]: c for c in own["claims"]}
    mine = {c["id"]: c for c in theirs["claims"]}
    for cid, c in ours.items():
        th = mine.get(cid)
        if th is None:
            t.fail(rel, f"claim {cid} of this verifier's spec is missing from the bundle; the verifier judges it "
                   "anyway")
        elif th != c:
            fields = sorted(k for k in set(th) | set(c) if th.get(k) != c.get(k))
            t.fail(rel, f"claim {cid} is defined differently from this verifier's spec (fields: {', '.join(fields)}); "
                   "it is judged by the verifier's definition")
    extra = [c["id"] for c in theirs["claims"] if c["id"] not in ours]
    if extra:
        b.partial.append(f"claim{'s' if len(extra) > 1 else ''} {', '.join(safe_text(x) for x in extra[:20])} "
                         f"{'are' if len(extra) > 1 else 'is'} the author's definition{'s' if len(extra) > 1 else ''}, "
                         "not this verifier's: shown as the author's")
    judged = [ours.get(c["id"], c) for c in theirs["claims"]] + [c for c in own["claims"] if c["id"] not in mine]
    return {**own, "claims": judged}


def claims_check(b: Bundle, t: Tier) -> None:
    """Claims judged by the verifier's own spec (the study's, for a study it ships), the
    recorded claims.json compared with the recomputation in full, and REPORT.md compared
    byte for byte with the report the verifier renders from the records."""
    spec_ref = b.meta.get("claims", {})
    rel = f"data/{spec_ref.get('file')}"
    raw = b.files.get(rel)
    if raw is None:
        t.fail(rel, "claims spec missing")
        return
    got = hashlib.sha256(raw).hexdigest()
    if spec_ref.get("sha256") != got:
        t.fail(rel, "claims spec differs from the sha256 bundle.json records", expected=spec_ref.get("sha256"), found=got)
    own_claims = b.study_files.get(b.study.claims_file) if b.study is not None else None
    if own_claims is not None and raw != own_claims:
        if b.trusted is None:
            b.partial.append(f"the claims evaluated ({safe_text(spec_ref.get('file'))}) are not the study folder's "
                             f"{safe_text(b.study.claims_file)}: the author chose them when packing")
        else:
            t.notes.append("the claims spec packed is not the study's own claims file; the verifier judges with its own")
    recorded = b.documents.get("claims") or {}
    if (recorded.get("spec") or {}).get("sha256") != got:
        t.fail("data/claims.json", "claims.json was evaluated from another claims spec",
               expected=got, found=(recorded.get("spec") or {}).get("sha256"))
    try:
        theirs = claims_mod.parse_spec(raw, rel)
    except ReproError as exc:
        t.fail(rel, exc.message)
        theirs = None
    if b.trusted is not None:
        own = claims_mod.parse_spec(b.trusted.claims_raw, "the verifier's claims spec")
        judge = own if theirs is None or raw == b.trusted.claims_raw else _compare_specs(own, theirs, rel, t, b)
        t.details["judged_by"] = "verifier"
    elif theirs is not None:
        judge = theirs
        t.details["judged_by"] = "author"
    else:
        return
    docs = {n: d for n, d in b.documents.items() if n != "claims"}
    try:
        expected = claims_mod.evaluate(judge, docs, source="recorded")
        expected["spec"] = {"file": spec_ref.get("file"), "sha256": got}
        claims_text = jsonio.dumps(expected)  # written once, compared and read back below
    except ReproError as exc:
        t.fail(rel, exc.message)
        return
    except (ValueError, TypeError, OverflowError) as exc:  # a value JSON cannot hold (the packer's too)
        t.fail(rel, f"the claims cannot be evaluated to a claims.json: {type(exc).__name__}: {safe_text(exc)}")
        return
    for msg in claims_mod.compare_verdicts(recorded, expected):
        t.fail("data/claims.json", msg)
    raw_claims = b.files.get("data/claims.json", b"")
    if claims_text.encode("ascii") != raw_claims:
        diffs = json_diffs(recorded, expected)
        if not diffs:
            t.fail("data/claims.json", "claims.json is not in the canonical form the packer writes")
        for path, a, e in diffs:
            t.fail("data/claims.json", "differs from the verifier's evaluation of the data", path=path,
                   expected=e, found=a)
    own_ids = {c["id"] for c in (claims_mod.parse_spec(b.trusted.claims_raw)["claims"] if b.trusted else [])}
    verdicts = {c["id"]: c["verdict"] for c in expected["claims"]}
    t.details["verdicts"] = verdicts
    t.details["author_claims"] = [{"id": c["id"], "sentence": c["sentence"], "verdict": c["verdict"],
                                   "definition": next((x for x in (theirs or {}).get("claims", []) if x["id"] == c["id"]),
                                                      None)}
                                  for c in expected["claims"] if c["id"] not in own_ids]
    if b.trusted is None and expected["claims"]:
        b.partial.append("every claim is judged by the author's definitions (shown as the author's)")
    report = b.files.get("data/REPORT.md")
    if report is None:
        t.fail("data/REPORT.md", "the bundle has no REPORT.md")
    else:
        claims_now = json.loads(claims_text)
        # claims the bundle's spec adds to the study's own are marked as the author's (the
        # packer marks those its --claims added to the study folder's claims file)
        own_ids = claims_mod.own_ids(raw, b.trusted.claims_raw if b.trusted is not None else own_claims)
        got = b.files.get(pack.SUMMARY)
        if got is not None and got != report_mod.post_summary(b.meta, docs, claims_now, b.digest, own_ids).encode():
            t.fail(pack.SUMMARY, "is not the five-line summary this verifier writes from the records and the digest")
        figs = figures({**docs, "claims": claims_now})
        plots = sorted(figs)
        for n, d in figs.items():
            if n.startswith("claim_") and b.files.get(f"data/plots/{n}.json") != jsonio.dumps(d).encode():
                t.fail(f"data/plots/{n}.json", "is not the figure data of the claims this verifier evaluates")
        try:
            if b.binding is not None:
                sections = list(b.binding.report_sections(b.own_study.doc, docs))
                want = report_mod.render(b.meta, docs, claims_now, plots, sections, own_ids).encode("utf-8")
            else:
                want = author_sections_report(
                    b, t, report, report_mod.render(b.meta, docs, claims_now, plots, [], own_ids).encode("utf-8"),
                    report_mod.render(b.meta, docs, claims_now, plots, [_SECTIONS_MARK], own_ids).encode("utf-8"))
        except Exception as exc:  # the renderer meets documents that passed every check before it
            t.fail("data/REPORT.md", f"the verifier cannot render a report from these records: "
                   f"{type(exc).__name__}: {exc}")
            want = None
        if want is not None and want != report:
            got_lines, want_lines = report.split(b"\n"), want.split(b"\n")
            n = next((i for i, (x, y) in enumerate(zip(got_lines, want_lines)) if x != y),
                     min(len(got_lines), len(want_lines)))
            a = (want_lines[n] if n < len(want_lines) else b"(end of file)").decode("utf-8", "replace")
            g = (got_lines[n] if n < len(got_lines) else b"(end of file)").decode("utf-8", "replace")
            col = next((i for i, (x, y) in enumerate(zip(a, g)) if x != y), min(len(a), len(g)))
            start = max(0, col - 24)
            t.fail("data/REPORT.md", f"REPORT.md differs from the report the verifier renders from the records "
                   f"(first at line {n + 1}, column {col + 1})",
                   expected=("..." if start else "") + a[start:start + 120],
                   found=("..." if start else "") + g[start:start + 120])
    t.details["recomputed"] = expected
    statements_check(b, t, docs, expected)


#: the most characters of a binding's report sections accepted from a study the verifier does not ship
MAX_AUTHOR_SECTIONS = 64 * 1024


#: where the study's own sections go in a report the verifier renders for a study it does not ship
_SECTIONS_MARK = "\x00study-sections\x00"


#: what the author's sections of REPORT.md may not hold: any '<', '>' or square bracket (HTML,
#: links, images, link reference definitions that would turn bracketed text of the verifier's
#: own sections into links), entities, code fences (which would swallow what follows), any
#: URL scheme, 'www.' and '@' (GFM autolinks); control and bidi characters are refused apart.
#: Tables, headings, emphasis and inline code are allowed.
_AUTHOR_ACTIVE = re.compile(r"[<>\[\]@]|&(#|[A-Za-z][A-Za-z0-9]*;)|```|~~~|[A-Za-z][A-Za-z0-9+.-]*:/|www\.",
                            re.IGNORECASE)


def author_sections_report(b: Bundle, t: Tier, report: bytes, bare: bytes, framed: bytes) -> bytes:
    """For a study the verifier does not ship, its binding's report sections cannot be
    re-rendered without running the author's code: every other byte of REPORT.md is the
    verifier's rendering (``framed`` holds :data:`_SECTIONS_MARK` where the sections go),
    and the author's sections between them must be inert Markdown. ``bare``: the rendering
    without sections. Returns the bytes REPORT.md must equal (the bundle's own sections in
    place when they pass)."""
    head, _, tail = framed.partition(_SECTIONS_MARK.encode())
    if report == bare:
        return bare
    if not (report.startswith(head) and report.endswith(tail) and len(report) > len(head) + len(tail)):
        return bare
    try:
        middle = report[len(head):len(report) - len(tail)].decode("utf-8")
    except UnicodeDecodeError:
        t.fail("data/REPORT.md", "the study's own report sections (the author's) are not valid UTF-8")
        return report
    if len(middle) > MAX_AUTHOR_SECTIONS:
        t.fail("data/REPORT.md", f"the study's own report sections (the author's) hold {len(middle)} characters, more "
               f"than the {MAX_AUTHOR_SECTIONS} this verifier shows")
        return report
    for i, line in enumerate(middle.split("\n")):
        bad = next((c for c in line if unicodedata.category(c)[0] == "C" or unicodedata.category(c) in ("Zl", "Zp")),
                   None)
        m = _AUTHOR_ACTIVE.search(line)
        if bad is not None or m is not None or len(line) > MAX_SHOWN_CHARS:
            t.fail("data/REPORT.md", "the study's own report sections (the author's) hold "
                   + (f"a control character (U+{ord(bad):04X})" if bad is not None else
                      f"active Markdown/HTML ({m.group(0)!r})" if m is not None else "an overlong line"),
                   found=line[:120])
            return report
    b.partial.append("REPORT.md's study sections (after the timings) are the author's rendering, checked to be "
                     "inert, not re-derived")
    return report
