"""Skip reasons read as sentences, and a failed host allocation is a skip, not an error."""

import pytest
import torch

from perfsuite.attention.cases import AttentionCase
from perfsuite.measure.evidence import run_once
from perfsuite.measure.refusals import VariantUnsupported, unsupported_reason
from perfsuite.variants import Variant

CASE = AttentionCase(1, 2, 8, 8, 4, "fp32", "cpu", "causal")


def _user_variant():
    return Variant(name="mine", fn=lambda *a, **k: None, description="test-only")


def test_a_user_variants_refusal_names_torch_and_the_variant():
    """Before: 'its kernels refuses this case'."""
    reason = unsupported_reason(
        _user_variant(), CASE, RuntimeError("No available kernel. Aborting execution."), []
    )
    assert (
        reason
        == "torch (called by mine) has no kernel for fp32 on cpu; torch: 'No available kernel'"
    )


def test_a_failed_host_allocation_is_a_skip_with_the_case_size():
    """Before: an allocation failure on a huge case was an error, not the skip the README promises."""

    def allocate():
        raise RuntimeError(
            "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not enough memory: "
            "you tried to allocate 68719476736 bytes."
        )

    with pytest.raises(VariantUnsupported, match="out of host memory .*--perfsuite-shapes"):
        run_once(_user_variant(), CASE, allocate)
    with pytest.raises(VariantUnsupported, match="out of cpu memory"):
        run_once(_user_variant(), CASE, lambda: (_ for _ in ()).throw(torch.OutOfMemoryError("no")))
