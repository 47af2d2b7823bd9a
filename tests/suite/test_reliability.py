"""Setup errors once, crash probes per variant, progress of a run."""

import pytest

from perfsuite.measure.isolation import ProbeOutcome
from perfsuite.suite.reliability import CrashProbes, FailureLedger, Progress, crash_message


def setup_error():
    return RuntimeError("block mask construction failed\n" + "detail line\n" * 1000)


def test_a_setup_error_is_raised_in_full_once_then_referenced_in_one_line():
    ledger = FailureLedger()
    error = setup_error()
    with pytest.raises(RuntimeError, match="detail line") as first:
        ledger.report(("v", "c"), "test_a[v-c]", "per-case setup of v on c", error)
    assert first.value is error
    with pytest.raises(pytest.fail.Exception) as later:
        ledger.report(("v", "c"), "test_b[v-c]", "per-case setup of v on c", error)
    assert str(later.value) == (
        "per-case setup of v on c failed: RuntimeError: block mask construction failed "
        "(reported in full once, by test_a[v-c])"
    )
    assert list(ledger.failures()) == [("v", "c")]


def test_the_same_first_call_error_in_every_mode_is_shown_in_full_once():
    """Before: a first-call error printed its full traceback once per mode."""
    ledger = FailureLedger()
    error = setup_error()
    with pytest.raises(RuntimeError):
        ledger.report(("v", "c", "forward"), "test_a[v-c-forward]", "v on c in mode forward", error)
    with pytest.raises(
        pytest.fail.Exception, match=r"reported in full once, by test_a\[v-c-forward\]"
    ):
        ledger.report(
            ("v", "c", "backward"), "test_a[v-c-backward]", "v on c in mode backward", setup_error()
        )
    other = RuntimeError("another failure")
    with pytest.raises(RuntimeError, match="another failure"):  # a different error is shown in full
        ledger.report(
            ("v", "c", "forward_backward"), "test_a[v-c-forward_backward]", "v on c", other
        )


def test_crash_probes_run_one_child_per_isolated_variant_and_answer_per_pair():
    calls = []

    def fake_probe(variant, pairs, seed, specs, call_limit_s):
        calls.append((variant, pairs))
        return {
            p: ProbeOutcome(
                p[0],
                p[1],
                "crashed" if p == ("c2", "backward") else "ok",
                "signal SIGSEGV" if p == ("c2", "backward") else "",
            )
            for p in pairs
        }

    probes = CrashProbes(["risky"], seed=0, specs=[], run_probe=fake_probe)
    pairs = lambda: [("c1", "forward"), ("c2", "backward")]
    assert probes.crash("safe", "c1", "forward", pairs) is None and calls == []
    assert probes.crash("risky", "c1", "forward", pairs) is None
    crashed = probes.crash("risky", "c2", "backward", pairs)
    assert crashed.detail == "signal SIGSEGV" and len(calls) == 1
    message = crash_message("risky", crashed)
    assert (
        "variant risky crashed the process on case c2 in mode backward" in message
        and "SIGSEGV" in message
    )


def test_progress_says_why_a_run_is_partial():
    assert Progress(expected=20, finished=20).incomplete() is None
    interrupted = Progress(expected=20, finished=5, interrupted=True).incomplete()
    assert interrupted.describe() == "interrupted (KeyboardInterrupt): 5 of 20 benchmarks finished"
