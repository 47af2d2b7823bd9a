"""Measure perfsuite.history's change-point detector: precision, recall and F1 with a margin (as
TCPDBench scores them: van den Burg & Williams, "An Evaluation of Change Point Detection Algorithms",
2020), on

  synthetic   seeded series with this project's noise (log-normal rounds, outlier rounds, bimodal
              points, slow drifts) and steps of 2-30%:  python -m validation.change_points synthetic
  tcpd        real labelled series of the TCPD benchmark (a checkout of
              github.com/alan-turing-institute/TCPD; only series whose licence allows reuse):
              python -m validation.change_points tcpd --path TCPD_CHECKOUT
  speed       10,000 points analysed:  python -m validation.change_points speed
  make-history  a throwaway repository of 32 commits, each timed by perfsuite run, with an extra copy,
              a lost in-place op and a slower backward planted: python -m validation.change_points
              make-history --repo /tmp/h
  history     its store against the planted commits: python -m validation.change_points history
              --store /tmp/h/.perfsuite/history.sqlite --planted SHA,SHA,SHA

Run from the repository root. Results are printed as Markdown tables.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

from perfsuite.history.changepoints import detect
from perfsuite.history.query import Point

MARGIN = 5  # points: a detection within 5 points of a true change point counts (TCPDBench's margin)
ROUNDS = 10
RUN_SIGMA = (
    0.02  # run-to-run spread of a point's median (log scale): separate runs of identical code
)
ROUND_SIGMA = (
    0.05  # spread of rounds inside a run (log-normal): IQR/median of 3-9% in the suite's tables
)
OUTLIER_ROUNDS = 0.05  # share of rounds 1.5-3x slow (a preempted round)
BIMODAL_POINTS = 0.03  # share of points from a run on a slower machine state (+15%)


def point_sigma() -> float:
    """The noise of one point's log-median: run-to-run spread and the median of ROUNDS rounds."""
    return math.sqrt(RUN_SIGMA**2 + (1.2533 * ROUND_SIGMA) ** 2 / ROUNDS)


def make_points(levels: np.ndarray, rng: np.random.Generator) -> list[Point]:
    """Points whose true medians are ``levels`` (one per commit), with the noise model above."""
    found = []
    for index, level in enumerate(levels):
        run = rng.normal(0.0, RUN_SIGMA) + (
            math.log(1.15) if rng.random() < BIMODAL_POINTS else 0.0
        )
        rounds = level * np.exp(run + rng.normal(0.0, ROUND_SIGMA, ROUNDS))
        outliers = rng.random(ROUNDS) < OUTLIER_ROUNDS
        rounds[outliers] *= rng.uniform(1.5, 3.0, outliers.sum())
        values = tuple(float(v) for v in rounds)
        found.append(
            Point(
                f"{index:040x}",
                index,
                float(index),
                "main",
                None,
                False,
                (str(index),),
                values,
                values,
                False,
                float(np.median(values)),
                "sw",
                {},
                None,
                None,
                float(index),
            )
        )
    return found


def f1_margin(
    truth: list[int], found: list[int], n: int, margin: int = MARGIN
) -> tuple[float, float, float]:
    """Precision, recall, F1 as TCPDBench: index 0 counts as a change point in both sets; each true
    change point is matched by at most one detection within ``margin``."""
    truth, found = sorted({0, *truth}), sorted({0, *found})
    used, hits = set(), 0
    for t in truth:
        close = [f for f in found if abs(f - t) <= margin and f not in used]
        if close:
            used.add(min(close, key=lambda f: abs(f - t)))
            hits += 1
    precision, recall = hits / len(found), hits / len(truth)
    return (
        precision,
        recall,
        (2 * precision * recall / (precision + recall) if precision + recall else 0.0),
    )


def synthetic_series(
    rng: np.random.Generator, n: int, step: float | None, drift: float = 0.0, steps: int = 2
) -> tuple[list[Point], list[int]]:
    """A series of ``n`` points with ``steps`` steps of relative size ``step`` (random sign; None: none)
    at random places at least 15 points apart, and a linear ``drift`` (relative, over the series)."""
    levels = np.exp(np.linspace(0.0, math.log1p(drift), n)) * 1e-3
    truth: list[int] = []
    if step:
        while len(truth) < steps:
            at = int(rng.integers(15, n - 15))
            if all(abs(at - t) >= 15 for t in truth):
                truth.append(at)
        for at in sorted(truth):
            levels[at:] *= (1 + step) if rng.random() < 0.5 else 1 / (1 + step)
    return make_points(levels, rng), sorted(truth)


def ruptures_indices(points: list[Point]) -> list[int]:
    """The comparison: ruptures' PELT (l2 cost) on the same point values, BIC-style penalty
    2 log(n) sigma^2 with sigma from the MAD of successive differences."""
    import ruptures

    x = np.array([math.log(float(np.median(p.values))) for p in points])
    sigma = 1.4826 * float(np.median(np.abs(np.diff(x)))) / math.sqrt(2)
    ends = (
        ruptures.Pelt(model="l2", min_size=2, jump=1)
        .fit(x)
        .predict(pen=2 * math.log(len(x)) * max(sigma, 1e-9) ** 2)
    )
    return [e for e in ends if e < len(x)]


def run_synthetic(series_per_row: int, seed: int, n: int, method: str = "perfsuite") -> list[str]:
    rng = np.random.default_rng(seed)
    sigma = point_sigma()
    lines = [
        f"Method: {method}. Point noise sigma (log scale) = {sigma:.4f} ({sigma * 100:.1f}%); {series_per_row} series of {n} "
        f"points per row, {ROUNDS} rounds per point, seed {seed}, margin {MARGIN} points.",
        "",
        "| series | step | step / sigma | precision | recall | F1 | false change points per 1,000 stationary points |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    three_sigma = math.expm1(3 * sigma)
    rows = [("steps", s, 0.0) for s in sorted((0.02, 0.03, 0.05, three_sigma, 0.10, 0.20, 0.30))]
    rows += [
        ("stationary", None, 0.0),
        ("slow drift 10%", None, 0.10),
        ("steps + drift 10%", 0.10, 0.10),
    ]
    for name, step, drift in rows:
        scores, false = [], 0
        for _ in range(series_per_row):
            points, truth = synthetic_series(rng, n, step, drift)
            found = (
                [c.index for c in detect(points)]
                if method == "perfsuite"
                else ruptures_indices(points)
            )
            scores.append(f1_margin(truth, found, n))
            false += sum(1 for f in found if all(abs(f - t) > MARGIN for t in truth))
        precision, recall, f1 = (float(np.mean([s[i] for s in scores])) for i in range(3))
        ratio = f"{math.log1p(step) / sigma:.1f}" if step else "-"
        lines.append(
            f"| {name} | {f'{step:.1%}' if step else '-'} | {ratio} | {precision:.3f} | {recall:.3f} | "
            f"{f1:.3f} | {1000 * false / (series_per_row * n):.2f} |"
        )
    return lines


# TCPD series used (univariate, positive, licence allows reuse; see docs/explanation/change-points.md)
TCPD_SERIES = {
    "bank": "MIT",
    "well_log": "MIT",
    "gdp_argentina": "CC BY 4.0",
    "gdp_croatia": "CC BY 4.0",
    "gdp_iran": "CC BY 4.0",
    "gdp_japan": "CC BY 4.0",
    "jfk_passengers": "CC0",
    "lga_passengers": "CC0",
    "ozone": "CC BY 4.0",
    "rail_lines": "CC BY 4.0",
    "children_per_woman": "CC BY 4.0",
    "co2_canada": "CC BY 4.0",
    "uk_coal_employ": "OGL v3",
}


def tcpd_f1(truths: dict[str, list[int]], found: list[int], n: int) -> tuple[float, float, float]:
    """TCPDBench's F1 over several annotators: precision against the union, recall averaged."""
    union = sorted({i for t in truths.values() for i in t})
    precision = f1_margin(union, found, n)[0]
    recall = float(np.mean([f1_margin(t, found, n)[1] for t in truths.values()]))
    return (
        precision,
        recall,
        (2 * precision * recall / (precision + recall) if precision + recall else 0.0),
    )


def run_tcpd(path: Path) -> list[str]:
    annotations = json.loads((path / "annotations.json").read_text())
    lines = [
        "| series | licence | points | precision | recall | F1 |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    f1s = []
    for name, licence in TCPD_SERIES.items():
        data = json.loads((path / "datasets" / name / f"{name}.json").read_text())
        raw = list(data["series"][0]["raw"])
        if len(data["series"]) != 1 or any(v is None or v <= 0 for v in raw):
            lines.append(
                f"| {name} | {licence} | {len(raw)} | skipped: not univariate and positive | | |"
            )
            continue
        points = [
            Point(
                f"{i:040x}",
                i,
                float(i),
                None,
                None,
                False,
                (str(i),),
                (float(v),),
                (float(v),),
                False,
                float(v),
                "sw",
                {},
                None,
                None,
                float(i),
            )
            for i, v in enumerate(raw)
        ]
        found = [c.index for c in detect(points)]
        precision, recall, f1 = tcpd_f1(annotations[name], found, len(raw))
        f1s.append(f1)
        lines.append(
            f"| {name} | {licence} | {len(raw)} | {precision:.3f} | {recall:.3f} | {f1:.3f} |"
        )
    lines.append(f"| mean of {len(f1s)} | | | | | {np.mean(f1s):.3f} |")
    return lines


def run_speed(n: int, repeats: int) -> list[str]:
    rng = np.random.default_rng(1)
    points, _ = synthetic_series(rng, n, 0.10, steps=5)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        detect(points)
        times.append(time.perf_counter() - started)
    return [
        f"{n} points: detect() best of {repeats}: {min(times):.3f} s, median {float(np.median(times)):.3f} s"
    ]


# The planted changes in make-history's order, and the modes whose time each is meant to change: the
# copy and the lost in-place op add forward work; checkpointing makes backward recompute the forward
# (its forward cost, a few percent, is not expected to be found).
PLANTED_ORDER = ("extra_copy", "lost_in_place", "slower_backward")
EXPECTED_IN = {"extra_copy": "forward", "lost_in_place": "forward", "slower_backward": "backward"}


def run_history(
    url: str, planted: list[str], include_contended: bool = False, gates: bool = True
) -> list[str]:
    """Every time_s and score_copies series of a store: change points found against the planted commits (``planted``:
    shas in ``PLANTED_ORDER``). ``include_contended``: judge contended points too (their rounds used as
    if quiet); ``gates``: let the store's interleaved A/B gates judge (``changepoints.with_gates``)."""
    import dataclasses

    from perfsuite.history import open_store

    lines = [
        f"contended points {'used' if include_contended else 'left out (the rule)'}; "
        f"interleaved gates {'used' if gates else 'not used'}",
        "",
        "| benchmark | points | of which contended | gates | expected planted found at their commit "
        "| other planted commits flagged | false change points |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    names = dict(zip(planted, PLANTED_ORDER))
    with open_store(url, create=False) as store:
        every = store.list_series(measure="time_s") + store.list_series(measure="score_copies")
        for series in every:
            points = store.points(series.key)
            pairs = store.pairs(series) if gates else []
            contended = sum(p.contended for p in points)
            if include_contended:
                points = [
                    dataclasses.replace(p, values=p.all_values, contended=False) for p in points
                ]
            found = detect(points, series.key.measure, pairs=pairs)
            flagged = {names.get(_planted_of(c.first_bad.sha, planted)) for c in found}
            expected = [s for s, n in names.items() if EXPECTED_IN[n] == series.mode]
            hit = [s for s in expected if names[s] in flagged]
            other = sorted(n for n in flagged if n and EXPECTED_IN[n] != series.mode)
            false = [
                f"{c.first_bad.short_sha} x{c.ratio:.2f}"
                for c in found
                if _planted_of(c.first_bad.sha, planted) is None
            ]
            lines.append(
                f"| {series.key.benchmark} {series.key.measure} | {len(points)} | {contended} | {len(pairs)} | "
                f"{len(hit)} of {len(expected)} | {', '.join(other) or 'none'} | "
                f"{len(false)}{': ' + ', '.join(false) if false else ''} |"
            )
    return lines


def _planted_of(sha: str | None, planted: list[str]) -> str | None:
    return next((p for p in planted if sha and sha.startswith(p)), None)


ATTENTION = '''"""Softmax attention over the whole score matrix (validation history, commit {number})."""
import torch
from torch.utils.checkpoint import checkpoint


def _attention(query, key, value, mask, scale):
    scores = torch.matmul(query, key.transpose(-2, -1)).mul_(scale)
{copy}    if mask.masked_out is not None:
        {fill}
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return torch.matmul(weights, value)


def blocked_attention(query, key, value, *, mask, scale):
    """Softmax attention; commit {number}."""
{call}
'''
PLAIN_CALL = "    return _attention(query, key, value, mask, scale)"
CHECKPOINTED_CALL = (
    "    return checkpoint(_attention, query, key, value, mask, scale, use_reentrant=False)"
    "  # backward recomputes the forward"
)
IN_PLACE = 'scores.masked_fill_(mask.masked_out, float("-inf"))'
OUT_OF_PLACE = (
    'scores = scores.masked_fill(mask.masked_out, float("-inf"))  # lost in-place op: a clone'
)
EXTRA_COPY = "    scores = scores.clone()  # an extra copy\n"


def make_history(
    repo: Path,
    commits: int,
    case: str,
    planted: dict[int, str],
    runs_per_commit: int = 1,
    gate: list[str] | None = None,
) -> list[str]:
    """A throwaway git repository with ``commits`` commits, each timed ``runs_per_commit`` times by
    ``perfsuite run`` (recorded in its own .perfsuite/history.sqlite, the runs of a commit pooled into
    its point) and, when ``gate`` is a list (extra ``perfsuite ab`` options), gated against its parent
    by ``perfsuite ab --base-ref HEAD~1 --head-ref HEAD`` (both sides recorded, as a CI gate on every
    merged commit would); ``planted``: commit number -> extra_copy | lost_in_place | slower_backward
    (each kept from then on). Returns the planted commits' shas."""
    import os
    import sys

    from validation.user_repo import ATTENTION_PY, myattn_repo

    user_repo = myattn_repo(
        repo,
        case,
        modes=("forward", "backward"),
        # the user's package first, then whatever the caller had (an offline machine's extra site)
        env={"PYTHONPATH": os.pathsep.join(p for p in ("src", os.environ.get("PYTHONPATH")) if p)},
    )
    state, shas = {"copy": "", "fill": IN_PLACE, "call": PLAIN_CALL}, []
    for number in range(1, commits + 1):
        change = planted.get(number)
        if change == "extra_copy":
            state["copy"] = EXTRA_COPY
        elif change == "lost_in_place":
            state["fill"] = OUT_OF_PLACE
        elif change == "slower_backward":
            state["call"] = CHECKPOINTED_CALL
        sha = user_repo.commit(
            f"commit {number}" + (f": {change}" if change else ": no change to the work"),
            {ATTENTION_PY: ATTENTION.format(number=number, **state)},
        )
        if change:
            shas.append(sha)
        for _ in range(runs_per_commit):
            timed = user_repo.sh(
                sys.executable,
                "-m",
                "perfsuite",
                "run",
                "--benchmark-min-rounds=15",
                "--benchmark-max-time=0.2",
                "-q",
                check=False,
                timeout=None,
            )
            line = [text for text in timed.stdout.splitlines() if "perfsuite: history" in text]
            print(
                f"commit {number}: {change or '-'}: {line[0] if line else timed.stdout[-300:]}",
                flush=True,
            )
        if gate is not None and number > 1:
            gated = user_repo.sh(
                sys.executable,
                "-m",
                "perfsuite",
                "ab",
                "--base-ref",
                "HEAD~1",
                "--head-ref",
                "HEAD",
                *gate,
                check=False,
                timeout=None,
            )
            verdicts = [t for t in gated.stdout.splitlines() if t.startswith(("- ", "**"))]
            print(
                f"commit {number}: {change or '-'}: gate exit {gated.returncode}: "
                + (" ".join(verdicts) or gated.stderr[-300:]),
                flush=True,
            )
    return shas


def planted_commits(text: str, commits: int) -> dict[int, str]:
    """``"11:extra_copy,19:lost_in_place,26:slower_backward"`` -> ``{11: "extra_copy", ...}``.

    Raises ``SystemExit`` naming the bad item: a change not in ``PLANTED_ORDER`` (or out of that
    order, which ``history --planted`` relies on), or a commit outside 2..``commits``."""
    planted: dict[int, str] = {}
    for item in text.split(","):
        number, _, change = item.partition(":")
        if change not in PLANTED_ORDER or not number.isdigit() or not 2 <= int(number) <= commits:
            raise SystemExit(
                f"--planted: {item!r} is not NUMBER:CHANGE with NUMBER in 2..{commits} and CHANGE "
                f"one of {', '.join(PLANTED_ORDER)}"
            )
        planted[int(number)] = change
    order = [planted[n] for n in sorted(planted)]
    if order != [c for c in PLANTED_ORDER if c in order]:
        raise SystemExit(f"--planted: changes must come in the order {', '.join(PLANTED_ORDER)}")
    return planted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    synthetic = commands.add_parser("synthetic")
    synthetic.add_argument("--series", type=int, default=400, help="series per row (default 400)")
    synthetic.add_argument("--points", type=int, default=200)
    synthetic.add_argument("--seed", type=int, default=0)
    synthetic.add_argument(
        "--method",
        choices=("perfsuite", "ruptures"),
        default="perfsuite",
        help="perfsuite's detector, or ruptures' PELT as a comparison",
    )
    tcpd = commands.add_parser("tcpd")
    tcpd.add_argument(
        "--path", type=Path, required=True, help="a checkout of alan-turing-institute/TCPD"
    )
    speed = commands.add_parser("speed")
    speed.add_argument("--points", type=int, default=10_000)
    speed.add_argument("--repeats", type=int, default=5)
    history = commands.add_parser("history")
    history.add_argument("--store", required=True)
    history.add_argument(
        "--planted",
        required=True,
        help="comma-separated shas (prefixes) of the planted changes, in make-history's order "
        "(extra copy, lost in-place op, slower backward)",
    )
    history.add_argument(
        "--include-contended", action="store_true", help="judge contended points too"
    )
    history.add_argument(
        "--no-gates",
        action="store_true",
        help="judge separate runs only, leaving the store's interleaved gates out",
    )
    made = commands.add_parser(
        "make-history", help="a throwaway repository of timed commits with planted changes"
    )
    made.add_argument("--repo", type=Path, required=True, help="a new folder")
    made.add_argument("--commits", type=int, default=32)
    made.add_argument("--case", default="b1h2s512d32-fp32-causal-cpu")
    made.add_argument(
        "--planted",
        default="11:extra_copy,19:lost_in_place,26:slower_backward",
        help="commit number:change, comma-separated, in the order extra_copy, lost_in_place, "
        "slower_backward (default: %(default)s)",
    )
    made.add_argument(
        "--runs-per-commit",
        type=int,
        default=None,
        help="timed runs (perfsuite run) of each commit, pooled into its point (default 1; 0 with --gate)",
    )
    made.add_argument(
        "--gate",
        nargs=argparse.REMAINDER,
        default=None,
        help="also gate each commit against its parent with perfsuite ab; what follows are ab's "
        "options (e.g. --gate --alpha 0.001 --budget-s 16)",
    )
    args = parser.parse_args(argv)
    if args.command == "make-history":
        planted = planted_commits(args.planted, args.commits)
        runs = args.runs_per_commit
        runs = (0 if args.gate is not None else 1) if runs is None else runs
        shas = make_history(args.repo, args.commits, args.case, planted, runs, args.gate)
        print(
            f"planted: {','.join(shas)}\nthen: python -m validation.change_points history "
            f"--store {args.repo / '.perfsuite' / 'history.sqlite'} --planted {','.join(shas)}"
        )
        return 0
    if args.command == "synthetic":
        lines = run_synthetic(args.series, args.seed, args.points, args.method)
    elif args.command == "tcpd":
        lines = run_tcpd(args.path)
    elif args.command == "speed":
        lines = run_speed(args.points, args.repeats)
    else:
        lines = run_history(
            args.store,
            [s for s in args.planted.split(",") if s],
            args.include_contended,
            gates=not args.no_gates,
        )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
