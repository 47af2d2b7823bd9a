"""What one timed run records: its commit, testbed, software and benchmarks (plain dataclasses).

The testbed's fingerprint hashes the hardware only (device names and count, CPU model, memory,
threads), so a series survives a driver or torch upgrade; those are software, and a change of the
software fingerprint inside a series is an epoch boundary (``EPOCH_FIELDS``).
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
from typing import Any
from collections.abc import Mapping

# Software whose change starts a new epoch of a series (perfsuite's own version is recorded, not
# an epoch: it changes what is measured only through the suite's code, which the commit names).
EPOCH_FIELDS = ("python", "torch", "cuda", "hip", "cudnn", "triton", "driver", "transformers")
SOFTWARE_FIELDS = EPOCH_FIELDS + ("perfsuite",)

# What the suite adds to a saved pytest-benchmark file (and ab --json adds to its payload) for the history
RUN_UID_KEY = "perfsuite_run_uid"
TESTBED_KEY = "perfsuite_testbed"
SOFTWARE_KEY = "perfsuite_software"
COMMIT_KEY = "perfsuite_commit"


def stable_hash(value: Any, length: int = 16) -> str:
    """First ``length`` hex digits of SHA-256 over ``value`` as canonical JSON (sorted keys)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:length]


@dataclasses.dataclass(frozen=True)
class Commit:
    """The code a run timed. ``commit_time``: committer date, unix seconds; ``position``: commits
    on the first-parent chain up to this one (``git rev-list --first-parent --count``), the order
    points are shown in; ``dirty``: the work tree had uncommitted changes. All None outside git."""

    sha: str | None = None
    branch: str | None = None
    commit_time: float | None = None
    dirty: bool = False
    position: int | None = None
    parent_sha: str | None = None
    subject: str | None = None


@dataclasses.dataclass(frozen=True)
class Testbed:
    """The hardware: ``device_names`` as torch names them (``{"cpu": "...", "cuda": "NVIDIA H100"}``),
    ``device_count`` CUDA devices, ``cpu_model``, ``memory_bytes`` (MemTotal), ``num_threads`` torch's
    intra-op threads; ``host`` is recorded, not fingerprinted (two identical machines share series)."""

    device_names: Mapping[str, str] = dataclasses.field(default_factory=dict)
    device_count: int = 0
    cpu_model: str | None = None
    memory_bytes: int | None = None
    num_threads: int | None = None
    host: str | None = None

    def identity(self) -> dict[str, Any]:
        """The fingerprinted fields; memory in whole GiB (MemTotal varies by a few MiB between boots)."""
        gib = round(self.memory_bytes / 2**30) if self.memory_bytes else None
        return {
            "device_names": dict(sorted(self.device_names.items())),
            "device_count": self.device_count,
            "cpu_model": self.cpu_model,
            "memory_gib": gib,
            "num_threads": self.num_threads,
        }

    @property
    def fingerprint(self) -> str:
        return stable_hash(self.identity())

    def spec(self) -> dict[str, Any]:
        return {**self.identity(), "memory_bytes": self.memory_bytes, "host": self.host}

    def label(self) -> str:
        """``NVIDIA H100 x8`` / ``Intel Xeon ... (2 threads)``: a short human name."""
        cuda = self.device_names.get("cuda")
        if cuda:
            return f"{cuda} x{self.device_count}" if self.device_count > 1 else cuda
        return f"{self.cpu_model or self.device_names.get('cpu') or 'cpu'} ({self.num_threads} threads)"


@dataclasses.dataclass(frozen=True)
class Software:
    """Versions (strings, None when absent) of ``SOFTWARE_FIELDS``; ``fingerprint`` hashes ``EPOCH_FIELDS``."""

    versions: Mapping[str, str | None] = dataclasses.field(default_factory=dict)

    @property
    def fingerprint(self) -> str:
        return stable_hash({k: self.versions.get(k) for k in EPOCH_FIELDS})


class ResultState(enum.StrEnum):
    """Why a stored benchmark is not a clean point (stored in ``perfsuite_results.state``; None: clean).
    A result in one of these states is kept and shown apart, never used by the statistics, never the
    fastest."""

    CONTENDED = "contended"  # every timing (or every A/B pair) was disturbed by another process
    PARTIAL = "partial run"  # its run was interrupted or stopped early (the saved file's marker)
    INCORRECT = "failed correctness"  # its variant's output failed the float64 reference check
    SINGLE_PAIR = "single A/B pair"  # an A/B side with fewer than two clean block pairs
    UNDECIDED = "undecided A/B"  # an A/B gate that could not call its comparison (inconclusive)


MIN_AB_PAIRS = 2  # clean block pairs an A/B side needs to be a point


def ab_state(verdict: Any, clean_pairs: int) -> ResultState | None:
    """The state of one side of an A/B gate's benchmark: ``verdict`` the gate's word, ``clean_pairs``
    the block pairs kept (not contended)."""
    if clean_pairs == 0:
        return ResultState.CONTENDED
    if clean_pairs < MIN_AB_PAIRS:
        return ResultState.SINGLE_PAIR
    if str(verdict or "").startswith("inconclusive"):
        return ResultState.UNDECIDED
    return None


@dataclasses.dataclass(frozen=True)
class BenchmarkRecord:
    """One benchmark of a run. ``name``: ``variant/case_id/mode`` for perfsuite's benchmarks
    (pytest-benchmark's fullname for others); ``rounds_s``: every round's time in seconds on
    ``timer``'s clock; ``median_s``, ``wall_median_s``, ``device_median_s`` seconds; ``tflops``
    TFLOP/s and ``gbps`` GB/s at the median; ``bytes_moved`` minimum bytes read + written;
    ``score_copies`` score-sized copies per step; ``structure`` the structural fingerprint
    (``perfsuite.trace.structure.fingerprint``); ``contended`` the timing was disturbed
    (``perfsuite.measure.contention``; None when not measured); ``speed_reference`` the reference
    matmul's record (``perfsuite.measure.speed_reference``); ``extra`` anything else kept; ``state``
    why it is not a clean point (``ResultState``; None when it is one)."""

    name: str
    variant: str | None = None
    case_id: str | None = None
    mode: str | None = None
    device: str | None = None
    timer: str = "host"
    rounds_s: tuple[float, ...] = ()
    median_s: float | None = None
    wall_median_s: float | None = None
    device_median_s: float | None = None
    tflops: float | None = None
    gbps: float | None = None
    flop: int | None = None
    bytes_moved: int | None = None
    score_copies: float | None = None
    structure: Mapping[str, Any] | None = None
    contended: bool | None = None
    contention: Mapping[str, Any] | None = None
    speed_reference: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] | None = None
    state: str | None = None

    @property
    def structure_hash(self) -> str | None:
        return stable_hash(self.structure) if self.structure else None


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """One timed run. ``uid``: its identity (recording or importing it again adds nothing);
    ``source``: ``plugin``, ``run``, ``ab-base``, ``ab-head`` or ``import``; ``recorded_at`` unix
    seconds; ``run_group``: shared by the shards of one logical run; ``labels``: free key/values;
    ``peaks``: the measured peaks of the run's device (``perfsuite.measure.peaks``: ``matmul_tflops``
    per dtype, ``memory_gbps``), for the roofline."""

    uid: str
    source: str
    commit: Commit
    testbed: Testbed
    software: Software
    benchmarks: tuple[BenchmarkRecord, ...]
    recorded_at: float
    repository: str | None = None
    run_group: str | None = None
    labels: Mapping[str, Any] | None = None
    peaks: Mapping[str, Any] | None = None
