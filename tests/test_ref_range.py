"""The reference's finite range, a chunk at a time (harness/candidate_calls.py: ref_range): the same
numbers as over the whole tensor at once, whatever the chunk size, for NaN, infinities, 0-dim and
half-precision outputs."""
from __future__ import annotations

import pytest
import torch

from kbrepro.harness import candidate_calls as cc


def _whole(ref):
    r = ref.detach().double()
    f = r[torch.isfinite(r)]
    return [float(f.min()), float(f.max())] if f.numel() else [None, None]


@pytest.mark.parametrize("chunk", [7, 1 << 24])
def test_range_is_the_whole_tensors(monkeypatch, chunk):
    monkeypatch.setattr(cc, "CHUNK_ELEMENTS", chunk)
    x = torch.randn(1000)
    x[::13] = float("nan")
    x[5] = float("inf")
    for t in (x, torch.randn(3, 5).half(), torch.tensor(3.0), torch.tensor([float("nan"), float("-inf")]),
              torch.tensor([-1e30, 2.0, 1e-30])):
        assert cc.ref_range(t) == _whole(t)
