"""Figures for a forum post: their data inside the digest, their pixels outside it.

Two steps, so that a quoted digest never depends on the installed matplotlib:

1. :func:`figure_data` (no matplotlib) derives, from the documents and the evaluated claims,
   the numbers each figure draws, as plain JSON: ``claim_<ID>`` (one per timing claim: every
   comparison's median ratio r = t(a) / t(b) and its bootstrap interval, the claim's margin or
   range as r-lines), ``task<T>_rounds`` (per-round times of every arm of the task's blocks)
   and ``bit_identity`` (per variant and task, the largest count of elements that differ in
   bits from PyTorch over the task's cases). The packer writes them as ``data/plots/*.json``,
   inside the payload; the verifier derives them again and compares.
2. :func:`render` (matplotlib, the ``plots`` extra) draws one figure's PNG from its data, at
   :data:`WIDTH_PX` wide (never more than :data:`MAX_WIDTH_PX`), titled, with a legend. The
   packer stores the PNGs under the bag's ``renderings/`` folder, a tag folder that no manifest
   lists, with ``renderings/renderings.json`` (the versions that drew them and the sha256 of
   each PNG and of the data it was drawn from): the digest (sha256 of tagmanifest-sha256.txt)
   is the same with any matplotlib or none.
"""
from __future__ import annotations

import io
import re
import textwrap
from typing import Mapping

from kbrepro.harness import jsonio, stats
from kbrepro.bundle import pack

DPI = 100
WIDTH_PX = 1200
MAX_WIDTH_PX = 1600
NAME_RE = re.compile(r"^(claim_[A-Za-z0-9._-]{1,40}|task-?[0-9]{1,6}_rounds|bit_identity)$")
COLOURS = {"holds": "#2ca02c", "fails": "#d62728", "inconclusive": "#ff7f0e", "not_comparable": "#7f7f7f"}


# ------------------------------------------------------------------------------------ data
def _claim_lines(chk: Mapping) -> list[dict]:
    """The r-values a claim's test is judged against, as labelled vertical lines."""
    t, m = chk.get("test"), float(chk.get("margin") or 0.0)
    lines = [{"r": 1.0, "label": "r = 1 (equal times)", "style": "solid"}]
    if t in ("not_faster", "equivalent") and m > 0:
        lines.append({"r": 1.0 - m, "label": f"margin: r = 1 - {m:g}", "style": "dashed"})
    if t in ("not_slower", "equivalent") and m > 0:
        lines.append({"r": 1.0 + m, "label": f"margin: r = 1 + {m:g}", "style": "dashed"})
    if t == "speedup_within" and chk.get("range"):
        a, b = chk["range"]
        lines.append({"r": 1.0 / b, "label": f"range: speed-up {b:g}x (r = {1 / b:.3g})", "style": "dashed"})
        lines.append({"r": 1.0 / a, "label": f"range: speed-up {a:g}x (r = {1 / a:.3g})", "style": "dashed"})
    return lines


def claim_figures(claims: Mapping | None) -> dict[str, dict]:
    """One figure's data per claim with paired-ratio comparisons (see the module docstring)."""
    out: dict[str, dict] = {}
    for c in (claims or {}).get("claims", []):
        items, lines = [], []
        for chk in c.get("checks", []):
            if chk.get("kind") != "paired_ratio":
                continue
            for ln in _claim_lines(chk):
                if ln not in lines:
                    lines.append(ln)
            for it in chk.get("items", []):
                if it.get("ci_low") is None or it.get("ci_high") is None:
                    continue
                items.append({"label": f"{it['block']}  {it['numerator']} / {chk['denominator']}",
                              "median": it["median_ratio"], "low": it["ci_low"], "high": it["ci_high"],
                              "verdict": it["verdict"], "literal": it.get("literal")})
        if items:
            out[f"claim_{c['id']}"] = {"kind": "claim", "title": f"{c['id']} ({c['verdict']}): {c['sentence']}",
                                       "xlabel": "r = t(a) / t(b), paired per round: median and bootstrap interval "
                                                 "(r < 1: a is faster)",
                                       "items": items, "lines": lines}
    return out


def document_figures(documents: Mapping[str, Mapping]) -> dict[str, dict]:
    """Per-task per-round times and bit identity (see the module docstring)."""
    out: dict[str, dict] = {}
    blocks = (documents.get("timings") or {}).get("blocks", [])
    tasks = sorted({b["task"] for b in blocks if b.get("kind") == "study" and b.get("rounds")
                    and isinstance(b.get("task"), int)})
    for t in tasks:
        panels = []
        for b in blocks:
            if b.get("task") == t and b.get("kind") == "study" and b.get("rounds"):
                shape = "x".join(map(str, b["shape"])) if isinstance(b.get("shape"), list) else "n/a"
                panels.append({"block": b["id"], "shape": shape, "arms": list(b["arms"]),
                               "samples": [stats.arm_samples(b, a) for a in b["arms"]]})
        out[f"task{t}_rounds"] = {"kind": "rounds", "title": f"task {t}: time per invocation of every arm, per round",
                                  "ylabel": "ms per invocation", "panels": panels}
    fp = (documents.get("correctness") or {}).get("full_program") or []
    if fp:
        variants = sorted({v for c in fp for v in c.get("checks", {})})
        ctasks = sorted({c["case"]["task"] for c in fp})
        counts = {}
        for v in variants:
            row = []
            for t in ctasks:
                diff = [int(c["checks"][v]["element_count"]) - int(c["checks"][v]["bit_identical_count"]) for c in fp
                        if c["case"]["task"] == t and v in c["checks"]
                        and isinstance(c["checks"][v].get("element_count"), int)
                        and isinstance(c["checks"][v].get("bit_identical_count"), int)]
                row.append(max(diff) if diff else None)
            counts[v] = row
        out["bit_identity"] = {"kind": "bits", "title": "elements that differ in bits from PyTorch (most over a "
                                                        "task's cases; 0 = bit-identical)",
                               "tasks": ctasks, "variants": variants, "differing": counts}
    return out


def figure_data(documents: Mapping[str, Mapping], claims: Mapping | None) -> dict[str, dict]:
    """Every figure's data by name (:func:`document_figures` and :func:`claim_figures`)."""
    return {**document_figures(documents), **claim_figures(claims)}


# ------------------------------------------------------------------------------- rendering
def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def renderer_versions() -> dict[str, str]:
    """The versions that draw the PNGs (recorded in renderings.json). Raises ImportError
    without matplotlib."""
    import matplotlib
    import numpy

    out = {"matplotlib": matplotlib.__version__, "numpy": numpy.__version__}
    try:
        from matplotlib import ft2font

        out["freetype"] = str(getattr(ft2font, "__freetype_version__", "unknown"))
    except Exception:  # the font library's version is informative only
        out["freetype"] = "unknown"
    return out


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    _pyplot().close(fig)
    return buf.getvalue()


def _wrap(title: str, width: int = 110) -> str:
    return "\n".join(textwrap.wrap(title, width)[:3])


def render(name: str, data: Mapping) -> bytes:
    """The PNG of one figure of :func:`figure_data`, :data:`WIDTH_PX` wide. Raises
    ImportError without matplotlib, ValueError for an unknown figure kind."""
    plt = _pyplot()
    w = WIDTH_PX / DPI
    kind = data.get("kind")
    if kind == "claim":
        items = data["items"]
        fig, ax = plt.subplots(figsize=(w, min(0.32 * len(items) + 1.9, 16)))
        for i, it in enumerate(items):
            col = COLOURS.get(it["verdict"], "#7f7f7f")
            ax.plot([it["low"], it["high"]], [i, i], color=col, lw=3, solid_capstyle="butt")
            ax.plot([it["median"]], [i], "o", color=col, ms=5)
        for ln in data["lines"]:
            ax.axvline(ln["r"], color="black", lw=1.0, ls="-" if ln["style"] == "solid" else "--")
        ax.set_yticks(range(len(items)), [it["label"] for it in items], fontsize=9)
        ax.invert_yaxis()
        ax.set_xlabel(data["xlabel"], fontsize=10)
        from matplotlib.lines import Line2D

        handles = [Line2D([], [], color=COLOURS[v], lw=3, label=f"comparison {v}") for v in
                   dict.fromkeys(it["verdict"] for it in items)]
        handles += [Line2D([], [], color="black", lw=1.0, ls="-" if ln["style"] == "solid" else "--",
                           label=ln["label"]) for ln in data["lines"]]
        ax.legend(handles=handles, fontsize=8, loc="best")
        ax.set_title(_wrap(data["title"]), fontsize=11)
        fig.tight_layout()
        return _png(fig)
    if kind == "rounds":
        panels = data["panels"]
        fig, axes = plt.subplots(1, len(panels), figsize=(w, 4.6), squeeze=False)
        for ax, p in zip(axes[0], panels):
            ax.boxplot(p["samples"], showfliers=True)
            ax.set_xticks(range(1, len(p["arms"]) + 1), p["arms"], rotation=40, ha="right", fontsize=8)
            ax.set_title(f"{p['block']} (input {p['shape']})", fontsize=9)
            ax.set_ylabel(data["ylabel"], fontsize=9)
        fig.suptitle(data["title"] + " (box: quartiles, line: median)", fontsize=11)
        fig.tight_layout()
        return _png(fig)
    if kind == "bits":
        tasks, variants = data["tasks"], data["variants"]
        fig, ax = plt.subplots(figsize=(w, 4.8))
        width = 0.8 / max(len(variants), 1)
        top = max([v for row in data["differing"].values() for v in row if v] or [1])
        for k, v in enumerate(variants):
            xs = [i + k * width for i in range(len(tasks))]
            vals = data["differing"][v]
            ax.bar(xs, [x + 1 if x is not None else 0 for x in vals], width, label=v)
            for x, val in zip(xs, vals):
                ax.annotate("n/a" if val is None else f"{val:,}", (x, (val or 0) + 1), ha="center", va="bottom",
                            fontsize=8)
        ax.set_yscale("log")
        ax.set_ylim(0.8, top * 20 + 10)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(tasks))], [f"task {t}" for t in tasks])
        ax.set_ylabel("differing elements + 1 (log scale)", fontsize=10)
        ax.legend(fontsize=9, title="variant")
        ax.set_title(data["title"], fontsize=11)
        fig.tight_layout()
        return _png(fig)
    raise ValueError(f"unknown figure kind {kind!r}")


#: the tallest figure :func:`render` draws (a claim figure is at most 16 inches high)
MAX_HEIGHT_PX = 16 * DPI
#: the most bytes of one rendering
MAX_PNG_BYTES = 4 * 1024 * 1024
#: the chunks matplotlib's Agg backend writes (without metadata), in this order: IHDR, pHYs
#: (optional), one or more IDAT, IEND
_PNG_SIG = b"\x89PNG\r\n\x1a\n"


def png_problem(png: bytes, inflate: bool = True) -> str | None:
    """Why ``png`` is not a PNG as :func:`render` writes it, or None: the signature, every
    chunk's length and CRC-32 (ISO/IEC 15948 section 5.3), IHDR first (8-bit RGBA or RGB, not
    interlaced, at most :data:`MAX_WIDTH_PX` x :data:`MAX_HEIGHT_PX`), only pHYs and IDAT
    between, IEND last with nothing after it, and the IDAT stream inflating to exactly the
    image's filtered scanlines (height x (1 + width x channels) bytes; inflated with that
    bound, so a compression bomb stops at it). ``inflate`` False skips that last check
    (the chunks and their CRCs are still read): the static verifier's choice, which leaves
    the pixels to ``--check-renderings``."""
    import zlib

    if len(png) > MAX_PNG_BYTES:
        return f"larger than {MAX_PNG_BYTES // (1024 * 1024)} MiB"
    if not png.startswith(_PNG_SIG):
        return "not a PNG (no PNG signature)"
    i, chunks = len(_PNG_SIG), []
    while i < len(png):
        if i + 12 > len(png):
            return "a truncated chunk"
        n = int.from_bytes(png[i:i + 4], "big")
        kind, body = png[i + 4:i + 8], png[i + 8:i + 8 + n]
        if n > len(png) or i + 12 + n > len(png):
            return "a chunk longer than the file"
        if zlib.crc32(kind + body) != int.from_bytes(png[i + 8 + n:i + 12 + n], "big"):
            return f"chunk {kind!r} fails its CRC"
        chunks.append((kind, body))
        i += 12 + n
        if kind == b"IEND":
            break
    if i != len(png):
        return "bytes after the IEND chunk"
    kinds = [k for k, _ in chunks]
    if not kinds or kinds[0] != b"IHDR" or kinds[-1] != b"IEND" or len(chunks[0][1]) != 13 or chunks[-1][1]:
        return "not IHDR first and an empty IEND last"
    middle = kinds[1:-1]
    if middle[:1] == [b"pHYs"]:
        middle = middle[1:]
    if not middle or any(k != b"IDAT" for k in middle):
        return "chunks other than pHYs and IDAT between IHDR and IEND"
    h = chunks[0][1]
    w, ht, depth, colour, comp, filt, lace = (int.from_bytes(h[0:4], "big"), int.from_bytes(h[4:8], "big"),
                                              h[8], h[9], h[10], h[11], h[12])
    if not (0 < w <= MAX_WIDTH_PX and 0 < ht <= MAX_HEIGHT_PX):
        return f"{w} x {ht} px, not within {MAX_WIDTH_PX} x {MAX_HEIGHT_PX}"
    if depth != 8 or colour not in (2, 6) or comp or filt or lace:
        return "not an 8-bit RGB or RGBA image without interlacing"
    if not inflate:
        return None
    want = ht * (1 + w * (4 if colour == 6 else 3))
    d = zlib.decompressobj()
    try:
        raw = d.decompress(b"".join(b for k, b in chunks if k == b"IDAT"), want + 1)
    except zlib.error:
        return "its image data do not inflate"
    if len(raw) != want or not d.eof or d.unconsumed_tail or d.unused_data:
        return f"its image data are not the {want} bytes of its {w} x {ht} scanlines"
    if any(raw[r * (want // ht)] > 4 for r in range(ht)):
        return "a scanline with an unknown filter type"
    return None


def renderings_doc(pngs: Mapping[str, bytes], data: Mapping[str, bytes], renderer: Mapping[str, str]) -> bytes:
    """``renderings.json``, exactly as the packer writes it: the versions that drew the PNGs
    (``renderer``), and for each figure ``n`` of ``pngs`` (name -> PNG bytes) its sha256 and
    size in pixels and the sha256 of ``data[n]``, the bytes of ``data/plots/<n>.json``. The
    verifier rebuilds it from the bundle's PNGs and verified data and compares bytes."""
    entries = []
    for n in sorted(pngs):
        size = png_size(pngs[n])
        entries.append({"file": f"renderings/{n}.png", "sha256": pack.sha256_hex(pngs[n]),
                        "width_px": size[0] if size else None, "height_px": size[1] if size else None,
                        "data": f"data/plots/{n}.json", "data_sha256": pack.sha256_hex(data[n])})
    doc = {"schema": "kbrepro/renderings", "schema_version": 1, "renderer": dict(renderer),
           "note": "drawn from the data files named here (inside the digest); these PNGs are outside it: any "
                   "matplotlib draws the same data, and the bundle's digest does not change",
           "figures": entries}
    return jsonio.dumps(doc).encode()


def png_size(png: bytes) -> tuple[int, int] | None:
    """(width, height) in pixels from a PNG's IHDR chunk, or None if ``png`` is not a PNG."""
    if len(png) < 24 or not png.startswith(b"\x89PNG\r\n\x1a\n") or png[12:16] != b"IHDR":
        return None
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


__all__ = ["figure_data", "claim_figures", "document_figures", "render", "renderer_versions", "png_size",
           "png_problem", "renderings_doc", "MAX_HEIGHT_PX", "MAX_PNG_BYTES",
           "WIDTH_PX", "MAX_WIDTH_PX", "NAME_RE"]
