"""Time per KernelBench candidate, from file to bundle, against KernelBench's own evaluator.

    python benchmarks/candidate_vs_kernelbench.py --task 1/88 CANDIDATE.py [...] [--profile full]

For each candidate, on this GPU: ``make_bundle.py``'s pipeline (``bundle.candidates.run_candidates``
then ``pack_results``, one candidate per results folder, its stages from the record) and
``eval_kernel_against_ref`` of the pinned KernelBench checkout (``src/kernelbench/eval.py``: 5
correctness trials, 100 performance trials, ``measure_performance=True``), each in a fresh build
folder, so both pay their own compilation. Prints one JSON line per candidate and tool. KernelBench
imports LLM client packages it does not use for evaluation (dotenv, openai, litellm); where they
are missing, stand-ins that raise on use are put on ``sys.path``. Results: benchmarks/RESULTS.md.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import types
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))


def _stand_ins() -> None:
    for name, attr in (("dotenv", "load_dotenv"), ("openai", "OpenAI"), ("litellm", "completion")):
        try:
            __import__(name)
        except ImportError:
            mod = types.ModuleType(name)
            setattr(mod, attr, lambda *a, **k: (_ for _ in ()).throw(RuntimeError("not available here")))
            sys.modules[name] = mod


@click.command()
@click.argument("candidates", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--task", required=True, help="LEVEL/TASK or a KernelBench path of the pin")
@click.option("--profile", default="full", show_default=True)
@click.option("--kernelbench", default=None, help="checkout [default: $KBREPRO_KERNELBENCH or KernelBench/]")
def main(candidates, task, profile, kernelbench):
    from kbrepro.bundle import candidates as bc
    from kbrepro.harness.kernelbench import KernelBenchCheckout, load_pin, resolve_checkout

    pin = load_pin()
    root = resolve_checkout(kernelbench)
    task_src = KernelBenchCheckout(root, pin).read_verified(bc.task_path(task, pin)).decode()
    for c in candidates:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            res = bc.run_candidates([(Path(c), task)], profile=profile, kernelbench=kernelbench,
                                    results_dir=Path(tmp) / "res")
            made = bc.pack_results(res, Path(tmp) / "b.tar", allow_failing=True)
            rec = json.loads((res / "results" / "candidates.json").read_bytes())["candidates"][0]
            print(json.dumps({"tool": "kbrepro", "candidate": Path(c).name, "seconds": round(time.perf_counter() - t0, 1),
                              "compile_seconds": round(rec["compile_seconds"] or 0, 1),
                              "stages": {s["name"]: round(s["seconds"], 1) for s in rec["stages"]},
                              "bundle_bytes": made.size_bytes}), flush=True)
        sys.path.insert(0, str(root / "src"))
        _stand_ins()
        from kernelbench.eval import eval_kernel_against_ref

        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            r = eval_kernel_against_ref(task_src, Path(c).read_text(), num_correct_trials=5, num_perf_trials=100,
                                        measure_performance=True,
                                        backend="triton" if "triton" in Path(c).read_text() else "cuda",
                                        build_dir=os.path.join(tmp, "build"))
            print(json.dumps({"tool": "eval_kernel_against_ref", "candidate": Path(c).name,
                              "seconds": round(time.perf_counter() - t0, 1), "correctness": r.correctness,
                              "runtime_ms": r.runtime, "ref_runtime_ms": getattr(r, "ref_runtime", None)}), flush=True)


if __name__ == "__main__":
    main()
