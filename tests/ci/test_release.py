"""The release workflow (issue 25, item 4) and ``perfsuite init-ci`` pinning an installed release."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from validation.user_repo import borrowing_venv, checkout_build_lock

ROOT = Path(__file__).resolve().parents[2]
RELEASE = ROOT / ".github" / "workflows" / "release.yml"


@pytest.fixture(scope="module")
def workflow():
    return yaml.safe_load(RELEASE.read_text())


def test_the_build_job_builds_checks_and_smoke_tests_the_wheel_in_a_clean_venv(workflow):
    steps = "\n".join(step.get("run", "") for step in workflow["jobs"]["build"]["steps"])
    assert "python -m build" in steps and "twine check --strict dist/*" in steps
    assert '-m venv "$RUNNER_TEMP/clean"' in steps and "pip install dist/*.whl" in steps
    assert (
        'cd "$RUNNER_TEMP"' in steps and '"$RUNNER_TEMP/clean/bin/perfsuite" run --check' in steps
    )
    assert "permissions" not in workflow["jobs"]["build"]  # the workflow's read-only default


def test_publishing_happens_on_a_tag_through_trusted_publishing_only(workflow):
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as true
    assert triggers["push"] == {"tags": ["v*"]} and workflow["permissions"] == {"contents": "read"}
    publish = workflow["jobs"]["publish"]
    assert (
        publish["needs"] == "build" and "refs/tags/v" in publish["if"] and "push" in publish["if"]
    )
    assert (
        publish["permissions"] == {"id-token": "write"} and publish["environment"]["name"] == "pypi"
    )
    [upload] = [s for s in publish["steps"] if s["uses"].startswith("pypa/gh-action-pypi-publish@")]
    assert "with" not in upload  # no password, no token: PyPI trusts this workflow
    assert "secrets." not in RELEASE.read_text() and "password" not in RELEASE.read_text()


@pytest.mark.slow
def test_init_ci_pins_the_installed_release_and_refuses_a_local_folder(tmp_path):
    wheels = tmp_path / "wheels"
    with checkout_build_lock():  # other tests build from this checkout too
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "-q",
                "--no-deps",
                "--no-build-isolation",
                "-w",
                str(wheels),
                str(ROOT),
            ],
            check=True,
            timeout=600,
        )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def install(venv_bin, *args):
        """perfsuite alone into the virtualenv, over the one it borrows."""
        pip = [venv_bin / "python", "-m", "pip", "install", "-q", "--no-deps", "--ignore-installed"]
        subprocess.run([*pip, *map(str, args)], check=True, timeout=600, env=env)

    release = borrowing_venv(
        tmp_path / "release"
    )  # by name from an index (here a folder of wheels), as from PyPI
    install(release, "--no-index", "--find-links", wheels, "perfsuite")
    from importlib.metadata import version

    out = tmp_path / "gate.yml"
    done = subprocess.run(
        [release / "perfsuite", "init-ci", "--output", str(out)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert f"python -m pip install 'perfsuite=={version('perfsuite')}'\n" in out.read_text()

    folder = borrowing_venv(
        tmp_path / "folder"
    )  # pip install /path/to/checkout: no runner can install that
    install(folder, "--no-build-isolation", ROOT)
    refused = subprocess.run(
        [folder / "perfsuite", "init-ci", "--output", str(tmp_path / "x.yml")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert refused.returncode == 2 and "give --perfsuite REQUIREMENT" in refused.stderr, (
        refused.stderr
    )
    assert not (tmp_path / "x.yml").exists()
