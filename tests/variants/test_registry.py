import pytest

from perfsuite.variants import get_variant, registry, variant_names
from perfsuite.variants.registry import register_variant


@pytest.fixture(autouse=True)
def scratch_registry(monkeypatch):
    """Variants registered here vanish after the test."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


def test_builtin_variants_are_registered_in_order():
    assert variant_names()[:10] == [
        "naive",
        "naive_inplace",
        "naive_compiled",
        "sdpa",
        "sdpa_math",
        "sdpa_flash",
        "sdpa_efficient",
        "sdpa_cudnn",
        "flex_eager",
        "flex_compiled",
    ]
    assert [v for v in variant_names()[:10] if get_variant(v).compiled] == [
        "naive_compiled",
        "flex_compiled",
    ]
    assert get_variant("sdpa_flash").sdpa_backend == "FLASH_ATTENTION"
    assert get_variant("naive").expected_score_copies(hides_keys=True) == 1
    assert get_variant("naive").expected_score_copies(hides_keys=False) == 0
    assert get_variant("naive_inplace").expected_score_copies(hides_keys=True) == 0
    assert (
        get_variant("naive").fully_masked_rows == "nan"
        and get_variant("sdpa_math").fully_masked_rows == "zeros"
    )


def test_register_returns_the_function_unchanged_and_refuses_duplicates():
    def attention(query, key, value, *, mask, scale):
        return query

    assert register_variant("test_only_identity", "for a test")(attention) is attention
    with pytest.raises(ValueError, match="'test_only_identity' is already registered"):
        register_variant("test_only_identity", "again")(attention)


def test_register_checks_the_signature():
    def wrong(q, k, v, causal):
        return q

    with pytest.raises(TypeError, match="expected \\(query, key, value, \\*, mask, scale\\)"):
        register_variant("test_only_wrong", "bad")(wrong)
    assert "test_only_wrong" not in variant_names()


def test_unknown_variant_lists_the_known_ones():
    with pytest.raises(
        ValueError,
        match=r"unknown attention variant 'sdpa_flsh' \(did you mean 'sdpa_flash'\?\); known: naive, naive_inplace",
    ):
        get_variant("sdpa_flsh")
    with pytest.raises(
        ValueError, match=r"unknown attention variant 'zzz'; known: naive, naive_inplace"
    ):
        get_variant("zzz")


def test_a_user_function_with_an_extra_keyword_with_a_default_is_accepted_and_runs(tmp_path):
    """``chunk=32`` (a tuning knob the suite leaves at its default) is accepted; without a default it is not."""
    import torch

    from perfsuite.attention.cases import AttentionCase
    from perfsuite.measure.evidence import gather_evidence

    def chunked(query, key, value, *, mask, scale, chunk=8):
        pieces = []
        for start in range(0, query.shape[2], chunk):
            scores = (query[:, :, start : start + chunk] @ key.transpose(-2, -1)).mul_(scale)
            if mask.additive is not None:
                scores.add_(mask.additive[..., start : start + chunk, :])
            if mask.masked_out is not None:
                scores.masked_fill_(mask.masked_out[..., start : start + chunk, :], float("-inf"))
            pieces.append(torch.softmax(scores, dim=-1).nan_to_num(0.0) @ value)
        return torch.cat(pieces, dim=2)

    register_variant("test_only_chunked", "chunked")(chunked)
    case = AttentionCase(1, 2, 16, 16, 8, "fp32", "cpu", "causal")
    evidence = gather_evidence(get_variant("test_only_chunked"), case, 0, tmp_path)
    assert evidence.comparison.failure is None

    def required(query, key, value, *, mask, scale, chunk):
        return query

    with pytest.raises(TypeError, match="chunk without a default"):
        register_variant("test_only_required", "bad")(required)


def test_devices_and_fully_masked_row_results_are_the_attention_layer_s():
    from perfsuite.attention import cases, reference

    assert registry.DEVICES is cases.DEVICES
    assert registry.FULLY_MASKED_ROW_RESULTS == tuple(reference.FullyMaskedRows)
    with pytest.raises(
        ValueError, match="fully_masked_rows='zero'; allowed: zeros, nan, finite, any"
    ):
        registry.register_variant("bad_rows", "test-only", fully_masked_rows="zero")(
            get_variant("naive").fn
        )


def test_a_flash_implementation_is_claimed_only_by_a_flash_pinned_variant():
    def attention(query, key, value, *, mask, scale):
        return query

    with pytest.raises(
        ValueError, match="flash_impl='FA3' with sdpa_backend='EFFICIENT_ATTENTION'"
    ):
        register_variant(
            "test_only_fa3_efficient", "bad", sdpa_backend="EFFICIENT_ATTENTION", flash_impl="FA3"
        )(attention)
    with pytest.raises(ValueError, match="one of FA4, FA3, FA2"):
        register_variant("test_only_fa9", "bad", sdpa_backend="FLASH_ATTENTION", flash_impl="FA9")(
            attention
        )
    assert "test_only_fa9" not in variant_names()
    from perfsuite.trace import kernel_families
    from perfsuite.variants import registry

    assert set(registry.FLASH_IMPLS) == set(
        kernel_families.FLASH_IMPLS
    )  # a rule per claimable name


@pytest.mark.parametrize("name", ["../../../x/ESCAPED", "a/b", "..", ".hidden", "a\\b", "", "x\0y"])
def test_a_name_that_could_leave_its_folder_or_split_a_key_is_refused(name):
    def fn(query, key, value, *, mask, scale):
        return query

    with pytest.raises(ValueError, match="allowed: letters, digits"):
        registry.register_variant(name, "t")(fn)
    assert name not in registry.variant_names()


def test_requires_a_form_whose_keywords_the_function_does_not_take_is_refused():
    def dense_only(query, key, value, *, mask, scale):
        return query

    with pytest.raises(ValueError, match="requires='varlen'.*takes no keyword cu_seqlens_q"):
        registry.register_variant("needs_varlen", "t", requires=["varlen"])(dense_only)
    assert "needs_varlen" not in registry.variant_names()
