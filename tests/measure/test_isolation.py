"""A variant that crashes the process costs only its own results: the probe."""

import sys
import textwrap
import time

import pytest

from perfsuite.measure.isolation import probe

CRASHY = textwrap.dedent("""
    import ctypes, os
    import torch
    from perfsuite.variants.registry import register_variant

    @register_variant("crashy_variants", "segfaults on long sequences, aborts in backward")
    def crashy(query, key, value, *, mask, scale):
        if query.shape[2] > 8:
            ctypes.string_at(0)  # a segfault, as inside a broken compiled kernel
        if torch.is_grad_enabled():
            os.abort()
        if query.shape[2] == 3:
            raise ValueError("a plain Python error")
        if query.shape[2] == 5:  # leaves a thread that never ends (not a daemon) and returns
            import threading
            threading.Thread(target=threading.Event().wait).start()
        return torch.nn.functional.scaled_dot_product_attention(query, key, value, scale=scale)
""")


@pytest.mark.slow
def test_a_crash_in_the_child_names_the_pair_and_signal_and_the_other_pairs_still_run(
    tmp_path, monkeypatch
):
    (tmp_path / "crashy_variants.py").write_text(CRASHY)
    monkeypatch.syspath_prepend(str(tmp_path))
    pairs = [
        ("b1h2s4d8-fp32-noncausal-cpu", "forward"),
        ("b1h2s16d8-fp32-noncausal-cpu", "forward"),
        ("b1h2s4d8-fp32-noncausal-cpu", "backward"),
        ("b1h2s3d8-fp32-noncausal-cpu", "forward"),
        ("b1h2s4d8-fp32-noncausal-cuda", "forward"),
        ("b1h2s5d8-fp32-noncausal-cpu", "forward"),
    ]
    started = time.perf_counter()
    outcomes = probe("crashy_variants", pairs, seed=0, specs=["crashy_variants:crashy"])
    elapsed_s = time.perf_counter() - started
    status = {pair: outcomes[pair].status for pair in pairs}
    assert status == {
        pairs[0]: "ok",
        pairs[1]: "crashed",
        pairs[2]: "crashed",
        pairs[3]: "error",
        pairs[4]: "unsupported",
        pairs[5]: "ok",
    }
    # the last child exits once it reported every pair, past the thread the variant left running
    # (before, it waited for that thread until its deadline: 120 s of start-up plus the call limits)
    assert elapsed_s < 100, elapsed_s
    assert outcomes[pairs[1]].detail.startswith("signal SIGSEGV")
    assert outcomes[pairs[2]].detail.startswith("signal SIGABRT")
    assert "ValueError: a plain Python error" in outcomes[pairs[3]].detail
    print(
        f"probe of 5 pairs with 2 crashes (3 child processes): {elapsed_s:.1f} s", file=sys.stderr
    )


@pytest.mark.slow
def test_a_child_that_cannot_load_the_variant_reports_every_pair_with_its_stderr():
    outcomes = probe("nosuch", [("b1h2s4d8-fp32-noncausal-cpu", "forward")], seed=0)
    (outcome,) = outcomes.values()
    assert (
        outcome.status == "crashed"
        and "exit code 1" in outcome.detail
        and "unknown attention variant" in outcome.detail
    )


HANGS = textwrap.dedent("""
    import signal, time
    from perfsuite.variants.registry import register_variant

    @register_variant("hangs", "never returns, deaf to SIGALRM (as a kernel stuck in C++)")
    def hangs(query, key, value, *, mask, scale):
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        time.sleep(3600)
""")


@pytest.mark.slow
def test_a_call_that_never_returns_is_killed_after_the_call_time_limit(tmp_path, monkeypatch):
    """A hang is reported at the call limit (1 s here) after the pair started, as a hang: before, the
    child was killed after start-up (120 s) plus the limit and reported as a crash."""
    from perfsuite.measure import isolation

    (tmp_path / "hangs_variants.py").write_text(HANGS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(isolation, "PROBE_STARTUP_S", 30.0)
    pair = ("b1h2s4d8-fp32-noncausal-cpu", "forward")
    started = time.perf_counter()
    (outcome,) = probe(
        "hangs", [pair], seed=0, specs=["hangs_variants:hangs"], call_limit_s=lambda device: 1.0
    ).values()
    assert outcome.status == "hung", outcome
    assert outcome.detail.startswith("did not return within the call limit of 1 s"), outcome
    assert time.perf_counter() - started < 30


def test_the_probe_deadline_is_start_up_plus_each_pairs_call_limit():
    from perfsuite.measure.isolation import PROBE_STARTUP_S, probe_timeout_s

    pairs = [
        ("b1h2s4d8-fp32-noncausal-cpu", "forward"),
        ("b1h2s4d8-fp32-noncausal-cuda", "backward"),
    ]
    limits = {"cpu": 10.0, "cuda": 2.0}
    assert probe_timeout_s(pairs, limits.get) == PROBE_STARTUP_S + 12.0
    assert probe_timeout_s(pairs, {"cpu": 10.0, "cuda": None}.get) is None
