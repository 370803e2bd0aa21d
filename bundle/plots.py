"""Plots for REPORT.md (optional: needs matplotlib, the ``plots`` extra).

:func:`render_all` returns PNG bytes by file name: per task, the per-round time
distribution of every arm (graph replay, every scope and the full program); the paired-ratio intervals
the timing claims were decided on; and bit identity by variant. PNGs carry no timestamp or
software metadata, so the same documents give the same bytes with the same matplotlib.
Raises ImportError if matplotlib is missing (the caller records that and goes on).
"""
from __future__ import annotations

import io
from typing import Mapping

from kbrepro.harness import stats


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, metadata={"Software": None})
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buf.getvalue()


def render_all(documents: Mapping[str, Mapping], claims: Mapping | None) -> dict[str, bytes]:
    """Every plot: :func:`render_documents` and :func:`render_claims` together."""
    return {**render_documents(documents), **render_claims(claims)}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def render_claims(claims: Mapping | None) -> dict[str, bytes]:
    """The paired-ratio intervals the timing claims were decided on."""
    plt = _pyplot()
    out: dict[str, bytes] = {}
    items, seen = [], set()
    for c in (claims or {}).get("claims", []):
        for chk in c["checks"]:
            for it in chk.get("items", []):
                key = (it["block"], it["numerator"], chk["denominator"])
                if it.get("ci_low") is not None and key not in seen:
                    seen.add(key)
                    items.append((f"{c['id']} {it['block']} {it['numerator']}/{chk['denominator']}", it))
    if items:
        fig, ax = plt.subplots(figsize=(8, 0.2 * len(items) + 1.2))
        fig.subplots_adjust(left=0.42)
        for i, (label, it) in enumerate(items):
            color = {"holds": "tab:green", "fails": "tab:red"}.get(it["verdict"], "tab:orange")
            ax.plot([it["ci_low"], it["ci_high"]], [i, i], color=color, lw=2)
            ax.plot([it["median_ratio"]], [i], "o", color=color, ms=3)
        ax.axvline(1.0, color="k", lw=0.6)
        ax.set_yticks(range(len(items)), [lbl for lbl, _ in items], fontsize=5)
        ax.set_xlabel("paired per-round ratio (median, bootstrap interval)", fontsize=8)
        out["ratio_intervals.png"] = _png(fig)
    return out


def render_documents(documents: Mapping[str, Mapping]) -> dict[str, bytes]:
    """Per-task per-round time distributions and bit identity by variant."""
    out: dict[str, bytes] = {}
    for job in document_jobs(documents):
        out.update(render_job(job, documents))
    return out


def document_jobs(documents: Mapping[str, Mapping]) -> list[tuple]:
    """Independent plot jobs over the documents (each renders one figure), so that a caller
    can render them in parallel with :func:`render_job`."""
    blocks = (documents.get("timings") or {}).get("blocks", [])
    tasks = sorted({b["task"] for b in blocks if b.get("kind") == "study" and b.get("rounds")})
    jobs: list[tuple] = [("task", t) for t in tasks]
    if (documents.get("correctness") or {}).get("full_program"):
        jobs.append(("bits",))
    return jobs


def render_job(job: tuple, documents: Mapping[str, Mapping]) -> dict[str, bytes]:
    """Render one job of :func:`document_jobs`."""
    plt = _pyplot()
    if job[0] == "task":
        task = job[1]
        blocks = (documents.get("timings") or {}).get("blocks", [])
        sel = [b for b in blocks if b.get("task") == task and b.get("kind") == "study" and b.get("rounds")]
        fig, axes = plt.subplots(1, len(sel), figsize=(4.2 * len(sel), 3.6), squeeze=False)
        fig.subplots_adjust(bottom=0.3, wspace=0.35)
        for ax, b in zip(axes[0], sel):
            data = [stats.arm_samples(b, a) for a in b["arms"]]
            ax.boxplot(data, showfliers=True)
            ax.set_xticks(range(1, len(b["arms"]) + 1), b["arms"], rotation=45, ha="right", fontsize=7)
            ax.set_title(b["id"], fontsize=8)
            ax.set_ylabel("ms per invocation", fontsize=8)
        fig.suptitle(f"task {task}: per-round times of every arm", fontsize=9)
        return {f"task{task}_rounds.png": _png(fig)}
    fp = (documents.get("correctness") or {}).get("full_program", [])
    variants = sorted({v for c in fp for v in c["checks"]})
    ctasks = sorted({c["case"]["task"] for c in fp})
    fig, ax = plt.subplots(figsize=(6, 3.2))
    width = 0.8 / max(len(variants), 1)
    for k, v in enumerate(variants):
        vals = []
        for t in ctasks:
            fr = [c["checks"][v]["bit_identical_count"] / c["checks"][v]["element_count"] for c in fp
                  if c["case"]["task"] == t and v in c["checks"] and c["checks"][v].get("element_count")
                  and c["checks"][v].get("bit_identical_count") is not None]
            vals.append(1.0 - min(fr) if fr else 0.0)
        ax.bar([i + k * width for i in range(len(ctasks))], vals, width, label=v)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(ctasks))], [str(t) for t in ctasks])
    ax.set_ylabel("1 - min bit-identical fraction", fontsize=8)
    ax.set_xlabel("task", fontsize=8)
    ax.legend(fontsize=7)
    ax.set_title("bit identity by variant (0 = every case bit-identical)", fontsize=9)
    return {"bit_identity.png": _png(fig)}
