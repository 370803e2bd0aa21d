"""The reference itself as candidate for every KernelBench task at the pin, on the CPU (issue 28).

    python benchmarks/cpu_sweep.py --out sweep.jsonl [--levels 1,2,3] [--only 2/39,1/94]

Each task's own source with ``ModelNew = Model`` appended runs through ``run_candidates`` with
the quick profile on the CPU, ``batch_size`` cut to 2 and every other plain integer size above
64 cut to 64 (the sweep of the issue), or where the reference itself does not run there,
``batch_size`` alone cut, or the task's own sizes (``kbtask.runnable_reduced_sizes``). One JSON line per task: the outcome (``ok``: a record;
``usage``: refused before the candidate ran, with the message; ``error``: anything else our
code raised), the checks that did not pass (False) or could not decide (None) with their
details, the record's failure, and the seconds. An honest candidate is never caught: every
``False`` here is a false accusation. Writes as it goes, and skips tasks already in ``--out``
(an interrupted sweep resumes).
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))


@click.command()
@click.option("--out", required=True, type=click.Path(dir_okay=False))
@click.option("--levels", default="1,2,3")
@click.option("--only", default="", help="comma-separated tasks (LEVEL/ID)")
def main(out, levels, only):
    from kbrepro.bundle import candidates as bc
    from kbrepro.errors import ReproError
    from kbrepro.harness import jsonio
    from kbrepro.harness.kernelbench import resolve_checkout
    from kbrepro.harness.kbtask import runnable_reduced_sizes
    from kbrepro.model.protocol import PROFILES

    kb = resolve_checkout(None)
    done = set()
    if Path(out).is_file():
        done = {json.loads(line)["task"] for line in Path(out).read_text().splitlines() if line.strip()}
    tasks = []
    for lv in levels.split(","):
        for f in sorted((kb / "KernelBench" / f"level{lv}").glob("*.py"), key=lambda p: int(p.name.split("_")[0])):
            tasks.append((f"{lv}/{f.name.split('_')[0]}", f))
    if only:
        want = set(only.split(","))
        tasks = [t for t in tasks if t[0] in want]
    if not tasks:
        raise click.ClickException(f"no task found under {kb}/KernelBench (levels {levels}, only {only or 'all'})")
    with open(out, "a") as log:
        for task, f in tasks:
            if task in done:
                continue
            src = f.read_bytes()
            t0 = time.perf_counter()
            sizes, skipped = runnable_reduced_sizes(src, PROFILES["quick"].seeds[0], "cpu")
            row = {"task": task, "file": f.name, "sizes": sizes, "sizes_skipped": skipped}
            with tempfile.TemporaryDirectory(prefix="kbrepro-sweep-") as tmp:
                cand = Path(tmp) / f"ref_{task.replace('/', '_')}.py"
                cand.write_bytes(src + b"\n\nModelNew = Model\n")
                try:
                    res = bc.run_candidates([(cand, task)], profile="quick", kernelbench=None,
                                            results_dir=Path(tmp) / "res", sizes=sizes or None, device="cpu")
                    doc = jsonio.loads_strict((res / "results" / "candidates.json").read_bytes(), "candidates.json")
                    rec = doc["candidates"][0]
                    row["outcome"] = "ok"
                    row["failure"] = rec["observations"]["failure"]
                    row["not_passing"] = {v["name"]: [v["passed"], v["detail"][:200]] for v in rec["verdicts"]
                                          if v["passed"] is not True}
                    row["caught"] = sorted(k for k, v in row["not_passing"].items() if v[0] is False)
                except ReproError as exc:
                    row["outcome"] = "usage" if type(exc).__name__ == "UsageError" else type(exc).__name__
                    row["message"] = str(exc)[:400]
                except Exception as exc:  # our code raised: the sweep's finding
                    row["outcome"] = "error"
                    row["message"] = f"{type(exc).__name__}: {exc}"[:400]
            row["seconds"] = round(time.perf_counter() - t0, 2)
            log.write(json.dumps(row) + "\n")
            log.flush()
            print(f"{task:7} {row['outcome']:6} {row['seconds']:6.1f} s {row.get('caught') or row.get('message', '')}"[:200],
                  flush=True)


if __name__ == "__main__":
    main()
