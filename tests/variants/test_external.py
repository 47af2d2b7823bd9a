"""flash-attn and xformers variants: registered always, skipped with a reason where they cannot run."""

import importlib.util

import pytest
import torch

from perfsuite.attention.cases import AttentionCase
from perfsuite.measure.refusals import VariantUnsupported
from perfsuite.measure.evidence import prepare_case
from perfsuite.variants import get_variant


@pytest.mark.parametrize("name", ["flash_attn", "xformers"])
def test_cpu_cases_skip_with_cuda_only(name):
    assert get_variant(name).wraps and get_variant(name).fused
    with pytest.raises(VariantUnsupported, match="runs on CUDA only"):
        prepare_case(
            get_variant(name), AttentionCase(1, 2, 4, 4, 8, "bf16", "cpu", "causal"), seed=0
        )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize(
    "name, package", [("flash_attn", "flash_attn"), ("xformers", "xformers.ops")]
)
def test_cuda_cases_skip_when_the_package_is_missing(name, package):
    if importlib.util.find_spec(package.split(".")[0]) is not None:
        pytest.skip(f"{package} is installed: this test is about its absence")
    with pytest.raises(VariantUnsupported, match="is not importable"):
        prepare_case(
            get_variant(name), AttentionCase(1, 2, 4, 4, 8, "bf16", "cuda", "causal"), seed=0
        )
