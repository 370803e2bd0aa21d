"""Official draws kept for sets drawn again (harness/kbtask.py: SetCache, issue 29): a set taken from
the cache holds the bits a draw gives, for every distribution, and leaves the CPU generator where a
draw leaves it; what the caller gets is never the cache's memory; other sizes, another task object
or a full cache draw again."""
from __future__ import annotations

import pytest
import torch

from kbrepro.harness import kbtask

TASK = b'''import torch
import torch.nn as nn

class Model(nn.Module):
    pass

batch_size = 4
n = 8

def get_inputs():
    return [torch.rand(batch_size, n), torch.randint(0, 5, (batch_size,)), n, [1, 2]]

def get_init_inputs():
    return []
'''


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor):
            assert x.dtype == y.dtype and torch.equal(x, y)
        else:
            assert x == y


@pytest.mark.parametrize("dist", ["official", "normal", "normal_x100"])
def test_a_hit_gives_the_bits_and_the_generator_state_of_a_draw(dist):
    task = kbtask.load_task(TASK)
    cache = kbtask.SetCache()
    kbtask.draw_inputs(task, 3, "official", "cpu", cache)  # the entry
    torch.manual_seed(12345)  # anything in between
    got = kbtask.draw_inputs(task, 3, dist, "cpu", cache)
    after_hit = torch.rand(4)
    want = kbtask.draw_inputs(task, 3, dist, "cpu")
    after_draw = torch.rand(4)
    _same(got, want)
    assert torch.equal(after_hit, after_draw)


def test_the_caller_never_gets_the_caches_memory():
    task = kbtask.load_task(TASK)
    cache = kbtask.SetCache()
    a = kbtask.draw_inputs(task, 1, "official", "cpu", cache)
    a[0].zero_()
    a[1].fill_(9)
    a[3].append(3)
    b = kbtask.draw_inputs(task, 1, "official", "cpu", cache)
    _same(b, kbtask.draw_inputs(task, 1, "official", "cpu"))


def test_other_sizes_another_task_or_a_full_cache_draw_again():
    task = kbtask.load_task(TASK)
    cache = kbtask.SetCache()
    kbtask.draw_inputs(task, 1, "official", "cpu", cache)
    kbtask.apply_overrides(task, {"batch_size": 2})
    assert kbtask.draw_inputs(task, 1, "official", "cpu", cache)[0].shape == (2, 8)
    assert len(cache.entries) == 2
    other = kbtask.load_task(TASK)
    assert cache.get(other, 1) is None
    tiny = kbtask.SetCache(max_bytes=100)
    kbtask.draw_inputs(other, 1, "official", "cpu", tiny)
    assert tiny.entries == []  # 128 + 32 bytes do not fit
    small = kbtask.SetCache(max_bytes=200)
    kbtask.draw_inputs(other, 1, "official", "cpu", small)
    kbtask.draw_inputs(other, 2, "official", "cpu", small)
    assert [e[2] for e in small.entries] == [1]  # the first stays; the second does not fit beside it


def test_a_value_deepcopy_refuses_is_given_as_drawn_and_never_kept():
    task = kbtask.load_task(TASK.replace(b"return [torch.rand(batch_size, n)", b"return [(i for i in range(3)), torch.rand(batch_size, n)"))
    cache = kbtask.SetCache()
    xs = kbtask.draw_inputs(task, 1, "official", "cpu", cache)
    assert cache.entries == [] and list(xs[0]) == [0, 1, 2]
