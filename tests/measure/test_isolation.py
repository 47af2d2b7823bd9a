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
    }
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
