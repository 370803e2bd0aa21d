"""kbrepro: reproducibility bundles for GPU kernel studies.

The repository root is the ``kbrepro`` package (``pyproject.toml`` maps it), so the installed
distribution claims one top-level name only: ``kbrepro.bundle``, ``kbrepro.harness``,
``kbrepro.kernels``, ``kbrepro.schemas``, ``kbrepro.manifests``, and the two CLIs
``kbrepro.make_bundle`` and ``kbrepro.verify_bundle``.
"""

# first, before any library can change os.environ: what the processes kbrepro starts inherit
from kbrepro.harness import startenv as _startenv  # noqa: E402,F401
