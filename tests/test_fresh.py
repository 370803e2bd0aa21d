"""The checksums of timing protocol 2 (harness/fresh.py, model/protocol.py) on the CPU: an honest
output agrees with the reference's on the same set, and another set's output, a partly computed
one, and a zero output whose weighted sum is cancelled by two huge elements do not; the parent's
hold of every invocation (harness/candidate_timing.py) counts them and samples them as the
verifier derives them again (model/timing_rules.py)."""
from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")

from kbrepro.harness import candidate_timing as ct  # noqa: E402
from kbrepro.harness.fresh import FreshTimer  # noqa: E402
from kbrepro.model import protocol  # noqa: E402

TOL = (1e-4, 1e-4)


class _Task:
    """A task whose get_inputs draws on the default device (as a KernelBench task does)."""

    @staticmethod
    def get_inputs():
        return [torch.rand(4, 70000)]


def _ft():
    return FreshTimer(torch, "cpu")


def test_draw_pool_is_the_same_sets_in_any_process_and_each_set_new():
    a, b = _ft().draw_pool(_Task, 123, 3), _ft().draw_pool(_Task, 123, 3)
    assert all(torch.equal(x[0], y[0]) for x, y in zip(a, b))
    assert not torch.equal(a[0][0], a[1][0])


def test_an_honest_output_agrees_and_stale_partial_or_cancelled_outputs_do_not():
    ft = _ft()
    pool = ft.draw_pool(_Task, 7, 4)
    ref = [torch.relu(x[0] - 0.5) for x in pool]
    honest = [r.clone() + 1e-6 for r in ref]
    stale = [ref[0]] * 4
    partial = [r.clone() for r in ref]
    for p in partial:
        p.view(-1)[: p.numel() // 50] = 0.0  # 2% of the elements not computed
    seed = 99
    want, sizes = ft.checksums(ref, seed)
    assert sizes == [65536] * 4 + [280000 - 4 * 65536]

    def agree(outs):
        got, s = ft.checksums(outs, seed)
        assert s == sizes
        return [all(protocol.checksum_agrees(c, r, m, *TOL) for c, r, m in zip(row, wrow, sizes))
                for row, wrow in zip(got, want)]

    assert agree(honest) == [True] * 4
    assert agree(stale) == [True, False, False, False]
    assert agree(partial) == [False] * 4
    # zeros and two huge elements chosen to cancel in the weighted sum of the first chunk
    # (weights known once drawn): the sum of |y| gives it away
    w = ft._w(65536, torch.float32)
    cancel = []
    for r in ref:
        z = torch.zeros_like(r)
        flat = z.view(-1)
        flat[0], flat[1] = 1e3 * float(w[1]), -1e3 * float(w[0])
        cancel.append(z)
    got, _ = ft.checksums(cancel, seed)
    assert abs(got[0][0][0]) < 1e-3  # the weighted sum is cancelled
    assert agree(cancel) == [False] * 4


def test_the_parent_holds_every_invocation_and_samples_as_the_verifier_derives():
    ft = _ft()
    pool = ft.draw_pool(_Task, 11, 12)
    ref_out = [torch.tanh(x[0]) for x in pool]
    seed = 5
    ref, sizes = ft.checksums(ref_out, seed)
    good = [y.clone() for y in ref_out]
    bad = [y.clone() for y in ref_out]
    bad[3] = ref_out[2].clone()
    bad[8] = ref_out[7].clone()
    for outs, failing in ((good, 0), (bad, 2)):
        sums, s = ft.checksums(outs, seed)
        cand = {"checksums": sums, "chunk_sizes": s, "written_by": ft.written_by(outs)}
        held = ct._held(cand, ref, sizes, *TOL, random.Random(3))
        assert held["n"] == 12 and held["failing"] == failing and held["aliased"] == 0
        rows = [protocol.held_row_agrees(x, *TOL) for x in held["sample"]]
        assert rows.count(False) == failing and (held["worst"] == 0) == (failing == 0)
        if not failing:  # the passing rows are the seeded draw's (model/timing_rules.py derives it)
            assert sorted(x[0] for x in held["sample"]) == sorted(random.Random(3).sample(range(12), 2))


def test_a_reused_output_buffer_is_held_against_its_last_writer():
    ft = _ft()
    buf = torch.zeros(10)
    assert ft.written_by([buf, buf, torch.ones(3), buf]) == [3, 3, 2, 3]


def test_small_outputs_checksummed_in_one_batch_agree_with_one_by_one():
    ft = _ft()
    outs = [torch.rand(3, 500) for _ in range(6)]
    batched, sizes = ft.checksums(outs, 8)  # every output apart: one batch of kernels
    shared = [outs[0]] + [o for o in outs[1:]]
    one_by_one, s2 = ft.checksums(shared + [shared[0]], 8)  # a shared buffer: each apart
    assert sizes == s2 == [1500]
    assert all(protocol.checksum_agrees(c[0], r[0], 1500, *TOL) for c, r in zip(one_by_one, batched))


class _Event:
    def __init__(self, enable_timing=False):
        pass

    def record(self):
        pass

    def synchronize(self):
        pass

    def elapsed_time(self, other):
        return 1.0


def test_only_a_graph_replaying_arm_gets_a_cuda_graph_step_mark():
    """A step mark costs host time per invocation and loads torch's compiler: the candidate
    (whose checked calls get none) and the eager arms get none; compile_max_autotune one per
    invocation."""
    ft = _ft()
    marks = []
    ft._Event, ft._sync, ft._step = _Event, (lambda: None), (lambda: marks.append(1))
    pool = ft.draw_pool(_Task, 5, 3)
    ms, ys = ft.region(lambda x: x + 1, pool, 3)
    assert marks == [] and len(ys) == 3 and ms == pytest.approx(1 / 3)
    ft.region(lambda x: x + 1, pool, 3, graph_steps=True)
    assert marks == [1, 1, 1]
    assert ct.GRAPHED == ("compile_max_autotune",) and set(ct.GRAPHED) <= set(protocol.BASELINES)
