"""Users' own attention functions: command-line specs and entry points (examples/chunked_attention)."""

import importlib.metadata
import os
import sys
from pathlib import Path

import pytest

from perfsuite.variants import get_variant, registry
from perfsuite.variants.user import ENTRY_POINT_GROUP, load_entry_point_variants, load_variant_spec

EXAMPLE_SRC = Path(__file__).resolve().parents[2] / "examples" / "chunked_attention" / "src"
SUITE = (
    Path(__file__).resolve().parents[2] / "perfsuite" / "suite" / "test_attention.py"
).read_text()


@pytest.fixture(autouse=True)
def scratch_registry(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.syspath_prepend(str(EXAMPLE_SRC))


def test_a_spec_registers_the_function_under_its_name():
    from perfsuite.attention.cases import parse_case_id
    from perfsuite.testing.properties import reproduce_hint
    from perfsuite.variants.user import variant_spec

    assert load_variant_spec("chunked_attention.variant:chunked_attention") == "chunked_attention"
    variant = get_variant("chunked_attention")
    assert variant_spec("chunked_attention") == "chunked_attention.variant:chunked_attention"
    hint = reproduce_hint(variant, parse_case_id("b1h2s8d4-fp32-causal-cpu"), 3)
    assert hint.endswith(
        "--perfsuite-variants chunked_attention --perfsuite-variant "
        "chunked_attention.variant:chunked_attention"
    )  # the printed command loads the user's function as the run did
    assert variant_spec("sdpa") is None
    assert variant.description.startswith(
        "user variant from chunked_attention.variant:chunked_attention"
    )
    assert (
        load_variant_spec("chunked_attention.variant:chunked_attention") == "chunked_attention"
    )  # idempotent


def test_a_decorated_builtin_keeps_its_declaration():
    assert load_variant_spec("perfsuite.variants.naive:naive_attention") == "naive"


@pytest.mark.parametrize(
    "spec, message",
    [
        ("chunked_attention.variant", "is not package.module:function"),
        ("nosuch.module:f", "cannot import 'nosuch.module'"),
        ("chunked_attention.variant:nothing", "has no function 'nothing'"),
        ("os:getcwd", "has signature (); expected (query, key, value, *, mask, scale)"),
    ],
)
def test_bad_specs_are_named(spec, message):
    with pytest.raises(
        ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")
    ) as info:
        load_variant_spec(spec)
    assert spec in str(info.value) or "getcwd" in str(info.value)


def test_entry_points_register_their_variants(monkeypatch):
    entry = importlib.metadata.EntryPoint(
        "chunked", "chunked_attention.variant:chunked_attention", ENTRY_POINT_GROUP
    )
    broken = importlib.metadata.EntryPoint("broken", "nosuch.module:f", ENTRY_POINT_GROUP)
    monkeypatch.setattr(
        importlib.metadata,
        "entry_points",
        lambda group: [entry] if group == ENTRY_POINT_GROUP else [],
    )
    assert load_entry_point_variants() == ["chunked"]
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [broken])
    with pytest.raises(ValueError, match="entry point broken = nosuch.module:f: cannot be loaded"):
        load_entry_point_variants()


@pytest.mark.slow
def test_the_example_runs_through_every_check_of_the_suite(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(EXAMPLE_SRC)] + sys.path))
    pytester.makepyfile(test_attention=SUITE)
    result = pytester.runpytest_subprocess(
        "--perfsuite-variant",
        "chunked_attention.variant:chunked_attention",
        "--perfsuite-variants",
        "chunked_attention",
        "--perfsuite-case-set",
        "masks",
        "--perfsuite-shapes",
        "1x2x96:128x16",
        "--perfsuite-results",
        "out",
        "--benchmark-disable",
    )  # each benchmark runs once, untimed, as in the test run
    # 7 mask cases: 3 modes x (equivalence + no deception + benchmark) + copies + score accounting pass; a user
    # variant declares nothing about what it saves for backward, and is neither compiled nor fused: those three tests
    # have no variant.
    result.assert_outcomes(
        passed=11 * 7, skipped=5
    )  # 3 not applicable + 2 CUDA-only kernel-family checks
    bad = pytester.runpytest_subprocess("--perfsuite-variant", "chunked_attention.variant:nothing")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    assert "has no function 'nothing'" in bad.stderr.str()
    idle = pytester.runpytest_subprocess(
        "--co",
        "--perfsuite-variant",
        "chunked_attention.variant:chunked_attention",
        "--perfsuite-variants",
        "chunked_attention",
        "--perfsuite-cases",
        "b1h2s8d4-fp32-causal-softcap50-cpu",
    )  # the only user variant cannot run the only case: the run would check nothing of theirs
    assert idle.ret == pytest.ExitCode.USAGE_ERROR, idle.stdout.str()
    assert (
        "none of your variants (chunked_attention) has a test on these cases" in idle.stderr.str()
    )


def test_a_user_who_forgot_to_install_their_package_is_told_to(tmp_path, monkeypatch):
    """``src/myattn`` in the repository, not installed: the error says ``pip install -e``, from any subdirectory."""
    package = tmp_path / "src" / "myattn_not_installed"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "attention.py").write_text(
        "def attention(query, key, value, *, mask, scale):\n    return query\n"
    )
    (tmp_path / ".git").mkdir()
    (tmp_path / "docs").mkdir()
    monkeypatch.chdir(tmp_path / "docs")
    with pytest.raises(
        ValueError, match=r"myattn_not_installed is in .* but not installed for .*pip install -e "
    ):
        load_variant_spec("myattn_not_installed.attention:attention")
    with pytest.raises(ValueError) as other:  # a module that is nowhere here: no such hint
        load_variant_spec("no_such_module_anywhere:attention")
    assert "pip install -e" not in str(other.value)


def test_a_typo_in_the_module_of_an_installed_package_is_named_as_one(tmp_path, monkeypatch):
    """The package is installed (importable) and in the repository: a misspelt module in it is a typo,
    not a package left uninstalled."""
    package = tmp_path / "src" / "myattn_typo"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "kernels.py").write_text(
        "def attention(query, key, value, *, mask, scale):\n    return query\n"
    )
    (tmp_path / ".git").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    with pytest.raises(ValueError) as typo:
        load_variant_spec("myattn_typo.kernals:attention")
    assert (
        "myattn_typo is installed, but has no module 'kernals': did you mean myattn_typo.kernels?"
        in str(typo.value)
    )
    assert "not installed" not in str(typo.value)


def test_an_entry_binds_the_variant_to_its_models_case_sets(monkeypatch):
    """``perfsuite_user_variants`` entries bind a function to case sets as
    ``register_variant(case_sets=[...])`` does; a bad word or set is named with what is allowed."""
    from perfsuite.variants import user

    monkeypatch.setattr(user, "_BOUND_BY_ENTRY", {})
    entry = "chunked_attention.variant:chunked_attention case_sets=model-gemma-2-2b,masks"
    assert load_variant_spec(entry) == "chunked_attention"
    assert get_variant("chunked_attention").case_sets == ("model-gemma-2-2b", "masks")
    assert user.bound_by_entry("chunked_attention") == entry
    assert user.variant_spec("chunked_attention") == "chunked_attention.variant:chunked_attention"
    assert user.split_variant_entries(f"{entry} perfsuite.variants.naive:naive_attention") == [
        entry,
        "perfsuite.variants.naive:naive_attention",
    ]
    with pytest.raises(ValueError) as unknown:
        load_variant_spec("chunked_attention.variant:chunked_attention case_sets=model-gemma-2,gqa")
    assert "case set 'model-gemma-2' is unknown" in str(unknown.value)
    assert "known: smoke, default" in str(unknown.value)
    assert "chunked_attention.variant:chunked_attention case_sets=model-gemma-2,gqa" in str(
        unknown.value
    )
    with pytest.raises(
        ValueError,
        match="'casesets=gqa' is not a known key=value; allowed after "
        "module:function: case_sets=SET\\[,SET...\\]",
    ):
        load_variant_spec("chunked_attention.variant:chunked_attention casesets=gqa")
    with pytest.raises(ValueError, match="case_sets= has no value; allowed: case_sets=SET"):
        load_variant_spec("chunked_attention.variant:chunked_attention case_sets=")
