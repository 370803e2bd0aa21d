"""Case runners for tests/test_shard.py, importable by a spawned case process (module-level
functions of a module on the test path): toy cases that finish, raise, exit or are killed,
and a wrapper of the real candidate runner that crashes the process of one chosen case."""
from __future__ import annotations

import json
import os
import signal
from pathlib import Path


def toy(folder: str) -> None:
    """A toy case: case.json holds ``{"n": N, "do": WHAT}``; WHAT is ok (writes out.txt with
    N*N and the process's CUDA_VISIBLE_DEVICES), raise, exit (os._exit(7)), kill (SIGKILL) or
    hang (sleeps 10 minutes)."""
    f = Path(folder)
    spec = json.loads((f / "case.json").read_text())
    what = spec.get("do", "ok")
    if what == "raise":
        raise ValueError("this case is broken\non two lines")
    if what == "exit":
        os._exit(7)
    if what == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if what == "hang":
        import time

        time.sleep(600)
    (f / "out.txt").write_text(json.dumps({"n2": spec["n"] ** 2, "cvd": os.environ.get("CUDA_VISIBLE_DEVICES"),
                                           "worker": os.environ.get("KBREPRO_WORKER"), "pid": os.getpid()}))


def crash_candidate_c(folder: str) -> None:
    """The real case runner, except that the case of the candidate named ``c`` kills its own
    process half-way (after ran_on.json, before any result), as a segfaulting extension would."""
    from kbrepro.bundle import shard

    case = json.loads((Path(folder) / "case.json").read_text())
    if case["candidate"] == "c":
        (Path(folder) / "result").mkdir(exist_ok=True)
        (Path(folder) / "result" / "half.json").write_text("{")
        os.kill(os.getpid(), signal.SIGKILL)
    shard.run_case_folder(folder)


def env_probe(folder: str) -> None:
    """Writes env.json: the process's values of the variables named in case.json's ``names``
    (None where unset)."""
    f = Path(folder)
    names = json.loads((f / "case.json").read_text())["names"]
    (f / "env.json").write_text(json.dumps({n: os.environ.get(n) for n in names}))
