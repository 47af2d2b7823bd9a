"""The float64 reference for layout cases, one sequence at a time, and the per-sequence comparison.

Each sequence of a layout case (``perfsuite.attention.layouts``) is taken back out of the inputs
the function was given (unpacked with ``cu_seqlens``, gathered through the block table, cut from
the padded batch, dequantized with the descales) and attended on its own by the dense float64
reference (``perfsuite.attention.reference.reference_attention``) under the case's mask kind on
its own lengths. A function's output is cut into the same sequences and compared with them one
by one; a failure names the sequence, its lengths and the worst element, e.g. ``sequence 2 of 4
(q_len 1, kv_len 37): worst element at [head, query, dim] = [3, 0, 5]``.

Tolerances follow ``perfsuite.attention.reference``: ``atol = max(floor, 2 * error of the plain
computation in the case's dtype)`` per sequence, the plain computation run on the same (for FP8:
dequantized) values; only rows a sequence owns are compared (the padded rows of a padded batch
are not part of the answer).
"""

from __future__ import annotations

import dataclasses

import torch

from perfsuite.attention import layouts
from perfsuite.attention.cases import AttentionCase
from perfsuite.attention.inputs import AttentionInputs, sequence_allowed
from perfsuite.attention.layouts import Storage
from perfsuite.attention.masks import compose
from perfsuite.attention.reference import TOLERANCES, Comparison, reference_attention


@dataclasses.dataclass(frozen=True)
class Sequence:
    """One sequence of a layout case: ``index`` in the batch, its lengths, and its inputs as a
    dense batch of one (``[1, heads, q_len, head_dim]``, key/value ``[1, kv_heads, kv_len, dim]``)
    in float64 (FP8 dequantized) with its own mask. ``first_row``: where its queries start in a
    packed output (None for the other storages)."""

    index: int
    q_len: int
    kv_len: int
    first_row: int | None
    inputs: AttentionInputs


def lengths_of(case: AttentionCase) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(q_lens, kv_lens)`` of ``case``'s sequences (``layouts.sequence_lengths``)."""
    return layouts.sequence_lengths(case.layout, case.batch, case.seq_len_q, case.seq_len_kv)


def sequences(
    case: AttentionCase, inputs: AttentionInputs, dtype: torch.dtype = torch.float64
) -> list[Sequence]:
    """Each sequence of ``case`` recovered from ``inputs`` (see the module docstring), in ``dtype``."""
    layout, forms = case.layout, inputs.forms
    q, k, v = inputs.query, inputs.key, inputs.value
    if layout.fp8:
        q = layouts.dequantize_fp8(q, forms["q_descale"], torch.float64)
        k = layouts.dequantize_fp8(k, forms["k_descale"], torch.float64)
        v = layouts.dequantize_fp8(v, forms["v_descale"], torch.float64)
    q_lens, kv_lens = lengths_of(case)
    q_starts = [int(x) for x in layouts.cu_seqlens(q_lens)[:-1]]
    kv_starts = [int(x) for x in layouts.cu_seqlens(kv_lens)[:-1]]
    found = []
    for b, (q_len, kv_len) in enumerate(zip(q_lens, kv_lens)):
        if layout.storage == Storage.PACKED_PAGED:  # packed queries over a paged cache
            qs = q[q_starts[b] : q_starts[b] + q_len].transpose(0, 1)
            ks = layouts.gather_pages(k, forms["block_table"], b, kv_len)
            vs = layouts.gather_pages(v, forms["block_table"], b, kv_len)
        elif layout.storage == Storage.PACKED:
            qs = q[q_starts[b] : q_starts[b] + q_len].transpose(0, 1)
            ks = k[kv_starts[b] : kv_starts[b] + kv_len].transpose(0, 1)
            vs = v[kv_starts[b] : kv_starts[b] + kv_len].transpose(0, 1)
        elif layout.storage == Storage.PAGED:
            table = forms["block_table"]
            qs = q[b, :, :q_len]
            ks = layouts.gather_pages(k, table, b, kv_len)
            vs = layouts.gather_pages(v, table, b, kv_len)
        else:
            qs, ks, vs = q[b, :, :q_len], k[b, :, :kv_len], v[b, :, :kv_len]
        allowed = sequence_allowed(case.mask, q_len, kv_len, str(q.device))
        mask = compose(case.mask, None if case.mask == "noncausal" else allowed, None)
        one = AttentionInputs(*(t.unsqueeze(0).to(dtype) for t in (qs, ks, vs)), mask, inputs.scale)
        first = q_starts[b] if layout.queries_packed else None
        found.append(Sequence(b, q_len, kv_len, first, one))
    return found


def output_sequence(case: AttentionCase, output: torch.Tensor, sequence: Sequence) -> torch.Tensor:
    """Sequence ``sequence``'s rows of a function's output, ``[1, heads, q_len, head_dim_v]``."""
    if sequence.first_row is not None:
        rows = output[sequence.first_row : sequence.first_row + sequence.q_len]
        return rows.transpose(0, 1).unsqueeze(0)
    return output[sequence.index : sequence.index + 1, :, : sequence.q_len]


def reference_sequences(case: AttentionCase, inputs: AttentionInputs) -> list[torch.Tensor]:
    """The float64 reference output of each sequence, ``[1, heads, q_len, head_dim_v]``."""
    return [reference_attention(s.inputs) for s in sequences(case, inputs)]


def compare_sequences(
    case: AttentionCase, inputs: AttentionInputs, output: torch.Tensor, label: str
) -> Comparison:
    """Compare ``output`` (shaped as the contract says for ``case``) with the per-sequence
    float64 reference; the first failing sequence is named with its lengths and worst element
    (``[head, query, dim]``, query counted within the sequence; for packed outputs also the row)."""
    dtype = case.torch_dtype
    floor_atol, rtol = TOLERANCES[dtype]
    worst_error = 0.0
    batch = case.batch
    for seq in sequences(case, inputs):
        got = output_sequence(case, output, seq).detach().to(torch.float64)
        want = reference_attention(seq.inputs)
        plain = reference_attention(
            dataclasses.replace(
                seq.inputs,
                query=seq.inputs.query.to(dtype),
                key=seq.inputs.key.to(dtype),
                value=seq.inputs.value.to(dtype),
            ),
            dtype,
        ).to(torch.float64)
        atol = max(floor_atol, 2 * float((plain - want).abs().max()) if want.numel() else 0.0)
        where = f"{label}: sequence {seq.index} of {batch} (q_len {seq.q_len}, kv_len {seq.kv_len})"
        bad = ~torch.isfinite(got)
        if bad.any():
            index = [int(i) for i in bad.nonzero()[0][1:]]
            return Comparison(
                float("inf"),
                f"{where}: {int(bad.sum())} non-finite outputs; first at [head, query, dim] = "
                f"{index}{_row(seq, index)}",
            )
        error = (got - want).abs()
        excess = error - (atol + rtol * want.abs())
        worst_error = max(worst_error, float(error.max()) if error.numel() else 0.0)
        if excess.numel() and float(excess.max()) > 0:
            index = [int(i) for i in torch.unravel_index(excess.argmax(), excess.shape)][1:]
            element = (0, *index)
            return Comparison(
                float(error.max()),
                f"{where}: not within atol={atol:.3g}, rtol={rtol} of the float64 reference; worst "
                f"element at [head, query, dim] = {index}{_row(seq, index)}: got "
                f"{got[element].item()!r}, expected {want[element].item()!r}",
            )
    return Comparison(worst_error, None)


def _row(seq: Sequence, index: list[int]) -> str:
    """`` (packed row R)`` for a packed sequence's query, else nothing."""
    return f" (packed row {seq.first_row + index[1]})" if seq.first_row is not None else ""
