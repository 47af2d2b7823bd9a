import pytest
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from perfsuite.attention.cases import AttentionCase
from perfsuite.attention.cost_model import attended_pairs, forward_bytes, forward_flop
from perfsuite.attention.inputs import make_inputs


def test_noncausal_flop_matches_torch_flop_counter():
    """The CPU flash kernel has no flop formula in torch; the math backend runs two counted bmm."""
    case = AttentionCase(2, 4, 64, 48, 32, "fp32", "cpu", "noncausal")
    inputs = make_inputs(case, seed=0)
    with sdpa_kernel([SDPBackend.MATH]), FlopCounterMode(display=False) as counter:
        F.scaled_dot_product_attention(inputs.query, inputs.key, inputs.value)
    assert counter.get_total_flops() > 0
    assert forward_flop(case) == counter.get_total_flops()


@pytest.mark.parametrize("mask", ["causal", "causal_br", "window1", "window3", "window50"])
@pytest.mark.parametrize(
    "seq_len_q, seq_len_kv", [(1, 1), (7, 7), (16, 16), (4, 9), (9, 4), (1, 12)]
)
def test_structured_pairs_equal_the_allowed_entries_of_the_mask(mask, seq_len_q, seq_len_kv):
    case = AttentionCase(1, 1, seq_len_q, seq_len_kv, 8, "fp32", "cpu", mask)
    allowed = make_inputs(case, seed=0).mask.allowed
    assert attended_pairs(case) == int(allowed.sum())


def test_unstructured_masks_count_every_pair():
    for mask in ("noncausal", "bool", "padding", "additive"):
        assert attended_pairs(AttentionCase(1, 1, 5, 6, 8, "fp32", "cpu", mask)) == 30


def test_causal_flop_is_a_bit_more_than_half():
    causal = AttentionCase(1, 1, 1024, 1024, 64, "bf16", "cpu", "causal")
    full = AttentionCase(1, 1, 1024, 1024, 64, "bf16", "cpu", "noncausal")
    assert forward_flop(causal) * 2 == forward_flop(full) + 4 * 1024 * 64


def test_bytes_read_and_written():
    case = AttentionCase(2, 8, 256, 256, 64, "bf16", "cpu", num_kv_heads=2)
    query_bytes, kv_bytes = 2 * 8 * 256 * 64 * 2, 2 * 2 * 256 * 64 * 2
    assert forward_bytes(case) == (query_bytes + 2 * kv_bytes, query_bytes)
