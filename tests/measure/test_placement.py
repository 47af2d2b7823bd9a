"""Placement re-drawn per block: inputs copied to random aligned offsets, the A/B worker's blocks timed
on them."""

import numpy as np
import torch

from perfsuite.attention.cases import parse_case_id
from perfsuite.attention.inputs import make_inputs
from perfsuite.measure.placement import (
    ALIGNMENT_BYTES,
    MAX_OFFSET_BYTES,
    MAX_SPACER_BYTES,
    relocated,
    relocated_inputs,
    spacer,
)


def test_a_relocated_tensor_keeps_its_values_and_strides_at_an_aligned_offset_drawn_from_the_seed():
    tensor = torch.randn(2, 8, 4, 3).transpose(1, 2)  # a strided view, as layout cases give
    offsets = set()
    for seed in range(20):
        moved = relocated(tensor, np.random.default_rng(seed))
        assert torch.equal(moved, tensor) and moved.stride() == tensor.stride()
        assert moved.data_ptr() != tensor.data_ptr()
        offset = moved.data_ptr() - moved.untyped_storage().data_ptr()
        assert offset % ALIGNMENT_BYTES == 0 and offset < MAX_OFFSET_BYTES
        offsets.add(offset)
    assert len(offsets) > 10  # the offset is drawn, not fixed
    again = [relocated(tensor, np.random.default_rng(3)) for _ in range(2)]
    assert len({m.data_ptr() - m.untyped_storage().data_ptr() for m in again}) == 1  # same seed


def test_relocated_inputs_move_query_key_and_value_and_keep_the_rest():
    inputs = make_inputs(parse_case_id("b1h2s16d8-fp32-causal-cpu"), 0)
    moved = relocated_inputs(inputs, np.random.default_rng(1))
    for name in ("query", "key", "value"):
        before, after = getattr(inputs, name), getattr(moved, name)
        assert torch.equal(before, after) and before.data_ptr() != after.data_ptr()
    assert moved.mask is inputs.mask and moved.keywords().keys() == inputs.keywords().keys()
    held = spacer(np.random.default_rng(2), "cpu")
    assert held.dtype == torch.uint8 and held.numel() % ALIGNMENT_BYTES == 0
    assert held.numel() < MAX_SPACER_BYTES


def test_the_ab_worker_times_a_placed_block_on_inputs_of_its_own():
    """A ``time`` request with ``placement`` rebuilds the step on relocated inputs and answers as an
    unplaced one does (the gate's blocks), with the block's own wall seconds."""
    from perfsuite.gate.ab_worker import Worker

    worker = Worker()
    setup = worker.setup(
        {"variant": "naive", "case": "b1h2s16d8-fp32-causal-cpu", "seed": 0, "specs": [],
         "mode": "forward"}
    )  # fmt: skip
    assert setup["clock"] == "host" and setup["step_s"] > 0
    seen = []
    original = worker._placed

    def spy(seed):
        seen.append(seed)
        return original(seed)

    worker._placed = spy
    placed = worker.handle({"time": 3, "warmup": 1, "placement": 7})
    plain = worker.handle({"time": 3, "warmup": 1})
    assert seen == [7] and len(placed["times"]) == len(plain["times"]) == 3
    assert placed["block_s"] >= sum(placed["times"]) * 0.5 and "contention" in placed


def test_a_worker_keeps_a_placement_for_its_seed_and_draws_anew_for_another():
    from perfsuite.gate.ab_worker import Worker

    worker = Worker()
    worker.setup(
        {"variant": "naive", "case": "b1h2s16d8-fp32-causal-cpu", "seed": 0, "specs": [],
         "mode": "forward"}
    )  # fmt: skip
    drawn = []
    original = worker._draw_placement

    def spy(seed):
        drawn.append(seed)
        return original(seed)

    worker._draw_placement = spy
    for seed in (7, 7, 7, 8, 7):
        worker.handle({"time": 1, "placement": seed})
    assert drawn == [7, 8, 7]  # the coordinator's seed says when to re-draw
    worker.setup(
        {"variant": "naive", "case": "b1h2s16d8-fp32-causal-cpu", "seed": 0, "specs": [],
         "mode": "forward"}
    )  # fmt: skip
    worker.handle({"time": 1, "placement": 7})
    assert drawn == [7, 8, 7, 7]  # a new benchmark never reuses the last one's placement
