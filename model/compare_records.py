"""The check records of the candidate records: ``harness.checks.compare`` of one output with its
reference, in its three kinds (full, mismatched, unreadable), told apart by the raw object."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Iterator, Literal, Optional, Tuple, Union

from kbrepro.model import strict
from kbrepro.model.scalars import COUNT, RATIO
from kbrepro.model.strict import Num, Text


# ------------------------------------------------------------------------- check records
@dataclass(frozen=True)
class PredicateResult:
    """One predicate over one output: ``passed`` (JSON ``pass``), ``failing_count`` elements
    that fail it, ``worst_ratio`` = max |difference| / allowance over finite pairs, null where
    the output could not be compared (harness/checks.py)."""

    passed: bool = strict.field(json="pass")
    failing_count: COUNT = strict.field()
    worst_ratio: Optional[RATIO] = strict.field()

    def _invariants(self) -> Iterator[tuple[str, str]]:
        if self.passed and self.failing_count != 0:
            yield ".pass", f"is true with failing_count {self.failing_count} (a pass has no failing element)"
        if self.passed and (self.worst_ratio is None or self.worst_ratio > 1 + 1e-6):
            yield ".worst_ratio", f"is {self.worst_ratio} in a passing check (at most 1)"


@dataclass(frozen=True)
class StressResult:
    """The equal-NaN stress check: ``passed`` and ``failing_count``."""

    passed: bool = strict.field(json="pass")
    failing_count: COUNT = strict.field()

    def _invariants(self) -> Iterator[tuple[str, str]]:
        if self.passed != (self.failing_count == 0):
            yield ".pass", f"is {str(self.passed).lower()} with failing_count {self.failing_count}"


@dataclass(frozen=True)
class NonFinite:
    """Counts of non-finite values in the reference and the output (harness/checks.py)."""

    reference_nan: COUNT
    candidate_nan: COUNT
    reference_posinf: COUNT
    reference_neginf: COUNT
    candidate_posinf: COUNT
    candidate_neginf: COUNT
    nan_both: COUNT
    mismatched: COUNT


@dataclass(frozen=True)
class FullCompare:
    """``harness.checks.compare`` of an output of the reference's shape and dtype: every
    statistic, each key present (null only where no finite value exists)."""

    shape_match: Literal[True]
    element_count: COUNT
    bit_identical_count: COUNT
    official: PredicateResult
    legacy: PredicateResult
    equal_nan_stress: StressResult
    max_abs_error: Optional[RATIO]
    max_abs_reference: Optional[RATIO]
    nonfinite: NonFinite
    discriminating: bool
    null_candidate_passes: bool
    error = None

    def _invariants(self) -> Iterator[tuple[str, str]]:
        n = self.element_count
        for k, v in (("bit_identical_count", self.bit_identical_count), ("official.failing_count",
                     self.official.failing_count), ("legacy.failing_count", self.legacy.failing_count),
                     ("equal_nan_stress.failing_count", self.equal_nan_stress.failing_count)):
            if v > n:
                yield f".{k}", f"is {v}, more than the {n} elements"
        for k in ("official", "legacy"):
            r = getattr(self, k)
            if not r.passed and r.failing_count == 0:
                yield f".{k}.pass", "is false with no failing element"
            if r.worst_ratio is None and n:
                yield f".{k}.worst_ratio", "is null for a compared output"
        # bit-identical NaN pairs fail the official predicate (equal_nan False): nothing else may
        if self.bit_identical_count == n and n and (self.official.failing_count > self.nonfinite.nan_both
                                                    or (self.max_abs_error or 0) > 0):
            yield "", "every element is bit-identical, yet an element fails or differs"
        nf = self.nonfinite
        ref_nf = nf.reference_nan + nf.reference_posinf + nf.reference_neginf
        cand_nf = nf.candidate_nan + nf.candidate_posinf + nf.candidate_neginf
        if max(ref_nf, cand_nf, nf.mismatched) > n or nf.nan_both > min(nf.reference_nan, nf.candidate_nan):
            yield ".nonfinite", f"counts more non-finite values than the {n} elements hold, or more NaN pairs than NaNs"
            return
        if (self.max_abs_reference is None) != (ref_nf == n):
            yield ".max_abs_reference", "is null exactly when the reference has no finite value"
        if (ref_nf + cand_nf < n and self.max_abs_error is None) or (
                max(ref_nf, cand_nf) == n and self.max_abs_error is not None):
            yield ".max_abs_error", "is null exactly when no pair of finite values exists"
        # a NaN pair fails the official predicate (equal_nan False) and passes the stress one
        # (equal_nan True); every other element is judged alike by both (harness/checks.py)
        if self.equal_nan_stress.failing_count != self.official.failing_count - nf.nan_both:
            yield ".equal_nan_stress.failing_count", (f"is {self.equal_nan_stress.failing_count}, not the official "
                                                      f"predicate's {self.official.failing_count} less the "
                                                      f"{nf.nan_both} NaN pairs")
        if min(self.official.failing_count, self.legacy.failing_count) < nf.mismatched:
            yield ".nonfinite.mismatched", "counts more mismatched non-finite elements than a predicate fails"


@dataclass(frozen=True)
class MismatchCompare:
    """The record of an output that could not be compared element by element (another shape
    or dtype, or missing): both predicates fail on every reference element."""

    shape_match: Literal[False]
    element_count: COUNT
    bit_identical_count: Annotated[int, Num(ge=0, le=0)]
    official: PredicateResult
    legacy: PredicateResult
    reference_shape: Optional[Tuple[COUNT, ...]] = None
    candidate_shape: Optional[Tuple[COUNT, ...]] = None
    equal_nan_stress = max_abs_error = max_abs_reference = nonfinite = discriminating = None
    null_candidate_passes = error = None

    def _invariants(self) -> Iterator[tuple[str, str]]:
        for k in ("official", "legacy"):
            r = getattr(self, k)
            if r.passed or r.failing_count != self.element_count or r.worst_ratio is not None:
                yield f".{k}", "an output that could not be compared fails on every element, with no ratio"


@dataclass(frozen=True)
class FailedPredicate:
    passed: Literal[False] = strict.field(json="pass")


@dataclass(frozen=True)
class UnreadableCompare:
    """A spot-checked timed output the parent could not read back (``error``): failed."""

    shape_match: Literal[False]
    official: FailedPredicate
    error: Annotated[str, Text(0, 400)]
    element_count = bit_identical_count = legacy = equal_nan_stress = max_abs_error = max_abs_reference = None
    nonfinite = discriminating = null_candidate_passes = None


def _compare_kind(raw: dict):
    if raw.get("shape_match") is True:
        return FullCompare
    return UnreadableCompare if "error" in raw else MismatchCompare


Compare = Annotated[Union[FullCompare, MismatchCompare, UnreadableCompare],
                    strict.OneOf(_compare_kind, "comparison")]
