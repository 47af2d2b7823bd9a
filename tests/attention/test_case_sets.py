"""The real-model case sets: shapes built from each model's numbers, checked against transformers' configs."""

import pytest

from perfsuite.attention.case_sets import CASE_SETS, MODEL_SHAPES
from perfsuite.attention.cases import parse_shape
from perfsuite.attention.masks import window_size


@pytest.mark.parametrize("key", list(MODEL_SHAPES))
def test_model_sets_use_the_models_heads_head_dim_and_window(key):
    model = MODEL_SHAPES[key]
    case_set = CASE_SETS[f"model-{key}"]
    assert model.source in case_set.description
    for device in (case_set.cpu, case_set.cuda):
        for text in device.shapes.split():
            shape = parse_shape(text)
            assert (shape.num_heads, shape.num_kv_heads, shape.head_dim) == (
                model.num_heads,
                model.num_kv_heads,
                model.head_dim,
            )
        windows = {window_size(m) for m in device.masks.split()}
        if model.sliding_window:
            assert windows - {None} == {model.sliding_window}
            assert (None in windows) == model.alternating  # the full layers beside the windowed
        assert device.score_mods == model.score_mods


def test_bert_base_is_transformers_bert_config_default():
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig()
    bert = MODEL_SHAPES["bert-base"]
    assert (config.num_attention_heads, config.hidden_size // config.num_attention_heads) == (
        bert.num_heads,
        bert.head_dim,
    )


def test_prefill_of_the_sliding_window_set_is_longer_than_the_window():
    """Otherwise window<W> equals causal and the set would not test the window."""
    gemma = MODEL_SHAPES["gemma-3-1b"]
    for text in CASE_SETS["model-gemma-3-1b"].cpu.shapes.split():
        assert parse_shape(text).seq_len_kv > gemma.sliding_window


def test_a_mistyped_case_set_gets_its_suggestion_a_far_one_none():
    from perfsuite.attention.case_sets import get_case_set

    with pytest.raises(
        ValueError,
        match=r"case set 'model-llama3-8b' is unknown \(did you mean 'model-llama-3-8b'\?\)",
    ):
        get_case_set("model-llama3-8b")
    with pytest.raises(ValueError, match=r"case set 'huge' is unknown; known: smoke"):
        get_case_set("huge")
