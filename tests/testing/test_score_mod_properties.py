"""Modified attention held to the reference and its properties: the score-modification built-ins pass
on drawn cases; the mistakes real implementations make (a wrong ALiBi slope, a missing softcap, a sink
added to the numerator, slopes that do not follow their heads) each fail, naming the element and the
modification; a function with the old signature is not generated on modified cases, with the reason."""

import dataclasses
import re

import pytest
import torch
from hypothesis import given, settings

from perfsuite.attention.case_sets import get_case_set
from perfsuite.attention.cases import AttentionCase, parse_case_id
from perfsuite.attention.score_mods import ScoreMods
from perfsuite.suite.generation import certain_skip
from perfsuite.testing import properties
from perfsuite.testing.strategies import attention_cases, score_mods, seeds
from perfsuite.variants import get_variant
from perfsuite.variants.naive import expand_kv_heads
from perfsuite.variants.registry import Variant, declared_forms

# every mask kind but the random bool one (a row of it may see no key; covered by the suite's cases)
MASKS = ("noncausal", "causal", "causal_br", "additive", "padding", "window")
CHECKS = (
    "matches_reference",
    "batch_and_head_independence",
    "causality",
    "alibi_position_shift",
    "huge_softcap_changes_nothing",
    "minus_infinity_sink_is_no_sink",
)


@settings(max_examples=12)
@given(attention_cases(masks=MASKS, max_seq_len=12, mods=score_mods()), seeds())
def test_naive_mods_has_every_property_on_drawn_modified_cases(case, seed):
    variant = get_variant("naive_mods")
    for name in CHECKS:
        if properties.applicable(name, variant, case) is None:
            assert properties.ALL_CHECKS[name](variant, case, seed) is None


@settings(max_examples=6)
@given(
    attention_cases(
        masks=MASKS,
        max_seq_len=12,
        mods=score_mods(alibi=True, softcap=False, sinks=False, query_offset=True),
    ),
    seeds(),
)
def test_sdpa_alibi_matches_the_reference_at_any_query_offset(case, seed):
    variant = get_variant("sdpa_alibi")
    assert certain_skip(variant, case, "forward") is None
    assert properties.check_matches_reference(variant, case, seed) is None


def user_variant(fn):
    return Variant(name=fn.__name__, fn=fn, description="", forms=declared_forms(fn))


def scores_of(query, key, scale):
    key = expand_kv_heads(key, query.shape[1])
    return torch.matmul(query, key.transpose(-2, -1)) * scale


def finish(scores, mask, value, query):
    if mask.masked_out is not None:
        scores = scores.masked_fill(mask.masked_out, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return torch.matmul(weights, expand_kv_heads(value, query.shape[1]))


def alibi(scores, slopes, positions):
    distance = positions[:, None, :, None] - torch.arange(scores.shape[-1])
    return scores - slopes[None, :, None, None] * distance


def wrong_slope(query, key, value, *, mask, scale, alibi_slopes, query_positions):
    """ALiBi with the slopes in reverse head order (a head-order mistake)."""
    scores = alibi(scores_of(query, key, scale), alibi_slopes.flip(0), query_positions)
    return finish(scores, mask, value, query)


def missing_cap(query, key, value, *, mask, scale, softcap):
    """Declares the softcap and forgets to apply it."""
    return finish(scores_of(query, key, scale), mask, value, query)


def sink_in_numerator(query, key, value, *, mask, scale, sinks):
    """The sink's exp added to the numerator of every weight as well as to the denominator."""
    scores = scores_of(query, key, scale)
    if mask.masked_out is not None:
        scores = scores.masked_fill(mask.masked_out, float("-inf"))
    exp, sink = torch.exp(scores), torch.exp(sinks)[None, :, None, None]
    weights = (exp + sink / scores.shape[-1]) / (exp.sum(-1, keepdim=True) + sink)
    return torch.matmul(weights, expand_kv_heads(value, query.shape[1]))


def own_slopes(query, key, value, *, mask, scale, alibi_slopes, query_positions):
    """Computes its own geometric slopes instead of using the ones passed."""
    slopes = 2.0 ** (-8.0 * torch.arange(1, query.shape[1] + 1) / query.shape[1])
    return finish(alibi(scores_of(query, key, scale), slopes, query_positions), mask, value, query)


DECODE = {
    "batch": 1,
    "num_heads": 4,
    "seq_len_q": 1,
    "seq_len_kv": 16,
    "head_dim": 8,
    "dtype": "fp32",
}


@pytest.mark.parametrize(
    "fn, mods, named",
    [
        (wrong_slope, ScoreMods(alibi=True), r"ALiBi slope of head \d = "),
        (
            missing_cap,
            ScoreMods(softcap=1.0),
            "the output matches the reference without the softcap",
        ),
        (sink_in_numerator, ScoreMods(sinks=True), r"sink logit of head \d = "),
    ],
    ids=["wrong slope", "missing cap", "sink in the numerator"],
)
def test_a_mistake_fails_naming_the_element_and_the_modification(fn, mods, named):
    case = AttentionCase(**DECODE, device="cpu", mask="causal_br", num_kv_heads=2, score_mods=mods)
    failure = properties.check_matches_reference(user_variant(fn), case, 0)
    assert failure is not None
    assert "worst element at [batch, head, query, dim] = [0, " in failure
    assert "score modifications at that element: " in failure
    assert re.search(named, failure), failure


def cap_after_mask(query, key, value, *, mask, scale, softcap):
    """Masks with -inf first and caps after: a hidden key scores -softcap instead of -inf."""
    scores = scores_of(query, key, scale).masked_fill(mask.masked_out, float("-inf"))
    return torch.matmul(
        torch.softmax(softcap * torch.tanh(scores / softcap), dim=-1),
        expand_kv_heads(value, query.shape[1]),
    )


def test_a_cap_after_the_mask_fails_where_a_query_sees_no_key():
    """The masks case set's case with queries that see no key (the only place a hidden key at
    -softcap instead of -inf shows: elsewhere its weight is below the tolerance)."""
    [exact] = get_case_set("masks").cpu.cases.split()
    case = dataclasses.replace(parse_case_id(exact), score_mods=ScoreMods(softcap=50.0))
    assert case.seq_len_q > case.seq_len_kv and case.mask == "causal_br"
    failure = properties.check_matches_reference(user_variant(cap_after_mask), case, 0)
    assert failure is not None and "worst element at [batch, head, query, dim] = [" in failure


def scale_ignored(query, key, value, *, mask, scale, softcap):
    """Caps the unscaled scores: the case's ``scale`` is never used."""
    scores = scores_of(query, key, 1.0)
    return finish(softcap * torch.tanh(scores / softcap), mask, value, query)


def default_scale(query, key, value, *, mask, scale):
    """Uses head_dim ** -0.5 where the case passes another scale."""
    return finish(scores_of(query, key, query.shape[-1] ** -0.5), mask, value, query)


@pytest.mark.parametrize(
    "fn, mods, scale, named",
    [
        (scale_ignored, ScoreMods(softcap=50.0), None, "with scale 1: is `scale` applied?"),
        (
            default_scale,
            ScoreMods(),
            0.3,
            "with the default scale head_dim ** -0.5, not the case's 0.3",
        ),
    ],
    ids=["scale ignored", "default scale"],
)
def test_a_scale_mistake_is_named(fn, mods, scale, named):
    case = AttentionCase(**DECODE, device="cpu", mask="causal_br", score_mods=mods, scale=scale)
    failure = properties.check_matches_reference(user_variant(fn), case, 0)
    assert failure is not None and named in failure, failure


def test_slopes_that_do_not_follow_their_heads_fail_the_head_permutation():
    case = AttentionCase(
        **DECODE, device="cpu", mask="noncausal", num_kv_heads=4, score_mods=ScoreMods(alibi=True)
    )
    variant = user_variant(own_slopes)
    assert properties.check_matches_reference(variant, case, 0) is None  # right on the case itself
    failure = properties.check_batch_and_head_independence(variant, case, 0)
    assert failure is not None and "permuting heads" in failure


def test_an_old_signature_is_not_generated_on_a_modified_case_and_says_why():
    def old(query, key, value, *, mask, scale):
        return finish(scores_of(query, key, scale), mask, value, query)

    plain = AttentionCase(**DECODE, device="cpu", mask="causal_br")
    modified = AttentionCase(
        **DECODE, device="cpu", mask="causal_br", score_mods=ScoreMods(alibi=True, softcap=50)
    )
    variant = user_variant(old)
    assert certain_skip(variant, plain, "forward") is None
    reason = certain_skip(variant, modified, "forward")
    assert (
        reason.startswith("old does not declare alibi (")
        and "declare with keywords alibi_slopes, query_positions" in reason
    )
    assert "softcap (" in reason
    sdpa = certain_skip(get_variant("sdpa"), modified, "forward")
    assert "sdpa cannot do" in sdpa and "softcap: SDPA applies nothing between" in sdpa


def test_a_near_miss_of_a_form_keyword_is_named_in_the_reason():
    def gemma(query, key, value, *, mask, scale, logit_softcap=50.0):
        return finish(scores_of(query, key, scale), mask, value, query)

    capped = AttentionCase(
        **DECODE, device="cpu", mask="causal_br", score_mods=ScoreMods(softcap=50)
    )
    reason = certain_skip(user_variant(gemma), capped, "forward")
    assert reason.endswith(
        "its parameter logit_softcap is no form keyword (did you mean 'softcap'?)"
    )


def test_the_gemma_set_fails_a_cap_after_the_mask_and_names_the_order():
    """Before: a softcap applied after the mask passed the float64 check on every case of
    ``model-gemma-2-2b`` (no query there sees no key); now its small case with unseen rows fails,
    naming the order."""
    cases = get_case_set("model-gemma-2-2b").cpu.cases.split()
    assert cases, "model-gemma-2-2b has no case where the softcap and mask order shows"
    case = dataclasses.replace(parse_case_id(cases[0]), score_mods=ScoreMods(softcap=50.0))
    failure = properties.check_matches_reference(user_variant(cap_after_mask), case, 0)
    assert failure is not None and "softcap applied after the mask" in failure, failure


def window_one_too_wide(query, key, value, *, mask, scale, softcap):
    """A sliding window that lets each query see one key more than the window (off by one)."""
    window = int(mask.kind.removeprefix("window"))
    q_idx = torch.arange(query.shape[2])[:, None] + key.shape[2] - query.shape[2]
    distance = q_idx - torch.arange(key.shape[2])[None, :]
    hidden = (distance < 0) | (distance > window)
    scores = softcap * torch.tanh(scores_of(query, key, scale) / softcap)
    weights = torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1)
    return torch.matmul(weights, expand_kv_heads(value, query.shape[1]))


# a grouped-query softcap case with a window: a window off by one shows on it
GQA_WINDOW4_SOFTCAP_CASE = AttentionCase(
    1, 4, 16, 16, 8, "fp32", "cpu", "window4", num_kv_heads=2, score_mods=ScoreMods(softcap=50.0)
)


def test_a_window_off_by_one_is_named_and_the_softcap_is_not_blamed():
    """Before: a window off by one on a softcap case got ``score modifications at that element:
    softcap 50`` and no word about the window."""
    case = GQA_WINDOW4_SOFTCAP_CASE
    failure = properties.check_matches_reference(user_variant(window_one_too_wide), case, 0)
    assert failure is not None
    assert "the output matches the reference with a window of 5 keys, not 4" in failure, failure
    assert "score modifications at that element" not in failure, failure
    assert "computed below the case's precision" not in failure, failure


def test_a_dropped_softcap_is_not_called_a_precision_loss():
    """Before: the dropped softcap's error 0.00102 was called ``of the size a float16 computation
    makes (0.00028)``: the float16 rerun of the reference does not reproduce it."""
    case = AttentionCase(
        1,
        8,
        64,
        64,
        256,
        "fp32",
        "cpu",
        "causal_br",
        num_kv_heads=4,
        score_mods=ScoreMods(softcap=50.0),
    )
    failure = properties.check_matches_reference(user_variant(missing_cap), case, 0)
    assert failure is not None and "without the softcap" in failure
    assert "computed below the case's precision" not in failure, failure


def tiled_heads(query, key, value, *, mask, scale, softcap):
    """Grouped-query heads expanded with ``repeat``: query head h reads key/value head h % Hkv."""
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat(1, groups, 1, 1), value.repeat(1, groups, 1, 1)
    scores = softcap * torch.tanh(scores_of(query, key, scale) / softcap)
    return finish(scores, mask, value, query)


def test_a_wrong_grouped_query_head_mapping_is_named():
    """Before: only the element, and the large-score probe's mask-value hint."""
    case = AttentionCase(
        **DECODE, device="cpu", mask="causal_br", num_kv_heads=2, score_mods=ScoreMods(softcap=50.0)
    )
    failure = properties.check_matches_reference(user_variant(tiled_heads), case, 0)
    assert failure is not None
    assert "with query head h reading key/value head h % 2 (torch.repeat)" in failure, failure


def gptoss(
    query,
    key,
    value,
    mask,
    scale,
    sinks,
    *,
    numerator=None,
    order=None,
    window_plus=0,
    softcap=None,
):
    """gpt-oss attention as a serving repository writes it (max-subtracted exps, the sink in the
    denominator), with one planted mistake: ``numerator`` "spread" adds exp(sink) / n to every key's
    weight (normalized by their sum plus the sink), "each" adds exp(sink) to every key's weight;
    ``order``: sinks read by that head index; ``window_plus``: the window one key wider; ``softcap``:
    applied (None: dropped)."""
    scores = scores_of(query, key, scale)
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    hidden = mask.masked_out
    if window_plus:
        window = int(mask.kind.removeprefix("window")) + window_plus
        q_idx = torch.arange(query.shape[2])[:, None] + key.shape[2] - query.shape[2]
        distance = q_idx - torch.arange(key.shape[2])[None, :]
        hidden = (distance < 0) | (distance >= window)
    scores = scores.masked_fill(hidden, float("-inf"))
    logits = sinks if order is None else sinks[order]
    top = torch.maximum(scores.amax(-1, keepdim=True), logits[None, :, None, None])
    weights, sink = torch.exp(scores - top), torch.exp(logits[None, :, None, None] - top)
    if numerator == "spread":
        weights = weights + sink / scores.shape[-1]
    elif numerator == "each":
        weights = weights + sink
    return weights / (weights.sum(-1, keepdim=True) + sink) @ expand_kv_heads(value, query.shape[1])


def sink_spread_in_numerator(query, key, value, *, mask, scale, sinks):
    return gptoss(query, key, value, mask, scale, sinks, numerator="spread")


def sink_added_to_each_weight(query, key, value, *, mask, scale, sinks):
    return gptoss(query, key, value, mask, scale, sinks, numerator="each")


def sinks_reversed(query, key, value, *, mask, scale, sinks):
    return gptoss(query, key, value, mask, scale, sinks, order=torch.arange(len(sinks)).flip(0))


def sinks_window_off_by_one(query, key, value, *, mask, scale, sinks):
    return gptoss(query, key, value, mask, scale, sinks, window_plus=1)


def sinks_dropped_softcap(query, key, value, *, mask, scale, sinks, softcap):
    return gptoss(query, key, value, mask, scale, sinks)


def sinks_tiled_heads(query, key, value, *, mask, scale, sinks):
    groups = query.shape[1] // key.shape[1]
    return gptoss(
        query, key.repeat(1, groups, 1, 1), value.repeat(1, groups, 1, 1), mask, scale, sinks
    )


SINK_CASE = {
    "batch": 1,
    "num_heads": 8,
    "seq_len_q": 16,
    "seq_len_kv": 16,
    "head_dim": 8,
    "dtype": "fp32",
    "device": "cpu",
    "mask": "window4",
    "num_kv_heads": 2,
}
SINK_HINTS = ("with the sink in the numerator", "with the sinks in", "sink logit indexed")


@pytest.mark.parametrize(
    "fn, named",
    [
        (
            sink_spread_in_numerator,
            "the output matches the reference with the sink in the numerator (exp(sink) / n added to "
            "each of the n keys' weights, the weights then divided by their sum plus exp(sink)): a "
            "sink belongs in the softmax's denominator only",
        ),
        (
            sink_added_to_each_weight,
            "the output matches the reference with the sink in the numerator (exp(sink) added to every "
            "key's weight, the weights then divided by their sum plus exp(sink))",
        ),
        (
            sinks_reversed,
            "the output matches the reference with the sinks in reversed head order (head h given "
            "sinks[7 - h]): is each head's sink logit indexed by its own head?",
        ),
    ],
    ids=["spread in the numerator", "added to each weight", "reversed heads"],
)
def test_a_sink_mistake_is_confirmed_by_its_rerun(fn, named):
    """Before: only ``score modifications at that element: sink logit of head ...`` (the element,
    not the mistake)."""
    case = AttentionCase(**SINK_CASE, score_mods=ScoreMods(sinks=True))
    failure = properties.check_matches_reference(user_variant(fn), case, 0)
    assert failure is not None and named in failure, failure
    assert sum(hint in failure for hint in SINK_HINTS[:2]) == 1, failure


@pytest.mark.parametrize(
    "fn, mods, named",
    [
        (sinks_window_off_by_one, ScoreMods(sinks=True), "with a window of 5 keys, not 4"),
        (sinks_dropped_softcap, ScoreMods(softcap=5.0, sinks=True), "without the softcap"),
        (sinks_tiled_heads, ScoreMods(sinks=True), "reading key/value head h % 2"),
    ],
    ids=["window off by one", "dropped softcap", "tiled heads"],
)
def test_another_mistake_on_a_sink_case_gets_no_sink_hint(fn, mods, named):
    """The sink hints are said only where their own rerun reproduces the output."""
    case = AttentionCase(**SINK_CASE, score_mods=mods)
    failure = properties.check_matches_reference(user_variant(fn), case, 0)
    assert failure is not None and named in failure, failure
    assert not any(hint in failure for hint in SINK_HINTS), failure


def gemma_cap_after_mask(query, key, value, *, mask, scale, softcap):
    """Gemma-style, its softcap applied last: the bias and the mask first, hidden keys at -inf, then
    ``softcap * tanh``, so a hidden key scores ``-softcap``."""
    scores = scores_of(query, key, scale)
    if mask.additive is not None:
        scores = scores + mask.additive
    if mask.masked_out is not None:
        scores = scores.masked_fill(mask.masked_out, float("-inf"))
    weights = torch.softmax(softcap * torch.tanh(scores / softcap), dim=-1)
    return torch.matmul(weights, expand_kv_heads(value, query.shape[1]))


def test_a_cap_after_the_mask_where_every_row_sees_a_key_is_named_by_shift_invariance():
    """On a ``model-gemma-2-2b`` decode case (every query sees 96 keys of its window) the float64
    check passes a softcap after the mask (a hidden key's ``exp(-50)`` is below every tolerance); the
    shift-invariance property fails and its first line now names the order. Before: only ``adding a
    constant to every score of a row changed the output``."""
    gemma = get_case_set("model-gemma-2-2b").cpu
    shape = gemma.shapes.split()[1].replace("x", "").split(":")  # 2x8:4x1:4160x256
    case_id = f"b{shape[0][0]}h{shape[0][1:]}kv{shape[1][0]}q1k4160d256-fp32-window4096-cpu"
    case = dataclasses.replace(parse_case_id(case_id), score_mods=ScoreMods(softcap=50.0))
    variant = user_variant(gemma_cap_after_mask)
    assert properties.applicable("shift_invariance", variant, case) is None
    assert (
        properties.check_matches_reference(variant, case, 0) is None
    )  # the float64 check is blind here
    failure = properties.check_shift_invariance(variant, case, 0)
    assert failure is not None
    first, second = failure.splitlines()[:2]
    assert first.startswith(
        f"variant gemma_cap_after_mask on case {case.id} (seed 0): the output matches the reference "
        "with the softcap applied after the mask"
    ), failure
    assert (
        "apply the softcap before the mask: hidden keys score softcap * tanh(-inf) = -50, not -inf"
        in first
    )
    assert second.startswith("adding a constant to every score of a row changed the output"), (
        failure
    )


def test_a_shift_failure_of_another_mistake_does_not_blame_the_softcap_order():
    """A softcap case whose shift failure is a clamp of the scores: no softcap-order line."""

    def clamped(query, key, value, *, mask, scale, softcap):
        scores = softcap * torch.tanh(scores_of(query, key, scale) / softcap)
        if mask.additive is not None:
            scores = scores + mask.additive
        return finish(scores.clamp(min=-20.0, max=20.0), mask, value, query)

    case = AttentionCase(
        1, 4, 8, 16, 8, "fp32", "cpu", "window4", num_kv_heads=2, score_mods=ScoreMods(softcap=50.0)
    )
    failure = properties.check_shift_invariance(user_variant(clamped), case, 0)
    assert (
        failure is not None
        and failure.splitlines()[0].endswith(
            "adding a constant to every score of a row changed the output"
        )
        or "changed the output (" in failure.splitlines()[0]
    ), failure
    assert "softcap applied after the mask" not in failure, failure


def test_the_first_line_of_a_failure_names_its_confirmed_cause():
    """Before: every failure began ``not within atol=..., rtol=... of the float64 reference; worst
    element ...`` and the confirmed cause came lines later; now the cause is the first line, the
    comparison's detail the second. A failure with no confirmed cause keeps its first line."""
    case = GQA_WINDOW4_SOFTCAP_CASE
    label = f"variant window_one_too_wide on case {case.id} (seed 0)"
    failure = properties.check_matches_reference(user_variant(window_one_too_wide), case, 0)
    first, second = failure.splitlines()[:2]
    assert first == (
        f"{label}: the output matches the reference with a window of 5 keys, not 4: a query i sees keys "
        "i-3 .. i (bottom-right); is the window's edge off by one?"
    ), failure
    assert second.startswith("not within atol="), failure
    assert "of the float64 reference; worst element" in second, failure
    assert failure.count("the output matches the reference with a window") == 1, failure

    def hidden_keys_halved(query, key, value, *, mask, scale, softcap):
        return window_one_too_wide(query, key, value, mask=mask, scale=scale, softcap=softcap) * 0.5

    failure = properties.check_matches_reference(user_variant(hidden_keys_halved), case, 0)
    assert failure.splitlines()[0].startswith(
        "variant hidden_keys_halved on case " + case.id + " (seed 0): not within atol="
    ), failure
