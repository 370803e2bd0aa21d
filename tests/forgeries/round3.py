"""The second round's helpers (2026-12-05): as :mod:`forgeries.common`, with the verdict line
returned beside the exit code, two more study examples, and the edits several forgeries share."""
from __future__ import annotations

import statistics

from forgeries import common
from forgeries.common import CORRECTNESS, Q7, ROOT, RUN, S8, TIMINGS, env_edit, fc, kit

EXT = ROOT / "examples/pointwise-fusion-ftz-extended-20261201T125049.tar"
LN = ROOT / "examples/layernorm-l1-40-full-20261201T121453.tar"
ENV = "data/environment.json"


def verify(path, label):
    """:func:`forgeries.common.run_verifier`: (exit code, the VERDICT line)."""
    p = common.run_verifier(path, label)
    last = [ln for ln in p.stdout.splitlines() if ln.startswith("VERDICT")]
    return p.returncode, (last[-1] if last else "")


def forge_candidates(edit, label, example=Q7, **kw):
    """A candidate bundle: :func:`forgeries.common.forge_and_verify`, the verdict line returned."""
    return common.forge_and_verify(edit, label, example, check=verify, **kw)


def forge_study(edits, label, example=S8):
    """A study bundle: :func:`forgeries.common.forge_study`, the verdict line returned."""
    return common.forge_study(edits, label, example, check=verify)


def env_fields(fn):
    """An edit of environment.json's fields, for :func:`forge_study`."""
    return (ENV, lambda doc: fn(doc["fields"]))


def tails_fast(doc, f=0.25, ids=("53.tail.events", "53.tail.graph")):
    """The three fused variants' times in task 53's tail blocks x f; prints the bandwidth they imply."""
    for b in doc["blocks"]:
        if b["id"] in ids:
            for r in b["rounds"]:
                for a in ("cupy_default", "nvrtc_ftz_false", "nvrtc_ftz_true"):
                    r["times_ms"][a] *= f
            t = statistics.median(r["times_ms"]["cupy_default"] for r in b["rounds"])
            print(f"  {b['id']}: cupy_default {t:.4f} ms for {b['bytes_moved']} bytes = "
                  f"{b['bytes_moved'] / (t * 1e-3) / 1e12:.2f} TB/s (NVIDIA H200 HBM3e peak 4.8 TB/s)")


__all__ = ["CORRECTNESS", "ENV", "EXT", "LN", "Q7", "ROOT", "RUN", "S8", "TIMINGS", "env_edit", "env_fields", "fc", "kit",
           "tails_fast", "verify", "forge_candidates", "forge_study"]
