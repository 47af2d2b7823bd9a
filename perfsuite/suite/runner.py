"""The attention suite run from any directory: the pytest arguments ``perfsuite run`` uses.

The suite's test module ships in the package (``perfsuite/suite/test_attention.py``); this
module points pytest at it while keeping the user's repository as the root: the user's pytest
configuration (``perfsuite_*`` keys under ``[tool.pytest.ini_options]``, ``pytest.ini``, ...)
is read, and results, traces and baselines (``.benchmarks/``, named by the user's git commit)
are written under the current directory.
"""

from __future__ import annotations

import configparser
import tomllib
from pathlib import Path

import perfsuite.suite
from perfsuite.errors import UsageError

# The timed run's pytest-benchmark options, stated once: ``perfsuite run`` passes them, and this
# repository's benchmarks.ini repeats them as addopts (tests/suite/test_runner.py checks they agree).
TIMED_OPTIONS = (
    "--benchmark-autosave",
    "--benchmark-save-data",
    "--benchmark-storage=.benchmarks",
    "--benchmark-warmup=on",
    "--benchmark-warmup-iterations=3",
    "--benchmark-min-rounds=15",
    "--benchmark-max-time=0.5",
    "--benchmark-group-by=group",
    "--benchmark-sort=name",
    "--benchmark-columns=min,median,iqr,max,rounds",
)
CHECK_OPTIONS = ("--benchmark-disable",)
SUITE_MODULE = Path(perfsuite.suite.__file__).with_name("test_attention.py")
PROPERTIES_MODULE = Path(perfsuite.suite.__file__).with_name(
    "test_properties.py"
)  # checks only, never timed
EMPTY_CONFIG = Path(perfsuite.suite.__file__).with_name("empty.ini")


def find_config(directory: Path) -> Path | None:
    """The pytest configuration file of ``directory`` as pytest would pick it there, or None.

    Order (pytest's): ``pytest.ini``, ``.pytest.ini``, ``pyproject.toml`` with
    ``[tool.pytest.ini_options]``, ``tox.ini`` with ``[pytest]``, ``setup.cfg`` with ``[tool:pytest]``.
    """
    for name in ("pytest.ini", ".pytest.ini"):
        if (directory / name).is_file():
            return directory / name
    pyproject = directory / "pyproject.toml"
    if pyproject.is_file():
        try:
            if "ini_options" in tomllib.loads(pyproject.read_text()).get("tool", {}).get(
                "pytest", {}
            ):
                return pyproject
        except tomllib.TOMLDecodeError:
            return pyproject  # pytest will report the syntax error with the file's name
    for name, section in (("tox.ini", "pytest"), ("setup.cfg", "tool:pytest")):
        parser = configparser.ConfigParser(interpolation=None)
        if (
            (directory / name).is_file()
            and parser.read(directory / name)
            and parser.has_section(section)
        ):
            return directory / name
    return None


def _has_perfsuite_keys(config: Path) -> bool:
    """True when the pytest section of ``config`` (``find_config``'s) sets a ``perfsuite_*`` key."""
    if config.suffix == ".toml":
        try:
            section = (
                tomllib.loads(config.read_text())
                .get("tool", {})
                .get("pytest", {})
                .get("ini_options", {})
            )
        except tomllib.TOMLDecodeError as exc:
            raise UsageError(
                f"{config}: not valid TOML ({exc}); fix it or run perfsuite elsewhere"
            ) from None
        return any(str(key).startswith("perfsuite_") for key in section)
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(config)
    except configparser.Error as exc:
        raise UsageError(f"{config}: not a readable ini file ({exc})") from None
    return any(
        parser.has_section(s) and any(k.startswith("perfsuite_") for k in parser.options(s))
        for s in ("pytest", "tool:pytest")
    )


def find_project_root(start: Path) -> Path:
    """The directory whose configuration ``perfsuite run``/``ab`` use, found as pytest and git find theirs.

    Walks up from ``start``: the first directory whose pytest configuration (``find_config``)
    sets a ``perfsuite_*`` key; else the root of the git repository around ``start``; else
    ``start`` itself (no repository: perfsuite's defaults, here). A configuration without
    perfsuite keys on the way (a sub-package's own pytest settings) is passed over.

    Raises:
        UsageError: a configuration on the way cannot be read (it is named).
    """
    start = start.resolve()
    for directory in (start, *start.parents):
        config = find_config(directory)
        if config is not None and _has_perfsuite_keys(config):
            return directory
        if (directory / ".git").exists():
            return directory
    return start


def suite_arguments(directory: Path, timed: bool, extra: list[str]) -> list[str]:
    """pytest arguments running the shipped suite with ``directory`` as root and configuration.

    ``timed``: time every benchmark and save a baseline (``TIMED_OPTIONS``); otherwise check and
    profile with timing disabled, and run every property check too (``test_properties.py``). ``extra``: the user's own pytest arguments, last, so
    they win (``--benchmark-compare``, ``--perfsuite-case-set=smoke``, ``-k naive``).
    """
    config = find_config(directory) or EMPTY_CONFIG
    return [
        "-c",
        str(config),
        "--rootdir",
        str(directory),
        "-rfEs",
        *(TIMED_OPTIONS if timed else CHECK_OPTIONS),
        # the folder, not the files: pytest names tests relative to the path it was given, and a
        # file given as such would leave test ids without their file (``::test_benchmark[...]``)
        str(SUITE_MODULE.parent),
        *([f"--ignore={PROPERTIES_MODULE}"] if timed else []),
        *extra,
    ]


def ini_value(directory: Path, key: str) -> list[str]:
    """The values of a pytest ini ``key`` in ``directory``'s configuration (``find_config``): a TOML
    list or a whitespace/newline-separated string, as pytest reads it; ``[]`` when unset.

    Used by ``perfsuite ab``, which runs outside pytest but gates the variants the suite is configured for.
    """
    config = find_config(directory)
    if config is None:
        return []
    if config.suffix == ".toml":
        value = tomllib.loads(config.read_text())["tool"]["pytest"]["ini_options"].get(key, [])
    else:
        parser = configparser.ConfigParser(interpolation=None)
        parser.read(config)
        section = next(s for s in ("pytest", "tool:pytest") if parser.has_section(s))
        value = parser.get(section, key, fallback="")
    return [str(v) for v in value] if isinstance(value, list) else value.split()
