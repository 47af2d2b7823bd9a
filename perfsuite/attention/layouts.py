"""How a case's sequences are laid out: the shapes inference engines run.

A ``Layout`` departs from the dense ``[batch, heads, seq_len, head_dim]`` block in named ways:

* ``storage``: ``dense`` (one length per batch), ``padded`` (sequences of their own lengths
  right-padded to ``[batch, heads, max_len, head_dim]``, a padding mask hiding the padding),
  ``packed`` (sequences concatenated into ``[total_tokens, heads, head_dim]`` with cumulative
  offsets ``cu_seqlens``: the varlen form), ``paged`` (key/value in a cache of
  ``[num_pages, page_size, num_kv_heads, head_dim]`` pages behind a block table; query dense
  ``[batch, heads, seq_len_q, head_dim]``: decode or chunked prefill), ``packedpaged``
  (key/value paged as for ``paged``, queries packed into ``[total_q, heads, head_dim]`` with
  ``cu_seqlens_q``: chunked prefill over a paged cache, each sequence with its own number of
  new tokens, as vLLM's and FlashInfer's batch prefill kernels take it).
* ``lengths``: how the sequence lengths are distributed (``LENGTHS``): ``equal`` (all at the
  case's length), ``uniform`` (uniform between the shortest allowed and the case's length),
  ``onelong`` (one sequence at the case's length, the others at most an eighth of it). Lengths
  are drawn from a fixed seed (``LENGTHS_SEED``), so a case id names one batch of lengths and
  its cost (``perfsuite.attention.cost_model``) does not depend on the run's seed; the
  first sequence always has the case's length, so padding to it is tight.
* ``num_splits``: decode split over the keys into that many chunks, merged by log-sum-exp
  (``Form.SPLIT_KV``). ``head_dim_v``: value (and output) head dim, when it differs from the
  query/key head dim (``Form.VALUE_HEAD_DIM``; MLA: 192/128). ``fp8``: query/key/value in
  ``float8_e4m3fn`` with per-(batch, kv head) float32 descales (``Form.FP8``); the case's dtype
  is then that of the output.

Lengths: with ``seq_len_q == seq_len_kv`` (prefill) each sequence has as many queries as keys;
with ``seq_len_q < seq_len_kv`` (decode, chunked prefill) every sequence has ``seq_len_q``
queries, the last ones of its own ``kv_len`` keys, and ``kv_len >= seq_len_q``; with
``packedpaged`` storage and lengths other than ``equal`` the query counts differ too (drawn
between 1 and ``seq_len_q``, the first sequence at ``seq_len_q``): a batch mixing decode steps
and prefill chunks. The case's mask
kind applies to each sequence on its own lengths (``causal_br``: the last query sees the last key
of its sequence). Layout cases take the masks ``LAYOUT_MASKS`` only.

Ids: ``Layout.fragment`` is appended to a case id before the device, e.g.
``b4h8kv2q1k64d16-fp32-causal_br-paged16-uniform-cpu``, ``...-packed-onelong-...``,
``...-packedpaged16-uniform-...``,
``...-split4-...``, ``...-dv8-...``, ``...-fp8-...``; ``parse_fragment`` reads it back.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import re

import torch

from perfsuite.attention.contract import Form
from perfsuite.attention.masks import mask_kind


class Storage(enum.StrEnum):
    """How query/key/value of a batch of sequences are stored (see the module docstring)."""

    DENSE = "dense"
    PADDED = "padded"
    PACKED = "packed"
    PAGED = "paged"
    PACKED_PAGED = "packedpaged"


class Lengths(enum.StrEnum):
    """A named distribution of sequence lengths (see the module docstring)."""

    EQUAL = "equal"
    UNIFORM = "uniform"
    ONE_LONG = "onelong"


LENGTHS_SEED = 20260  # lengths are part of the case, not of the run's seed
LAYOUT_MASKS = ("noncausal", "causal", "causal_br", "window<W>")

# -padded-uniform | -packed-equal | -paged16-onelong | -packedpaged16-uniform, then -split4,
# -dv128, -fp8 (each optional)
FRAGMENT_PATTERN = (
    r"(?P<layout>(?:-(?:padded|packed|paged\d+|packedpaged\d+)-(?:equal|uniform|onelong))?"
    r"(?:-split\d+)?(?:-dv\d+)?(?:-fp8)?)"
)
_FRAGMENT_RE = re.compile(
    r"^(?:-(?P<storage>padded|packedpaged|packed|paged)(?P<page>\d+)?-(?P<lengths>equal|uniform|onelong))?"
    r"(?:-split(?P<splits>\d+))?(?:-dv(?P<dv>\d+))?(?P<fp8>-fp8)?$"
)


@dataclasses.dataclass(frozen=True)
class Layout:
    """A case's inference layout (module docstring); ``Layout()`` is the plain dense case.

    Raises ``ValueError`` naming the bad field: ``page_size`` without ``paged`` storage or below
    1, ``paged`` without a page size, ``lengths`` other than ``equal`` for dense storage,
    ``num_splits`` or ``head_dim_v`` below 1, ``fp8`` with a storage other than dense.
    """

    storage: Storage = Storage.DENSE
    lengths: Lengths = Lengths.EQUAL
    page_size: int | None = None
    num_splits: int | None = None
    head_dim_v: int | None = None
    fp8: bool = False

    def __post_init__(self):
        object.__setattr__(self, "storage", _parse(Storage, self.storage, "storage"))
        object.__setattr__(self, "lengths", _parse(Lengths, self.lengths, "lengths"))
        if self.keys_paged != (self.page_size is not None):
            raise ValueError(
                f"page_size={self.page_size!r} with storage {self.storage}: a page size goes with "
                "paged storage, and paged storage needs one"
            )
        for name in ("page_size", "num_splits", "head_dim_v"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name}={value}; {name} must be at least 1")
        if self.storage == Storage.DENSE and self.lengths != Lengths.EQUAL:
            raise ValueError(
                f"lengths {self.lengths} with dense storage: dense sequences all have the case's "
                "length; choose padded, packed or paged storage"
            )
        if self.fp8 and self.storage != Storage.DENSE:
            raise ValueError(f"fp8 with {self.storage} storage: FP8 cases are dense")

    @property
    def queries_packed(self) -> bool:
        """Queries (and the output) packed ``[total_q, heads, dim]`` with ``cu_seqlens_q``."""
        return self.storage in (Storage.PACKED, Storage.PACKED_PAGED)

    @property
    def keys_paged(self) -> bool:
        """Key/value in a page cache behind a block table."""
        return self.storage in (Storage.PAGED, Storage.PACKED_PAGED)

    @property
    def is_plain(self) -> bool:
        """The plain dense case: nothing departs from it."""
        return self == Layout()

    @property
    def forms(self) -> frozenset[Form]:
        """The contract forms a function needs for this layout (padded needs none: a mask)."""
        found = set()
        if self.queries_packed:
            found.add(Form.VARLEN)
        if self.keys_paged:
            found.add(Form.PAGED)
        if self.num_splits is not None:
            found.add(Form.SPLIT_KV)
        if self.head_dim_v is not None:
            found.add(Form.VALUE_HEAD_DIM)
        if self.fp8:
            found.add(Form.FP8)
        return frozenset(found)

    @property
    def fragment(self) -> str:
        """The case-id fragment, ``""`` for the plain layout (``-paged16-uniform-split4``)."""
        parts = []
        if self.storage != Storage.DENSE:
            page = str(self.page_size) if self.keys_paged else ""
            parts.append(f"-{self.storage}{page}-{self.lengths}")
        if self.num_splits is not None:
            parts.append(f"-split{self.num_splits}")
        if self.head_dim_v is not None:
            parts.append(f"-dv{self.head_dim_v}")
        if self.fp8:
            parts.append("-fp8")
        return "".join(parts)


def _parse(kind: type[enum.StrEnum], value, name: str):
    try:
        return kind(value)
    except ValueError:
        raise ValueError(f"{name} {value!r} is unknown; allowed: {', '.join(kind)}") from None


def parse_fragment(text: str) -> Layout:
    """The ``Layout`` whose ``fragment`` is ``text`` (``""``: the plain layout); ``ValueError`` otherwise."""
    match = _FRAGMENT_RE.match(text)
    if not match:
        raise ValueError(
            f"layout {text!r} is not of the form [-padded|-packed|-paged<P>|-packedpaged<P>-<lengths>][-split<N>]"
            f"[-dv<D>][-fp8] with lengths one of {', '.join(Lengths)}"
        )
    g = match.groupdict()
    return Layout(
        storage=Storage(g["storage"]) if g["storage"] else Storage.DENSE,
        lengths=Lengths(g["lengths"]) if g["lengths"] else Lengths.EQUAL,
        page_size=int(g["page"]) if g["page"] else None,
        num_splits=int(g["splits"]) if g["splits"] else None,
        head_dim_v=int(g["dv"]) if g["dv"] else None,
        fp8=bool(g["fp8"]),
    )


def check_case_layout(
    layout: Layout, mask: str, seq_len_q: int, seq_len_kv: int, contiguous: bool, transposed: bool
) -> None:
    """Raise ``ValueError`` when a case cannot have ``layout``: a mask outside ``LAYOUT_MASKS``,
    ``seq_len_q > seq_len_kv``, or a strided or transposed layout with a non-plain one."""
    if layout.is_plain:
        return
    kind = mask_kind(mask)
    if not (kind.causal or kind.name == "noncausal"):
        raise ValueError(
            f"mask {mask!r} with layout {layout.fragment!r}: layout cases take "
            f"{', '.join(LAYOUT_MASKS)} (applied to each sequence on its own lengths)"
        )
    if seq_len_q > seq_len_kv:
        raise ValueError(
            f"seq_len_q={seq_len_q} > seq_len_kv={seq_len_kv} with layout {layout.fragment!r}: "
            "a sequence's queries are the last of its keys (prefill, chunked prefill, decode)"
        )
    if not contiguous or transposed:
        raise ValueError(
            f"layout {layout.fragment!r} cases are contiguous (not strided or transposed)"
        )


def sequence_lengths(
    layout: Layout, batch: int, seq_len_q: int, seq_len_kv: int
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(q_lens, kv_lens)``, one per sequence, for ``layout`` (module docstring's rules).

    The first sequence has ``seq_len_kv`` keys; with ``seq_len_q == seq_len_kv`` each sequence
    has as many queries as keys, else ``seq_len_q`` queries and at least as many keys (for
    ``packedpaged`` storage with drawn lengths: 1 to ``seq_len_q`` queries, drawn after the keys,
    so the key lengths are those of the ``paged`` layout with the same lengths).
    """
    low = seq_len_q if seq_len_q < seq_len_kv else 1
    generator = torch.Generator().manual_seed(LENGTHS_SEED)
    if layout.lengths == Lengths.EQUAL:
        kv = [seq_len_kv] * batch
    else:
        high = seq_len_kv if layout.lengths == Lengths.UNIFORM else max(low, seq_len_kv // 8)
        kv = torch.randint(low, high + 1, (batch,), generator=generator).tolist()
        kv[0] = seq_len_kv
    if seq_len_q == seq_len_kv:
        q = list(kv)
    elif layout.storage == Storage.PACKED_PAGED and layout.lengths != Lengths.EQUAL:
        q = torch.randint(1, seq_len_q + 1, (batch,), generator=generator).tolist()
        q[0] = seq_len_q
    else:
        q = [seq_len_q] * batch
    return tuple(q), tuple(kv)


def cu_seqlens(lengths: tuple[int, ...] | list[int], device: str = "cpu") -> torch.Tensor:
    """Cumulative offsets ``int32 [len(lengths) + 1]``: sequence ``b`` is rows ``cu[b]:cu[b+1]``."""
    offsets = [0]
    for n in lengths:
        offsets.append(offsets[-1] + int(n))
    return torch.tensor(offsets, dtype=torch.int32, device=device)


def pack(dense: torch.Tensor, lengths: tuple[int, ...] | list[int]) -> torch.Tensor:
    """``[batch, heads, max_len, dim]`` -> ``[sum(lengths), heads, dim]``: each sequence's first
    ``lengths[b]`` positions, concatenated. ``ValueError`` when a length exceeds ``max_len``."""
    if len(lengths) != dense.shape[0] or max(lengths, default=0) > dense.shape[2]:
        raise ValueError(
            f"lengths {list(lengths)} do not fit a batch of {dense.shape[0]} x {dense.shape[2]}"
        )
    return torch.cat([dense[b, :, :n].transpose(0, 1) for b, n in enumerate(lengths)], dim=0)


def unpack(packed: torch.Tensor, cu: torch.Tensor, max_len: int) -> torch.Tensor:
    """``[total, heads, dim]`` -> zero-padded ``[batch, heads, max_len, dim]`` (``pack``'s inverse
    on the valid positions); ``cu``: int ``[batch + 1]`` offsets."""
    offsets = [int(x) for x in cu.tolist()]
    batch = len(offsets) - 1
    out = packed.new_zeros(batch, packed.shape[1], max_len, packed.shape[2])
    for b in range(batch):
        out[b, :, : offsets[b + 1] - offsets[b]] = packed[offsets[b] : offsets[b + 1]].transpose(
            0, 1
        )
    return out


def pages_needed(lengths: tuple[int, ...] | list[int], page_size: int) -> list[int]:
    """Pages each sequence occupies: ``ceil(length / page_size)``."""
    return [math.ceil(n / page_size) for n in lengths]


def paginate(
    dense: torch.Tensor,
    lengths: tuple[int, ...] | list[int],
    page_size: int,
    generator: torch.Generator,
    spare_pages: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[batch, kv_heads, max_len, dim]`` -> ``(cache [num_pages, page_size, kv_heads, dim],
    block_table int32 [batch, max_pages])``.

    Pages are handed out in an order drawn from ``generator`` (a permutation), so the pages of a
    sequence are not contiguous; ``spare_pages`` pages belong to no sequence. Slots past a
    sequence's length and unused pages hold random draws (a function that reads past
    ``seq_lens_kv`` gets wrong values, not zeros); unused block-table entries are 0 (a valid page).
    """
    batch, heads, _, dim = dense.shape
    needed = pages_needed(lengths, page_size)
    num_pages = sum(needed) + spare_pages
    order = torch.randperm(num_pages, generator=generator).tolist()
    cache = torch.randn(num_pages, page_size, heads, dim, generator=generator).to(dense)
    table = torch.zeros(batch, max(max(needed, default=1), 1), dtype=torch.int32)
    taken = 0
    for b, (n, pages) in enumerate(zip(lengths, needed)):
        for p in range(pages):
            page = order[taken]
            taken += 1
            table[b, p] = page
            rows = dense[b, :, p * page_size : min((p + 1) * page_size, n)].transpose(0, 1)
            cache[page, : rows.shape[0]] = rows
    return cache, table.to(dense.device)


def gather_pages(
    cache: torch.Tensor, block_table: torch.Tensor, b: int, length: int
) -> torch.Tensor:
    """Sequence ``b``'s first ``length`` positions from a paged cache: ``[kv_heads, length, dim]``."""
    page_size = cache.shape[1]
    pages = block_table[b, : math.ceil(length / page_size)].long()
    return cache[pages].flatten(0, 1)[:length].transpose(0, 1)


def padded_allowed(
    kind: str, q_lens: torch.Tensor, kv_lens: torch.Tensor, max_q: int, max_kv: int
) -> torch.Tensor:
    """Bool ``[batch, 1, max_q, max_kv]`` for a padded batch: query ``i`` of sequence ``b`` sees
    key ``j < kv_lens[b]`` that mask ``kind`` allows on the sequence's own lengths; a padded query
    row (``i >= q_lens[b]``) sees all its sequence's keys (so no row is empty). ``q_lens`` and
    ``kv_lens``: int ``[batch]`` tensors on the device of the result."""
    info = mask_kind(kind)
    device = kv_lens.device
    q_idx = torch.arange(max_q, device=device).view(1, -1, 1)
    kv_idx = torch.arange(max_kv, device=device).view(1, 1, -1)
    q_len, kv_len = q_lens.view(-1, 1, 1).long(), kv_lens.view(-1, 1, 1).long()
    valid_key = kv_idx < kv_len
    if info.causal:
        offset = kv_len - q_len if info.bottom_right else 0
        distance = q_idx + offset - kv_idx
        sees = distance >= 0 if info.window is None else (distance >= 0) & (distance < info.window)
    else:
        sees = torch.ones_like(valid_key)
    return (valid_key & (sees | (q_idx >= q_len))).unsqueeze(1)


def output_shape(
    layout: Layout, batch: int, num_heads: int, seq_len_q: int, head_dim: int, total_q: int
) -> tuple[int, ...]:
    """The contract's output shape: ``[total_q, heads, head_dim_v]`` with packed queries
    (``packed``, ``packedpaged``), else ``[batch, heads, seq_len_q, head_dim_v]``."""
    dim = layout.head_dim_v or head_dim
    if layout.queries_packed:
        return (total_q, num_heads, dim)
    return (batch, num_heads, seq_len_q, dim)


FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0  # largest finite float8_e4m3fn (OCP FP8 formats, 2023)


def quantize_fp8(tensor: torch.Tensor, num_kv_heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``[batch, heads, seq, dim]`` -> ``(float8_e4m3fn tensor, float32 descale [batch, num_kv_heads])``:
    one scale per (batch, kv head group), ``amax / 448``, so ``fp8 * descale`` approximates ``tensor``."""
    batch, heads = tensor.shape[:2]
    groups = heads // num_kv_heads
    grouped = tensor.float().reshape(batch, num_kv_heads, groups, -1)
    descale = (grouped.abs().amax(dim=(2, 3)) / FP8_MAX).clamp(min=1e-12)
    per_head = descale.repeat_interleave(groups, dim=1)[:, :, None, None]
    return (tensor.float() / per_head).to(FP8_DTYPE), descale


def dequantize_fp8(tensor: torch.Tensor, descale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``[batch, heads, seq, dim]`` float8 times its ``[batch, num_kv_heads]`` descale, in ``dtype``."""
    groups = tensor.shape[1] // descale.shape[1]
    per_head = descale.to(dtype).repeat_interleave(groups, dim=1)[:, :, None, None]
    return tensor.to(dtype) * per_head
