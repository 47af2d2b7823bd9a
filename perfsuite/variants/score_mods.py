"""Built-ins for the score modifications (ALiBi, softcap, sinks, query positions), with torch's own APIs.

* ``naive_mods``: the post's naive attention with each modification written op by op, so the
  structural columns show the score-sized writes each adds: the softcap's divide, ``tanh`` and
  multiply; the ALiBi bias materialized as a ``[batch, num_heads, seq_len_q, seq_len_kv]`` tensor
  and its add; the sink's subtract, ``exp`` and divide in place of ``softmax``.
* ``sdpa_alibi``: ``F.scaled_dot_product_attention`` with the ALiBi bias (and the mask) as an
  explicit float ``attn_mask``, built on every call as a model does; SDPA has no place for a softcap
  or a sink, so those cases are not generated for it, with the reason.
* ``flex_mods_eager`` / ``flex_mods_compiled``: ``flex_attention`` with a ``score_mod`` (softcap, then
  ALiBi, then an additive mask) and a block mask from the query positions; sinks through the
  log-sum-exp flex returns: ``out * sigmoid(lse - sink)`` is the softmax with the sink in its
  denominator (``sum_j e^s_j / (sum_j e^s_j + e^sink)``). Adding the sink as a score of every key
  (a ``score_mod``) would be shift-invariant and change nothing. On the CPU, torch 2.13 has no flex
  backward, and compiled flex runs for inference only and without the log-sum-exp, so
  ``flex_mods_compiled`` skips sinks there with that reason.

Each is generated only on cases with score modifications (``needs_a_form``); the plain built-ins
cover the rest. The formulas and their order are stated once, in ``perfsuite.attention.score_mods``.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

try:
    from torch.nn.attention.flex_attention import AuxRequest
except ImportError:  # torch before AuxRequest: return_lse
    AuxRequest = None

from perfsuite.attention.contract import Form
from perfsuite.attention.inputs import AttentionInputs
from perfsuite.attention.masks import mask_kind
from perfsuite.attention.score_mods import alibi_bias
from perfsuite.variants.compiled import compile_for_case
from perfsuite.variants.flex import _EAGER_WARNING, block_mask_for, call_flex, score_mod_for
from perfsuite.variants.naive import expand_kv_heads
from perfsuite.variants.registry import VariantFn, register_variant
from perfsuite.variants.sdpa import SDPA_REFUSES
from perfsuite.variants.unsupported import CaseUnsupported

FLEX_CPU_BACKWARD = "torch has no flex_attention backward on the CPU (FlexAttention does not support backward on CPU)"


@register_variant(
    "naive_mods",
    "naive with the score modifications op by op: softcap, materialized ALiBi bias, sink softmax",
    copies_scores_when_masked=True,
    fully_masked_rows="nan",
    saves_scores_for_backward=True,
    needs_a_form=True,
)
def naive_mods_attention(
    query,
    key,
    value,
    *,
    mask,
    scale,
    alibi_slopes=None,
    query_positions=None,
    softcap=None,
    sinks=None,
):
    """Attention written op by op with softcap, ALiBi and sinks (``perfsuite.attention.score_mods``).

    ``alibi_slopes``/``sinks``: float32 ``[num_heads]``; ``query_positions``: int64 ``[batch, seq_len_q]``;
    ``softcap``: float. Each is None when the case does not carry it.
    """
    key, value = expand_kv_heads(key, query.shape[1]), expand_kv_heads(value, query.shape[1])
    scores = torch.matmul(query, key.transpose(-2, -1))
    scores = scores * scale
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if alibi_slopes is not None:
        scores = scores + alibi_bias(alibi_slopes, query_positions, key.shape[2], scores.dtype)
    if mask.additive is not None:
        scores = scores + mask.additive
    if mask.masked_out is not None:
        scores = scores.masked_fill(mask.masked_out, float("-inf"))
    if sinks is None:
        weights = torch.softmax(scores, dim=-1)
    else:
        sink = sinks.to(scores.dtype)[None, :, None, None]
        row_max = torch.maximum(scores.amax(dim=-1, keepdim=True), sink)
        exp = torch.exp(scores - row_max)
        weights = exp / (exp.sum(dim=-1, keepdim=True) + torch.exp(sink - row_max))
    return torch.matmul(weights, value)


@register_variant(
    "sdpa_alibi",
    "SDPA with the ALiBi bias and the mask as one float attn_mask, built on every call",
    forms_refused={f: w for f, w in SDPA_REFUSES.items() if f != Form.ALIBI},
    needs_a_form=True,
)
def sdpa_alibi_attention(
    query, key, value, *, mask, scale, alibi_slopes=None, query_positions=None
):
    """SDPA (torch picks the backend) with ``-alibi_slopes[h] * (query_positions[b, i] - j)`` plus the
    mask as a float ``attn_mask`` ``[batch, num_heads, seq_len_q, seq_len_kv]``, ``-inf`` at hidden keys."""
    if alibi_slopes is None:
        attn_mask, is_causal = mask.sdpa_mask, mask.is_causal
    else:
        attn_mask = alibi_bias(alibi_slopes, query_positions, key.shape[2], query.dtype)
        if mask.additive is not None:
            attn_mask = attn_mask + mask.additive
        if mask.masked_out is not None:
            attn_mask.masked_fill_(mask.masked_out, float("-inf"))  # a fresh tensor: no copy
        is_causal = False
    return F.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attn_mask,
        is_causal=is_causal,
        scale=scale,
        enable_gqa=key.shape[1] != query.shape[1],
    )


def flex_score_mod(inputs: AttentionInputs):
    """The flex ``score_mod`` of the case: softcap, then ALiBi, then an additive mask (the order of
    ``perfsuite.attention.score_mods``), or None when the case has none of them."""
    forms = inputs.forms
    cap = forms.get("softcap")
    slopes = forms.get("alibi_slopes")
    positions = forms.get("query_positions")
    additive = score_mod_for(inputs.mask)
    if cap is None and slopes is None and additive is None:
        return None
    if slopes is not None:
        slopes = slopes.to(torch.float32)

    def score_mod(score, b, h, q_idx, kv_idx):
        if cap is not None:
            score = torch.tanh(score / cap) * cap
        if slopes is not None:
            score = score - slopes[h] * (positions[b, q_idx] - kv_idx)
        if additive is not None:
            score = additive(score, b, h, q_idx, kv_idx)
        return score

    return score_mod


def flex_block_mask(inputs: AttentionInputs):
    """The block mask: causal kinds by the query positions (``query_positions[0, 0]`` is the key
    position of query 0, the same for every batch row), other kinds as ``flex_attention`` builds them."""
    kind = mask_kind(inputs.mask.kind)
    positions = inputs.forms.get("query_positions")
    if not kind.causal or positions is None:
        return block_mask_for(inputs.mask, inputs.query, inputs.key)
    batch, _, seq_len_q, _ = inputs.query.shape
    seq_len_kv = inputs.key.shape[2]
    offset = int(positions[0, 0])
    return create_block_mask(
        lambda b, h, q_idx, kv_idx: kind.sees(q_idx, kv_idx, seq_len_q, seq_len_kv, offset),
        None,
        None,
        seq_len_q,
        seq_len_kv,
        device=inputs.query.device,
    )


def flex_with_lse(query, key, value, **options):
    """``flex_attention``'s output and log-sum-exp ``[B, H, Sq]``: through ``return_aux=AuxRequest(lse=True)``
    where torch has it (``return_lse`` is deprecated there), else ``return_lse=True``."""
    if AuxRequest is None:
        return flex_attention(query, key, value, return_lse=True, **options)
    output, aux = flex_attention(query, key, value, return_aux=AuxRequest(lse=True), **options)
    return output, aux.lse


def call_flex_mods(query, key, value, block_mask, score_mod, scale, sinks):
    """flex_attention with the score_mod and block mask; with ``sinks`` ``[num_heads]``, the output
    times ``sigmoid(lse - sink)``: the sink joins the softmax denominator."""
    gqa = key.shape[1] != query.shape[1]
    if sinks is None:
        return call_flex(query, key, value, block_mask, score_mod, scale)
    output, lse = flex_with_lse(
        query, key, value, score_mod=score_mod, block_mask=block_mask, scale=scale, enable_gqa=gqa
    )
    exact = torch.promote_types(query.dtype, torch.float32)  # the lse is float32 for 16-bit inputs
    kept = torch.sigmoid(lse.to(exact) - sinks.to(exact)[None, :, None])
    return (output.to(exact) * kept.unsqueeze(-1)).to(query.dtype)


def _for_case(inputs: AttentionInputs, flex_call) -> VariantFn:
    block_mask = flex_block_mask(inputs)
    score_mod = flex_score_mod(inputs)
    sinks = inputs.forms.get("sinks")

    def attention(query, key, value, *, mask, scale, **forms):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_EAGER_WARNING)
            return flex_call(query, key, value, block_mask, score_mod, scale, sinks)

    return attention


def prepare_flex_mods_eager(inputs: AttentionInputs) -> VariantFn:
    """Block mask, score_mod and sinks of this case, built once; eager (unfused) flex_attention."""
    return _for_case(inputs, call_flex_mods)


def prepare_flex_mods_compiled(inputs: AttentionInputs) -> VariantFn:
    """Block mask, score_mod and sinks of this case, built once; flex_attention and the sink
    correction compiled for it (``compile_for_case``).

    Raises ``CaseUnsupported`` for sinks on the CPU: compiled flex there returns no log-sum-exp
    (torch 2.13: "torch.compile on CPU only supports inference and `return_lse` is not supported yet").
    """
    if "sinks" in inputs.forms and inputs.query.device.type == "cpu":
        raise CaseUnsupported(
            "sinks need flex_attention's log-sum-exp, and torch.compile of flex_attention on the CPU "
            "does not return it (torch: 'return_lse is not supported yet' on CPU); flex_mods_eager "
            "runs this case"
        )
    return _for_case(inputs, compile_for_case(call_flex_mods))


def _direct(prepare):
    def attention(
        query,
        key,
        value,
        *,
        mask,
        scale,
        alibi_slopes=None,
        query_positions=None,
        softcap=None,
        sinks=None,
    ):
        given = {
            "alibi_slopes": alibi_slopes,
            "query_positions": query_positions,
            "softcap": softcap,
            "sinks": sinks,
        }
        forms = {k: v for k, v in given.items() if v is not None}
        inputs = AttentionInputs(query, key, value, mask, scale, forms)
        return prepare(inputs)(query, key, value, mask=mask, scale=scale)

    attention.__doc__ = f"Called directly, runs ``{prepare.__name__}`` on every call; the suite prepares once per case."
    return attention


register_variant(
    "flex_mods_eager",
    "flex_attention with a score_mod (softcap, ALiBi) and sinks via its log-sum-exp, unfused",
    prepare=prepare_flex_mods_eager,
    forward_only={"cpu": FLEX_CPU_BACKWARD},
    needs_a_form=True,
)(_direct(prepare_flex_mods_eager))

register_variant(
    "flex_mods_compiled",
    "flex_attention with a score_mod and sinks under torch.compile: one fused kernel",
    prepare=prepare_flex_mods_compiled,
    compiled=True,
    saves_scores_for_backward=False,
    fused=True,
    forward_only={"cpu": FLEX_CPU_BACKWARD},
    needs_a_form=True,
)(_direct(prepare_flex_mods_compiled))
