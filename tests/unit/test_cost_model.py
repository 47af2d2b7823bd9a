import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from perfsuite.cases import AttentionCase
from perfsuite.cost_model import attended_pairs, forward_bytes, forward_flop
from perfsuite.inputs import causal_masked_out, make_inputs


def test_noncausal_flop_matches_torch_flop_counter():
    """The CPU flash kernel has no flop formula in torch; the math backend runs two counted bmm."""
    case = AttentionCase(2, 4, 64, 48, 32, "fp32", "cpu", False)
    inputs = make_inputs(case, seed=0)
    with sdpa_kernel([SDPBackend.MATH]), FlopCounterMode(display=False) as counter:
        F.scaled_dot_product_attention(inputs.query, inputs.key, inputs.value)
    assert counter.get_total_flops() > 0
    assert forward_flop(case) == counter.get_total_flops()


def test_causal_pairs_equal_the_unmasked_entries_of_the_mask():
    for seq_len_q, seq_len_kv in [(1, 1), (7, 7), (16, 16), (4, 9), (9, 4)]:
        unmasked = int((~causal_masked_out(seq_len_q, seq_len_kv, "cpu")).sum())
        assert attended_pairs(seq_len_q, seq_len_kv, causal=True) == unmasked
    assert attended_pairs(5, 6, causal=False) == 30


def test_causal_flop_is_a_bit_more_than_half():
    causal = AttentionCase(1, 1, 1024, 1024, 64, "bf16", "cpu", True)
    full = AttentionCase(1, 1, 1024, 1024, 64, "bf16", "cpu", False)
    assert forward_flop(causal) * 2 == forward_flop(full) + 4 * 1024 * 64


def test_bytes_read_and_written():
    case = AttentionCase(2, 8, 256, 256, 64, "bf16", "cpu", True)
    tensor_bytes = 2 * 8 * 256 * 64 * 2
    assert forward_bytes(case) == (3 * tensor_bytes, tensor_bytes)
