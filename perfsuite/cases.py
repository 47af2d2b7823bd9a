"""Attention cases: one shape, dtype, device and masking choice to benchmark.

A case is what a parametrized test runs a variant on. Shapes are written the way
the field writes them, ``batch x num_heads x seq_len x head_dim`` (``8x16x1024x64``),
and every parsing function raises ``ValueError`` with a message that names the bad
value and what is allowed; the pytest plugin turns that into a ``pytest.UsageError``
naming where the value came from.
"""

from __future__ import annotations

import dataclasses
import re

import torch

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
DEVICES = ("cpu", "cuda")
CAUSAL_CHOICES = {"causal": (True,), "noncausal": (False,), "both": (True, False)}

_SHAPE_RE = re.compile(r"^(\d+)x(\d+)x(\d+)x(\d+)$")


@dataclasses.dataclass(frozen=True)
class AttentionCase:
    """One input configuration for attention.

    Query has shape ``[batch, num_heads, seq_len_q, head_dim]``; key and value have
    shape ``[batch, num_heads, seq_len_kv, head_dim]``. ``dtype`` is a short name from
    ``DTYPES`` (``"bf16"``), ``device`` one of ``DEVICES``. ``causal`` masks key ``j``
    for query ``i`` when ``j > i`` (top-left alignment, what ``is_causal=True`` does).
    """

    batch: int
    num_heads: int
    seq_len_q: int
    seq_len_kv: int
    head_dim: int
    dtype: str
    device: str
    causal: bool

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def shape_id(self) -> str:
        """``b8h16s1024d64``; ``b1h8q1k1024d64`` when query and key lengths differ."""
        if self.seq_len_q == self.seq_len_kv:
            seq = f"s{self.seq_len_q}"
        else:
            seq = f"q{self.seq_len_q}k{self.seq_len_kv}"
        return f"b{self.batch}h{self.num_heads}{seq}d{self.head_dim}"

    @property
    def id(self) -> str:
        """Stable key for tests and stored results: ``b8h16s1024d64-bf16-causal-cuda``."""
        mask = "causal" if self.causal else "noncausal"
        return f"{self.shape_id}-{self.dtype}-{mask}-{self.device}"

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


def parse_shape(text: str) -> tuple[int, int, int, int]:
    """Parse ``"BxHxSxD"`` into ``(batch, num_heads, seq_len, head_dim)``.

    Raises:
        ValueError: not four ``x``-separated integers, or any of them below 1.
    """
    match = _SHAPE_RE.match(text.strip())
    if not match:
        raise ValueError(
            f"shape {text!r} is not batch x num_heads x seq_len x head_dim; "
            "write four positive integers joined by 'x', e.g. 8x16x1024x64"
        )
    values = tuple(int(g) for g in match.groups())
    names = ("batch", "num_heads", "seq_len", "head_dim")
    for name, value in zip(names, values):
        if value < 1:
            raise ValueError(f"shape {text!r} has {name}={value}; {name} must be at least 1")
    return values  # type: ignore[return-value]


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


def parse_device(text: str) -> str:
    """Return ``"cpu"`` or ``"cuda"``; raises ``ValueError`` for anything else."""
    name = text.strip().lower()
    if name not in DEVICES:
        raise ValueError(f"device {text!r} is not supported; allowed: {', '.join(DEVICES)}")
    return name


def parse_causal(text: str) -> tuple[bool, ...]:
    """Map ``causal``/``noncausal``/``both`` to the causal flags to run."""
    name = text.strip().lower()
    if name not in CAUSAL_CHOICES:
        raise ValueError(f"causal choice {text!r} is not supported; allowed: {', '.join(CAUSAL_CHOICES)}")
    return CAUSAL_CHOICES[name]


def build_cases(
    shapes: list[tuple[int, int, int, int]],
    dtypes: list[str],
    device: str,
    causal_flags: tuple[bool, ...],
) -> list[AttentionCase]:
    """All combinations of shapes x dtypes x causal flags on one device, in that order."""
    return [
        AttentionCase(b, h, s, s, d, dtype, device, causal)
        for (b, h, s, d) in shapes
        for dtype in dtypes
        for causal in causal_flags
    ]
