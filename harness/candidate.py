"""One checking pass of a KernelBench candidate against its task: isolated run, references
in our own process, named verdicts.

:func:`check_candidate` draws ``sets`` input sets from the task's ``get_inputs()`` (seeded,
each set fresh), puts a warm-up copy of the first set before them and a repeat after, runs ``ModelNew`` on all of them in a
spawned child (:mod:`kbrepro.harness.isolate`), computes ``Model``'s references here (same
init seed, on our own copies of the inputs: a candidate that edits its inputs cannot move the
reference), and returns :class:`~kbrepro.harness.cheats.CheckVerdict` records:

* ``ran``: the child finished (else its error: exception, exit code, timeout, forged reply);
* ``official_allclose``: ``torch.allclose(reference, candidate, atol, rtol)`` on every set
  (the argument order of KernelBench's check), with the worst set named;
* ``bit_identical``: every output bit-identical to the reference (None if not all pass);
* ``follows_fresh_inputs``: each set's output matches that set's reference (a cache keyed by
  identity, pointer or shape answers a later set with an earlier set's output);
* ``discriminates``: the task's references can tell a wrong output from a right one;
* ``per_call_times_consistent``: the calls' times (after one warm-up call) do not split into
  fast and slow groups.

Known gaps (a red-team pass, listed in :mod:`kbrepro.harness.isolate`): the times and the
reply come from the candidate's own process, which can forge them, compute every answer in
the warm-up call, or copy the task's ``Model``; so a True here means the outputs are right,
not that the candidate did its own work. The profiler, poison, precision and roofline checks
of :mod:`kbrepro.harness.cheats` are not called yet.
"""
from __future__ import annotations

import types
from dataclasses import dataclass

from kbrepro.harness import cheats
from kbrepro.harness.checks import Tolerance, compare
from kbrepro.harness.isolate import DEFAULT_TIMEOUT_S, CandidateRun, run_candidate


@dataclass(frozen=True)
class CandidateReport:
    """The verdicts of one checking pass (in the order of the module docstring) and the run."""

    verdicts: tuple
    run: CandidateRun

    @property
    def passed(self) -> bool:
        """True when no verdict is False (None: not decidable, e.g. bit identity of a failing candidate)."""
        return all(v.passed is not False for v in self.verdicts)

    def to_doc(self) -> dict:
        return {"passed": self.passed, "verdicts": [v.to_doc() for v in self.verdicts],
                "seconds": round(self.run.seconds, 3), "times_ms": list(self.run.times_ms)}


def _task(task_src: bytes):
    mod = types.ModuleType("kbrepro_task_reference")
    exec(compile(task_src, "task.py", "exec"), mod.__dict__)
    return mod


def check_candidate(candidate_src: bytes, task_src: bytes, *, seed: int = 0, sets: int = 3,
                    tol: Tolerance = Tolerance(1e-4, 1e-4), device: str = "cpu",
                    timeout_s: float = DEFAULT_TIMEOUT_S) -> CandidateReport:
    """Check ``candidate_src`` (a candidate file's bytes) against ``task_src`` (the pinned
    task file's bytes) as the module docstring says. ``seed`` seeds both models' init and,
    with the set index, each input set; ``device`` is where both run (``cuda`` on a GPU).
    Raises nothing for the candidate's failures; the task must import (else its exception)."""
    import torch

    task = _task(task_src)
    xs = []
    for i in range(sets):
        torch.manual_seed(seed * 1000 + i + 1)
        xs.append([x.to(device) if isinstance(x, torch.Tensor) else x for x in task.get_inputs()])
    xs.append([x.clone() if isinstance(x, torch.Tensor) else x for x in xs[0]])  # a repeat of the first values
    # a warm-up call first (one-time costs: lazy initialisation, allocator growth): checked, not timed
    xs.insert(0, [x.clone() if isinstance(x, torch.Tensor) else x for x in xs[0]])
    run = run_candidate(candidate_src, task_src, seed=seed, inputs=[[x.cpu() if isinstance(x, torch.Tensor) else x
                                                                      for x in s] for s in xs],
                        device=device, timeout_s=timeout_s)
    if not run.ok:
        return CandidateReport((cheats.CheckVerdict("ran", False, run.error or "the candidate did not finish"),), run)
    torch.manual_seed(seed)
    model = task.Model(*task.get_init_inputs()).to(device)
    with torch.no_grad():
        refs = [model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in s]) for s in xs]
    outs = [row[0] if row else None for row in run.outputs]
    results = []
    for i, (r, o) in enumerate(zip(refs, outs)):
        if not isinstance(o, torch.Tensor):
            results.append((i, None))
            continue
        results.append((i, compare(r.detach().cpu(), o, tol)))
    failing = [i for i, c in results if c is None or not c["official"]["pass"]]
    official = cheats.CheckVerdict(
        "official_allclose", not failing,
        f"all {len(results)} input sets pass torch.allclose(reference, candidate, atol={tol.atol:g}, "
        f"rtol={tol.rtol:g})" if not failing else f"input set(s) {failing} fail the official check")
    bits = None if failing else all(c["bit_identical_count"] == c["element_count"] for _, c in results)
    bit = cheats.CheckVerdict("bit_identical", bits, "not decided: the official check fails" if bits is None else
                              ("every output is bit-identical to the reference" if bits else
                               "passing, but not bit-identical to the reference"))
    # a set whose output is the answer to another set's inputs: stale (a cache)
    stale = [i for i, o in enumerate(outs) if i in failing and isinstance(o, torch.Tensor)
             and any(j != i and o.shape == refs[j].shape and torch.allclose(refs[j].detach().cpu(), o,
                                                                            atol=tol.atol, rtol=tol.rtol)
                     for j in range(len(refs)))]
    fresh = cheats.CheckVerdict("follows_fresh_inputs", not stale,
                                "each input set's output answers that set" if not stale else
                                f"input set(s) {stale} got the answer to another set's inputs (a cache)")
    disc = cheats.discriminates(refs[0].detach().cpu(), tol.atol, tol.rtol)
    timing = cheats.per_call_times_consistent(run.times_ms[1:])
    return CandidateReport((cheats.CheckVerdict("ran", True, f"{len(outs)} calls in {run.seconds:.1f} s"),
                            official, bit, fresh, disc, timing), run)


__all__ = ["CandidateReport", "check_candidate"]
