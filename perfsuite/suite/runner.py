"""The attention suite run from any directory: the pytest arguments ``perfsuite run`` uses.

The suite's test module ships in the package (``perfsuite/suite/test_attention.py``); this
module points pytest at it while keeping the user's repository as the root: the user's pytest
configuration (``perfsuite_*`` keys under ``[tool.pytest.ini_options]``, ``pytest.ini``, ...)
is read, and results, traces and baselines (``.benchmarks/``, named by the user's git commit)
are written under the current directory.
"""

from __future__ import annotations

import configparser
import dataclasses
import tomllib
from collections.abc import Mapping
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


@dataclasses.dataclass(frozen=True)
class ConfigFile:
    """A pytest configuration file, read and parsed once: its path and the keys of its pytest
    section (``[tool.pytest.ini_options]``, ``[pytest]`` or ``[tool:pytest]``) as the file writes
    them (TOML values, or ini strings); ``error`` says why the file cannot be read (it names it)."""

    path: Path
    keys: Mapping[str, object]
    error: str | None = None

    def _checked(self) -> Mapping[str, object]:
        if self.error:
            raise UsageError(self.error, str(self.path))
        return self.keys

    def has_perfsuite_keys(self) -> bool:
        """True when the section sets a ``perfsuite_*`` key; ``UsageError`` when the file cannot be read."""
        return any(str(key).startswith("perfsuite_") for key in self._checked())

    def raw(self, key: str) -> object | None:
        """``key``'s value as written (a string, a TOML list or number), or None when unset."""
        return self._checked().get(key)

    def values(self, key: str) -> list[str]:
        """``key``'s values: a TOML list, or a whitespace/newline-separated string, as pytest reads it;
        ``[]`` when unset."""
        value = self.raw(key)
        if value is None:
            return []
        if isinstance(value, list):
            return [str(v) for v in value]
        return value.split() if isinstance(value, str) else [str(value)]


def read_config(directory: Path) -> ConfigFile | None:
    """The pytest configuration file of ``directory`` as pytest would pick it there, each candidate
    read once; None when there is none.

    Order (pytest's): ``pytest.ini``, ``.pytest.ini``, ``pyproject.toml`` with
    ``[tool.pytest.ini_options]``, ``tox.ini`` with ``[pytest]``, ``setup.cfg`` with ``[tool:pytest]``.
    A file that cannot be parsed is picked with its ``error`` (pytest reports it too).
    """
    for name in ("pytest.ini", ".pytest.ini"):
        if (directory / name).is_file():
            return _read_ini(directory / name, required=False)
    pyproject = directory / "pyproject.toml"
    if pyproject.is_file():
        try:
            options = tomllib.loads(pyproject.read_text()).get("tool", {}).get("pytest", {})
        except tomllib.TOMLDecodeError as exc:
            why = f"{pyproject}: not valid TOML ({exc}); fix it or run perfsuite elsewhere"
            return ConfigFile(pyproject, {}, why)
        if isinstance(options.get("ini_options"), dict):
            return ConfigFile(pyproject, dict(options["ini_options"]))
    for name in ("tox.ini", "setup.cfg"):
        if (directory / name).is_file():
            config = _read_ini(directory / name, required=True)
            if config is not None:
                return config
    return None


def _read_ini(path: Path, required: bool) -> ConfigFile | None:
    """An ini file's ``[pytest]`` (else ``[tool:pytest]``) section; with ``required``, None when it has
    neither (``tox.ini``, ``setup.cfg``: not pytest's configuration then)."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(path.read_text(), source=str(path))
    except configparser.Error as exc:
        return ConfigFile(path, {}, f"{path}: not a readable ini file ({exc})")
    section = next((s for s in ("pytest", "tool:pytest") if parser.has_section(s)), None)
    if section is None:
        return None if required else ConfigFile(path, {})
    return ConfigFile(path, dict(parser.items(section)))


def find_config(directory: Path) -> Path | None:
    """The path of ``directory``'s pytest configuration (``read_config``), or None."""
    config = read_config(directory)
    return config.path if config else None


@dataclasses.dataclass(frozen=True)
class Project:
    """The directory whose configuration ``perfsuite run``/``ab``/``compare`` use, its configuration
    file (read once, or None) and why it is the root (``found_by``: ``perfsuite keys``, its
    configuration has them; ``git``, the git repository's root; ``start``, no repository: where the
    search started)."""

    root: Path
    config: ConfigFile | None
    found_by: str

    @property
    def config_path(self) -> Path:
        """The file pytest is given (``-c``): the configuration, else an empty one."""
        return self.config.path if self.config else EMPTY_CONFIG

    def describe(self) -> str:
        """Why ``root`` is the root, and its configuration: ``its pyproject.toml has perfsuite keys``,
        ``the git repository's root; configuration: pytest.ini``."""
        name = self.config.path.name if self.config else None
        if self.found_by == "perfsuite keys":
            return f"its {name} has perfsuite keys"
        where = "the git repository's root" if self.found_by == "git" else "the current directory"
        return f"{where}; " + (
            f"configuration: {name}" if name else "no pytest configuration: perfsuite's defaults"
        )


def find_project(start: Path) -> Project:
    """The directory whose configuration ``perfsuite run``/``ab`` use, found as pytest and git find theirs.

    Walks up from ``start``: the first directory whose pytest configuration (``read_config``)
    sets a ``perfsuite_*`` key; else the root of the git repository around ``start``; else
    ``start`` itself (no repository: perfsuite's defaults, here). A configuration without
    perfsuite keys on the way (a sub-package's own pytest settings) is passed over. Each file on
    the way is read once; the root's configuration comes back parsed.

    Raises:
        UsageError: a configuration on the way cannot be read (it is named).
    """
    start = start.resolve()
    first: ConfigFile | None = None
    for directory in (start, *start.parents):
        config = read_config(directory)
        first = config if directory == start else first
        if config is not None and config.has_perfsuite_keys():
            return Project(directory, config, "perfsuite keys")
        if (directory / ".git").exists():
            return Project(directory, config, "git")
    return Project(start, first, "start")


def suite_arguments(
    directory: Path, timed: bool, extra: list[str], config: Path | None = None
) -> list[str]:
    """pytest arguments running the shipped suite with ``directory`` as root and configuration.

    ``timed``: time every benchmark and save a baseline (``TIMED_OPTIONS``); otherwise check and
    profile with timing disabled, and run every property check too (``test_properties.py``). ``extra``: the user's own pytest arguments, last, so
    they win (``--benchmark-compare``, ``--perfsuite-case-set=smoke``, ``-k naive``). ``config``: the
    configuration file already found (``Project.config_path``); default: ``directory``'s, else an empty one.
    """
    config = config or find_config(directory) or EMPTY_CONFIG
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
    """The values of a pytest ini ``key`` in ``directory``'s configuration (``ConfigFile.values``);
    ``[]`` when unset or without a configuration. ``UsageError`` when the file cannot be read.
    """
    config = read_config(directory)
    return config.values(key) if config else []
