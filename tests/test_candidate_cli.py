"""make_bundle.py's candidate options, as a new user gets them wrong: each mistake is one
``error:`` line with the documented exit code, found before any work, and nothing is left
behind; packing a candidate results folder refuses a caught candidate unless asked."""
from __future__ import annotations

import pytest

from conftest import kernelbench_from_example
from test_cli_misuse import cli, one_error, tree

HONEST = "import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"


@pytest.fixture
def cand(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    p = tmp_path / "mine.py"
    p.write_text(HONEST)
    return p


@pytest.mark.parametrize("args,code,fragment", [
    (["--task", "1/40"], 2, "needs --candidate FILE and --task"),
    (["--candidate", "{c}"], 2, "needs --candidate FILE and --task"),
    (["--candidate", "{c}", "--task", "1/99999"], 2, "neither LEVEL/TASK"),
    (["--candidate", "{c}", "--task", "9/1"], 2, "no level 9 task 1"),
    (["--candidate", "{c}", "--task", "KernelBench/level1/nope.py"], 2, "neither LEVEL/TASK"),
    (["--candidate", "{c}", "--task", "1/40", "--study", "studies/layernorm"], 2, "not apply to KernelBench"),
    (["--candidate", "{c}", "--task", "1/40", "--size", "batch_size"], 2, "NAME=VALUE"),
    (["--candidate", "{c}", "--task", "1/40", "--extra-shape", "batch_size=x"], 2, "NAME=VALUE"),
    (["--candidate", "{c}", "--candidate", "{c}", "--candidate", "{c}", "--task", "1/40", "--task", "1/19"], 2,
     "3 --candidate and 2 --task"),
    (["--candidate", "{c}", "--task", "1/40", "--profile", "extended"], 2, "unknown profile 'extended' for candidates"),
    (["--candidate", "missing.py", "--task", "1/40"], 3, "--candidate"),
    (["--candidate", "{c}", "--task", "1/40"], 4, "no CUDA GPU"),
])
def test_each_candidate_mistake_is_one_line_with_its_exit_code_and_nothing_is_written(cand, tmp_path, args, code,
                                                                                        fragment):
    before = tree(tmp_path)
    res = cli("make", *[a.replace("{c}", str(cand)) for a in args])
    one_error(res, code, fragment)
    assert tree(tmp_path) == before


def test_from_results_of_candidates_takes_no_run_options(cand, tmp_path):
    res_dir = tmp_path / "res" / "results"
    res_dir.mkdir(parents=True)
    (res_dir / "candidates.json").write_text("{}")
    one_error(cli("make", "--from-results", tmp_path / "res", "--candidate", cand), 2, "--candidate does not apply to packing")
    # an unreadable candidates.json: exit 3 or 1 (invalid), one line, nothing written
    res = cli("make", "--from-results", tmp_path / "res", "--out", tmp_path / "x.tar")
    assert res.code in (1, 3) and "Traceback" not in res.err and not (tmp_path / "x.tar").exists()


@pytest.mark.parametrize("args,fragment", [
    (["--size", "batch_size=0"], "positive integer"),
    (["--size", "batch_size=4", "--size", "batch_size=8"], "each NAME once"),
    (["--name", "bad/.."], "bundle name"),
])
def test_values_a_run_would_refuse_late_are_refused_first(cand, tmp_path, args, fragment):
    one_error(cli("make", "--candidate", cand, "--task", "1/40", *args), 2, fragment)


@pytest.mark.slow
def test_a_cuda_candidate_on_the_cpu_says_why_it_did_not_run_and_that_it_needs_a_gpu(tmp_path):
    """--device cpu and a candidate that builds CUDA code: the run says why the candidate did not
    run (its 'ran' check's detail) and that it needs a GPU, not only 'did not run' (a second
    newcomer's finding)."""
    cand = tmp_path / "needs_cuda.py"
    cand.write_text("import torch\n\n\nclass ModelNew(torch.nn.Module):\n    def __init__(self):\n"
                    "        super().__init__()\n        raise OSError('CUDA_HOME environment variable is not set')\n\n"
                    "    def forward(self, x):\n        return x\n")
    # the pinned task from a committed example: CI may have no KernelBench submodule (no network)
    kb = kernelbench_from_example(tmp_path, "candidates-full-*.tar")
    res = cli("make", "--candidate", cand, "--task", "1/88", "--kernelbench", kb, "--device", "cpu",
              "--size", "batch_size=4", "--size", "dim=64", "--results-dir", tmp_path / "res", "--out", tmp_path / "c.tar")
    assert res.code == 1, res.err
    err = [ln for ln in res.err.splitlines() if ln.startswith(("error:", "  ->"))]
    assert err[0].startswith("error: needs_cuda did not run (") and "CUDA_HOME" in err[0], err
    assert err[1].startswith("  -> a candidate that builds CUDA code needs a GPU: run it on a machine with one"), err
    assert not (tmp_path / "c.tar").exists()
