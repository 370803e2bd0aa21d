"""The named checks against cheating candidates (harness/cheats.py), on CPU with fake
candidates: each cheat is caught by the check meant for it, and an honest candidate passes."""
from __future__ import annotations

import pytest
import torch

from kbrepro.harness import cheats as C

ATOL = RTOL = 1e-4


def ref(x):
    return torch.relu(x) * 2.0


def honest(x):
    return torch.clamp(x, min=0) * 2.0


def _inputs(i):
    g = torch.Generator().manual_seed(100 + i)
    return (torch.randn(64, 32, generator=g),)


def _close(a, b):
    return isinstance(b, torch.Tensor) and torch.allclose(a, b, atol=ATOL, rtol=RTOL)


class _CacheBy:
    """A candidate that remembers its first answer per key (id, data pointer or shape)."""

    def __init__(self, key):
        self.key, self.memo = key, {}

    def __call__(self, x):
        k = self.key(x)
        if k not in self.memo:
            self.memo[k] = honest(x)
        return self.memo[k]


@pytest.mark.parametrize("key", [id, lambda x: x.data_ptr(), lambda x: tuple(x.shape)],
                         ids=["id", "data_ptr", "shape"])
def test_a_cache_keyed_by_identity_pointer_or_shape_is_caught(key):
    v = C.follows_fresh_inputs(_CacheBy(key), ref, _inputs, _close)
    assert v.passed is False and "stale output" in v.detail


def test_an_honest_candidate_follows_fresh_inputs():
    v = C.follows_fresh_inputs(honest, ref, _inputs, _close)
    assert v.passed is True and v.name == "follows_fresh_inputs"


def test_a_cache_keyed_by_content_passes_fresh_inputs_and_is_left_to_timing():
    """Content-keyed caching answers correctly; only per-call timing on fresh inputs shows it."""
    v = C.follows_fresh_inputs(_CacheBy(lambda x: C.tensor_digest(x)), ref, _inputs, _close)
    assert v.passed is True

    # timed on fresh inputs: the content cache never hits, the calls are alike
    assert C.per_call_times_consistent([1.0, 1.02, 0.98, 0.99, 1.05, 1.01]).passed is True
    # timed on repeated inputs: most calls answered from the cache
    assert C.per_call_times_consistent([0.01, 0.01, 1.0, 0.01, 0.01, 0.01, 1.1, 0.01]).passed is False


def test_batch_and_skip_shows_in_per_call_times_and_one_hiccup_does_not():
    assert C.per_call_times_consistent([4.0, 0.01, 0.01, 0.01, 4.1, 0.01, 0.01, 0.01]).passed is False
    assert C.per_call_times_consistent([1.0] * 10 + [12.0]).passed is True
    assert C.per_call_times_consistent([1.0, 1.0]).passed is None


def test_zeroing_the_inputs_is_caught():
    x = _inputs(0)[0]
    before = [C.tensor_digest(x)]

    def zeroing(t):
        out = honest(t)
        t.zero_()
        return out
    zeroing(x)
    v = C.inputs_unchanged(before, [x])
    assert v.passed is False and "[0] changed" in v.detail
    y = _inputs(1)[0]
    b = [C.tensor_digest(y)]
    honest(y)
    assert C.inputs_unchanged(b, [y]).passed is True


def test_the_digest_sees_one_flipped_bit_and_the_layout():
    x = torch.zeros(4, 4)
    d = C.tensor_digest(x)
    y = x.clone()
    y.view(torch.int32)[1, 2] = 1  # the smallest subnormal
    assert C.tensor_digest(y) != d
    assert C.tensor_digest(x.t()) != C.tensor_digest(x.t().contiguous())  # same bytes, other strides


class _Lazy(torch.Tensor):
    """A tensor subclass whose comparisons could lie inside the checker."""


def test_a_lazy_or_subclassed_output_is_caught():
    r = ref(_inputs(0)[0])
    lazy = honest(_inputs(0)[0]).as_subclass(_Lazy)
    v = C.output_is_plain_tensor(r, lazy)
    assert v.passed is False and "_Lazy" in v.detail
    assert C.output_is_plain_tensor(r, r.double()).passed is False
    assert C.output_is_plain_tensor(r, r[:3]).passed is False
    w = torch.ones(3, requires_grad=True)
    assert "autograd" in C.output_is_plain_tensor(w.detach() * 2, w * 2).detail
    assert C.output_is_plain_tensor(r, honest(_inputs(0)[0])).passed is True


def test_outputs_that_cannot_discriminate_are_flagged():
    tiny = torch.full((8,), 5e-5)
    v = C.discriminates(tiny, ATOL, RTOL)
    assert v.passed is False and "zeros pass" in v.detail
    const = torch.full((8,), 3.0) + torch.linspace(0, 1e-4, 8)
    assert C.discriminates(const, ATOL, RTOL).passed is False
    assert C.discriminates(ref(_inputs(0)[0]), ATOL, RTOL).passed is True
    assert C.discriminates(torch.tensor([float("nan")]), ATOL, RTOL).passed is None
    # the all-zero candidate the first case lets through
    assert torch.allclose(tiny, torch.zeros(8), atol=ATOL, rtol=RTOL)


def test_an_output_that_reads_unwritten_memory_changes_with_the_poison():
    x = _inputs(0)[0]
    good = [honest(x) for _ in range(2)]
    assert C.deterministic_under_poison(good).passed is True
    # torch.empty picking up freed memory: emulated by what the poison left there
    leaky = [torch.where(x > 0, honest(x), torch.full_like(x, p)) for p in (float("nan"), -1.0)]
    v = C.deterministic_under_poison(leaky)
    assert v.passed is False and "[1]" in v.detail
    assert C.deterministic_under_poison(good[:1]).passed is None


def test_only_library_kernels_means_no_custom_kernel():
    torch_only = ["void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
                  "ampere_sgemm_128x64_nn", "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32"]
    v = C.custom_kernel_ran(torch_only)
    assert v.passed is False and "only library kernels" in v.detail
    assert C.custom_kernel_ran(torch_only + ["fused_relu_scale_kernel"]).passed is True
    assert C.custom_kernel_ran(["triton_poi_fused_relu_0"]).passed is False  # Inductor's own, not the candidate's
    assert C.custom_kernel_ran(["_my_triton_relu"]).passed is True
    assert C.custom_kernel_ran([]).passed is False


def test_precision_flags_turned_on_by_the_candidate_are_caught():
    before = {"allow_tf32_matmul": False, "float32_matmul_precision": "highest"}
    assert C.precision_flags_unchanged(before, dict(before)).passed is True
    v = C.precision_flags_unchanged(before, {**before, "allow_tf32_matmul": True})
    assert v.passed is False and "allow_tf32_matmul False -> True" in v.detail


def test_a_speed_past_the_memory_bandwidth_is_caught():
    # 8192 x 8192 float32 read and written: 0.54 GB; at 4000 GB/s at least 0.134 ms
    nbytes = 2 * 8192 * 8192 * 4
    assert C.within_roofline(nbytes, 0.20, 4000.0).passed is True
    v = C.within_roofline(nbytes, 0.0025, 4000.0)  # the side-stream cheat's apparent time
    assert v.passed is False and "faster than memory allows" in v.detail
    assert C.within_roofline(nbytes, 0.0, 4000.0).passed is None


def test_verdicts_are_frozen_and_serialise():
    v = C.precision_flags_unchanged({}, {})
    assert v.to_doc() == {"name": "precision_flags_unchanged", "passed": True, "detail": "precision settings unchanged"}
    with pytest.raises(Exception):
        v.passed = False
