"""The configuration of ``perfsuite ab``, ``compare`` and ``run``, resolved once, each value with its source.

A command finds its project once (``runner.find_project``: the root, and its pytest configuration
read and parsed once) and resolves every value it needs from that snapshot in one call: command-line
option > the configuration file's key > default. Each value keeps where it came from as a
``settings.RawValue`` (``option --cases='...'``, ``ini key perfsuite_variants='...' from
pyproject.toml at --base-ref main (3f2a9c1d0)``, ``built-in default perfsuite_modes='all'``), so an
error names it and the ``ab`` header shows it. The suite's keys keep the suite's defaults and
parsing (``settings.SETTINGS``, ``settings.resolve``); ``ab`` adds its own default case set
(``AB_CASE_SET``) and reads the plugin's user-variant and history keys.

``perfsuite ab`` gates with a ref's committed configuration: the base ref's when there is one (else
the head ref's), found from the same subdirectory as the current one, so that a change cannot turn
off its own gate by editing what is gated; ``AbConfig.changed_keys`` names the ``GATE_KEYS`` that a
head ref changes.
"""

from __future__ import annotations

import dataclasses
import types
from pathlib import Path
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from perfsuite.errors import ConfigError, UsageError
from perfsuite.gate.sequential import SequentialPlan
from perfsuite.gate.verdicts import (
    AB_ALPHA,
    SEPARATE_RUNS_ALPHA,
    SEPARATE_RUNS_MIN_EFFECT,
    GateSettings,
)
from perfsuite.suite.runner import ConfigFile, Project, find_project

if TYPE_CHECKING:  # settings loads torch and the variants: imported where a value is made
    from perfsuite.suite.settings import RawValue

SAVED_RUNS = Path(".benchmarks")  # where perfsuite run saves, under the project's root
AB_CASE_SET = "smoke"  # ab's case set when neither the command line nor the configuration names one
GATE_KEYS = (
    "perfsuite_variants",
    "perfsuite_user_variants",
    "perfsuite_case_set",
    "perfsuite_cases",
    "perfsuite_shapes",
    "perfsuite_dtypes",
    "perfsuite_masks",
    "perfsuite_score_mods",
    "perfsuite_modes",
)  # what decides which benchmarks ab gates
# ab's values: the suite's settings it reads (settings.SETTINGS: ini key and default), and the
# plugin's keys it shares (suite/options.py registers them)
SUITE_VALUES = {
    "variants": "--variants",
    "case_set": "--case-set",
    "cases": "--cases",
    "modes": "--modes",
    "devices": "--devices",
}
PLUGIN_KEYS = {
    "user_variants": "perfsuite_user_variants",
    "history": "perfsuite_history",
    "history_url": "perfsuite_history_url",
}
# the configuration's refinements of the case set, read from the file as perfsuite run reads them
REFINING_VALUES = ("shapes", "dtypes", "masks", "score_mods")
UNREAD_KEYS = ("devices",)  # ab takes --devices only, not perfsuite_devices


@dataclasses.dataclass(frozen=True)
class ConfigValue:
    """One resolved value: ``raw`` (``settings.RawValue``: its text, full source and origin) and
    ``via``, the option or key that set it (``--cases``, ``perfsuite_variants``) or ``default``."""

    raw: RawValue
    via: str

    @property
    def text(self) -> str:
        return self.raw.value


@dataclasses.dataclass(frozen=True, kw_only=True)
class AbOptions:
    """What the command line gave ``perfsuite ab`` (None or empty: not given)."""

    variant: tuple[str, ...] = ()
    variants: str | None = None
    case_set: str | None = None
    cases: str | None = None
    modes: str | None = None
    devices: str | None = None
    base_variant: str | None = None
    head_variant: str | None = None
    base_ref: str | None = None
    head_ref: str | None = None
    base_tree: str | None = None
    head_tree: str | None = None

    @classmethod
    def from_args(cls, args: object) -> AbOptions:
        """The fields of an ``argparse.Namespace`` of ``perfsuite ab`` (missing ones: not given)."""
        given = {f.name: getattr(args, f.name, None) for f in dataclasses.fields(cls)}
        return cls(**given | {"variant": tuple(given["variant"] or ())})


@dataclasses.dataclass(frozen=True, kw_only=True)
class AbConfig:
    """``perfsuite ab``'s configuration, resolved once before any worker starts.

    ``project``: the project whose configuration file was used (in a ref's temporary worktree, or
    the working tree's), read once; ``where``: ``at --base-ref main (3f2a9c1d0)`` or ``in the
    working tree``; ``config_file``: the file as the header names it (relative to a ref's worktree,
    which is gone after the run; absolute in the working tree), None without one; ``values``: each value with its source (``SUITE_VALUES`` and ``PLUGIN_KEYS``'
    names); ``variant_specs``: the user's ``module:function`` specs, loaded and checked; ``variants``,
    ``case_ids``, ``modes``: what is gated; ``changed_keys``: the ``GATE_KEYS`` the head ref changes
    (with two refs); ``base_tree``, ``head_tree``: each side's source tree (a ref's worktree, the
    option's folder, or the project's root); ``history``: record the run; ``history_url``: the
    configured store (None: ``$PERFSUITE_HISTORY_URL``, else the default file).
    """

    project: Project
    where: str
    config_file: str | None
    values: Mapping[str, ConfigValue]
    variant_specs: tuple[str, ...]
    variants: tuple[str, ...]
    case_ids: tuple[str, ...]
    # a variant bound to its model's case sets (``Variant.case_sets``) -> its own case ids
    variant_case_ids: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    modes: tuple[str, ...]
    changed_keys: tuple[str, ...]
    base_tree: Path
    head_tree: Path
    history: bool
    history_url: str | None

    def describe(self) -> str:
        """``pyproject.toml at --base-ref main (3f2a9c1d0)``, or the working tree's file, or none."""
        if self.config_file is None:
            return f"no pytest configuration {self.where}: perfsuite's defaults"
        return f"{self.config_file} {self.where}"

    def header_lines(self) -> list[str]:
        """The configuration file, each value with the option or key it came from, and a note
        when the head ref changes what is gated."""
        v = self.values
        shown = [("variants", v["variants"])]
        if v["user_variants"].text:
            shown.append(("user variants", v["user_variants"]))
        shown.append(
            ("cases", v["cases"]) if v["cases"].text.strip() else ("case set", v["case_set"])
        )
        shown += [("modes", v["modes"]), ("devices", v["devices"])]
        from perfsuite.variants.user import split_variant_entries

        items = [
            f"{name}={'; '.join(split_variant_entries(value.text)) or 'none'} ({value.via})"
            if name == "user variants"
            else f"{name}={','.join(value.text.split()) or 'none'} ({value.via})"
            for name, value in shown
        ]
        items.append(f"history={'on' if self.history else 'off'} ({v['history'].via})")
        if self.history_url:
            items.append(f"history store={self.history_url} ({v['history_url'].via})")
        lines = [
            f"perfsuite ab: configuration: {self.describe()}",
            f"perfsuite ab: {'; '.join(items)}",
        ]
        if self.changed_keys:
            lines.append(
                f"perfsuite ab: note: the head ref changes {', '.join(self.changed_keys)}; the gate uses "
                "the base ref's configuration, so the change is gated on what main gates"
            )
        return lines


def changed_gate_keys(base: ConfigFile | None, head: ConfigFile | None) -> list[str]:
    """The ``GATE_KEYS`` whose values differ between the base's and the head's configuration."""

    def values(config: ConfigFile | None, key: str) -> list[str]:
        return config.values(key) if config else []

    return [key for key in GATE_KEYS if values(base, key) != values(head, key)]


def ref_project(tree: Path, cwd: Path) -> Project:
    """A ref's project in its temporary worktree ``tree``: found from the same subdirectory as
    ``cwd`` (``runner.find_project``), or from the worktree's root."""
    from perfsuite.gate.worktrees import repository_root

    below = tree / cwd.resolve().relative_to(repository_root())
    return find_project(below if below.is_dir() else tree)


def _from_option(option: str, given: str) -> ConfigValue:
    from perfsuite.suite.settings import RawValue

    return ConfigValue(RawValue(given, f"option {option}={given!r}", "option"), option)


def _from_file_or_default(
    config: ConfigFile | None, file_label: str, key: str | None, default: str, default_source: str
) -> ConfigValue:
    """The configuration's ``key`` when it is set (``key`` None: not read), else the default."""
    from perfsuite.suite.settings import RawValue

    if config is not None and key and config.values(key):
        source = f"ini key {key}={' '.join(config.values(key))!r} from {file_label}"
        return ConfigValue(RawValue(config.raw(key), source, "ini"), key)
    return ConfigValue(RawValue(default, default_source, "default"), "default")


def ab_values(options: AbOptions, project: Project, file_label: str) -> dict[str, ConfigValue]:
    """Each of ab's values with its source: the option, else ``project``'s configuration file
    (named as ``file_label``), else the default.

    ``--case-set`` beats the configured cases (the configured case set too); ``--base-variant`` /
    ``--head-variant`` replace the variants; ``--variant`` replaces the configured user variants.
    """
    from perfsuite.suite.settings import SETTINGS

    found: dict[str, ConfigValue] = {}
    for name, option in SUITE_VALUES.items():
        spec = SETTINGS[name]
        default, default_source = spec.default, spec.default_value().source
        if name == "case_set":
            default = AB_CASE_SET
            default_source = f"perfsuite ab's default {spec.ini_key}={AB_CASE_SET!r}"
        unread = name in UNREAD_KEYS or (name == "cases" and options.case_set is not None)
        given = getattr(options, name)
        found[name] = (
            _from_option(option, given)
            if given is not None
            else _from_file_or_default(
                project.config,
                file_label,
                None if unread else spec.ini_key,
                default,
                default_source,
            )
        )
    for name in REFINING_VALUES:
        spec = SETTINGS[name]
        found[name] = _from_file_or_default(
            project.config, file_label, spec.ini_key, spec.default, spec.default_value().source
        )
    for name, key in PLUGIN_KEYS.items():
        found[name] = _from_file_or_default(
            project.config, file_label, key, "", f"built-in default {key}=''"
        )
    if options.variant:
        found["user_variants"] = _from_option("--variant", " ".join(options.variant))
    if options.head_variant or options.base_variant:
        option = "--head-variant" if options.head_variant else "--base-variant"
        found["variants"] = _from_option(option, options.head_variant or options.base_variant)
    return found


def resolve_ab(
    options: AbOptions,
    trees: Mapping[str, Path],
    commits: Mapping[str, str],
    *,
    cwd: Path | None = None,
    cuda_available: bool | None = None,
) -> AbConfig:
    """``perfsuite ab``'s configuration in one call: the configuration file read once, every value
    resolved with its source, the user's variants loaded and checked.

    ``trees``: the refs' temporary worktrees (``gate.worktrees.git_worktrees``), ``commits`` their
    short commit ids; ``cwd``: where ab runs (default: the current directory); ``cuda_available``:
    for ``devices=auto`` (default: torch's answer).

    Raises:
        UsageError: a bad value (naming it and where it came from), a variant spec that cannot be
            loaded, a tree option that is no folder, or a configuration file that cannot be read.
    """
    from perfsuite.history.recording import disabled
    from perfsuite.suite import settings
    from perfsuite.variants import get_variant
    from perfsuite.variants.user import (
        load_entry_point_variants,
        load_variant_spec,
        split_variant_entries,
    )

    cwd = cwd or Path.cwd()
    side = "base" if "base" in trees else "head" if "head" in trees else None
    refs = {"base": options.base_ref, "head": options.head_ref}
    if side:
        project = ref_project(trees[side], cwd)
        where = f"at --{side}-ref {refs[side]} ({commits[side]})"
        top = trees[side].resolve()
        name = project.config.path.relative_to(top).as_posix() if project.config else None
    else:
        project, where = find_project(cwd), "in the working tree"
        name = str(project.config.path) if project.config else None
    values = ab_values(options, project, f"{name} {where}")
    changed = (
        changed_gate_keys(project.config, ref_project(trees["head"], cwd).config)
        if side == "base" and "head" in trees
        else []
    )
    raw = {name: spec.default_value() for name, spec in settings.SETTINGS.items()} | {
        name: values[name].raw for name in (*SUITE_VALUES, *REFINING_VALUES)
    }
    specs = tuple(split_variant_entries(values["user_variants"].text))
    try:
        load_entry_point_variants()
        for spec in specs:
            load_variant_spec(spec)
        if options.head_variant or options.base_variant:
            get_variant(options.head_variant or options.base_variant)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if cuda_available is None:
        import torch

        cuda_available = torch.cuda.is_available()
    try:
        resolved = settings.resolve(raw, cuda_available)
    except ConfigError as exc:
        raise UsageError(str(exc), exc.source) from None
    working_root = None
    chosen = {}
    for which, option in (("base", options.base_tree), ("head", options.head_tree)):
        if option is not None and not Path(option).is_dir():
            raise UsageError(f"--{which}-tree {option!r}: no such folder", f"--{which}-tree")
        if which in trees:
            chosen[which] = trees[which]
        elif option is not None:
            chosen[which] = Path(option)
        else:  # the working tree's project, not a ref's
            working_root = working_root or (project.root if not side else find_project(cwd).root)
            chosen[which] = working_root
    return AbConfig(
        project=project,
        where=where,
        config_file=name,
        values=types.MappingProxyType(values),
        variant_specs=specs,
        variants=resolved.variants,
        case_ids=tuple(c.id for c in resolved.cases),
        variant_case_ids=types.MappingProxyType(
            {v: tuple(c.id for c in cases) for v, cases in resolved.variant_cases.items()}
        ),
        modes=resolved.modes,
        changed_keys=tuple(changed),
        base_tree=chosen["base"],
        head_tree=chosen["head"],
        history=not disabled(values["history"].text),
        history_url=values["history_url"].text or None,
    )


def gate_settings(
    alpha: float | None, min_effect: float | None, *, separate_runs: bool
) -> GateSettings:
    """The gate's level and minimum effect: each when given, else the default for A/B runs
    (``AB_ALPHA``, ``GateSettings.min_effect``) or for two separate runs (``SEPARATE_RUNS_ALPHA``,
    ``SEPARATE_RUNS_MIN_EFFECT``).

    Raises:
        UsageError: ``alpha`` outside (0, 0.5) or ``min_effect`` outside [0, 1).
    """
    default_alpha = SEPARATE_RUNS_ALPHA if separate_runs else AB_ALPHA
    default_effect = SEPARATE_RUNS_MIN_EFFECT if separate_runs else GateSettings.min_effect
    try:
        return GateSettings(
            default_alpha if alpha is None else alpha,
            default_effect if min_effect is None else min_effect,
        )
    except ValueError as exc:
        raise UsageError(f"--alpha / --min-effect: {exc}", "--alpha") from None


def sequential_plan(
    worker_pairs: int,
    blocks: int,
    rounds: int,
    budget_s: float,
    max_budget_s: float,
    fail_on_structure: bool,
) -> tuple[SequentialPlan, str | None]:
    """The A/B gate's plan from its options (``SequentialPlan``), and a note when it can judge
    structure only (``--budget-s 0``, or ``--blocks`` below the kept pairs a worker pair needs).

    Raises:
        UsageError: the options contradict each other, or the plan can decide nothing by timing and
            the gate does not judge structure (``--no-fail-on-structure``).
    """
    try:
        plan = SequentialPlan(
            worker_pairs,
            budget_s=budget_s,
            max_budget_s=max(budget_s, max_budget_s),
            rounds=rounds,
            blocks=blocks,
        )
    except ValueError as exc:
        raise UsageError(f"perfsuite ab: {exc}", "--workers-per-side") from None
    if plan.can_decide():
        return plan, None
    why = (
        f"--budget-s {budget_s:g} times nothing"
        if budget_s <= 0
        else f"--blocks {blocks}: a worker pair needs at least 3 kept block pairs for its estimate"
    )
    if not fail_on_structure:
        raise UsageError(
            f"{why}, so no timing verdict is possible; raise it, or drop --no-fail-on-structure to "
            "gate on structure only",
            "--blocks",
        )
    return plan, f"{why}; this gate judges structure only"


@dataclasses.dataclass(frozen=True, kw_only=True)
class CompareConfig:
    """``perfsuite compare``'s configuration: the two files (``base``, ``head``: as given, or a saved
    run's number resolved under the project's ``.benchmarks/``), the gate's ``settings``, and where
    its minimum effect came from (``min_effect``)."""

    base: str
    head: str
    settings: GateSettings
    min_effect: ConfigValue


def resolve_compare(
    base: str, head: str, alpha: float, min_effect: float | None, *, cwd: Path | None = None
) -> CompareConfig:
    """``perfsuite compare``'s configuration in one call (the project found once, when a run is
    given by its number). ``UsageError`` as ``saved_run_paths``."""
    from perfsuite.suite import settings

    gate = gate_settings(alpha, min_effect, separate_runs=True)
    source = (
        settings.RawValue(str(min_effect), f"option --min-effect={min_effect!r}", "option")
        if min_effect is not None
        else settings.RawValue(
            str(gate.min_effect),
            f"default for separate runs {SEPARATE_RUNS_MIN_EFFECT:g}",
            "default",
        )
    )
    base_path, head_path = saved_run_paths([base, head], cwd=cwd)
    return CompareConfig(
        base=base_path,
        head=head_path,
        settings=gate,
        min_effect=ConfigValue(source, "--min-effect" if min_effect is not None else "default"),
    )


def saved_run_paths(specs: Iterable[str], *, cwd: Path | None = None) -> list[str]:
    """Each spec: a path as given, or a saved run's number (``0001``, as ``--benchmark-compare=0001``
    takes it) resolved under the project's ``.benchmarks/`` (the project found once, from a
    subdirectory as ``perfsuite run`` finds its root).

    Raises:
        UsageError: a number matches no saved run or several (naming the saved runs there).
    """
    specs = list(specs)
    numbers = [s for s in specs if s.isdigit() and not Path(s).exists()]
    root = find_project(cwd or Path.cwd()).root if numbers else None
    return [saved_run_path(s, root) if s in numbers else s for s in specs]


def saved_run_path(spec: str, root: Path) -> str:
    """The saved run numbered ``spec`` under ``root / SAVED_RUNS``; ``UsageError`` when none or several match."""
    folder = root / SAVED_RUNS
    found = sorted(folder.glob(f"*/{spec}_*.json"))
    if len(found) == 1:
        return str(found[0])
    why = f"several match: {', '.join(map(str, found))}" if found else f"none in {folder}"
    saved = sorted(p.name.split("_")[0] for p in folder.glob("*/*.json"))
    raise UsageError(
        f"saved run {spec!r}: {why}; saved runs there: {', '.join(saved[-10:]) or 'none'} "
        "(or give a file's path)"
    )
