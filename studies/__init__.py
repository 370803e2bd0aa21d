"""Study folders: one per study (``study.yaml``, sources, claims, lock, binding module).

Nothing outside this package imports a study; the engine loads a study's binding through
:func:`kbrepro.harness.plugin.load_binding`.
"""
