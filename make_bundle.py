"""make_bundle.py: run a study or KernelBench candidates on this GPU, validate, and pack one
deterministic bundle; or pack results that exist. The command line is :mod:`kbrepro.cli.make`.

    python make_bundle.py                                   # the published study on this GPU -> <name>.tar
    python make_bundle.py --profile quick --out q.tar       # its quick profile
    python make_bundle.py candidates --candidate my_gelu.py --task 1/88   # a KernelBench candidate
    python make_bundle.py pack DIR --out X.tar              # pack existing results (no GPU)
    python make_bundle.py keygen keys/                      # an Ed25519 key pair for --sign

Exit codes: 0 ok, 1 invalid results, 2 usage (also: an output path that cannot be written),
3 unreadable input (also: an input path that cannot be read), 4 no GPU or missing
dependency, 130 interrupted (Ctrl-C). Errors become exit codes at the CLI edge
(``kbrepro.cli.edge.EdgeMixin``).
"""
from __future__ import annotations

if __name__ == "__main__":  # Ctrl-C while the imports below run: one line, exit 130
    import os as _os
    import signal as _signal
    import sys as _sys

    # (stdlib only, before our first import: a Ctrl-C inside that import printed a traceback)
    _signal.signal(_signal.SIGINT, lambda *_: (_sys.stderr.write("interrupted; nothing was written\n"),
                                               _os._exit(130)))
    try:
        from kbrepro.process import guard_early_interrupt, require_installed
    except ImportError:  # run before installing: one line with the next step, exit 4
        import sys

        sys.stderr.write("error: kbrepro is not installed for this Python\n  -> in the project folder: "
                         "pip install -e . (README), then run this again\n")
        sys.exit(4)
    guard_early_interrupt()
    require_installed()

import os

# The NVRTC/driver compile cache must be off before CUDA initialises (DESIGN.md section 4).
if os.environ.get("CUDA_CACHE_DISABLE") != "1":
    from kbrepro.harness.startenv import set_own  # what the processes it starts inherit too

    set_own("KBREPRO_CACHE_DISABLE_SET_BY", "make_bundle.py")
    set_own("CUDA_CACHE_DISABLE", "1")

from kbrepro.cli.make import main  # noqa: E402  (after CUDA_CACHE_DISABLE is set)

__all__ = ["main"]


if __name__ == "__main__":
    from kbrepro.process import run_main

    run_main(main)
