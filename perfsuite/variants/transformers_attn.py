"""Hugging Face transformers' attention implementations, called the way its models call them.

One variant ``hf_<implementation>`` per entry of transformers' attention-function registry
(``ALL_ATTENTION_FUNCTIONS``: ``sdpa``, ``flex_attention``, ``flash_attention_2/3/4``) plus
``hf_eager`` (the model's own ``eager_attention_forward``). The names are listed here
(``IMPLEMENTATIONS``) and transformers is imported only when one of them is prepared or
preloaded (``load``). ``prepare`` builds, once per case and
outside the timed call, what a model has at that point of its forward:

* an attention module constructed from a config on the ``meta`` device (no weights; the attention
  functions read only its attributes: ``num_key_value_groups``, ``is_causal``, ``training``);
* the mask, made by transformers' own masking utilities (``transformers.masking_utils``) for the
  config's ``attn_implementation``, so each implementation gets the form it takes (a bool
  ``[B, 1, Sq, Skv]`` tensor or None for sdpa, a float one with ``finfo(dtype).min`` for eager, a
  ``BlockMask`` for flex, a 2D padding mask or None for flash).

The call is ``ALL_ATTENTION_FUNCTIONS[impl](module, q, k, v, mask, dropout=0.0, scaling=scale,
...)``, as ``LlamaAttention.forward`` makes it; its output ``[B, Sq, H, D]`` is returned as the
view ``[B, H, Sq, D]`` (the suite's contract).

How the suite's mask kinds map onto a model (``perfsuite.attention.masks`` for the kinds):

* ``causal`` with ``seq_len_q == seq_len_kv``: a Llama decoder's prefill without cache
  (``create_causal_mask``). ``causal_br``: the same decoder with a ``DynamicCache`` already holding
  ``seq_len_kv - seq_len_q`` tokens (decode when ``seq_len_q == 1``): the mask's cache offset.
* ``window<W>``: a Mistral decoder with ``sliding_window=W`` and the same cache
  (``create_sliding_window_causal_mask``; the model also passes ``sliding_window`` to the function).
* ``noncausal`` and ``padding``: a BERT encoder (``create_bidirectional_mask`` with the 2D padding
  mask ``[B, Skv]``; cross-attention when ``seq_len_q != seq_len_kv``).
* ``bool`` and any case with an additive bias: a custom 4D mask given to the Llama decoder, which
  transformers passes through unchanged; it is written in the form each implementation needs (bool
  for sdpa, float ``0 / finfo.min`` plus the bias for eager and flex).

Cases no transformers model produces are skips that say so: top-left causal with
``seq_len_q != seq_len_kv`` (models align causal masks bottom-right: the queries are the newest
positions), ``seq_len_q > seq_len_kv`` with a causal kind, grouped kv heads in the encoder kinds
(BERT-class encoders have one kv head per query head). When transformers is not installed every
variant is still registered and skips with the install hint (``pip install perfsuite[transformers]``).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any
from collections.abc import Callable

import torch

from perfsuite.attention.inputs import AttentionInputs
from perfsuite.attention.masks import mask_kind
from perfsuite.variants.registry import VariantFn, prepared_on_every_call, register_variant
from perfsuite.variants.unsupported import CaseUnsupported, optional_module

INSTALL_HINT = "install it with: pip install 'perfsuite[transformers]'"
_MODEL_MODULES = (
    "transformers.models.llama.modeling_llama",
    "transformers.models.mistral.modeling_mistral",
    "transformers.models.bert.modeling_bert",
    "transformers.masking_utils",
    "transformers.cache_utils",
)


@functools.cache
def load() -> str | None:
    """Import transformers and the model modules this adapter calls, once; None, or why they are missing.

    Not at import of ``perfsuite.variants`` (it costs 3-5 s, which every process would pay): the
    suite calls it through ``Variant.preload`` for selected ``hf_*`` variants before any test runs.
    It must run before anything is compiled: importing the model modules registers about 50 pytree
    node types (transformers' ModelOutput classes, caches), and every graph torch.compile made
    before that has a guard on the number of pytree types, so it would recompile at its next call
    (flex_compiled did, while timed).
    """
    for name in ("transformers", *_MODEL_MODULES):
        module, missing = optional_module(name, INSTALL_HINT)
        if module is None:
            return missing
    return None


# transformers 5.24's ALL_ATTENTION_FUNCTIONS keys that are kernels, plus the model file's eager (the
# order of the table). Listed, not read, so that listing variants does not import transformers;
# tests/variants/test_transformers_attn.py fails when the installed transformers has others.
IMPLEMENTATIONS = (
    "eager",
    "sdpa",
    "flex_attention",
    "flash_attention_2",
    "flash_attention_3",
    "flash_attention_4",
)
# Paged attention (``paged|eager``; ``paged|sdpa``, ``paged|flash_attention_2`` ... in 5.17) needs a
# PagedAttentionCache (continuous batching), not a call on query/key/value.
PAGED_PREFIX = "paged|"


def is_kernel_key(key: str) -> bool:
    """Whether an ``ALL_ATTENTION_FUNCTIONS`` key is an attention function callable on a case."""
    return not key.startswith(PAGED_PREFIX)


@dataclasses.dataclass(frozen=True)
class ModelCall:
    """What a model hands its attention function on one case.

    ``module``: the attention module (on ``meta``). ``attention_mask``: the mask in the form of
    the implementation. ``kwargs``: extra keyword arguments the model passes (``sliding_window``).
    ``eager``: the model file's ``eager_attention_forward``. ``family``: the model class's name.
    """

    module: torch.nn.Module
    attention_mask: Any
    kwargs: dict
    eager: Callable
    family: str


def registry_implementations() -> tuple[str, ...]:
    """``eager`` and the kernel keys of the installed transformers' ``ALL_ATTENTION_FUNCTIONS`` (imports it)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    return ("eager", *sorted(k for k in ALL_ATTENTION_FUNCTIONS.valid_keys() if is_kernel_key(k)))


def _config(config_class, impl: str, query: torch.Tensor, key: torch.Tensor, **extra):
    batch, num_heads, _, head_dim = query.shape
    config = config_class(hidden_size=num_heads * head_dim, num_attention_heads=num_heads, **extra)
    config._attn_implementation = impl
    return config


def _cache_with(past: int, key: torch.Tensor):
    """A ``DynamicCache`` whose layer 0 has seen ``past`` tokens (tiny placeholder tensors), or None."""
    if past == 0:
        return None
    from transformers import DynamicCache

    cache = DynamicCache()
    placeholder = torch.zeros(key.shape[0], 1, past, 1, dtype=key.dtype, device=key.device)
    cache.update(placeholder, placeholder, 0)
    return cache


def _embeds(batch: int, seq_len: int, query: torch.Tensor) -> torch.Tensor:
    """Inputs embeddings as the mask utilities read them: only their batch, length, dtype and device."""
    return torch.empty(batch, seq_len, 0, dtype=query.dtype, device=query.device)


def _custom_4d_mask(impl: str, inputs: AttentionInputs) -> torch.Tensor:
    """The suite's mask as a custom 4D mask in the form ``impl`` adds or selects with."""
    mask, query = inputs.mask, inputs.query
    batch, _, seq_len_q, _ = query.shape
    seq_len_kv = inputs.key.shape[2]
    if impl == "sdpa":
        return mask.sdpa_mask if mask.additive is not None else mask.allowed
    minimum = torch.finfo(query.dtype).min  # what transformers' eager_mask writes at hidden keys
    heads = 1 if mask.additive is None else mask.additive.shape[1]
    bias = torch.zeros(batch, heads, seq_len_q, seq_len_kv, dtype=query.dtype, device=query.device)
    if mask.additive is not None:
        bias = bias + mask.additive
    if mask.masked_out is not None:
        bias = bias.masked_fill(mask.masked_out, minimum)
    if impl == "flex_attention" and heads > 1:
        raise CaseUnsupported(
            "transformers' flex_attention_forward reads a tensor mask at head 0 (score_mask[b][0][q][kv]), "
            "so a per-head bias ([1, num_heads, Sq, Skv]) is not applied to the other heads (a limitation of transformers)"
        )
    return bias


def model_call(impl: str, inputs: AttentionInputs) -> ModelCall:
    """The module and mask a transformers model would hand ``impl`` on ``inputs`` (see the module docstring).

    Raises:
        CaseUnsupported: transformers is missing, or no model makes this case (the reason says which).
    """
    missing = load()
    if missing:
        raise CaseUnsupported(missing)
    from transformers import BertConfig, LlamaConfig, MistralConfig
    from transformers.masking_utils import (
        create_bidirectional_mask,
        create_causal_mask,
        create_sliding_window_causal_mask,
    )
    from transformers.models.bert import modeling_bert
    from transformers.models.llama import modeling_llama
    from transformers.models.mistral import modeling_mistral

    query, key, mask = inputs.query, inputs.key, inputs.mask
    batch, num_heads, seq_len_q, head_dim = query.shape
    num_kv_heads, seq_len_kv = key.shape[1], key.shape[2]
    kind = mask_kind(mask.kind)
    decoder = {"num_key_value_heads": num_kv_heads, "head_dim": head_dim}
    custom = mask.additive is not None or kind.name == "bool"
    if custom:  # a custom 4D mask, which transformers passes through to the attention function
        config = _config(LlamaConfig, impl, query, key, **decoder)
        with torch.device("meta"):
            module = modeling_llama.LlamaAttention(config, layer_idx=0)
        return ModelCall(
            module.eval(),
            _custom_4d_mask(impl, inputs),
            {},
            modeling_llama.eager_attention_forward,
            "LlamaAttention (custom 4D mask)",
        )
    if kind.causal:
        if seq_len_q > seq_len_kv:
            raise CaseUnsupported(
                f"seq_len_q={seq_len_q} > seq_len_kv={seq_len_kv} with a causal mask: a transformers "
                "decoder always has at least as many keys as queries (its cache holds the queries too)"
            )
        if not kind.bottom_right and seq_len_q != seq_len_kv:
            raise CaseUnsupported(
                "top-left causal with seq_len_q != seq_len_kv: transformers aligns causal masks "
                "bottom-right (the queries are the newest cache positions); run causal_br for decode"
            )
        cache = _cache_with(seq_len_kv - seq_len_q, key)
        embeds = _embeds(batch, seq_len_q, query)
        if kind.window is None:
            config = _config(LlamaConfig, impl, query, key, **decoder)
            with torch.device("meta"):
                module = modeling_llama.LlamaAttention(config, layer_idx=0)
            built = create_causal_mask(config, embeds, None, cache)
            return ModelCall(
                module.eval(), built, {}, modeling_llama.eager_attention_forward, "LlamaAttention"
            )
        config = _config(MistralConfig, impl, query, key, sliding_window=kind.window, **decoder)
        with torch.device("meta"):
            module = modeling_mistral.MistralAttention(config, layer_idx=0)
        built = create_sliding_window_causal_mask(config, embeds, None, cache)
        return ModelCall(
            module.eval(),
            built,
            {"sliding_window": kind.window},
            modeling_mistral.eager_attention_forward,
            "MistralAttention",
        )
    if num_kv_heads != num_heads:
        raise CaseUnsupported(
            f"{kind.name} runs as a BERT-class encoder, whose attention has one kv head per query head; "
            f"this case has {num_heads} query heads and {num_kv_heads} kv heads"
        )
    config = _config(BertConfig, impl, query, key)
    with torch.device("meta"):
        module = modeling_bert.BertSelfAttention(config, is_causal=False, layer_idx=0)
    padding = (
        None if mask.allowed is None else mask.allowed.reshape(-1, seq_len_kv)
    )  # [B, Skv]: padding is per row
    if padding is not None and padding.shape[0] != batch:
        raise CaseUnsupported(f"mask {kind.name} is not a per-batch-row key padding mask")
    encoder_states = None if seq_len_q == seq_len_kv else _embeds(batch, seq_len_kv, query)
    built = create_bidirectional_mask(
        config, _embeds(batch, seq_len_q, query), padding, encoder_hidden_states=encoder_states
    )
    return ModelCall(
        module.eval(), built, {}, modeling_bert.eager_attention_forward, "BertSelfAttention"
    )


def attention_function(impl: str, call: ModelCall) -> Callable:
    """The function a model dispatches to for ``impl``: its own eager function, or the registry's entry."""
    if impl == "eager":
        return call.eager
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    return ALL_ATTENTION_FUNCTIONS.get_interface(impl, call.eager)


def _needs_cuda(impl: str, query: torch.Tensor) -> None:
    if impl.startswith("flash_attention") and query.device.type != "cuda":
        raise CaseUnsupported(
            f"transformers' {impl} calls the flash-attn kernels, which run on CUDA only "
            f"(this case is on {query.device.type})"
        )


# impl -> why its kernels failed to import in this process. transformers loads a flash_attention_*
# kernel package (flash-attn, flash_attn_interface, or the `kernels` hub package) at the first call;
# seen on an H200 with transformers 5.17: that call raises ImportError and every later call of the same
# implementation a TypeError ("the first argument must be callable"), so the first failure is kept.
_KERNELS_NOT_LOADED: dict[str, str] = {}


def _kernels_not_loaded(impl: str, error: ImportError) -> str:
    """The skip reason for ``impl`` whose kernel package failed to import with ``error``."""
    first_line = str(error).splitlines()[0] if str(error) else ""
    return (
        f"transformers' {impl} could not load its kernels ({type(error).__name__}: {first_line}); "
        "install the package transformers names (flash-attn for flash_attention_2 and _4, "
        "flash-attn 3's flash_attn_interface for _3, or the `kernels` package)"
    )


def _flex_backward_unsupported(impl: str, query: torch.Tensor) -> str | None:
    """Why ``hf_flex_attention`` has no backward here (CPU), or None.

    torch has no flex_attention backward on the CPU. transformers compiles one flex_attention for the
    whole process (``WrappedFlexAttention``); a backward that fails while Dynamo traces flex_attention
    leaves every later call of it on the unfused eager path (docs/explanation/model-implementations.md, finding 1), so the variant refuses
    the backward before calling it.
    """
    if impl == "flex_attention" and query.device.type == "cpu":
        return (
            f"flex_attention has no backward on cpu in torch {torch.__version__} ('FlexAttention does not support "
            "backward on CPU'); refused before the call: a failed trace would leave transformers' one shared "
            "compiled flex_attention unfused for the rest of the process"
        )
    return None


def prepare_for(impl: str) -> Callable[[AttentionInputs], VariantFn]:
    """``prepare`` of ``hf_<impl>``: module and mask built once per case, then only the attention call is timed."""

    def prepare(inputs: AttentionInputs) -> VariantFn:
        missing = load()
        if missing:
            raise CaseUnsupported(missing)
        _needs_cuda(impl, inputs.query)
        if impl in _KERNELS_NOT_LOADED:
            raise CaseUnsupported(_KERNELS_NOT_LOADED[impl])
        call = model_call(impl, inputs)
        function = attention_function(impl, call)
        no_backward = _flex_backward_unsupported(impl, inputs.query)

        def attention(query, key, value, *, mask, scale):
            if impl in _KERNELS_NOT_LOADED:  # failed in another mode's call, after this prepare
                raise CaseUnsupported(_KERNELS_NOT_LOADED[impl])
            if (
                no_backward
                and torch.is_grad_enabled()
                and any(t.requires_grad for t in (query, key, value))
            ):
                raise CaseUnsupported(no_backward)
            try:
                output, _ = function(
                    call.module,
                    query,
                    key,
                    value,
                    call.attention_mask,
                    dropout=0.0,
                    scaling=scale,
                    **call.kwargs,
                )
            except ImportError as error:  # a flash_attention_* kernel package (see above)
                _KERNELS_NOT_LOADED[impl] = _kernels_not_loaded(impl, error)
                raise CaseUnsupported(_KERNELS_NOT_LOADED[impl]) from error
            return output.transpose(1, 2)  # [B, Sq, H, D] -> [B, H, Sq, D], a view

        return attention

    return prepare


def _direct(impl: str) -> VariantFn:
    return prepared_on_every_call(
        prepare_for(impl),
        f"transformers' {impl} attention; called directly it builds module and mask on every call.",
    )


# What each implementation is declared to do (asserted by the suite):
# eager: a plain softmax over scores + mask; hidden keys get finfo(dtype).min, not -inf, so a query
#   that sees no key gets a finite row (the mean of the values); softmax saves the scores for backward.
# sdpa: torch's SDPA with the mask transformers built; what it saves depends on torch's dispatch.
# flex_attention: torch.compile(flex_attention) inside transformers (a compiled, fused kernel).
_DECLARATIONS: dict[str, dict] = {
    # finfo(dtype).min hides keys: finite rows in fp32/bf16, but in fp16 min plus a negative score
    # rounds to -inf, and a row that sees no key is NaN (found by the property tests)
    "eager": {"fully_masked_rows": "any", "saves_scores_for_backward": True},
    "sdpa": {},
    "flex_attention": {"compiled": True, "fused": True, "saves_scores_for_backward": False},
}
_DESCRIPTIONS = {
    "eager": "transformers eager_attention_forward (the model file's), mask from masking_utils",
    "sdpa": "transformers sdpa_attention_forward (F.scaled_dot_product_attention), mask from masking_utils",
    "flex_attention": "transformers flex_attention_forward (its own torch.compile(flex_attention)), BlockMask from masking_utils",
}


for _impl in IMPLEMENTATIONS:
    register_variant(
        f"hf_{_impl}",
        _DESCRIPTIONS.get(_impl, f"transformers {_impl} attention function (CUDA only)"),
        prepare=prepare_for(_impl),
        wraps="transformers",
        preload=load,
        # the flash_attention_* functions call the flash-attn kernels (``_needs_cuda``)
        devices=("cuda",) if _impl.startswith("flash_attention") else None,
        **_DECLARATIONS.get(_impl, {}),
    )(_direct(_impl))
