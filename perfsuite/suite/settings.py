"""Suite settings, resolved once from command-line options, ini keys and defaults.

Each setting has a command-line option (``--perfsuite-dtypes``) that wins over the ini
key (``perfsuite_cpu_dtypes`` in ``benchmarks.ini`` or ``pyproject.toml``), which wins
over the built-in default; shapes, dtypes and masks default to the chosen case set, and
cases chosen on the command line (a case set, case ids, shapes, dtypes, masks) win over every
configured case key, ``perfsuite_cases`` included. ``perfsuite_case_set`` names one or more sets. Lists are separated by spaces or commas. A bad value raises
``ConfigError`` naming the value, where it came from and what is allowed.
"""

from __future__ import annotations

import dataclasses
import re
import types
from pathlib import Path
from collections.abc import Callable, Mapping, Sequence

from perfsuite.attention import cases
from perfsuite.errors import ConfigError
from perfsuite.attention.case_sets import get_case_set
from perfsuite.attention.score_mods import NONE as NO_SCORE_MODS, ScoreMods, parse_score_mods
from perfsuite.attention.cases import AttentionCase, Device
from perfsuite.attention.modes import MODES, parse_mode
from perfsuite.errors import DeviceTimingError
from perfsuite.measure.call_limit import default_limit_s
from perfsuite.measure.device_timing import parse_timer
from perfsuite.variants import get_variant, variant_names


@dataclasses.dataclass(frozen=True)
class Setting:
    """One setting: its ini key, command-line option and built-in default."""

    ini_key: str
    option: str | None
    default: str
    help: str

    def default_value(self) -> RawValue:
        """The built-in default as a ``RawValue`` (``built-in default perfsuite_modes='all'``)."""
        return RawValue(
            self.default, f"built-in default {self.ini_key}={self.default!r}", "default"
        )


# Cases come from a named case set (perfsuite.attention.case_sets), refined by ini keys, overridden
# by command-line options; "cases" names exact case ids and overrides all of them.
SETTINGS = {
    "variants": Setting(
        "perfsuite_variants", "--perfsuite-variants", "all", "attention variants to run, or 'all'"
    ),
    "devices": Setting(
        "perfsuite_devices",
        "--perfsuite-devices",
        "auto",
        "cpu, cuda, or auto (cuda when available, else cpu)",
    ),
    "case_set": Setting(
        "perfsuite_case_set",
        "--perfsuite-case-set",
        "default",
        "named case sets, one or more (smoke, default, llm-decode, model-gemma-2-2b ...); their cases together",
    ),
    "shapes": Setting(
        "perfsuite_shapes", "--perfsuite-shapes", "", "shapes BxH[:Hkv]xS[:Skv]xD for every device"
    ),
    "cpu_shapes": Setting("perfsuite_cpu_shapes", None, "", "CPU shapes"),
    "cuda_shapes": Setting("perfsuite_cuda_shapes", None, "", "CUDA shapes"),
    "dtypes": Setting(
        "perfsuite_dtypes", "--perfsuite-dtypes", "", "dtypes for every device (fp32 bf16 ...)"
    ),
    "cpu_dtypes": Setting("perfsuite_cpu_dtypes", None, "", "CPU dtypes"),
    "cuda_dtypes": Setting("perfsuite_cuda_dtypes", None, "", "CUDA dtypes"),
    "masks": Setting(
        "perfsuite_masks",
        "--perfsuite-masks",
        "",
        "masks for every device (causal noncausal causal_br bool additive padding window<W>, both)",
    ),
    "cpu_masks": Setting("perfsuite_cpu_masks", None, "", "CPU masks"),
    "cuda_masks": Setting("perfsuite_cuda_masks", None, "", "CUDA masks"),
    "score_mods": Setting(
        "perfsuite_score_mods",
        "--perfsuite-score-mods",
        "",
        "score modifications for every device, each 'none' or alibi, softcap<cap>, sinks, qoff<offset> "
        "joined by '-' (alibi-softcap50-sinks); every case is built with each",
    ),
    "cpu_score_mods": Setting("perfsuite_cpu_score_mods", None, "", "CPU score modifications"),
    "cuda_score_mods": Setting("perfsuite_cuda_score_mods", None, "", "CUDA score modifications"),
    "combinations": Setting(
        "perfsuite_combinations",
        "--perfsuite-combinations",
        "all",
        "all: every shape x dtype x mask; pairwise: fewer cases in which every shape still meets "
        "every dtype and mask, and every dtype every mask",
    ),
    "cases": Setting(
        "perfsuite_cases",
        "--perfsuite-cases",
        "",
        "exact case ids (b1h4kv2q3k7d8-fp32-bool-cpu), replacing the above",
    ),
    "extra_cases": Setting(
        "perfsuite_extra_cases",
        "--perfsuite-extra-cases",
        "",
        "case ids added to the others (not to --perfsuite-cases)",
    ),
    "modes": Setting(
        "perfsuite_modes",
        "--perfsuite-modes",
        "all",
        "modes: forward backward forward_backward, or 'all'",
    ),
    "compiled_cases": Setting(
        "perfsuite_compiled_cases",
        "--perfsuite-compiled-cases",
        "",
        "case ids for torch.compile variants only (each compiles per case); default: every case",
    ),
    "adapter_cases": Setting(
        "perfsuite_adapter_cases",
        "--perfsuite-adapter-cases",
        "",
        "case ids for variants that wrap another library (transformers, nn.MultiheadAttention, "
        "flash-attn, xformers); default: every case",
    ),
    "seed": Setting(
        "perfsuite_seed", "--perfsuite-seed", "0", "seed of the random query/key/value and masks"
    ),
    "results": Setting(
        "perfsuite_results",
        "--perfsuite-results",
        "perfsuite-results",
        "folder for the Markdown table and run summary",
    ),
    "traces": Setting(
        "perfsuite_traces",
        "--perfsuite-traces",
        "",
        "folder for Chrome traces (default: RESULTS/traces)",
    ),
    "timer": Setting(
        "perfsuite_timer",
        "--perfsuite-timer",
        "host",
        "clock of CUDA benchmarks: host (pytest-benchmark's, synchronized), cuda_event or kernel "
        "(device time, perfsuite.measure.device_timing); CPU cases always use host",
    ),
    "l2_flush": Setting(
        "perfsuite_l2_flush",
        "--perfsuite-l2-flush",
        "on",
        "on/off: flush the L2 before every round of a device-timed benchmark (outside the measurement)",
    ),
    "cuda_graphs": Setting(
        "perfsuite_cuda_graphs",
        "--perfsuite-cuda-graphs",
        "on",
        "on/off: time the CUDA-graph replay of each step where capture works, a graph of several "
        "steps per replay (a failed capture is reported and the blocked-event timer times the "
        "eager step)",
    ),
    "isolate": Setting(
        "perfsuite_isolate",
        "--perfsuite-isolate",
        "user",
        "variants whose first call per case and mode runs in a child process first, so a crash costs "
        "only their results: user (from --perfsuite-variant and entry points), all, none, or names",
    ),
    "call_time_limit": Setting(
        "perfsuite_call_time_limit",
        "--perfsuite-call-time-limit",
        "auto",
        "seconds one call of a variant may take before its case fails and the run goes on "
        "(the first and profiled calls; the timing gets it per round; isolated probes per "
        "pair): auto (600 on the CPU, 120 on CUDA), a number, or 0 for none",
    ),
    "determinism_runs": Setting(
        "perfsuite_determinism_runs",
        "--perfsuite-determinism-runs",
        "10",
        "reruns of each checked step, compared bitwise with the first, for variants that declare "
        "deterministic=True (0: none)",
    ),
}
ISOLATE_WORDS = ("user", "all", "none")


@dataclasses.dataclass(frozen=True)
class RawValue:
    """A setting's text, a description of where it came from, and from which layer.

    ``value`` may be given as any type a pytest configuration file yields: a string
    (``benchmarks.ini``, ``-o``), a list of strings (``perfsuite_modes = ["forward", "backward"]``
    under ``[tool.pytest.ini_options]`` in ``pyproject.toml``), or a TOML integer, float or
    boolean (``perfsuite_seed = 3`` under ``[tool.pytest]``); it is normalised to one string,
    list items joined by spaces. Raises ``ConfigError`` naming the value and ``source``
    (key and file) for anything else: a table, or a list holding lists or tables.
    """

    value: str
    source: str
    origin: str  # "option", "ini" or "default"

    def __post_init__(self):
        object.__setattr__(self, "value", config_text(self.value, self.source))


_SCALARS = (str, int, float, bool)


def config_text(value: object, source: str) -> str:
    """One setting's value as text: lists joined by spaces, numbers and booleans as written.

    Raises:
        ConfigError: ``value`` is None, a table (dict), or a list with a non-scalar item;
            the message names ``source`` and the value.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, (list, tuple)) and all(isinstance(item, _SCALARS) for item in value):
        return " ".join(config_text(item, source) for item in value)
    raise ConfigError(
        f"{source}: value {value!r} of type {type(value).__name__} is not usable; give a string "
        "('forward backward') or a list of strings (['forward', 'backward'])"
    )


RawSettings = dict[str, RawValue]


@dataclasses.dataclass(frozen=True, kw_only=True)
class SuiteSettings:
    """Resolved settings of one pytest run."""

    variants: tuple[str, ...]
    modes: tuple[str, ...]
    devices: tuple[str, ...]
    case_set: str  # the case set names, space-separated
    cases: tuple[AttentionCase, ...]
    cases_from: str
    # variant -> its own cases: a variant bound to its model's case sets (``Variant.case_sets``), when
    # the command line chose no cases; the other variants run ``cases``
    variant_cases: Mapping[str, tuple[AttentionCase, ...]] = dataclasses.field(default_factory=dict)
    compiled_cases: tuple[AttentionCase, ...] | None  # None: compiled variants run every case
    seed: int
    results_dir: Path
    traces_dir: Path
    timer: str = "host"
    l2_flush: bool = True
    cuda_graphs: bool = True
    isolate: tuple[str, ...] = ()  # variants probed in a child process before they run here
    adapter_cases: tuple[AttentionCase, ...] | None = (
        None  # None: variants that wrap a library run every case
    )
    call_time_limit_s: float | None = (
        None  # None: measure.call_limit's default per device; 0: no limit
    )
    determinism_runs: int = 10  # reruns compared bitwise, for variants declaring determinism
    # setting name -> where its value came from: the option, the ini key, or "default" (``source_label``)
    sources: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def call_limit_s(self, device: str) -> float | None:
        """Seconds one call of a variant may take on ``device`` (None: no limit)."""
        if self.call_time_limit_s is None:
            return default_limit_s(device)
        return self.call_time_limit_s or None


def split_list(text: str) -> list[str]:
    return [item for item in re.split(r"[\s,]+", text.strip()) if item]


def _parse_items(raw: RawValue, parse: Callable[[str], object], what: str) -> list:
    items = split_list(raw.value)
    if not items:
        raise ConfigError(f"{raw.source} is empty; give at least one value ({what})")
    parsed = []
    for item in items:
        try:
            parsed.append(parse(item))
        except ValueError as exc:
            raise ConfigError(f"{raw.source}: {exc}") from None
    return parsed


def _resolve_devices(raw: RawSettings, cuda_available: bool) -> tuple[str, ...]:
    if raw["devices"].value.strip().lower() == "auto":
        return (Device.CUDA,) if cuda_available else (Device.CPU,)
    return tuple(dict.fromkeys(_parse_items(raw["devices"], cases.parse_device, "cpu or cuda")))


def _resolve_variants(raw: RawSettings) -> tuple[str, ...]:
    if raw["variants"].value.strip().lower() == "all":
        return tuple(variant_names())
    return tuple(
        dict.fromkeys(v.name for v in _parse_items(raw["variants"], get_variant, "variant names"))
    )


def _resolve_modes(raw: RawSettings) -> tuple[str, ...]:
    if raw["modes"].value.strip().lower() == "all":
        return MODES
    return tuple(dict.fromkeys(_parse_items(raw["modes"], parse_mode, "modes, or 'all'")))


_CASE_SELECTORS = ("cases", "extra_cases", "case_set", "shapes", "dtypes", "masks", "score_mods")


def _resolve_compiled_cases(
    raw: RawSettings, key: str = "compiled_cases"
) -> tuple[AttentionCase, ...] | None:
    """Cases for compiled variants (or ``key``'s): an ini list yields to cases chosen on the command line."""
    value = raw[key]
    if not value.value.strip():
        return None
    if value.origin != "option" and any(raw[name].origin == "option" for name in _CASE_SELECTORS):
        return None
    return tuple(dict.fromkeys(_parse_items(value, cases.parse_case_id, "case ids")))


def _device_field(raw: RawSettings, case_set_name: str, device: str, field: str) -> RawValue:
    """Option > case set named on the command line > ini (common, then per device) > case set."""
    common, own = raw[field], raw[f"{device}_{field}"]
    if common.origin == "option" and common.value.strip():
        return common
    from_set = RawValue(
        getattr(getattr(get_case_set(case_set_name), device), field),
        f"case set {case_set_name!r} ({device} {field})",
        "default",
    )
    if raw["case_set"].origin == "option":
        return from_set
    for candidate in (common, own):
        if candidate.origin == "ini" and candidate.value.strip():
            return candidate
    return from_set


def _parse_seed(raw: RawSettings) -> int:
    value = raw["seed"].value
    try:
        seed = int(value)
    except ValueError:
        seed = -1
    if seed < 0:
        raise ConfigError(f"{raw['seed'].source}: seed {value!r} is not a non-negative integer")
    return seed


def _parse_timer(raw: RawSettings) -> str:
    try:
        return parse_timer(raw["timer"].value)
    except DeviceTimingError as exc:
        raise ConfigError(f"{raw['timer'].source}: {exc}") from None


def _parse_switch(raw: RawSettings, name: str) -> bool:
    value = raw[name].value.strip().lower()
    if value not in ("on", "off"):
        raise ConfigError(f"{raw[name].source}: {raw[name].value!r} is not on or off")
    return value == "on"


def _describe_source(value: RawValue) -> str:
    """``option --perfsuite-shapes``, ``ini key perfsuite_cpu_masks``, ``case set 'default'``."""
    return (
        value.source.split(" (")[0]
        if value.source.startswith("case set")
        else value.source.split("=")[0]
    )


def chosen_on_command_line(raw: RawSettings) -> bool:
    """True when a ``--perfsuite-*`` option chose the cases (a case set, case ids, shapes, dtypes,
    masks or score modifications): the command line wins over every configured case key."""
    return any(raw[name].origin == "option" for name in _CASE_SELECTORS)


def _cases_key_applies(raw: RawSettings) -> bool:
    """``perfsuite_cases`` from the configuration yields to cases chosen on the command line."""
    value = raw["cases"]
    return bool(value.value.strip()) and (
        value.origin == "option" or not chosen_on_command_line(raw)
    )


def _resolve_cases(
    raw: RawSettings, devices: tuple[str, ...], case_set_names: Sequence[str]
) -> tuple[list[AttentionCase], str]:
    """The cases of ``case_set_names`` refined by ``raw`` (or ``raw``'s exact case ids), and where
    they came from (for the run header)."""
    if _cases_key_applies(raw):
        return _parse_items(raw["cases"], cases.parse_case_id, "case ids"), _describe_source(
            raw["cases"]
        )
    found: list[AttentionCase] = []
    sources: list[str] = []
    for case_set_name in case_set_names:
        for device in devices:
            set_cases, set_sources = _device_cases(raw, case_set_name, device)
            found += set_cases
            sources += set_sources
    combined = (
        "" if raw["combinations"].value.strip().lower() == "all" else ", pairwise combinations"
    )
    overridden = (
        f" (the command line wins over {_describe_source(raw['cases'])})"
        if raw["cases"].value.strip()
        else ""
    )
    return found, "; ".join(dict.fromkeys(sources)) + combined + overridden


def _device_cases(
    raw: RawSettings, case_set_name: str, device: str
) -> tuple[list[AttentionCase], list[str]]:
    """One case set's cases on ``device`` refined by ``raw``, and the sources of its fields."""
    fields = [
        _device_field(raw, case_set_name, device, f)
        for f in ("shapes", "dtypes", "masks", "score_mods")
    ]
    sources = [_describe_source(f) for f in fields]
    only_ids = fields[0].origin == "default" and not fields[0].value.strip()
    if only_ids:  # a set of exact case ids (layout cases) and no shapes
        return _set_cases(case_set_name, device, fields), sources
    shapes = _parse_items(fields[0], cases.parse_shape, "shapes")
    dtypes = _parse_items(fields[1], cases.parse_dtype, "dtypes")
    masks = [m for group in _parse_items(fields[2], cases.parse_masks, "masks") for m in group]
    mods = _parse_items(fields[3], parse_score_mods, "score modifications, or none")
    combinations = raw["combinations"].value.strip().lower()
    if combinations not in cases.COMBINATIONS:
        raise ConfigError(
            f"{raw['combinations'].source}: combinations {combinations!r}: expected one of "
            f"{', '.join(cases.COMBINATIONS)}"
        )
    try:
        found = cases.build_cases(
            list(dict.fromkeys(shapes)),
            list(dict.fromkeys(dtypes)),
            device,
            list(dict.fromkeys(masks)),
            combinations,
            None if mods == [NO_SCORE_MODS] else list(dict.fromkeys(mods)),
        )
    except ValueError as exc:
        raise ConfigError(f"{fields[3].source}: {exc}") from None
    found += _transposed_cases(case_set_name, device, fields, dtypes, masks)
    found += _set_cases(case_set_name, device, fields, list(dict.fromkeys(mods)))
    return found, sources


def _resolve_case_sets(raw: RawSettings) -> tuple[str, ...]:
    """The case set names of ``perfsuite_case_set`` / ``--perfsuite-case-set`` (one or more,
    separated by spaces or commas); ``ConfigError`` naming an unknown one."""
    names = tuple(dict.fromkeys(_parse_items(raw["case_set"], str, "case set names")))
    for name in names:
        try:
            get_case_set(name)
        except ValueError as exc:
            raise ConfigError(f"{raw['case_set'].source}: {exc}") from None
    return names


def _bound_variant_cases(
    raw: RawSettings, devices: tuple[str, ...], variants: tuple[str, ...]
) -> dict[str, tuple[AttentionCase, ...]]:
    """Each selected variant bound to its model's case sets (``Variant.case_sets``) -> those sets'
    own cases (no configured refinement: the sets are the model's shapes); none when the command
    line chose the cases."""
    if chosen_on_command_line(raw):
        return {}
    bound = {}
    for name in variants:
        own_sets = get_variant(name).case_sets
        if not own_sets:
            continue
        plain = {key: SETTINGS[key].default_value() for key in _REFINING if key in SETTINGS}
        found, _ = _resolve_cases({**raw, **plain}, devices, own_sets)
        bound[name] = tuple(dict.fromkeys(found))
    return bound


_REFINING = tuple(
    f"{prefix}{field}"
    for prefix in ("", "cpu_", "cuda_")
    for field in ("shapes", "dtypes", "masks", "score_mods")
) + ("cases", "combinations")


def _transposed_cases(
    case_set_name: str, device: str, fields: list[RawValue], dtypes: list[str], masks: list[str]
) -> list[AttentionCase]:
    """The case set's ``transposed`` case on ``device`` (``DeviceCases.transposed``), when its shapes,
    dtypes and masks all come from the set (a user's own shapes get no extra case)."""
    shape = getattr(get_case_set(case_set_name), device).transposed
    if not shape or any(f.origin != "default" for f in fields):
        return []
    [built] = cases.build_cases([cases.parse_shape(shape)], dtypes[:1], device, masks[:1], "all")
    return [dataclasses.replace(built, transposed=True)]


def _set_cases(
    case_set_name: str, device: str, fields: list[RawValue], mods: list[ScoreMods] | None = None
) -> list[AttentionCase]:
    """The case set's exact case ids on ``device`` (``DeviceCases.cases``: layout cases, queries that
    see no key), when its shapes, dtypes and masks all come from the set; a dense one is built with
    each of ``mods`` (the score modifications asked for), a layout one as it is."""
    ids = getattr(get_case_set(case_set_name), device).cases
    if not ids or any(f.origin != "default" for f in fields[:3]):
        return []
    exact = [cases.parse_case_id(text) for text in ids.split()]
    if not mods:
        return exact
    return [
        dataclasses.replace(case, score_mods=m) if case.layout.is_plain else case
        for case in exact
        for m in (mods if case.layout.is_plain else mods[:1])
    ]


def _resolve_isolate(
    raw: RawSettings, variants: tuple[str, ...], user_variants: tuple[str, ...]
) -> tuple[str, ...]:
    """Selected variants to probe in a child: ``user`` (the default), ``all``, ``none``, or names."""
    words = [w.lower() for w in split_list(raw["isolate"].value)]
    if words == ["none"]:
        return ()
    if words == ["all"]:
        return variants
    if words == ["user"]:
        return tuple(v for v in variants if v in user_variants)
    if any(w in ISOLATE_WORDS for w in words):
        raise ConfigError(
            f"{raw['isolate'].source}: {', '.join(ISOLATE_WORDS)} stand alone; or give variant names"
        )
    names = tuple(
        dict.fromkeys(v.name for v in _parse_items(raw["isolate"], get_variant, "variant names"))
    )
    return tuple(v for v in variants if v in names)


def resolve(
    raw: RawSettings, cuda_available: bool, user_variants: tuple[str, ...] = ()
) -> SuiteSettings:
    """Build ``SuiteSettings`` from raw values; raises ``ConfigError`` on a bad one.

    ``user_variants``: names of the variants loaded from ``--perfsuite-variant`` and entry
    points (``perfsuite.variants.user.loaded_user_variants``), which ``isolate=user`` probes.
    """
    case_set_names = _resolve_case_sets(raw)
    devices = _resolve_devices(raw, cuda_available)
    resolved_cases, cases_from = _resolve_cases(raw, devices, case_set_names)
    extra = raw["extra_cases"]
    extra_applies = extra.origin == "option" or not chosen_on_command_line(raw)
    if extra.value.strip() and extra_applies and not _cases_key_applies(raw):
        resolved_cases += _parse_items(raw["extra_cases"], cases.parse_case_id, "case ids")
    results_dir = Path(raw["results"].value)
    traces = raw["traces"].value.strip()
    variants = _resolve_variants(raw)
    variant_cases = _bound_variant_cases(raw, devices, variants)
    return SuiteSettings(
        variants=variants,
        modes=_resolve_modes(raw),
        devices=tuple(dict.fromkeys(c.device for c in resolved_cases)) or devices,
        case_set=" ".join(case_set_names),
        cases=tuple(dict.fromkeys(resolved_cases)),
        cases_from=cases_from,
        variant_cases=types.MappingProxyType(variant_cases),
        compiled_cases=_resolve_compiled_cases(raw),
        adapter_cases=_resolve_compiled_cases(raw, "adapter_cases"),
        seed=_parse_seed(raw),
        results_dir=results_dir,
        traces_dir=Path(traces) if traces else results_dir / "traces",
        timer=_parse_timer(raw),
        l2_flush=_parse_switch(raw, "l2_flush"),
        cuda_graphs=_parse_switch(raw, "cuda_graphs"),
        isolate=_resolve_isolate(raw, variants, user_variants),
        call_time_limit_s=_parse_call_time_limit(raw),
        determinism_runs=_parse_determinism_runs(raw),
        sources={name: source_label(name, value) for name, value in raw.items()},
    )


def source_label(name: str, value: RawValue) -> str:
    """Where setting ``name``'s value came from, short: ``--perfsuite-variants``, ``perfsuite_variants``
    (an ini key; the file is in ``RawValue.source``) or ``default``."""
    spec = SETTINGS.get(name)
    if spec is None or value.origin == "default":
        return "default"
    return (spec.option or spec.ini_key) if value.origin == "option" else spec.ini_key


def _parse_call_time_limit(raw: RawSettings) -> float | None:
    """``auto`` -> None (the default per device); a number of seconds >= 0 (0: no limit)."""
    text = raw["call_time_limit"].value.strip().lower()
    if text in ("", "auto"):
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0 or seconds == float("inf"):
        raise ConfigError(
            f"{raw['call_time_limit'].source}: not a number of seconds >= 0; allowed: auto, a number "
            "(0 for no limit)"
        )
    return seconds


def _parse_determinism_runs(raw: RawSettings) -> int:
    """A whole number of reruns >= 0; ``ConfigError`` naming the value and its source otherwise."""
    value = raw.get("determinism_runs")
    if value is None:
        return 10
    text = value.value.strip()
    if not text.isdigit():
        raise ConfigError(
            f"{value.source}: {text!r} is not a number of reruns; allowed: a whole number >= 0"
        )
    return int(text)
