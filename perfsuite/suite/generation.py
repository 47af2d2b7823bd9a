"""Which (variant, case[, mode][, value]) combinations a suite test is generated for.

A combination whose skip is certain before anything runs is not generated: a variant on a device
it does not declare (``Variant.devices``), a gradient mode of a variant without a backward there
(``Variant.backward_unsupported``), and a test's own condition, declared with a marker:

* ``perfsuite_applies(fn)``: ``fn(variant, case, mode)`` returns why the test does not apply (a
  reason) or None; ``mode`` is None for tests without one;
* ``perfsuite_each(argname, values, applies)``: the test is also parametrized over ``values`` (a
  mapping's keys, or a sequence) as ``argname``; ``applies(value, variant, case)`` as above.

Each one left out is counted by its reason (``NotGenerated``); the run prints the counts after
collection, so nothing disappears silently. Skips that depend on running (torch refusing a case, a
library that is not installed) stay skips, with their reason.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Iterable, Sequence

import pytest

from perfsuite.attention.cases import AttentionCase
from perfsuite.variants import Variant
from perfsuite.variants.registry import certain_skip

APPLIES_MARKER = "perfsuite_applies"
EACH_MARKER = "perfsuite_each"
MARKERS = (
    f"{APPLIES_MARKER}(fn): generate only the combinations for which fn(variant, case, mode) "
    "returns None (else the reason it does not apply)",
    f"{EACH_MARKER}(argname, values, applies): parametrize over values too, where "
    "applies(value, variant, case) returns None",
)


@dataclasses.dataclass
class NotGenerated:
    """Combinations left out of the collection, counted per reason."""

    counts: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    # (variant, case id, mode) -> why the variant cannot run it there, for the table's skipped lines
    unrunnable: dict[tuple[str, str, str], str] = dataclasses.field(default_factory=dict)

    def add(self, reason: str) -> None:
        self.counts[reason] += 1

    def merge(self, other: NotGenerated) -> None:
        """Add ``other``'s counts and unrunnable combinations to these."""
        self.counts.update(other.counts)
        self.unrunnable.update(other.unrunnable)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def lines(self, most: int | None = 4) -> list[str]:
        """``perfsuite: N combinations not generated (their skip is certain): ...``, the ``most``
        frequent reasons (every reason when None), or nothing when none was left out."""
        if not self.total:
            return []
        shown = self.counts.most_common(most)
        rest = len(self.counts) - len(shown)
        reasons = "; ".join(f"{count} x {reason}" for reason, count in shown)
        more = (
            f"; and {rest} other reason{'s' if rest > 1 else ''} (-v lists them)"
            if rest > 0
            else ""
        )
        return [
            f"perfsuite: {self.total} combinations not generated (their skip is certain before "
            f"running): {reasons}{more}"
        ]


def _test_condition(definition: pytest.Function) -> Callable | None:
    marker = definition.get_closest_marker(APPLIES_MARKER)
    return marker.args[0] if marker else None


def _each(definition: pytest.Function) -> tuple[str, Sequence, Callable] | None:
    marker = definition.get_closest_marker(EACH_MARKER)
    if marker is None:
        return None
    argname, values, applies = marker.args
    return argname, list(values), applies


def combinations(
    definition: pytest.Function,
    pairs: Iterable[tuple[Variant, AttentionCase]],
    modes: Sequence[str] | None,
    not_generated: NotGenerated,
) -> tuple[tuple[str, ...], list]:
    """Argument names and ``pytest.param``s for a suite test: ``variant``, ``case``, then ``mode``
    (when ``modes`` is given) and the ``perfsuite_each`` argument, with ids such as
    ``naive-b2h4s64d32-fp32-causal-cpu-backward``. Each pair's tests carry the pair's
    ``xdist_group`` (pytest-xdist's ``--dist loadgroup`` keeps them on the worker caching its evidence).
    """
    condition, each = _test_condition(definition), _each(definition)
    names = ("variant", "case") + (("mode",) if modes is not None else ())
    names += (each[0],) if each else ()
    params = []
    for variant, case in pairs:
        group = pytest.mark.xdist_group(f"{variant.name}-{case.id}")
        for mode in modes if modes is not None else (None,):
            reason = certain_skip(variant, case, mode)
            if reason is not None and mode is not None:
                not_generated.unrunnable[(variant.name, case.id, mode)] = reason
            if reason is None and condition is not None:
                why = condition(variant, case, mode)
                reason = f"{definition.originalname}: {why}" if why else None
            if reason:
                not_generated.add(reason)
                continue
            head = (variant, case) + ((mode,) if modes is not None else ())
            ident = "-".join([variant.name, case.id] + ([mode] if mode else []))
            for value in each[1] if each else (None,):
                why = each[2](value, variant, case) if each else None
                if why:
                    not_generated.add(f"{each[0]} {value}: {why}")
                    continue
                args, name = (head + (value,), f"{ident}-{value}") if each else (head, ident)
                params.append(pytest.param(*args, id=name, marks=group))
    return names, params
