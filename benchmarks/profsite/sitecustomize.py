"""Benchmark-only: profile every spawned multiprocessing child (a candidate's child process)
with cProfile when ``KBREPRO_PROF_CHILD_DIR`` names a folder; each child writes
``prof-<pid>.out`` there when it exits. Put this folder on PYTHONPATH (benchmarks/stage_profile.py)."""
import os
import sys

_DIR = os.environ.get("KBREPRO_PROF_CHILD_DIR")
if _DIR and "--multiprocessing-fork" in sys.argv:
    import atexit
    import cProfile

    _prof = cProfile.Profile()
    _prof.enable()

    def _dump() -> None:
        _prof.disable()
        _prof.dump_stats(os.path.join(_DIR, f"prof-{os.getpid()}.out"))

    atexit.register(_dump)
