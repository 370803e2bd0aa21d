"""verify_bundle.py: check a bundle archive as untrusted input; replay it where a GPU is.

    python verify_bundle.py BUNDLE.tar                  # static tiers, then replay if a GPU is present
    python verify_bundle.py BUNDLE.tar --level fast     # archive and manifest only
    python verify_bundle.py BUNDLE.tar --level static   # no replay
    python verify_bundle.py BUNDLE.tar --level replay --profile quick --json report.json
    python verify_bundle.py BUNDLE.tar --public-key signer.pub.pem   # a signed bundle, signed by this key

The command line is :mod:`kbrepro.cli.verify`. Exit codes: 0 every requested tier passed; 1 verification failed; 2 usage error (also: an
output path that cannot be written); 3 archive unreadable, unsafe or of an unknown format
version (also: an input path that cannot be read); 4 replay impossible here; 130
interrupted (Ctrl-C). Errors become exit codes here, at the CLI edge
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

if os.environ.get("CUDA_CACHE_DISABLE") != "1":
    from kbrepro.harness.startenv import set_own  # what the processes it starts inherit too

    set_own("CUDA_CACHE_DISABLE", "1")

from kbrepro.cli.verify import main, study_profiles  # noqa: E402  (after CUDA_CACHE_DISABLE is set)

__all__ = ["main", "study_profiles"]


if __name__ == "__main__":
    from kbrepro.process import run_main

    run_main(main)
