"""What the machine cannot do is the machine's fact (exit 4), never the task's, the candidate's
or ours: a ``--device cpu`` run whose checking pass cannot fit in the host's memory is refused
before anything is allocated (a user's 2-core, 23 GiB host: KernelBench 1/4 at its own sizes was
killed by the OOM killer with no message); a host allocation that fails anyway (torch's CPU
allocator raises a RuntimeError, not an OutOfMemoryError) is exit 4 "out of memory at these
sizes", never a usage error, a harness error or the candidate's failure; a task that builds its
inputs on CUDA needs a GPU, which no size gives. And a candidate's run leaves no empty build
folder and no provenance copy behind. Nothing here allocates more than a few MiB."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kbrepro.bundle import candidates as bc  # noqa: E402
from kbrepro.errors import EnvironmentUnavailableError  # noqa: E402
from kbrepro.harness import candidate as hc  # noqa: E402
from kbrepro.harness import candidate_calls, host_memory, kbtask  # noqa: E402
from kbrepro.model import protocol  # noqa: E402

TASK = b'''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)
    def forward(self, x):
        return torch.relu(self.lin(x))

batch_size = 64
n = 512

def get_inputs():
    x = torch.rand(batch_size, n)
    return [x]

def get_init_inputs():
    return [n]
'''

#: torch's own words where a host allocation fails (KernelBench 1/19 under a low ulimit -v)
CPU_OOM = ("[enforce fail at alloc_cpu.cpp:127] data. DefaultCPUAllocator: can't allocate memory: you tried to "
           "allocate 6442450944 bytes. Error code 12 (Cannot allocate memory)")

QUICK = protocol.PROFILES["quick"]


def test_the_footprint_is_counted_on_meta_without_allocating_at_sizes_no_host_holds():
    """256 GiB of input and output at batch_size=2**20, n=2**16: counted, never allocated."""
    fp = kbtask.meta_footprint(TASK, {"batch_size": 1 << 20, "n": 1 << 16})
    assert fp["inputs"] == [("x", 1 << 38)] and fp["outputs"] == [1 << 38]
    assert fp["weights"] == 4 * ((1 << 32) + (1 << 16)) and fp["largest"] == 1 << 36
    # two sets a process, the references and the output read back, the weights in both processes,
    # nothing cached (each set over the cache's cap), one fingerprint chunk in int64 twice
    need = kbtask.checking_pass_bytes(fp, seeds=1, references=3, cache_bytes=1 << 30)
    assert need == 4 * (1 << 38) + 6 * (1 << 38) + 2 * fp["weights"] + 16 * (1 << 26)
    assert kbtask.meta_footprint(b"this is not python", {}) is None


def test_a_task_too_big_for_the_memory_here_is_refused_before_anything_is_allocated(monkeypatch):
    def no_reference_run(*a, **k):
        raise AssertionError("the reference ran before the memory check")

    monkeypatch.setattr(host_memory, "available_bytes", lambda: 1 << 20)
    monkeypatch.setattr(kbtask, "reference_error", no_reference_run)
    monkeypatch.setattr(kbtask, "runnable_reduced_sizes", lambda src, seed, dev: ({"batch_size": 2, "n": 64}, []))
    with pytest.raises(EnvironmentUnavailableError) as e:
        hc.task_config(TASK, "t.py", QUICK, "cpu")
    assert e.value.exit_code == 4
    assert e.value.message.startswith("task t.py at its own sizes needs about ")
    assert "(input x 128.0 KiB, output 128.0 KiB, weights 1.0 MiB, " in e.value.message
    assert e.value.message.endswith("this machine has 1.0 MiB available")
    assert e.value.hint == ("run at sizes this machine holds with --size NAME=VALUE (e.g. --size batch_size=2 "
                            "--size n=64), or on a machine with more memory")


def test_where_it_fits_or_on_a_gpu_the_memory_check_lets_the_run_go_on(monkeypatch):
    monkeypatch.setattr(host_memory, "available_bytes", lambda: 1 << 40)
    assert hc.task_config(TASK, "t.py", QUICK, "cpu") is QUICK
    monkeypatch.setattr(host_memory, "available_bytes", lambda: None)  # unreadable: no refusal
    assert hc.task_config(TASK, "t.py", QUICK, "cpu") is QUICK


@pytest.mark.parametrize("raised", [f"RuntimeError({CPU_OOM!r})", "MemoryError()"])
def test_a_host_allocation_failure_of_the_reference_is_exit_4_not_a_usage_error(monkeypatch, raised):
    """Before, torch's CPU allocator's RuntimeError was read as the task raising at those sizes:
    a usage error (exit 2), where docs/cli.md's table says 4."""
    monkeypatch.setattr(host_memory, "available_bytes", lambda: None)
    hungry = TASK.replace(b"        return torch.relu(self.lin(x))", f"        raise {raised}".encode())
    with pytest.raises(EnvironmentUnavailableError, match="^out of memory at these sizes: the reference of "
                                                          "task h.py at its own sizes: ") as e:
        hc.task_config(hungry, "h.py", QUICK, "cpu")
    assert e.value.exit_code == 4 and "--size NAME=VALUE" in e.value.hint


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA starts here")
def test_a_task_that_builds_its_inputs_on_cuda_needs_a_gpu_whatever_the_sizes():
    """KernelBench's prompt example (src/kernelbench/prompts/model_ex_add.py) calls .cuda() in
    get_inputs(): before, the run asked for other sizes (exit 2)."""
    cuda_task = TASK.replace(b"    return [x]", b"    return [x.cuda()]")
    with pytest.raises(EnvironmentUnavailableError, match="^task c.py needs a CUDA GPU, and this machine has none "
                                                          r"\(its Model or get_inputs\(\) starts CUDA: ") as e:
        hc.task_config(cuda_task, "c.py", QUICK, "cpu")
    assert e.value.exit_code == 4 and e.value.hint == host_memory.CUDA_HINT


def test_the_words_of_a_failed_host_allocation_and_of_no_cuda():
    assert host_memory.is_out_of_memory(RuntimeError(CPU_OOM)) and host_memory.is_out_of_memory(MemoryError())
    assert not host_memory.is_out_of_memory(RuntimeError("shape mismatch")) and not host_memory.is_out_of_memory(
        ValueError(CPU_OOM))
    assert host_memory.out_of_memory_text(f"RuntimeError: {CPU_OOM}") and host_memory.out_of_memory_text("MemoryError: ")
    assert host_memory.needs_cuda(AssertionError("Torch not compiled with CUDA enabled"))
    assert not host_memory.needs_cuda(AssertionError("n must be 8"))


def _oom_in_parent(monkeypatch):
    def boom(ref):
        raise RuntimeError(CPU_OOM)

    monkeypatch.setattr(candidate_calls, "ref_range", boom)  # read for every case, in the parent
    return TASK + b"\nModelNew = Model\n"


def _oom_in_child(monkeypatch):
    return TASK + b"\nclass ModelNew(Model):\n    def forward(self, x):\n        raise RuntimeError(" + \
        repr(CPU_OOM).encode() + b")\n"


@pytest.mark.parametrize("where", [_oom_in_parent, _oom_in_child], ids=["parent", "child"])
def test_a_host_allocation_failure_while_checking_is_exit_4_and_leaves_no_empty_folder(tmp_path, monkeypatch, where):
    """In the parent (our reference's side), before: a harness error 'please report' (exit 6);
    in the candidate's process, before: the candidate's failure (caught by 'ran'). Either way
    no verdict is recorded; and its work folder keeps no empty build folder (before:
    work/<name>/build/{extensions,triton} stayed, empty)."""
    spec = hc.CandidateSpec("c", where(monkeypatch), "t.py", TASK)
    cfg = hc.with_overrides(QUICK, sizes=(("batch_size", 4), ("n", 8)))
    with pytest.raises(EnvironmentUnavailableError, match="^out of memory at these sizes: ") as e:
        bc._run_one(spec, cfg, tmp_path, "cpu", lambda m: None, None, {})
    assert e.value.exit_code == 4 and "--size NAME=VALUE" in e.value.hint
    assert "not blamed" not in str(e.value) and "please report" not in str(e.value)
    assert not (tmp_path / "work").exists()


def test_a_finished_run_keeps_no_empty_build_folder_and_no_provenance_copy(tmp_path):
    spec = hc.CandidateSpec("c", TASK + b"\nModelNew = Model\n", "t.py", TASK)
    cfg = hc.with_overrides(QUICK, sizes=(("batch_size", 4), ("n", 8)))
    rec, own = bc._run_one(spec, cfg, tmp_path, "cpu", lambda m: None, None, {})
    assert rec["observations"]["failure"] is None and "inputs/candidates/c.py" in own
    assert not (tmp_path / "work").exists()


def test_tidying_a_work_folder_keeps_what_a_build_left(tmp_path):
    w = tmp_path / "work" / "c"
    for d in ("build/extensions/ext", "build/triton", "build/home", "provenance-abc/ext"):
        (w / d).mkdir(parents=True)
    (w / "build/extensions/ext/build.ninja").write_text("rule cxx\n")
    (w / "provenance-abc/ext/build.ninja").write_text("rule cxx\n")
    hc.tidy_work(w)
    left = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    assert left == ["work", "work/c", "work/c/build", "work/c/build/extensions", "work/c/build/extensions/ext",
                    "work/c/build/extensions/ext/build.ninja"]
    hc.tidy_work(tmp_path / "missing")  # nothing to tidy: no error
