"""Tests of the property tests: a variant broken on purpose must be caught by its property,
and the failure must name a case id that reruns as an ordinary suite test."""

import pytest
import torch
from hypothesis import Phase, given, settings

from perfsuite.testing import properties
from perfsuite.attention.cases import parse_case_id
from perfsuite.testing.strategies import MASKS_HIDING_KEYS, attention_cases, seeds
from perfsuite.variants import Variant, get_variant
from perfsuite.variants.naive import expand_kv_heads, naive_attention


def broken(name, fn):
    return Variant(name=name, fn=fn, description="broken on purpose", fully_masked_rows="nan")


def leaks_future_keys(query, key, value, *, mask, scale):
    """Ignores the mask entirely."""
    key, value = expand_kv_heads(key, query.shape[1]), expand_kv_heads(value, query.shape[1])
    return torch.softmax(query @ key.transpose(-2, -1) * scale, dim=-1) @ value


def tiles_kv_heads(query, key, value, *, mask, scale):
    """GQA with ``repeat`` instead of ``repeat_interleave``: query heads meet the wrong kv heads."""
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat(1, groups, 1, 1), value.repeat(1, groups, 1, 1)
    return naive_attention(query, key, value, mask=mask, scale=scale)


def clamps_scores(query, key, value, *, mask, scale):
    """ "Protects" softmax by clamping the scores to [-30, 30], which breaks shift invariance."""
    key, value = expand_kv_heads(key, query.shape[1]), expand_kv_heads(value, query.shape[1])
    big = (query @ key.transpose(-2, -1)) * scale
    if mask.additive is not None:
        big = big + mask.additive
    if mask.masked_out is not None:
        big = big.masked_fill(mask.masked_out, float("-inf"))
    weights = torch.softmax(big.clamp(-30, 30), dim=-1)
    return weights @ value


def copies_scores(query, key, value, *, mask, scale):
    """naive_inplace with a hidden clone of the scores."""
    extra = (query @ expand_kv_heads(key, query.shape[1]).transpose(-2, -1)).clone()
    return (
        get_variant("naive_inplace").fn(query, key, value, mask=mask, scale=scale)
        + 0 * extra[..., :1]
    )


def wrong_scale(query, key, value, *, mask, scale):
    return naive_attention(query, key, value, mask=mask, scale=scale * 1.1)


def caught(check, variant, cases, **kwargs):
    """Search like the property test does; return the failure message hypothesis raised."""

    @settings(
        max_examples=300, derandomize=True, database=None, phases=[Phase.generate], deadline=None
    )
    @given(case=cases, seed=seeds())
    def search(case, seed):
        failure = check(variant, case, seed, **kwargs)
        assert failure is None, failure

    with pytest.raises(AssertionError) as info:
        search()
    return str(info.value)


def assert_reproducible(message):
    assert "reproduce: perfsuite run --check -k test_property --perfsuite-cases " in message
    case_id = message.split("--perfsuite-cases ")[1].split()[0]
    assert parse_case_id(case_id).id == case_id


def test_reference_property_catches_a_wrong_scale():
    message = caught(
        properties.check_matches_reference, broken("wrong_scale", wrong_scale), attention_cases()
    )
    assert "not within atol" in message
    assert_reproducible(message)


def test_head_independence_catches_tiled_kv_heads():
    message = caught(
        properties.check_batch_and_head_independence,
        broken("tiles", tiles_kv_heads),
        attention_cases(),
    )
    assert "permuting heads" in message
    assert_reproducible(message)


def test_causality_catches_a_variant_that_leaks_future_keys():
    message = caught(
        properties.check_causality,
        broken("leaky", leaks_future_keys),
        attention_cases(masks=("causal", "causal_br", "window")),
    )
    assert "changed when keys >=" in message
    assert_reproducible(message)


def test_masking_catches_a_variant_that_ignores_the_mask():
    message = caught(
        properties.check_masked_keys_do_not_matter,
        broken("leaky", leaks_future_keys),
        attention_cases(masks=MASKS_HIDING_KEYS),
    )
    assert "rows that cannot see key" in message


def test_nan_rule_catches_a_variant_that_ignores_the_mask():
    message = caught(
        properties.check_nan_masked_key,
        broken("leaky", leaks_future_keys),
        attention_cases(masks=MASKS_HIDING_KEYS),
    )
    assert "NaN in masked-out key" in message


def test_shift_invariance_catches_clamped_scores():
    message = caught(
        properties.check_shift_invariance, broken("clamps", clamps_scores), attention_cases()
    )
    assert "adding a constant" in message


def test_structure_catches_a_hidden_copy_of_the_scores():
    sneaky = Variant(name="sneaky_inplace", fn=copies_scores, description="broken on purpose")
    message = caught(properties.check_score_copies, sneaky, attention_cases(contiguous=True))
    assert "1 extra copy of the score matrix per forward: aten::clone [" in message
    assert "(score-sized copies per forward [1, 1], expected 0)" in message
