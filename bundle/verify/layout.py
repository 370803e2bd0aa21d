"""The bag's files and the renderings (tier 3, and tier 5 with ``--check-renderings``): the bag
holds exactly the files the packer writes for these records, and each PNG of ``renderings/``
is the figure the verifier derives from the checked documents.
"""
from __future__ import annotations

import re
from typing import Mapping

from kbrepro.bundle import pack
from kbrepro.bundle import plots as plots_mod
from kbrepro.bundle.documents import DOC_PATHS
from kbrepro.bundle.facts import CRATE_FILE
from kbrepro.harness import jsonio
from kbrepro.errors import ReproError
from kbrepro.bundle.verify.core import Bundle, STUDY_PREFIX, Tier, judging_lock, safe_text


def layout_check(b: Bundle, t: Tier) -> None:
    """The bag holds exactly the files the packer writes for these records: the documents, the
    binaries the compile records name, the inputs bundle.json names (KernelBench files of the
    study's lock, every file of the study folder, the claims file), the run log, the post's
    originals (imported results only) and the plots the packer renders for these documents
    (PNG). Anything else could be linked from a forum post as if verified."""
    docs = b.documents
    meta = b.meta
    top = b.name
    if top != meta.get("name"):
        t.fail("data/bundle.json", "the archive's top folder is not the bundle's name", path="$.name",
               expected=meta.get("name"), found=top)
    allowed = {"data/bundle.json", "data/claims.json", "data/REPORT.md", "data/logs/run.log"}
    if b.has_crate:
        allowed.add(f"data/{CRATE_FILE}")
    allowed |= {f"data/{DOC_PATHS[n]}" for n in docs if n != "claims"}
    for v in (docs.get("compile") or {}).get("variants", []):
        for key in ("cubin", "cubin_complete", "ptx", "sass"):
            ref = v.get(key)
            if isinstance(ref, dict) and isinstance(ref.get("file"), str):
                allowed.add(f"data/{ref['file']}")
    kb = meta.get("kernelbench") or {}
    allowed.add("data/" + kb.get("lock_file", "inputs/kernelbench/kernelbench.lock.json"))
    allowed |= {f"data/inputs/kernelbench/{rel}" for rel in judging_lock(b).files}
    allowed |= {f"{STUDY_PREFIX}{rel}" for rel in b.study_files}
    for ref in (meta.get("study") or {}, meta.get("claims") or {}):
        if ref.get("file"):
            allowed.add(f"data/{ref['file']}")
    if meta.get("source") == "imported":
        allowed |= {p for p in b.files if p.startswith("data/results/originals/") and p.count("/") == 3}
    # the documents' figures are checked here; the claims' figures in tier 5, against the
    # claims this verifier evaluates (the recorded claims only name the files allowed here)
    want = plots_mod.document_figures({n: d for n, d in docs.items() if n != "claims"})
    figs = figures(docs, t)
    allowed |= {f"data/plots/{n}.json" for n in {**want, **figs}}
    for n, d in want.items():
        got = b.files.get(f"data/plots/{n}.json")
        if got is None:
            t.fail(f"data/plots/{n}.json", "the data of a figure the packer draws for these records is missing")
        elif got != jsonio.dumps(d).encode():
            t.fail(f"data/plots/{n}.json", "is not the figure data this verifier derives from the records")
    for p in sorted(set(b.files) - allowed):
        if p.startswith("data/"):
            t.fail(p, "a payload file the packer does not write for these records (not verified by anything)")
    _renderings(b, t, figs)


def figures(docs: Mapping, t: Tier | None = None) -> dict:
    """The figures' data (:func:`bundle.plots.figure_data`) of the documents and the recorded
    claims, which tier 5 proves are the claims the data give."""
    own = {n: d for n, d in docs.items() if n != "claims"}
    try:
        return plots_mod.figure_data(own, docs.get("claims"))
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        # recorded claims of a shape the evaluator never writes: the claim figures they would
        # name are then files nothing allows
        if t is not None:
            t.fail("data/claims.json", "the recorded claims are not of the form the evaluator writes (their figures "
                   f"cannot be derived: {type(exc).__name__} {safe_text(str(exc), 80)})")
        return plots_mod.document_figures(own)


#: a version string in renderings.json's ``renderer``
_VERSION_RE = re.compile(r"^[0-9A-Za-z][0-9A-Za-z.+_-]{0,39}$")


def _renderings(b: Bundle, t: Tier, figures: Mapping) -> None:
    """The ``renderings/`` tag folder (outside the digest). None at all, or one PNG for every
    figure of these records, each a PNG exactly as the packer's renderer writes them
    (:func:`bundle.plots.png_problem` without inflating: chunks, CRCs, size bounds; the
    image data are inflated with ``--check-renderings``), and ``renderings.json`` byte-identical to the one the packer writes for these PNGs
    and the verified figure data (:func:`bundle.plots.renderings_doc`; the figure data files
    are verified against this verifier's own figures: tier 3 for the documents', tier 5 for
    the claims'). The pixels are compared only with ``--check-renderings``
    (:func:`rendered_again`): drawing them takes seconds."""
    pre = f"{pack.RENDERINGS}/"
    pngs = {p[len(pre):-4]: b.files[p] for p in b.files if p.startswith(pre) and p.endswith(".png")}
    raw = b.files.get(f"{pre}renderings.json")
    if not pngs and raw is None:
        t.notes.append("no renderings in this bundle (packed without matplotlib, or with --no-plots); verify_bundle.py "
                       "X.tar --plots DIR draws the figures from their verified data")
        return
    if raw is None:
        t.fail(f"{pre}renderings.json", "the renderings are not described (renderings.json is missing)")
        return
    try:
        doc = jsonio.loads_strict(raw, "renderings.json")
    except ReproError as exc:
        t.fail(f"{pre}renderings.json", exc.message)
        return
    renderer = doc.get("renderer") if isinstance(doc, dict) else None
    if not isinstance(renderer, dict) or set(renderer) != {"matplotlib", "numpy", "freetype"} or not all(
            isinstance(v, str) and _VERSION_RE.match(v) for v in renderer.values()):
        t.fail(f"{pre}renderings.json", "its renderer is not the three versions the packer records (matplotlib, "
               "numpy, freetype)")
        return
    bad = False
    for n in sorted(set(figures) - set(pngs)):
        t.fail(f"{pre}{n}.png", "missing: a bundle with renderings has one for every figure of its records")
        bad = True
    for n, png in sorted(pngs.items()):
        why = "a rendering of no figure of these records" if n not in figures else \
            plots_mod.png_problem(png, inflate=False)
        if why:
            t.fail(f"{pre}{n}.png", why)
            bad = True
    if bad:
        return
    data = {n: b.files.get(f"data/plots/{n}.json", b"") for n in pngs}
    if raw != plots_mod.renderings_doc(pngs, data, renderer):
        t.fail(f"{pre}renderings.json", "is not the description the packer writes of these PNGs and the data they "
               "were drawn from (sha256, sizes, data files, exact form)")
        return
    b.renderings = (pngs, renderer)
    t.notes.append(f"{len(pngs)} renderings drawn by matplotlib {renderer['matplotlib']}: outside the digest, their "
                   "data are verified; " + ("their pixels are drawn again and compared below (--check-renderings)"
                                            if b.renderings_drawn_again else "their pixels are compared only with "
                                            "--check-renderings (--plots DIR draws them here)"))


def rendered_again(b: Bundle, t: Tier) -> None:
    """``--check-renderings``: every figure drawn again here from its verified data and
    compared byte for byte with the bundle's PNG, where this machine's renderer versions
    (matplotlib, numpy, freetype) are the ones the bundle records (PNG bytes are
    deterministic for one set of versions; another set draws other bytes from the same
    data). A PNG that differs fails; other versions or no matplotlib make the result PARTIAL."""
    if b.renderings is None:
        if any(p.startswith(f"{pack.RENDERINGS}/") for p in b.files):
            b.partial.append("--check-renderings: the renderings failed their checks, so they were not drawn again")
        else:
            t.notes.append("--check-renderings: this bundle has no renderings")
        return
    pngs, renderer = b.renderings
    try:
        here = plots_mod.renderer_versions()
    except ImportError:
        b.partial.append("--check-renderings: matplotlib is not installed here, so the renderings' pixels were not "
                         "compared (pip install matplotlib)")
        return
    if here != renderer:
        b.partial.append("--check-renderings: the renderings were drawn with " + ", ".join(
            f"{k} {renderer[k]}" for k in sorted(renderer)) + "; this machine has " + ", ".join(
            f"{k} {here[k]}" for k in sorted(here)) + ", which draw other bytes: their pixels were not compared")
        return
    for n in sorted(pngs):
        why = plots_mod.png_problem(pngs[n])  # now its image data too
        if why:
            t.fail(f"{pack.RENDERINGS}/{n}.png", why)
        elif plots_mod.render(n, jsonio.loads_strict(b.files[f"data/plots/{n}.json"], n)) != pngs[n]:
            t.fail(f"{pack.RENDERINGS}/{n}.png", f"is not the figure these versions draw from data/plots/{n}.json "
                   "(this verifier drew it again): the picture does not show the verified data")
    if not t.problems:
        t.notes.append(f"--check-renderings: all {len(pngs)} renderings drawn again here from their verified data, "
                       "byte-identical")
        t.details["renderings_compared"] = sorted(pngs)
