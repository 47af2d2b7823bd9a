"""The plugin's options and ini keys, read into raw settings, and the run header.

Precedence (stated once): command-line option > ini key (``-o`` or the ini file) > built-in
default; every raw value keeps where it came from, so an error can name it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from perfsuite.attention.cases import Device
from perfsuite.errors import ConfigError
from perfsuite.measure.measurement_guard import import_changes
from perfsuite.suite import generation, settings, shards
from perfsuite.variants import get_variant
from perfsuite.variants.user import (
    bound_by_entry,
    load_entry_point_variants,
    load_variant_spec,
    split_variant_entries,
)

MARKERS = (
    "perfsuite_only(flag_or_predicate): parametrize only over variants whose "
    "Variant.<flag> is true, or for which predicate(variant) is true",
    "xdist_group(name): pytest-xdist's; set by perfsuite on every variant/case "
    "pair (declared here too for runs without pytest-xdist)",
    *generation.MARKERS,
)


def add_markers(config: pytest.Config) -> None:
    """Declare perfsuite's markers (``MARKERS``), so ``--strict-markers`` runs accept them."""
    for line in MARKERS:
        config.addinivalue_line("markers", line)


def add_options(parser: pytest.Parser) -> None:
    """Register ``--perfsuite-*`` options and ``perfsuite_*`` ini keys (one help text for both)."""
    group = parser.getgroup("perfsuite", "attention benchmark suite")
    group.addoption(
        "--perfsuite-variant",
        action="append",
        default=[],
        metavar="MODULE:FUNCTION",
        help="add your own attention function as a variant (repeatable); installed packages can "
        "also declare them in the entry point group perfsuite.variants",
    )
    group.addoption(
        "--perfsuite-gate",
        action="store_true",
        help="with --benchmark-compare: judge each benchmark with perfsuite's statistics and "
        "fingerprints (needs per-round data: --benchmark-save-data in both runs)",
    )
    group.addoption(
        "--perfsuite-fail-on-structure",
        action="store_true",
        help="with --perfsuite-gate: a structural change that adds work (more copies or casts, device "
        "kernels, Memcpy, score writes, bytes allocated/written/saved, or another SDPA backend) "
        "fails; ops that do no work (views, a same-dtype .to) never do",
    )
    group.addoption(
        "--perfsuite-gate-force",
        action="store_true",
        help="with --perfsuite-gate: compare with a baseline from other hardware or torch anyway",
    )
    group.addoption(
        "--perfsuite-shard",
        default=None,
        metavar="INDEX/COUNT",
        help="run only shard INDEX of COUNT (1/4 .. 4/4): disjoint parts whose union is the whole "
        "suite, each (variant, case) pair's tests together, balanced by known durations "
        "(perfsuite.suite.shards; ini: perfsuite_shard)",
    )
    parser.addini(
        "perfsuite_shard",
        "run only this shard of the suite, INDEX/COUNT counted from 1 (the ini form of "
        "--perfsuite-shard)",
        default="",
    )
    group.addoption(
        "--perfsuite-history-url",
        default=None,
        metavar="URL",
        help="the history store a timed run is recorded in (ini: perfsuite_history_url; env: "
        "PERFSUITE_HISTORY_URL; default .perfsuite/history.sqlite at the repository root)",
    )
    parser.addini(
        "perfsuite_history_url",
        "the history store timed runs are recorded in: a SQLite path or URL, "
        "or postgresql+psycopg://... (PERFSUITE_HISTORY_URL wins over it)",
        default="",
    )
    parser.addini(
        "perfsuite_history",
        "record timed, saved runs in the history store: on (default) or off",
        default="on",
    )
    parser.addini(
        "perfsuite_user_variants",
        "your own attention functions as variants, MODULE:FUNCTION, one per "
        "line or a TOML list (the ini form of --perfsuite-variant); "
        "MODULE:FUNCTION case_sets=SET,SET binds it to its model's case sets",
        type="linelist",
        default=[],
    )
    for spec in settings.SETTINGS.values():
        # "args": a string (split like a shell line) or a TOML list; raw_settings joins either with spaces
        parser.addini(spec.ini_key, spec.help, type="args", default=[])
        if spec.option:
            group.addoption(spec.option, default=None, help=f"{spec.help} (ini: {spec.ini_key})")


def raw_settings(config: pytest.Config) -> settings.RawSettings:
    """Each setting's raw value and where it came from (option, ini key and file, or default)."""
    raw: settings.RawSettings = {}
    for name, spec in settings.SETTINGS.items():
        option = (
            config.getoption(spec.option.lstrip("-").replace("-", "_")) if spec.option else None
        )
        ini = config.getini(spec.ini_key)
        # A TOML list (or number) under [tool.pytest.ini_options] is kept as is: ``settings.RawValue`` joins
        # a list of strings with spaces and refuses anything else, naming the key, the value and the file.
        if option is not None:
            raw[name] = settings.RawValue(option, f"option {spec.option}={option!r}", "option")
        elif ini:
            where = _ini_source(config, spec.ini_key)
            # "args"-typed keys come back as a list even from a plain string: show them as written
            shown = (
                " ".join(ini)
                if isinstance(ini, list) and all(isinstance(v, str) for v in ini)
                else ini
            )
            raw[name] = settings.RawValue(
                ini, f"ini key {spec.ini_key}={shown!r} from {where}", "ini"
            )
        else:
            raw[name] = spec.default_value()
    return raw


def shard(config: pytest.Config) -> shards.Shard | None:
    """The ``--perfsuite-shard`` (else ``perfsuite_shard`` ini key) shard, or None.

    Raises:
        ConfigError: a malformed or out-of-range value, naming it and where it came from.
    """
    option = config.getoption("perfsuite_shard")
    if option is not None:
        return shards.parse_shard(option, f"option --perfsuite-shard={option!r}")
    ini = str(config.getini("perfsuite_shard") or "")
    return shards.parse_shard(
        ini, f"ini key perfsuite_shard={ini!r} from {_ini_source(config, 'perfsuite_shard')}"
    )


def variant_specs(config: pytest.Config) -> list[tuple[str, str]]:
    """``(spec, where it came from)``: ``--perfsuite-variant`` specs, then the ``perfsuite_user_variants`` ini key's."""
    from_ini = [
        entry
        for line in config.getini("perfsuite_user_variants")
        for entry in split_variant_entries(line)
    ]
    return [
        (spec, "option --perfsuite-variant") for spec in config.getoption("perfsuite_variant")
    ] + [
        (
            spec,
            f"ini key perfsuite_user_variants from {_ini_source(config, 'perfsuite_user_variants')}",
        )
        for spec in from_ini
    ]


def load_user_variants(config: pytest.Config) -> tuple[str, ...]:
    """Register users' variants: installed entry points (group ``perfsuite.variants``), then each of
    ``variant_specs``. Returns the specs (isolated crash probes load them again in their child).
    Each import is fenced (``measurement_guard.import_changes``): one that replaces a torch function
    or changes a guarded setting is refused, named, and the change restored.

    Raises:
        ConfigError: an entry point or spec that cannot be loaded, naming it and where it came from.
    """
    try:
        import_changes("the installed entry points", load_entry_point_variants)
    except ValueError as exc:
        raise ConfigError(f"installed entry points (group perfsuite.variants): {exc}") from None
    specs = variant_specs(config)
    for spec, source in specs:
        try:
            import_changes(spec, lambda named=spec: load_variant_spec(named))
        except ValueError as exc:
            raise ConfigError(f"{source}: {exc}", source) from None
    return tuple(spec for spec, _ in specs)


def _ini_source(config: pytest.Config, key: str) -> str:
    """Where ``key``'s value came from: ``-o`` on the command line, or the ini file."""
    overridden = any(o.startswith(f"{key}=") for o in config.getoption("override_ini") or [])
    return "-o" if overridden else str(config.inipath)


def asked_for_perfsuite(config: pytest.Config) -> bool:
    """True when the command line set a ``--perfsuite-*`` option (ini keys alone do not: a
    repository configured for ``perfsuite run`` still runs its own tests with plain pytest)."""
    if config.getoption("perfsuite_variant"):
        return True
    return any(raw.origin == "option" for raw in raw_settings(config).values())


def uses_perfsuite(config: pytest.Config) -> bool:
    """True when this pytest run is perfsuite's: a ``--perfsuite-*`` option, a ``perfsuite_*`` key in
    its configuration, or the shipped suite among its paths (``perfsuite run``, ``--pyargs perfsuite.suite``).
    Otherwise (the plugin loads in every pytest run of the environment) perfsuite prints no header
    and sets no process conditions."""
    if asked_for_perfsuite(config) or any(
        raw.origin == "ini" for raw in raw_settings(config).values()
    ):
        return True
    if config.getini("perfsuite_user_variants"):
        return True
    package = Path(settings.__file__).resolve().parents[1]
    for arg in config.args:
        path = Path(str(arg).split("::")[0])
        if str(arg).startswith("perfsuite") and not path.exists():
            return True  # --pyargs perfsuite.suite
        if path.exists() and (path.resolve() == package or package in path.resolve().parents):
            return True
    return False


def header_lines(run: settings.SuiteSettings) -> list[str]:
    """The run header: seed, devices, torch, threads, variants, modes, cases and where output goes."""
    notes = []
    if any(c.mask == "causal" and c.seq_len_q != c.seq_len_kv for c in run.cases):
        notes.append(
            "perfsuite: note: 'causal' is top-left; with seq_len_q != seq_len_kv (decode, prefill with a "
            "cache) you likely want --perfsuite-masks causal_br"
        )
    return notes + [
        f"perfsuite: seed={run.seed} devices={','.join(run.devices)} torch={torch.__version__} "
        f"threads={torch.get_num_threads()}",
        f"perfsuite: variants={','.join(run.variants)} ({_source(run, 'variants')}) "
        f"modes={','.join(run.modes)} ({_source(run, 'modes')})",
        timer_line(run),
        *cases_header(run),
        *bound_header(run),
        *compiled_header(run),
        f"perfsuite: traces -> {run.traces_dir}, table -> {run.results_dir / 'table.md'}",
    ]


def timer_line(run: settings.SuiteSettings) -> str:
    """The timer's settings; the CUDA-only ones (``l2_flush``, ``cuda_graphs``) only when a case runs on CUDA."""
    if Device.CUDA not in run.devices:
        return (
            "perfsuite: timer=host (CPU cases only: the device timer, l2_flush and cuda_graphs "
            "settings apply to CUDA cases)"
        )
    return (
        f"perfsuite: timer={run.timer} l2_flush={'on' if run.l2_flush else 'off'} "
        f"cuda_graphs={'on' if run.cuda_graphs else 'off'} (device clocks apply to CUDA cases only)"
    )


def cases_header(run: settings.SuiteSettings) -> list[str]:
    """Where the run's cases come from and their ids; when every selected variant is bound to its own
    case sets (``SuiteSettings.variant_cases``), none runs them: one line saying so instead."""
    if run.variants and all(name in run.variant_cases for name in run.variants):
        return ["perfsuite: cases: every selected variant runs its bound case sets (below)"]
    return [
        f"perfsuite: cases from {run.cases_from}",
        f"perfsuite: cases={' '.join(c.id for c in run.cases)}",
    ]


def bound_header(run: settings.SuiteSettings) -> list[str]:
    """One line per variant bound to its model's case sets (``Variant.case_sets``): the sets, what
    bound it (``register_variant case_sets``, or its variant entry) and its cases."""
    return [
        f"perfsuite: {name} runs its case sets {' '.join(get_variant(name).case_sets)} "
        f"({_bound_by(name)}): {' '.join(c.id for c in own)}"
        for name, own in run.variant_cases.items()
    ]


def _bound_by(name: str) -> str:
    entry = bound_by_entry(name)
    return f"variant entry {entry!r}" if entry else "register_variant case_sets"


def _source(run: settings.SuiteSettings, name: str) -> str:
    return run.sources.get(name, "default")


def compiled_header(run: settings.SuiteSettings) -> list[str]:
    """One header line when compiled variants run on their own cases."""
    compiled = [v for v in run.variants if get_variant(v).compiled]
    if not compiled or run.compiled_cases is None:
        return []
    return [
        f"perfsuite: compiled variants ({', '.join(compiled)}) run only on perfsuite_compiled_cases="
        f"{' '.join(c.id for c in run.compiled_cases)} (each compiles per case; set it empty for every case)"
    ]
