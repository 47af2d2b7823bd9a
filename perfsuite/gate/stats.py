"""The gate's statistics, one import away: the names of ``intervals`` (ratio estimates and their
intervals), ``spending`` (alpha spending over planned looks), ``sequential`` (the sequential A/B rule over
warm worker pairs) and ``verdicts`` (verdicts, settings and the contended pairs' rule). Each concept
lives in its own module; this one only re-exports them.
"""

from perfsuite.gate.intervals import (
    BOOTSTRAP_SAMPLES,
    BOOTSTRAP_SEED,
    EXACT_SIGNED_RANK_MAX_N,
    MIN_CLUSTER_PAIRS,
    PairSample,
    RatioEstimate,
    as_pair_sample,
    cluster_estimates,
    clustered_interval,
    min_pairs,
    pair_log_ratios,
    signed_rank_critical,
    signed_rank_null_cdf,
    student_t_critical,
    student_t_tail,
    unpaired_ratio,
    wilcoxon_interval,
)
from perfsuite.gate.sequential import (
    WORKER_PAIRS,
    SequentialOutcome,
    SequentialPlan,
    look_estimate,
    planned_looks,
    sequential_visits,
)
from perfsuite.gate.spending import nominal_levels, obrien_fleming_spent, spending_bounds
from perfsuite.gate.verdicts import (
    AB_ALPHA,
    CONTENDED_CPU_MIN_EFFECT,
    CONTENDED_MIN_EFFECT,
    CONTENDED_VERDICT,
    CONTENDED_WAIT_CAP,
    DECISIVE,
    DEFAULT_CONTENDED_PAIRS,
    MIN_UNITS,
    SEPARATE_RUNS_ALPHA,
    SEPARATE_RUNS_MIN_EFFECT,
    ContendedPairs,
    GateSettings,
    Verdict,
    below_min_effect,
    contended_cpu_ratios,
    contended_verdict,
    verdict,
    wait_adjusted,
)

WORKERS_PER_SIDE = WORKER_PAIRS  # the former name: worker processes per side are the worker pairs

__all__ = [name for name in dir() if not name.startswith("_")]
