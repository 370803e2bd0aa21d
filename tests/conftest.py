"""Shared test setup: the ``gpu`` marker skips where no CUDA GPU with CuPy is present."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED_RUN = ROOT.parent / "shared" / "data" / "h200-seed-run"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _gpu_reason() -> str | None:
    try:
        import torch
    except Exception as exc:  # pragma: no cover
        return f"torch not importable: {exc}"
    if not torch.cuda.is_available():
        return "no CUDA GPU"
    try:
        import cupy  # noqa: F401
    except Exception as exc:
        return f"CuPy not importable: {exc}"
    return None


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", default=False,
                     help="also run the items marked slow (end-to-end runs, the verifier's subprocess corpus; "
                          ".ci/run runs them: python -m pytest -q --slow -m slow)")
    parser.addoption("--sweep", action="store_true", default=False,
                     help="also run the whole CPU sweep of the pinned KernelBench tasks (the 'sweep' marker: "
                          "250 tasks; .ci/run runs it with -n auto)")


#: the memory one worker of the CPU sweep may take at its peak (the largest pinned tasks'
#: inputs at their own size, built on the CPU), bytes
SWEEP_WORKER_BYTES = 6 << 30


def _available_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def pytest_xdist_auto_num_workers(config):
    """``-n auto`` for the sweep: one worker per core, but no more than the memory available
    holds at :data:`SWEEP_WORKER_BYTES` each (64 workers of a large machine ran it out of
    memory); the other suites keep xdist's own choice."""
    if not config.getoption("--sweep"):
        return None
    cores = os.cpu_count() or 1
    avail = _available_bytes()
    return cores if avail is None else max(1, min(cores, avail // SWEEP_WORKER_BYTES))


def pytest_collection_modifyitems(config, items):
    # the sweep's items run with --sweep alone; the other slow items with --slow (.ci/run runs both)
    off = [i for i in items if ("sweep" in i.keywords and not config.getoption("--sweep"))
           or ("slow" in i.keywords and "sweep" not in i.keywords and not config.getoption("--slow"))]
    if off:
        config.hook.pytest_deselected(items=off)
        gone = {id(i) for i in off}
        items[:] = [i for i in items if id(i) not in gone]
    reason = _gpu_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"gpu test: {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _compile_cache_off(monkeypatch):
    monkeypatch.setenv("CUDA_CACHE_DISABLE", os.environ.get("CUDA_CACHE_DISABLE", "1"))


def kernelbench_from_example(dest: Path, *patterns: str) -> Path:
    """A KernelBench checkout (the pinned files, without git metadata) made in ``dest/kb`` from
    the files the committed example bundles matching ``patterns`` carry (default: the study's
    full example); the lock check verifies every byte of it."""
    import tarfile

    kb = Path(dest) / "kb"
    for pattern in patterns or ("pointwise-fusion-ftz-full-*.tar",):
        (bundle,) = (ROOT / "examples").glob(pattern)
        with tarfile.open(bundle) as tf:
            for m in tf:
                rel = m.name.split("/", 1)[1] if "/" in m.name else ""
                if m.isfile() and rel.startswith("data/inputs/kernelbench/") and not rel.endswith(".lock.json"):
                    out = kb / rel[len("data/inputs/kernelbench/"):]
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_bytes(tf.extractfile(m).read())
    return kb


def sigint_disposition() -> str:
    """How this process treats SIGINT, ``ignored|handled:blocked|unblocked`` (run in pool
    workers by the tests that check they ignore Ctrl-C)."""
    import signal

    h = signal.getsignal(signal.SIGINT)
    blocked = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, set())
    return f"{'ignored' if h == signal.SIG_IGN else 'handled'}:{'blocked' if blocked else 'unblocked'}"


def run_on_a_terminal(cmd: list[str], timeout: float = 300) -> tuple[int, str, bytes]:
    """Run ``cmd`` with its stderr on a pseudo-terminal (stdout a pipe): its exit code, its
    stdout, and every byte it wrote to the terminal."""
    import os
    import pty
    import subprocess

    leader, follower = pty.openpty()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=follower, stdin=subprocess.DEVNULL)
    os.close(follower)
    seen = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal's other side closed (the command ended)
            break
        if not chunk:
            break
        seen += chunk
    out, _ = p.communicate(timeout=timeout)
    os.close(leader)
    return p.returncode, out.decode(), seen
