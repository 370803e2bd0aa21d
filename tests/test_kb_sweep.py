"""The CPU sweep in the tests (issue 28): the reference itself as candidate, at reduced sizes
(batch_size 2, other sizes above 64 cut to 64, or the next rung of
``kbtask.runnable_reduced_sizes`` where the reference does not run there), for a slice of
the pinned tasks chosen to cover what accused honest candidates before: scalar outputs (the loss
tasks), integer outputs, BatchNorm in training mode (the extra shape), dropout (a random
reference), a task that cannot discriminate, a candidate's copy of a size, a task importing
einops, several inputs, tuple outputs of a recurrent model, tasks whose reference does not run at the reduced sizes
(MobileNet's images, Swin's fixed image size). Each must bundle with no check
failed (a check that cannot decide makes a PARTIAL, never a catch) and no harness or usage
error. The whole sweep (250 tasks, about 50 minutes here) is ``benchmarks/cpu_sweep.py``; its
numbers are in benchmarks/RESULTS.md. Needs a KernelBench checkout at the pin."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")

from kbrepro.bundle import candidates as bc  # noqa: E402
from kbrepro.harness import jsonio  # noqa: E402
from kbrepro.harness.kbtask import runnable_reduced_sizes  # noqa: E402
from kbrepro.model.protocol import PROFILES  # noqa: E402

SLICE = ["1/1", "1/23", "1/100", "1/51", "1/94", "1/96", "1/97", "1/98", "2/1", "2/23", "2/33", "2/39", "2/66",
         "3/1", "3/19", "3/29", "3/33", "3/35", "3/48"]


def _tasks() -> dict[str, Path]:
    from kbrepro.harness.kernelbench import resolve_checkout

    try:
        kb = resolve_checkout(None)
    except Exception as exc:
        pytest.skip(f"no KernelBench checkout: {exc}")
    found = {}
    for f in (kb / "KernelBench").glob("level[123]/*.py"):
        found[f"{f.parent.name[5:]}/{f.name.split('_')[0]}"] = f
    if len(found) < 250:
        pytest.skip(f"a KernelBench checkout without its tasks ({len(found)} files)")
    return found


@pytest.mark.parametrize("task", SLICE)
def test_the_reference_as_candidate_is_never_caught(tmp_path, task):
    f = _tasks()[task]
    src = f.read_bytes()
    cand = tmp_path / f"ref_{task.replace('/', '_')}.py"
    cand.write_bytes(src + b"\n\nModelNew = Model\n")
    sizes, _ = runnable_reduced_sizes(src, PROFILES["quick"].seeds[0], "cpu")
    res = bc.run_candidates([(cand, task)], profile="quick", kernelbench=None, results_dir=tmp_path / "res",
                            sizes=sizes or None, device="cpu")
    rec = jsonio.loads_strict((res / "results" / "candidates.json").read_bytes(), "candidates.json")["candidates"][0]
    assert rec["observations"]["failure"] is None, rec["observations"]["failure"]
    caught = {v["name"]: v["detail"] for v in rec["verdicts"] if v["passed"] is False}
    assert not caught, caught
    assert any(v["name"] == "official_allclose" and v["passed"] is True for v in rec["verdicts"])
