"""Modes: FLOP per mode against torch.utils.flop_counter, steps, gradient checks, forward-only skips."""

import pytest
import torch
from torch._functorch import config as functorch_config
from torch.utils.flop_counter import FlopCounterMode

from perfsuite.attention.cases import parse_case_id
from perfsuite.attention.cost_model import MODE_FLOP_FACTOR, forward_flop, mode_bytes, mode_flop
from perfsuite.measure.refusals import VariantUnsupported
from perfsuite.measure.evidence import gather_evidence, prepare_case
from perfsuite.attention.inputs import make_grad_output, make_inputs
from perfsuite.attention.modes import MODES, Mode, make_step, parse_mode
from perfsuite.attention.reference import compare_gradients, reference_gradients
from perfsuite.variants import Variant, get_variant

CASE = parse_case_id("b2h4s32d16-fp32-noncausal-cpu")


def counted_flop(run) -> int:
    with FlopCounterMode(display=False) as counter:
        run()
    return counter.get_total_flops()


def test_flop_per_mode_against_torch_flop_counter():
    """flop_counter agrees on the forward; for an unfused backward it counts 2x, our convention 2.5x."""
    inputs, grad_output = make_inputs(CASE, 0), make_grad_output(CASE, 0)
    naive = get_variant("naive").fn
    forward = counted_flop(make_step("forward", naive, inputs, grad_output))
    both = counted_flop(make_step("forward_backward", naive, inputs, grad_output))
    assert forward == forward_flop(CASE)
    assert both - forward == 2 * forward  # four matmuls of the unfused backward, no recomputation
    assert MODE_FLOP_FACTOR == {"forward": 1.0, "backward": 2.5, "forward_backward": 3.5}
    assert mode_flop(CASE, "forward_backward") == 3.5 * forward_flop(CASE)
    tensor_bytes = (
        2 * 4 * 32 * 16 * 4
    )  # query, key, value, output and its gradient are all [2, 4, 32, 16] fp32
    assert mode_bytes(CASE, "backward") == (5 * tensor_bytes, 3 * tensor_bytes)


def test_backward_step_repeats_without_accumulating():
    inputs, grad_output = make_inputs(CASE, 0), make_grad_output(CASE, 0)
    step = make_step("backward", get_variant("sdpa_math").fn, inputs, grad_output)
    first, second = step(), step()
    for a, b in zip(first.gradients, second.gradients):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert (
        inputs.query.grad is None
        and not make_step(
            "forward", get_variant("naive").fn, inputs, grad_output
        )().output.requires_grad
    )


@pytest.mark.parametrize(
    "case_id",
    [
        "b2h4kv2q8k12d16-fp32-causal_br-cpu",
        "b1h2q6k4d8-fp32-causal_br-cpu",
        "b2h2s16d8-bf16-padding-strided-cpu",
    ],
)
def test_sdpa_gradients_match_the_float64_reference(case_id):
    """GQA, rows that see no key (their gradients are zero), strided bf16."""
    case = parse_case_id(case_id)
    inputs, grad_output = make_inputs(case, 0), make_grad_output(case, 0)
    result = make_step("forward_backward", get_variant("sdpa_math").fn, inputs, grad_output)()
    assert compare_gradients(result.gradients, inputs, grad_output, case_id).failure is None
    grad_query = reference_gradients(inputs, grad_output)[0]
    if case_id.startswith("b1h2q6k4"):
        assert grad_query[:, :, :2].abs().max() == 0  # the first two queries see no key


def test_a_wrong_gradient_is_caught_and_named():
    def detached_value(query, key, value, *, mask, scale):
        return get_variant("sdpa_math").fn(
            query, key, value.detach() + 0 * value, mask=mask, scale=scale
        )

    inputs, grad_output = make_inputs(CASE, 0), make_grad_output(CASE, 0)
    result = make_step("forward_backward", detached_value, inputs, grad_output)()
    failure = compare_gradients(result.gradients, inputs, grad_output, "detached").failure
    assert failure and failure.startswith("grad_value of detached")


def test_nan_rows_variant_gradients_are_not_compared_and_say_why(tmp_path):
    case = parse_case_id("b1h2q6k4d8-fp32-causal_br-cpu")
    evidence = gather_evidence(get_variant("naive"), case, 0, tmp_path, "forward_backward")
    assert (
        evidence.comparison is None
        and "the 4 query rows of this case that see no key" in evidence.not_compared
    )


def test_forward_only_variant_skips_backward_modes_with_its_reason(tmp_path):
    variant = Variant(
        name="fwd_only",
        fn=get_variant("naive_inplace").fn,
        description="test",
        forward_only="it mutates softmax's output",
    )
    prepared = prepare_case(variant, CASE, 0)
    with pytest.raises(
        VariantUnsupported, match="fwd_only has no backward( on cpu)?: it mutates softmax's output"
    ):
        gather_evidence(variant, CASE, 0, tmp_path, "backward", prepared)
    assert (
        gather_evidence(variant, CASE, 0, tmp_path, "forward", prepared).comparison.failure is None
    )


def test_parse_mode_names_the_bad_value():
    assert parse_mode(" Forward_Backward ") is Mode.FORWARD_BACKWARD == "forward_backward"
    assert MODES == tuple(Mode) == ("forward", "backward", "forward_backward")
    with pytest.raises(
        ValueError,
        match="mode 'fwd' is not supported; allowed: forward, backward, forward_backward",
    ):
        parse_mode("fwd")


def test_saved_score_matrices_do_not_count_inputs_of_the_same_size(tmp_path):
    """16 query heads x 16 queries == 4 kv heads x 64 dims: key and value have as many elements as the scores."""
    case = parse_case_id("b1h16kv4q16k256d64-fp32-causal_br-cpu")
    flash = gather_evidence(
        get_variant("sdpa_flash"), case, 0, tmp_path, "forward_backward"
    ).saved_for_backward
    naive = gather_evidence(
        get_variant("naive"), case, 0, tmp_path, "forward_backward"
    ).saved_for_backward
    assert flash.score_sized == 0 and naive.score_sized == 1 and naive.bytes > flash.bytes


def test_a_compiled_backward_can_be_replayed_in_any_mode_order(monkeypatch):
    """A user's own ``torch.compile``d attention, forward+backward first, then the backward replay:
    torch refuses ``retain_graph=True`` on a graph compiled with donated buffers (its default)."""
    monkeypatch.setattr(functorch_config, "donated_buffer", True)

    def attention(query, key, value, *, mask, scale):
        scores = (query @ key.transpose(-2, -1)) * scale
        return torch.softmax(scores, dim=-1) @ value

    compiled = torch.compile(attention, dynamic=False)
    inputs, grad_output = make_inputs(CASE, 0), make_grad_output(CASE, 0)
    expected = make_step("forward_backward", attention, inputs, grad_output)().gradients
    for mode in ("forward_backward", "backward"):
        step = make_step(mode, compiled, inputs, grad_output)
        step()
        for got, want in zip(step().gradients, expected):
            torch.testing.assert_close(got, want)


def test_the_backward_step_keeps_one_forward_per_stream(monkeypatch):
    """Autograd runs a backward on its forward's stream, so a backward captured on a side stream
    needs a forward from that stream: the step runs the forward once per ``stream_key`` and keeps
    each (a captured graph reads its saved tensors). The stream is faked; autograd is real."""
    from perfsuite.attention import modes

    stream = ["default"]
    monkeypatch.setattr(modes, "stream_key", lambda device: stream[0])
    forwards = []
    naive = get_variant("naive").fn

    def counting(*args, **kwargs):
        forwards.append(stream[0])
        return naive(*args, **kwargs)

    inputs, grad_output = make_inputs(CASE, 0), make_grad_output(CASE, 0)
    step = make_step("backward", counting, inputs, grad_output)
    first = step()
    step()
    stream[0] = "side"
    side = step()
    step()
    assert forwards == ["default", "side"]
    for got, expected in zip(side.gradients, first.gradients, strict=True):
        torch.testing.assert_close(got, expected)
    assert modes.stream_key(torch.device("cpu")) == "side"  # the patched one
    monkeypatch.undo()
    assert modes.stream_key(torch.device("cpu")) == torch.device("cpu")
