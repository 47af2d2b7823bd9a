"""Mask kinds: names parsed with a clear error, causal alignment (top-left, bottom-right), windows, fully masked rows."""

import pytest
import torch

from perfsuite.attention.masks import (
    PLAIN_KINDS,
    build_mask,
    causal_allowed,
    fully_masked_rows,
    mask_kind,
    parse_mask_kind,
    window_allowed,
    window_size,
)


def test_kinds_are_parsed_or_refused_naming_what_is_allowed():
    assert [parse_mask_kind(k.upper()) for k in PLAIN_KINDS] == list(PLAIN_KINDS)
    assert (
        parse_mask_kind(" window16 ") == "window16"
        and window_size("window16") == 16
        and window_size("causal") is None
    )
    for bad in ("window0", "diagonal"):
        with pytest.raises(
            ValueError, match=f"mask '{bad}' is not supported; allowed: noncausal, .*window<W>"
        ):
            parse_mask_kind(bad)


def test_causal_is_top_left_and_causal_br_bottom_right_when_lengths_differ():
    top_left = causal_allowed(2, 4, "cpu", bottom_right=False)
    bottom_right = causal_allowed(2, 4, "cpu", bottom_right=True)
    assert top_left.tolist() == [[True, False, False, False], [True, True, False, False]]
    assert bottom_right.tolist() == [[True, True, True, False], [True, True, True, True]]


def test_a_window_sees_its_last_keys_only():
    assert window_allowed(1, 5, 2, "cpu").tolist() == [[False, False, False, True, True]]
    assert mask_kind("window2").causal and mask_kind("window2").hides_keys


def mask(kind, shape):
    return build_mask(kind, shape, torch.float32, "cpu", torch.Generator().manual_seed(0))


def test_fully_masked_rows_are_the_queries_that_see_no_key():
    shape = (1, 2, 4, 2)  # causal, top-left, 4 queries over 2 keys: every query sees key 0
    assert not fully_masked_rows(mask("causal", shape), shape).any()
    bottom_right = fully_masked_rows(mask("causal_br", shape), shape)
    assert bottom_right.shape == (1, 2, 4) and bottom_right[0, 0].tolist() == [
        True,
        True,
        False,
        False,
    ]
    assert not fully_masked_rows(mask("noncausal", shape), shape).any()
