"""Layout built-ins: who runs where, and why not elsewhere (CUDA-only variants name what is missing)."""

import re
import sys

import pytest
import torch

from perfsuite.attention.cases import parse_case_id
from perfsuite.attention.inputs import make_inputs
from perfsuite.suite.generation import certain_skip
from perfsuite.variants import fp8, get_variant, varlen
from perfsuite.variants.unsupported import CaseUnsupported

PACKED = parse_case_id("b2h2s8d4-fp32-causal_br-packed-uniform-cpu")
DV = parse_case_id("b1h2s8d8-fp32-causal-dv4-cpu")
PLAIN = parse_case_id("b1h2s8d4-fp32-causal-cpu")


def test_a_variant_without_a_layouts_form_is_not_generated_and_the_form_is_named():
    assert "mha does not declare value_head_dim" in certain_skip(get_variant("mha"), DV, "forward")
    assert "sdpa does not declare varlen" in certain_skip(get_variant("sdpa"), PACKED, "forward")
    assert certain_skip(get_variant("sdpa"), DV, "forward") is None
    assert certain_skip(get_variant("sdpa"), DV, "backward") is None  # trained through
    fp8 = parse_case_id("b1h2s8d4-bf16-causal-fp8-cpu")
    assert "FP8 cases are inference only" in certain_skip(
        get_variant("fp8_dequant_sdpa"), fp8, "backward"
    )


def test_a_variant_that_requires_a_form_is_not_generated_on_cases_without_it():
    reason = certain_skip(get_variant("paged_gather"), PLAIN, "forward")
    assert reason.startswith("paged_gather requires paged (its keywords block_table, seq_lens_kv")
    assert "flex_document requires varlen" in certain_skip(
        get_variant("flex_document"), PLAIN, "forward"
    )


@pytest.mark.parametrize("name", ["varlen_attn", "varlen_attn_paged", "sdpa_fp8", "sdpa_flash_fa3"])
def test_cuda_only_variants_are_not_generated_on_the_cpu(name):
    case = {
        "varlen_attn": PACKED,
        "varlen_attn_paged": parse_case_id("b2h2q1k8d4-fp32-causal_br-paged4-uniform-cpu"),
        "sdpa_fp8": parse_case_id("b1h2s8d4-bf16-causal-fp8-cpu"),
    }.get(name, PLAIN)
    assert certain_skip(get_variant(name), case, "forward") == f"{name} runs on cuda only"


def test_a_torch_without_varlen_attn_is_named_with_its_version(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.nn.attention.varlen", None)
    with pytest.raises(
        CaseUnsupported,
        match=rf"torch {re.escape(torch.__version__)} has no .*varlen_attn \(added in torch 2.10\)",
    ):
        get_variant("varlen_attn").for_case(make_inputs(PACKED, 0))


def test_varlen_attn_refuses_top_left_causal_naming_the_alignment():
    with pytest.raises(CaseUnsupported, match="aligns causal masks bottom-right"):
        varlen.varlen_window("causal")
    assert varlen.varlen_window("window4") == (3, 0) and varlen.varlen_window("noncausal") == (
        -1,
        -1,
    )


def test_a_flash_implementation_torch_does_not_offer_is_named(monkeypatch):
    monkeypatch.setattr(torch.nn.attention, "list_flash_attention_impls", lambda: ["FA3"])
    assert (
        fp8.flash_impl_missing("FA4")
        == f"torch {torch.__version__} offers flash implementations ['FA3'], not FA4"
    )
    monkeypatch.delattr(torch.nn.attention, "list_flash_attention_impls")
    assert "has no torch.nn.attention.list_flash_attention_impls" in fp8.flash_impl_missing("FA3")


def test_a_pinned_flash_implementation_is_activated_for_the_call_and_fa2_restored(monkeypatch):
    """The CUDA path with a fake activation API: FA3 is active inside the call only, even when it raises."""
    calls = []
    monkeypatch.setattr(torch.nn.attention, "list_flash_attention_impls", lambda: ["FA3", "FA4"])
    monkeypatch.setattr(
        torch.nn.attention, "activate_flash_attention_impl", lambda impl: calls.append(impl)
    )
    monkeypatch.setattr(
        torch.nn.attention, "restore_flash_attention_impl", lambda _raise_warn: calls.append("FA2")
    )

    def sdpa(*args, **kwargs):
        calls.append("sdpa")
        raise RuntimeError("No available kernel")

    monkeypatch.setattr(fp8.F, "scaled_dot_product_attention", sdpa)
    monkeypatch.setattr(fp8, "flash_impl_unusable", lambda impl, device: None)  # as on a GPU
    inputs = make_inputs(PLAIN, 0)
    fn = get_variant("sdpa_flash_fa3").for_case(inputs)
    with pytest.raises(RuntimeError, match="No available kernel"):
        fn(inputs.query, inputs.key, inputs.value, **inputs.keywords())
    assert calls == ["FA3", "sdpa", "FA2"]


def test_sdpa_fp8_names_a_missing_quantized_path_and_masks_it_cannot_take(monkeypatch):
    case = parse_case_id("b1h2s8d4-bf16-window4-fp8-cpu")
    with pytest.raises(CaseUnsupported, match="takes is_causal only; mask 'window4'"):
        get_variant("sdpa_fp8").for_case(make_inputs(case, 0))
    monkeypatch.setitem(
        sys.modules, "torch.nn.attention.experimental._scaled_dot_product_attention_quantized", None
    )
    with pytest.raises(
        CaseUnsupported, match=rf"torch {re.escape(torch.__version__)} has no .*quantized"
    ):
        fp8.quantized_sdpa()


def test_a_listed_flash_implementation_that_cannot_activate_names_why(monkeypatch):
    def activate(impl):
        raise ModuleNotFoundError("No module named 'flash_attn_interface'")

    monkeypatch.setattr(torch.nn.attention, "activate_flash_attention_impl", activate)
    monkeypatch.setattr(
        torch.nn.attention, "restore_flash_attention_impl", lambda _raise_warn: None
    )
    assert fp8.flash_impl_unusable("FA3", "cuda").endswith(
        "lists FA3 but cannot activate it: ModuleNotFoundError: No module named 'flash_attn_interface'"
    )
    assert (
        fp8.flash_impl_unusable("FA4", "cpu")
        == "FA4 is a CUDA flash implementation; this case runs on cpu"
    )


def test_sdpa_fp8_needs_fa3_and_is_skipped_naming_it_where_fa3_cannot_run():
    """torch's quantized path runs on FA3 only: on a machine where FA3 cannot be activated (here the
    CPU) the case is skipped with the reason, not left to fail inside torch."""
    case = parse_case_id("b1h4kv2s8d4-bf16-causal-fp8-cpu")
    with pytest.raises(CaseUnsupported, match="SDPA's quantized path runs on FA3: FA3 is a CUDA"):
        fp8.prepare_sdpa_fp8(make_inputs(case, 0))


def test_sdpa_fp8_runs_with_fa3_active_and_descales_shaped_batch_by_kv_heads(monkeypatch):
    """The CUDA path with torch's activation API faked: FA3 active during the call, and every
    descale ``(B, H_kv)`` as torch's ``_validate_descale`` demands (its docstring, read here), a
    grouped-query case included (4 query heads over 2 key/value heads)."""
    import inspect

    from torch.nn.attention.experimental import _scaled_dot_product_attention_quantized as quantized

    assert "(batch_size, num_kv_heads)" in inspect.getsource(quantized._validate_descale)
    calls, active = [], []
    monkeypatch.setattr(torch.nn.attention, "list_flash_attention_impls", lambda: ["FA3", "FA4"])
    monkeypatch.setattr(
        torch.nn.attention, "activate_flash_attention_impl", lambda impl: active.append(impl)
    )
    monkeypatch.setattr(
        torch.nn.attention, "restore_flash_attention_impl", lambda _raise_warn: active.clear()
    )
    monkeypatch.setattr(fp8, "flash_impl_unusable", lambda impl, device: None)  # as on a Hopper

    def attention_fp8(query, key, value, **kw):
        calls.append((list(active), {k: tuple(v.shape) for k, v in kw.items() if "descale" in k}))
        return query

    monkeypatch.setattr(fp8, "quantized_sdpa", lambda: attention_fp8)
    inputs = make_inputs(parse_case_id("b1h4kv2s8d4-bf16-causal-fp8-cpu"), 0)
    fn = fp8.prepare_sdpa_fp8(inputs)
    fn(inputs.query, inputs.key, inputs.value, **inputs.keywords())
    shape = (1, 2)
    assert calls == [(["FA3"], {"q_descale": shape, "k_descale": shape, "v_descale": shape})]
    assert active == []  # FA2 restored after the call


def test_varlen_attn_passes_enable_gqa_only_where_torchs_signature_has_it(monkeypatch):
    """torch 2.11's varlen_attn has no ``enable_gqa`` (its keywords: return_aux, scale,
    window_size): with a function of that signature the grouped-query case calls it without the
    keyword; with the installed torch's, the keyword goes where its signature takes it."""
    import inspect

    from torch.nn.attention.varlen import varlen_attn

    calls = []

    def varlen_attn_2_11(
        q, k, v, cu_q, cu_k, max_q, max_k, *, return_aux=None, scale=None, window_size=(-1, -1)
    ):
        calls.append((tuple(q.shape), tuple(k.shape), window_size))
        return q

    monkeypatch.setattr(varlen, "_torch_varlen", lambda: varlen_attn_2_11)
    inputs = make_inputs(parse_case_id("b2h4kv2s8d4-fp32-causal_br-packed-uniform-cpu"), 0)
    fn = varlen.prepare_varlen_attn(inputs)
    fn(inputs.query, inputs.key, inputs.value, **inputs.keywords())
    assert calls == [(tuple(inputs.query.shape), tuple(inputs.key.shape), (-1, 0))]
    has_it = "enable_gqa" in inspect.signature(varlen_attn).parameters
    assert varlen.varlen_gqa_keywords(varlen_attn, 4, 2) == ({"enable_gqa": True} if has_it else {})
