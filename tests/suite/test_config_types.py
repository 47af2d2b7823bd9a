"""Every value type a pytest configuration file can give a perfsuite key."""

import pytest

from perfsuite.errors import ConfigError
from perfsuite.suite import settings


def raw(ini=None):
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
    return values


@pytest.mark.parametrize(
    "value, expected",
    [
        (["forward", "backward"], ("forward", "backward")),
        (("backward",), ("backward",)),
        ("forward, backward", ("forward", "backward")),
    ],
)
def test_a_toml_list_of_modes_resolves_like_the_text(value, expected):
    assert settings.resolve(raw(ini={"modes": value}), cuda_available=False).modes == expected


def test_lists_of_variants_dtypes_and_a_toml_integer_seed_resolve():
    resolved = settings.resolve(
        raw(
            ini={
                "variants": ["naive", "sdpa"],
                "cpu_dtypes": ["fp32", "bf16"],
                "cpu_shapes": ["1x1x4x4"],
                "masks": ["causal"],
                "seed": 3,
            }
        ),
        cuda_available=False,
    )
    assert resolved.variants == ("naive", "sdpa") and resolved.seed == 3
    assert [c.id for c in resolved.cases] == [
        "b1h1s4d4-fp32-causal-cpu",
        "b1h1s4d4-bf16-causal-cpu",
    ]


@pytest.mark.parametrize("value", [{"a": 1}, [["forward"]], None])
def test_a_table_or_nested_list_is_a_settings_error_naming_key_value_and_source(value):
    with pytest.raises(ConfigError) as caught:
        settings.RawValue(value, "ini key perfsuite_modes from pyproject.toml", "ini")
    message = str(caught.value)
    assert "perfsuite_modes" in message and "pyproject.toml" in message and repr(value) in message
    assert "list of strings" in message


def test_a_bad_item_in_a_list_names_the_item_and_where_it_came_from():
    with pytest.raises(ConfigError, match=r"ini modes.*mode 'fwd' is not supported"):
        settings.resolve(raw(ini={"modes": ["forward", "fwd"]}), cuda_available=False)


PYPROJECT = """
[tool.pytest.ini_options]
perfsuite_modes = ["forward", "backward"]
perfsuite_variants = ["naive", "sdpa"]
perfsuite_cpu_dtypes = ["fp32", "bf16"]
perfsuite_cpu_shapes = ["1x2x16x8"]
"""


@pytest.mark.slow
def test_toml_lists_in_pyproject_are_accepted_end_to_end(pytester):
    """Before: INTERNALERROR 'list' object has no attribute 'strip' (exit 3)."""
    pytester.makepyprojecttoml(PYPROJECT)
    pytester.makepyfile(test_x="def test_x(variant, case, mode):\n    pass\n")
    result = pytester.runpytest_subprocess("--co", "-q")
    assert result.ret == pytest.ExitCode.OK, result.stderr.str()
    out = result.stdout.str()
    assert "8 tests collected" in out


@pytest.mark.slow
def test_a_toml_table_value_is_a_usage_error_naming_key_value_and_file(pytester):
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\nperfsuite_modes = [["forward"]]\n')
    pytester.makepyfile(test_x="def test_x(variant, case, mode):\n    pass\n")
    result = pytester.runpytest_subprocess("--co", "-q")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    err = result.stderr.str()
    assert "perfsuite_modes" in err and "pyproject.toml" in err and "[['forward']]" in err


def test_isolation_defaults_to_user_variants_and_takes_all_none_or_names():
    base = raw(ini={"variants": "naive sdpa"})
    assert settings.resolve(base, False, user_variants=("sdpa",)).isolate == ("sdpa",)
    assert settings.resolve(
        raw(ini={"variants": "naive sdpa", "isolate": "all"}), False
    ).isolate == ("naive", "sdpa")
    assert (
        settings.resolve(raw(ini={"variants": "naive sdpa", "isolate": ["none"]}), False).isolate
        == ()
    )
    assert settings.resolve(
        raw(ini={"variants": "naive sdpa", "isolate": "sdpa"}), False
    ).isolate == ("sdpa",)
    with pytest.raises(ConfigError, match="unknown attention variant 'flash9'"):
        settings.resolve(raw(ini={"isolate": "flash9"}), False)
    with pytest.raises(ConfigError, match="stand alone"):
        settings.resolve(raw(ini={"isolate": "all naive"}), False)
