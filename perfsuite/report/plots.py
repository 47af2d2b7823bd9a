"""Plots of a saved run (matplotlib, written as PNG and SVG).

* ``latency_bars``: median latency per variant per case (log scale), one panel per mode;
* ``scaling``: latency and TFLOP/s against seq_len_kv per variant (log-log), one row per mode,
  for cases that differ only in sequence length: the naive variants' quadratic curve against
  fused kernels;
* ``roofline``: achieved TFLOP/s against arithmetic intensity (FLOP per byte of the minimum
  traffic), under the measured memory-bandwidth and matmul roofs of the device. Causal FLOP
  count only attended pairs, so a kernel computing whole diagonal blocks can sit slightly
  above a roof measured with a plain matmul. Forward points are filled, backward and
  forward+backward points hollow (their FLOP: ``cost_model.mode_flop``).

Contended rows (``BenchmarkResult.contended``: other processes took the CPU while they were
timed) are hatched in the latency bars and crossed out in the roofline, and named in the legend.
"""

from __future__ import annotations

import collections
from pathlib import Path

from perfsuite.attention.cases import parse_case_id
from perfsuite.attention.modes import Mode
from perfsuite.errors import ReportError
from perfsuite.report.results import BenchmarkResult
from perfsuite.report.saved import SavedRun

MISSING_MATPLOTLIB = (
    "plots need matplotlib, which is not installed: pip install 'perfsuite[plots]' "
    "(the Markdown and HTML reports work without it)"
)

try:
    import matplotlib
    from matplotlib.ticker import NullFormatter
except ModuleNotFoundError as error:  # matplotlib is the optional extra [plots]
    raise ReportError(MISSING_MATPLOTLIB) from error

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (pyplot only after choosing the non-interactive backend)


def _save(figure, folder: Path, name: str) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{name}.png", folder / f"{name}.svg"]
    for path in paths:
        figure.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(figure)
    return paths


def _timed(run: SavedRun) -> list[BenchmarkResult]:
    return [r for r in run.results if r.median_s]


def _modes(results: list[BenchmarkResult]) -> list[str]:
    return list(dict.fromkeys(r.mode for r in results))


def latency_bars(run: SavedRun, folder: Path) -> list[Path]:
    """Grouped bars: one group per case, one bar per variant, one panel per mode."""
    results = _timed(run)
    cases = list(dict.fromkeys(r.case_id for r in results))
    variants = list(dict.fromkeys(r.variant for r in results))
    modes = _modes(results)
    by_key = {(r.variant, r.case_id, r.mode): r.median_s * 1e3 for r in results}
    contended = {(r.variant, r.case_id, r.mode) for r in results if r.contended}
    width = 0.8 / max(len(variants), 1)
    figure, panels = plt.subplots(
        len(modes),
        1,
        figsize=(max(7, 2.2 * len(cases)), 3.6 * len(modes)),
        squeeze=False,
        sharex=True,
    )
    for axes, mode in zip(panels[:, 0], modes):
        for i, variant in enumerate(variants):
            xs = [c + i * width for c in range(len(cases))]
            bars = axes.bar(
                xs,
                [by_key.get((variant, case, mode), 0) for case in cases],
                width,
                label=variant,
                color=f"C{i % 10}",
            )
            for bar, case in zip(bars, cases):
                if (variant, case, mode) in contended:
                    bar.set_hatch("//")
        if contended:
            axes.bar(
                [0],
                [0],
                0,
                color="white",
                edgecolor="black",
                hatch="//",
                label="contended: not trustworthy",
            )
        axes.set_yscale("log")
        axes.set_ylabel("median ms (log)")
        axes.set_title(
            f"Attention {mode.replace('_', '+')} latency per variant and case", fontsize=10
        )
    panels[-1, 0].set_xticks(
        [c + 0.4 - width / 2 for c in range(len(cases))], cases, rotation=25, ha="right", fontsize=8
    )
    panels[0, 0].legend(fontsize=7, ncols=3)
    figure.tight_layout()
    return _save(figure, folder, "latency")


def _sequence_groups(results: list[BenchmarkResult]) -> dict[str, list[BenchmarkResult]]:
    """Cases that differ only in seq_len, grouped under a label like b1h8d64-fp32-causal-cpu."""
    groups = collections.defaultdict(list)
    for r in results:
        case = parse_case_id(r.case_id)
        label = (
            f"b{case.batch}h{case.num_heads}d{case.head_dim}-{case.dtype}-{case.mask}-{case.device}"
        )
        groups[label].append(r)
    return {
        k: v for k, v in groups.items() if len({parse_case_id(r.case_id).seq_len_kv for r in v}) > 1
    }


def scaling(run: SavedRun, folder: Path) -> list[Path]:
    """Latency and TFLOP/s against seq_len_kv, log-log, one line per variant, one row per mode (largest group)."""
    groups = _sequence_groups(_timed(run))
    if not groups:
        return []
    label, results = max(groups.items(), key=lambda kv: len(kv[1]))
    modes = _modes(results)
    colors = {v: f"C{i % 10}" for i, v in enumerate(dict.fromkeys(r.variant for r in results))}
    figure, panels = plt.subplots(len(modes), 2, figsize=(11, 4 * len(modes)), squeeze=False)
    for (left, right), mode in zip(panels, modes):
        for variant, color in colors.items():
            points = sorted(
                (parse_case_id(r.case_id).seq_len_kv, r)
                for r in results
                if r.variant == variant and r.mode == mode
            )
            if not points:
                continue
            seq = [s for s, _ in points]
            left.plot(
                seq, [r.median_s * 1e3 for _, r in points], marker="o", label=variant, color=color
            )
            right.plot(
                seq, [r.achieved_tflops for _, r in points], marker="o", label=variant, color=color
            )
        for axes, ylabel in (
            (left, f"{mode}: median latency (ms)"),
            (right, f"{mode}: achieved TFLOP/s"),
        ):
            axes.set_xscale("log", base=2)
            axes.set_yscale("log")
            axes.set_xlabel("seq_len")
            axes.set_ylabel(ylabel)
            axes.grid(True, which="both", alpha=0.3)
        left.legend(fontsize=7)
    figure.suptitle(f"Scaling with sequence length ({label})")
    figure.tight_layout()
    return _save(figure, folder, "scaling")


DTYPE_COLORS = {"fp32": "tab:blue", "bf16": "tab:red", "fp16": "tab:orange", "fp64": "tab:green"}


def roofline(run: SavedRun, folder: Path) -> list[Path]:
    """Achieved TFLOP/s against FLOP/byte under the measured roof; nothing without peaks.

    One compute roof: the best matmul rate measured in any dtype. Kernels may compute in a
    wider type than their inputs (SDPA on the CPU upcasts bf16), so a per-dtype matmul rate is
    not a bound for them; points are coloured by input dtype.
    """
    peaks = run.peaks
    results = _timed(run)
    if not peaks or not results:
        return []
    intensity = [r.flop / r.bytes_moved for r in results]
    ridge = (
        max(peaks["matmul_tflops"].values()) * 1e3 / peaks["memory_gbps"]
    )  # FLOP/byte where the roofs meet
    low, high = min(min(intensity) / 2, ridge / 4), max(intensity) * 2
    figure, axes = plt.subplots(figsize=(7.5, 5))
    xs = [low * (high / low) ** (i / 100) for i in range(101)]
    bandwidth_tbps = peaks["memory_gbps"] / 1e3
    best_dtype, peak = max(peaks["matmul_tflops"].items(), key=lambda kv: kv[1])
    axes.plot(
        xs,
        [min(peak, x * bandwidth_tbps) for x in xs],
        linestyle="--",
        color="black",
        label=f"roof: {best_dtype} matmul {peak:.3g} TFLOP/s, copy {peaks['memory_gbps']:.0f} GB/s",
    )
    shapes = "osD^vP*Xh<>p"
    markers = {
        v: shapes[i % len(shapes)] for i, v in enumerate(dict.fromkeys(r.variant for r in results))
    }
    dtypes = []
    for r, x in zip(results, intensity):
        dtype = parse_case_id(r.case_id).dtype
        dtypes.append(dtype)
        color = DTYPE_COLORS.get(dtype, "gray")
        face = color if r.mode == Mode.FORWARD else "none"
        axes.scatter(
            x,
            r.achieved_tflops,
            marker=markers[r.variant],
            s=40,
            facecolors=face,
            edgecolors=color,
            alpha=0.8,
        )
        if r.contended:
            axes.scatter(x, r.achieved_tflops, marker="x", s=90, color="black")
    for variant, marker in markers.items():
        axes.scatter([], [], marker=marker, color="gray", label=variant)
    for dtype in dict.fromkeys(dtypes):
        axes.scatter(
            [], [], marker="s", color=DTYPE_COLORS.get(dtype, "gray"), label=f"inputs {dtype}"
        )
    if any(r.contended for r in results):
        axes.scatter([], [], marker="x", color="black", label="contended: not trustworthy")
    if any(r.mode != Mode.FORWARD for r in results):
        axes.scatter(
            [],
            [],
            marker="o",
            facecolors="none",
            edgecolors="gray",
            label="hollow: backward / fwd+bwd",
        )
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("arithmetic intensity (FLOP per byte of query/key/value/output)")
    axes.set_ylabel("achieved TFLOP/s")
    axes.set_title("Roofline: achieved rate under the measured peaks")
    axes.xaxis.set_minor_formatter(NullFormatter())
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=7)
    return _save(figure, folder, "roofline")


def all_plots(run: SavedRun, folder: Path) -> list[Path]:
    """Every plot the run has data for; returns the files written."""
    return latency_bars(run, folder) + scaling(run, folder) + roofline(run, folder)
