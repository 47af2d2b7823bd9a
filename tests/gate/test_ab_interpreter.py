"""A nonexistent interpreter for an A/B side is a usage error (exit 2), not ab's 'regression' code."""

from perfsuite.cli.main import main


def test_a_nonexistent_base_python_is_a_usage_error_naming_it(tmp_path, capsys):
    """Before: a BrokenPipeError traceback with exit 1, which is ab's 'regression' code."""
    missing = tmp_path / "no-venv" / "bin" / "python"
    assert (
        main(
            [
                "ab",
                "--base-python",
                str(missing),
                "--cases",
                "b1h2s16d8-fp32-causal-cpu",
                "--variants",
                "sdpa",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert str(missing) in err and "does not exist" in err and "Traceback" not in err
