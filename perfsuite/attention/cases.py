"""Attention cases: one shape, dtype, device and masking choice to benchmark.

A case is what a parametrized test runs a variant on. Shapes are written the way
the field writes them, ``batch x num_heads x seq_len x head_dim`` (``8x16x1024x64``),
and every parsing function raises ``ValueError`` with a message that names the bad
value and what is allowed; the pytest plugin turns that into a ``pytest.UsageError``
naming where the value came from.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import math
import re

import torch

from perfsuite.attention.contract import Form
from perfsuite.attention.layouts import FRAGMENT_PATTERN, Layout, check_case_layout, parse_fragment
from perfsuite.attention.masks import mask_kind, parse_mask_kind
from perfsuite.attention import score_mods as mods_
from perfsuite.attention.score_mods import ScoreMods

DTYPES: dict[str, torch.dtype] = {
    "fp64": torch.float64,
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}
DTYPE_ALIASES = {
    "float64": "fp64",
    "float32": "fp32",
    "float": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
}


class Device(enum.StrEnum):
    """Where a case runs, as torch spells the device type."""

    CPU = "cpu"
    CUDA = "cuda"


DEVICES = tuple(Device)
MASK_ALIASES = {"both": ("causal", "noncausal")}

# B x H[:Hkv] x S[:Skv] x D, e.g. 8x16x1024x64 or 4x32:8x1:4096x128 (GQA decode).
_SHAPE_RE = re.compile(r"^(\d+)x(\d+)(?::(\d+))?x(\d+)(?::(\d+))?x(\d+)$")
_ID_RE = re.compile(
    r"^b(?P<b>\d+)h(?P<h>\d+)(?:kv(?P<hkv>\d+))?(?:s(?P<s>\d+)|q(?P<sq>\d+)k(?P<skv>\d+))d(?P<d>\d+)"
    r"-(?P<dtype>\w+?)-(?P<mask>[a-z_]+\d*)(?:-scale(?P<scale>[0-9.e+-]+?))?"
    + mods_.ID_PATTERN
    + r"(?P<strided>-strided)?(?P<transposed>-transposed)?"
    + FRAGMENT_PATTERN
    + r"-(?P<device>\w+)$"
)


@dataclasses.dataclass(frozen=True)
class Shape:
    """Sizes of one attention problem: query ``[batch, num_heads, seq_len_q, head_dim]``,
    key/value ``[batch, num_kv_heads, seq_len_kv, head_dim]``."""

    batch: int
    num_heads: int
    num_kv_heads: int
    seq_len_q: int
    seq_len_kv: int
    head_dim: int


@dataclasses.dataclass(frozen=True)
class AttentionCase:
    """One input configuration for attention.

    Query has shape ``[batch, num_heads, seq_len_q, head_dim]``; key and value have
    shape ``[batch, num_kv_heads, seq_len_kv, head_dim]`` (``num_kv_heads`` divides
    ``num_heads``: grouped-query attention, multi-query when it is 1). ``dtype`` is a short
    name from ``DTYPES`` (``"bf16"``), ``device`` one of ``DEVICES``, ``mask`` a kind from
    ``perfsuite.attention.masks`` (``"causal"`` is top-left). ``scale`` is the softmax scale, None for
    ``1/sqrt(head_dim)``; ``contiguous=False`` lays query/key/value out as
    ``[batch, seq, heads, head_dim]`` transposed, as many models do (``-strided`` in the id);
    ``transposed=True`` makes them transposes of ``[batch, heads, head_dim, seq]`` buffers, so
    the last dimension is not contiguous (``stride(-1) == seq``; ``-transposed`` in the id),
    which fused kernels refuse. The two layouts exclude each other (``ValueError``).
    ``score_mods``: ALiBi, softcapping, sinks and query positions (``perfsuite.attention.score_mods``;
    ``-alibi-softcap50-sinks-qoff96`` in the id); an explicit query offset must keep the queries
    inside the key sequence and cannot be combined with ``causal_br`` (write ``causal`` with the
    offset: causal kinds are then aligned by the positions) (``ValueError``).
    ``layout``: how the batch's sequences are stored (``perfsuite.attention.layouts.Layout``:
    padded, packed or paged, their lengths, split-KV, a value head dim, FP8); the default is the
    plain dense case. With a layout, ``seq_len_q``/``seq_len_kv`` are the longest sequence's.
    """

    batch: int
    num_heads: int
    seq_len_q: int
    seq_len_kv: int
    head_dim: int
    dtype: str
    device: str
    mask: str = "causal"
    num_kv_heads: int | None = None
    scale: float | None = None
    contiguous: bool = True
    transposed: bool = False
    score_mods: ScoreMods = mods_.NONE
    layout: Layout = Layout()

    def __post_init__(self):
        if self.transposed and not self.contiguous:
            raise ValueError(
                "a case is either strided ([batch, seq, heads, head_dim] transposed) or transposed "
                "(last dimension not contiguous), not both"
            )
        if self.num_kv_heads is None:
            object.__setattr__(self, "num_kv_heads", self.num_heads)
        check_shape(
            Shape(
                self.batch,
                self.num_heads,
                self.num_kv_heads,
                self.seq_len_q,
                self.seq_len_kv,
                self.head_dim,
            )
        )
        check_case_layout(
            self.layout,
            self.mask,
            self.seq_len_q,
            self.seq_len_kv,
            self.contiguous,
            self.transposed,
        )
        if self.layout.fp8 and self.dtype != "bf16":
            raise ValueError(
                f"dtype {self.dtype!r} with fp8: FP8 attention returns bfloat16 (FA3, SDPA's "
                "quantized path); an fp8 case's dtype is bf16"
            )
        if self.score_mods.forms and not self.layout.is_plain:
            raise ValueError(
                f"score modifications ({self.score_mods.id_suffix}) with the layout "
                f"{self.layout.fragment!r}: not supported together; allowed: either one alone"
            )
        offset = self.score_mods.query_offset
        if offset is not None:
            if offset + self.seq_len_q > self.seq_len_kv:
                raise ValueError(
                    f"query_offset={offset} puts the last of {self.seq_len_q} queries at key position "
                    f"{offset + self.seq_len_q - 1}, past the {self.seq_len_kv} keys; allowed: 0 to "
                    f"{self.seq_len_kv - self.seq_len_q}"
                )
            if self.mask == "causal_br":
                raise ValueError(
                    "causal_br aligns the queries bottom-right; with an explicit query offset write "
                    "causal (causal kinds are then aligned by the query positions)"
                )

    @property
    def query_offset(self) -> int:
        """The key position of query row 0 (``perfsuite.attention.score_mods``): the explicit offset,
        else 0 for top-left ``causal`` and ``seq_len_kv - seq_len_q`` (bottom-right) for every other kind."""
        kind = mask_kind(self.mask)
        top_left = kind.causal and not kind.bottom_right
        return mods_.query_offset_for(
            self.score_mods, not top_left, self.seq_len_q, self.seq_len_kv
        )

    @property
    def causal(self) -> bool:
        """True for masks that hide later keys (top-left, bottom-right causal, sliding window)."""
        return mask_kind(self.mask).causal

    @property
    def hides_keys(self) -> bool:
        """True when the mask hides some keys from some queries (not for noncausal or additive)."""
        return mask_kind(self.mask).hides_keys

    @property
    def hides_a_key_here(self) -> bool:
        """``hides_keys``, and for a causal kind, that this case's lengths leave some key hidden: the
        first query sees the fewest keys (``MaskKind.keys_seen``), and a decode query aligned
        bottom-right sees them all. Random masks (bool, padding) are taken to hide one."""
        kind = mask_kind(self.mask)
        if not kind.hides_keys or not kind.causal:
            return kind.hides_keys
        return (
            kind.keys_seen(0, self.seq_len_q, self.seq_len_kv, self.score_mods.query_offset)
            < self.seq_len_kv
        )

    @property
    def forms(self) -> frozenset[Form]:
        """The forms (``perfsuite.attention.contract.Form``) the case carries: a variant that does not
        declare one of them is not run on the case."""
        return self.score_mods.forms | self.layout.forms

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def softmax_scale(self) -> float:
        """``scale``, or ``1 / sqrt(head_dim)`` ("Attention Is All You Need") when unset."""
        return self.scale if self.scale is not None else 1.0 / math.sqrt(self.head_dim)

    @property
    def shape_id(self) -> str:
        """``b8h16s1024d64``; ``b4h32kv8q1k4096d128`` with GQA and differing lengths."""
        kv = f"kv{self.num_kv_heads}" if self.num_kv_heads != self.num_heads else ""
        if self.seq_len_q == self.seq_len_kv:
            seq = f"s{self.seq_len_q}"
        else:
            seq = f"q{self.seq_len_q}k{self.seq_len_kv}"
        return f"b{self.batch}h{self.num_heads}{kv}{seq}d{self.head_dim}"

    @property
    def id(self) -> str:
        """Stable key for tests and stored results: ``b8h16s1024d64-bf16-causal-cuda``.

        ``parse_case_id`` turns it back into the case.
        """
        scale = f"-scale{self.scale:g}" if self.scale is not None else ""
        strided = "" if self.contiguous else "-strided"
        transposed = "-transposed" if self.transposed else ""
        mods = self.score_mods.id_suffix
        layout = self.layout.fragment
        return f"{self.shape_id}-{self.dtype}-{self.mask}{scale}{mods}{strided}{transposed}{layout}-{self.device}"

    @property
    def score_shape(self) -> tuple[int, int, int, int]:
        """Shape of the score matrix ``[batch, num_heads, seq_len_q, seq_len_kv]``."""
        return (self.batch, self.num_heads, self.seq_len_q, self.seq_len_kv)

    @property
    def element_size_bytes(self) -> int:
        return torch.empty((), dtype=self.torch_dtype).element_size()

    @property
    def score_bytes(self) -> int:
        """Bytes of one score matrix in the case's dtype."""
        b, h, sq, skv = self.score_shape
        return b * h * sq * skv * self.element_size_bytes


def check_shape(shape: Shape) -> None:
    """Raise ``ValueError`` naming the field when a size is below 1 or GQA heads do not divide."""
    for name, value in dataclasses.asdict(shape).items():
        if value < 1:
            raise ValueError(f"{name}={value}; {name} must be at least 1")
    if shape.num_heads % shape.num_kv_heads:
        raise ValueError(
            f"num_kv_heads={shape.num_kv_heads} does not divide num_heads={shape.num_heads}; "
            "grouped-query attention needs num_heads to be a multiple of num_kv_heads"
        )


def parse_shape(text: str) -> Shape:
    """Parse ``"BxHxSxD"``, or ``"BxH:HkvxSq:SkvxD"`` for GQA and differing lengths.

    Raises:
        ValueError: malformed, a size below 1, or ``Hkv`` not dividing ``H``.
    """
    match = _SHAPE_RE.match(text.strip())
    if not match:
        raise ValueError(
            f"shape {text!r} is not batch x num_heads x seq_len x head_dim; write positive integers "
            "joined by 'x', e.g. 8x16x1024x64, or 4x32:8x1:4096x128 for num_heads:num_kv_heads "
            "and seq_len_q:seq_len_kv"
        )
    b, h, hkv, sq, skv, d = match.groups()
    shape = Shape(int(b), int(h), int(hkv or h), int(sq), int(skv or sq), int(d))
    try:
        check_shape(shape)
    except ValueError as exc:
        raise ValueError(f"shape {text!r} has {exc}") from None
    return shape


def parse_case_id(text: str) -> AttentionCase:
    """The case whose ``id`` is ``text`` (``b1h4kv2q3k7d8-fp32-bool-cpu``); ``ValueError`` otherwise."""
    match = _ID_RE.match(text.strip())
    if not match:
        raise ValueError(
            f"case id {text!r} is not of the form b<B>h<H>[kv<Hkv>](s<S>|q<Sq>k<Skv>)d<D>-<dtype>-<mask>[-scale<x>]"
            "[-alibi][-softcap<cap>][-sinks][-qoff<offset>][-strided|-transposed]"
            "[-padded|-packed|-paged<P>-<lengths>][-split<N>][-dv<D>][-fp8]-<device>"
        )
    g = match.groupdict()
    seq_q = int(g["s"] or g["sq"])
    seq_kv = int(g["s"] or g["skv"])
    return AttentionCase(
        int(g["b"]),
        int(g["h"]),
        seq_q,
        seq_kv,
        int(g["d"]),
        parse_dtype(g["dtype"]),
        parse_device(g["device"]),
        parse_mask_kind(g["mask"]),
        int(g["hkv"] or g["h"]),
        float(g["scale"]) if g["scale"] else None,
        contiguous=not g["strided"],
        transposed=bool(g["transposed"]),
        score_mods=mods_.from_id_groups(g),
        layout=parse_fragment(g["layout"] or ""),
    )


def parse_dtype(text: str) -> str:
    """Return the short dtype name for ``text`` (``"bfloat16"`` -> ``"bf16"``).

    Raises:
        ValueError: the name is not in ``DTYPES`` or ``DTYPE_ALIASES``.
    """
    name = text.strip().lower()
    name = DTYPE_ALIASES.get(name, name)
    if name not in DTYPES:
        allowed = ", ".join(list(DTYPES) + list(DTYPE_ALIASES))
        raise ValueError(f"dtype {text!r} is not supported; allowed: {allowed}")
    return name


def parse_device(text: str) -> Device:
    """Return the ``Device`` named by ``text``; raises ``ValueError`` for anything else."""
    name = text.strip().lower()
    if name not in DEVICES:
        raise ValueError(f"device {text!r} is not supported; allowed: {', '.join(DEVICES)}")
    return Device(name)


def parse_masks(text: str) -> tuple[str, ...]:
    """A mask kind (``causal``, ``window128``, ...) or ``both`` (causal and noncausal)."""
    name = text.strip().lower()
    return MASK_ALIASES.get(name) or (parse_mask_kind(name),)


COMBINATIONS = ("all", "pairwise")


def build_cases(
    shapes: list[Shape],
    dtypes: list[str],
    device: str,
    masks: list[str],
    combinations: str = "all",
    score_mods: list[ScoreMods] | None = None,
) -> list[AttentionCase]:
    """Cases of shapes x dtypes x masks x score modifications on one device, in that order.

    ``combinations``: ``all`` gives every combination; ``pairwise`` gives ``covering_pairs`` of
    them (every shape with every dtype and every mask, every dtype with every mask). ``ValueError``
    names any other value, and a combination ``AttentionCase`` refuses (an explicit query offset
    past the keys of a shape). ``score_mods``: None for plain cases only.
    """
    if combinations not in COMBINATIONS:
        raise ValueError(
            f"combinations {combinations!r}: expected one of {', '.join(COMBINATIONS)}"
        )
    factors = [shapes, dtypes, masks] + ([score_mods] if score_mods is not None else [])
    product = list(itertools.product(*factors))
    chosen = product if combinations == "all" else covering_pairs(product)
    return [
        AttentionCase(
            s.batch,
            s.num_heads,
            s.seq_len_q,
            s.seq_len_kv,
            s.head_dim,
            dtype,
            device,
            mask,
            s.num_kv_heads,
            score_mods=mods,
        )
        for s, dtype, mask, *more in chosen
        for mods in more or [mods_.NONE]
    ]


def covering_pairs(product: list[tuple]) -> list[tuple]:
    """A subset of ``product`` (tuples of one value per factor) in which every pair of values of
    two factors that occurs in ``product`` still occurs: a strength-2 covering array ("pairwise
    testing"), built greedily as AETG does (Cohen, Dalal, Fredman & Patton, IEEE TSE 1997): take
    the tuple, first in ``product`` order on ties, that covers the most pairs not yet covered,
    until none is left. Deterministic; keeps ``product`` order.
    """

    def pairs(row: tuple) -> set:
        return {(i, row[i], j, row[j]) for i, j in itertools.combinations(range(len(row)), 2)}

    uncovered = set().union(*map(pairs, product)) if product else set()
    chosen: list[int] = []
    while uncovered:
        best = max(range(len(product)), key=lambda k: (len(pairs(product[k]) & uncovered), -k))
        chosen.append(best)
        uncovered -= pairs(product[best])
    return [product[k] for k in sorted(chosen)]
