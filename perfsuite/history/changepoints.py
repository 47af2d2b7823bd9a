"""Change points of a series: offline (E-divisive means with a Student t-test, as Hunter/Otava do)
and online (is the newest point a regression against the last N, confirmed by M points).

Each point is summarised by the log of the median of its raw rounds (robust to a round's outlier;
the log makes a step a ratio). Contended and dirty points are shown, never used.

Offline (``detect``), per epoch (a software change is never mixed into one segment):

1. E-divisive means (Matteson & James 2014, "A nonparametric approach for multiple change point
   analysis of multivariate data", JASA 109(505)): the split of a segment maximising the energy
   statistic Q(tau) = (tau m / n) (2/(tau m) sum_between |x_i - x_j| - mean_within_left - mean_within_right),
   alpha = 1, computed for every tau from one pairwise-distance matrix.
2. As Hunter (Fleming et al., "Hunter: Using Change Point Detection to Hunt for Performance
   Regressions", ICPE 2023) does instead of E-divisive's permutation test: a Welch t-test between the
   points left and right of the split (inside the segment bounded by the neighbouring change points),
   kept when p < ``p_value`` and the step is at least ``min_effect``; the two halves are split again.
   When a side has fewer than ``MIN_POINTS`` points, the test uses that side's raw log rounds (its
   run-to-run noise is then unobserved, so such a step must also be ``RAW_MIN_EFFECT`` or more).
3. Series longer than ``WINDOW`` points are searched in overlapping windows (as Otava windows its
   series) and every candidate is re-tested against its neighbours, so 10,000 points take well
   under a second.

Each change point names the last good and first bad commit, the step as a ratio with a 95% interval
(Welch, on the log scale), and the structural diff at that commit (``trace.structure.diff_fingerprints``).

Interleaved gates (``with_gates``): a ``perfsuite ab`` run stored in the history (``query.pairs``)
timed two commits in alternating blocks, so the machine's speed changes between separate runs do
not enter its ratio; a decisive gate is a change point between its commits, and a separate-run change
point that a gate spans stands only as that gate's.

Online (``check_newest``), the CI rule in the style of PyTorch's HUD: not judged when a newest point
ran at another machine speed than the baseline (its speed reference moved by more than
``measure.speed_reference.SPEED_LIMIT``, as separate-run comparisons refuse it); else the ``confirm``
newest usable points are each beyond the limit against the ``window`` usable points before them, the limit being
``max(min_effect, k * noise)`` on the log scale; noise is the robust spread of the baseline's points
(when it has ``MIN_POINTS`` or more) and never below the robust spread of the newest point's own
rounds divided by sqrt(rounds).

A count (``query.COUNTED``: score copies) is exact: offline, every point whose count differs from the
one before it is a change point; online, the newest count is judged against the baseline's lower median
count, with no noise.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence

import numpy as np

from perfsuite.history.query import COUNTED, MEASURES, Pair, Point, epochs
from perfsuite.measure.speed_reference import speed_change
from perfsuite.trace.structure import adds_work, diff_fingerprints

P_VALUE = 0.001
MIN_EFFECT = 0.02  # a step smaller than 2% is not reported
MIN_POINTS = 3
# A step tested on raw rounds (a side with fewer than MIN_POINTS points) must be at least this large:
# rounds of one run do not show run-to-run noise, which reached 5-10% between separate runs here
# (docs/contention.md's speed reference; measure/speed_reference.SPEED_LIMIT).
RAW_MIN_EFFECT = 0.10
WINDOW = 400
# the smallest value taken a log of: a count of 0 (score copies) is this, log -690.8
VALUE_FLOOR = 1e-300
MAD_TO_SD = 1.4826
SEPARATE_RUNS = "separate runs"  # a step between the levels of separately timed points (t-test)
GATE = "interleaved gate"  # a perfsuite ab gate that timed the two commits in alternating blocks


@dataclasses.dataclass(frozen=True)
class ChangePoint:
    """A step between ``last_good`` and ``first_bad`` (indices into the points given to ``detect``).

    ``ratio``: median after / median before (of the segments' point values), ``interval`` its 95%
    interval; ``worse``: the step is a regression for this measure (slower, fewer TFLOP/s, more copies);
    ``p_value``: the t-test's; ``structure``: the structural diff lines at ``first_bad``
    (empty when the fingerprint did not change), ``structure_adds_work`` as ``trace.structure.adds_work``."""

    index: int
    last_good: Point
    first_bad: Point
    ratio: float
    interval: tuple[float, float]
    worse: bool
    p_value: float
    structure: tuple[str, ...]
    structure_adds_work: bool
    evidence: str = SEPARATE_RUNS
    measure: str = "time_s"

    def size(self) -> str:
        """The step in words: ``x1.210 [1.150, 1.270]``; for a count (``query.COUNTED``) the counts
        before and after, ``0 -> 1 score copies`` (a ratio of counts means nothing when one is 0)."""
        if self.measure in COUNTED:
            return f"{count_step(self.last_good.median, self.first_bad.median, self.measure)}"
        return f"x{self.ratio:.3f} [{self.interval[0]:.3f}, {self.interval[1]:.3f}]"

    def describe(self, unit: str = "") -> str:
        """``a1b2c3d4e5 -> f6e7d8c9b0: x1.21 [1.15, 1.27] slower; +1 copy cpu aten::clone [2x4x64x64]``;
        a count: ``a1b2c3d4e5 -> f6e7d8c9b0: 0 -> 1 score copies worse; ...``."""
        word = "worse" if self.worse else "better"
        text = f"{self.last_good.short_sha} -> {self.first_bad.short_sha}: {self.size()} {word}" + (
            " (interleaved gate)" if self.evidence == GATE else ""
        )
        return text + (
            f"; {'; '.join(self.structure)}" if self.structure else "; structure unchanged"
        )


@dataclasses.dataclass(frozen=True)
class OnlineVerdict:
    """``check_newest``'s answer: ``regression`` when the newest ``confirm`` points all broke the
    limit; ``ratios`` of each against the baseline, ``limit`` the ratio they had to exceed, ``reason``."""

    regression: bool
    ratios: tuple[float, ...]
    limit: float | None
    baseline_points: int
    reason: str
    gate_base: Point | None = None  # the base of the interleaved gate that decided, if one did
    # False: the newest point could not be judged (contended, too few points, the machine's speed)
    judged: bool = True
    # a regression's step: the newest usable point still at the baseline's level, and the oldest of the
    # usable points after it, all beyond the limit (the gate's base and the newest when a gate decided)
    last_good: Point | None = None
    first_bad: Point | None = None


COUNT_NAMES = {"score_copies": ("score copy", "score copies")}


def count_words(value: float | None, measure: str) -> str:
    """A count in words: ``1 score copy``, ``2 score copies``, ``- score copies`` when not recorded."""
    one, many = COUNT_NAMES.get(measure, (measure, measure))
    if value is None:
        return f"- {many}"
    return f"{value:g} {one if value == 1 else many}"


def count_step(before: float | None, after: float | None, measure: str) -> str:
    """A step of a count: ``0 -> 1 score copies`` (``-`` for a count not recorded)."""
    many = COUNT_NAMES.get(measure, (measure, measure))[1]
    shown = lambda v: "-" if v is None else f"{v:g}"
    return f"{shown(before)} -> {shown(after)} {many}"


def usable(point: Point) -> bool:
    """A point the statistics use: not contended, not from an uncommitted tree, with values."""
    return not point.contended and not point.dirty and bool(point.values)


def point_value(point: Point) -> float:
    """log of the median of the point's uncontended raw values."""
    return math.log(max(float(statistics.median(point.values)), VALUE_FLOOR))


def _log_rounds(point: Point) -> np.ndarray:
    return np.log(np.maximum(np.asarray(point.values, dtype=float), VALUE_FLOOR))


def energy_split(x: np.ndarray, min_size: int = 1) -> tuple[int, float]:
    """The ``tau`` (1..n-1: first index of the right part) maximising E-divisive's Q, and Q; (0, -inf)
    when the series is too short for two parts of ``min_size``."""
    n = len(x)
    if n < 2 * min_size:
        return 0, -math.inf
    d = np.abs(x[:, None] - x[None, :])
    running = np.cumsum(d, axis=1)
    index = np.arange(n)
    lower = np.where(
        index > 0, running[index, np.maximum(index - 1, 0)], 0.0
    )  # sum over i < j of d[j, i], per j
    upper = running[:, -1] - running[index, index]  # sum over j > i of d[i, j], per i
    within_left = np.concatenate([[0.0], np.cumsum(lower)])  # index tau: pairs inside x[:tau]
    within_right = np.concatenate(
        [np.cumsum(upper[::-1])[::-1], [0.0]]
    )  # index tau: pairs inside x[tau:]
    total = within_left[n]
    tau = np.arange(n + 1, dtype=float)
    m = n - tau
    between = total - within_left - within_right
    with np.errstate(divide="ignore", invalid="ignore"):
        pairs_left, pairs_right = tau * (tau - 1) / 2, m * (m - 1) / 2
        mean_left = np.where(pairs_left > 0, within_left / np.maximum(pairs_left, 1), 0.0)
        mean_right = np.where(pairs_right > 0, within_right / np.maximum(pairs_right, 1), 0.0)
        q = (tau * m / n) * (2 * between / np.maximum(tau * m, 1) - mean_left - mean_right)
    q[:min_size] = -math.inf
    q[n - min_size + 1 :] = -math.inf
    best = int(np.argmax(q))
    return best, float(q[best])


def _samples(points: Sequence[Point], values: np.ndarray) -> np.ndarray:
    """The sample a side is tested with: its point values, or its raw log rounds when it has few points."""
    if len(points) >= MIN_POINTS:
        return values
    return np.concatenate([_log_rounds(p) for p in points])


def step_test(
    left: Sequence[Point], right: Sequence[Point], xl: np.ndarray, xr: np.ndarray
) -> tuple[float, float, tuple[float, float]]:
    """(p-value, ratio, 95% interval) of the step between two sides: Welch's t-test on the log scale;
    the ratio is exp(mean right - mean left) of the tested samples (a ratio of geometric means)."""
    from scipy import stats as scipy_stats  # here: ``history detect`` never needs it

    a, b = _samples(left, xl), _samples(right, xr)
    if len(a) + len(b) >= 3 and np.ptp(a) == 0 and np.ptp(b) == 0 and a[0] != b[0]:
        # two constant sides that differ (a count, such as score copies): an exact step, even when
        # one side is the newest point alone
        diff = float(b[0] - a[0])
        return 0.0, math.exp(diff), (math.exp(diff), math.exp(diff))
    if len(a) < 2 or len(b) < 2:
        return 1.0, math.exp(float(np.mean(b)) - float(np.mean(a))), (0.0, math.inf)
    va, vb = float(np.var(a, ddof=1)) / len(a), float(np.var(b, ddof=1)) / len(b)
    se, diff = math.sqrt(va + vb), float(np.mean(b) - np.mean(a))
    if se == 0:
        return (0.0 if diff else 1.0), math.exp(diff), (math.exp(diff), math.exp(diff))
    dof = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    p = float(2 * scipy_stats.t.sf(abs(diff / se), dof))
    half = float(scipy_stats.t.ppf(0.975, dof)) * se
    return p, math.exp(diff), (math.exp(diff - half), math.exp(diff + half))


def _segment_splits(x: np.ndarray, start: int, end: int, accept) -> list[int]:
    """Recursive E-divisive on x[start:end]; ``accept(tau, start, end)`` is the significance test."""
    found, stack = [], [(start, end)]
    while stack:
        a, b = stack.pop()
        tau, q = energy_split(x[a:b])
        if tau <= 0 or not math.isfinite(q):
            continue
        if accept(a + tau, a, b):
            found.append(a + tau)
            stack.extend([(a, a + tau), (a + tau, b)])
    return sorted(found)


def _count_steps(
    x: np.ndarray, min_effect: float
) -> list[tuple[int, float, float, tuple[float, float]]]:
    """(index, p, ratio, interval) of each step of an exact count (``query.COUNTED``; ``x`` its log
    values): every point whose count differs from the one before by ``min_effect`` or more, or from or
    to zero, with p 0. A count has no noise to test, and a series that adds a copy and later removes
    it holds two steps, which a t-test across them would blur (and its log of zero overflow)."""
    if len(x) < 3:  # as a step test: one value each side is not enough
        return []
    zero = math.log(VALUE_FLOOR)  # a count of 0
    steps = []
    for i in range(1, len(x)):
        diff = float(x[i] - x[i - 1])
        if diff and (zero in (x[i], x[i - 1]) or abs(diff) >= math.log1p(min_effect)):
            steps.append((i, 0.0, math.exp(diff), (math.exp(diff), math.exp(diff))))
    return steps


def _detect_one_epoch(
    points: Sequence[Point], p_value: float, min_effect: float, counted: bool = False
) -> list[tuple[int, float, float, tuple[float, float]]]:
    """(index, p, ratio, interval) of each change point of one epoch's usable points (``counted``:
    an exact count, ``_count_steps``)."""
    x = np.array([point_value(p) for p in points])
    n = len(x)
    if counted:
        return _count_steps(x, min_effect)
    if n < 2:
        return []

    def test(tau: int, a: int, b: int) -> tuple[float, float, tuple[float, float]]:
        return step_test(points[a:tau], points[tau:b], x[a:tau], x[tau:b])

    def floor(tau: int, a: int, b: int) -> float:
        raw = min(tau - a, b - tau) < MIN_POINTS
        return math.log1p(max(min_effect, RAW_MIN_EFFECT) if raw else min_effect)

    def accept(tau: int, a: int, b: int) -> bool:
        p, ratio, _ = test(tau, a, b)
        return p < p_value and abs(math.log(ratio)) >= floor(tau, a, b)

    if n <= WINDOW:
        candidates = _segment_splits(x, 0, n, accept)
    else:
        step = WINDOW // 2
        candidates = sorted(
            {
                c
                for s in range(0, n - step, step)
                for c in _segment_splits(x, s, min(n, s + WINDOW), accept)
            }
        )
    # re-test each candidate against its neighbours, dropping the weakest until all pass
    kept = list(candidates)
    while True:
        bounds = [0, *kept, n]
        results = [test(c, bounds[i], bounds[i + 2]) for i, c in enumerate(kept)]
        failing = [
            (r[0], i)
            for i, (c, r) in enumerate(zip(kept, results))
            if not (r[0] < p_value and abs(math.log(r[1])) >= floor(c, bounds[i], bounds[i + 2]))
        ]
        if not failing:
            return [(c, *r) for c, r in zip(kept, results)]
        kept.pop(max(failing)[1])


def detect(
    points: Sequence[Point],
    measure: str = "time_s",
    p_value: float = P_VALUE,
    min_effect: float = MIN_EFFECT,
    pairs: Sequence[Pair] = (),
) -> list[ChangePoint]:
    """Change points of a series' ``points`` (``query.points``), each epoch on its own; unusable points
    (contended, dirty) are skipped. Indices refer to ``points``. O(n^2) per window of ``WINDOW`` points.
    ``pairs``: the series' interleaved A/B gates (``query.pairs``), which overrule separate runs
    (``with_gates``)."""
    larger_is_worse = MEASURES[measure][2]
    found: list[ChangePoint] = []
    for epoch in epochs(points):
        indices = [i for i in range(epoch.start, epoch.end + 1) if usable(points[i])]
        chosen = [points[i] for i in indices]
        steps = _detect_one_epoch(chosen, p_value, min_effect, counted=measure in COUNTED)
        for local, p, ratio, interval in steps:
            found.append(
                _change_point(
                    points,
                    indices[local - 1],
                    indices[local],
                    ratio,
                    interval,
                    larger_is_worse,
                    p,
                    measure=measure,
                )
            )
    return with_gates(points, found, pairs, larger_is_worse) if pairs else found


def _change_point(
    points: Sequence[Point],
    good: int,
    bad: int,
    ratio: float,
    interval: tuple[float, float],
    larger_is_worse: bool,
    p: float,
    evidence: str = SEPARATE_RUNS,
    measure: str = "time_s",
) -> ChangePoint:
    """The change point between ``points[good]`` and ``points[bad]``, with the structural diff."""
    before, after = points[good], points[bad]
    lines, more = (), False
    if before.structure and after.structure and before.structure_hash != after.structure_hash:
        lines = tuple(diff_fingerprints(before.structure, after.structure))
        more = adds_work(before.structure, after.structure)
    worse = (ratio > 1) == larger_is_worse
    return ChangePoint(
        bad, before, after, ratio, interval, worse, p, lines, more, evidence, measure
    )


@dataclasses.dataclass(frozen=True)
class _Span:
    """A gate placed on the series: points ``good`` < ``bad``, its ratio oriented in commit order."""

    good: int
    bad: int
    ratio: float
    interval: tuple[float, float]
    decisive: bool
    verdict: str = ""


def _spans(points: Sequence[Point], pairs: Sequence[Pair]) -> list[_Span]:
    """``pairs`` whose two commits are points of the series, oriented oldest -> newest; of several
    gates between the same two commits the newest recorded counts."""
    where = {p.sha: i for i, p in enumerate(points) if p.sha and not p.dirty}
    spans: dict[tuple[int, int], _Span] = {}
    for pair in sorted(pairs, key=lambda p: p.recorded_at):
        a, b = where.get(pair.base_sha), where.get(pair.head_sha)
        if a is None or b is None or a == b:
            continue
        ratio, (low, high) = pair.ratio, pair.interval
        if a > b:  # the gate's base is the newer commit: invert it
            a, b, ratio, low, high = b, a, 1 / ratio, 1 / high, 1 / low
        spans[(a, b)] = _Span(a, b, ratio, (low, high), pair.decisive, pair.verdict)
    return list(spans.values())


def with_gates(
    points: Sequence[Point],
    found: Sequence[ChangePoint],
    pairs: Sequence[Pair],
    larger_is_worse: bool = True,
) -> list[ChangePoint]:
    """``found`` (separate-run change points) judged by the interleaved gates in ``pairs``.

    A gate times two commits in alternating blocks of one run, so the machine's speed changes between
    separate runs (5-25% on a shared CPU host: docs/explanation/change-points.md) do not enter its
    ratio. Hence: every decisive gate (``slower``/``faster``) is a change point between its two
    commits (the narrowest when decisive gates nest); a separate-run change point inside the
    narrowest gate that spans it is dropped unless that gate is decisive the same way (it is then
    the gate's change point); one that no gate spans is kept. A slow drift that no single gate
    resolves is only seen by separate runs where no gate spans it."""
    spans = _spans(points, pairs)
    decisive = [s for s in spans if s.decisive]
    kept = []
    for change in found:
        good = points.index(change.last_good)
        covering = [s for s in spans if s.good <= good and s.bad >= change.index]
        if not covering:
            kept.append(change)
    for span in decisive:
        if any(
            o is not span and span.good <= o.good and o.bad <= span.bad for o in decisive
        ):  # a narrower decisive gate inside names the place
            continue
        kept.append(
            _change_point(
                points,
                span.good,
                span.bad,
                span.ratio,
                span.interval,
                larger_is_worse,
                math.nan,
                GATE,
            )
        )
    return sorted(kept, key=lambda c: c.index)


def _newest_gate(points: Sequence[Point], pairs: Sequence[Pair]) -> _Span | None:
    """The narrowest gate of ``pairs`` whose newer commit is the newest point, or None."""
    ending = [s for s in _spans(points, pairs) if s.bad == len(points) - 1]
    return max(ending, key=lambda s: s.good) if ending else None


def _gate_verdict(points: Sequence[Point], gate: _Span, larger_is_worse: bool) -> OnlineVerdict:
    base = points[gate.good]
    worse = gate.decisive and (gate.ratio > 1) == larger_is_worse
    said = f"x{gate.ratio:.3f} [{gate.interval[0]:.3f}, {gate.interval[1]:.3f}] " + (
        "worse" if worse else "better" if gate.decisive else "not a change the gate could call"
    )
    if not gate.decisive and gate.verdict != "no change":
        # an inconclusive gate (contended, too few pairs, an interval that holds both a step and none)
        # decided nothing: the newest commit is not judged, never "ok"
        return OnlineVerdict(
            False,
            (gate.ratio,),
            None,
            1,
            f"the interleaved gate against {base.short_sha} was {gate.verdict or 'inconclusive'}: "
            f"{said}: not judged",
            base,
            judged=False,
        )
    return OnlineVerdict(
        worse,
        (gate.ratio,),
        None,
        1,
        f"the interleaved gate against {base.short_sha} says {said}",
        base,
        last_good=base if worse else None,
        first_bad=points[gate.bad] if worse else None,
    )


def _robust_sd(values: np.ndarray) -> float:
    return float(MAD_TO_SD * np.median(np.abs(values - np.median(values)))) if len(values) else 0.0


def check_newest(
    points: Sequence[Point],
    measure: str = "time_s",
    window: int = 20,
    confirm: int = 2,
    k: float = 4.0,
    min_effect: float = 0.05,
    pairs: Sequence[Pair] = (),
) -> OnlineVerdict:
    """Is the newest commit a confirmed regression? The ``confirm`` newest usable points of the newest
    epoch must each be worse than the median of the ``window`` usable points before them by more than
    the limit ``max(min_effect, exp(k * noise) - 1)`` (see the module docstring). When ``pairs``
    (``query.pairs``) hold an interleaved gate whose newer commit is the newest point, the narrowest
    such gate decides instead, as in ``with_gates``: a regression when it called the newest slower
    (worse), else none."""
    larger_is_worse = MEASURES[measure][2]
    gate = _newest_gate(points, pairs)
    if gate is not None:
        return _gate_verdict(points, gate, larger_is_worse)
    last_epoch = epochs(points)[-1] if points else None
    chosen = [p for p in points[last_epoch.start :] if usable(p)] if last_epoch else []
    if not points or not usable(points[-1]):
        newest = points[-1] if points else None
        why = (
            "there is no point"
            if newest is None
            else f"the newest point is set aside ({newest.state or 'contended'})"
            if newest.contended
            else "the newest point is from a tree with uncommitted changes"
            if newest.dirty
            else "the newest point has no values"
        )
        return OnlineVerdict(False, (), None, 0, f"{why}: not judged", judged=False)
    counted = measure in COUNTED
    confirm = 1 if counted else confirm  # a count is exact: one point confirms it
    newest, baseline = chosen[-confirm:], chosen[:-confirm][-window:]
    if len(newest) < confirm or not baseline:
        return OnlineVerdict(
            False,
            (),
            None,
            len(baseline),
            f"needs {confirm} newest point(s) and at least one before them in this epoch; it has "
            f"{len(chosen)} usable point(s)",
            judged=False,
        )
    references = [p.speed_reference_ms for p in baseline if p.speed_reference_ms]
    for point in newest:
        moved = (
            speed_change(
                {
                    "speed_reference": {
                        "before_ms": statistics.median(references),
                        "after_ms": statistics.median(references),
                    }
                },
                {
                    "speed_reference": {
                        "before_ms": point.speed_reference_ms,
                        "after_ms": point.speed_reference_ms,
                    }
                },
            )
            if references and not counted  # a count does not depend on the machine's speed
            else None
        )
        if moved:
            return OnlineVerdict(
                False,
                (),
                None,
                len(baseline),
                f"not judged: at {point.short_sha} (of the {confirm} newest point(s)) "
                f"{moved.split(':')[0]} than over the baseline "
                f"(reference x{point.speed_reference_ms / statistics.median(references):.2f})",
                judged=False,
            )
    base = np.array([point_value(p) for p in baseline])
    # a count is exact: no noise, and the baseline's level is one of its counts (the lower median), not
    # a median or a spread of logs, which across a copy added and later removed mix in the log of zero
    before = (
        statistics.median_low(statistics.median(p.values) for p in baseline) if counted else None
    )
    center = math.log(max(before, VALUE_FLOOR)) if counted else float(np.median(base))
    noise = _robust_sd(base) if len(base) >= MIN_POINTS and not counted else 0.0
    ratios, limits = [], []
    for point in newest:
        rounds = _log_rounds(point)
        own = (
            _robust_sd(rounds) / math.sqrt(len(rounds)) if len(rounds) > 1 and not counted else 0.0
        )
        limits.append(max(math.log1p(min_effect), k * max(noise, own)))
        ratios.append(math.exp(point_value(point) - center))
    sign = 1.0 if larger_is_worse else -1.0
    broke = [sign * math.log(r) > limit for r, limit in zip(ratios, limits)]
    limit = math.exp(max(limits))
    text = ", ".join(f"x{r:.3f}" for r in ratios)
    if counted:  # a count reads as counts: a ratio of counts means nothing when the baseline is 0
        text = count_step(before, statistics.median(newest[-1].values), measure)
    if all(broke):
        # the step: walk back from the confirming points while a point is beyond the baseline's limit
        # (the newest points of the baseline may already be after the step)
        floor = max(math.log1p(min_effect), k * noise)
        first = len(chosen) - confirm
        while first > 0 and sign * (point_value(chosen[first - 1]) - center) > floor:
            first -= 1
        return OnlineVerdict(
            True,
            tuple(ratios),
            limit,
            len(baseline),
            f"{text}: the newest point against the median of the last {len(baseline)} point(s)"
            if counted
            else f"the newest {confirm} point(s) ({text}) are beyond x{limit:.3f} of the last {len(baseline)}",
            last_good=chosen[first - 1] if first > 0 else None,
            first_bad=chosen[first],
        )
    return OnlineVerdict(
        False,
        tuple(ratios),
        limit,
        len(baseline),
        f"{text}: the newest point against the median of the last {len(baseline)} point(s), "
        "no increase beyond the limit"
        if counted
        else f"within the limit x{limit:.3f} for at least one of the newest {confirm} point(s) ({text})",
    )
