"""Cost of layout cases: useful work per sequence, padding beside it, KV bytes; the table shows them."""

import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from perfsuite.attention.cases import parse_case_id
from perfsuite.attention.cost_model import (
    forward_bytes,
    forward_flop,
    kv_read_bytes,
    padding_bytes,
    padding_flop,
)
from perfsuite.attention.inputs import make_inputs
from perfsuite.attention.reference_layouts import sequences
from perfsuite.report.results import markdown_table

PADDED = parse_case_id("b4h4kv2s16d8-fp32-noncausal-padded-uniform-cpu")
PACKED = parse_case_id("b4h4kv2s16d8-fp32-noncausal-packed-uniform-cpu")


def test_useful_flop_is_the_flop_counter_of_each_sequence_attended_alone():
    counted = 0
    for seq in sequences(PACKED, make_inputs(PACKED, 0), dtype=PACKED.torch_dtype):
        with sdpa_kernel([SDPBackend.MATH]), FlopCounterMode(display=False) as counter:
            F.scaled_dot_product_attention(
                seq.inputs.query, seq.inputs.key, seq.inputs.value, enable_gqa=True
            )
        counted += counter.get_total_flops()
    assert forward_flop(PACKED) == forward_flop(PADDED) == counted


def test_padding_is_what_the_padded_batch_computes_and_moves_beyond_its_sequences():
    full = parse_case_id("b4h4kv2s16d8-fp32-noncausal-cpu")  # every sequence at the longest length
    assert padding_flop(PADDED) == forward_flop(full) - forward_flop(PADDED) > 0
    assert padding_bytes(PADDED) == sum(forward_bytes(full)) - sum(forward_bytes(PADDED)) > 0
    assert padding_flop(PACKED) == padding_bytes(PACKED) == 0  # a packed batch holds no padding


def test_kv_bytes_count_each_sequence_its_value_head_dim_and_one_byte_fp8_elements():
    paged = parse_case_id("b2h4kv2q1k16d8-fp32-causal_br-paged4-equal-dv4-cpu")
    assert kv_read_bytes(paged) == 4 * (2 * 16) * 2 * (8 + 4)
    fp8 = parse_case_id("b2h4kv2s16d8-bf16-causal-fp8-cpu")
    assert kv_read_bytes(fp8) == 1 * (2 * 16) * 2 * (8 + 8)


def test_the_table_shows_padding_and_kv_read_rate_only_when_a_row_is_a_layout_case(make_result):
    plain = make_result()
    padded = make_result(padding_flop=3_000_000, padding_bytes=1024, kv_read_bytes=2_000_000)
    assert "padding FLOP" not in markdown_table([plain], [])
    table = markdown_table([plain, padded], [])
    assert "| padding FLOP, bytes (share) | KV read GB/s |" in table.splitlines()[0]
    assert "3 MFLOP (60%), 1.0 KiB (51%) | 1.00 |" in table  # 2 MFLOP useful; 2 MB in 2 ms


def test_the_gpu_report_puts_the_kv_read_rate_against_the_measured_bandwidth(make_result):
    from perfsuite.cli.verify import timing_rows

    paged = make_result(
        kv_read_bytes=2_000_000, case_id="b2h4kv2q1k16d8-fp32-causal_br-paged4-equal-cpu"
    )
    rows = timing_rows([paged, make_result()], {"memory_gbps": 4.0, "matmul_tflops": {}})
    assert rows[0].endswith("| KV read GB/s (% of measured bandwidth) | timing notes |")
    assert rows[2].endswith("| 1 (25.0%) | - |") and rows[3].endswith("| - | - |")
