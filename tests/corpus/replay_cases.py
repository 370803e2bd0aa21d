"""Forgeries that only a replay can catch, built from a good (quick-profile) bundle.

Each case edits recorded numbers consistently across every document, re-derives
``claims.json`` and ``REPORT.md`` with the product's own code (``cases_trust.reforge``) and
recomputes the manifests: the static tiers pass (``tests/test_replay_corpus.py`` checks it on
CPU), and ``verify_bundle.py --level replay`` on a GPU must fail in the replay tier with
exit code 1 and the named message (``tests/test_gpu.py``).

    python tests/corpus/replay_cases.py GOOD_QUICK.tar OUTDIR
"""
from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

from kbrepro.bundle import pack
from kbrepro.harness import jsonio

HERE = Path(__file__).resolve().parent


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"kbrepro_corpus_{name}", HERE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


@dataclass(frozen=True)
class ReplayCase:
    """``name``; ``fragment``: text a replay-tier problem must contain; ``description``."""

    name: str
    fragment: str
    description: str


CORRECTNESS = "data/results/correctness.json"
TIMINGS = "data/results/timings.json"
ENV = "data/environment.json"

CASES = (
    ReplayCase("replay_bits_forged", "bit-identity count differs although the replay ran a byte-identical cubin",
               "one full-program case of task 81 recorded with one more differing element (counts kept consistent)"),
    ReplayCase("replay_claim_flipped_by_timings", "claim C10: recorded 'holds', replayed 'fails'",
               "every eager tail recorded 3.9 times the CuPy default's time, so that claim C10 (the fused tail's speed-up over the "
               "eager tail lies in the post's range of 2.8x to 5.5x) holds in the recording"),
    ReplayCase("replay_timing_forged", "timing ratio differs beyond both intervals",
               "every NVRTC --ftz=false tail time of the graph-mode tail blocks scaled by 0.7 (a faster kernel)"),
    ReplayCase("replay_other_gpu_record_and_bits", "bit-identity count differs although the replay ran a byte-identical cubin",
               "the environment record names another GPU model (so that bits would 'not need to match') and one "
               "bit count is forged"),
    ReplayCase("replay_tiny_control_bits_forged", "bit-identity count differs",
               "the tiny-value control of task 81 recorded with one fewer bit-identical element for the CuPy default"),
)


def _edit(f: dict, rel: str, fn) -> None:
    doc = jsonio.loads_strict(f[rel], rel)
    fn(doc)
    f[rel] = jsonio.dumps(doc).encode("ascii")


def _task_case(doc, task, variant, pred=lambda c: True):
    for c in doc["full_program"]:
        chk = c["checks"][variant]
        if c["case"]["task"] == task and pred(chk):
            return chk
    raise ValueError(f"no full-program case of task {task} for {variant}")


def _bits(doc):
    chk = _task_case(doc, 81, "cupy_default", lambda c: 0 < c["bit_identical_count"] < c["element_count"])
    chk["bit_identical_count"] -= 1


def _claim_flip(doc):
    # every tail block's eager arm recorded as 1/0.255 times the CuPy default's time of the same
    # round (a 3.9x speed-up, the middle of the post's range), so that claim C10 (the fused
    # tail's speed-up over the eager tail lies in the post's range of 2.8x to 5.5x) holds in the
    # recording while the GPU measures 1.6x to 3.2x
    for b in doc["blocks"]:
        if b.get("scope") == "tail" and "eager_tail" in b.get("arms", []) and b.get("rounds"):
            for r in b["rounds"]:
                r["times_ms"]["eager_tail"] = r["times_ms"]["cupy_default"] / 0.255


def _timing(doc):
    for b in doc["blocks"]:
        if b.get("scope") == "tail" and b.get("mode") == "graph" and "nvrtc_ftz_false" in b.get("arms", []):
            for r in b["rounds"]:
                r["times_ms"]["nvrtc_ftz_false"] *= 0.7


def _tiny(doc):
    chk = doc["tiny_value_controls"]["81"]["checks"]["cupy_default"]
    if not 0 < chk["bit_identical_count"] < chk["element_count"]:
        raise ValueError("the tiny-value control of task 81 has no differing elements to forge")
    chk["bit_identical_count"] -= 1


def build(good: Path, outdir: Path) -> list[ReplayCase]:
    """Write one archive per case into ``outdir``; return the cases."""
    trust = _load("cases_trust")
    mc = _load("make_corpus")
    g = mc.load_good(Path(good))
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    edits = {
        "replay_bits_forged": lambda f: _edit(f, CORRECTNESS, _bits),
        "replay_claim_flipped_by_timings": lambda f: _edit(f, TIMINGS, _claim_flip),
        "replay_timing_forged": lambda f: _edit(f, TIMINGS, _timing),
        "replay_other_gpu_record_and_bits": lambda f: (
            _edit(f, ENV, lambda d: d["fields"]["gpu_name"].update(value="NVIDIA GH200 480GB")),
            _edit(f, CORRECTNESS, _bits)),
        "replay_tiny_control_bits_forged": lambda f: _edit(f, CORRECTNESS, _tiny),
    }
    for case in CASES:
        f = dict(g.files)
        edits[case.name](f)
        trust.reforge(f)
        payload = {p[len("data/"):]: b for p, b in f.items() if p.startswith("data/")}
        data = pack.tar_bytes(pack.make_bag(g.top, payload, g.info()), mtime=g.mtime)
        if data == g.raw:
            raise ValueError(f"{case.name}: the edit changed nothing")
        jsonio.atomic_write_bytes(outdir / f"{case.name}.tar", data)
    return list(CASES)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print("usage: python tests/corpus/replay_cases.py GOOD_QUICK.tar OUTDIR", file=sys.stderr)
        sys.exit(2)
    for c in build(Path(sys.argv[1]), Path(sys.argv[2])):
        print(f"{c.name}.tar")
