"""The A/A noise floor: how far apart worker pairs measured identical code, learned from recorded A/A runs.

With few worker pairs, the t interval's standard deviation is itself a noisy estimate: a gate whose
pairs happen to agree understates the noise. An A/A run (``perfsuite ab --base-ref main --head-ref
main --json aa.json``, the nightly job ``perfsuite init-ci`` writes) measures, per benchmark, the
standard deviation between its worker pairs' estimates when nothing changed; ``perfsuite ab
--noise-floor aa.json`` makes that the least the gate assumes (``sequential.look_estimate``). Several
A/A documents pool their variances (the root of the mean variance), so one lucky night does not set a
low floor. A recorded A/A gate keeps its spread in the history store too (the head's
``ab_between_pairs_sd``); ``perfsuite ab`` with the history on reads the newest ``HISTORY_AA_GATES`` of
this testbed (``floors_from_history``), and a ``--noise-floor`` document overrides them per benchmark.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from perfsuite.attention.modes import Mode
from perfsuite.errors import UsageError
from perfsuite.gate.compare import BenchmarkKey
from perfsuite.gate.intervals import cluster_estimates, pair_log_ratios

# A/A gates per benchmark the history's floor pools: the newest seven (the nightly workflow's week).
HISTORY_AA_GATES = 7
# Worker pairs with kept block pairs a gate needs for its spread to be kept as a floor: half the default
# twelve (the first look). With two, the spread has one degree of freedom: a gate beside a load kept
# 4e31-wide intervals' worth of it, which would have blinded every later gate until seven nights pooled.
FLOOR_MIN_WORKER_PAIRS = 6


def between_pairs_sd(benchmark: dict, min_worker_pairs: int = 2) -> float | None:
    """The standard deviation (log units) between the worker pairs' estimates of one benchmark of an
    ``ab --json`` document (its kept pairs and ``clusters``); None with fewer than ``min_worker_pairs``
    worker pairs holding kept pairs (at least 2)."""
    clusters = benchmark.get("clusters") or []
    base, head = benchmark.get("base_blocks_s") or [], benchmark.get("head_blocks_s") or []
    if not base or len(clusters) != len(base) or any(c is None for c in clusters):
        return None
    kept = [
        i for i, c in enumerate(benchmark.get("contended_pairs") or [False] * len(base)) if not c
    ]
    logs = pair_log_ratios([base[i] for i in kept], [head[i] for i in kept])
    estimates = cluster_estimates(logs, [clusters[i] for i in kept])
    return float(estimates.std(ddof=1)) if len(estimates) >= max(2, min_worker_pairs) else None


def pooled_sd(sds: Sequence[float]) -> float:
    """Several A/A runs' standard deviations pooled: the root of their mean variance."""
    return math.sqrt(float(np.mean(np.square(sds))))


def floors_from_payloads(payloads: list[dict]) -> dict[str, float]:
    """Per benchmark key, the pooled between-worker-pair standard deviation of A/A ``payloads``
    (``ab --json`` documents, ``pooled_sd``) over the documents that measured it."""
    spreads: dict[str, list[float]] = {}
    for payload in payloads:
        for benchmark in payload.get("benchmarks", []):
            sd = between_pairs_sd(benchmark)
            if sd is not None:
                spreads.setdefault(benchmark["key"], []).append(sd)
    return {key: pooled_sd(sds) for key, sds in spreads.items()}


def floors_from_history(spreads: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """Per benchmark key (``variant/case`` for the forward, as the gate names it), the pooled floor of
    the A/A gates a history store holds (``Store.aa_spreads``: by stored name, ``variant/case/mode``)."""
    floors = {}
    for name, sds in spreads.items():
        variant, case_id, mode = (name.split("/") + ["", ""])[:3]
        floors[str(BenchmarkKey(variant, case_id, mode or Mode.FORWARD))] = pooled_sd(sds)
    return floors


def floors_from_files(paths: list[Path]) -> dict[str, float]:
    """``floors_from_payloads`` of the A/A documents at ``paths``.

    Raises:
        UsageError: a file is missing, is not JSON, or is not an ``ab --json`` document of an A/A run
            (its benchmarks must have the same code on both sides: every verdict but ``slower``/``faster``
            is accepted, and a document with a structural difference is refused).
    """
    payloads = []
    for path in paths:
        try:
            payload = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise UsageError(
                f"--noise-floor {path}: cannot read it ({exc})", "--noise-floor"
            ) from None
        if not isinstance(payload, dict) or not isinstance(payload.get("benchmarks"), list):
            raise UsageError(
                f"--noise-floor {path}: not a `perfsuite ab --json` document (no benchmarks list)",
                "--noise-floor",
            )
        changed = [b.get("key") for b in payload["benchmarks"] if b.get("structure")]
        if changed:
            raise UsageError(
                f"--noise-floor {path}: not an A/A run: structure differs in {changed[0]}",
                "--noise-floor",
            )
        payloads.append(payload)
    return floors_from_payloads(payloads)
