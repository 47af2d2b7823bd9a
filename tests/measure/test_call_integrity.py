"""The checks behind the adversarial corpus, at unit level: where the suite's one run cannot reach
(a CUDA side stream, the bfloat16 mask probe, the interpreter's exit) or a number must be exact."""

import subprocess
import sys
import textwrap

import pytest
import torch

from perfsuite.attention.cases import AttentionCase
from perfsuite.measure.call_integrity import (
    changed_after_return,
    continued_growth_per_call,
    kept_bytes_over_calls,
    kept_bytes_per_call,
    settle,
)
from perfsuite.measure.correctness import not_plain_dense
from perfsuite.measure.evidence import gather_evidence
from perfsuite.measure.measurement_guard import MeasurementState
from perfsuite.measure.precision_probes import large_score_step
from perfsuite.variants import Variant, get_variant

F = torch.nn.functional


class SideStream:
    """A fake DeviceApi: the call's stream is done at once; a side stream finishes at the device sync."""

    def __init__(self, output, late_value=None):
        self.output, self.late_value = output, late_value

    def synchronize_stream(self):
        pass

    def synchronize(self):
        if self.late_value is not None:
            self.output.fill_(self.late_value)


def test_work_left_on_a_side_stream_shows_as_an_output_that_changed_after_the_call():
    output = torch.zeros(2, 3)
    settled = settle(output, "cuda", SideStream(output, late_value=1.0))
    message = changed_after_return(output, settled, "side_stream", "its first call")
    assert "side_stream's output changed after its first call returned" in message
    clean = torch.zeros(2, 3)
    assert changed_after_return(clean, settle(clean, "cuda", SideStream(clean)), "ok", "x") is None


def test_lazy_views_are_not_plain_dense_tensors():
    assert "lazy negative view" in not_plain_dense(torch.ones(3)._neg_view())
    assert "layout torch.sparse_coo" in not_plain_dense(torch.eye(2).to_sparse())
    assert not_plain_dense(torch.ones(3)) is None


def test_kept_memory_is_reported_only_when_every_step_grew_it():
    mib = 2**20
    assert kept_bytes_per_call([100, 100 + 8 * mib, 100 + 16 * mib]) == 8 * mib
    assert kept_bytes_per_call([100, 100 + 8 * mib, 100 + 8 * mib]) is None  # grew once: a cache
    assert kept_bytes_per_call([100, 164, 228]) is None  # 64 bytes per call: below the floor
    assert kept_bytes_per_call([100, None, 228]) is None and kept_bytes_per_call([100]) is None


def test_growth_that_stops_after_the_first_calls_is_a_cache_not_kept_memory():
    kib = 1024
    filling = [0, 64 * kib, 128 * kib, 128 * kib, 128 * kib, 128 * kib, 128 * kib, 128 * kib]
    assert continued_growth_per_call(filling) is None  # a cache that filled in two calls
    leaking = [i * 64 * kib for i in range(8)]
    assert continued_growth_per_call(leaking) == 64 * kib
    assert continued_growth_per_call(leaking[:4]) is None  # one level left after the settle calls
    assert (
        continued_growth_per_call([0, 0, 0, 0, 512]) is None
    )  # 512 bytes over 1 call: below 1 KiB
    with pytest.raises(ValueError, match="settle=-1"):
        continued_growth_per_call(leaking, settle=-1)


def test_a_function_that_caches_once_keeps_nothing_and_one_that_leaks_is_measured():
    """Synthetic steps, judged over 8 calls profiled for memory only (64 KiB tensors)."""
    cache, kept = {}, []

    def caches_once():
        cache.setdefault("table", torch.ones(16 * 1024))  # allocated at the first call only
        return torch.ones(8) * 2

    def caches_last_output():
        cache["last"] = torch.ones(16 * 1024)  # replaced every call: bounded
        return cache["last"]

    def leaks():
        kept.append(torch.ones(16 * 1024))
        return kept[-1]

    assert kept_bytes_over_calls(caches_once, "cpu") is None
    assert kept_bytes_over_calls(caches_last_output, "cpu") is None
    assert kept_bytes_over_calls(leaks, "cpu") == 64 * 1024
    with pytest.raises(ValueError, match="calls=4, settle=3"):
        kept_bytes_over_calls(leaks, "cpu", calls=4)


def test_eager_flex_keeps_no_memory_once_shapes_are_not_recorded(tmp_path):
    """The profiled steps record shapes, and torch's profiler then keeps eager flex_attention's
    tensors alive (on torch 2.13 the levels grow by some KiB a call); judged again without shapes,
    flex_eager keeps nothing."""
    case = AttentionCase(1, 2, 16, 16, 8, "fp32", "cpu", "causal")
    evidence = gather_evidence(get_variant("flex_eager"), case, 0, tmp_path)
    assert evidence.comparison.failure is None and evidence.kept_bytes_per_call is None


def test_a_changed_setting_or_timer_is_named_and_restored():
    state = MeasurementState.capture()
    original = torch.get_num_threads()
    import time

    perf_counter = time.perf_counter
    try:
        torch.set_num_threads(original + 1)
        time.perf_counter = time.process_time
        message = state.check_and_restore("tamper", "its calls")
    finally:
        time.perf_counter = perf_counter
        torch.set_num_threads(original)
    assert f"changed torch.get_num_threads() from {original} to {original + 1}" in message
    assert "replaced time.perf_counter with time.process_time" in message
    assert state.changes() == []


def test_torch_compiles_own_seed_wrapper_is_no_change_but_a_lookalike_of_a_timer_is():
    import subprocess
    import sys

    # a fresh interpreter: torch._dynamo not imported before the capture (as in a gate worker)
    script = (
        "import functools, time, torch\n"
        "from perfsuite.measure.measurement_guard import MeasurementState\n"
        "state = MeasurementState.capture()\n"
        "import torch._dynamo\n"
        "print('after dynamo', state.changes())\n"
        "real = time.perf_counter\n"
        "time.perf_counter = functools.wraps(real)(lambda: real() * 0.9)\n"
        "torch.manual_seed = torch._disable_dynamo(lambda seed: None)\n"
        "print('after tampering', state.changes())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert "after dynamo []" in out
    tampered = out.split("after tampering")[1]
    assert "replaced time.perf_counter" in tampered
    assert "replaced torch.manual_seed" in tampered


def _plain(query, key, value, mask, scale, mask_value, subtract_max=True):
    scores = torch.matmul(query, key.transpose(-2, -1)) * scale
    scores = scores + mask.masked_out.to(scores.dtype) * mask_value
    if subtract_max:
        scores = scores - scores.amax(dim=-1, keepdim=True)
    weights = scores.exp()
    return torch.matmul(weights / weights.sum(dim=-1, keepdim=True), value)


def adds_minus_1e4(query, key, value, *, mask, scale):
    return _plain(query, key, value, mask, scale, -1e4)


def no_max_subtraction(query, key, value, *, mask, scale):
    return _plain(query, key, value, mask, scale, float("-inf"), subtract_max=False)


def sdpa(query, key, value, *, mask, scale):
    return F.scaled_dot_product_attention(query, key, value, is_causal=mask.is_causal, scale=scale)


def sees_the_next_key(query, key, value, *, mask, scale):
    """Masks with -inf, one key too late: each query also sees the key after it (an off by one)."""
    hidden = torch.ones_like(mask.masked_out).triu(2)
    scores = (torch.matmul(query, key.transpose(-2, -1)) * scale).masked_fill(hidden, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), value)


@pytest.mark.parametrize(
    "fn, kind",
    [
        (adds_minus_1e4, "a hidden key was weighed"),
        (no_max_subtraction, "overflow in the softmax"),
        (sdpa, None),
        (sees_the_next_key, "wrong on large scores"),
    ],
)
def test_the_bfloat16_probe_names_a_mask_constant_too_small_and_an_overflow(fn, kind, tmp_path):
    """A mask constant too small is named only where the reference rerun with that finite constant
    gives the output (before: an off-by-one mask written with -inf was told to mask with -inf)."""
    case = AttentionCase(1, 2, 8, 8, 4, "bf16", "cpu", "causal")
    evidence = gather_evidence(Variant(name=fn.__name__, fn=fn, description="t"), case, 0, tmp_path)
    found = [d for d in evidence.deceptions if "large-score probe" in d]
    assert (kind in found[0]) if kind else not found, evidence.deceptions


def test_the_float16_probe_keeps_products_in_range():
    assert large_score_step(torch.float32, 256) == 2048
    step = large_score_step(torch.float16, 128)
    assert 6 * step * 128**0.5 <= 32768 and step * 2 * 6 * 128**0.5 > 32768


RELEASE = textwrap.dedent("""
    import sys, threading
    from perfsuite.measure.threads import ThreadWatch, release_at_exit
    with ThreadWatch() as watch:
        threading.Thread(target=threading.Event().wait, name="never-ends").start()
    (thread,) = watch.left_running()
    if sys.argv[1] == "release":
        assert release_at_exit(thread)
""")


def test_a_thread_that_never_ends_cannot_keep_the_process_alive():
    """Before: a variant's non-daemon thread kept pytest (and an isolated probe) from ever exiting."""
    done = subprocess.run([sys.executable, "-c", RELEASE, "release"], timeout=60)
    assert done.returncode == 0
    with pytest.raises(subprocess.TimeoutExpired):  # the check can fail: unreleased, it never exits
        subprocess.run([sys.executable, "-c", RELEASE, "keep"], timeout=1)


class _CachedGradients(torch.autograd.Function):
    """SDPA forward; backward returns the gradients of its first call again."""

    cache: list = []

    @staticmethod
    def forward(ctx, query, key, value):
        ctx.shapes = query, key, value
        return F.scaled_dot_product_attention(query, key, value, is_causal=True)

    @staticmethod
    def backward(ctx, grad):
        if not _CachedGradients.cache:
            _CachedGradients.cache.extend(torch.randn_like(t) for t in ctx.shapes)
        return tuple(_CachedGradients.cache)


def cached_gradients(query, key, value, *, mask, scale):
    return _CachedGradients.apply(query, key, value)


def test_gradients_that_do_not_follow_fresh_inputs_are_named(tmp_path):
    case = AttentionCase(1, 2, 8, 8, 4, "fp32", "cpu", "causal")
    variant = Variant(name="cached_gradients", fn=cached_gradients, description="t")
    evidence = gather_evidence(variant, case, 0, tmp_path, "forward_backward")
    assert any("the gradients did not change with the inputs" in d for d in evidence.deceptions)
