"""Hypothesis strategies for attention cases, and the suite's hypothesis profiles.

Users testing their own variants can reuse ``attention_cases()`` and ``seeds()``: a drawn
case plus a drawn seed builds the tensors (``perfsuite.attention.inputs.make_inputs``), so hypothesis
never draws tensors element by element (which trips its large-input health check).

Profiles, chosen with the environment variable ``PERFSUITE_HYPOTHESIS_PROFILE``
(default ``ci`` when ``CI`` is set, else ``dev``):

* ``dev``: 30 examples per property, random, no deadline (a deadline makes the outcome depend on
  the machine's speed and load: an example stalled by another process would fail);
* ``ci``: derandomized (the same examples on every run, so CI is never flaky), 200 examples
  per property, no deadline (a loaded 2-core runner can stall any single example);
* ``nightly``: 2000 examples per property, random, no deadline.
"""

from __future__ import annotations

import dataclasses
import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import math

from perfsuite.attention.cases import AttentionCase, Device
from perfsuite.attention.masks import PLAIN_KINDS, mask_kind
from perfsuite.attention.score_mods import ScoreMods

PROFILE_ENV = "PERFSUITE_HYPOTHESIS_PROFILE"
# head_dim values fused kernels dislike (not multiples of 8) next to usual and large ones.
HEAD_DIMS = (1, 3, 8, 12, 20, 64, 256)
# On CUDA: multiples of 8 up to 128, which every fused SDPA backend takes on sm80 and later (flash
# and memory-efficient need head_dim % 8 == 0 for 16-bit inputs; cuDNN takes up to 128), so drawn
# CUDA cases test numerics, not dispatch refusals, and no Triton kernel outgrows shared memory.
CUDA_HEAD_DIMS = (8, 24, 64, 128)
SCALES = (None, 0.05, 0.3, 1.0, 2.5)
# Caps below, at and above the O(1) scores of standard-normal inputs, and Gemma 2's 50.
SOFTCAPS = (0.5, 1.0, 2.5, 20.0, 50.0)
# mask kinds that hide some key from some query ("window" draws its size), from MaskKind
MASKS_HIDING_KEYS = tuple(k for k in PLAIN_KINDS if mask_kind(k).hides_keys) + ("window",)


def register_profiles() -> None:
    """Register ``dev``, ``ci`` and ``nightly`` (idempotent)."""
    slow_ok = [HealthCheck.too_slow]
    settings.register_profile("dev", max_examples=30, deadline=None, suppress_health_check=slow_ok)
    settings.register_profile(
        "ci",
        max_examples=200,
        derandomize=True,
        deadline=None,
        print_blob=True,
        suppress_health_check=slow_ok,
    )
    settings.register_profile(
        "nightly", max_examples=2000, deadline=None, suppress_health_check=slow_ok
    )


def load_profile() -> str:
    """Load the profile named by ``PERFSUITE_HYPOTHESIS_PROFILE``; returns its name.

    Raises:
        ValueError: the variable names no registered profile.
    """
    register_profiles()
    name = os.environ.get(PROFILE_ENV) or ("ci" if os.environ.get("CI") else "dev")
    if name not in ("dev", "ci", "nightly"):
        raise ValueError(f"{PROFILE_ENV}={name!r} is not a profile; allowed: dev, ci, nightly")
    settings.load_profile(name)
    return name


def seeds() -> st.SearchStrategy[int]:
    """Seeds for ``make_inputs``."""
    return st.integers(min_value=0, max_value=2**31 - 1)


@st.composite
def mask_kinds(draw, kinds: tuple[str, ...] = PLAIN_KINDS + ("window",)) -> str:
    """A mask kind; ``"window"`` becomes ``window<W>`` with a drawn ``W``."""
    kind = draw(st.sampled_from(kinds))
    return f"window{draw(st.integers(1, 8))}" if kind == "window" else kind


def softcaps() -> st.SearchStrategy[float]:
    """Softcap values (``SOFTCAPS``): caps that bite on O(1) scores, and Gemma 2's 50."""
    return st.sampled_from(SOFTCAPS)


def sink_logits(num_heads: int) -> st.SearchStrategy[list[float]]:
    """Per-head sink logits for your own tests: ``num_heads`` finite floats in ``[-20, 20]`` or ``-inf``
    (no sink). The suite's cases draw theirs from the seed (``score_mods.draw_sinks``)."""
    logit = st.one_of(
        st.floats(-20.0, 20.0, allow_nan=False, allow_infinity=False), st.just(-math.inf)
    )
    return st.lists(logit, min_size=num_heads, max_size=num_heads)


@st.composite
def score_mods(
    draw,
    alibi: bool | None = None,
    softcap: bool | None = None,
    sinks: bool | None = None,
    query_offset: bool = False,
) -> ScoreMods:
    """``ScoreMods``: each of ALiBi, a softcap (``softcaps``) and sinks drawn (None) or forced (True /
    False). ``query_offset=True`` asks ``attention_cases`` for an explicit query offset (drawn there,
    where the lengths are known; here 0)."""
    if softcap is None:
        cap = draw(st.one_of(st.none(), softcaps()))
    else:
        cap = draw(softcaps()) if softcap else None
    return ScoreMods(
        alibi=draw(st.booleans()) if alibi is None else alibi,
        softcap=cap,
        sinks=draw(st.booleans()) if sinks is None else sinks,
        query_offset=0 if query_offset else None,
    )


@st.composite
def attention_cases(
    draw,
    devices: tuple[str, ...] = (Device.CPU,),
    dtypes: tuple[str, ...] = ("fp32",),
    masks: tuple[str, ...] = PLAIN_KINDS + ("window",),
    max_seq_len: int = 24,
    contiguous: bool | None = None,
    mods: st.SearchStrategy[ScoreMods] | None = None,
) -> AttentionCase:
    """Small attention cases: GQA/MQA heads, differing and decode lengths, odd head_dim,
    custom scale, strided layouts, every mask kind (``window`` draws its size).

    ``head_dim`` is drawn from ``HEAD_DIMS`` on the CPU and from ``CUDA_HEAD_DIMS`` on CUDA.
    ``mods``: a strategy of score modifications (``score_mods()``), None for plain cases; an explicit
    query offset is drawn in ``[0, seq_len_kv - seq_len_q]`` (``seq_len_q <= seq_len_kv`` then), and
    ``causal_br`` becomes ``causal`` with it (the positions align causal kinds).
    """
    device = draw(st.sampled_from(devices))
    num_kv_heads = draw(st.sampled_from((1, 2)))
    groups = draw(st.sampled_from((1, 2, 3)))
    seq_len_q = draw(st.integers(1, max_seq_len))
    seq_len_kv = draw(st.one_of(st.just(seq_len_q), st.integers(1, max_seq_len)))
    drawn_mods = draw(mods) if mods is not None else ScoreMods()
    mask = draw(mask_kinds(masks))
    if drawn_mods.query_offset is not None:
        seq_len_q, seq_len_kv = min(seq_len_q, seq_len_kv), max(seq_len_q, seq_len_kv)
        offset = draw(st.integers(0, seq_len_kv - seq_len_q))
        drawn_mods = dataclasses.replace(drawn_mods, query_offset=offset)
        mask = "causal" if mask == "causal_br" else mask
    return AttentionCase(
        batch=draw(st.integers(1, 2)),
        num_heads=num_kv_heads * groups,
        seq_len_q=seq_len_q,
        seq_len_kv=seq_len_kv,
        head_dim=draw(st.sampled_from(CUDA_HEAD_DIMS if device == Device.CUDA else HEAD_DIMS)),
        dtype=draw(st.sampled_from(dtypes)),
        device=device,
        mask=mask,
        num_kv_heads=num_kv_heads,
        scale=draw(st.sampled_from(SCALES)),
        contiguous=draw(st.booleans()) if contiguous is None else contiguous,
        score_mods=drawn_mods,
    )


LAYOUT_MASKS = ("noncausal", "causal", "causal_br", "window")


def sequence_lengths(
    max_batch: int = 4, max_len: int = 24, min_len: int = 1
) -> st.SearchStrategy[list[int]]:
    """Lengths of a batch of sequences (1 to ``max_batch`` of them, each ``min_len``..``max_len``),
    for ``perfsuite.attention.layouts.pack``/``paginate``."""
    return st.lists(st.integers(min_len, max_len), min_size=1, max_size=max_batch)


@st.composite
def page_layouts(draw, max_batch: int = 4, max_len: int = 24) -> tuple[list[int], int, int]:
    """``(lengths, page_size, page_seed)``: a batch's lengths, a page size (1 to 8: a page can be
    larger than a sequence) and the seed of the page order ``paginate`` hands out."""
    return (
        draw(sequence_lengths(max_batch, max_len)),
        draw(st.integers(1, 8)),
        draw(seeds()),
    )


@st.composite
def block_tables(draw, max_batch: int = 4, max_len: int = 24) -> tuple[list[int], int, object]:
    """``(lengths, page_size, block_table)``: a block table (int32 ``[batch, max_pages]``) whose
    rows name distinct pages of a cache of ``sum(pages) + 1`` pages in a drawn order."""
    import torch

    from perfsuite.attention.layouts import pages_needed

    lengths, page_size, seed = draw(page_layouts(max_batch, max_len))
    needed = pages_needed(lengths, page_size)
    order = torch.randperm(sum(needed) + 1, generator=torch.Generator().manual_seed(seed))
    table = torch.zeros(len(lengths), max(needed), dtype=torch.int32)
    taken = 0
    for b, pages in enumerate(needed):
        table[b, :pages] = order[taken : taken + pages]
        taken += pages
    return lengths, page_size, table


@st.composite
def layout_cases(
    draw,
    storages: tuple[str, ...] = ("padded", "packed", "paged"),
    masks: tuple[str, ...] = LAYOUT_MASKS,
    max_seq_len: int = 24,
) -> AttentionCase:
    """Small layout cases (``perfsuite.attention.layouts``) on the CPU in fp32: padded, packed or
    paged storage (or ``packedpaged``: packed chunks over a paged cache, when ``storages`` names it)
    with a drawn length distribution, GQA heads, prefill or (paged) decode/chunked prefill,
    sometimes a value head dim of its own."""
    from perfsuite.attention.layouts import Layout, Lengths, Storage

    storage = Storage(draw(st.sampled_from(storages)))
    seq_len_kv = draw(st.integers(2, max_seq_len))
    paged = storage in (Storage.PAGED, Storage.PACKED_PAGED)
    seq_len_q = draw(st.integers(1, min(4, seq_len_kv))) if paged else seq_len_kv
    num_kv_heads = draw(st.sampled_from((1, 2)))
    head_dim = draw(st.sampled_from((3, 8, 12)))
    return AttentionCase(
        batch=draw(st.integers(2, 4)),
        num_heads=num_kv_heads * draw(st.sampled_from((1, 2))),
        seq_len_q=seq_len_q,
        seq_len_kv=seq_len_kv,
        head_dim=head_dim,
        dtype="fp32",
        device=Device.CPU,
        mask=draw(mask_kinds(masks)),
        num_kv_heads=num_kv_heads,
        layout=Layout(
            storage=storage,
            lengths=draw(st.sampled_from(tuple(Lengths))),
            page_size=draw(st.integers(1, 8)) if paged else None,
            head_dim_v=draw(st.sampled_from((None, 4))),
        ),
    )


@st.composite
def chunked_prefill_batches(
    draw, max_batch: int = 4, max_len: int = 24, max_chunk: int = 6
) -> tuple[list[int], list[int], int, object]:
    """``(q_lens, kv_lens, page_size, block_table)``: a batch for chunked prefill over a paged cache
    (``packedpaged`` storage): each sequence's context ``kv_len`` (1..``max_len``) with its own number
    of new tokens ``1 <= q_len <= min(kv_len, max_chunk)`` (decode steps and prefill chunks mixed),
    and a block table over a cache in a drawn page order (as ``block_tables``)."""
    import torch

    from perfsuite.attention.layouts import pages_needed

    kv_lens = draw(sequence_lengths(max_batch, max_len))
    q_lens = [draw(st.integers(1, min(n, max_chunk))) for n in kv_lens]
    page_size = draw(st.integers(1, 8))
    needed = pages_needed(kv_lens, page_size)
    order = torch.randperm(sum(needed) + 1, generator=torch.Generator().manual_seed(draw(seeds())))
    table = torch.zeros(len(kv_lens), max(needed), dtype=torch.int32)
    taken = 0
    for b, pages in enumerate(needed):
        table[b, :pages] = order[taken : taken + pages]
        taken += pages
    return q_lens, kv_lens, page_size, table
