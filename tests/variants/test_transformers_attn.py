"""transformers' attention implementations as variants: masks, skips and the library's behaviours
docs/explanation/model-implementations.md reports."""

import pytest
import torch

from perfsuite.attention.cases import AttentionCase
from perfsuite.attention.inputs import make_inputs
from perfsuite.attention.reference import reference_attention
from perfsuite.measure.refusals import VariantUnsupported
from perfsuite.measure.evidence import bind, prepare_case
from perfsuite.variants import get_variant, variant_names
from perfsuite.variants import transformers_attn as hf
from perfsuite.variants.unsupported import CaseUnsupported

pytest.importorskip("transformers", reason="perfsuite[transformers] is not installed")


def _case(mask, sq=6, skv=6, heads=4, kv_heads=4, dtype="fp32", batch=2, head_dim=8):
    return AttentionCase(batch, heads, sq, skv, head_dim, dtype, "cpu", mask, kv_heads)


def test_every_registered_attention_function_is_a_variant():
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    expected = {"hf_eager"} | {
        f"hf_{k}" for k in ALL_ATTENTION_FUNCTIONS.valid_keys() if hf.is_kernel_key(k)
    }
    assert expected <= set(variant_names())
    assert all(get_variant(name).wraps == "transformers" for name in expected)


def test_listing_variants_does_not_import_transformers_and_preload_does():
    """Every process that imports perfsuite would otherwise pay transformers' 3-5 s import. A fresh
    process lists the variants without importing it (not importing it there too saves the test 4 s);
    preloading imports the model modules (here, in this process)."""
    import subprocess
    import sys

    code = (
        "import sys; from perfsuite.variants import variant_names; names = variant_names(); "
        "assert 'hf_sdpa' in names and 'transformers' not in sys.modules"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert found.returncode == 0, found.stderr[-2000:]
    from perfsuite.variants import registry

    hf.load.cache_clear()
    for name in [m for m in sys.modules if m.startswith("transformers.models.mistral")]:
        del sys.modules[name]  # imported again by the preload below
    registry.preload_variants(["naive", "hf_sdpa"])
    assert "transformers.models.mistral.modeling_mistral" in sys.modules


@pytest.mark.parametrize(
    "case",
    [
        _case("causal"),
        _case("causal_br", sq=1, skv=9, kv_heads=2),
        _case("causal_br", sq=3, skv=9),
        _case("window3", sq=4, skv=9, kv_heads=1),
        _case("padding", sq=5, skv=7),
        _case("bool"),
        _case("noncausal"),
    ],
    ids=lambda c: c.id,
)
def test_transformers_masks_select_the_keys_the_suite_allows(case):
    """eager_mask's float mask (0 where attended, finfo.min elsewhere) marks exactly the suite's keys."""
    inputs = make_inputs(case, seed=0)
    built = hf.model_call("eager", inputs).attention_mask
    allowed = (
        torch.ones(case.score_shape, dtype=torch.bool)
        if inputs.mask.allowed is None
        else inputs.mask.allowed
    )
    if built is None:  # transformers skipped the mask: every key is attended
        assert allowed.all()
        return
    assert torch.equal(built == 0, allowed.expand(case.score_shape[0], 1, *case.score_shape[2:]))


@pytest.mark.parametrize("name", ["hf_eager", "hf_sdpa"])
@pytest.mark.parametrize(
    "case",
    [
        _case("causal_br", sq=1, skv=9, kv_heads=2, dtype="bf16"),
        _case("window3", sq=4, skv=9, kv_heads=1),
        _case("padding", sq=5, skv=7),
        _case("additive"),
        _case("bool", sq=3, skv=8, kv_heads=2),
    ],
    ids=lambda c: c.id,
)
def test_hf_variants_match_the_float64_reference(name, case):
    inputs = make_inputs(case, seed=1)
    output = bind(get_variant(name), inputs)()
    assert output.shape == (case.batch, case.num_heads, case.seq_len_q, case.head_dim)
    tolerance = 2e-5 if case.dtype == "fp32" else 5e-2
    torch.testing.assert_close(
        output.double(), reference_attention(inputs), atol=tolerance, rtol=tolerance
    )


@pytest.mark.parametrize(
    "case, reason",
    [
        (_case("causal", sq=2, skv=6), "top-left causal with seq_len_q != seq_len_kv"),
        (_case("causal_br", sq=6, skv=2), "seq_len_q=6 > seq_len_kv=2"),
        (_case("noncausal", kv_heads=2), "one kv head per query head"),
    ],
)
def test_cases_no_model_makes_are_skips_with_the_reason(case, reason):
    with pytest.raises(VariantUnsupported, match=reason):
        prepare_case(get_variant("hf_sdpa"), case, seed=0)


def test_flash_attention_implementations_skip_off_cuda():
    with pytest.raises(VariantUnsupported, match="CUDA only"):
        prepare_case(get_variant("hf_flash_attention_2"), _case("causal"), seed=0)


def test_a_flash_kernel_package_that_fails_to_import_is_a_skip_at_every_call(monkeypatch):
    # On an H200 with transformers 5.17 and no flash-attn: ImportError at the first call, TypeError later.
    calls = []

    def flash_function(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise ImportError("`kernels` is either not installed or uses an incompatible version.")
        raise TypeError("the first argument must be callable")

    monkeypatch.setattr(hf, "_needs_cuda", lambda impl, query: None)
    monkeypatch.setattr(hf, "attention_function", lambda impl, call: flash_function)
    monkeypatch.setattr(hf, "_KERNELS_NOT_LOADED", {})
    inputs = make_inputs(_case("causal"), seed=0)
    variant = get_variant("hf_flash_attention_2")
    fn = variant.for_case(inputs)
    with pytest.raises(CaseUnsupported, match="flash_attention_2 could not load its kernels"):
        fn(inputs.query, inputs.key, inputs.value, mask=inputs.mask, scale=inputs.scale)
    with pytest.raises(CaseUnsupported, match="`kernels` is either not installed"):
        variant.for_case(inputs)  # a later mode: refused before the broken call
    assert len(calls) == 1


def test_without_transformers_the_variants_skip_with_the_install_hint(monkeypatch):
    monkeypatch.setattr(
        hf,
        "load",
        lambda: "transformers is not importable (ModuleNotFoundError); " + hf.INSTALL_HINT,
    )
    with pytest.raises(CaseUnsupported, match=r"pip install 'perfsuite\[transformers\]'"):
        get_variant("hf_sdpa").for_case(make_inputs(_case("causal"), seed=0))


# The library's own behaviours (docs/explanation/model-implementations.md).


def test_eager_gives_a_query_that_sees_no_key_the_mean_of_the_values_and_sdpa_zeros():
    """eager_mask writes finfo(dtype).min, not -inf: softmax over a row of equal minima is uniform."""
    case = _case("bool", sq=4, skv=5)
    inputs = make_inputs(case, seed=0)
    allowed = inputs.mask.allowed.clone()
    allowed[:, :, 0] = False  # query 0 sees no key
    inputs = inputs.replace(
        mask=inputs.mask.__class__("bool", False, allowed, ~allowed, None, allowed)
    )
    eager = bind(get_variant("hf_eager"), inputs)()
    sdpa = bind(get_variant("hf_sdpa"), inputs)()
    value_mean = inputs.value.mean(dim=2)  # [B, H, D]
    torch.testing.assert_close(eager[:, :, 0], value_mean)
    assert (sdpa[:, :, 0] == 0).all()
    assert (
        get_variant("hf_eager").fully_masked_rows == "any"
        and get_variant("hf_sdpa").fully_masked_rows == "zeros"
    )


def test_in_fp16_eager_gives_a_query_that_sees_no_key_nan_when_its_scores_are_negative():
    """finfo(float16).min = -65504; adding a score below about -16 rounds to -inf, and softmax of a row
    of -inf is NaN: the reason hf_eager declares fully_masked_rows="any", not "finite"."""
    from perfsuite.attention.cases import parse_case_id
    from perfsuite.testing.properties import check_matches_reference

    case = parse_case_id(
        "b2h2kv1s1d64-fp16-bool-scale2.5-strided-cpu"
    )  # found by hypothesis, seed 1
    inputs = make_inputs(case, seed=1)
    output = bind(get_variant("hf_eager"), inputs)()
    rows = ~inputs.mask.allowed.expand(case.score_shape).any(dim=-1)
    assert rows.any() and not torch.isfinite(output[rows]).all()
    assert check_matches_reference(get_variant("hf_eager"), case, 1) is None


def test_a_bool_4d_mask_given_to_eager_is_added_not_selected():
    """transformers passes a custom 4D mask through unchanged; eager adds it, so True adds 1.0 to a score."""
    from transformers.models.llama.modeling_llama import eager_attention_forward

    case = _case("bool")
    inputs = make_inputs(case, seed=0)
    module = hf.model_call("eager", inputs).module
    as_bool, _ = eager_attention_forward(
        module, inputs.query, inputs.key, inputs.value, inputs.mask.allowed, scaling=inputs.scale
    )
    reference = reference_attention(inputs)
    assert (
        as_bool.transpose(1, 2).double() - reference
    ).abs().max() > 0.1  # wrong: nothing was hidden


def test_flex_attention_reads_a_tensor_mask_at_head_zero():
    """flex_attention_forward's score_mod indexes score_mask[b][0][q][kv]: a per-head bias is lost,
    so the variant skips per-head biases with that reason."""
    from transformers.integrations.flex_attention import flex_attention_forward

    case = _case("additive", sq=4, skv=4, heads=2, kv_heads=2, batch=1)
    inputs = make_inputs(case, seed=0)
    bias = inputs.mask.additive  # [1, 2, Sq, Skv], differs per head
    module = hf.model_call("sdpa", inputs).module
    from torch.nn.attention.flex_attention import flex_attention
    import transformers.integrations.flex_attention as flex_integration

    original = flex_integration.compile_friendly_flex_attention
    try:  # eager flex (no compile) so the test is fast; the score_mod is transformers' own
        flex_integration.compile_friendly_flex_attention = lambda q, k, v, training=False, **kw: (
            flex_attention(q, k, v, **kw)
        )
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            output, _ = flex_attention_forward(
                module, inputs.query, inputs.key, inputs.value, bias, scaling=inputs.scale
            )
    finally:
        flex_integration.compile_friendly_flex_attention = original
    head0_bias = inputs.replace(mask=inputs.mask.with_additive(bias[:, :1].expand_as(bias)))
    torch.testing.assert_close(
        output.transpose(1, 2).double(), reference_attention(head0_bias), atol=1e-5, rtol=1e-5
    )
    with pytest.raises(CaseUnsupported, match="head 0"):
        get_variant("hf_flex_attention").for_case(inputs)


@pytest.mark.parametrize("name", ["hf_eager", "hf_sdpa", "mha", "mha_need_weights"])
def test_adapters_match_the_float64_reference_on_drawn_cases(name):
    """Hypothesis draws shapes, dtypes, masks, scales and layouts; the adapter matches float64 wherever
    it runs (fully masked rows held to its declaration) and skips, with its reason, where it cannot."""
    from hypothesis import given, settings

    from perfsuite.testing import properties
    from perfsuite.testing.strategies import attention_cases, seeds

    @settings(max_examples=25, deadline=None)
    @given(case=attention_cases(devices=("cpu",), dtypes=("fp32", "bf16")), seed=seeds())
    def check(case, seed):
        try:
            failure = properties.check_matches_reference(get_variant(name), case, seed)
        except VariantUnsupported:
            return
        assert failure is None, failure

    check()
