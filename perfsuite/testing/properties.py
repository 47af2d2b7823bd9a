"""Properties every attention variant must have, as checks that return a failure message.

Each ``check_*`` takes a variant, a case and a seed, runs the variant (under
``torch.no_grad()``), and returns ``None`` when the property holds or a message naming the
variant, the case, the seed and the command that reproduces it as an ordinary suite test.
They raise ``perfsuite.measure.evidence.VariantUnsupported`` when the variant cannot run the case.
The hypothesis tests in ``tests/testing`` draw the cases; ``perfsuite/suite/test_properties.py`` runs
every check as an ordinary test parametrized over the suite's variants and cases (how a
hypothesis failure is rerun); users can call these checks on their own variants the same way.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import torch

from perfsuite.attention.cases import AttentionCase, Device
from perfsuite.measure.evidence import VariantUnsupported, bind, run_once
from perfsuite.measure.memory_budget import does_not_fit_reason
from perfsuite.measure.correctness import ContractViolation, check_output, contract_failures
from perfsuite.measure.input_guard import check_and_restore, pristine_copy
from perfsuite.attention.inputs import AttentionInputs, make_inputs
from perfsuite.attention.masks import AttentionMask, fully_masked_rows, mask_kind
from perfsuite.measure.profiling import profile_steps
from perfsuite.measure.score_accounting import copy_count_words
from perfsuite.attention.contract import Form
from perfsuite.attention.reference import (
    CONFIRMED,
    TOLERANCES,
    UNDEFINED_ROW_RESULTS,
    compare_with_reference,
    reference_attention,
    tolerances,
)
from perfsuite.variants import Variant


def reproduce_hint(variant: Variant, case: AttentionCase, seed: int) -> str:
    """The command that runs this variant on this case as a normal parametrized test (with the
    ``--perfsuite-variant module:function`` that loads a user's function)."""
    from perfsuite.variants.user import variant_spec

    spec = variant_spec(variant.name)
    return (
        f"reproduce: perfsuite run --check -k test_property --perfsuite-cases {case.id} "
        f"--perfsuite-seed {seed} --perfsuite-variants {variant.name}"
        + (f" --perfsuite-variant {spec}" if spec else "")
    )


def _inputs_within_budget(variant: Variant, case: AttentionCase, seed: int) -> AttentionInputs:
    """``make_inputs(case, seed)`` once the case is known to fit in ``case.device``'s free memory
    (``perfsuite.measure.memory_budget``, as the suite checks before allocating).

    Raises ``VariantUnsupported`` (a skip, with the sizes) when it would not fit."""
    reason = does_not_fit_reason(variant, case)
    if reason:
        raise VariantUnsupported(reason)
    return make_inputs(case, seed)


def _fail(variant: Variant, case: AttentionCase, seed: int, what: str) -> str:
    return f"variant {variant.name} on case {case.id} (seed {seed}): {what}\n{reproduce_hint(variant, case, seed)}"


def _guarded(variant: Variant, case: AttentionCase, inputs: AttentionInputs) -> torch.Tensor:
    """One checked call: the return value held to the contract, the inputs to their values before it.

    Raises ``ContractViolation`` naming the mismatch, or the inputs the variant changed in place."""
    pristine = pristine_copy(inputs)
    output = run_once(variant, case, bind(variant, inputs))
    failures = contract_failures(output, case, inputs)
    changed = check_and_restore(variant.name, inputs, pristine)
    if failures or changed:
        raise ContractViolation(
            f"variant {variant.name} on case {case.id}: "
            + "; ".join(failures + [changed or ""]).strip("; ")
        )
    return output


def _run(variant: Variant, case: AttentionCase, inputs: AttentionInputs) -> torch.Tensor:
    return _guarded(variant, case, inputs).detach().to(torch.float64).cpu()


def _difference(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> str | None:
    """None when ``a`` and ``b`` agree within the dtype's tolerance (NaN equal to NaN), else what differs,
    saying ``NaN`` when one of them holds NaN where the other holds a number."""
    atol, rtol = TOLERANCES[dtype]
    close = torch.isclose(a, b, atol=atol, rtol=rtol, equal_nan=True)
    if bool(close.all()):
        return None
    nan_a, nan_b = torch.isnan(a) & ~torch.isnan(b), torch.isnan(b) & ~torch.isnan(a)
    if bool(nan_a.any() or nan_b.any()):
        return (
            f"NaN in {int(nan_a.sum())} elements of the output where the expected one holds numbers, "
            f"and in {int(nan_b.sum())} the other way round"
        )
    finite = ~close & torch.isfinite(a) & torch.isfinite(b)
    worst = float((a - b)[finite].abs().max()) if bool(finite.any()) else float("inf")
    return f"{int((~close).sum())} elements differ, by up to {worst:.3g}"


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed + 1)  # independent of the inputs' stream


def check_matches_reference(variant: Variant, case: AttentionCase, seed: int) -> str | None:
    """Property 1: the output equals the float64 reference within the dtype's tolerance
    (fully masked rows: zeros, or NaN for ``fully_masked_rows="nan"`` variants)."""
    inputs = _inputs_within_budget(variant, case, seed)
    pristine = pristine_copy(inputs)
    output = _guarded(variant, case, inputs)
    failure = check_output(
        variant, case, pristine, output, f"variant {variant.name} on case {case.id} (seed {seed})"
    )
    return (
        None
        if failure.failure is None
        else failure.failure + "\n" + reproduce_hint(variant, case, seed)
    )


def _permute_mask(mask: AttentionMask, dim: int, order: torch.Tensor) -> AttentionMask:
    """Permute every mask tensor along ``dim`` where it is not broadcast (size > 1)."""

    def permute(tensor):
        if isinstance(tensor, torch.Tensor) and tensor.dim() == 4 and tensor.shape[dim] > 1:
            return tensor.index_select(dim, order.to(tensor.device))
        return tensor

    return dataclasses.replace(
        mask, **{f.name: permute(getattr(mask, f.name)) for f in dataclasses.fields(mask)}
    )


# Keyword values of the forms with a per-head ([num_heads]) or per-batch-row ([batch, ...]) axis.
_PER_HEAD_FORMS = ("alibi_slopes", "sinks")
_PER_BATCH_FORMS = ("query_positions",)


def _permute_forms(forms, dim: int, order: torch.Tensor) -> dict:
    """The forms' keyword values with their per-head (``dim=1``) or per-batch-row (``dim=0``) values
    permuted by ``order``, so per-head parameters (ALiBi slopes, sinks) move with their heads."""
    names = _PER_HEAD_FORMS if dim == 1 else _PER_BATCH_FORMS
    return {
        name: value.index_select(0, order.to(value.device)) if name in names else value
        for name, value in forms.items()
    }


def check_batch_and_head_independence(
    variant: Variant, case: AttentionCase, seed: int
) -> str | None:
    """Property 2: permuting batch rows, or kv heads together with their query-head groups (and the
    per-head ALiBi slopes and sinks with the query heads), permutes the output the same way."""
    inputs = _inputs_within_budget(variant, case, seed)
    base = _run(variant, case, inputs)
    gen = _generator(seed)
    batch_order = torch.randperm(case.batch, generator=gen)
    groups = case.num_heads // case.num_kv_heads
    kv_order = torch.randperm(case.num_kv_heads, generator=gen)
    q_order = torch.tensor([int(g) * groups + r for g in kv_order for r in range(groups)])
    for dim, q_perm, kv_perm, name in (
        (0, batch_order, batch_order, "batch rows"),
        (1, q_order, kv_order, "heads"),
    ):
        moved = inputs.replace(
            query=inputs.query.index_select(dim, q_perm.to(inputs.query.device)),
            key=inputs.key.index_select(dim, kv_perm.to(inputs.key.device)),
            value=inputs.value.index_select(dim, kv_perm.to(inputs.value.device)),
            mask=_permute_mask(inputs.mask, dim, q_perm),
            forms=_permute_forms(inputs.forms, dim, q_perm),
        )
        if diff := _difference(
            _run(variant, case, moved), base.index_select(dim, q_perm), case.torch_dtype
        ):
            return _fail(
                variant,
                case,
                seed,
                f"permuting {name} by {q_perm.tolist()} did not permute the output ({diff})",
            )
    return None


def _last_visible_key(case: AttentionCase) -> torch.Tensor:
    """Per query row, the last key index a causal-like mask lets it see (may be negative): its
    position (``AttentionCase.query_offset``: the kind's alignment, or the case's query positions)."""
    return torch.arange(case.seq_len_q) + case.query_offset


def check_causality(variant: Variant, case: AttentionCase, seed: int) -> str | None:
    """Property 3 (causal, causal_br, window masks): changing keys/values at positions >= p
    leaves every query row whose last visible key is < p unchanged (the case's alignment).
    Padded and packed cases: ``check_sequence_causality``."""
    if case.layout.storage in _SEQUENCE_STORAGES:
        return check_sequence_causality(variant, case, seed)
    inputs = _inputs_within_budget(variant, case, seed)
    base = _run(variant, case, inputs)
    gen = _generator(seed)
    position = int(torch.randint(0, case.seq_len_kv, (1,), generator=gen))
    noise = torch.randn(inputs.key.shape, generator=gen).to(inputs.key.device, inputs.key.dtype)
    later = torch.zeros(case.seq_len_kv, 1, dtype=torch.bool, device=inputs.key.device)
    later[position:] = True
    changed = inputs.replace(
        key=torch.where(later, inputs.key + noise, inputs.key),
        value=torch.where(later, inputs.value - noise, inputs.value),
    )
    output = _run(variant, case, changed)
    rows = _last_visible_key(case) < position
    if variant.fully_masked_rows in UNDEFINED_ROW_RESULTS:
        rows &= _last_visible_key(case) >= 0  # rows that see no key may hold any finite value
    if diff := _difference(output[:, :, rows], base[:, :, rows], case.torch_dtype):
        return _fail(
            variant,
            case,
            seed,
            f"rows {rows.nonzero().flatten().tolist()} changed when keys >= {position} changed ({diff})",
        )
    return None


_SEQUENCE_STORAGES = ("padded", "packed")


def _split_position(last: torch.Tensor, kv_len: int, gen: torch.Generator) -> int:
    """A key position ``p`` that splits a sequence's query rows into some whose last visible key
    (``last``, -1 for none) is < p and some that see p: drawn from ``(min last, max last]``, so a
    chunked prefill over a cached prefix is perturbed inside its query block, not in the prefix every
    row sees; anywhere in ``[0, kv_len)`` when no position splits the rows (one query row)."""
    seen = last[last >= 0]
    if len(seen) and int(seen.min()) < int(seen.max()):
        low, high = int(seen.min()) + 1, int(seen.max()) + 1
        return int(torch.randint(low, high, (1,), generator=gen))
    return int(torch.randint(0, kv_len, (1,), generator=gen))


def check_sequence_causality(variant: Variant, case: AttentionCase, seed: int) -> str | None:
    """Causality per sequence (padded and packed causal cases): for the first and the last sequence,
    a later token (its keys and values at positions >= p of that sequence, and the queries that see
    one of them) is redrawn; no earlier output of that sequence (a query row whose last visible key
    is < p, under the case's mask on the sequence's own lengths) and nothing of another sequence may
    change. The failure names the sequence, its lengths, p and the rows that moved."""
    from perfsuite.attention.inputs import sequence_allowed
    from perfsuite.attention.reference_layouts import input_sequence, output_sequence, sequences

    inputs = _inputs_within_budget(variant, case, seed)
    base = _guarded(variant, case, inputs)
    gen = _generator(seed)
    seqs = sequences(case, inputs)
    for index in dict.fromkeys((0, case.batch - 1)):
        seq = seqs[index]
        allowed = sequence_allowed(case.mask, seq.q_len, seq.kv_len)
        last = torch.where(
            allowed.any(dim=1),
            (allowed * torch.arange(seq.kv_len)).amax(dim=1),
            torch.full((seq.q_len,), -1),
        )
        position = _split_position(last, seq.kv_len, gen)
        earlier = last < position
        if variant.fully_masked_rows in UNDEFINED_ROW_RESULTS:
            earlier &= last >= 0  # rows that see no key may hold any finite value
        changed = {name: getattr(inputs, name).clone() for name in ("query", "key", "value")}
        for name, rows in (
            ("query", ~earlier),
            ("key", torch.arange(seq.kv_len) >= position),
            ("value", torch.arange(seq.kv_len) >= position),
        ):
            part = input_sequence(case, changed[name], seq, name)  # a view into changed[name]
            noise = torch.randn(part.shape, generator=gen).to(part.device, part.dtype)
            keep = rows.to(part.device).view(1, 1, -1, 1)
            part.copy_(torch.where(keep, part + noise, part))
        after = _guarded(variant, case, inputs.replace(**changed))
        for other in seqs:
            got = output_sequence(case, after, other).detach().to(torch.float64).cpu()
            want = output_sequence(case, base, other).detach().to(torch.float64).cpu()
            rows = earlier if other.index == index else torch.ones(other.q_len, dtype=torch.bool)
            diff = _difference(got[:, :, rows], want[:, :, rows], case.torch_dtype)
            if not diff:
                continue
            atol, rtol = TOLERANCES[case.torch_dtype]
            close = torch.isclose(got, want, atol=atol, rtol=rtol, equal_nan=True)
            moved = (~close).any(dim=3).any(dim=1).any(dim=0) & rows
            what = (
                f"its query rows {moved.nonzero().flatten().tolist()} (counted within the sequence), "
                f"whose last visible key is < {position}"
                if other.index == index
                else f"sequence {other.index} (q_len {other.q_len}, kv_len {other.kv_len}), another "
                f"sequence, rows {moved.nonzero().flatten().tolist()}"
            )
            return _fail(
                variant,
                case,
                seed,
                f"changing the tokens at positions >= {position} of sequence {index} of {case.batch} "
                f"(q_len {seq.q_len}, kv_len {seq.kv_len}) changed {what} ({diff})",
            )
    return None


def _masked_rows_for_key(mask: AttentionMask, case: AttentionCase, key_index: int) -> torch.Tensor:
    """Bool ``[batch, num_heads, seq_len_q]``: rows for which key ``key_index`` is hidden."""
    allowed = mask.allowed.expand(case.batch, case.num_heads, case.seq_len_q, case.seq_len_kv)
    return ~allowed[..., key_index].cpu()


def _free_rows(variant: Variant, inputs: AttentionInputs, case: AttentionCase) -> torch.Tensor:
    """Bool ``[batch, num_heads, seq_len_q]``: rows that see no key, for a variant that declares
    ``fully_masked_rows="finite"`` (any finite value there, which may depend on every key); else none."""
    rows = fully_masked_rows(inputs.mask, case.score_shape).cpu()
    return rows if variant.fully_masked_rows in UNDEFINED_ROW_RESULTS else torch.zeros_like(rows)


def _keys_hidden_somewhere(mask: AttentionMask, case: AttentionCase) -> torch.Tensor:
    """Indices of keys that the mask hides from at least one query row (may be empty)."""
    allowed = mask.allowed.expand(case.batch, case.num_heads, case.seq_len_q, case.seq_len_kv)
    return (~allowed).any(dim=(0, 1, 2)).nonzero().flatten()


def check_masked_keys_do_not_matter(
    variant: Variant, case: AttentionCase, seed: int, nan: bool = False
) -> str | None:
    """Property 4: replacing a masked-out key and value leaves the rows that cannot see it unchanged.

    With ``nan=True`` the replacement is NaN. Then the rule is weaker, because ``0 * NaN`` is
    NaN in ``P @ V`` and SDPA adds the mask to a NaN score: rows that can see the key must
    become NaN; rows that cannot must be unchanged or entirely NaN, never other finite
    values; and a variant that masks with ``masked_fill`` (``naive``, ``naive_inplace``)
    keeps them unchanged when only the key is NaN (checked by ``check_nan_masked_key``).
    """
    inputs = _inputs_within_budget(variant, case, seed)
    candidates = _keys_hidden_somewhere(inputs.mask, case)
    if not len(candidates):
        return None
    key_index = int(candidates[torch.randint(0, len(candidates), (1,), generator=_generator(seed))])
    base = _run(variant, case, inputs)
    key, value = inputs.key.clone(), inputs.value.clone()
    if nan:
        key[:, :, key_index], value[:, :, key_index] = float("nan"), float("nan")
    else:
        key[:, :, key_index] = key[:, :, key_index] * -3 + 1
        value[:, :, key_index] = value[:, :, key_index] * 5 - 2
    output = _run(variant, case, inputs.replace(key=key, value=value))
    hidden = _masked_rows_for_key(inputs.mask, case, key_index) & ~_free_rows(variant, inputs, case)
    same = torch.isclose(
        output,
        base,
        atol=TOLERANCES[case.torch_dtype][0],
        rtol=TOLERANCES[case.torch_dtype][1],
        equal_nan=True,
    ).all(-1)
    if not nan:
        if not same[hidden].all():
            diff = _difference(output[hidden], base[hidden], case.torch_dtype)
            return _fail(
                variant,
                case,
                seed,
                f"rows that cannot see key {key_index} changed when it changed ({diff})",
            )
        return None
    all_nan = torch.isnan(output).all(-1)
    if not all_nan[~hidden].all():
        return _fail(variant, case, seed, f"rows that see NaN key {key_index} are not NaN")
    if not (same | all_nan)[hidden].all():
        return _fail(
            variant,
            case,
            seed,
            f"rows that cannot see NaN key {key_index} took other finite values",
        )
    return None


def check_nan_masked_key(variant: Variant, case: AttentionCase, seed: int) -> str | None:
    """Property 4, NaN key only, for ``masked_fill`` variants: a NaN score that is masked is
    overwritten with ``-inf``, so rows that cannot see the key are unchanged."""
    inputs = _inputs_within_budget(variant, case, seed)
    candidates = _keys_hidden_somewhere(inputs.mask, case)
    if not len(candidates):
        return None
    key_index = int(candidates[0])
    key = inputs.key.clone()
    key[:, :, key_index] = float("nan")
    base = _run(variant, case, inputs)
    output = _run(variant, case, inputs.replace(key=key))
    hidden = _masked_rows_for_key(inputs.mask, case, key_index) & ~_free_rows(variant, inputs, case)
    if diff := _difference(output[hidden], base[hidden], case.torch_dtype):
        return _fail(
            variant,
            case,
            seed,
            f"a NaN in masked-out key {key_index} reached rows that cannot see it ({diff})",
        )
    return None


def check_shift_invariance(variant: Variant, case: AttentionCase, seed: int) -> str | None:
    """Property 5: adding a constant to every score of a row (through an additive mask)
    does not change the output (softmax is shift invariant). Integer constants up to +-100
    make a softmax without max subtraction overflow in fp32, and a clamp of the scores show.
    Meant for fp32/fp64 cases: in bf16 a score of 100.37 is stored as 100.5."""
    inputs = _inputs_within_budget(variant, case, seed)
    gen = _generator(seed)
    base_bias = inputs.mask.additive
    zeros = torch.zeros(
        1,
        case.num_heads,
        case.seq_len_q,
        case.seq_len_kv,
        dtype=case.torch_dtype,
        device=case.device,
    )
    start = zeros if base_bias is None else base_bias
    shift = (torch.rand(1, case.num_heads, case.seq_len_q, 1, generator=gen) * 200 - 100).round()
    shifted = start + shift.to(device=case.device, dtype=case.torch_dtype)
    base = _run(variant, case, inputs.replace(mask=inputs.mask.with_additive(start)))
    moved = inputs.replace(mask=inputs.mask.with_additive(shifted))
    output = _run(variant, case, moved)
    if diff := _difference(output, base, case.torch_dtype):
        what = f"adding a constant to every score of a row changed the output ({diff})"
        cause = softcap_order_cause(moved, output)
        return _fail(variant, case, seed, f"{cause}\n{what}" if cause else what)
    return None


def softcap_order_cause(inputs: AttentionInputs, output: torch.Tensor) -> str | None:
    """For a softcap case whose mask hides keys: the line naming a softcap applied after the mask when
    the float64 reference computed that way on ``inputs`` (``softcap_after_mask``: hidden keys at
    ``-softcap``, the bias capped with the scores) gives ``output`` (``[B, H, Sq, D]``, float64 on the
    CPU) within the derived tolerance (``tolerances``), and the right order does not; else None. A row
    that sees a key hides the mistake until its scores are shifted near ``-softcap``."""
    if "softcap" not in inputs.forms or inputs.mask.masked_out is None:
        return None
    correct = reference_attention(inputs)
    expected = correct.cpu()
    after = reference_attention(inputs, softcap_after_mask=True).cpu()
    atol, rtol = tolerances(inputs, correct)

    def matches(other: torch.Tensor) -> bool:
        return bool(torch.isclose(output, other, atol=atol, rtol=rtol, equal_nan=True).all())

    if not matches(after) or matches(expected):
        return None
    cap = float(inputs.forms["softcap"])
    return (
        f"{CONFIRMED} with the softcap applied after the mask (rerun on the shifted scores): apply the "
        f"softcap before the mask: hidden keys score softcap * tanh(-inf) = {-cap:g}, not -inf, and weigh "
        "once a row's scores are shifted near it"
    )


def check_score_copies(variant: Variant, case: AttentionCase, seed: int) -> str | None:
    """Property 6: the profiler sees exactly ``variant.expected_score_copies`` score-sized
    copies per forward (``naive``: 1 when the mask hides keys; ``naive_inplace``: 0).

    Inputs must be contiguous: a strided query is copied by ``matmul``, and when
    ``head_dim == seq_len_kv`` that copy has the score matrix's shape too.
    """
    inputs = _inputs_within_budget(variant, case, seed)
    forward = bind(variant, inputs)
    run_once(variant, case, forward)
    with tempfile.TemporaryDirectory() as scratch:
        forwards = profile_steps(forward, case.device, Path(scratch) / "trace.json.gz")
    lane = "device" if case.device == Device.CUDA else "cpu"
    counts = [f.copies_of_shape(case.score_shape, lane) for f in forwards]
    expected = variant.expected_score_copies(case.hides_keys)
    if counts != [expected] * len(forwards):
        worst = max(counts, key=lambda n: abs(n - expected))
        named = [
            f"{c.name} [{'x'.join(map(str, c.shape or ()))}]"
            for c in forwards[0].copies_with_shape(case.score_shape, lane)
        ]
        return _fail(
            variant,
            case,
            seed,
            f"{copy_count_words(worst, expected)}: {', '.join(named) or 'none seen'} "
            f"(score-sized copies per forward {counts}, expected {expected})",
        )
    return None


def _against_reference(
    variant: Variant,
    case: AttentionCase,
    seed: int,
    given: AttentionInputs,
    expected_from: AttentionInputs,
    what: str,
) -> str | None:
    """Run ``variant`` on ``given`` and hold its output, in the rows that see some key, to the float64
    reference of ``expected_from`` with the suite's tolerance rule; the failure says ``what``."""
    output = _guarded(variant, case, given)
    expected = reference_attention(expected_from)
    sees_some = ~fully_masked_rows(given.mask, case.score_shape).to(expected.device)
    keep = sees_some.unsqueeze(-1).expand_as(expected)
    found = compare_with_reference(
        torch.where(keep.to(output.device), output, torch.zeros_like(output)),
        expected.masked_fill(~keep, 0.0),
        what,
        tolerance=tolerances(expected_from, expected),
    )
    return None if found.failure is None else _fail(variant, case, seed, found.failure)


def check_alibi_position_shift(variant: Variant, case: AttentionCase, seed: int) -> str | None:
    """Property 7 (ALiBi over a mask that does not depend on positions): adding a constant to every
    query position leaves the output unchanged, since ``-slope * (pos_i + c - j)`` differs from the
    unshifted bias by a constant per row, which softmax ignores (Press et al. 2022, section 3)."""
    inputs = _inputs_within_budget(variant, case, seed)
    shift = int(torch.randint(1, 64, (1,), generator=_generator(seed)))
    base = _run(variant, case, inputs)
    forms = dict(inputs.forms, query_positions=inputs.forms["query_positions"] + shift)
    output = _run(variant, case, inputs.replace(forms=forms))
    if diff := _difference(output, base, case.torch_dtype):
        return _fail(
            variant,
            case,
            seed,
            f"adding {shift} to every query position changed an ALiBi output ({diff}); the bias "
            "-slope * (position - key) changes by a constant per row, which softmax ignores",
        )
    return None


def check_huge_softcap_changes_nothing(
    variant: Variant, case: AttentionCase, seed: int
) -> str | None:
    """Property 8 (softcap): a cap 10^4 times the largest score leaves the scores as they are
    (``cap * tanh(s / cap) = s (1 - (s/cap)^2 / 3 + ...)``), so the output is the reference's without
    any cap, within the suite's tolerance."""
    inputs = _inputs_within_budget(variant, case, seed)
    q, k = inputs.query.to(torch.float64), inputs.key.to(torch.float64)
    groups = case.num_heads // case.num_kv_heads
    largest = float((q @ k.repeat_interleave(groups, dim=1).transpose(-2, -1)).abs().max())
    cap = 1e4 * max(largest * inputs.scale, 1.0)
    huge = inputs.replace(forms=dict(inputs.forms, softcap=cap))
    without = inputs.replace(forms={k: v for k, v in inputs.forms.items() if k != "softcap"})
    return _against_reference(
        variant, case, seed, huge, without, f"with softcap {cap:.3g} (above every score)"
    )


def check_minus_infinity_sink_is_no_sink(
    variant: Variant, case: AttentionCase, seed: int
) -> str | None:
    """Property 9 (sinks): a sink logit of ``-inf`` adds ``e^-inf = 0`` to the denominator, so the
    output is the reference's without sinks (rows that see some key; a row that sees none is 0/0)."""
    inputs = _inputs_within_budget(variant, case, seed)
    sinks = torch.full_like(inputs.forms["sinks"], float("-inf"))
    given = inputs.replace(forms=dict(inputs.forms, sinks=sinks))
    without = inputs.replace(forms={k: v for k, v in inputs.forms.items() if k != "sinks"})
    return _against_reference(variant, case, seed, given, without, "with every sink at -inf")


def _owned(case: AttentionCase, inputs: AttentionInputs, index: int) -> dict[str, torch.Tensor]:
    """Bool masks over the first dimension of query, key and value: True where the element belongs
    to sequence ``index`` (a packed row range, a batch row, the pages its block table names)."""
    from perfsuite.attention.layouts import pages_needed
    from perfsuite.attention.reference_layouts import lengths_of

    layout = case.layout
    q_lens, kv_lens = lengths_of(case)
    owned = {}
    for name, tensor in (("query", inputs.query), ("key", inputs.key), ("value", inputs.value)):
        rows = torch.zeros(tensor.shape[0], dtype=torch.bool)
        if layout.queries_packed and (name == "query" or not layout.keys_paged):
            cu = inputs.forms["cu_seqlens_q" if name == "query" else "cu_seqlens_kv"].tolist()
            rows[cu[index] : cu[index + 1]] = True
        elif layout.keys_paged and name != "query":
            needed = pages_needed(kv_lens, layout.page_size)[index]
            rows[inputs.forms["block_table"][index, :needed].long().cpu()] = True
        else:
            rows[index] = True
        owned[name] = rows
    return owned


def check_sequence_independence(variant: Variant, case: AttentionCase, seed: int) -> str | None:
    """Layout property: a sequence's output does not depend on the other sequences of its batch.
    For the first and the last sequence, every query/key/value element that does not belong to it
    (other sequences' rows, their pages and the spare ones) is redrawn; its output must not move."""
    from perfsuite.attention.reference_layouts import output_sequence, sequences

    inputs = _inputs_within_budget(variant, case, seed)
    base = _guarded(variant, case, inputs)
    gen = _generator(seed)

    def redraw(tensor: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        fresh = (torch.randn(tensor.shape, generator=gen) * 3).to(tensor.device)
        keep = rows.to(tensor.device).view(-1, *([1] * (tensor.dim() - 1)))
        return torch.where(keep, tensor, fresh.to(tensor.dtype))

    for index in dict.fromkeys((0, case.batch - 1)):
        owned = _owned(case, inputs, index)
        moved = inputs.replace(
            **{name: redraw(getattr(inputs, name), rows) for name, rows in owned.items()}
        )
        after = _guarded(variant, case, moved)
        seq = sequences(case, inputs)[index]
        got = output_sequence(case, after, seq).detach().to(torch.float64).cpu()
        want = output_sequence(case, base, seq).detach().to(torch.float64).cpu()
        if diff := _difference(got, want, case.torch_dtype):
            return _fail(
                variant,
                case,
                seed,
                f"sequence {index} (q_len {seq.q_len}, kv_len {seq.kv_len}) changed when only the "
                f"other sequences of its batch did ({diff})",
            )
    return None


def check_page_permutation(variant: Variant, case: AttentionCase, seed: int) -> str | None:
    """Paged property: moving the cache's pages (and the block table with them) changes nothing."""
    inputs = _inputs_within_budget(variant, case, seed)
    base = _run(variant, case, inputs)
    num_pages = inputs.key.shape[0]
    order = torch.randperm(num_pages, generator=_generator(seed))  # new page i holds old order[i]
    where = torch.empty_like(order)
    where[order] = torch.arange(num_pages)
    table = inputs.forms["block_table"]
    moved = inputs.replace(
        key=inputs.key[order.to(inputs.key.device)],
        value=inputs.value[order.to(inputs.value.device)],
        forms={**inputs.forms, "block_table": where.to(table.device)[table.long()].to(table.dtype)},
    )
    if diff := _difference(_run(variant, case, moved), base, case.torch_dtype):
        return _fail(
            variant,
            case,
            seed,
            f"moving the cache's pages by {order.tolist()} with the block table changed the output ({diff})",
        )
    return None


# checks that read dense [B, H, S, D] tensors and the case's dense mask
DENSE_CHECKS = (
    "batch_and_head_independence",
    "causality",
    "masked_keys_do_not_matter",
    "nan_in_masked_keys_or_values",
    "nan_masked_key_for_masked_fill",
    "shift_invariance",
)
LAYOUT_CHECKS = ("sequence_independence", "page_permutation")

ALL_CHECKS = {
    "matches_reference": check_matches_reference,
    "batch_and_head_independence": check_batch_and_head_independence,
    "causality": check_causality,
    "masked_keys_do_not_matter": check_masked_keys_do_not_matter,
    "nan_in_masked_keys_or_values": lambda v, c, s: check_masked_keys_do_not_matter(
        v, c, s, nan=True
    ),
    "nan_masked_key_for_masked_fill": check_nan_masked_key,
    "shift_invariance": check_shift_invariance,
    "score_copies": check_score_copies,
    "alibi_position_shift": check_alibi_position_shift,
    "huge_softcap_changes_nothing": check_huge_softcap_changes_nothing,
    "minus_infinity_sink_is_no_sink": check_minus_infinity_sink_is_no_sink,
    "sequence_independence": check_sequence_independence,
    "page_permutation": check_page_permutation,
}

# The checks that need a form of the case (``AttentionCase.forms``), and the form.
_NEEDS_FORM = {
    "alibi_position_shift": Form.ALIBI,
    "huge_softcap_changes_nothing": Form.SOFTCAP,
    "minus_infinity_sink_is_no_sink": Form.SINKS,
}


def applicable(name: str, variant: Variant, case: AttentionCase) -> str | None:
    """None when check ``name`` applies to ``variant`` on ``case``, else why not (a skip reason)."""
    if not variant.runs_property_tests:
        if variant.property_tests is False:
            return f"{variant.name} declares property_tests=False"
        return (
            "compiled variants are checked against float64 by the suite; here every transformed input "
            "would compile anew (seconds each); declare property_tests=True to run them anyway"
        )
    from perfsuite.attention.layouts import Storage

    storage = case.layout.storage
    if name == "causality" and storage in _SEQUENCE_STORAGES:
        return None if case.causal else f"{case.mask} is not a causal mask"
    if name in DENSE_CHECKS and not case.layout.is_plain:
        return (
            "a layout case: the check transforms dense [B, H, S, D] inputs and the case's mask; "
            "layout cases have sequence_independence, page_permutation and (padded, packed) causality"
        )
    if name == "sequence_independence" and (storage == Storage.DENSE or case.batch < 2):
        return "one length per batch of dense sequences: batch_and_head_independence covers it"
    if name == "page_permutation" and not case.layout.keys_paged:
        return "not a paged case"
    if name in _NEEDS_FORM and _NEEDS_FORM[name] not in case.forms:
        return f"the case has no {_NEEDS_FORM[name].value}"
    if name == "alibi_position_shift" and (case.causal or mask_kind(case.mask).bottom_right):
        return (
            f"{case.mask} hides keys by query position, so shifting positions changes what is seen"
        )
    if name in ("shift_invariance", "alibi_position_shift") and Form.SINKS in case.forms:
        return "with sinks, a constant added to every score of a row changes its weight against the sink"
    if name == "causality" and not case.causal:
        return f"{case.mask} is not a causal mask"
    if name == "causality" and not case.hides_a_key_here:
        return f"{case.mask} hides no key of this case (every query sees all {case.seq_len_kv})"
    if (
        name
        in (
            "masked_keys_do_not_matter",
            "nan_in_masked_keys_or_values",
            "nan_masked_key_for_masked_fill",
        )
        and not case.hides_a_key_here
    ):
        return (
            f"{case.mask} hides no key"
            if not case.hides_keys
            else f"{case.mask} hides no key of this case (every query sees all {case.seq_len_kv})"
        )
    if name == "nan_masked_key_for_masked_fill" and variant.name not in ("naive", "naive_inplace"):
        return "only the built-in naive and naive_inplace promise this (masked_fill overwrites a NaN score)"
    if name == "shift_invariance" and case.dtype not in ("fp32", "fp64"):
        return (
            "shift invariance is checked in fp32/fp64 (bf16/fp16 cannot hold score + 100 exactly)"
        )
    if name == "score_copies" and (not case.contiguous or case.transposed):
        return "strided inputs: matmul copies them, which can look score-sized"
    if name == "score_copies" and case.head_dim == case.seq_len_kv:
        return "head_dim == seq_len_kv: a copy of the output has the score matrix's shape"
    return None
