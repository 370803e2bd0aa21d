"""Decisions about a study run that the engine makes and the verifier derives again, written
once (DESIGN.md section 2: ``model/`` holds the one copy of every such rule).

:func:`stage_plan` is the order of a study run's stages: the engine (``harness/run.py``) runs
exactly these, and the verifier (``bundle/crosscheck/study.py``) holds ``run.json``'s stage list
to them, so a change of the engine's plan is a change of the verifier's expectation too.
"""
from __future__ import annotations

from typing import Mapping, Sequence

#: the stages before the result documents are opened (the engine writes correctness.json and
#: timings.json from the first stage after these on)
OPENING_STAGES = ("setup", "compile", "witness")


def stage_plan(study_doc: Mapping, tasks: Sequence[str], binding_stages: Sequence[str]) -> list[str]:
    """The stages of a run of the study whose resolved ``study.yaml`` is ``study_doc``, in
    order: ``setup``, ``compile``, ``witness`` (where the study has a witness),
    ``measurement_floor`` and ``copy_bandwidth`` (where its extras ask for the floor, the
    roofline or the self-tests), ``task_<t>`` for each of ``tasks``, ``extra_shapes`` (where it
    has any), the binding's own stages (``binding_stages``, by name, in its order) and
    ``self_test``."""
    ex = study_doc.get("extras") or {}
    names = ["setup", "compile"] + (["witness"] if study_doc.get("witness") else [])
    if ex.get("measurement_floor"):
        names.append("measurement_floor")
    if ex.get("roofline") or ex.get("self_test"):
        names.append("copy_bandwidth")
    names += [f"task_{t}" for t in tasks]
    if study_doc.get("extra_shapes"):
        names.append("extra_shapes")
    names += list(binding_stages)
    if ex.get("self_test"):
        names.append("self_test")
    return names


__all__ = ["OPENING_STAGES", "stage_plan"]
