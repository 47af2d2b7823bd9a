"""Suite settings, resolved once from command-line options, ini keys and defaults.

Each setting has a command-line option (``--perfsuite-dtypes``) that wins over the ini
key (``perfsuite_cpu_dtypes`` in ``benchmarks.ini`` or ``pyproject.toml``), which wins
over the built-in default. Lists are separated by spaces or commas. A bad value raises
``SettingsError`` naming the value, where it came from and what is allowed.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Callable

from perfsuite import cases
from perfsuite.cases import AttentionCase
from perfsuite.variants import get_variant, variant_names


class SettingsError(ValueError):
    """A setting's value is invalid; the message says which, from where, and what is allowed."""


@dataclasses.dataclass(frozen=True)
class Setting:
    """One setting: its ini key, command-line option and built-in default."""

    ini_key: str
    option: str | None
    default: str
    help: str


# The CPU defaults finish the timed run in a few minutes on 2 cores; the CUDA defaults
# start from the post's case (8 x 16 x 1024 x 64 bf16 causal) and add longer sequences.
SETTINGS = {
    "variants": Setting("perfsuite_variants", "--perfsuite-variants", "all", "attention variants to run, or 'all'"),
    "devices": Setting("perfsuite_devices", "--perfsuite-devices", "auto", "cpu, cuda, or auto (cuda when available, else cpu)"),
    "cpu_shapes": Setting("perfsuite_cpu_shapes", None, "2x8x256x64 1x8x1024x64", "CPU shapes BxHxSxD"),
    "cuda_shapes": Setting("perfsuite_cuda_shapes", None, "8x16x1024x64 4x16x4096x64 2x16x8192x64", "CUDA shapes BxHxSxD"),
    "shapes": Setting("perfsuite_shapes", "--perfsuite-shapes", "", "shapes BxHxSxD for every device (overrides the per-device keys)"),
    "cpu_dtypes": Setting("perfsuite_cpu_dtypes", None, "fp32 bf16", "CPU dtypes"),
    "cuda_dtypes": Setting("perfsuite_cuda_dtypes", None, "bf16", "CUDA dtypes"),
    "dtypes": Setting("perfsuite_dtypes", "--perfsuite-dtypes", "", "dtypes for every device (overrides the per-device keys)"),
    "causal": Setting("perfsuite_causal", "--perfsuite-causal", "causal", "causal, noncausal or both"),
    "seed": Setting("perfsuite_seed", "--perfsuite-seed", "0", "seed of the random query/key/value"),
    "results": Setting("perfsuite_results", "--perfsuite-results", "perfsuite-results", "folder for the Markdown table and run summary"),
    "traces": Setting("perfsuite_traces", "--perfsuite-traces", "", "folder for Chrome traces (default: RESULTS/traces)"),
}

# name -> (raw value, where it came from)
RawSettings = dict[str, tuple[str, str]]


@dataclasses.dataclass(frozen=True)
class SuiteSettings:
    """Resolved settings of one pytest run."""

    variants: tuple[str, ...]
    devices: tuple[str, ...]
    cases: tuple[AttentionCase, ...]
    seed: int
    results_dir: Path
    traces_dir: Path


def split_list(text: str) -> list[str]:
    return [item for item in re.split(r"[\s,]+", text.strip()) if item]


def _parse_each(name: str, raw: RawSettings, parse: Callable[[str], object]) -> list:
    value, source = raw[name]
    items = split_list(value)
    if not items:
        raise SettingsError(f"{source} is empty; give at least one value ({SETTINGS[name].help})")
    parsed = []
    for item in items:
        try:
            parsed.append(parse(item))
        except ValueError as exc:
            raise SettingsError(f"{source}: {exc}") from None
    return parsed


def _resolve_devices(raw: RawSettings, cuda_available: bool) -> tuple[str, ...]:
    value, _ = raw["devices"]
    if value.strip().lower() == "auto":
        return ("cuda",) if cuda_available else ("cpu",)
    return tuple(dict.fromkeys(_parse_each("devices", raw, cases.parse_device)))


def _resolve_variants(raw: RawSettings) -> tuple[str, ...]:
    value, _ = raw["variants"]
    if value.strip().lower() == "all":
        return tuple(variant_names())
    return tuple(v.name for v in _parse_each("variants", raw, get_variant))


def _pick(raw: RawSettings, common: str, per_device: str) -> str:
    """The common setting when given, else the device's own."""
    return common if raw[common][0].strip() else per_device


def _parse_seed(raw: RawSettings) -> int:
    value, source = raw["seed"]
    try:
        seed = int(value)
    except ValueError:
        seed = -1
    if seed < 0:
        raise SettingsError(f"{source}: seed {value!r} is not a non-negative integer")
    return seed


def resolve(raw: RawSettings, cuda_available: bool) -> SuiteSettings:
    """Build ``SuiteSettings`` from raw values; raises ``SettingsError`` on a bad one."""
    devices = _resolve_devices(raw, cuda_available)
    causal_flags = _parse_each("causal", raw, cases.parse_causal)[0]
    all_cases: list[AttentionCase] = []
    for device in devices:
        shapes = _parse_each(_pick(raw, "shapes", f"{device}_shapes"), raw, cases.parse_shape)
        dtypes = _parse_each(_pick(raw, "dtypes", f"{device}_dtypes"), raw, cases.parse_dtype)
        all_cases += cases.build_cases(shapes, list(dict.fromkeys(dtypes)), device, causal_flags)
    results_dir = Path(raw["results"][0])
    traces = raw["traces"][0].strip()
    return SuiteSettings(
        variants=_resolve_variants(raw),
        devices=devices,
        cases=tuple(all_cases),
        seed=_parse_seed(raw),
        results_dir=results_dir,
        traces_dir=Path(traces) if traces else results_dir / "traces",
    )
