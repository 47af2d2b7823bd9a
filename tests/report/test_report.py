import json
import re
from pathlib import Path

import pytest

from perfsuite.measure import peaks
from perfsuite.cli.main import main
from perfsuite.report.plots import all_plots
from perfsuite.dashboard.run_page import html_report
from perfsuite.report.saved import ReportError, load_run, markdown_report

EXAMPLE = (
    Path(__file__).resolve().parents[2] / "tests" / "data" / "runs" / "cpu-sequence-sweep.json"
)  # a real CPU run


def saved_extra_info():
    """The extra_info the plugin stores for the example run's first row (schema 2), as a
    pytest-benchmark file holds it, and that row."""
    first = load_run(EXAMPLE).results[0]
    return {
        "schema_version": 2,
        "mode": "forward",
        "variant": first.variant,
        "case": first.case_id,
        "case_fields": {"device": "cpu"},
        "flop": first.flop,
        "bytes_read": first.bytes_moved,
        "bytes_written": 0,
        "cpu_ops_per_step": 45,
        "kernels_per_step": 0,
        "score_copies_per_step": 1,
        "allocated_bytes_per_step": 10,
        "peak_memory_bytes": 5,
        "max_abs_error": 1e-7,
        "correct": True,
    }, first


def test_saved_run_renders_as_markdown_and_html(tmp_path):
    run = load_run(EXAMPLE)
    assert {r.variant for r in run.results} == {
        "naive",
        "naive_inplace",
        "naive_compiled",
        "sdpa",
        "sdpa_math",
        "sdpa_flash",
        "flex_eager",
        "flex_compiled",
    }
    assert {r.mode for r in run.results} == {"forward", "backward", "forward_backward"}
    markdown = markdown_report(run, ["latency.png"])
    assert (
        "| naive | forward | b1h8s2048d64-fp32-causal-cpu |" in markdown
        and "![latency.png](latency.png)" in markdown
    )
    plots = all_plots(run, tmp_path)
    assert sorted(p.name for p in plots) == sorted(
        f"{name}.{ext}" for name in ("latency", "scaling", "roofline") for ext in ("png", "svg")
    )
    assert all(p.read_bytes()[:4] in (b"\x89PNG", b"<?xm") for p in plots)
    page = html_report(run, plots)
    assert page.startswith("<!doctype html>") and page.count("data:image/png;base64,") == 3
    assert not re.search(
        r"(src|href)=['\"]?(https?:)?//", page
    )  # self-contained: no resource from elsewhere
    assert page.index("id='perfsuite-data'") < page.index(
        "<script>"
    )  # data, then the inlined scripts


def test_a_pytest_benchmark_file_is_read_from_its_extra_info(tmp_path):
    info, first = saved_extra_info()
    saved = {
        "machine_info": {"perfsuite": {"torch_version": "2.13.0"}},
        "benchmarks": [
            {"extra_info": info, "stats": {"median": 0.002, "rounds": 7}},
            {"extra_info": {}, "stats": {}},
        ],
    }
    path = tmp_path / "0001_x.json"
    path.write_text(json.dumps(saved))
    [result] = load_run(path).results
    assert (
        result.variant,
        result.median_s,
        result.work_per_step,
        result.score_copies_per_step,
    ) == (first.variant, 0.002, 45, 1)


@pytest.mark.parametrize(
    "content, message",
    [
        ("not json", "corrupt or truncated run file"),
        ('{"a": 1}', "neither a perfsuite run.json nor a pytest-benchmark JSON file"),
        ('{"schema_version": 1, "results": [{"variant": "x"}]}', "missing or malformed field"),
        ('{"schema_version": 1, "results": []}', "holds no perfsuite results"),
    ],
)
def test_bad_run_files_name_the_file(tmp_path, content, message):
    path = tmp_path / "run.json"
    path.write_text(content)
    with pytest.raises(ReportError, match=message) as info:
        load_run(path)
    assert str(path) in str(info.value)


def test_report_command_writes_files_and_refuses_bad_input(tmp_path, capsys):
    out = tmp_path / "r"
    assert (
        main(
            [
                "report",
                str(EXAMPLE),
                "--markdown",
                str(out / "report.md"),
                "--html",
                str(out / "report.html"),
                "--plots",
                str(out),
            ]
        )
        == 0
    )
    assert "![latency.png](latency.png)" in (out / "report.md").read_text()
    assert (out / "report.html").stat().st_size > 10_000
    assert main(["report", str(tmp_path / "missing.json")]) == 2
    assert "no such run file" in capsys.readouterr().err


class FakeProbe:
    """A contention probe whose verdict the test sets (the real one reads the machine's load)."""

    contended = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def evidence(self, round_times_s=()):
        from types import SimpleNamespace

        return SimpleNamespace(
            contended=self.contended, reasons=("threads waited 60%",) if self.contended else ()
        )


def test_peaks_are_measured_once_and_cached(tmp_path, monkeypatch):
    monkeypatch.setattr(peaks, "Probe", FakeProbe)
    calls = []
    monkeypatch.setattr(peaks, "copy_gbps", lambda device: calls.append("copy") or 20.0)
    monkeypatch.setattr(peaks, "matmul_tflops", lambda device, dtype: calls.append(dtype) or 0.1)
    cache = tmp_path / "peaks.json"
    first = peaks.measured_peaks("cpu", ["fp32"], cache)
    again = peaks.measured_peaks("cpu", ["fp32", "bf16"], cache)
    assert first == {"memory_gbps": 20.0, "matmul_tflops": {"fp32": 0.1}}
    assert again["matmul_tflops"] == {"fp32": 0.1, "bf16": 0.1}
    assert calls == ["copy", "fp32", "bf16"]
    assert peaks.machine_key("cpu") in json.loads(cache.read_text())


def test_peaks_measured_under_contention_are_not_cached(tmp_path, monkeypatch):
    monkeypatch.setattr(peaks, "Probe", type("Loaded", (FakeProbe,), {"contended": True}))
    monkeypatch.setattr(peaks, "copy_gbps", lambda device: 5.0)
    monkeypatch.setattr(peaks, "matmul_tflops", lambda device, dtype: 0.01)
    cache = tmp_path / "peaks.json"
    assert peaks.measured_peaks("cpu", ["fp32"], cache)["contended"] == ["threads waited 60%"]
    assert not cache.exists()


def test_the_machine_line_names_rocm_cuda_or_a_cpu_build():
    from perfsuite.report.saved import platform_text

    assert (
        platform_text({"cuda_version": None, "hip_version": "6.4.43482"}) == "ROCm (HIP 6.4.43482)"
    )
    assert platform_text({"cuda_version": "12.8", "hip_version": None}) == "CUDA 12.8"
    assert "no CUDA or ROCm" in platform_text({"cuda_version": None, "hip_version": None})


def test_contended_rows_are_marked_in_the_table_report_and_plots(tmp_path):
    import dataclasses

    from perfsuite.report.results import markdown_table, text_table

    run = load_run(EXAMPLE)
    reason = "threads waited for a CPU 40% of the wall time (limit 5%)"
    marked = [
        dataclasses.replace(r, contended=i == 0, contention_reasons=(reason,) if i == 0 else ())
        for i, r in enumerate(run.results)
    ]
    first = marked[0]
    table = markdown_table(marked, [])
    assert (
        "| timing |" in table
        and table.count("CONTENDED") == 1
        and table.count("| ok |") == len(marked) - 1
    )
    assert f"- {first.variant} {first.mode} {first.case_id}: {reason}" in table
    assert "CONTENDED" in text_table(marked)
    # older runs (no contention evidence) say nothing either way
    assert "CONTENDED" not in markdown_table(run.results, []) and "| ok |" not in markdown_table(
        run.results, []
    )
    plots = all_plots(dataclasses.replace(run, results=marked), tmp_path)
    assert any("contended: not trustworthy" in p.read_text() for p in plots if p.suffix == ".svg")


def test_report_takes_a_saved_run_s_number_as_compare_does(tmp_path, monkeypatch, capsys):
    """``perfsuite report 0001``: the run saved as .benchmarks/*/0001_*.json, also from a subdirectory."""
    info, first = saved_extra_info()
    saved = tmp_path / ".benchmarks" / "Linux-CPython-3.11-64bit"
    saved.mkdir(parents=True)
    (saved / "0001_abc_20261201_000000.json").write_text(
        json.dumps({"benchmarks": [{"extra_info": info, "stats": {"median": 0.002, "rounds": 7}}]})
    )
    (tmp_path / ".git").mkdir()  # the repository's root, seen from src/
    (tmp_path / "src").mkdir()
    monkeypatch.chdir(tmp_path / "src")
    assert main(["report", "0001"]) == 0
    assert first.variant in capsys.readouterr().out
    assert main(["report", "0002"]) == 2
    assert "saved run '0002': none in" in capsys.readouterr().err
