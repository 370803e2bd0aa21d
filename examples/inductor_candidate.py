"""torch.compile (Inductor) as a KernelBench candidate, for every task of a level.

A KernelBench candidate is one Python file that defines ``ModelNew`` with the task's
constructor. This script writes, for each task of a level of the pinned KernelBench, a
candidate file made of the task's own source (its ``Model``, unchanged) followed by
:data:`WRAPPER`: a ``ModelNew`` that builds the task's ``Model`` with the same arguments
(so, after the harness's ``torch.manual_seed``, the same weights) and calls it through
``torch.compile`` (Inductor, default mode). Checking these candidates against eager answers,
task by task, the questions of the study: does Inductor pass the official check, is it bit
identical to eager, does it flush subnormals, and is it faster?

    python examples/inductor_candidate.py --level 1 --out inductor-l1/          # every level-1 task
    python examples/inductor_candidate.py --level 1 --tasks 1-10 --out ind/     # tasks 1 to 10

It writes ``<out>/inductor_<level>_<task>.py`` and ``<out>/args.txt``: the ``--candidate F
--task L/T`` pairs, one pair a line, for ``make_bundle.py`` (see docs/sharding.md, "Sharding and
clusters", for the commands). Exit codes: 0 written; 2 usage; 3 a KernelBench checkout that
cannot be read or does not match the pin.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

WRAPPER = '''

# ---- kbrepro: the task's Model through torch.compile (Inductor) -------------------------
import torch as _kb_torch


class ModelNew(_kb_torch.nn.Module):
    """The task's ``Model`` built with the same arguments, called through torch.compile."""

    def __init__(self, *args, **kwargs):
        super().__init__()
        self.model = Model(*args, **kwargs)
        self.compiled = _kb_torch.compile(self.model)

    def forward(self, *inputs):
        return self.compiled(*inputs)
'''


def candidate_source(task_source: bytes) -> bytes:
    """The candidate file for a task: its source, then :data:`WRAPPER`. Raises ValueError if
    the task defines no ``class Model``."""
    if not re.search(rb"^class Model\b", task_source, re.MULTILINE):
        raise ValueError("the task defines no class Model")
    return task_source.rstrip(b"\n") + b"\n" + WRAPPER.encode()


def _ranges(spec: str) -> set[int]:
    out: set[int] = set()
    for part in spec.split(","):
        a, _, b = part.strip().partition("-")
        lo, hi = int(a), int(b or a)
        out.update(range(lo, hi + 1))
    return out


def level_tasks(pin, level: int) -> list[tuple[int, str]]:
    """(task number, pin path) of every task of ``level`` in the pin, by number."""
    pat = re.compile(rf"^KernelBench/level{level}/(\d+)_[A-Za-z0-9_]+\.py$")
    return sorted((int(m.group(1)), p) for p in pin.files if (m := pat.match(p)))


def main(argv=None) -> int:
    import argparse

    from kbrepro.errors import ReproError
    from kbrepro.harness.kernelbench import KernelBenchCheckout, load_pin, resolve_checkout

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--level", type=int, default=1)
    ap.add_argument("--tasks", default=None, help="task numbers, e.g. 1-10,19 [default: every task of the level]")
    ap.add_argument("--out", required=True, help="folder to write the candidate files into (created)")
    ap.add_argument("--kernelbench", default=None, help="KernelBench checkout [default: the project's submodule]")
    a = ap.parse_args(argv)
    try:
        pin = load_pin()
        tasks = level_tasks(pin, a.level)
        if a.tasks:
            want = _ranges(a.tasks)
            tasks = [t for t in tasks if t[0] in want]
        if not tasks:
            print(f"error: the pinned KernelBench has no such task of level {a.level}", file=sys.stderr)
            return 2
        kb = KernelBenchCheckout(resolve_checkout(a.kernelbench), pin)
        kb.verify([p for _, p in tasks])
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        lines = []
        for n, path in tasks:
            f = out / f"inductor_{a.level}_{n}.py"
            f.write_bytes(candidate_source(kb.read_verified(path)))
            lines.append(f"--candidate {f} --task {a.level}/{n}")
        (out / "args.txt").write_text("\n".join(lines) + "\n")
    except ReproError as exc:
        print(f"error: {exc.message}" + (f"\n  -> {exc.hint}" if exc.hint else ""), file=sys.stderr)
        return exc.exit_code
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{len(tasks)} candidates in {out}; pairs for make_bundle.py in {out / 'args.txt'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
