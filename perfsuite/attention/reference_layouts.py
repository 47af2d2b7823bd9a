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

Gradients (padded and packed cases, and a value head dim of its own; paged, split-KV and FP8 cases
are inference only): ``backward`` is seeded with a ``grad_output`` shaped as the output
(``perfsuite.attention.inputs.make_grad_output``: packed ``[total_q, H, Dv]``; padded with zeros in
the padded query rows). Each sequence's ``grad_query``/``grad_key``/``grad_value`` are the float64
reference's gradients of that sequence alone, in the layout of the inputs (packed: the rows of the
packed tensors, ``[total, heads, dim]``). The gradient of a padding position (a padded query row,
a key/value position past the sequence's ``kv_len``) is zero: no output depends on it, so a
variant must return zeros there (within the gradient's ``atol``). Tolerances follow
``perfsuite.attention.reference.compare_gradients`` per sequence and per gradient.

A split-KV case's failure is followed by what the same function gives with ``num_splits=1``
(``perfsuite.measure.correctness.split_kv_hint``): right there means the merge across splits is
what is wrong.
"""

from __future__ import annotations

import dataclasses

import torch

from perfsuite.attention import layouts
from perfsuite.attention.cases import AttentionCase
from perfsuite.attention.inputs import AttentionInputs, sequence_allowed
from perfsuite.attention.layouts import Storage
from perfsuite.attention.masks import compose
from perfsuite.attention.reference import (
    ERROR_FACTORS,
    GRADIENT_NAMES,
    TOLERANCES,
    Comparison,
    reference_attention,
    reference_gradients,
)


@dataclasses.dataclass(frozen=True)
class Sequence:
    """One sequence of a layout case: ``index`` in the batch, its lengths, and its inputs as a
    dense batch of one (``[1, heads, q_len, head_dim]``, key/value ``[1, kv_heads, kv_len, dim]``)
    in float64 (FP8 dequantized) with its own mask. ``first_row``: where its queries start in a
    packed output (None for the other storages); ``first_kv_row``: where its keys/values start in
    packed key/value (None for the other storages)."""

    index: int
    q_len: int
    kv_len: int
    first_row: int | None
    inputs: AttentionInputs
    first_kv_row: int | None = None


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
        first_kv = kv_starts[b] if layout.storage == Storage.PACKED else None
        found.append(Sequence(b, q_len, kv_len, first, one, first_kv))
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


def input_sequence(
    case: AttentionCase, tensor: torch.Tensor, seq: Sequence, name: str
) -> torch.Tensor:
    """Sequence ``seq``'s part of a padded or packed ``tensor`` shaped as ``name``'s input (``query``,
    ``key``, ``value``) or its gradient, as ``[1, heads, length, dim]``. ``ValueError`` for paged or
    FP8 storage (inference only: no gradients)."""
    is_query = name in ("query", "grad_query")
    length = seq.q_len if is_query else seq.kv_len
    if case.layout.storage == Storage.PACKED:
        first = seq.first_row if is_query else seq.first_kv_row
        return tensor[first : first + length].transpose(0, 1).unsqueeze(0)
    if case.layout.storage == Storage.PAGED:
        raise ValueError(f"case {case.id} is paged: its key/value are pages, not sequences")
    return tensor[seq.index : seq.index + 1, :, :length]


def _sequence_gradients(
    case: AttentionCase, seq: Sequence, grad_output: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, ...]:
    """``seq``'s reference gradients ``[1, H, q_len, D]``, ``[1, Hkv, kv_len, D]`` x2 in ``dtype``."""
    seed = output_sequence(case, grad_output, seq)
    return reference_gradients(seq.inputs, seed.to(dtype), dtype)


def reference_gradients_in_layout(
    case: AttentionCase,
    inputs: AttentionInputs,
    grad_output: torch.Tensor,
    dtype: torch.dtype = torch.float64,
) -> tuple[torch.Tensor, ...]:
    """The reference's ``(grad_query, grad_key, grad_value)`` of a padded or packed case, each
    shaped as its input (``[total, heads, dim]`` packed, ``[B, heads, S, dim]`` padded) in ``dtype``:
    per sequence (module docstring), zeros at padding positions. ``grad_output``: shaped as the output."""
    found = [
        torch.zeros(t.shape, dtype=dtype, device=t.device)
        for t in (inputs.query, inputs.key, inputs.value)
    ]
    for seq in sequences(case, inputs, dtype):
        grads = _sequence_gradients(case, seq, grad_output, dtype)
        for name, total, grad in zip(("query", "key", "value"), found, grads):
            input_sequence(case, total, seq, name).copy_(grad)
    return tuple(found)


def compare_sequence_gradients(
    case: AttentionCase,
    inputs: AttentionInputs,
    grad_output: torch.Tensor,
    gradients: tuple[torch.Tensor, ...],
    label: str,
) -> Comparison:
    """Compare a variant's ``(grad_query, grad_key, grad_value)`` (shaped as query/key/value) with
    the per-sequence float64 reference (module docstring). The first failure names the gradient, the
    sequence with its lengths and the worst element ``[head, position, dim]`` (position within the
    sequence; for packed tensors also the row); a padded case's padding positions must hold zeros."""
    dtype = case.torch_dtype
    floor_atol, rtol = TOLERANCES[dtype]
    worst_error = 0.0
    batch = case.batch
    plain_sequences = sequences(case, inputs, dtype)
    for seq, low in zip(sequences(case, inputs), plain_sequences):
        want = _sequence_gradients(case, seq, grad_output, torch.float64)
        plain = _sequence_gradients(case, low, grad_output, dtype)
        where = f"sequence {seq.index} of {batch} (q_len {seq.q_len}, kv_len {seq.kv_len})"
        for name, actual, expected, rough in zip(GRADIENT_NAMES, gradients, want, plain):
            got = input_sequence(case, actual, seq, name).detach().to(torch.float64)
            error_of_plain = (
                float((rough.to(torch.float64) - expected).abs().max()) if expected.numel() else 0.0
            )
            atol = max(floor_atol, ERROR_FACTORS["plain"] * error_of_plain)
            failure = _element_failure(
                got, expected, atol, rtol, f"{label}: {name} of {where}", seq, name
            )
            if failure:
                return failure
            if got.numel():
                worst_error = max(worst_error, float((got - expected).abs().max()))
    if case.layout.storage == Storage.PADDED:
        failure = _padding_failure(case, plain_sequences, gradients, label)
        if failure:
            return failure
    return Comparison(worst_error, None)


def _element_failure(
    got: torch.Tensor,
    want: torch.Tensor,
    atol: float,
    rtol: float,
    where: str,
    seq: Sequence,
    name: str,
) -> Comparison | None:
    """The failure of one sequence's ``got`` against ``want`` (``[1, heads, length, dim]``), or None."""
    row = seq.first_row if name == "grad_query" else seq.first_kv_row
    bad = ~torch.isfinite(got)
    if bad.any():
        index = [int(i) for i in bad.nonzero()[0][1:]]
        packed = f" (packed row {row + index[1]})" if row is not None else ""
        return Comparison(
            float("inf"),
            f"{where}: {int(bad.sum())} non-finite values; first at [head, position, dim] = {index}{packed}",
        )
    excess = (got - want).abs() - (atol + rtol * want.abs())
    if not excess.numel() or float(excess.max()) <= 0:
        return None
    index = [int(i) for i in torch.unravel_index(excess.argmax(), excess.shape)][1:]
    element = (0, *index)
    packed = f" (packed row {row + index[1]})" if row is not None else ""
    return Comparison(
        float((got - want).abs().max()),
        f"{where}: not within atol={atol:.3g}, rtol={rtol} of the float64 reference; worst element "
        f"at [head, position, dim] = {index}{packed}: got {got[element].item()!r}, expected "
        f"{want[element].item()!r}",
    )


def _padding_failure(
    case: AttentionCase,
    seqs: list[Sequence],
    gradients: tuple[torch.Tensor, ...],
    label: str,
) -> Comparison | None:
    """A padded case's gradients at padding positions (query rows past ``q_len``, key/value positions
    past ``kv_len``) must be zero within the dtype's floor ``atol``: no output depends on them."""
    atol = TOLERANCES[case.torch_dtype][0]
    for seq in seqs:
        for name, grad in zip(GRADIENT_NAMES, gradients):
            start = seq.q_len if name == "grad_query" else seq.kv_len
            pad = grad[seq.index, :, start:].detach().to(torch.float64)
            wrong = ~(pad.abs() <= atol)  # NaN counts as wrong
            if wrong.any():
                head, position, dim = (int(i) for i in wrong.nonzero()[0])
                return Comparison(
                    float("inf"),
                    f"{label}: {name} of sequence {seq.index} of {case.batch} (q_len {seq.q_len}, kv_len "
                    f"{seq.kv_len}) is not zero at padding position {start + position} (element [head, "
                    f"position, dim] = [{head}, {start + position}, {dim}]: "
                    f"{pad[head, position, dim].item()!r}); padding positions feed no output, so their "
                    "gradient is zero",
                )
    return None
