"""The checksums of timing protocol 2 (harness/fresh.py, model/protocol.py) on the CPU: an honest
output agrees with the reference's on the same set, and another set's output, a partly computed
one, and a zero output whose weighted sum is cancelled by two huge elements do not; the parent's
hold of every invocation (harness/candidate_timing.py) counts them and samples them as the
verifier derives them again (model/timing_rules.py)."""
from __future__ import annotations

import random

import numpy as np
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
    ft._ev_sync, ft._ev_elapsed = _Event.synchronize, _Event.elapsed_time
    pool = ft.draw_pool(_Task, 5, 3)
    ms, ys = ft.region(lambda x: x + 1, pool, 3)
    assert marks == [] and len(ys) == 3 and ms == pytest.approx(1 / 3)
    ft.region(lambda x: x + 1, pool, 3, graph_steps=True)
    assert marks == [1, 1, 1]
    assert ct.GRAPHED == ("compile_max_autotune",) and set(ct.GRAPHED) <= set(protocol.BASELINES)


def test_an_output_of_another_shape_fails_whole_and_the_held_reply_is_one_sized_frame():
    """An output whose chunks are not the first output's gets a NaN row (it fails; its worst is
    unbounded); the child's "held" reply carries the sums as one float64 frame whose size
    the reply's check ties to its counts."""
    from kbrepro.harness import wire

    ft = _ft()
    pool = ft.draw_pool(_Task, 13, 3)
    ref_out = [x[0] * 2 for x in pool]
    ref, sizes = ft.checksums(ref_out, 4)
    outs = [y.clone() for y in ref_out]
    outs[1] = outs[1][:, :1000]
    sums, s = ft.checksums(outs, 4)
    assert s == sizes and sums.shape == ref.shape and bool(np.isnan(sums[1]).all())
    held = ct._held({"checksums": sums, "chunk_sizes": s, "written_by": ft.written_by(outs)}, ref, sizes, *TOL,
                    random.Random(1))
    assert held["failing"] == 1 and held["worst"] == 1e300 and [x[0] for x in held["sample"] if x[3] is None] == [1]
    k = len(sizes)
    ok = {"ok": True, "outputs": 3, "chunk_sizes": sizes, "written_by": [0, 1, 2], "frames": [16 * 3 * k]}
    assert wire.shape_problem("held", ok) is None
    for bad in ({"frames": [16 * 3 * k - 8]}, {"frames": [16 * 3 * k, 8]}, {"written_by": [0, 1]},
                {"written_by": [0, 1, 3]}, {"outputs": 2}, {"chunk_sizes": [1.5]}):
        assert wire.shape_problem("held", {**ok, **bad}), bad


def test_held_rows_are_those_of_one_chunk_at_a_time():
    """_held decides each row over all its chunks at once; its counts, worst and sample rows
    are those a chunk-by-chunk hold with protocol.checksum_agrees gives (random rows with
    stale, NaN and shifted chunks)."""
    g = np.random.default_rng(5)
    sizes = [65536, 65536, 100]
    for trial in range(200):
        n = int(g.integers(1, 12))
        ref = g.normal(size=(n, 3, 2)) * 10
        ref[..., 1] = np.abs(ref[..., 1]) + 100
        cand = ref.copy()
        for _ in range(int(g.integers(0, 4))):
            i, k = int(g.integers(n)), int(g.integers(3))
            cand[i, k, int(g.integers(2))] += float(g.choice([1e-6, 50.0, np.nan, np.inf]))
        if trial % 7 == 0:
            ref[int(g.integers(n)), int(g.integers(3)), 0] = np.nan
        wb = [int(x) for x in g.integers(0, n + (trial % 5 == 0), size=n)]
        held = ct._held({"checksums": cand, "chunk_sizes": sizes, "written_by": wb}, ref, sizes, *TOL,
                        random.Random(trial))
        failing = 0
        for i, w in enumerate(wb):
            if w >= n:
                failing += 1
                continue
            row = [protocol.checksum_agrees([None if not np.isfinite(v) else v for v in cand[i, k]],
                                            [None if not np.isfinite(v) else v for v in ref[w, k]], sizes[k], *TOL)
                   for k in range(3)]
            failing += False in row
        assert held["failing"] == failing and held["n"] == n
        assert [protocol.held_row_agrees(x, *TOL) for x in held["sample"]].count(False) == min(failing, ct.SAMPLE_FAILING)


def test_outputs_without_chunks_fail_whole_and_never_raise():
    """A reference without any tensor (no chunks) holds nothing: every invocation fails whole
    (chunk -1) and the hold itself never raises (that would be a harness error)."""
    held = ct._held({"checksums": np.zeros((3, 0, 2)), "chunk_sizes": [], "written_by": [0, 1, 2]}, np.zeros((3, 0, 2)),
                    [], *TOL, random.Random(0))
    assert held["failing"] == 3 and held["n"] == 3 and all(x[2] == -1 for x in held["sample"])


class _Mixed:
    """A task whose inputs mix a random tensor of an odd size (12 bytes a set), a fixed one and
    a random integer index, as KernelBench's get_inputs() do."""

    @staticmethod
    def get_inputs():
        return [torch.randn(3), torch.arange(4.0), torch.randint(0, 10, (2, 5))]


class _Scalar:
    """A task with a Python number among its inputs (KernelBench 1/5): vmap cannot draw it."""

    @staticmethod
    def get_inputs():
        return [torch.rand(8), 3.5]


def test_a_batched_draw_gives_each_set_new_values_in_allocations_of_its_own():
    """harness/fresh.py draws the sets of a request with one vmapped get_inputs(): the same sets
    in any process, every random input new in each set, a fixed input copied per set, each
    tensor of each set an allocation of its own (nothing of another set reachable from it: no
    view of a shared storage) with the layout, dtype and requires_grad of a plain call."""
    a, b = _ft().draw_pool(_Mixed, 3, 5), _ft().draw_pool(_Mixed, 3, 5)
    ptrs = set()
    for i, (s, t) in enumerate(zip(a, b)):
        assert all(torch.equal(x, y) for x, y in zip(s, t))
        for x, like in zip(s, _Mixed.get_inputs()):
            assert x.shape == like.shape and x.dtype == like.dtype and x.stride() == like.stride()
            assert x._base is None and x.storage_offset() == 0
            assert x.untyped_storage().nbytes() == x.numel() * x.element_size()
            ptrs.add(x.data_ptr())
        assert torch.equal(s[1], torch.arange(4.0))
        if i:
            assert not torch.equal(s[0], a[0][0])
    assert len(ptrs) == 15
    assert len({tuple(s[2].flatten().tolist()) for s in a}) > 1


def test_the_parents_views_hold_the_candidates_values_at_aligned_offsets():
    """draw_pool(separate=False), the parent's own arms: the same values as the candidate's
    separate allocations, each set's tensors views at SET_ALIGN-byte offsets of their own
    (a 12-byte input padded), with the plain call's strides."""
    from kbrepro.harness import fresh

    own, views = _ft().draw_pool(_Mixed, 8, 6), _ft().draw_pool(_Mixed, 8, 6, separate=False)
    for s, v in zip(own, views):
        assert all(torch.equal(x, y) for x, y in zip(s, v))
        for x, like in zip(v, _Mixed.get_inputs()):
            assert x.stride() == like.stride()
            if x._base is not None:
                assert (x.storage_offset() * x.element_size()) % fresh.SET_ALIGN == 0
    assert views[1][0]._base is not None  # the random input: views
    assert len({x[0].data_ptr() for x in views}) == 6


class _Outside:
    """Values drawn outside torch (numpy): vmap would give every set the same ones."""

    @staticmethod
    def get_inputs():
        return [torch.from_numpy(np.random.rand(8).astype("float32")), torch.rand(8)]


class _Layouts:
    """A channels-last input (kept) beside one that needs grad."""

    @staticmethod
    def get_inputs():
        return [torch.rand(2, 3, 4, 5).to(memory_format=torch.channels_last), torch.rand(6).requires_grad_()]


def test_values_from_outside_torch_or_odd_layouts_are_drawn_as_a_plain_call_draws_them():
    pool = _ft().draw_pool(_Outside, 4, 5)
    assert len({tuple(p[0].tolist()) for p in pool}) == 5  # set by set: numpy's values differ
    lay = _ft().draw_pool(_Layouts, 4, 3)
    like = _Layouts.get_inputs()
    for s in lay:
        assert s[0].stride() == like[0].stride() and s[1].requires_grad
    assert not torch.equal(lay[0][0], lay[1][0])


def test_a_process_that_makes_warnings_errors_draws_the_same_sets():
    """A candidate's module can make warnings errors in its process: vmap's warnings must not
    turn the child's draw into n plain calls while the parent's is batched."""
    import warnings

    want = _ft().draw_pool(_Task, 21, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = _ft().draw_pool(_Task, 21, 3)
    assert all(torch.equal(x[0], y[0]) for x, y in zip(want, got))


def test_a_task_vmap_cannot_draw_is_drawn_set_by_set_as_before():
    """A Python number among the inputs: the sets come from n calls after the same seed (the
    draw before the batched one), identical in any process."""
    pool = _ft().draw_pool(_Scalar, 9, 4)
    torch.manual_seed(9)
    want = [_Scalar.get_inputs() for _ in range(4)]
    assert all(torch.equal(p[0], w[0]) and p[1] == w[1] for p, w in zip(pool, want))


def test_a_batched_draw_splits_by_bytes_the_same_way_in_any_process(monkeypatch):
    """The sets past the first two come in vmapped calls of DRAW_CHUNK_BYTES at most, a split
    that depends only on the bytes of a set: two processes draw the same sets."""
    from kbrepro.harness import fresh

    monkeypatch.setattr(fresh, "DRAW_CHUNK_BYTES", 3 * 4 * 70000 * 4)
    a, b = _ft().draw_pool(_Task, 17, 9), _ft().draw_pool(_Task, 17, 9)
    assert len(a) == 9 and all(torch.equal(x[0], y[0]) for x, y in zip(a, b))
    assert len({x[0].data_ptr() for x in a}) == 9
    assert len({float(x[0].sum()) for x in a}) == 9


def test_a_set_as_large_as_a_draw_chunk_is_drawn_call_by_call(monkeypatch):
    """A set of DRAW_CHUNK_BYTES or more is drawn by n plain calls after the seed: vmap would
    hold its two template sets, the batch and the copies at once (four 16 GiB sets of
    KernelBench 1/45 ran the H200 out of memory). Two processes still draw the same sets."""
    from kbrepro.harness import fresh

    monkeypatch.setattr(fresh, "DRAW_CHUNK_BYTES", 4 * 70000 * 4)
    pool = _ft().draw_pool(_Task, 23, 3)
    torch.manual_seed(23)
    want = [_Task.get_inputs() for _ in range(3)]
    assert all(torch.equal(p[0], w[0]) for p, w in zip(pool, want))
    assert len({x[0].data_ptr() for x in pool}) == 3


def test_the_timer_reads_no_timed_output_through_a_subclass_and_keeps_its_own_synchronisations(monkeypatch):
    """A red-team round's candidates (2026-12-05): a timed output that is a tensor subclass
    (its methods run the candidate's code, which could compute the values when first read) is
    not read, its row a NaN that fails; and a wrapper the candidate puts on torch's
    synchronisations or the event's readings after the timer was made is never called by it."""
    import torch

    from kbrepro.harness.fresh import FreshTimer

    ft = FreshTimer(torch, "cpu")

    class Lazy(torch.Tensor):
        pass

    x = torch.randn(100)
    assert ft.plain(x) and ft.plain((x, x)) and not ft.plain(x.as_subclass(Lazy)) and not ft.plain((x, x.as_subclass(Lazy)))
    sums, sizes = ft.checksums([x, None, x.clone()], 3)
    assert sizes == [100] and np.isnan(sums[1]).all() and np.isfinite(sums[0]).all() and (sums[0] == sums[2]).all()

    def boom(*a, **k):
        raise AssertionError("the candidate's wrapper ran")

    before = (ft._ev_sync, ft._ev_elapsed, ft._sync)
    monkeypatch.setattr(torch.cuda.Event, "synchronize", boom)
    monkeypatch.setattr(torch.cuda.Event, "elapsed_time", boom)
    monkeypatch.setattr(torch.cuda, "synchronize", boom)
    assert boom not in (ft._ev_sync, ft._ev_elapsed, ft._sync) and before == (ft._ev_sync, ft._ev_elapsed, ft._sync)


def test_the_held_request_reads_the_timed_outputs_before_it_frees_the_spent_sets():
    """cheat_defer_until_pool_freed: a finalizer on an input (the candidate's code) wrote the
    timed outputs when the "held" request freed the spent sets, before it read them. The
    request now reads first: the checksums are those of what the timed calls returned."""
    import weakref

    import torch

    from kbrepro.harness.candidate_server import Server

    srv = Server.__new__(Server)  # the request's own state only (no pipe, no child)
    srv.fresh_timer = ft = FreshTimer(torch, "cpu")
    outs = [torch.zeros(100) for _ in range(3)]

    class Inputs:
        pass

    sets = [Inputs() for _ in range(3)]
    for s, y in zip(sets, outs):
        weakref.finalize(s, y.fill_, 1.0)  # "computes" the output once its inputs are freed
    srv.pool, srv.kept = sets, outs
    del sets, s
    header, frames = srv.held_outputs({"weight_seed": 3})
    got = np.frombuffer(frames[0], dtype="<f8").reshape(3, -1, 2)
    want, _ = ft.checksums([torch.zeros(100) for _ in range(3)], 3)
    assert srv.pool == [] and (outs[0] == 1).all()  # freed after the reading
    assert np.array_equal(got, want.astype("<f8")) and header["outputs"] == 3


def test_a_timed_request_idles_the_whole_device_before_it_replies():
    """cheat_slow_baselines: a spin left on a side stream of the candidate's own slowed the
    parent's baselines, timed next. "time_fresh" now synchronises the device (every stream)
    after its region and before its reply, so such work lands inside the parent's clock."""
    import gc

    import torch

    from kbrepro.harness.candidate_server import Server

    calls = []

    class Timer:
        def region(self, fn, pool, n, flush, rng=None):
            calls.append("region")
            return 0.5, [fn(*s) for s in pool[:n]]

        def _sync(self):
            calls.append("device idle")

    srv = Server.__new__(Server)
    srv.torch, srv.gc, srv.gc_after, srv.flush_buf = torch, gc, False, None
    srv.fresh_timer, srv.models, srv.pool = Timer(), {"main": lambda x: x + 1}, [(torch.zeros(3),)] * 2
    try:
        assert srv.time_fresh({"n": 2}) == {"times_ms": [0.5]}
    finally:
        gc.enable()
    assert calls == ["region", "device idle"] and len(srv.kept) == 2
