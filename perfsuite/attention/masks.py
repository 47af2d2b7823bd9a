"""Attention masks: which keys each query may attend to, in every form the variants need.

Conventions (the suite's, stated once):

* A boolean mask means **True = attend**, as ``F.scaled_dot_product_attention`` defines it.
  ``masked_out`` is its negation, the form ``masked_fill`` takes.
* An additive (float) mask is **added** to the scaled scores; a float mask of 0/1 is a bias
  of 0 or 1, not a selection. ``-inf`` entries hide keys.
* Causal alignment is explicit. ``causal`` is **top-left**: query ``i`` sees keys ``j <= i``
  (what ``is_causal=True`` does). ``causal_br`` is **bottom-right**: query ``i`` sees keys
  ``j <= i + seq_len_kv - seq_len_q`` (``torch.nn.attention.bias.causal_lower_right``, what
  KV-cache decoding needs: the last query sees every key). With ``seq_len_q > seq_len_kv``
  the first ``seq_len_q - seq_len_kv`` rows of a bottom-right mask see no key at all.
* ``window{W}`` is a bottom-right causal sliding window: query ``i`` sees the ``W`` keys
  ending at its own position, ``0 <= i + seq_len_kv - seq_len_q - j < W``.
* ``padding`` hides, per batch row, the keys at or after that row's length (drawn from
  the seed, at least 1). ``bool`` is a random mask (80% attend) over
  ``[batch, 1, seq_len_q, seq_len_kv]``; it can hide every key of a row.
* ``additive`` is a random N(0, 1) bias over ``[1, num_heads, seq_len_q, seq_len_kv]``.

Masks are built once per case, outside the timed call.
"""

from __future__ import annotations

import dataclasses
import re
import warnings

import torch

PLAIN_KINDS = ("noncausal", "causal", "causal_br", "bool", "additive", "padding")
_WINDOW_RE = re.compile(r"^window(\d+)$")


def parse_mask_kind(text: str) -> str:
    """Validate a mask kind: one of ``PLAIN_KINDS`` or ``window<W>`` with ``W >= 1``.

    Raises:
        ValueError: naming the value and the allowed kinds.
    """
    name = text.strip().lower()
    window = _WINDOW_RE.match(name)
    if name in PLAIN_KINDS or (window and int(window.group(1)) >= 1):
        return name
    raise ValueError(
        f"mask {text!r} is not supported; allowed: {', '.join(PLAIN_KINDS)}, window<W> (W >= 1)"
    )


def window_size(kind: str) -> int | None:
    """``W`` of ``window<W>``, None for other kinds."""
    match = _WINDOW_RE.match(kind)
    return int(match.group(1)) if match else None


@dataclasses.dataclass(frozen=True)
class MaskKind:
    """What one mask kind means, stated once (the module docstring gives the conventions).

    ``hides_keys``: some query does not see some key (all but ``noncausal`` and ``additive``).
    ``causal``: hides later keys by index arithmetic (``causal``, ``causal_br``, ``window<W>``).
    ``bottom_right``: aligned so that the last query sees the last key (``causal_br``, windows).
    ``window``: ``W`` of a sliding window, else None. ``bias``: an additive float bias.
    """

    name: str
    hides_keys: bool
    causal: bool = False
    bottom_right: bool = False
    window: int | None = None
    bias: bool = False

    def offset(self, seq_len_q: int, seq_len_kv: int) -> int:
        """The key index aligned with query 0: 0 top-left, ``seq_len_kv - seq_len_q`` bottom-right."""
        return seq_len_kv - seq_len_q if self.bottom_right else 0

    def sees(self, q_idx, kv_idx, seq_len_q: int, seq_len_kv: int, offset: int | None = None):
        """For causal kinds, whether query ``q_idx`` sees key ``kv_idx`` (ints or broadcasting tensors).

        ``offset``: the key position of query 0 when the case gives query positions
        (``perfsuite.attention.score_mods``), else None for the kind's own alignment (``offset``)."""
        offset = self.offset(seq_len_q, seq_len_kv) if offset is None else offset
        distance = q_idx + offset - kv_idx
        return distance >= 0 if self.window is None else (distance >= 0) & (distance < self.window)

    def keys_seen(
        self, q_idx: int, seq_len_q: int, seq_len_kv: int, offset: int | None = None
    ) -> int:
        """How many keys query ``q_idx`` sees under a causal kind (``seq_len_kv`` for the others);
        ``offset`` as in ``sees``."""
        if not self.causal:
            return seq_len_kv
        offset = self.offset(seq_len_q, seq_len_kv) if offset is None else offset
        last = min(q_idx + offset, seq_len_kv - 1)
        first = 0 if self.window is None else max(last - self.window + 1, 0)
        return max(last - first + 1, 0)


_KINDS = {
    "noncausal": MaskKind("noncausal", hides_keys=False),
    "causal": MaskKind("causal", hides_keys=True, causal=True),
    "causal_br": MaskKind("causal_br", hides_keys=True, causal=True, bottom_right=True),
    "bool": MaskKind("bool", hides_keys=True),
    "additive": MaskKind("additive", hides_keys=False, bias=True),
    "padding": MaskKind("padding", hides_keys=True),
}


def mask_kind(name: str) -> MaskKind:
    """The ``MaskKind`` of a kind name (``causal``, ``window16``, ...).

    Raises:
        ValueError: naming the value and the allowed kinds (from ``parse_mask_kind``).
    """
    name = parse_mask_kind(name)
    window = window_size(name)
    if window is not None:
        return MaskKind(name, hides_keys=True, causal=True, bottom_right=True, window=window)
    return _KINDS[name]


@dataclasses.dataclass(frozen=True)
class AttentionMask:
    """One case's mask in the forms the variants consume.

    ``kind``: the mask kind. ``is_causal``: pass ``is_causal=True`` to SDPA (top-left
    causal with nothing else). ``allowed``: bool, True = attend, broadcastable to
    ``[batch, num_heads, seq_len_q, seq_len_kv]``, or None (all keys). ``masked_out``:
    ``~allowed`` for ``masked_fill``. ``additive``: float bias in the inputs' dtype, or None.
    ``sdpa_mask``: what to pass as SDPA's ``attn_mask`` (a bool or float tensor, a
    ``CausalBias``, or None).
    """

    kind: str
    is_causal: bool
    allowed: torch.Tensor | None
    masked_out: torch.Tensor | None
    additive: torch.Tensor | None
    sdpa_mask: object | None

    def with_additive(self, additive: torch.Tensor | None) -> AttentionMask:
        """The same key selection with another additive bias (SDPA gets one float mask)."""
        return compose(self.kind, self.allowed, additive, top_left_causal=False)


def compose(
    kind: str,
    allowed: torch.Tensor | None,
    additive: torch.Tensor | None,
    *,
    top_left_causal: bool = False,
    causal_bias: object | None = None,
) -> AttentionMask:
    """Build an ``AttentionMask`` from a bool selection and/or an additive bias.

    SDPA takes one ``attn_mask``: a bias and a selection are merged into a float mask with
    ``-inf`` at hidden keys; ``is_causal`` is only used for plain top-left causal.
    """
    masked_out = None if allowed is None else ~allowed
    if additive is None:
        sdpa_mask = (
            None if top_left_causal else (causal_bias if causal_bias is not None else allowed)
        )
    else:
        sdpa_mask = (
            additive if masked_out is None else additive.masked_fill(masked_out, float("-inf"))
        )
    is_causal = top_left_causal and additive is None
    return AttentionMask(kind, is_causal, allowed, masked_out, additive, sdpa_mask)


def causal_allowed(
    seq_len_q: int, seq_len_kv: int, device: str, bottom_right: bool
) -> torch.Tensor:
    """Bool ``[seq_len_q, seq_len_kv]``, True where query ``i`` may see key ``j``."""
    kind = mask_kind("causal_br" if bottom_right else "causal")
    return _index_grid(kind, seq_len_q, seq_len_kv, device)


def window_allowed(seq_len_q: int, seq_len_kv: int, window: int, device: str) -> torch.Tensor:
    """Bool ``[seq_len_q, seq_len_kv]`` of a bottom-right sliding window of ``window`` keys."""
    return _index_grid(mask_kind(f"window{window}"), seq_len_q, seq_len_kv, device)


def _index_grid(
    kind: MaskKind, seq_len_q: int, seq_len_kv: int, device: str, offset: int | None = None
) -> torch.Tensor:
    q_idx = torch.arange(seq_len_q, device=device).unsqueeze(1)
    kv_idx = torch.arange(seq_len_kv, device=device).unsqueeze(0)
    return kind.sees(q_idx, kv_idx, seq_len_q, seq_len_kv, offset)


def build_mask(
    kind: str,
    shape: tuple[int, int, int, int],
    dtype: torch.dtype,
    device: str,
    generator: torch.Generator,
    query_offset: int | None = None,
) -> AttentionMask:
    """The mask of ``kind`` for scores of ``shape = (batch, num_heads, seq_len_q, seq_len_kv)``.

    Random masks draw from ``generator`` on the CPU, so every device sees the same mask.
    ``query_offset``: the key position of query 0 for a case with explicit query positions
    (``perfsuite.attention.score_mods``): causal kinds are then aligned by it, not by their kind.
    """
    batch, num_heads, seq_len_q, seq_len_kv = shape
    if query_offset is not None and mask_kind(kind).causal:
        grid = _index_grid(mask_kind(kind), seq_len_q, seq_len_kv, device, query_offset)
        return compose(kind, grid, None)
    if kind == "noncausal":
        return compose(kind, None, None)
    if kind == "causal":
        return compose(
            kind, causal_allowed(seq_len_q, seq_len_kv, device, False), None, top_left_causal=True
        )
    if kind == "causal_br":
        allowed = causal_allowed(seq_len_q, seq_len_kv, device, True)
        with warnings.catch_warnings():
            # torch warns of NaN rows when seq_len_q > seq_len_kv; the suite checks what happens
            warnings.filterwarnings("ignore", message="Lower right causal bias will produce NaNs")
            from torch.nn.attention.bias import (
                causal_lower_right,
            )  # imports TorchDynamo: 2-3 s, only when used

            bias = causal_lower_right(seq_len_q, seq_len_kv)
        return compose(kind, allowed, None, causal_bias=bias)
    if kind == "bool":
        draw = torch.rand(batch, 1, seq_len_q, seq_len_kv, generator=generator)
        return compose(kind, (draw < 0.8).to(device), None)
    if kind == "additive":
        bias = torch.randn(1, num_heads, seq_len_q, seq_len_kv, generator=generator)
        return compose(kind, None, bias.to(device=device, dtype=dtype))
    if kind == "padding":
        lengths = torch.randint(1, seq_len_kv + 1, (batch,), generator=generator)
        allowed = torch.arange(seq_len_kv).view(1, 1, 1, -1) < lengths.view(-1, 1, 1, 1)
        return compose(kind, allowed.to(device), None)
    window = window_size(kind)
    if window is not None:
        return compose(kind, window_allowed(seq_len_q, seq_len_kv, window, device), None)
    raise ValueError(f"mask {kind!r} is not supported")


def fully_masked_rows(mask: AttentionMask, shape: tuple[int, int, int, int]) -> torch.Tensor:
    """Bool ``[batch, num_heads, seq_len_q]``: True for query rows that see no key.

    Only the selection counts; additive ``-inf`` entries are not inspected (the suite's
    additive masks are finite).
    """
    batch, num_heads, seq_len_q, _ = shape
    if mask.allowed is None:
        return torch.zeros(batch, num_heads, seq_len_q, dtype=torch.bool)
    sees_nothing = ~mask.allowed.any(dim=-1)
    return sees_nothing.expand(batch, num_heads, seq_len_q).cpu()
