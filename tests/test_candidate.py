"""One checking pass of a candidate (harness/candidate.py) on CPU: the honest candidate
passes every named check; each cheat is caught by the check meant for it."""
from __future__ import annotations

from kbrepro.harness.candidate import check_candidate

TASK = b'''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n))
    def forward(self, x):
        return torch.relu(x) * self.w

def get_inputs():
    return [torch.randn(512, 1024)]

def get_init_inputs():
    return [1024]
'''
HEAD = b'''import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n))
'''
HONEST = HEAD + b'''    def forward(self, x):
        return torch.clamp(x, min=0) * self.w
'''
ZEROS = HEAD + b'''    def forward(self, x):
        return torch.zeros_like(x)
'''
CACHE_BY_SHAPE = HEAD + b'''        self.memo = {}
    def forward(self, x):
        k = tuple(x.shape)
        if k not in self.memo:
            self.memo[k] = torch.clamp(x, min=0) * self.w
        return self.memo[k]
'''
EDITS_ITS_INPUT = HEAD + b'''    def forward(self, x):
        y = torch.clamp(x, min=0) * self.w
        x.zero_()  # would make a reference computed afterwards on the same tensor agree with zeros
        return y
'''


def _verdicts(src, task=TASK):
    rep = check_candidate(src, task, seed=3, sets=3, timeout_s=120)
    return rep, {v.name: v.passed for v in rep.verdicts}


def test_the_honest_candidate_passes_every_check():
    rep, v = _verdicts(HONEST)
    assert rep.passed and v == {"ran": True, "official_allclose": True, "bit_identical": True,
                                "follows_fresh_inputs": True, "discriminates": True, "per_call_times_consistent": True}
    assert rep.to_doc()["passed"] is True and len(rep.run.times_ms) == 5


def test_zeros_fail_the_official_check():
    rep, v = _verdicts(ZEROS)
    assert not rep.passed and v["official_allclose"] is False and v["bit_identical"] is None


def test_a_cache_keyed_by_shape_answers_with_a_stale_output():
    rep, v = _verdicts(CACHE_BY_SHAPE)
    assert v["official_allclose"] is False and v["follows_fresh_inputs"] is False
    detail = next(x.detail for x in rep.verdicts if x.name == "follows_fresh_inputs")
    assert "another set's inputs" in detail


def test_editing_its_inputs_cannot_move_the_reference_computed_on_our_own_copies():
    rep, v = _verdicts(EDITS_ITS_INPUT)
    assert rep.passed and v["official_allclose"] is True


def test_a_task_whose_outputs_cannot_discriminate_fails_even_when_zeros_pass():
    tiny = TASK.replace(b"return torch.relu(x) * self.w", b"return torch.relu(x) * self.w * 1e-7")
    rep, v = _verdicts(ZEROS, tiny)
    assert v["official_allclose"] is True and v["discriminates"] is False and not rep.passed
