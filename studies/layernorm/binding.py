"""Binding of the LayerNorm study (KernelBench level 1, task 40) to the study engine.

The task's ``Model(normalized_shape)`` is one ``nn.LayerNorm``; our kernels
(``layernorm.cu``) replace its whole forward, so there are no scopes and no controls of our
own. Each call of the program is two launches on the current stream:

* ``ln_partial``, grid ``(rows, chunks)``, 256 threads: per row and chunk, the FP64 sum and
  sum of squares, into a ``(rows, chunks, 2)`` float64 buffer;
* ``ln_apply``, the same grid: every block re-combines its row's partials into mean and
  rstd, then writes ``(x - mean) * rstd * weight + bias`` over its chunk.

``rows`` is the product of the input's leading dimensions, ``n`` the number of elements of
the normalized shape; :func:`geometry` gives ``chunk`` and ``chunks``.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from kbrepro.errors import UsageError
from kbrepro.harness.plugin import SizedCase, StudyBinding, WitnessRun

#: threads per block of both kernels (``LN_THREADS`` in layernorm.cu; they must agree)
THREADS = 256
#: most chunks per row: every ``ln_apply`` block re-reads all partials of its row
#: (16 bytes per chunk), so this bounds that re-read to 4 KiB per block
MAX_CHUNKS = 256
#: fewest elements per chunk (16 per thread), so that small rows are not spread thin
MIN_CHUNK = 4096
#: CUDA's limit on gridDim.y (the chunk index); gridDim.x (the row) allows 2**31 - 1
_MAX_GRID_Y = 65535
_MAX_GRID_X = 2 ** 31 - 1
#: keys of ``extra_shapes[].size`` in study.yaml
SIZE_KEYS = ("batch", "features", "dim1", "dim2")


def geometry(n: int) -> tuple[int, int]:
    """``(chunk, chunks)`` for rows of ``n`` elements: at most :data:`MAX_CHUNKS` chunks of
    at least :data:`MIN_CHUNK` elements (fewer for a short row), ``chunk`` a multiple of
    :data:`THREADS`, ``chunks = ceil(n / chunk)`` so that no chunk is empty. For
    n = 64 * 256 * 256: chunk 16384, 256 chunks; n = 8: chunk 256, 1 chunk."""
    n = int(n)
    if n < 1:
        raise UsageError("LayerNorm rows must have at least one element", "check the normalized shape")
    want = min(MAX_CHUNKS, -(-n // MIN_CHUNK))  # ceil(n / MIN_CHUNK), at least 1
    per_chunk = -(-n // want)
    chunk = -(-per_chunk // THREADS) * THREADS
    return chunk, -(-n // chunk)


def size_label(size: Mapping[str, int]) -> str:
    """The id suffix of an extra shape, e.g. ``B4F32D128D128``."""
    b, f, d1, d2 = _size(size)
    return f"B{b}F{f}D{d1}D{d2}"


def _size(size: Mapping[str, int]) -> tuple[int, int, int, int]:
    if sorted(size) != sorted(SIZE_KEYS):
        raise UsageError(f"an extra shape of the LayerNorm study has size keys {sorted(size)}",
                         f"give exactly {', '.join(SIZE_KEYS)} (input (batch, features, dim1, dim2), "
                         "normalized over (features, dim1, dim2))")
    return tuple(int(size[k]) for k in SIZE_KEYS)  # type: ignore[return-value]


def run_layernorm(ctx, variant: str, x, weight, bias, eps: float, normalized_shape: Sequence[int]):
    """``variant``'s LayerNorm of ``x`` over its trailing ``normalized_shape``: a new tensor
    like ``x``. ``x``, ``weight``, ``bias``: contiguous float32 CUDA tensors (``weight`` and
    ``bias`` of the normalized shape). Launches on the current stream (graph-capturable);
    allocates the partials and the output with torch on each call."""
    import numpy as np
    import torch

    from kbrepro.kernels.launch import check_float32_cuda

    x = x.contiguous()
    check_float32_cuda(x, "the LayerNorm input")
    check_float32_cuda(weight, "the LayerNorm weight")
    check_float32_cuda(bias, "the LayerNorm bias")
    ns = tuple(int(d) for d in normalized_shape)
    if tuple(x.shape[x.dim() - len(ns):]) != ns or tuple(weight.shape) != ns or tuple(bias.shape) != ns:
        raise UsageError(f"LayerNorm over {ns}: input {tuple(x.shape)}, weight {tuple(weight.shape)}, "
                         f"bias {tuple(bias.shape)} do not fit", "the trailing input dimensions must be the "
                         "normalized shape")
    n = 1
    for d in ns:
        n *= d
    y = torch.empty_like(x)
    if x.numel() == 0:
        return y
    rows = x.numel() // n
    chunk, chunks = geometry(n)
    if rows > _MAX_GRID_X or chunks > _MAX_GRID_Y:
        raise UsageError(f"{rows} rows of {n} elements exceed the kernels' grid", "use fewer rows")
    partials = torch.empty((rows, chunks, 2), dtype=torch.float64, device=x.device)
    grid, block = (rows, chunks, 1), (THREADS, 1, 1)
    ks = ctx.kernels[variant]
    dev = x.device.index if x.device.index is not None else ctx.device_index
    ks.launch("ln_partial", grid, block, (x.data_ptr(), partials.data_ptr(), np.int64(n), np.int64(chunk)),
              device_index=dev)
    ks.launch("ln_apply", grid, block,
              (x.data_ptr(), partials.data_ptr(), weight.data_ptr(), bias.data_ptr(), y.data_ptr(),
               np.int64(n), np.int64(chunk), np.float32(eps)), device_index=dev)
    return y


class LayerNormBinding(StudyBinding):
    """KernelBench L1/40 with the whole ``nn.LayerNorm`` forward replaced by our kernels."""

    def kernel_names(self, study) -> tuple[str, ...]:
        return ("ln_partial", "ln_apply")

    def size_label(self, size: Mapping[str, int]) -> str:
        return size_label(size)

    def candidate(self, ctx, task: int, variant: str, model):
        ln = model.ln

        def fn(x):
            return run_layernorm(ctx, variant, x, ln.weight, ln.bias, ln.eps, ln.normalized_shape)

        return fn

    def model_at(self, ctx, task: int, module, size: Mapping[str, int], seed: int) -> SizedCase:
        import torch

        b, f, d1, d2 = _size(size)
        torch.manual_seed(seed)
        model = module.Model((f, d1, d2)).cuda().eval()
        x = torch.rand(b, f, d1, d2, device="cuda")
        return SizedCase(model=model, inputs=(x,), label=size_label(size),
                         case={"shape_B_F_D1_D2": [b, f, d1, d2]}, shape=(b, f, d1, d2))

    def witness(self, ctx, task: int, module, inputs: Sequence[float]) -> WitnessRun:
        import torch

        vals = [float(v) for v in inputs]
        models = {dev: module.Model((len(vals),)).to(dev).eval() for dev in ("cpu", "cuda")}

        def make(device: str):
            return torch.tensor([vals], dtype=torch.float32, device=device)

        def reference(x):
            return models["cuda" if x.is_cuda else "cpu"](x)

        def candidate(variant: str):
            ln = models["cuda"].ln
            return run_layernorm(ctx, variant, make("cuda"), ln.weight, ln.bias, ln.eps, ln.normalized_shape)

        return WitnessRun(make=make, reference=reference, candidate=candidate, description=(
            f"LayerNorm over one row of {len(vals)} subnormal or zero values (weight 1, bias 0, eps 1e-5): "
            "with subnormals kept the mean is subnormal, the variance underflows, rstd = 1/sqrt(eps) and the "
            "outputs (x - mean) * rstd are small normal floats; with subnormals flushed every input and the "
            "mean read as zero and every output is 0"))


BINDING = LayerNormBinding()
