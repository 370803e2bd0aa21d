"""Where a candidate's time goes, unprofiled, on a GPU: wall time per part of the parent (its
draws, model builds, references and comparisons; in the timing stage draws, regions, checksums,
holding), each request to the candidate's child by command (the parent's own work done while the
child answers included), with the run's progress stamps and the record's stage seconds.

    python benchmarks/timing_parts.py CANDIDATE TASK PROFILE RESULTS_DIR

TASK is LEVEL/ID or a Python file of the KernelBench pin (``src/kernelbench/prompts/model_ex_add.py``).
Unlike ``stage_profile.py`` (cProfile, which inflates Python-heavy parts), this times each part
with ``time.perf_counter`` around it. The numbers of benchmarks/RESULTS.md ("Issue 27, later")
come from here.
"""
from __future__ import annotations

import functools
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

T: dict = defaultdict(float)
N: dict = defaultdict(int)


def _wrap(owner, name: str, key) -> None:
    f = getattr(owner, name)

    @functools.wraps(f)
    def timed(*a, **k):
        t0 = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            kk = key(a)
            T[kk] += time.perf_counter() - t0
            N[kk] += 1

    setattr(owner, name, timed)


@click.command()
@click.argument("candidate", type=click.Path(exists=True, dir_okay=False))
@click.argument("task")
@click.argument("profile")
@click.argument("results_dir", type=click.Path(file_okay=False))
@click.option("--device", default="cuda", help="cuda, or cpu (a smoke test: no timing stage)")
def main(candidate, task, profile, results_dir, device):
    from kbrepro.bundle import candidates as bc
    from kbrepro.harness import candidate_timing as ct
    from kbrepro.harness import fresh, isolate

    for n in ("draw_pool", "region", "checksums", "per_call"):
        _wrap(fresh.FreshTimer, n, (lambda n: lambda a: "parent." + n)(n))
    for n in ("_held", "baselines", "block", "clock", "per_call"):
        _wrap(ct, n, (lambda n: lambda a: "stage." + n)(n))
    _wrap(isolate.CandidateProcess, "request_while", lambda a: "request." + str(a[1].get("cmd")))
    # the parent's own work in the other stages (checking pass, weights and shapes)
    from kbrepro.harness import candidate_calls as cc
    from kbrepro.harness import kbtask

    for n in ("draw_inputs", "build_model", "load_task", "fingerprint"):
        _wrap(kbtask, n, (lambda n: lambda a: "parent." + n)(n))
    for n in ("reference", "compare", "reply_tensor", "draws_random", "case"):
        _wrap(cc, n, (lambda n: lambda a: "parent." + n)(n))
    t0 = time.perf_counter()
    stamps = []
    res = bc.run_candidates([(Path(candidate), task)], profile=profile, kernelbench=None, results_dir=Path(results_dir),
                            device=device, progress=lambda m: stamps.append(f"{time.perf_counter() - t0:8.2f} {m}"))
    click.echo("\n".join(stamps))
    for k in sorted(T, key=lambda k: -T[k]):
        click.echo(f"{T[k]:9.3f} s {N[k]:6d} {k}")
    doc = json.loads((res / "results" / "candidates.json").read_text())
    for c in doc.get("candidates", []):
        click.echo(f"{c.get('name')}: " + ", ".join(f"{s['name']} {s['seconds']:.2f} s" for s in c.get("stages", [])))


if __name__ == "__main__":
    main()
