"""The contract's forms: what a function declares, the reason a function is not run on a form it lacks."""

import pytest

from perfsuite.attention.contract import (
    FORMS,
    Form,
    declared_forms,
    form_keyword_values,
    handles,
    parse_form,
    undeclared_forms_reason,
)
from perfsuite.variants.registry import check_signature


def plain(query, key, value, *, mask, scale):
    return query


def capped(query, key, value, *, mask, scale, softcap):
    return query


def alibi_without_positions(query, key, value, *, mask, scale, alibi_slopes):
    return query


def test_a_form_is_declared_by_naming_all_its_keywords():
    assert declared_forms(plain) == frozenset()
    assert declared_forms(capped) == {Form.SOFTCAP}
    assert declared_forms(alibi_without_positions) == frozenset()  # ALiBi needs query_positions too


def test_keywords_of_forms_need_no_default_other_extras_do():
    check_signature("capped", capped)

    def extra(query, key, value, *, mask, scale, chunk):
        return query

    with pytest.raises(TypeError, match="chunk without a default"):
        check_signature("extra", extra)


def test_a_form_without_keywords_is_declared_with_handles():
    decorated = handles("value_head_dim")(plain)
    assert declared_forms(decorated) == {Form.VALUE_HEAD_DIM}
    with pytest.raises(ValueError, match="form 'mla' is unknown; allowed: alibi"):
        handles("mla")
    assert parse_form(" SoftCap ") is Form.SOFTCAP


def test_the_reason_names_each_missing_form_and_how_to_declare_it():
    reason = undeclared_forms_reason("mine", frozenset({Form.SOFTCAP}), {Form.SOFTCAP, Form.ALIBI})
    assert reason.startswith("mine does not declare alibi (a per-head linear position bias")
    assert "declare with keywords alibi_slopes, query_positions" in reason
    assert undeclared_forms_reason("mine", frozenset({Form.SOFTCAP}), {Form.SOFTCAP}) is None
    assert "@perfsuite.handles('value_head_dim')" in undeclared_forms_reason(
        "mine", frozenset(), {Form.VALUE_HEAD_DIM}
    )


def test_only_the_keywords_of_carried_forms_are_passed():
    values = {"softcap": 50.0, "sinks": "s", "alibi_slopes": "a", "query_positions": "p"}
    assert form_keyword_values({Form.SOFTCAP}, values) == {"softcap": 50.0}
    with pytest.raises(KeyError, match="lack num_splits"):
        form_keyword_values({Form.SPLIT_KV}, values)
    assert all(spec.meaning for spec in FORMS.values())


def test_a_parameter_named_as_another_library_names_a_form_is_told_the_keyword():
    from perfsuite.variants.registry import register_variant, unregister_variant

    def gemma(query, key, value, *, mask, scale, attn_logit_softcapping=None, s_aux=None):
        return query

    register_variant("gemma_aliases", "test")(gemma)
    variant = unregister_variant("gemma_aliases")
    reason = variant.forms_unsupported(frozenset({Form.SOFTCAP, Form.SINKS}))
    assert "its parameter attn_logit_softcapping is what perfsuite passes as 'softcap'" in reason
    assert "its parameter s_aux is what perfsuite passes as 'sinks'" in reason
