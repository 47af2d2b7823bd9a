"""A variant that never returns fails its case with the limit and the variant named; the run goes on."""

import os
import sys
import time
import textwrap
from pathlib import Path

import pytest

from perfsuite.measure.call_limit import CallTimeLimitExceeded, default_limit_s, time_limit

SUITE = (
    Path(__file__).resolve().parents[2] / "perfsuite" / "suite" / "test_attention.py"
).read_text()


def test_a_block_past_its_limit_raises_naming_it_and_the_timer_is_disarmed():
    started = time.monotonic()
    with pytest.raises(
        CallTimeLimitExceeded, match="the first call of v ran past the time limit of 0.2 s"
    ):
        with time_limit(0.2, "the first call of v"):
            time.sleep(30)
    assert time.monotonic() - started < 10
    with time_limit(0.2, "quick"):
        pass
    time.sleep(0.3)  # no stray alarm after the block


def test_defaults_exist_for_cpu_and_cuda():
    assert default_limit_s("cpu") == 600 and default_limit_s("cuda") == 120


HANGS = textwrap.dedent("""
    import time
    import torch

    calls = []

    def hangs_later(query, key, value, *, mask, scale):
        calls.append(1)
        if len(calls) > 3:  # the first call and the 2 checked calls after it (evidence.CHECKED_CALLS) return
            time.sleep(3600)  # never returns, in the profiled calls
        return torch.nn.functional.scaled_dot_product_attention(query, key, value, is_causal=mask.is_causal, scale=scale)
""")


@pytest.mark.slow
def test_a_hanging_variant_fails_its_case_and_the_run_goes_on(pytester, monkeypatch):
    """Before: a variant that never returned hung the run forever unless it was isolated."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(pytester.path)] + sys.path))
    pytester.makepyfile(test_attention=SUITE, hangs=HANGS)
    result = pytester.runpytest_subprocess(
        "--perfsuite-variant",
        "hangs:hangs_later",
        "--perfsuite-variants",
        "hangs_later,sdpa",
        "--perfsuite-isolate",
        "none",
        "--perfsuite-cases",
        "b1h2s16d8-fp32-causal-cpu",
        "--perfsuite-modes",
        "forward",
        "--perfsuite-call-time-limit",
        "2",
        "-k",
        "float64",
        "--benchmark-disable",
        "-p",
        "no:randomly",
        timeout=300,
    )
    result.assert_outcomes(
        passed=1, errors=1
    )  # sdpa passes; the hanging variant's case errors, once
    out = result.stdout.str()
    assert (
        "the 4 profiled calls of variant hangs_later on case b1h2s16d8-fp32-causal-cpu in mode forward "
        "(at most 2 s each) ran past the time limit of 8 s (--perfsuite-call-time-limit)"
    ) in out
