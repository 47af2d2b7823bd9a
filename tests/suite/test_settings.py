"""Suite settings resolved once: defaults, precedence of options over ini keys, case sets, errors naming the source."""

from pathlib import Path

import pytest

from perfsuite.errors import ConfigError
from perfsuite.suite import settings


def raw(ini=None, **options):
    values = {
        name: settings.RawValue(spec.default, f"default {name}", "default")
        for name, spec in settings.SETTINGS.items()
    }
    values.update(
        {
            name: settings.RawValue(value, f"ini {name}", "ini")
            for name, value in (ini or {}).items()
        }
    )
    values.update(
        {
            name: settings.RawValue(value, f"option {name}", "option")
            for name, value in options.items()
        }
    )
    return values


def test_defaults_pick_cpu_without_cuda_and_cuda_with_it():
    cpu = settings.resolve(raw(), cuda_available=False)
    assert cpu.devices == ("cpu",) and {c.device for c in cpu.cases} == {"cpu"}
    assert {c.dtype for c in cpu.cases} == {"fp32"} and all(c.causal for c in cpu.cases)
    assert cpu.modes == ("forward", "backward", "forward_backward") and cpu.compiled_cases is None
    cuda = settings.resolve(raw(), cuda_available=True)
    assert cuda.cases[0].id == "b8h16s1024d64-bf16-causal-cuda"


def test_modes_and_compiled_cases_resolve_with_their_precedence():
    assert settings.resolve(raw(modes="backward, forward"), cuda_available=False).modes == (
        "backward",
        "forward",
    )
    with pytest.raises(ConfigError, match="mode 'fwd' is not supported"):
        settings.resolve(raw(modes="fwd"), cuda_available=False)
    compiled = {"compiled_cases": "b1h1s8d8-fp32-causal-cpu"}
    assert [c.id for c in settings.resolve(raw(compiled), False).compiled_cases] == [
        "b1h1s8d8-fp32-causal-cpu"
    ]
    assert (
        settings.resolve(raw(compiled, shapes="1x1x4x4"), False).compiled_cases is None
    )  # the option wins
    assert (
        settings.resolve(raw(None, **compiled), False).compiled_cases[0].id
        == "b1h1s8d8-fp32-causal-cpu"
    )


def test_common_options_override_per_device_keys():
    resolved = settings.resolve(
        raw(shapes="1x1x8x8", dtypes="fp16", masks="both", devices="cpu"), cuda_available=True
    )
    assert [c.id for c in resolved.cases] == [
        "b1h1s8d8-fp16-causal-cpu",
        "b1h1s8d8-fp16-noncausal-cpu",
    ]
    assert resolved.traces_dir == Path("perfsuite-results") / "traces"


def test_ini_keys_refine_the_case_set_but_a_set_named_on_the_command_line_wins():
    ini = {"cpu_shapes": "1x2x4x4", "masks": "bool"}
    from_ini = settings.resolve(raw(ini=ini), cuda_available=False)
    assert {c.shape_id for c in from_ini.cases} == {"b1h2s4d4"} and {
        c.mask for c in from_ini.cases
    } == {"bool"}
    from_option = settings.resolve(raw(ini=ini, case_set="gqa"), cuda_available=False)
    assert {c.shape_id for c in from_option.cases} == {"b2h8kv2s512d64", "b2h8kv1s512d64"}


def test_explicit_case_ids_replace_and_extra_ids_add():
    exact = settings.resolve(raw(cases="b1h2s4d4-fp32-bool-cpu"), cuda_available=False)
    assert [c.id for c in exact.cases] == ["b1h2s4d4-fp32-bool-cpu"]
    extra = settings.resolve(
        raw(case_set="smoke", extra_cases="b1h2s4d4-fp32-bool-cpu"), cuda_available=False
    )
    assert [c.id for c in extra.cases] == [
        "b2h8s256d64-fp32-causal-cpu",
        "b2h8s256d64-fp32-causal-transposed-cpu",
        "b1h2s4d4-fp32-bool-cpu",
    ]


def test_the_default_and_smoke_sets_hold_a_transposed_case_and_own_shapes_do_not():
    """Before: no named case set had a -transposed case, so the stride skip reason was never seen unasked."""
    for name in ("default", "smoke"):
        for cuda in (False, True):
            found = settings.resolve(raw(case_set=name), cuda_available=cuda)
            assert sum(c.transposed for c in found.cases) == 1, name
    own = settings.resolve(raw(shapes="1x2x16x8"), cuda_available=False)
    assert not any(c.transposed for c in own.cases)


def test_pairwise_combinations_cut_the_product_and_say_so():
    product = {
        "cpu_shapes": "1x2x4x4 2x4:2x1:8x4",
        "cpu_dtypes": "fp32 bf16",
        "masks": "causal bool padding",
    }
    full = settings.resolve(raw(ini=product), cuda_available=False)
    pairwise = settings.resolve(
        raw(ini=dict(product, combinations="pairwise")), cuda_available=False
    )
    assert (
        len(full.cases) == 12 and len(pairwise.cases) == 6 and set(pairwise.cases) < set(full.cases)
    )
    assert (
        pairwise.cases_from.endswith(", pairwise combinations")
        and "pairwise" not in full.cases_from
    )
    with pytest.raises(
        ConfigError, match="^option combinations: combinations 'half': expected one of"
    ):
        settings.resolve(raw(combinations="half"), cuda_available=False)


def test_every_case_set_resolves_on_both_devices():
    from perfsuite.attention.case_sets import CASE_SETS

    for name in CASE_SETS:
        for cuda in (False, True):
            assert settings.resolve(raw(case_set=name), cuda_available=cuda).cases


def test_errors_name_the_source():
    with pytest.raises(ConfigError, match=r"^option dtypes: dtype 'fp9'"):
        settings.resolve(raw(dtypes="fp9"), cuda_available=False)
    with pytest.raises(
        ConfigError, match="option case_set: case set 'huge' is unknown; known: smoke"
    ):
        settings.resolve(raw(case_set="huge"), cuda_available=False)


def test_timer_flush_and_graph_settings():
    default = settings.resolve(raw(), cuda_available=False)
    assert (default.timer, default.l2_flush, default.cuda_graphs) == ("host", True, True)
    chosen = settings.resolve(
        raw(timer="kernel", l2_flush="off", cuda_graphs="off"), cuda_available=False
    )
    assert (chosen.timer, chosen.l2_flush, chosen.cuda_graphs) == ("kernel", False, False)
    with pytest.raises(
        ConfigError, match="option timer: timer 'cupti' is not one of host, cuda_event, kernel"
    ):
        settings.resolve(raw(timer="cupti"), cuda_available=False)
    with pytest.raises(ConfigError, match="ini l2_flush: 'yes' is not on or off"):
        settings.resolve(raw({"l2_flush": "yes"}), cuda_available=False)


def test_compiled_adapters_run_on_the_cases_both_lists_share():
    from perfsuite.suite.session import SuiteSession
    from perfsuite.variants import get_variant

    ini = {
        "compiled_cases": "b1h1s8d8-fp32-causal-cpu b1h1s8d8-bf16-padding-cpu",
        "adapter_cases": "b1h1s8d8-fp32-causal-cpu b1h1s8d8-fp32-padding-cpu",
    }
    session = SuiteSession(settings.resolve(raw(ini=ini), cuda_available=False), ())
    ids = lambda name: [c.id for c in session.cases_for(get_variant(name))]
    assert ids("hf_flex_attention") == [
        "b1h1s8d8-fp32-causal-cpu"
    ]  # compiled and an adapter: the shared case
    assert ids("flex_compiled") == ["b1h1s8d8-fp32-causal-cpu", "b1h1s8d8-bf16-padding-cpu"]
    assert ids("hf_eager") == ["b1h1s8d8-fp32-causal-cpu", "b1h1s8d8-fp32-padding-cpu"]
    apart = SuiteSession(
        settings.resolve(raw(ini=dict(ini, adapter_cases="b1h1s8d8-fp32-padding-cpu")), False), ()
    )
    assert [c.id for c in apart.cases_for(get_variant("hf_flex_attention"))] == ids("flex_compiled")


class _Config:
    """The few ``pytest.Config`` calls ``perfsuite.suite.options`` makes, for a run with ``-o``."""

    inipath = Path("/repo/pyproject.toml")

    def __init__(self, override_ini):
        self.override_ini = override_ini

    def getini(self, key):
        return [o.partition("=")[2] for o in self.override_ini if o.startswith(f"{key}=")]

    def getoption(self, name):
        return {"override_ini": self.override_ini, "perfsuite_variant": []}[name]


def test_a_user_variant_given_with_dash_o_is_traced_to_dash_o_not_to_the_file():
    from perfsuite.suite.options import variant_specs

    assert variant_specs(_Config(["perfsuite_user_variants=myattn:f"])) == [
        ("myattn:f", "ini key perfsuite_user_variants from -o")
    ]
    assert variant_specs(_Config([])) == []


def test_each_resolved_value_keeps_the_option_or_key_that_set_it():
    resolved = settings.resolve(raw({"modes": "forward"}, variants="naive"), cuda_available=False)
    assert resolved.sources["variants"] == "--perfsuite-variants"
    assert resolved.sources["modes"] == "perfsuite_modes"
    assert resolved.sources["seed"] == "default"


def test_score_modifications_come_from_the_model_set_the_option_or_the_ini_and_errors_name_it():
    bloom = settings.resolve(raw(case_set="model-bloom-7b1"), cuda_available=False)
    assert {c.id.split("-", 3)[-1] for c in bloom.cases} == {"alibi-cpu"}
    decode = settings.resolve(
        raw(case_set="llm-decode", dtypes="fp32", score_mods="none softcap50-sinks"),
        cuda_available=False,
    )
    assert [c.score_mods.spec for c in decode.cases] == ["none", "softcap50-sinks"] * 2
    on_cpu = settings.resolve(raw({"cpu_score_mods": "alibi"}), cuda_available=False)
    assert all(c.score_mods.alibi for c in on_cpu.cases)
    with pytest.raises(ConfigError, match=r"^option score_mods: query_offset=5000 puts"):
        settings.resolve(raw(case_set="llm-decode", score_mods="qoff5000"), cuda_available=False)


def test_cases_chosen_on_the_command_line_win_over_configured_case_ids_and_say_so():
    """Before: ``--perfsuite-case-set masks`` was ignored when the configuration set ``perfsuite_cases``
    (the header said ``cases from ini key perfsuite_cases``)."""
    configured = {"cases": "b1h2s4d4-fp32-bool-cpu", "extra_cases": "b1h2s4d4-fp32-causal-cpu"}
    run = settings.resolve(raw(ini=configured, case_set="masks"), cuda_available=False)
    masks = settings.resolve(raw(case_set="masks"), cuda_available=False)
    assert run.cases == masks.cases
    assert "the command line wins over ini cases" in run.cases_from, run.cases_from
    shapes = settings.resolve(raw(ini=configured, shapes="1x1x8x8"), cuda_available=False)
    assert {c.shape_id for c in shapes.cases} == {"b1h1s8d8"}
    kept = settings.resolve(raw(ini=configured), cuda_available=False)  # no option: the key holds
    assert [c.id for c in kept.cases] == ["b1h2s4d4-fp32-bool-cpu"]


def test_several_case_sets_give_their_cases_together_and_an_unknown_one_is_named():
    """Before: ``perfsuite_case_set`` took one name, so two model families meant case ids copied by hand."""
    both = settings.resolve(raw(ini={"case_set": "smoke masks"}), cuda_available=False)
    smoke = settings.resolve(raw(case_set="smoke"), cuda_available=False).cases
    masks = settings.resolve(raw(case_set="masks"), cuda_available=False).cases
    assert both.cases == tuple(dict.fromkeys(smoke + masks)) and both.case_set == "smoke masks"
    with pytest.raises(ConfigError, match="ini case_set: case set 'nosuch' is unknown"):
        settings.resolve(raw(ini={"case_set": "smoke, nosuch"}), cuda_available=False)


def test_a_variant_bound_to_its_models_case_sets_runs_their_cases_unless_the_command_line_chooses():
    """``register_variant(case_sets=...)``: the variant's own cases, the others' untouched."""
    from perfsuite.variants.registry import register_variant, unregister_variant

    register_variant("bound_to_gqa", "test", case_sets=["gqa"])(
        lambda query, key, value, *, mask, scale: query
    )
    try:
        run = settings.resolve(
            raw(ini={"variants": "bound_to_gqa naive", "cpu_shapes": "1x2x4x4"}), False
        )
        gqa = settings.resolve(raw(case_set="gqa"), False).cases
        assert run.variant_cases["bound_to_gqa"] == gqa  # the set's own shapes, not the ini's
        assert {c.shape_id for c in run.cases} == {"b1h2s4d4"}
        chosen = settings.resolve(raw(ini={"variants": "bound_to_gqa"}, case_set="smoke"), False)
        assert not chosen.variant_cases
        with pytest.raises(ValueError, match="case_sets=...\\): case set 'gqq' is unknown"):
            register_variant("bound_badly", "test", case_sets=["gqq"])(
                lambda query, key, value, *, mask, scale: query
            )
    finally:
        unregister_variant("bound_to_gqa")


def test_the_header_does_not_name_cases_no_variant_runs_when_every_variant_is_bound():
    """Before: ``cases from case set 'default'`` and its ids, though every selected variant ran its own
    bound sets and none of those cases; a run with an unbound variant still names them."""
    from perfsuite.suite.options import header_lines
    from perfsuite.variants.registry import register_variant, unregister_variant

    register_variant("bound_to_gqa_only", "test", case_sets=["gqa"])(
        lambda query, key, value, *, mask, scale: query
    )
    try:
        bound = header_lines(settings.resolve(raw(ini={"variants": "bound_to_gqa_only"}), False))
        mixed = header_lines(
            settings.resolve(raw(ini={"variants": "bound_to_gqa_only naive"}), False)
        )
    finally:
        unregister_variant("bound_to_gqa_only")
    assert not any(line.startswith("perfsuite: cases from") for line in bound), bound
    assert not any(line.startswith("perfsuite: cases=") for line in bound), bound
    assert "perfsuite: cases: every selected variant runs its bound case sets (below)" in bound, (
        bound
    )
    assert any(
        line.startswith("perfsuite: bound_to_gqa_only runs its case sets gqa") for line in bound
    )
    assert any(line.startswith("perfsuite: cases from ") for line in mixed), mixed
