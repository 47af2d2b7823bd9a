"""Result rows and the Markdown table: columns, rates, skips, crashes, partial runs, wall and device times."""

import pytest

from perfsuite.report.results import SkippedResult, markdown_table
from perfsuite.units import format_bytes


def test_markdown_table_rows_and_skips(make_result):
    text = markdown_table(
        [make_result(0.002), make_result(None, correct=False)],
        [SkippedResult("sdpa_cudnn", "c", "no kernel")],
    )
    lines = text.splitlines()
    # a row read from a run saved before score accounting: its old copy count, the writes unknown
    assert (
        lines[2]
        == "| naive | forward | b1h1s8d8-fp32-causal-cpu | 2.000 | - | - | - | 0.001 | 45 ops | ? (1 copy) | ? | 4.0 MiB | 3.0 KiB | - | 1.5e-07 | - | - |"
    )
    assert lines[3].split(" | ")[3] == "not timed" and lines[3].endswith("FAIL | - | - |")
    assert lines[-1] == "- `sdpa_cudnn` on `c` (forward): no kernel"


def test_score_writes_and_output_layout_cells_name_what_they_count(make_result):
    import dataclasses

    row = dataclasses.replace(
        make_result(0.002),
        score_written=6.0,
        score_copies=0.0,
        score_casts=1.5,
        score_mask_expansions=1.0,
        output_layout="dense as [B, Sq, H, D]",
    )
    cells = markdown_table([row], []).splitlines()[2].split(" | ")
    assert (
        cells[9] == "6 (0 copies, 1.50 casts, 1 mask expansion)"
        and cells[-1] == "dense as [B, Sq, H, D] |"
    )


def test_the_copy_cell_counts_every_copy_by_kind_with_its_bytes(make_result):
    """Not only score copies: a K/V expansion copy (GQA by ``repeat_interleave``) and casts are
    counted by kind with the bytes they wrote; ``other`` appears only when there is one."""
    import dataclasses

    mib = 1024 * 1024
    kinds = {
        "score": {"count": 1, "bytes": 2 * mib},
        "K/V": {"count": 2, "bytes": int(32.5 * mib)},
        "cast": {"count": 0, "bytes": 0},
        "other": {"count": 0, "bytes": 0},
    }
    row = dataclasses.replace(make_result(0.002), copies_by_kind=kinds)
    cells = markdown_table([row], []).splitlines()[2].split(" | ")
    assert cells[10] == "score 1 (2.0 MiB) · K/V 2 (32.5 MiB) · cast 0"
    kinds["other"] = {"count": 3, "bytes": 96}
    row = dataclasses.replace(make_result(0.002), copies_by_kind=kinds)
    cells = markdown_table([row], []).splitlines()[2].split(" | ")
    assert cells[10] == "score 1 (2.0 MiB) · K/V 2 (32.5 MiB) · cast 0 · other 3 (96 B)"


def test_a_partial_run_heads_its_table_and_lists_crashes(make_result):
    from perfsuite.report.results import CrashedResult

    text = markdown_table(
        [make_result(0.002)],
        [],
        [CrashedResult("crashy", "c", "backward", "signal SIGABRT; ...\nmore")],
        "interrupted (KeyboardInterrupt): 1 of 6 benchmarks finished",
    )
    assert text.startswith(
        "**Partial run**: interrupted (KeyboardInterrupt): 1 of 6 benchmarks finished."
    )
    assert text.splitlines()[-1] == "- `crashy` on `c` (backward): signal SIGABRT; ..."


def test_rates_and_bytes(make_result):
    assert make_result(0.002).achieved_tflops == pytest.approx(1e-3)
    assert make_result(0.002).achieved_gbps == pytest.approx(5e-4)
    assert make_result(None).achieved_tflops is None
    assert format_bytes(512) == "512 B" and format_bytes(3 * 1024**3) == "3.0 GiB"


def test_table_shows_each_device_clock_apart_for_device_timed_rows(make_result):
    import dataclasses

    timed = dataclasses.replace(
        make_result(0.002),
        timer="cuda_event",
        clock="cuda_graph",
        device_median_s=0.002,
        event_median_s=0.002,
        kernel_median_s=0.0018,
        dispatch_median_s=0.00004,
        rel_spread=0.006,
        timing_notes=("throttled: sw_power_cap",),
    )
    host_only = markdown_table([make_result(0.002)], []).splitlines()
    assert "kernel ms" not in host_only[0]
    lines = markdown_table([timed, make_result(0.003)], []).splitlines()
    assert lines[0].endswith(
        "| clock | ± median | graph/event ms | kernel ms | dispatch ms | timing notes |"
    )
    assert lines[2].endswith(
        "| cuda_graph | 0.6% | 2.000 | 1.800 | 0.040 | throttled: sw_power_cap |"
    )
    assert lines[3].endswith("| host | - | - | - | - | - |")
