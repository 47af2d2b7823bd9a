"""The float64 oracle every variant is held to, and its tolerances.

A variant's output must satisfy ``|actual - expected| <= atol + rtol * |expected|``
(``torch.testing.assert_close``) against the float64 reference, where

    atol = max(floor_atol[dtype], 2 * max |plain_in_dtype - expected|)

``plain_in_dtype`` is the same attention computed op by op in the case's own dtype (the
rule of FlashAttention's tests: a kernel may be at most twice as far from the exact answer
as a straightforward PyTorch implementation in that precision). The derived term grows
where the inputs make low precision hard (large logits from a big ``scale``, long rows);
the floor covers cases where the plain computation happens to be nearly exact. Floors are
set from each dtype's unit roundoff ``u`` (``torch.finfo(dtype).eps / 2``): the output is a
convex combination of value rows, O(1) for standard-normal inputs, and a low-precision
kernel rounds weights and output to the dtype (a few ``u`` each).

| dtype | u        | floor atol | rtol  |
|-------|----------|------------|-------|
| fp64  | 1.1e-16  | 1e-10      | 1e-10 |
| fp32  | 6.0e-8   | 2e-5       | 2e-5  |
| fp16  | 4.9e-4   | 8e-3       | 8e-3  |
| bf16  | 3.9e-3   | 5e-2       | 5e-2  |

Measured on CPU with seed 0 over shapes up to 1x8x1024x64: largest errors fp32 1.1e-6,
fp16 1.6e-3, bf16 1.25e-2, so the floors leave a 4x or larger margin there.

**Score modifications** (``perfsuite.attention.score_mods``: ALiBi, softcap, sinks, query
positions) are part of both computations, applied in one order: scale, softcap, bias (ALiBi, then
an additive mask), mask, sink, softmax (the formulas and their sources are in that module). With a
softcap the factor is 3, not 2 (``ERROR_FACTORS``): ``tanh`` in low precision adds its own
rounding, and FlashAttention's tests allow the same (``rtol = 2 if softcap == 0.0 else 3`` in
``hopper/test_flash_attn.py`` of Dao-AILab/flash-attention).

The reference is computed in blocks of query rows (softmax is per row, so this is exact), each
block's ``[B, H, rows, Skv]`` float64 scores at most ``REFERENCE_BLOCK_BYTES``: a long case on a
GPU needs a few score blocks of memory, not several full float64 score matrices.
"""

from __future__ import annotations

import dataclasses
import math
import enum
from collections.abc import Callable

import torch

from perfsuite.attention.inputs import AttentionInputs
from perfsuite.attention.masks import window_allowed, window_size
from perfsuite.attention.score_mods import alibi_bias, describe_at

# Bytes of one block of scores of the reference (float64: 16 Mi elements). The softmax and the
# masking make about three temporaries of this size, so a block needs ~0.5 GiB at most.
REFERENCE_BLOCK_BYTES = 128 * 2**20

# How many times the plain computation's error a variant may make (module docstring): 2 as
# FlashAttention's tests, 3 with a softcap as theirs.
ERROR_FACTORS = {"plain": 2.0, "softcap": 3.0}

TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-10, 1e-10),
    torch.float32: (2e-5, 2e-5),
    torch.float16: (8e-3, 8e-3),
    torch.bfloat16: (5e-2, 5e-2),
}


@dataclasses.dataclass(frozen=True)
class Comparison:
    """Outcome of comparing one output with the reference.

    ``max_abs_error``: largest ``|actual - expected|`` (inf when non-finite values exist);
    ``failure``: None when within tolerance, else a message naming the worst element.
    """

    max_abs_error: float
    failure: str | None


def reference_attention(
    inputs: AttentionInputs,
    dtype: torch.dtype = torch.float64,
    block_bytes: int = REFERENCE_BLOCK_BYTES,
    *,
    hidden_score: float = float("-inf"),
    sink_in_numerator: SinkInNumerator | None = None,
    softcap_after_mask: bool = False,
) -> torch.Tensor:
    """Attention in float64 from the same inputs, ``[batch, num_heads, seq_len_q, head_dim]``.

    ``softmax(q @ k^T * scale + additive, hidden keys at -inf) @ v``, key/value heads
    repeated for grouped-query attention (``repeat_interleave``, as SDPA's ``enable_gqa``), with
    the case's score modifications (``inputs.forms``) in this order: scale, softcap
    (``softcap * tanh(s / softcap)``), bias (ALiBi ``-alibi_slopes[h] * (query_positions[b, i] - j)``,
    then the additive mask), mask (hidden keys at ``-inf``), sink (``sinks[h]`` joins the softmax
    denominator: softmax over the scores and the sink, the sink's column dropped), softmax.
    **A query that sees no key returns zeros**: that is SDPA's behaviour (its
    ``_safe_softmax``, and every CPU backend measured), and the only finite answer. Variants
    registered with ``fully_masked_rows="nan"`` (a plain softmax of ``-inf`` everywhere) are
    held to NaN in exactly those rows instead (see ``compare_with_reference``).
    Computed in blocks of query rows of at most ``block_bytes`` of scores (``query_blocks``).
    ``hidden_score``: the score hidden keys get (``-inf``); a finite value computes what a mistaken
    variant computes (a mask constant such as ``-1e4``, or ``-softcap``: the softcap applied after
    the mask), for the failure messages that name such a mistake. ``sink_in_numerator``: with sinks, the
    output of that mistake (``SINK_NUMERATOR_MISTAKES``); None, the sink's column dropped, as it should be.
    ``softcap_after_mask``: the output of a softcap applied last, after the bias and the mask (hidden keys
    score ``softcap * tanh(-inf) = -softcap``, a bias is capped with the scores), for the message that
    names that mistake; False, the order above.
    """
    q, k, v = (t.to(dtype) for t in (inputs.query, inputs.key, inputs.value))
    blocks = [
        _attention(
            inputs,
            q[:, :, start:end],
            k,
            v,
            start,
            end,
            hidden_score,
            sink_in_numerator,
            softcap_after_mask,
        )
        for start, end in query_blocks(inputs, dtype, block_bytes)
    ]
    return blocks[0] if len(blocks) == 1 else torch.cat(blocks, dim=2)


def query_blocks(
    inputs: AttentionInputs,
    dtype: torch.dtype = torch.float64,
    block_bytes: int = REFERENCE_BLOCK_BYTES,
) -> list[tuple[int, int]]:
    """``(start, end)`` query-row ranges whose ``[B, H, rows, Skv]`` scores in ``dtype`` take at
    most ``block_bytes`` (at least one row each). Raises ``ValueError`` for ``block_bytes < 1``."""
    if block_bytes < 1:
        raise ValueError(f"block_bytes must be positive, got {block_bytes}")
    batch, heads, seq_len_q, _ = inputs.query.shape
    row_bytes = batch * heads * inputs.key.shape[2] * torch.empty((), dtype=dtype).element_size()
    rows = max(1, block_bytes // max(row_bytes, 1))
    return [(start, min(start + rows, seq_len_q)) for start in range(0, max(seq_len_q, 1), rows)]


def _query_rows(tensor: torch.Tensor, start: int, end: int) -> torch.Tensor:
    """Rows ``start:end`` of a mask or bias broadcast over ``[..., Sq, Skv]`` (size-1 query dims kept)."""
    return tensor if tensor.dim() < 2 or tensor.shape[-2] == 1 else tensor[..., start:end, :]


def _attention(
    inputs: AttentionInputs,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    start: int = 0,
    end: int | None = None,
    hidden_score: float = float("-inf"),
    sink_in_numerator: SinkInNumerator | None = None,
    softcap_after_mask: bool = False,
) -> torch.Tensor:
    """Attention of query rows ``start:end`` (``q`` holds only those rows) over all keys, hidden keys'
    scores set to ``hidden_score``; ``sink_in_numerator``, ``softcap_after_mask``: see
    ``reference_attention``."""
    end = q.shape[2] + start if end is None else end
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    scores = torch.matmul(q, k.transpose(-2, -1)) * inputs.scale
    forms, mask = inputs.forms, inputs.mask
    cap_last = softcap_after_mask and "softcap" in forms
    if "softcap" in forms and not cap_last:
        scores = torch.tanh(scores / forms["softcap"]) * forms["softcap"]
    if "alibi_slopes" in forms:
        positions = forms["query_positions"][:, start:end].to(q.device)
        scores = scores + alibi_bias(forms["alibi_slopes"], positions, k.shape[2], q.dtype)
    if mask.additive is not None:
        scores = scores + _query_rows(mask.additive, start, end).to(q.dtype)
    if mask.masked_out is not None:
        scores = scores.masked_fill(_query_rows(mask.masked_out, start, end), hidden_score)
    if cap_last:  # tanh(-inf) = -1: a hidden key scores -softcap
        scores = torch.tanh(scores / forms["softcap"]) * forms["softcap"]
    if "sinks" in forms:
        sink = forms["sinks"].to(device=q.device, dtype=q.dtype)[None, :, None, None]
        visible = (scores > float("-inf")).to(q.dtype)
        scores = torch.cat([scores, sink.expand(*scores.shape[:-1], 1)], dim=-1)
        weights = torch.softmax(scores, dim=-1)
        weights, sink_weight = weights[..., :-1], weights[..., -1:]
        # a mistake's output: the sink's share in each key's weight
        if sink_in_numerator is not None:
            weights = weights + sink_weight * sink_in_numerator.shares(visible)
            if sink_in_numerator.in_sum:
                weights = weights / (weights.sum(-1, keepdim=True) + sink_weight)
    else:
        weights = torch.softmax(scores, dim=-1).nan_to_num(nan=0.0)  # all -inf rows -> zeros
    return torch.matmul(weights, v)


# The share of exp(sink) a sink put in the numerator adds to each key's weight (``reference_attention``'s
# ``sink_in_numerator``): visible keys ``[B, H, rows, Skv]`` (1.0 where seen, else 0.0) -> shares
# broadcastable to them.
SinkShares = Callable[[torch.Tensor], torch.Tensor]


@dataclasses.dataclass(frozen=True)
class SinkInNumerator:
    """A sink put in the numerator: each key's weight ``exp(s_j)`` gets ``shares(visible)[j] * exp(sink)``
    added; ``in_sum``: the weights are then normalized by their own sum plus ``exp(sink)`` (the added
    terms counted twice), else by the softmax's denominator. ``what``: how a message says it."""

    shares: SinkShares
    in_sum: bool
    what: str


def _sink_numerator_mistakes() -> tuple[SinkInNumerator, ...]:
    shares = (
        (lambda seen: 1.0 / seen.shape[-1], "exp(sink) / n added to each of the n keys' weights"),
        (
            lambda seen: seen / seen.sum(-1, keepdim=True).clamp(min=1.0),
            "exp(sink) shared among the visible keys' weights",
        ),
        (lambda seen: torch.ones_like(seen), "exp(sink) added to every key's weight"),
        (lambda seen: seen, "exp(sink) added to every visible key's weight"),
    )
    return tuple(
        SinkInNumerator(
            share,
            in_sum,
            what + (", the weights then divided by their sum plus exp(sink)" if in_sum else ""),
        )
        for share, what in shares
        for in_sum in (True, False)
    )


SINK_NUMERATOR_MISTAKES = _sink_numerator_mistakes()


GRADIENT_NAMES = ("grad_query", "grad_key", "grad_value")


def reference_gradients(
    inputs: AttentionInputs,
    grad_output: torch.Tensor,
    dtype: torch.dtype = torch.float64,
    block_bytes: int = REFERENCE_BLOCK_BYTES,
) -> tuple[torch.Tensor, ...]:
    """Gradients of ``reference_attention`` with respect to query, key and value for ``grad_output``.

    Shapes are those of query ``[B, H, Sq, D]`` and key/value ``[B, Hkv, Skv, D]``. A query that
    sees no key gets zero gradients (every score of its row is masked out, so ``masked_fill``'s
    backward zeroes them). Computed per block of query rows (``query_blocks``), the key and
    value gradients summed over blocks.
    """
    leaves = tuple(
        t.detach().to(dtype).requires_grad_(True) for t in (inputs.query, inputs.key, inputs.value)
    )
    grad_output = grad_output.to(dtype)
    totals: list[torch.Tensor] | None = None
    for start, end in query_blocks(
        inputs, dtype, block_bytes
    ):  # per block of query rows; key/value gradients summed
        with torch.enable_grad():
            output = _attention(
                inputs, leaves[0][:, :, start:end], leaves[1], leaves[2], start, end
            )
            grads = torch.autograd.grad(output, leaves, grad_output[:, :, start:end])
        totals = list(grads) if totals is None else [t + g for t, g in zip(totals, grads)]
    return tuple(totals)


def compare_gradients(
    actual: tuple[torch.Tensor, ...], inputs: AttentionInputs, grad_output: torch.Tensor, label: str
) -> Comparison:
    """Compare ``(grad_query, grad_key, grad_value)`` with the float64 reference's.

    Each gradient gets the output's tolerance rule: ``atol = max(floor, 2 * error of the plain
    computation in the inputs' dtype)``, the plain gradients computed by autograd in that dtype.
    Returns the first failure (naming the gradient) and the largest error over the three.
    """
    expected = reference_gradients(inputs, grad_output)
    plain = reference_gradients(inputs, grad_output, inputs.query.dtype)
    floor_atol, rtol = TOLERANCES[inputs.query.dtype]
    factor = error_factor(inputs)
    worst = 0.0
    for name, got, want, low in zip(GRADIENT_NAMES, actual, expected, plain):
        plain_error = float((low.to(torch.float64) - want).abs().max()) if want.numel() else 0.0
        tolerance = (max(floor_atol, factor * plain_error), rtol)
        found = compare_with_reference(got, want, f"{name} of {label}", tolerance=tolerance)
        if found.failure:
            return found
        worst = max(worst, found.max_abs_error)
    return Comparison(worst, None)


def error_factor(inputs: AttentionInputs) -> float:
    """How many times the plain computation's error a variant may make: ``ERROR_FACTORS``
    (3 with a softcap, else 2; module docstring)."""
    return ERROR_FACTORS["softcap" if "softcap" in inputs.forms else "plain"]


def tolerances(inputs: AttentionInputs, expected: torch.Tensor) -> tuple[float, float]:
    """``(atol, rtol)`` for outputs of ``inputs``' dtype against ``expected`` (see module docstring)."""
    dtype = inputs.query.dtype
    floor_atol, rtol = TOLERANCES[dtype]
    plain = reference_attention(inputs, dtype).to(torch.float64)
    plain_error = (
        float((plain - expected).abs().nan_to_num(nan=0.0).max()) if plain.numel() else 0.0
    )
    return max(floor_atol, error_factor(inputs) * plain_error), rtol


# how each line that names a mistake the output is confirmed to match begins (a rerun of the reference with it)
CONFIRMED = "the output matches the reference"
# A modification is named at the worst element when leaving it out moves that element by at least this share
# of the element's error (a softcap of 50 on small scores does not explain a window off by one there).
RELEVANT_SHARE = 0.25
# The modifications a failure is checked against one by one: keyword -> what leaving it out means.
_LEFT_OUT = {
    "alibi_slopes": "without the ALiBi bias",
    "softcap": "without the softcap",
    "sinks": "without the sinks",
}


def explain_modifications(
    inputs: AttentionInputs,
    actual: torch.Tensor,
    index: tuple[int, ...],
    tolerance: tuple[float, float],
) -> str:
    """For a failed comparison on a case with score modifications: which one the output matches the
    reference without, if any (``actual`` within ``tolerance`` of the reference computed with that
    modification left out), and whether it matches the softcap applied after the mask (``hidden_score``
    ``-softcap``); where one matches, or leaving one out moves the worst element ``index`` (``[batch,
    head, query, dim]``) by ``RELEVANT_SHARE`` of its error or more, what the modifications are there
    (the head's ALiBi slope and sink logit, the query's position, the cap). A failure they do not touch
    (a window off by one beside a softcap of 50) gets no line about them. Then which wrong softmax
    scale the output matches, if any (``_SCALE_MISTAKES``): a scale ignored, the default ``head_dim ** -0.5`` used in place of the case's, the scale applied twice."""
    batch, head, query = index[0], index[1], index[2]
    atol, rtol = tolerance
    actual64 = actual.detach().to(torch.float64)
    lines = (
        _window_mistakes(inputs, actual64, atol, rtol)
        + _head_mapping_mistakes(inputs, actual64, atol, rtol)
        + _scale_mistakes(inputs, actual64, atol, rtol)
    )
    if not inputs.forms:
        return "\n".join(lines)
    expected = reference_attention(inputs)
    error_there = float((actual64[index] - expected[index]).abs().nan_to_num(nan=math.inf))
    matched, relevant = [], False
    for keyword, what in _LEFT_OUT.items():
        if keyword not in inputs.forms:
            continue
        forms = {k: v for k, v in inputs.forms.items() if k != keyword}
        if keyword == "alibi_slopes" and "query_positions" in forms:
            forms.pop("query_positions")
        without = reference_attention(inputs.replace(forms=forms))
        if bool(torch.isclose(actual64, without, atol=atol, rtol=rtol, equal_nan=True).all()):
            matched.append(f"{CONFIRMED} {what}: is it applied?")
        # the modification moves the worst element by a part of its error: it is worth naming there
        relevant |= float((without[index] - expected[index]).abs()) >= RELEVANT_SHARE * error_there
    if "softcap" in inputs.forms and inputs.mask.masked_out is not None:
        cap = float(inputs.forms["softcap"])
        after = reference_attention(inputs, hidden_score=-cap)
        if bool(torch.isclose(actual64, after, atol=atol, rtol=rtol, equal_nan=True).all()):
            matched.append(
                f"{CONFIRMED} with the softcap applied after the mask: hidden keys "
                f"score softcap * tanh(-inf) = {-cap:g}, not -inf (a query that sees no key averages the "
                "values); apply the softcap before the mask"
            )
    if "sinks" in inputs.forms:
        matched += _sink_mistakes(inputs, actual64, atol, rtol)
    per_head = any(k in inputs.forms for k in ("alibi_slopes", "sinks"))  # a head-order mistake
    if matched or relevant or (per_head and not lines):
        # the modifications at the worst element, where they can be the mistake
        matched.insert(
            0,
            "score modifications at that element: " + describe_at(inputs.forms, head, query, batch),
        )
    return "\n".join(matched + lines)


def _sink_head_orders(heads: int, kv_heads: int) -> list[tuple[torch.Tensor, str]]:
    """Wrong head orders a per-head sink may be read in: ``(index, what)``, head h given
    ``sinks[index[h]]``: reversed, shifted by one head either way, and for grouped heads the group and
    key/value head swapped (head ``kv * groups + g`` given ``sinks[g * num_kv_heads + kv]``)."""
    order = torch.arange(heads)
    found = [
        (order.flip(0), f"in reversed head order (head h given sinks[{heads - 1} - h])"),
        (order.roll(1), "shifted by one head (head h given sinks[h - 1])"),
        (order.roll(-1), "shifted by one head (head h given sinks[h + 1])"),
    ]
    groups = heads // kv_heads if kv_heads and heads % kv_heads == 0 else 1
    if 1 < groups < heads:
        swapped = (order % groups) * kv_heads + order // groups
        found.append(
            (
                swapped,
                f"in grouped order swapped (head kv * {groups} + g given sinks[g * {kv_heads} + kv])",
            )
        )
    return found


def _sink_mistakes(
    inputs: AttentionInputs, actual64: torch.Tensor, atol: float, rtol: float
) -> list[str]:
    """For a case with sinks: ``the output matches the reference with the sink in the numerator`` when a
    rerun with the sink's exp added to the keys' weights (``SINK_NUMERATOR_MISTAKES``) gives the output
    (the first that does), and ``... with the sinks in reversed head order`` (``_sink_head_orders``)
    when the sinks read in a wrong head order do."""

    def matches(other: torch.Tensor) -> bool:
        return bool(torch.isclose(actual64, other, atol=atol, rtol=rtol, equal_nan=True).all())

    found = [
        f"{CONFIRMED} with the sink in the numerator ({mistake.what}): a sink belongs in the softmax's "
        "denominator only"
        for mistake in SINK_NUMERATOR_MISTAKES
        if matches(reference_attention(inputs, sink_in_numerator=mistake))
    ][:1]
    sinks = inputs.forms["sinks"]
    for index, what in _sink_head_orders(inputs.query.shape[1], inputs.key.shape[1]):
        moved = sinks[index.to(sinks.device)]
        if torch.equal(moved, sinks):
            continue
        if matches(reference_attention(inputs.replace(forms={**inputs.forms, "sinks": moved}))):
            found.append(
                f"{CONFIRMED} with the sinks {what}: is each head's sink logit indexed by its own head?"
            )
    return found


def _head_mapping_mistakes(
    inputs: AttentionInputs, actual64: torch.Tensor, atol: float, rtol: float
) -> list[str]:
    """For grouped-query heads (``num_kv_heads < num_heads``): ``the output matches the reference with
    query head h reading key/value head h % num_kv_heads`` when it does (``repeat`` where
    ``repeat_interleave``, SDPA's ``enable_gqa`` grouping, was meant)."""
    heads, kv_heads = inputs.query.shape[1], inputs.key.shape[1]
    if kv_heads >= heads or heads % kv_heads:
        return []
    groups = heads // kv_heads
    tiled = inputs.replace(
        key=inputs.key.repeat(1, groups, 1, 1), value=inputs.value.repeat(1, groups, 1, 1)
    )
    if not bool(
        torch.isclose(
            actual64, reference_attention(tiled), atol=atol, rtol=rtol, equal_nan=True
        ).all()
    ):
        return []
    return [
        f"{CONFIRMED} with query head h reading key/value head h % {kv_heads} (torch.repeat): grouped "
        f"heads read key/value head h // {groups} (repeat_interleave, as SDPA's enable_gqa)"
    ]


def _window_mistakes(
    inputs: AttentionInputs, actual64: torch.Tensor, atol: float, rtol: float
) -> list[str]:
    """``the output matches the reference with a window of W+1 keys`` (or ``W-1``) for a sliding-window
    case (``window<W>``, no query positions) whose output the reference with the window one key wider
    or narrower gives: a window's edge off by one."""
    window = window_size(inputs.mask.kind)
    if window is None or inputs.mask.masked_out is None or "query_positions" in inputs.forms:
        return []
    seq_len_q, seq_len_kv = inputs.query.shape[2], inputs.key.shape[2]
    device = str(inputs.mask.masked_out.device)
    found = []
    for other in (window + 1, window - 1):
        if other < 1:
            continue
        hidden = ~window_allowed(seq_len_q, seq_len_kv, other, device)
        moved = inputs.replace(mask=dataclasses.replace(inputs.mask, masked_out=hidden))
        if bool(
            torch.isclose(
                actual64, reference_attention(moved), atol=atol, rtol=rtol, equal_nan=True
            ).all()
        ):
            found.append(
                f"{CONFIRMED} with a window of {other} keys, not {window}: a query "
                f"i sees keys i-{window - 1} .. i (bottom-right); is the window's edge off by one?"
            )
    return found


# wrong softmax scales a failure is checked against: (scale the mistake uses, what it means)
_SCALE_MISTAKES = (
    (lambda scale, head_dim: 1.0, "with scale 1: is `scale` applied?"),
    (
        lambda scale, head_dim: head_dim**-0.5,
        "with the default scale head_dim ** -0.5, not the case's {scale:g}: is the `scale` passed used?",
    ),
    (lambda scale, head_dim: scale * scale, "with the scale applied twice"),
)


def _scale_mistakes(
    inputs: AttentionInputs, actual64: torch.Tensor, atol: float, rtol: float
) -> list[str]:
    """``the output matches the reference with ...`` for each wrong scale of ``_SCALE_MISTAKES`` it
    matches (one that equals the case's own scale is not tried)."""
    found = []
    for wrong, what in _SCALE_MISTAKES:
        scale = wrong(inputs.scale, inputs.query.shape[-1])
        if math.isclose(scale, inputs.scale, rel_tol=1e-9):
            continue
        other = reference_attention(inputs.replace(scale=scale))
        if bool(torch.isclose(actual64, other, atol=atol, rtol=rtol, equal_nan=True).all()):
            found.append(f"{CONFIRMED} " + what.format(scale=inputs.scale))
    return found


def _describe(index: tuple[int, ...], actual: torch.Tensor, expected: torch.Tensor) -> str:
    got, want = actual[index].item(), expected[index].item()
    return f"worst element at [batch, head, query, dim] = {list(index)}: got {got!r}, expected {want!r}"


def _check_nan_rows(actual64: torch.Tensor, rows: torch.Tensor, label: str) -> str | None:
    """For ``fully_masked_rows="nan"`` variants: fully masked rows must be NaN, and only they."""
    finite_rows = torch.isfinite(actual64).all(dim=-1)
    wrong = rows & finite_rows.cpu()
    if wrong.any():
        index = [int(i) for i in wrong.nonzero()[0]]
        return f"{label}: row [batch, head, query] = {index} sees no key and was expected to be NaN, got finite values"
    return None


class FullyMaskedRows(enum.StrEnum):
    """What a variant returns for a query row that sees no key (``Variant.fully_masked_rows``)."""

    ZEROS = "zeros"  # SDPA's _safe_softmax, the reference's
    NAN = "nan"  # a plain softmax over all -inf
    FINITE = "finite"  # some finite value (libraries that mask with a large negative number)
    ANY = "any"  # finite or not (a large negative mask value can overflow to -inf in fp16)


UNDEFINED_ROW_RESULTS = (
    FullyMaskedRows.FINITE,
    FullyMaskedRows.ANY,
)  # rows the reference does not define


def _check_finite_rows(actual64: torch.Tensor, rows: torch.Tensor, label: str) -> str | None:
    """For ``fully_masked_rows="finite"`` variants: rows that see no key must hold finite values (any)."""
    wrong = rows & ~torch.isfinite(actual64).all(dim=-1).cpu()
    if wrong.any():
        index = [int(i) for i in wrong.nonzero()[0]]
        return f"{label}: row [batch, head, query] = {index} sees no key and was declared finite, got NaN or inf"
    return None


def compare_with_reference(
    actual: torch.Tensor,
    expected: torch.Tensor,
    label: str,
    fully_masked: torch.Tensor | None = None,
    fully_masked_result: str = FullyMaskedRows.ZEROS,
    tolerance: tuple[float, float] | None = None,
    explain: Callable[[tuple[int, ...], tuple[float, float]], str] | None = None,
) -> Comparison:
    """Compare a variant's output with the float64 reference.

    ``label`` names the variant and case in the message. ``fully_masked`` (bool
    ``[batch, num_heads, seq_len_q]``) marks rows that see no key; with
    ``fully_masked_result="nan"`` those rows must be NaN, with ``"finite"`` finite (any value), with
    ``"any"`` anything, and in these cases are left out of the numeric comparison; otherwise they must equal the
    reference's zeros. Any other non-finite
    output fails. ``explain(worst_index, (atol, rtol))``: more lines for a failure's message (the
    score modifications at the worst element: ``explain_modifications``), or None.
    """
    if actual.shape != expected.shape:
        return Comparison(
            float("inf"), f"{label}: output shape {list(actual.shape)} != {list(expected.shape)}"
        )
    actual64 = actual.detach().to(torch.float64)
    expected = expected.clone()
    if (
        fully_masked is not None
        and fully_masked_result in (FullyMaskedRows.NAN, *UNDEFINED_ROW_RESULTS)
        and fully_masked.any()
    ):
        check = {
            FullyMaskedRows.NAN: _check_nan_rows,
            FullyMaskedRows.FINITE: _check_finite_rows,
        }.get(fully_masked_result)
        failure = check(actual64, fully_masked, label) if check else None
        if failure:
            return Comparison(float("inf"), failure)
        rows = fully_masked.to(actual64.device).unsqueeze(-1).expand_as(actual64)
        actual64 = actual64.masked_fill(rows, 0.0)
    non_finite = ~torch.isfinite(actual64)
    if non_finite.any():
        index = tuple(int(i) for i in non_finite.nonzero()[0])
        count = int(non_finite.sum())
        more = explain(index, tolerance or TOLERANCES[actual.dtype]) if explain else ""
        return Comparison(
            float("inf"),
            f"{label}: {count} non-finite outputs; first "
            + _describe(index, actual64, expected)
            + ("\n" + more if more else ""),
        )
    error = (actual64 - expected).abs()
    worst = tuple(int(i) for i in torch.unravel_index(error.argmax(), error.shape))
    atol, rtol = tolerance or TOLERANCES[actual.dtype]
    try:
        torch.testing.assert_close(actual64, expected, atol=atol, rtol=rtol)
    except AssertionError as exc:
        summary = str(exc).splitlines()[0:4]
        message = (
            f"{label}: not within atol={atol:.3g}, rtol={rtol} of the float64 reference; "
            + _describe(worst, actual64, expected)
        )
        more = explain(worst, (atol, rtol)) if explain is not None else ""
        more = "\n" + more if more else ""
        return Comparison(float(error.max()), message + more + "\n" + "\n".join(summary))
    return Comparison(float(error.max()), None)
