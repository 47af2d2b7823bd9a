"""Timing synchronizes a CUDA device around the timed call, and leaves a CPU call as it is."""

import pytest
import torch

from perfsuite.measure.timing import synchronized


def test_a_cpu_call_is_timed_as_it_is():
    def forward():
        return 1

    assert synchronized(forward, "cpu") is forward


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_real_device_the_kernels_have_finished_when_it_returns():
    x = torch.ones(1024, 1024, device="cuda")
    out = synchronized(lambda: x @ x, "cuda")()
    assert torch.cuda.current_stream().query() and out[0, 0].item() == 1024
