"""Every copy of one profiled step counted by what it copied: scores, keys/values, a cast, or other.

The trace's copies (``WindowSummary.copies``: the outermost ``aten::copy_``/``aten::clone`` ops on
the CPU lane, Memcpy and copy kernels on the device lane) are each given one kind, by the
tensor they wrote (its dims, element types and bytes, as the profiler recorded them):

* ``"cast"``: the copy changes the element type (``CopyRecord.dtype_conversion``): an fp32 softmax
  in a bf16 model, a block table cast from int32 to int64; whatever its size;
* ``"score"``: a floating tensor of the score matrix's size, or a query or key chunk of it
  (``score_accounting.score_fraction``): a duplicate of the scores;
* ``"K/V"``: a floating tensor of the key's or value's size (``head_dim`` or the value head dim
  last), with the key/value heads or expanded to the query heads (grouped-query attention done
  with ``repeat_interleave``, ``expand(...).reshape`` or ``repeat``), for the case's tokens:
  ``batch * seq_len_kv``, the sequences' keys (packed), the slots of a paged cache, or the block
  table's pages gathered dense. The trace records no tensor identity, so a copy of a query or an
  output of that size (self-attention with as many key/value heads as query heads) counts here too;
* ``"other"``: any other copy (a bool or integer tensor of score size: a mask; a small tensor).

Only the case's own lane counts (``cpu`` for CPU cases, ``device`` for CUDA cases), so an ATen
copy and the kernel it launched are one copy. A 0-dim copy is not counted: it is a Python number
made a tensor of the op's type (``masked_fill_(mask, float("-inf"))`` casts the fill value from
double), no data of the step. Bytes are the trace's (0 where it recorded none).
"""

from __future__ import annotations

import math

from perfsuite.attention.cases import AttentionCase
from perfsuite.attention.layouts import pages_needed, sequence_lengths
from perfsuite.measure.score_accounting import score_fraction
from perfsuite.trace.events import CopyRecord, WindowSummary

COPY_KINDS = ("score", "K/V", "cast", "other")
# profiler "Input type" words of floating tensors (float, double, c10::Half, c10::BFloat16, c10::Float8_*)
_FLOATING_WORDS = ("float", "double", "Half", "BFloat16", "Float8")


def kv_element_counts(case: AttentionCase) -> frozenset[int]:
    """Element counts of a key or value tensor of ``case``: ``tokens * heads * dim`` for tokens in
    (``batch * seq_len_kv``, the sequences' summed key lengths, a paged cache's slots with and without
    its spare page, the block table's pages gathered dense), heads in (``num_kv_heads``,
    ``num_heads``), dim in (``head_dim``, the value head dim)."""
    _, kv_lengths = sequence_lengths(case.layout, case.batch, case.seq_len_q, case.seq_len_kv)
    tokens = {case.batch * case.seq_len_kv, sum(kv_lengths)}
    page = case.layout.page_size
    if page:
        pages = pages_needed(kv_lengths, page)
        tokens |= {sum(pages) * page, (sum(pages) + 1) * page, case.batch * max(pages) * page}
    dims = {case.head_dim, case.layout.head_dim_v or case.head_dim}
    return frozenset(
        t * h * d for t in tokens for h in (case.num_kv_heads, case.num_heads) for d in dims
    )


def _floating(record: CopyRecord) -> bool:
    """Whether the copy wrote a floating tensor (its destination's type); True when not recorded."""
    return not record.types or any(word in record.types[0] for word in _FLOATING_WORDS)


def copy_kind(record: CopyRecord, case: AttentionCase) -> str:
    """The ``COPY_KINDS`` kind of one copy of a step of ``case`` (module docstring's rules)."""
    if record.dtype_conversion:
        return "cast"
    if record.shape is None or not _floating(record):
        return "other"
    if score_fraction(record.shape, case.score_shape, case.head_dim):
        return "score"
    dims = {case.head_dim, case.layout.head_dim_v or case.head_dim}
    if (
        record.shape
        and record.shape[-1] in dims
        and math.prod(record.shape) in kv_element_counts(case)
    ):
        return "K/V"
    return "other"


def copies_by_kind(summary: WindowSummary, case: AttentionCase) -> dict[str, dict[str, int]]:
    """``{kind: {"count": copies, "bytes": bytes written}}`` for every ``COPY_KINDS`` kind (zeros
    included), over the copies of ``summary`` (one profiled step) on ``case``'s lane, 0-dim ones left out."""
    lane = "device" if case.device == "cuda" else "cpu"
    found = {kind: {"count": 0, "bytes": 0} for kind in COPY_KINDS}
    for record in summary.copies:
        if record.lane != lane or record.shape == ():
            continue
        kind = found[copy_kind(record, case)]
        kind["count"] += 1
        kind["bytes"] += record.size_bytes or 0
    return found
