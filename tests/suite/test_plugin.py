"""The plugin end to end, in a scratch project made by pytester."""

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # every test here runs pytest in a subprocess

SUITE = (
    Path(__file__).resolve().parents[2] / "perfsuite" / "suite" / "test_attention.py"
).read_text()
TINY = "--perfsuite-shapes=1x2x16x8"


@pytest.fixture
def project(pytester):
    pytester.makepyfile(test_attention=SUITE)
    return pytester


@pytest.mark.parametrize(
    "args, ini, expected",
    [
        (
            ["--perfsuite-dtypes=fp32,fp9"],
            "",
            [
                "option --perfsuite-dtypes='fp32,fp9'",
                "dtype 'fp9' is not supported",
                "allowed: fp64",
            ],
        ),
        (
            [],
            "perfsuite_cpu_shapes = 2x2x8x0",
            ["ini key perfsuite_cpu_shapes='2x2x8x0'", "head_dim=0", "at least 1"],
        ),
        (
            ["--perfsuite-variants=naive,flash3"],
            "",
            ["unknown attention variant 'flash3'", "known: naive"],
        ),
        (["--perfsuite-devices=tpu"], "", ["device 'tpu' is not supported; allowed: cpu, cuda"]),
        (["--perfsuite-seed=-3"], "", ["seed '-3' is not a non-negative integer"]),
    ],
    ids=["dtype", "ini-shape", "variant", "device", "seed"],
)
def test_bad_values_stop_collection_with_a_usage_error(project, args, ini, expected):
    project.makeini(f"[pytest]\n{ini}\n")
    result = project.runpytest_subprocess(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "perfsuite:" in err
    for text in expected:
        assert text in err


def test_header_prints_seed_and_cases(project):
    result = project.runpytest_subprocess(
        TINY, "--perfsuite-seed=7", "--perfsuite-variants=naive", "--co"
    )
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "perfsuite: seed=7 devices=cpu *",
            "perfsuite: variants=naive (--perfsuite-variants) modes=forward,backward,forward_backward (default)",
            "perfsuite: cases from option --perfsuite-shapes; case set 'default'",
            "perfsuite: cases=b1h2s16d8-fp32-causal-cpu",
            "*perfsuite: *process condition*",
            "*<Function test_benchmark?naive-b1h2s16d8-fp32-causal-cpu-forward?>",
            "*<Function test_benchmark?naive-b1h2s16d8-fp32-causal-cpu-forward_backward?>",
        ]
    )
    # CPU cases only: the CUDA timer's settings are not printed as if they applied
    assert "cuda_graphs=" not in result.stdout.str() and "l2_flush=" not in result.stdout.str()
    result.stdout.fnmatch_lines(["perfsuite: timer=host (CPU cases only: *"])


SEES_THE_NEXT_KEY = """
import torch


def sees_the_next_key(query, key, value, *, mask, scale):
    hidden = torch.ones(query.shape[2], key.shape[2], dtype=torch.bool).triu(2)
    scores = (query @ key.transpose(-2, -1) * scale).masked_fill_(hidden, float("-inf"))
    return torch.softmax(scores, dim=-1) @ value
"""
PROPERTIES = (
    Path(__file__).resolve().parents[2] / "perfsuite" / "suite" / "test_properties.py"
).read_text()


@pytest.mark.parametrize(
    "workers", [(), ("-n", "2", "--dist", "loadgroup")], ids=["serial", "xdist"]
)
def test_one_mistake_fails_once_per_case_and_later_checks_of_the_case_skip_referring_to_it(
    project, workers
):
    """Before: a causal mask off by one failed the reference, the large-score probe, the benchmark and
    properties with the same story, plus a ``Benchmark fixture was not used`` warning per case; then
    the later checks failed with one line each (2-6 FAILED per case). Now one FAILED explains it in
    full and the others skip with one line naming it, as pytest-dependency skips a test whose
    dependency failed; the run still fails, by that one. Under xdist's ``--dist loadgroup`` too."""
    project.makepyfile(offbyone=SEES_THE_NEXT_KEY, test_properties=PROPERTIES)
    result = project.runpytest_subprocess(
        TINY,
        "--perfsuite-variant=offbyone:sees_the_next_key",
        "--perfsuite-variants=sees_the_next_key",
        "--perfsuite-modes=forward",
        "--perfsuite-isolate=none",
        "--benchmark-disable",
        "-p",
        "no:randomly",
        "-rs",
        *workers,
    )
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, out
    assert result.parseoutcomes()["failed"] == 1, out  # one mistake, one case: one FAILED
    assert out.count("Mismatched elements") == 1, out  # the story in full, once
    referring = [
        line
        for line in out.splitlines()
        if line.startswith("SKIPPED") and "the output is already wrong on this case: " in line
    ]
    assert len(referring) >= 3, out  # the probe, the benchmark and the properties, each in one line
    assert all(
        "(reported in full by test_attention.py::test_matches_float64_reference[" in line
        for line in referring
    ), out
    assert "Benchmark fixture was not used" not in out, out
    result.stdout.fnmatch_lines(
        ["SKIPPED *not timed: *; the output is already wrong on this case: *"]
    )


def test_timed_run_saves_a_baseline_with_extra_info_and_a_table(project):
    project.makeini(
        "[pytest]\naddopts = --benchmark-autosave --benchmark-storage=bench "
        "--benchmark-max-time=0.01 --benchmark-min-rounds=3 --perfsuite-results=out\n"
        "perfsuite_cpu_dtypes = fp32\n"
    )
    eager = "--perfsuite-variants=naive,naive_inplace,sdpa,sdpa_math,sdpa_flash,sdpa_efficient,sdpa_cudnn"
    result = project.runpytest_subprocess(TINY, eager, "-v")
    outcomes = result.parseoutcomes()
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    # 5 variants run: 3 modes x (equivalence + no deception + benchmark) + copies + score accounting +
    # saved-for-backward (not sdpa: it declares nothing), plus sdpa_flash's fused check. Not generated, their skip
    # being certain:
    # efficient/cudnn on the CPU (Variant.devices) and the pinned backends' kernel-family check (a device lane
    # check), which is one skip naming why; no compiled variant is selected (two skips).
    assert outcomes["passed"] == 5 * 12 - 1 + 1 and outcomes["skipped"] == 1 + 2
    result.stdout.fnmatch_lines(
        [
            "*perfsuite: attention at a glance*",
            "naive * forward * b1h2s16d8-fp32-causal-cpu *1 *",
            "naive * forward_backward * b1h2s16d8-fp32-causal-cpu *",
            "skipped sdpa_efficient on 1 case(s) (b1h2s16d8-fp32-causal-cpu) in mode(s) forward, backward, forward_backward: "
            "sdpa_efficient runs on cuda only",
        ]
    )
    saved = json.loads(next(Path(project.path, "bench").rglob("*.json")).read_text())
    assert saved["machine_info"]["perfsuite"]["torch_version"]
    infos = {
        (b["extra_info"]["variant"], b["extra_info"]["mode"]): b["extra_info"]
        for b in saved["benchmarks"]
    }
    assert {v for v, _ in infos} == {"naive", "naive_inplace", "sdpa", "sdpa_math", "sdpa_flash"}
    assert {v: i["score_copies_per_step"] for (v, m), i in infos.items() if m == "forward"} == {
        "naive": 1,
        "naive_inplace": 0,
        "sdpa": 0,
        "sdpa_math": 0,
        "sdpa_flash": 0,
    }
    # score accounting: the post's findings restated, stored for the table and the fingerprint
    assert {
        v: i["score_accounting"]["copies"] for (v, m), i in infos.items() if m == "forward"
    } == {
        "naive": 1.0,
        "naive_inplace": 0.0,
        "sdpa": 0.0,
        "sdpa_math": 0.0,
        "sdpa_flash": 0.0,
    }
    assert any(
        label.startswith("copy [1x2x16x16] in aten::masked_fill")
        for label in infos[("naive", "forward")]["fingerprint"]["score_writes"]
    )
    assert infos[("naive", "forward")]["output_layout"] == "contiguous"
    for (variant, mode), info in infos.items():
        assert info["flop"] > 0 and info["achieved_tflops"] > 0 and info["max_abs_error"] < 1e-4
        assert info["graphs_compiled_while_timed"] == 0
        assert (
            isinstance(info["contention"]["contended"], bool) and info["contention"]["wall_s"] > 0
        )
        assert Path(project.path, info["trace_file"]).exists()
        forward_flop = infos[(variant, "forward")]["flop"]
        assert (
            info["flop"]
            == {"forward": 1, "backward": 2.5, "forward_backward": 3.5}[mode] * forward_flop
        )
    table = Path(project.path, "out", "table.md").read_text()
    assert (
        table.startswith("| variant | mode | case | median ms |")
        and "Skipped (cannot run here):" in table
    )

    compared = project.runpytest_subprocess(
        TINY, eager, "--benchmark-compare"
    )  # the same variants; no fail threshold: timings are not asserted
    assert compared.ret == pytest.ExitCode.OK
    compared.stdout.fnmatch_lines(["*0001_*"])


def saved_naive_baseline(project, edit):
    """Run naive once with autosave (per-round data kept), then let ``edit`` change each saved benchmark."""
    project.makeini(
        "[pytest]\naddopts = --benchmark-autosave --benchmark-save-data --benchmark-storage=bench "
        "--benchmark-max-time=0.01 --benchmark-min-rounds=8 --perfsuite-results=out --perfsuite-variants=naive "
        "--perfsuite-modes=forward\n"
        "perfsuite_cpu_dtypes = fp32\n"
    )
    assert project.runpytest_subprocess(TINY).ret == pytest.ExitCode.OK
    saved = next(Path(project.path, "bench").rglob("*.json"))
    baseline = json.loads(saved.read_text())
    for bench in baseline["benchmarks"]:
        edit(bench)
    saved.write_text(json.dumps(baseline))


def test_a_regression_fails_the_run_cleanly_and_still_writes_the_table(project):
    def impossibly_fast(bench):
        # a picosecond-scale baseline: any real run, however loaded the machine, is >10% slower
        for key in ("min", "max", "mean", "median", "q1", "q3"):
            bench["stats"][key] *= 1e-9

    saved_naive_baseline(project, impossibly_fast)
    (Path(project.path, "out") / "table.md").unlink()

    result = project.runpytest_subprocess(
        TINY, "--benchmark-compare", "--benchmark-compare-fail=median:10%"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    output = result.stdout.str() + result.stderr.str()
    assert "perfsuite: performance regressed beyond --benchmark-compare-fail" in output
    assert "Traceback" not in output
    assert "perfsuite: attention at a glance" in output
    assert Path(project.path, "out", "table.md").exists()


def test_cuda_requested_without_cuda_skips_with_the_reason(project):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    result = project.runpytest_subprocess(
        TINY, "--perfsuite-devices=cuda", "--perfsuite-variants=naive", "-rs"
    )
    # every test skipped: the run tested nothing, and says so (exit 5)
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.fnmatch_lines(
        [
            "*every test of the attention suite was skipped: nothing was checked or timed*",
            "*device cuda is not available on this machine*",
        ]
    )


def test_perfsuite_gate_judges_against_the_compared_baseline(project, monkeypatch):
    # the verdict is asserted: on a loaded machine the head would be "inconclusive: contended" otherwise
    monkeypatch.setenv("PERFSUITE_CONTENTION_CHECK", "off")

    def faster_and_without_the_clone(bench):
        bench["stats"]["data"] = [
            t * 1e-9 for t in bench["stats"]["data"]
        ]  # slower whatever the load
        bench["extra_info"]["fingerprint"]["cpu_ops"].pop("aten::clone")
        bench["extra_info"]["fingerprint"]["work_ops"].pop(
            "aten::clone"
        )  # ops are diffed by the work they did

    saved_naive_baseline(project, faster_and_without_the_clone)

    result = project.runpytest_subprocess(TINY, "--benchmark-compare", "--perfsuite-gate")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*perfsuite: regression gate*",
            "*`naive/b1h2s16d8-fp32-causal-cpu`*slower*+1 aten::clone*",
            "*perfsuite gate: FAIL: 1 of * regressed*",
        ]
    )
    assert "slower" in Path(project.path, "out", "gate.md").read_text()

    no_baseline = project.runpytest_subprocess(TINY, "--perfsuite-gate")
    assert no_baseline.ret == pytest.ExitCode.USAGE_ERROR
    assert "add --benchmark-compare" in no_baseline.stderr.str()

    newest = sorted(Path(project.path, "bench").rglob("*.json"))[-1]
    newest.write_text(newest.read_text()[:100])  # truncated: must not be skipped for an older run
    truncated = project.runpytest_subprocess(TINY, "--benchmark-compare", "--perfsuite-gate")
    assert truncated.ret == pytest.ExitCode.USAGE_ERROR
    assert (
        newest.name in truncated.stderr.str() and "corrupt or truncated" in truncated.stderr.str()
    )
