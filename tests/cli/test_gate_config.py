"""Which configuration ``perfsuite ab`` gates two refs with: a change that edits what is gated is named."""

from perfsuite.cli.gate import changed_gate_keys

BASE = """[tool.pytest.ini_options]
perfsuite_user_variants = ["myattn.attention:blocked_attention"]
perfsuite_variants = "blocked_attention sdpa"
perfsuite_case_set = "smoke"
"""


def test_a_head_that_drops_its_own_variant_from_the_gate_is_named(tmp_path):
    base, head = tmp_path / "base", tmp_path / "head"
    base.mkdir()
    head.mkdir()
    (base / "pyproject.toml").write_text(BASE)
    (head / "pyproject.toml").write_text(BASE.replace('"blocked_attention sdpa"', '"sdpa"'))
    assert changed_gate_keys(base, head) == ["perfsuite_variants"]
    (head / "pyproject.toml").write_text(BASE + "# a comment only\n")
    assert changed_gate_keys(base, head) == []


def _ab_args(root, **options):
    import argparse

    values = {"case_set": None, "cases": None, "devices": "cpu", "config_root": root}
    return argparse.Namespace(**(values | options))


def test_ab_gates_the_cases_the_configuration_names(tmp_path):
    from perfsuite.cli.gate import resolve_case_ids

    case = "b1h2s512d32-fp32-causal-cpu"
    (tmp_path / "pyproject.toml").write_text(
        f'[tool.pytest.ini_options]\nperfsuite_cases = "{case}"\n'
    )
    assert resolve_case_ids(_ab_args(tmp_path)) == [case]  # as perfsuite run times them
    smoke = resolve_case_ids(_ab_args(tmp_path, case_set="smoke"))
    assert case not in smoke and smoke  # an explicit --case-set wins over the configured cases
    other = "b2h4s64d32-fp32-causal-cpu"
    assert resolve_case_ids(_ab_args(tmp_path, cases=other)) == [other]
