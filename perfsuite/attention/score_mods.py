"""Score modifications a case can carry: ALiBi, tanh softcapping, attention sinks, query positions.

A ``ScoreMods`` says which modifications a case's scores get; the values a function receives
(``perfsuite.attention.contract.FORMS``: ``alibi_slopes``, ``softcap``, ``sinks``,
``query_positions``) are built here from the case and its seed (``form_values``), and the float64
reference applies them (``perfsuite.attention.reference``) in one order, stated once:

    scores = (query @ key^T) * scale                    # scale
    scores = softcap * tanh(scores / softcap)           # softcap (Gemma 2)
    scores = scores - alibi_slopes[h] * (pos_i - j)     # bias: ALiBi, then an additive mask
    scores[hidden] = -inf                               # mask (causal kinds by query position)
    weights = softmax([scores, sinks[h]])[..., :-1]     # sink: joins the denominator only
    output = weights @ value

**Query positions.** Query row ``i`` sits at key position ``pos_i = query_offset + i``. Without an
explicit offset the mask's alignment sets it: ``0`` for top-left ``causal``, ``seq_len_kv -
seq_len_q`` (bottom-right, a KV cache) for every other kind. An explicit offset (``-qoff96`` in
the case id) aligns causal kinds by the positions too (``causal`` with ``query_offset=96``: query
``i`` sees keys ``j <= 96 + i``): a chunk of queries inside a cache longer than what is filled.
Every batch row has the same positions.

Sources: ALiBi (Press, Smith & Lewis, "Train Short, Test Long", ICLR 2022, section 3: bias
``-m_h * (i - j)``; the geometric slopes of ``alibi_slopes`` follow their code and BLOOM's
``build_alibi_tensor`` in transformers); softcapping (Gemma 2 report, 2024, section 2:
``soft_cap * tanh(logits / soft_cap)``, ``attn_logit_softcapping = 50.0`` in its config); sinks
(gpt-oss model card, 2025: a learned per-head logit in the softmax denominator; the reference
implementation concatenates it to the scores and drops its column after the softmax).
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

import torch

from perfsuite.attention.contract import Form, form_keyword_values

# The id fragment, right after the mask/scale part of a case id: -alibi-softcap50-sinks-qoff96.
ID_PATTERN = r"(?P<alibi>-alibi)?(?:-softcap(?P<softcap>[0-9.e+]+?))?(?P<sinks>-sinks)?(?:-qoff(?P<qoff>\d+))?"
_SPEC_RE = re.compile(r"^" + ID_PATTERN + r"$")


@dataclasses.dataclass(frozen=True)
class ScoreMods:
    """Which modifications a case's scores get (see the module docstring for order and meaning).

    ``alibi``: a per-head linear position bias with the geometric slopes (``alibi_slopes``).
    ``softcap``: the cap of ``softcap * tanh(scores / softcap)``, a float > 0, or None.
    ``sinks``: a per-head sink logit in the softmax denominator, drawn from the case's seed
    (``draw_sinks``). ``query_offset``: the key position of query row 0, or None for the mask's
    alignment (``query_offset_for``). Raises ``ValueError`` for a cap that is not a finite number
    above 0 or a negative offset.
    """

    alibi: bool = False
    softcap: float | None = None
    sinks: bool = False
    query_offset: int | None = None

    def __post_init__(self):
        if self.softcap is not None and not (math.isfinite(self.softcap) and self.softcap > 0):
            raise ValueError(f"softcap={self.softcap!r}; the cap must be a finite number above 0")
        if self.query_offset is not None and self.query_offset < 0:
            raise ValueError(
                f"query_offset={self.query_offset}; a query position is a key index, at least 0"
            )

    @property
    def forms(self) -> frozenset[Form]:
        """The contract's forms these modifications carry (``Form.QUERY_POSITIONS`` only for an
        explicit offset: ALiBi's keywords include the positions anyway)."""
        found = {
            Form.ALIBI: self.alibi,
            Form.SOFTCAP: self.softcap is not None,
            Form.SINKS: self.sinks,
            Form.QUERY_POSITIONS: self.query_offset is not None,
        }
        return frozenset(form for form, carried in found.items() if carried)

    @property
    def id_suffix(self) -> str:
        """``-alibi-softcap50-sinks-qoff96`` (each part only when set), ``""`` for none."""
        parts = [
            "-alibi" if self.alibi else "",
            f"-softcap{self.softcap:g}" if self.softcap is not None else "",
            "-sinks" if self.sinks else "",
            f"-qoff{self.query_offset}" if self.query_offset is not None else "",
        ]
        return "".join(parts)

    @property
    def spec(self) -> str:
        """How a setting writes these modifications: ``alibi-softcap50``, or ``none``."""
        return self.id_suffix.lstrip("-") or "none"

    def describe(self) -> str:
        """``ALiBi (geometric slopes), softcap 50, sinks``, or ``no score modification``."""
        parts = [
            "ALiBi (geometric slopes)" if self.alibi else "",
            f"softcap {self.softcap:g}" if self.softcap is not None else "",
            "sinks (seeded per-head logits)" if self.sinks else "",
            f"query positions from {self.query_offset}" if self.query_offset is not None else "",
        ]
        return ", ".join(p for p in parts if p) or "no score modification"


NONE = ScoreMods()


def from_id_groups(groups: dict[str, str | None]) -> ScoreMods:
    """The ``ScoreMods`` of the ``ID_PATTERN`` groups of a matched case id."""
    return ScoreMods(
        alibi=bool(groups.get("alibi")),
        softcap=float(groups["softcap"]) if groups.get("softcap") else None,
        sinks=bool(groups.get("sinks")),
        query_offset=int(groups["qoff"]) if groups.get("qoff") else None,
    )


def parse_score_mods(text: str) -> ScoreMods:
    """``none``, or modifications joined by ``-`` in this order: ``alibi``, ``softcap<cap>``,
    ``sinks``, ``qoff<offset>`` (``alibi-softcap50-sinks``). ``ValueError`` names the value."""
    name = text.strip().lower()
    if name in ("none", ""):
        return NONE
    match = _SPEC_RE.match("-" + name)
    if not match or not any(match.groupdict().values()):
        raise ValueError(
            f"score modifications {text!r} are not 'none' or alibi, softcap<cap>, sinks, qoff<offset> "
            "joined by '-' in that order (e.g. alibi-softcap50-sinks)"
        )
    return from_id_groups(match.groupdict())


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """The standard ALiBi slopes, float32 ``[num_heads]``: ``2 ** (-8 * h / n)`` for ``h = 1..n`` when
    ``n = num_heads`` is a power of two; otherwise those of the closest power of two ``n`` below, then
    every other slope of ``2n`` (Press et al. 2022, their ``get_slopes``; BLOOM's
    ``build_alibi_tensor``). Raises ``ValueError`` for ``num_heads < 1``."""
    if num_heads < 1:
        raise ValueError(f"num_heads={num_heads}; ALiBi needs at least one head")
    closest = 2 ** math.floor(math.log2(num_heads))
    slopes = [2.0 ** (-8.0 * h / closest) for h in range(1, closest + 1)]
    extra = [2.0 ** (-8.0 * h / (2 * closest)) for h in range(1, 2 * closest + 1, 2)]
    return torch.tensor(slopes + extra[: num_heads - closest], dtype=torch.float32)


def draw_sinks(generator: torch.Generator, num_heads: int, seq_len_kv: int) -> torch.Tensor:
    """Sink logits, float32 ``[num_heads]``: ``log(seq_len_kv) + N(0, 1)`` from ``generator``.

    A score of standard-normal query and key is O(1), so ``log(seq_len_kv)`` puts the sink's weight
    on the order of all keys' together: a sink computed wrongly shows in any dtype's tolerance.
    """
    return math.log(seq_len_kv) + torch.randn(num_heads, generator=generator)


def query_offset_for(
    mods: ScoreMods, bottom_right_default: bool, seq_len_q: int, seq_len_kv: int
) -> int:
    """The key position of query row 0: ``mods.query_offset`` when set, else ``seq_len_kv -
    seq_len_q`` when ``bottom_right_default`` (every mask kind but top-left ``causal``), else 0."""
    if mods.query_offset is not None:
        return mods.query_offset
    return seq_len_kv - seq_len_q if bottom_right_default else 0


def query_positions(offset: int, batch: int, seq_len_q: int, device: str) -> torch.Tensor:
    """int64 ``[batch, seq_len_q]``: ``offset + i`` for query row ``i`` of every batch row."""
    return (torch.arange(seq_len_q, device=device) + offset).expand(batch, seq_len_q).contiguous()


def alibi_bias(
    slopes: torch.Tensor, positions: torch.Tensor, seq_len_kv: int, dtype: torch.dtype
) -> torch.Tensor:
    """``-slopes[h] * (positions[b, i] - j)`` as ``[batch, num_heads, seq_len_q, seq_len_kv]`` in ``dtype``.

    ``slopes``: ``[num_heads]``; ``positions``: ``[batch, seq_len_q]`` key indices of the queries.
    """
    keys = torch.arange(seq_len_kv, device=positions.device)
    distance = (positions[:, None, :, None] - keys).to(dtype)
    return -slopes.to(device=positions.device, dtype=dtype)[None, :, None, None] * distance


def form_values(
    mods: ScoreMods,
    *,
    batch: int,
    num_heads: int,
    seq_len_q: int,
    seq_len_kv: int,
    offset: int,
    device: str,
    generator: torch.Generator,
) -> dict[str, Any]:
    """The keyword values of the forms ``mods`` carries, as a function receives them
    (``perfsuite.attention.contract.FORMS``): ``alibi_slopes`` float32 ``[num_heads]``, ``softcap``
    float, ``sinks`` float32 ``[num_heads]``, ``query_positions`` int64 ``[batch, seq_len_q]``.
    Sinks are drawn from ``generator`` (after the case's other tensors)."""
    values: dict[str, Any] = {
        "alibi_slopes": alibi_slopes(num_heads).to(device),
        "query_positions": query_positions(offset, batch, seq_len_q, device),
    }
    if mods.softcap is not None:
        values["softcap"] = float(mods.softcap)
    if mods.sinks:
        values["sinks"] = draw_sinks(generator, num_heads, seq_len_kv).to(device)
    return form_keyword_values(mods.forms, values)


def describe_at(forms: dict[str, Any], head: int, query: int, batch: int = 0) -> str:
    """The modifications a case's keyword values (``AttentionInputs.forms``) apply at one output
    element, for a failure message: ``ALiBi slope of head 3 = 0.0625 (query 0 at key position 63);
    softcap 50; sink logit of head 3 = 4.1``. Empty when there are none."""
    parts = []
    if "query_positions" in forms:
        position = int(forms["query_positions"][batch, query])
        where = f" (query {query} at key position {position})"
    else:
        where = ""
    if "alibi_slopes" in forms:
        slope = float(forms["alibi_slopes"][head])
        parts.append(f"ALiBi slope of head {head} = {slope:.6g}{where}")
    elif where:
        parts.append(f"query positions{where}")
    if "softcap" in forms:
        parts.append(f"softcap {forms['softcap']:g} (scores capped as softcap * tanh(s / softcap))")
    if "sinks" in forms:
        parts.append(
            f"sink logit of head {head} = {float(forms['sinks'][head]):.6g} (in the softmax "
            "denominator only)"
        )
    return "; ".join(parts)
