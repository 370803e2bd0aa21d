"""Timing protocol 2 (issue 27) against the committed candidate examples, on a GPU.

    python benchmarks/timing_protocol.py quick --out DIR    # KernelBench's example candidates (model_ex_add)
    python benchmarks/timing_protocol.py full --out DIR     # the honest 1/88 candidates, full profile

Runs the example's candidates again with this product (timing protocol 2), packs the bundle
into ``DIR`` and verifies it statically, then prints, per candidate, the timing stage's seconds
and every median ratio candidate / arm (warm and cold L2) beside the committed example's
(protocol 1, the same H200 kind), their quotient, and the checks that did not pass. The numbers
of benchmarks/RESULTS.md ("Issue 27") come from here.
"""
from __future__ import annotations

import json
import statistics
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

EXAMPLES = {
    "quick": ("candidates-quick-20261201T153437.tar", "quick",
              [("src/kernelbench/prompts/model_new_ex_add.py", "src/kernelbench/prompts/model_ex_add.py", "kb"),
               ("src/kernelbench/prompts/model_new_ex_add_triton.py", "src/kernelbench/prompts/model_ex_add.py", "kb")]),
    "full": ("candidates-full-20261201T175531.tar", "full",
             [("tests/gpu_candidates/honest_gelu_cuda.py", "1/88", "repo"),
              ("tests/gpu_candidates/honest_gelu_triton.py", "1/88", "repo")]),
}


def _ratios(rec: dict) -> dict:
    out = {}
    for b in rec["blocks"]:
        for arm in b["arms"]:
            if arm != "candidate":
                rs = [r["times_ms"]["candidate"] / r["times_ms"][arm] for r in b["rounds"] if arm in r["times_ms"]]
                out[(b["l2"], arm)] = statistics.median(rs)
    return out


def _stage(rec: dict, name: str) -> float:
    return next((s["seconds"] for s in rec["stages"] if s["name"] == name), float("nan"))


@click.command()
@click.argument("which", type=click.Choice(sorted(EXAMPLES)))
@click.option("--out", required=True, type=click.Path(file_okay=False))
@click.option("--examples", default=None, help="folder of the committed examples (default: the project's)")
def main(which, out, examples):
    from kbrepro.bundle import candidates as bc
    from kbrepro.bundle.verify.checklist import verify_archive
    from kbrepro.harness.kernelbench import resolve_checkout

    root = Path(__file__).resolve().parent.parent
    ex_dir = Path(examples) if examples else root / "examples"
    tar_name, profile, items = EXAMPLES[which]
    with tarfile.open(ex_dir / tar_name) as tf:
        old = json.loads(next(tf.extractfile(m).read() for m in tf if m.name.endswith("results/candidates.json")))
    kb = resolve_checkout(None)
    paths = [((kb if where == "kb" else root) / cand, task) for cand, task, where in items]
    sizes = old["candidates"][0]["config"]["sizes"] or None
    Path(out).mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kbrepro-tp-") as tmp:
        res = bc.run_candidates(paths, profile=profile, kernelbench=None, results_dir=Path(tmp) / "res",
                                progress=lambda m: print(f"[{time.perf_counter() - t0:7.1f}s] {m}", flush=True),
                                sizes=sizes)
        run_s = time.perf_counter() - t0
        (Path(out) / f"candidates-{which}.json").write_bytes((res / "results" / "candidates.json").read_bytes())
        made = bc.pack_results(res, Path(out) / f"candidates-{which}-protocol2.tar", allow_failing=True)
        new = json.loads((res / "results" / "candidates.json").read_bytes())
    rep = verify_archive(made.path, level="static")
    print(f"\nrun {run_s:.1f} s; bundle {made.path.name} digest {made.digest}; static verify {rep.verdict} "
          f"(exit {rep.exit_code}); partial: {rep.partial}")
    for t in rep.tiers:
        for p in t.problems[:5]:
            print(f"  problem tier {t.name}: {p.get('path')} {p['message']}")
    for o, n in zip(old["candidates"], new["candidates"]):
        print(f"\n{n['name']}: timing stage {_stage(n, 'timing'):.2f} s (protocol 1: {_stage(o, 'timing'):.2f} s, "
              f"x{_stage(n, 'timing') / _stage(o, 'timing'):.2f}); whole {n['seconds']:.1f} s (was {o['seconds']:.1f} s)")
        ro, rn = _ratios(o), _ratios(n)
        for k in sorted(ro):
            if k in rn:
                print(f"  {k[0]:>4} candidate/{k[1]:<22} {ro[k]:8.4f} -> {rn[k]:8.4f}  (x{rn[k] / ro[k]:.3f})")
        bad = [(v["name"], v["passed"], v["detail"][:120]) for v in n["verdicts"] if v["passed"] is not True]
        print(f"  checks not passing: {bad}")
        for b in n["blocks"]:
            held = [r["outputs"] for r in b["rounds"]]
            print(f"  block {b['l2']}: {b['protocol']['invocations_per_pair']} invocations/request, outputs held "
                  f"{sum(h['n'] for h in held)}, failing {sum(h['failing'] for h in held)}, aliased "
                  f"{sum(h['aliased'] for h in held)}")
        ck = n["timing"].get("clock")
        if ck:
            print(f"  clock n1={ck['n1']} n2={ck['n2']} host1 {statistics.median(ck['host1_ms']):.3f} ms host2 "
                  f"{statistics.median(ck['host2_ms']):.3f} ms reported {statistics.median(ck['reported1_ms']):.5f} ms")


if __name__ == "__main__":
    main()
