"""How a claim's verdict may change between the recording and a replay: one rule for study and
candidate bundles (:func:`claim_change`).

A claim is judged on a bootstrap interval of a median ratio against its threshold; a replay
measures that interval again. The replay's own comparison of the measured data is the timing
ratios (each recorded interval, widened by the tolerance, must overlap the replayed one:
:func:`kbrepro.bundle.verify.compare.compare_replay`). An interval that straddled the threshold
on one side (``inconclusive``) may fall to either side on the other without any ratio moving
beyond that tolerance, so such a change is reported, not failed. A decided verdict that turns
into its opposite (``holds`` against ``fails``) is a contradiction at any profile; at the
recorded profile any other change (``not_comparable``, a claim on one side only) is one too.
"""
from __future__ import annotations

from typing import Literal, Optional

DECIDED = frozenset({"holds", "fails"})

Change = Literal["same", "reported", "contradicts"]


def claim_change(recorded: Optional[str], replayed: Optional[str], same_profile: bool,
                 ratios_reproduce: bool = True) -> Change:
    """``"same"``, ``"reported"`` (listed in the replay's notes) or ``"contradicts"`` (a
    problem of the replay tier) for a claim recorded as ``recorded`` and replayed as
    ``replayed`` (a verdict, or None where the claim is missing on that side).
    ``ratios_reproduce``: whether the replay's timing ratios agree with the recorded ones
    within the tolerance (where they do not, and the replay does not fail on that itself, a
    change to or from ``inconclusive`` contradicts the recording too)."""
    if recorded == replayed:
        return "same"
    if {recorded, replayed} == DECIDED:
        return "contradicts"
    if not same_profile:
        return "reported"
    if ratios_reproduce and "inconclusive" in (recorded, replayed) and {recorded, replayed} <= DECIDED | {"inconclusive"}:
        return "reported"
    return "contradicts"


__all__ = ["claim_change", "DECIDED", "Change"]
