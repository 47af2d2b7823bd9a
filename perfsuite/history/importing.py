"""Runs from the files the suite writes: pytest-benchmark JSON (``.benchmarks/*/*.json``, with
perfsuite's ``extra_info``) and ``perfsuite ab --json`` outputs (two runs: base and head).

A file written by this version carries ``perfsuite_run_uid`` (and the testbed, software and
commit it ran on), so importing a file the plugin already recorded adds nothing; an older file's
uid is a hash of its content, so importing it twice adds nothing either.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import statistics
from pathlib import Path
from typing import Any
from collections.abc import Iterable, Mapping

from perfsuite.errors import HistoryError
from perfsuite.storage import INCOMPLETE_KEY
from perfsuite.history.capture import commit_of
from perfsuite.history.records import (
    COMMIT_KEY,
    RUN_UID_KEY,
    SOFTWARE_KEY,
    TESTBED_KEY,
    BenchmarkRecord,
    Commit,
    ResultState,
    RunRecord,
    ab_state,
    Software,
    Testbed,
    stable_hash,
)


def benchmark_name(variant: str, case_id: str, mode: str) -> str:
    """``variant/case_id/mode``: the name of a suite benchmark in the store (every mode spelled out)."""
    return f"{variant}/{case_id}/{mode}"


def _timestamp(text: Any) -> float | None:
    if isinstance(text, (int, float)):
        return float(text)
    if not isinstance(text, str) or not text:
        return None
    try:
        stamp = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (stamp if stamp.tzinfo else stamp.replace(tzinfo=datetime.UTC)).timestamp()


def commit_from_dict(found: Mapping[str, Any]) -> Commit:
    """A ``Commit`` from ``dataclasses.asdict(Commit)`` or pytest-benchmark's ``commit_info``
    (``id``, ``time``, ``dirty``, ``branch``)."""
    if "sha" in found:
        return Commit(
            **{f.name: found.get(f.name) for f in dataclasses.fields(Commit) if f.name in found}
        )
    branch = found.get("branch")
    return Commit(
        sha=found.get("id") or None,
        branch=None if branch in (None, "(unknown)") else branch,
        commit_time=_timestamp(found.get("time")),
        dirty=bool(found.get("dirty")),
    )


def testbed_from_json(data: Mapping[str, Any]) -> Testbed:
    """The stored testbed (``perfsuite_testbed``), else what pytest-benchmark's ``machine_info`` tells."""
    if isinstance(data.get(TESTBED_KEY), dict):
        stored = data[TESTBED_KEY]
        return Testbed(
            **{f.name: stored.get(f.name) for f in dataclasses.fields(Testbed) if f.name in stored}
        )
    machine = data.get("machine_info") or {}
    ours = machine.get("perfsuite") or {}
    cpu = machine.get("cpu") or {}
    return Testbed(
        device_names=dict(ours.get("device_names") or {}),
        device_count=0,
        cpu_model=cpu.get("brand_raw") or machine.get("processor") or None,
        num_threads=ours.get("num_threads"),
        host=machine.get("node"),
    )


def software_from_json(data: Mapping[str, Any]) -> Software:
    """The stored versions (``perfsuite_software``), else python and torch's from ``machine_info``."""
    if isinstance(data.get(SOFTWARE_KEY), dict):
        return Software(dict(data[SOFTWARE_KEY]))
    machine = data.get("machine_info") or {}
    ours = machine.get("perfsuite") or {}
    text = lambda v: None if v is None else str(v)
    return Software(
        {
            "python": machine.get("python_version"),
            "torch": text(ours.get("torch_version")),
            "cuda": text(ours.get("cuda_version")),
            "hip": text(ours.get("hip_version")),
            "cudnn": text(ours.get("cudnn_version")),
            "driver": text(ours.get("driver_version")),
            "triton": None,
            "transformers": None,
            "perfsuite": None,
        }
    )


def _check_benchmark_entry(index: int, bench: Any) -> None:
    """Raise ``HistoryError`` unless ``bench`` is a pytest-benchmark entry: an object with a string
    ``name`` or ``fullname`` and ``stats`` holding a number ``median`` or a list ``data`` of numbers."""
    where = f"benchmarks[{index}]"
    if not isinstance(bench, Mapping):
        raise HistoryError(f"{where} is {type(bench).__name__}, not a benchmark object")
    names = [bench.get(k) for k in ("fullname", "name") if bench.get(k) is not None]
    if not names or not all(isinstance(n, str) and n for n in names):
        raise HistoryError(
            f"{where}: name {names[0] if names else None!r}; allowed: a non-empty string "
            "('name' or 'fullname', as pytest-benchmark writes them)"
        )
    stats = bench.get("stats")
    median = stats.get("median") if isinstance(stats, Mapping) else None
    data = stats.get("data") if isinstance(stats, Mapping) else None
    numbers = (int, float)
    timed = (isinstance(median, numbers) and not isinstance(median, bool)) or (
        isinstance(data, list)
        and data
        and all(isinstance(t, numbers) and not isinstance(t, bool) for t in data)
    )
    if not timed:
        raise HistoryError(
            f"{where} ({names[0]}): no timing; a pytest-benchmark entry has 'stats' with a number "
            "'median' (or a list 'data' of seconds)"
        )


def benchmark_from_json(bench: Mapping[str, Any]) -> BenchmarkRecord:
    """One pytest-benchmark entry (``stats`` with ``data`` when saved with ``--benchmark-save-data``)."""
    info, stats = bench.get("extra_info") or {}, bench.get("stats") or {}
    rounds = tuple(float(t) for t in stats.get("data") or ())
    median = (
        stats.get("median")
        if stats.get("median") is not None
        else (statistics.median(rounds) if rounds else None)
    )
    contention = info.get("contention") or None
    contended = contention.get("contended") if contention else None
    state = (
        ResultState.INCORRECT
        if info.get("correct") is False
        else ResultState.CONTENDED
        if contended
        else None
    )
    extra = {
        k: info.get(k)
        for k in ("correct", "max_abs_error", "sdpa_backend", "schema_version", "copies_by_kind")
        if k in info
    }
    extra["fullname"] = bench.get("fullname")
    if "variant" not in info:  # a benchmark of some other suite: its timings only
        return BenchmarkRecord(
            name=bench.get("fullname") or bench.get("name") or "?",
            rounds_s=rounds,
            median_s=median,
            extra=extra,
            state=state,
        )
    flop, moved = info.get("flop"), info.get("bytes_read", 0) + info.get("bytes_written", 0)
    scores = info.get("score_accounting") or {}
    tflops = info.get("achieved_tflops") or (flop / median / 1e12 if flop and median else None)
    gbps = info.get("achieved_gbps") or (moved / median / 1e9 if moved and median else None)
    mode = info.get("mode", "forward")
    return BenchmarkRecord(
        name=benchmark_name(info["variant"], info["case"], mode),
        variant=info["variant"],
        case_id=info["case"],
        mode=mode,
        device=(info.get("case_fields") or {}).get("device"),
        timer=info.get("timer", "host"),
        rounds_s=rounds,
        median_s=median,
        wall_median_s=info.get("wall_median_s"),
        device_median_s=info.get("device_median_s"),
        tflops=tflops,
        gbps=gbps,
        flop=flop,
        bytes_moved=moved or None,
        score_copies=scores.get("copies", info.get("score_copies_per_step")),
        structure=info.get("fingerprint"),
        contended=contended,
        contention=contention,
        speed_reference=info.get("speed_reference"),
        extra=extra,
        state=state,
    )


def content_uid(prefix: str, data: Any) -> str:
    """``prefix-<hash>`` of ``data``: the uid of a file that does not carry one."""
    return f"{prefix}-{stable_hash(data, 32)}"


def run_from_benchmark_json(
    data: Mapping[str, Any],
    source: str = "import",
    commit: Commit | None = None,
    testbed: Testbed | None = None,
    software: Software | None = None,
    repository: str | None = None,
    run_group: str | None = None,
    labels: Mapping[str, Any] | None = None,
    recorded_at: float | None = None,
) -> RunRecord:
    """A ``RunRecord`` from a pytest-benchmark JSON document (as saved, or ``output_json`` in the
    plugin's hook). Arguments given override what the file says; a partial run (interrupted, or
    stopped at the first failure) keeps the benchmarks that finished and says why in its ``partial``
    label. Raises ``HistoryError`` when ``data`` is not one (no ``benchmarks`` list, or an entry without
    a string name or a timing, named by its index)."""
    if not isinstance(data, Mapping) or not isinstance(data.get("benchmarks"), list):
        raise HistoryError("not a pytest-benchmark JSON document (no 'benchmarks' list)")
    for index, bench in enumerate(data["benchmarks"]):
        _check_benchmark_entry(index, bench)
    if commit is None:
        stored = data.get(COMMIT_KEY) or data.get("commit_info") or {}
        commit = commit_from_dict(stored)
    uid = data.get(RUN_UID_KEY) or content_uid(
        "import",
        [
            data.get("datetime"),
            data.get("commit_info"),
            (data.get("machine_info") or {}).get("node"),
            [(b.get("fullname"), b.get("stats")) for b in data["benchmarks"]],
        ],
    )
    benchmarks = tuple(benchmark_from_json(b) for b in data["benchmarks"])
    if data.get(INCOMPLETE_KEY):
        labels = {**(labels or {}), "partial": data[INCOMPLETE_KEY]}
        # a run cut short: every benchmark in it is kept apart (the one interrupted may hold a part of
        # its rounds, and the file cannot say which)
        benchmarks = tuple(
            dataclasses.replace(b, state=b.state or ResultState.PARTIAL) for b in benchmarks
        )
    return RunRecord(
        uid=uid,
        source=source,
        commit=commit,
        testbed=testbed or testbed_from_json(data),
        software=software or software_from_json(data),
        benchmarks=benchmarks,
        recorded_at=recorded_at
        if recorded_at is not None
        else (_timestamp(data.get("datetime")) or 0.0),
        repository=repository,
        run_group=run_group or data.get("perfsuite_run_group"),
        labels=labels,
        peaks=data.get("perfsuite_peaks")
        if isinstance(data.get("perfsuite_peaks"), dict)
        else None,
    )


def _ab_benchmarks(payload: Mapping[str, Any], side: str) -> Iterable[BenchmarkRecord]:
    for bench in payload.get("benchmarks") or []:
        blocks = bench.get(f"{side}_blocks_s") or []
        if not blocks:
            continue
        contended = list(bench.get("contended_pairs") or []) + [False] * len(blocks)
        clean = [t for block, c in zip(blocks, contended) if not c for t in block]
        every = [t for block in blocks for t in block]
        parts = str(bench["key"]).split("/")
        variant, case_id, mode = (
            parts[0],
            parts[1] if len(parts) > 1 else "?",
            parts[2] if len(parts) > 2 else "forward",
        )
        structure = bench.get(f"{side}_fingerprint")
        yield BenchmarkRecord(
            name=benchmark_name(variant, case_id, mode),
            variant=variant,
            case_id=case_id,
            mode=mode,
            device="cuda" if case_id.endswith("-cuda") else "cpu",
            rounds_s=tuple(clean or every),
            median_s=statistics.median(clean or every),
            structure=structure,
            contended=not clean,
            state=ab_state(bench.get("verdict"), sum(not c for c in contended[: len(blocks)])),
            extra={"ab_verdict": bench.get("verdict"), "ab_blocks": len(blocks)}
            | (
                {"ab_ratio": _finite_only(bench["ratio"])}
                if side == "head" and bench.get("ratio")
                else {}
            )
            | (_spread(bench) if side == "head" else {}),
        )


def _spread(bench: Mapping[str, Any]) -> dict[str, float]:
    """``{"ab_between_pairs_sd": sd}``: the payload's standard deviation between the gate's worker pairs
    (log units; an A/A gate's is the noise floor later gates read, ``query.aa_spreads``), when it has
    one and both sides had the same structure."""
    sd = None if bench.get("structure") else bench.get("between_pairs_sd")
    finite = isinstance(sd, (int, float)) and math.isfinite(sd)
    return {"ab_between_pairs_sd": float(sd)} if finite else {}


def _finite_only(found: Mapping[str, Any]) -> dict[str, Any]:
    """``found`` with infinite or NaN numbers as None: JSON (and PostgreSQL's json type) has neither."""
    return {
        k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in found.items()
    }


def runs_from_ab_json(
    payload: Mapping[str, Any],
    commits: Mapping[str, Commit] | None = None,
    testbed: Testbed | None = None,
    repository: str | None = None,
) -> list[RunRecord]:
    """The two runs (``ab-base``, ``ab-head``) of a ``perfsuite ab --json`` payload: each side's
    rounds (blocks of contended pairs left out unless every pair was contended), its fingerprint,
    its commit (``commits`` or the payload's ``commits``) and software. Raises ``HistoryError``
    when ``payload`` is not one."""
    if not isinstance(payload, Mapping) or "base_machine" not in (payload.get("machine") or {}):
        raise HistoryError("not a perfsuite ab --json document (no machine.base_machine)")
    machine = payload["machine"]
    stored = payload.get("commits") or {}
    uid = payload.get(RUN_UID_KEY) or content_uid("ab", [machine, payload.get("benchmarks")])
    testbed = testbed or (
        Testbed(**payload[TESTBED_KEY])
        if isinstance(payload.get(TESTBED_KEY), dict)
        else Testbed(
            device_names=dict(machine.get("device_names") or {}),
            num_threads=machine.get("num_threads"),
        )
    )
    software = payload.get(SOFTWARE_KEY) or {}
    found = []
    for side, info in (("base", machine["base_machine"]), ("head", machine)):
        commit = (commits or {}).get(side) or commit_from_dict(stored.get(side) or {})
        versions = (
            software.get(side) or software_from_json({"machine_info": {"perfsuite": info}}).versions
        )
        found.append(
            RunRecord(
                uid=f"{uid}-{side}",
                source=f"ab-{side}",
                commit=commit,
                testbed=testbed,
                software=Software(dict(versions)),
                benchmarks=tuple(_ab_benchmarks(payload, side)),
                recorded_at=float(payload.get("recorded_at") or 0.0),
                repository=repository,
                run_group=uid,
            )
        )
    return found


def runs_from_file(path: Path, folder: Path | None = None) -> list[RunRecord]:
    """The runs in one file (pytest-benchmark JSON or ``ab --json``); ``HistoryError`` naming it
    when it is neither. ``folder``: a git repository in which to look up the commits' first-parent
    positions (the file does not know them)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HistoryError(f"{path}: cannot be read as JSON ({exc})", str(path)) from None
    try:
        runs = (
            runs_from_ab_json(data)
            if isinstance(data, dict) and "base_machine" in (data.get("machine") or {})
            else [run_from_benchmark_json(data)]
        )
    except HistoryError as exc:
        raise HistoryError(f"{path}: {exc}", str(path)) from None
    except (KeyError, TypeError, ValueError) as exc:
        raise HistoryError(
            f"{path}: a run file with a missing or malformed field ({exc!r})", str(path)
        ) from None
    if folder is None:
        return runs
    placed = []
    for run in runs:
        if run.commit.sha and run.commit.position is None:
            found = commit_of(folder, run.commit.sha, dirty=run.commit.dirty)
            if found.sha:
                run = dataclasses.replace(
                    run,
                    commit=dataclasses.replace(
                        found, branch=run.commit.branch or found.branch, dirty=run.commit.dirty
                    ),
                )
        placed.append(run)
    return placed
