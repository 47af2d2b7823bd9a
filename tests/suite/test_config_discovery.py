"""perfsuite run / ab from a subdirectory find the repository's configuration (issue 25, item 3)."""

import subprocess

import pytest

from perfsuite.errors import UsageError
from perfsuite.suite.runner import find_project
from validation.user_repo import UserRepo


def test_the_nearest_configuration_with_perfsuite_keys_wins(tmp_path):
    UserRepo.init(tmp_path)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\nperfsuite_variants = "mine sdpa"\n'
    )
    deep = tmp_path / "src" / "pkg"
    deep.mkdir(parents=True)
    (tmp_path / "src" / "tox.ini").write_text(
        "[pytest]\naddopts = -q\n"
    )  # a sub-package's own: no perfsuite keys
    assert find_project(deep).root == tmp_path
    assert find_project(deep).config.values("perfsuite_variants") == ["mine", "sdpa"]
    (tmp_path / "src" / "tox.ini").unlink()
    (tmp_path / "src" / "setup.cfg").write_text("[tool:pytest]\nperfsuite_variants = sub\n")
    assert find_project(deep).root == tmp_path / "src"


def test_without_perfsuite_keys_the_git_root_is_the_root(tmp_path):
    UserRepo.init(tmp_path)
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -q\n")
    (tmp_path / "src").mkdir()
    assert find_project(tmp_path / "src").root == tmp_path
    assert find_project(tmp_path).root == tmp_path


def test_outside_any_repository_the_directory_itself(tmp_path):
    if subprocess.run(["git", "rev-parse"], cwd=tmp_path, capture_output=True).returncode == 0:
        pytest.skip(f"{tmp_path} is inside a git repository")
    assert find_project(tmp_path).root == tmp_path


def test_an_unreadable_configuration_on_the_way_is_named(tmp_path):
    UserRepo.init(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options\nperfsuite_variants = 1\n")
    (tmp_path / "src").mkdir()
    with pytest.raises(UsageError, match="pyproject.toml: not valid TOML"):
        find_project(tmp_path / "src")


def test_plain_pytest_in_a_repository_without_perfsuite_prints_nothing_of_perfsuite(tmp_path):
    """The plugin loads in every pytest run of the environment; another project's run shows no trace of it."""
    import os
    import sys

    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -q\n")
    (tmp_path / "test_theirs.py").write_text("def test_theirs():\n    assert True\n")
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "MALLOC_", "PERFSUITE"))
    }
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "perfsuite" not in (result.stdout + result.stderr).lower(), result.stdout + result.stderr
    asked = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--perfsuite-variants=sdpa"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert (
        "perfsuite: no test of the attention suite was collected here" in asked.stdout
    )  # asked for: it answers
