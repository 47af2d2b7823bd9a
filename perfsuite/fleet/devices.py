"""Which devices a fleet launcher may hand out: entries of the caller's visible-device list, never beyond it.

A GPU process sees the devices its ``CUDA_VISIBLE_DEVICES`` (NVIDIA) or ``HIP_VISIBLE_DEVICES`` (ROCm)
names, as indices or UUIDs. A launcher run with ``CUDA_VISIBLE_DEVICES=2,3`` gives each child one
entry of *that* list (``2`` or ``3``), so no child reaches GPU 0. Without the variable, every GPU
the driver counts is visible (``0 .. n-1``). Where the driver finds no GPU, index entries are CPU
processes standing in for GPUs (``DevicePlan.stand_ins``: named so, never "GPU 7"); a UUID there names
no device and is refused, as is an entry given twice anywhere.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from perfsuite.errors import ConfigError

CUDA_VARIABLE, ROCM_VARIABLE = "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"


@dataclasses.dataclass(frozen=True)
class DevicePlan:
    """The devices to use, the variable that hands one to a child, and the caller's list (None: unset)."""

    devices: tuple[str, ...]
    variable: str
    outer: tuple[str, ...] | None
    stand_ins: bool = (
        False  # the driver finds no GPU: each device is a CPU process standing in for one
    )


def visible_variable(rocm: bool, env: Mapping[str, str]) -> str:
    """``HIP_VISIBLE_DEVICES`` on ROCm (``CUDA_VISIBLE_DEVICES`` there too when only that one is set), else
    ``CUDA_VISIBLE_DEVICES``."""
    if rocm and not (CUDA_VARIABLE in env and ROCM_VARIABLE not in env):
        return ROCM_VARIABLE
    return CUDA_VARIABLE


def split_list(text: str) -> tuple[str, ...]:
    """``"2, 3"`` -> ``("2", "3")``; empty entries dropped."""
    return tuple(entry.strip() for entry in text.split(",") if entry.strip())


UUID_PREFIXES = ("GPU-", "MIG-")  # how nvidia-smi and rocm-smi spell a device's UUID


def _unmatched(entries: tuple[str, ...]) -> list[str]:
    """Entries that cannot name a device: neither an index (``0``) nor a UUID (``GPU-...``, ``MIG-...``)."""
    return [
        e
        for e in entries
        if not e.isdigit() and not (e.startswith(UUID_PREFIXES) and len(e) > len("GPU-"))
    ]


def plan(
    requested: str | None, env: Mapping[str, str], device_count: int, rocm: bool = False
) -> DevicePlan:
    """The devices a launcher runs on.

    ``requested``: ``--devices`` (entries as the visible-device variable spells them), or None for
    every visible device. ``device_count``: GPUs the driver reports (``torch.cuda.device_count()``).

    Raises:
        ConfigError: a requested entry outside the caller's visible list, an entry given twice (in
            ``requested`` or the variable), a UUID where the driver finds no GPU, no
            device at all, or a list that matches no device (an entry that is neither an index nor a
            UUID, or more entries than the driver finds with them); the message names the value,
            the variable and what is allowed.
    """
    variable = visible_variable(rocm, env)
    outer = split_list(env[variable]) if variable in env else None
    for where, entries in (
        (f"{variable}={env.get(variable)!r}", outer or ()),
        (f"--devices {requested!r}", split_list(requested or "")),
    ):
        wrong = _unmatched(entries)
        if wrong:
            raise ConfigError(
                f"{where}: {', '.join(map(repr, wrong))} matches no device; give indices (0,1) or "
                f"UUIDs ({' or '.join(p + '...' for p in UUID_PREFIXES)}, as nvidia-smi -L lists them)"
            )
    twice = sorted({e for e in outer or () if (outer or ()).count(e) > 1})
    if twice:
        raise ConfigError(
            f"{variable}={env[variable]!r} names {', '.join(twice)} more than once; each entry is one "
            "device, and one device cannot run two shards"
        )
    uuids = [
        e for e in (*(outer or ()), *split_list(requested or "")) if e.startswith(UUID_PREFIXES)
    ]
    if device_count == 0 and uuids:
        raise ConfigError(
            f"{', '.join(uuids)}: the driver finds no GPU here, so no device has that UUID; "
            "without GPUs give indices (--devices 0,1): CPU processes stand in for GPUs"
        )
    if outer and 0 < device_count < len(outer):
        raise ConfigError(
            f"{variable}={env[variable]!r}: the driver finds {device_count} device(s) with it, so "
            f"{len(outer) - device_count} of its entries match no device"
        )
    allowed = outer if outer is not None else tuple(str(i) for i in range(device_count))
    if requested is None:
        if not allowed:
            where = f"{variable}={env.get(variable)!r}" if outer is not None else "no GPU found"
            raise ConfigError(
                f"no device to run on ({where}); give --devices, e.g. --devices 0,1 (on a machine "
                "without GPUs those run as CPU processes standing in for GPUs)"
            )
        return DevicePlan(allowed, variable, outer, device_count == 0)
    devices = split_list(requested)
    if not devices:
        raise ConfigError(
            f"--devices {requested!r} names no device; give a comma-separated list such as 0,1"
        )
    repeated = sorted({d for d in devices if devices.count(d) > 1})
    if repeated:
        raise ConfigError(
            f"--devices {requested!r} names {', '.join(repeated)} more than once; one process per device"
        )
    if outer is not None:
        outside = [d for d in devices if d not in outer]
        if outside:
            raise ConfigError(
                f"--devices {requested!r}: {', '.join(outside)} not in the caller's {variable}="
                f"{','.join(outer)}; allowed: {', '.join(outer)}"
            )
    elif device_count and any(d.isdigit() and int(d) >= device_count for d in devices):
        raise ConfigError(
            f"--devices {requested!r}: this machine has {device_count} GPU(s), indices 0..{device_count - 1}"
        )
    return DevicePlan(devices, variable, outer, device_count == 0)
