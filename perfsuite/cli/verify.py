"""``perfsuite verify``: the GPU verification report (Markdown) that ``scripts/gpu_suite.sh`` writes.

It reads what the suite left in a results folder: pytest's JUnit XML (one check per test:
passed, failed, error or skipped, with the message), ``run.json`` (the table: device, kernel and
dispatch time per step, TFLOP/s) and the measured peaks stored with it. On a machine where torch sees no
CUDA device it writes a report that says so, with the torch build (``torch.version.cuda``,
``torch.version.hip``) and the GPU driver, and how to install a CUDA or ROCm build.

Exit codes: 0 every check passed (or no CUDA device, unless ``--require-cuda``); 1 a check
failed or errored, the suite exited non-zero, ran past its time budget, or left no results.
``--preflight`` (``perfsuite.cli.preflight``) has its own: 0 passed, 1 a failure, 3 no CUDA device.
"""

from __future__ import annotations

import argparse
import dataclasses
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfsuite.errors import ReportError
from perfsuite.storage import write_text_atomic

if TYPE_CHECKING:  # the results load torch: imported where the command runs
    from perfsuite.report.results import BenchmarkResult

SMOKE_FILE = "smoke.md"
TIMEOUT_EXIT_CODES = (124, 137)  # coreutils timeout: 124 after TERM, 137 after KILL
INSTALL_HELP = """\
To run on a GPU, install a CUDA or ROCm build of torch into the suite's environment; setup.sh
installs whatever `PERFSUITE_TORCH` names (pip arguments), for example:

    PERFSUITE_TORCH="torch --index-url https://download.pytorch.org/whl/cu126" bash scripts/gpu_suite.sh    # CUDA 12.6
    PERFSUITE_TORCH="torch --index-url https://download.pytorch.org/whl/rocm6.4" bash scripts/gpu_suite.sh   # ROCm 6.4

(the index names a CUDA or ROCm version that pytorch.org lists for the torch version you want;
PyPI's default Linux wheel is a CUDA 12 build). On a machine with no network, use the torch that is
installed there and install nothing: `PERFSUITE_PYTHON=python3 bash scripts/gpu_suite.sh`."""


@dataclasses.dataclass(frozen=True)
class Check:
    """One test of the suite: ``outcome`` is passed, failed, error or skipped; ``detail`` its message."""

    test: str
    param: str
    outcome: str
    detail: str


def environment() -> dict[str, Any]:
    """What the report states about the machine: torch build, CUDA/HIP versions, driver, device."""
    import torch  # here, not at import: the CLI loads this module for its parser

    from perfsuite.measure.machine import driver_version

    available = torch.cuda.is_available()
    return {
        "torch": torch.__version__,
        "torch.version.cuda": torch.version.cuda,
        "torch.version.hip": getattr(torch.version, "hip", None),
        "cuDNN": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "driver": driver_version() or "not found (neither nvidia-smi nor rocm-smi answered)",
        "torch.cuda.is_available()": available,
        "device": torch.cuda.get_device_name() if available else None,
    }


def read_junit(path: Path) -> list[Check]:
    """The checks in pytest's JUnit XML at ``path``; raises ``ReportError`` naming it when unreadable."""
    try:
        root = ElementTree.parse(path).getroot()
    except (OSError, ElementTree.ParseError) as exc:
        raise ReportError(f"{path}: not a readable JUnit XML file ({exc})") from None
    checks = []
    for case in root.iter("testcase"):
        name = case.get("name", "?")
        test, _, param = name.partition("[")
        outcome, detail = "passed", ""
        for tag in ("failure", "error", "skipped"):
            found = case.find(tag)
            if found is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                detail = (found.get("message") or found.text or "").strip()
                break
        checks.append(Check(test, param.rstrip("]"), outcome, " ".join(detail.split())))
    return checks


def _cell(text: str, limit: int = 300) -> str:
    text = text.replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _ms(seconds: float | None) -> str:
    return f"{seconds * 1e3:.3f}" if seconds is not None else "-"


def _kv_read(r: BenchmarkResult, bandwidth_gbps: float | None) -> str:
    """``812 (24.1%)``: a layout case's KV-cache read rate and its share of the measured copy
    bandwidth (``perfsuite.measure.peaks.copy_gbps``); ``-`` for plain cases or without a timing."""
    rate = r.kv_read_gbps
    if rate is None:
        return "-"
    return f"{rate:.3g} ({100 * rate / bandwidth_gbps:.1f}%)" if bandwidth_gbps else f"{rate:.3g}"


def timing_rows(results: list[BenchmarkResult], peaks: dict[str, Any] | None) -> list[str]:
    """Markdown rows: the row's clock and median, the graph (or blocked-event) time, the kernel time
    and the host dispatch per call (each measured apart), TFLOP/s from the median's device time and
    from the kernel time, the share of the measured matmul peak of the case's dtype, GB/s of the
    mode's minimum bytes and the share of the measured copy bandwidth (``perfsuite.measure.peaks``),
    the row's timing notes (not converged, throttled, ...), and for layout cases (paged decode) the
    KV-cache read rate against the measured copy bandwidth."""
    from perfsuite.attention.cases import parse_case_id

    header = [
        "variant",
        "mode",
        "case",
        "clock",
        "median ms",
        "± median",
        "graph/event ms",
        "kernel ms",
        "dispatch ms",
        "TFLOP/s",
        "TFLOP/s (kernel time)",
        "% of measured matmul peak",
        "GB/s (minimum bytes)",
        "% of measured copy bandwidth",
        "KV read GB/s (% of measured bandwidth)",
        "timing notes",
    ]
    rows = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    matmul = (peaks or {}).get("matmul_tflops") or {}
    copy_gbps = (peaks or {}).get("memory_gbps")
    for r in results:
        peak = matmul.get(parse_case_id(r.case_id).dtype)
        share = f"{100 * r.achieved_tflops / peak:.1f}%" if r.achieved_tflops and peak else "-"
        tflops = f"{r.achieved_tflops:.3g}" if r.achieved_tflops else "-"
        kernel_tflops = f"{r.flop / r.kernel_median_s / 1e12:.3g}" if r.kernel_median_s else "-"
        spread = f"{100 * r.rel_spread:.1f}%" if r.rel_spread is not None else "-"
        gbps = f"{r.achieved_gbps:.4g}" if r.achieved_gbps else "-"
        bandwidth = (
            f"{100 * r.achieved_gbps / copy_gbps:.1f}%" if r.achieved_gbps and copy_gbps else "-"
        )
        rows.append(
            "| "
            + " | ".join(
                [
                    r.variant,
                    r.mode,
                    r.case_id,
                    r.clock or r.timer,
                    _ms(r.median_s),
                    spread,
                    _ms(r.event_median_s),
                    _ms(r.kernel_median_s),
                    _ms(r.dispatch_median_s),
                    tflops,
                    kernel_tflops,
                    share,
                    gbps,
                    bandwidth,
                    _kv_read(r, copy_gbps),
                    "; ".join(r.timing_notes) or "-",
                ]
            )
            + " |"
        )
    return rows


def no_cuda_report(env: dict[str, Any]) -> str:
    """The report of a machine where torch sees no CUDA device."""
    lines = [
        "# perfsuite GPU verification",
        "",
        "**Result: NO CUDA DEVICE** - `torch.cuda.is_available()` is False; no GPU check ran.",
        "",
        "## Environment",
        "",
    ]
    lines += [f"- {key}: `{value}`" for key, value in env.items()]
    return "\n".join(lines + ["", "## Running it on a GPU", "", INSTALL_HELP, ""])


def verification_report(
    env: dict[str, Any],
    checks: list[Check],
    results: list[BenchmarkResult],
    peaks: dict[str, Any] | None,
    suite_exit: int,
    budget_s: int | None,
) -> tuple[str, bool]:
    """The Markdown report and whether it passed: every check passed or skipped, the suite exited
    0 within its budget, and at least one check ran."""
    failed = [c for c in checks if c.outcome in ("failed", "error")]
    problems = [f"{len(failed)} check(s) failed"] if failed else []
    if suite_exit in TIMEOUT_EXIT_CODES:
        problems.append(f"the suite ran past its {budget_s} s budget (exit {suite_exit})")
    elif suite_exit not in (0, 1):
        problems.append(f"pytest exited {suite_exit} (usage error, interrupted or internal error)")
    if not checks:
        problems.append("no check ran")
    passed = not problems and suite_exit == 0
    counts = {
        o: sum(1 for c in checks if c.outcome == o)
        for o in ("passed", "failed", "error", "skipped")
    }
    verdict = (
        "PASS" if passed else "FAIL: " + "; ".join(problems or [f"pytest exited {suite_exit}"])
    )
    lines = [
        "# perfsuite GPU verification",
        "",
        f"**Result: {verdict}**",
        "",
        ", ".join(f"{n} {o}" for o, n in counts.items()),
        "",
        "## Environment",
        "",
    ]
    lines += [f"- {key}: `{value}`" for key, value in env.items()]
    if peaks:
        lines.append(f"- measured peaks: `{peaks}`")
    lines += [
        "",
        "## Checks",
        "",
        "| check | variant / case / mode | result | detail |",
        "| --- | --- | --- | --- |",
    ]
    order = {"failed": 0, "error": 0, "passed": 1, "skipped": 2}
    for c in sorted(checks, key=lambda c: (order[c.outcome], c.test, c.param)):
        mark = c.outcome.upper() if c.outcome in ("failed", "error") else c.outcome
        lines.append(f"| {c.test} | {_cell(c.param, 120)} | {mark} | {_cell(c.detail)} |")
    lines += ["", "## Time per step: device clock, kernel time, host dispatch", ""]
    lines += (
        timing_rows(results, peaks) if results else ["no timed results (run.json missing or empty)"]
    )
    return "\n".join(lines) + "\n", passed


def run_smoke_step(args: argparse.Namespace) -> int:
    """``perfsuite verify --smoke``: the fail-fast checks (``gpu_smoke``), written to RESULTS/smoke.md."""
    from perfsuite.cli.gpu_smoke import run_smoke, smoke_report

    results_dir = Path(args.results)
    checks = run_smoke(args.device, scratch=results_dir / "smoke-traces")
    write_text_atomic(results_dir / SMOKE_FILE, smoke_report(checks))
    for check in checks:
        print(f"perfsuite smoke: {check.outcome:4} {check.name}: {check.detail}")
    return 1 if any(c.outcome == "FAIL" for c in checks) else 0


def run_verify(args: argparse.Namespace) -> int:
    """``perfsuite verify``: write the report to ``--out`` (default RESULTS/verification.md)."""
    if args.preflight:
        from perfsuite.cli.preflight import run_preflight

        return run_preflight(Path(args.results))
    if args.smoke:
        return run_smoke_step(args)
    results_dir = Path(args.results)
    out = Path(args.out) if args.out else results_dir / "verification.md"
    env = environment()
    if not env["torch.cuda.is_available()"]:
        write_text_atomic(out, no_cuda_report(env))
        print(
            f"perfsuite verify: NO CUDA DEVICE (torch {env['torch']}, torch.version.cuda={env['torch.version.cuda']}, "
            f"torch.version.hip={env['torch.version.hip']}, driver={env['driver']}); report: {out}"
        )
        return 1 if args.require_cuda else 0
    junit, checks, results, peaks = results_dir / "junit.xml", [], [], None
    try:  # an unreadable file is a failed check of the report, never a report left unwritten
        checks = read_junit(junit) if junit.exists() else []
        if (results_dir / "run.json").exists():
            from perfsuite.report.saved import load_run

            run = load_run(results_dir / "run.json")
            results, peaks = run.results, run.peaks
    except ReportError as exc:
        checks.append(Check("reading the suite's results", "", "error", str(exc)))
    report, passed = verification_report(
        env, checks, results, peaks, args.suite_exit, args.budget_s
    )
    smoke = results_dir / SMOKE_FILE
    if smoke.exists():  # the smoke step's table, and its failures in the result
        smoke_text = smoke.read_text(encoding="utf-8")
        passed = passed and "**Smoke: PASS**" in smoke_text
        report += "\n" + smoke_text
    write_text_atomic(out, report)
    print(f"perfsuite verify: {report.splitlines()[2].strip('*')}; report: {out}")
    return 0 if passed else 1


def add_command(commands) -> None:
    verify = commands.add_parser(
        "verify", help="the GPU verification report (Markdown) from a suite run's folder"
    )
    verify.add_argument(
        "--results", required=True, help="the suite's results folder (junit.xml, run.json)"
    )
    verify.add_argument("--out", help="write the report here (default RESULTS/verification.md)")
    verify.add_argument(
        "--suite-exit",
        type=int,
        default=0,
        help="pytest's exit status (124/137: ran past the budget)",
    )
    verify.add_argument(
        "--budget-s", type=int, help="the suite's time budget in seconds, for the report"
    )
    verify.add_argument(
        "--require-cuda", action="store_true", help="exit 1 when there is no CUDA device"
    )
    verify.add_argument(
        "--smoke",
        action="store_true",
        help="run only the fail-fast smoke checks (device, one call per pinned SDPA backend, "
        "naive's score copy on the device lane) into RESULTS/smoke.md; exit 1 on a failure",
    )
    verify.add_argument(
        "--preflight",
        action="store_true",
        help="check each GPU finding the CPU cannot prove (Kineto records, graph capture and its "
        "failure, backward capture, unrolled graphs, FP8/varlen/flex-decode on grouped-query "
        "cases, NVML counters) in about a minute; RESULTS/preflight.json; exit 0 pass, 1 a "
        "failure, 3 no CUDA device",
    )
    verify.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="the device of --smoke (cpu: the same steps on the CPU lane)",
    )
