"""A variant's results against the float64 reference: outputs, fully masked rows, gradients."""

from __future__ import annotations

import dataclasses

import torch

from perfsuite.attention import layouts
from perfsuite.attention.cases import AttentionCase
from perfsuite.attention.inputs import AttentionInputs
from perfsuite.attention.layouts import output_shape
from perfsuite.attention.masks import fully_masked_rows
from perfsuite.attention.modes import StepResult
from perfsuite.attention.reference_layouts import (
    compare_sequence_gradients,
    compare_sequences,
    lengths_of,
)
from perfsuite.attention.reference import (
    REFERENCE_BLOCK_BYTES,
    TOLERANCES,
    UNDEFINED_ROW_RESULTS,
    Comparison,
    compare_gradients,
    compare_with_reference,
    CONFIRMED,
    explain_modifications,
    reference_attention,
    tolerances,
)
from perfsuite.measure.precision_probes import precision_kind
from perfsuite.variants import Variant


class ContractViolation(AssertionError):
    """A variant returned something the attention contract (``perfsuite.attention.contract``) does not allow."""


def contract_failures(output: object, case: AttentionCase, inputs: AttentionInputs) -> list[str]:
    """One line per way ``output`` breaks the contract: a ``torch.Tensor`` shaped ``[B, H, Sq, D]``
    in the query's dtype and on its device. Empty when it keeps it. A layout case's output is
    ``[total_q, H, Dv]`` packed, else ``[B, H, Sq, Dv]`` (``layouts.output_shape``), in the case's
    dtype (for FP8 inputs, the dtype of the output)."""
    if not isinstance(output, torch.Tensor):
        hint = (
            " (return the attention output alone, not a tuple such as (output, weights))"
            if isinstance(output, tuple)
            else ""
        )
        return [f"returned {type(output).__name__}, not a torch.Tensor{hint}"]
    layout = case.layout
    total_q = sum(lengths_of(case)[0]) if layout.queries_packed else 0
    expected = output_shape(
        layout, case.batch, case.num_heads, case.seq_len_q, case.head_dim, total_q
    )
    named = (
        "[total_q, H, Dv]"
        if layout.queries_packed
        else ("[B, H, Sq, Dv]" if layout.head_dim_v else "[B, H, Sq, D]")
    )
    found = []
    lazy = not_plain_dense(output)
    if lazy:
        return [lazy]
    if tuple(output.shape) != expected:
        found.append(f"returned shape {list(output.shape)}, expected {named} = {list(expected)}")
    want_dtype = case.torch_dtype if layout.fp8 else inputs.query.dtype
    if output.dtype != want_dtype:
        whose = "case's output dtype" if layout.fp8 else "inputs'"
        found.append(f"returned dtype {output.dtype}, expected the {whose} {want_dtype}")
    if output.device != inputs.query.device:
        found.append(
            f"returned a tensor on {output.device}, expected the inputs' device {inputs.query.device}"
        )
    return found


def not_plain_dense(output: torch.Tensor) -> str | None:
    """Why ``output`` is not a plain dense tensor (a subclass, a lazy view, another layout), or None.

    A tensor subclass or a lazily materialized view can defer its computation until it is read
    (compared), outside the timed call; the contract asks for the computed values."""
    kind = type(output)
    if kind is not torch.Tensor:
        return (
            f"returned a {kind.__module__}.{kind.__qualname__}, a torch.Tensor subclass, not a plain tensor "
            "(a subclass can defer its work until the output is read, outside the timed call)"
        )
    if output.layout != torch.strided or output.is_nested:
        layout = "nested" if output.is_nested else str(output.layout)
        return f"returned a tensor of layout {layout}, not a plain dense (strided) tensor"
    lazy = [
        name
        for name, flag in (
            ("conjugate", output.is_conj()),
            ("negative", output.is_neg()),
            ("meta", output.is_meta),
        )
        if flag
    ]
    if lazy:
        return f"returned a lazy {'/'.join(lazy)} view, not a materialized tensor"
    return None


def contract_checked(fn, variant: Variant, case: AttentionCase, inputs: AttentionInputs):
    """``fn`` with its return value checked (``contract_failures``); raises ``ContractViolation``
    naming the variant, the case and each mismatch. For checked calls only, never timed ones."""

    def checked(*args, **kwargs):
        output = fn(*args, **kwargs)
        failures = contract_failures(output, case, inputs)
        if failures:
            raise ContractViolation(
                f"variant {variant.name} on case {case.id} breaks the attention contract: "
                + "; ".join(failures)
            )
        return output

    return checked


NONFINITE_CHECK_CALLS = 6  # untimed calls after timing whose outputs are checked for NaN/inf


def nonfinite_after_timing(step, calls: int = NONFINITE_CHECK_CALLS) -> str | None:
    """Run ``step`` (a mode's step) ``calls`` more times, untimed, and say which call returned NaN
    or infinity in its output, or None. For variants whose first output was finite: one that
    returns NaN now and then (every third call) is caught here, outside the timed window."""
    for index in range(1, calls + 1):
        output = step().output
        bad = ~torch.isfinite(output)
        if bool(bad.any()):
            nan = int(torch.isnan(output).sum())
            return (
                f"call {index} of {calls} made after timing returned non-finite values ({nan} NaN, "
                f"{int(bad.sum()) - nan} infinite of {output.numel()}) although the first call's output was "
                "finite: the timed calls may have computed garbage"
            )
    return None


def check_output(
    variant: Variant,
    case: AttentionCase,
    inputs: AttentionInputs,
    output: torch.Tensor,
    label: str,
    derived: bool = True,
) -> Comparison:
    """Compare ``output`` with the float64 reference, holding fully masked rows to the variant's rule;
    a failure on a case with score modifications names them at the worst element
    (``explain_modifications``), and one whose error is that of a lower precision says so
    (``precision_kind``); a layout case is compared sequence by sequence
    (``perfsuite.attention.reference_layouts``).

    ``derived``: the tolerance derived from the plain computation's error (``tolerances``); False: the
    dtype's floor (``TOLERANCES``), for inputs built so the plain computation is near exact (a probe)."""
    if not case.layout.is_plain:
        found = compare_sequences(case, inputs, output, label)
        hint = found.failure and (
            split_kv_hint(variant, case, inputs)
            or one_page_hint(variant, case, inputs)
            or score_order_hint(variant, case, inputs)
        )
        if not hint:
            return found
        return Comparison(found.max_abs_error, cause_first(label, f"{found.failure}\n{hint}"))
    rows = fully_masked_rows(inputs.mask, case.score_shape)
    if "sinks" in inputs.forms:
        rows = torch.zeros_like(rows)  # the sink is always seen: such a row's output is zero
    expected = reference_attention(inputs)
    tolerance = tolerances(inputs, expected) if derived else TOLERANCES[inputs.query.dtype]
    explained: list[str] = []

    def explain(index: tuple[int, ...], tolerance: tuple[float, float]) -> str:
        explained.append(explain_modifications(inputs, output, index, tolerance))
        return explained[-1]

    found = compare_with_reference(
        output,
        expected,
        label,
        rows,
        variant.fully_masked_rows,
        tolerance,
        explain=explain,
    )
    # a mistake the output is confirmed to match is the explanation; the precision is asked only without one
    confirmed = any(CONFIRMED in text for text in explained)
    kind = (
        found.failure and not confirmed and precision_kind(inputs, expected, output, tolerance[0])
    )
    failure = f"{found.failure}\n{kind}" if kind else found.failure
    return Comparison(found.max_abs_error, failure and cause_first(label, failure))


def cause_first(label: str, failure: str) -> str:
    """``failure`` (its first line ``"<label>: not within ..."``) with its first confirmed cause (a line
    holding ``CONFIRMED``, ``the output matches the reference ...``: a rerun of the reference with that
    mistake gives the output) moved to the first line as ``"<label>: <cause>"``; the comparison's line
    (without the label) and the rest follow. Unchanged when no line holds a confirmed cause."""
    lines = failure.splitlines()
    found = next((i for i, line in enumerate(lines) if i and CONFIRMED in line), None)
    if found is None:
        return failure
    cause = lines.pop(found)
    detail = lines[0].removeprefix(f"{label}: ")
    return "\n".join([f"{label}: {cause}", detail, *lines[1:]])


def split_kv_hint(variant: Variant, case: AttentionCase, inputs: AttentionInputs) -> str | None:
    """For a failed split-KV case (``num_splits`` > 1): the variant rerun on copies of ``inputs``
    with ``num_splits=1``, and what that says. Its output matching the reference there means the
    merge of the splits is wrong; failing there too means the error is elsewhere. None for other
    cases, or when the rerun raises (its message is given instead)."""
    splits = case.layout.num_splits
    if splits is None or splits < 2:
        return None
    copies = {name: getattr(inputs, name).clone() for name in ("query", "key", "value")}
    one = inputs.replace(**copies, forms={**inputs.forms, "num_splits": 1})
    try:
        with torch.no_grad():
            output = variant.for_case(one)(one.query, one.key, one.value, **one.keywords())
        again = compare_sequences(case, inputs, output, "with num_splits=1")
    except Exception as exc:  # the hint is advice: a function that cannot take 1 split says so
        return f"with num_splits=1 the variant raised {type(exc).__name__}: {exc}"
    if again.failure is None:
        return (
            f"with num_splits=1 the output matches the reference, with num_splits={splits} it does not: "
            "the merge across splits is wrong (is the max / log-sum-exp correction applied? each split's "
            "partial output weighs exp(lse_i - lse), lse the log-sum-exp of the splits' lse_i)"
        )
    return (
        f"with num_splits=1 the output is wrong too: the error is not (only) in the merge across the "
        f"{splits} splits"
    )


def one_page_inputs(
    case: AttentionCase, inputs: AttentionInputs
) -> tuple[AttentionCase, AttentionInputs]:
    """The same keys and values of a paged case (``case.layout.keys_paged``) in one page per sequence:
    the case with ``page_size`` the longest key length, and ``inputs`` with key/value caches
    ``[batch + 1, page_size, kv_heads, dim]`` and their ``block_table`` (int32 ``[batch, 1]``), read
    from ``inputs``' pages (``layouts.gather_pages``)."""
    forms = inputs.forms
    lengths = (
        [int(n) for n in forms["seq_lens_kv"].tolist()]
        if "seq_lens_kv" in forms
        else [int(n) for n in forms["cu_seqlens_kv"].diff().tolist()]  # packed queries over pages
    )
    page_size = max(lengths)
    one_case = dataclasses.replace(
        case, layout=dataclasses.replace(case.layout, page_size=page_size)
    )
    table = inputs.forms["block_table"]
    caches = []
    for cache in (inputs.key, inputs.value):
        dense = cache.new_zeros(len(lengths), cache.shape[2], page_size, cache.shape[3])
        for b, length in enumerate(lengths):
            dense[b, :, :length] = layouts.gather_pages(cache, table, b, length)
        caches.append(layouts.paginate(dense, lengths, page_size, torch.Generator().manual_seed(0)))
    (key, one_table), (value, _) = caches
    forms = {**inputs.forms, "block_table": one_table}
    return one_case, inputs.replace(query=inputs.query.clone(), key=key, value=value, forms=forms)


def one_page_hint(variant: Variant, case: AttentionCase, inputs: AttentionInputs) -> str | None:
    """For a failed paged case whose sequences span several pages: the variant rerun on the same keys
    and values in one page per sequence (``one_page_inputs``), and what that says. Its output matching
    the reference there means the merge across pages is wrong (the online softmax's max / log-sum-exp
    correction); failing there too means the error is elsewhere. None for other cases, or the rerun's
    error when it raises."""
    if not case.layout.keys_paged or "block_table" not in inputs.forms:
        return None
    if int(inputs.forms["block_table"].shape[1]) < 2:
        return None  # every sequence in one page already
    one_case, one = one_page_inputs(case, inputs)
    what = f"with one page per sequence (page_size {one_case.layout.page_size})"
    try:
        with torch.no_grad():
            output = variant.for_case(one)(one.query, one.key, one.value, **one.keywords())
        again = compare_sequences(one_case, one, output, what)
    except Exception as exc:  # the hint is advice: a function that cannot take one page says so
        return f"{what} the variant raised {type(exc).__name__}: {exc}"
    if again.failure is None:
        return (
            f"{what} the output matches the reference, with page_size {case.layout.page_size} it does "
            "not: the merge across pages is wrong (is the max / log-sum-exp correction applied? an online "
            "softmax rescales its running sum and output by exp(m_old - m_new) when a page raises the "
            "running max m)"
        )
    return f"{what} the output is wrong too: the error is not (only) in the merge across pages"


# How far the scores of the score-order reruns move along a sequence's keys (``ordered_score_inputs``):
# e^4 ~ 55 between the first and the last key, so every key keeps a weight far above any tolerance.
SCORE_RANGE = 4.0


def ordered_score_inputs(inputs: AttentionInputs, falling: bool) -> AttentionInputs:
    """Packed inputs (``[total, heads, dim]``, ``cu_seqlens_kv``) on which every query scores its
    sequence's keys in key order, falling (the first key the highest) or rising (the last the highest):
    query head h is a unit vector ``u`` of its key/value head (seeded), key j of a sequence of n keys
    ``a_j / scale * u`` with ``a_j = -+SCORE_RANGE * j / (n - 1)``, so the scaled score of key j is
    ``a_j`` for every query; the values are ``inputs``' own (copied). Rising or falling, the same set
    of scores: a correct attention is right on both."""
    key = inputs.key
    heads, kv_heads, dim = inputs.query.shape[1], key.shape[1], key.shape[2]
    generator = torch.Generator().manual_seed(0)
    units = torch.nn.functional.normalize(
        torch.randn(kv_heads, dim, generator=generator, dtype=torch.float64), dim=-1
    )
    bounds = [int(n) for n in inputs.forms["cu_seqlens_kv"].tolist()]
    slope = torch.empty(key.shape[0], dtype=torch.float64)
    for start, end in zip(bounds, bounds[1:]):
        steps = torch.arange(end - start, dtype=torch.float64) / max(end - start - 1, 1)
        slope[start:end] = SCORE_RANGE * (-steps if falling else steps)
    query = units.repeat_interleave(heads // kv_heads, dim=0).expand(inputs.query.shape[0], -1, -1)
    keys = (slope / inputs.scale)[:, None, None] * units[None]
    like = {"dtype": inputs.query.dtype, "device": inputs.query.device}
    return inputs.replace(
        query=query.to(**like).contiguous(),
        key=keys.to(dtype=key.dtype, device=key.device),
        value=inputs.value.clone(),
    )


def score_order_hint(variant: Variant, case: AttentionCase, inputs: AttentionInputs) -> str | None:
    """For a failed packed (varlen) case: the variant rerun on the same scores falling and rising along
    each sequence's keys (``ordered_score_inputs``). An online softmax that leaves out the max /
    log-sum-exp correction is exact when no chunk of keys raises the running max (falling) and wrong
    when chunks do (rising); a correct attention is right on both. Said only when the falling rerun
    matches the reference and the rising one does not; None otherwise (an ALiBi case, whose bias
    reorders the scores; a rerun that raises)."""
    if case.layout.storage != layouts.Storage.PACKED or "alibi_slopes" in inputs.forms:
        return None
    matched = {}
    for falling in (True, False):
        rerun = ordered_score_inputs(inputs, falling)
        try:
            with torch.no_grad():
                output = variant.for_case(rerun)(
                    rerun.query, rerun.key, rerun.value, **rerun.keywords()
                )
            matched[falling] = compare_sequences(case, rerun, output, "rerun").failure is None
        except Exception:  # the hint is advice: a rerun that fails says nothing of the merge
            return None
    if not (matched[True] and not matched[False]):
        return None
    return (
        "with scores that fall along each sequence's keys (the first key a row's max) the output matches "
        "the reference, with the same scores rising along the keys it does not: the merge across chunks "
        "of keys is wrong (is the max / log-sum-exp correction applied? an online softmax rescales its "
        "running sum and output by exp(m_old - m_new) when a chunk raises the running max m)"
    )


def compare_result(
    variant: Variant,
    case: AttentionCase,
    inputs: AttentionInputs,
    grad_output: torch.Tensor,
    mode: str,
    result: StepResult,
    seed: int,
) -> tuple[Comparison | None, str | None]:
    """The comparison with the float64 reference, or None and why not (NaN rows, out of memory).

    ``inputs`` are the values the reference is computed from; ``grad_output`` (shaped as the
    output: ``[B, H, Sq, D]``, packed ``[total_q, H, Dv]``) seeded backward in gradient modes; a
    layout case's gradients are compared per sequence (``compare_sequence_gradients``).
    """
    try:
        return _compare_with_reference(variant, case, inputs, grad_output, mode, result, seed)
    except torch.OutOfMemoryError:
        if case.device == "cuda":
            torch.cuda.empty_cache()
        return None, (
            f"not compared: the float64 reference of {case.id} ran out of {case.device} memory even in blocks "
            f"of {REFERENCE_BLOCK_BYTES} bytes of scores (perfsuite.attention.reference)"
        )


def _compare_with_reference(
    variant: Variant,
    case: AttentionCase,
    inputs: AttentionInputs,
    grad_output: torch.Tensor,
    mode: str,
    result: StepResult,
    seed: int,
) -> tuple[Comparison | None, str | None]:
    in_mode = "" if mode == "forward" else f" in mode {mode}"
    label = f"variant {variant.name} on case {case.id}{in_mode} (seed {seed})"
    output = check_output(variant, case, inputs, result.output, label)
    if result.gradients is None or output.failure:
        return output, None
    if not case.layout.is_plain:  # padded or packed (inference-only layouts have no gradients)
        gradients = compare_sequence_gradients(case, inputs, grad_output, result.gradients, label)
        return Comparison(
            max(output.max_abs_error, gradients.max_abs_error), gradients.failure
        ), None
    # with sinks no row is fully masked: the sink is always seen (its output is zero there)
    rows = (
        0
        if "sinks" in inputs.forms
        else int(fully_masked_rows(inputs.mask, case.score_shape).sum())
    )
    if variant.fully_masked_rows == "nan" and rows:
        return None, (
            f"{variant.name} returns NaN for the {rows} query rows of this case that see no key, so its "
            "gradients are NaN everywhere: nothing to compare (the forward check holds those rows to NaN)"
        )
    if variant.fully_masked_rows in UNDEFINED_ROW_RESULTS and rows:
        return None, (
            f"{variant.name} declares fully_masked_rows={variant.fully_masked_rows!r}: the {rows} query rows "
            "of this case that see no key may hold any value the reference does not define, so neither are "
            "the gradients: nothing to compare"
        )
    gradients = compare_gradients(result.gradients, inputs, grad_output, label)
    return Comparison(max(output.max_abs_error, gradients.max_abs_error), gradients.failure), None
