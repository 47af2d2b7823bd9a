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
