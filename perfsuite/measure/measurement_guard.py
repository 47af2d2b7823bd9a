"""The measurement is the suite's: timers, synchronize functions and global torch settings a variant must not touch.

A variant that replaces ``time.perf_counter`` (or pytest-benchmark's timer, or
``torch.cuda.Event.elapsed_time``, or ``torch.cuda.synchronize``) could report any time it
likes; one that changes a global torch setting (``torch.backends.*`` flags, the default dtype,
deterministic mode, the number of threads) can make the variants after it slower, or the float64
reference wrong. ``MeasurementState.capture()`` records all of them before a variant's calls;
``MeasurementState.check_and_restore(name)`` after them names each change as that variant's failure
and puts the suite's value back, so the variants after it run as they would have.

Not covered: state kept elsewhere (environment variables, ``torch._dynamo.config``,
``torch._inductor.config``, a library's own globals), and functions a variant wraps without
replacing the attribute (monkeypatching the C++ clock is out of reach of any Python check).
"""

from __future__ import annotations

import dataclasses
import importlib
import warnings
from collections.abc import Callable

import torch

# Functions whose replacement would change a measurement: ``module:attribute.path``.
GUARDED_FUNCTIONS = (
    "time:perf_counter",
    "time:perf_counter_ns",
    "time:monotonic",
    "time:monotonic_ns",
    "time:time",
    "time:process_time",
    "time:process_time_ns",
    "torch.cuda:synchronize",
    "torch.cuda:Event.record",
    "torch.cuda:Event.elapsed_time",
    "torch.cuda:Event.synchronize",
    "torch.cuda:Stream.synchronize",
    "pytest_benchmark.timers:default_timer",
    "pytest_benchmark.fixture:BenchmarkFixture._make_runner",
    "pytest_benchmark.fixture:BenchmarkFixture._calibrate_timer",
    "perfsuite.measure.timing:synchronized",
    "perfsuite.measure.device_api:TorchCuda.synchronize",
    "perfsuite.measure.device_api:TorchCuda.record_event",
    "perfsuite.measure.device_api:TorchCuda.elapsed_s",
)


@dataclasses.dataclass(frozen=True)
class _Setting:
    """A global torch setting: how to read it and how to put a value back."""

    name: str
    read: Callable[[], object]
    write: Callable[[object], None]


def _flag(module: str, attribute: str) -> _Setting:
    """A plain attribute flag such as ``torch.backends.cudnn.benchmark``."""

    def owner():
        return importlib.import_module(module)

    return _Setting(
        f"{module}.{attribute}",
        lambda: getattr(owner(), attribute, None),
        lambda value: setattr(owner(), attribute, value),
    )


def _matmul_flag(attribute: str) -> _Setting:
    return _Setting(
        f"torch.backends.cuda.matmul.{attribute}",
        lambda: getattr(torch.backends.cuda.matmul, attribute, None),
        lambda value: setattr(torch.backends.cuda.matmul, attribute, value),
    )


def _deterministic() -> tuple[bool, bool]:
    return (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )


def _sdp(name: str) -> _Setting:
    enabled = getattr(torch.backends.cuda, f"{name}_sdp_enabled")
    enable = getattr(torch.backends.cuda, f"enable_{name}_sdp")
    return _Setting(f"torch.backends.cuda.{name}_sdp_enabled()", enabled, enable)


SETTINGS = (
    _Setting("torch.get_default_dtype()", torch.get_default_dtype, torch.set_default_dtype),
    _Setting(
        "torch.are_deterministic_algorithms_enabled()",
        _deterministic,
        lambda value: torch.use_deterministic_algorithms(value[0], warn_only=value[1]),
    ),
    _Setting("torch.get_num_threads()", torch.get_num_threads, torch.set_num_threads),
    _Setting("torch.is_grad_enabled()", torch.is_grad_enabled, torch.set_grad_enabled),
    _Setting(
        "torch.get_float32_matmul_precision()",
        torch.get_float32_matmul_precision,
        torch.set_float32_matmul_precision,
    ),
    _matmul_flag("allow_tf32"),
    _matmul_flag("allow_fp16_reduced_precision_reduction"),
    _matmul_flag("allow_bf16_reduced_precision_reduction"),
    _flag("torch.backends.cudnn", "enabled"),
    _flag("torch.backends.cudnn", "benchmark"),
    _flag("torch.backends.cudnn", "deterministic"),
    _flag("torch.backends.cudnn", "allow_tf32"),
    _flag("torch.backends.mkldnn", "enabled"),
    _flag("torch.backends.opt_einsum", "enabled"),
    _sdp("flash"),
    _sdp("mem_efficient"),
    _sdp("math"),
    _sdp("cudnn"),
)


def _resolve(path: str) -> tuple[object, str] | None:
    """``(owner, attribute)`` of ``module:Class.attr``, or None when the module or class is missing."""
    module_name, _, dotted = path.partition(":")
    try:
        owner: object = importlib.import_module(module_name)
    except ImportError:
        return None
    *classes, attribute = dotted.split(".")
    for name in classes:
        owner = getattr(owner, name, None)
        if owner is None:
            return None
    return owner, attribute


def _read_quietly(setting: _Setting) -> object:
    with warnings.catch_warnings():  # torch deprecates some flags' getters (allow_tf32)
        warnings.simplefilter("ignore")
        try:
            return setting.read()
        except Exception as exc:  # a setting this torch cannot read is compared as its error
            return f"<unreadable: {type(exc).__name__}>"


@dataclasses.dataclass(frozen=True)
class MeasurementState:
    """The guarded functions (by identity) and torch settings (by value) at one moment."""

    functions: dict[str, tuple[object, str, object]]  # path -> (owner, attribute, the function)
    settings: dict[str, object]

    @classmethod
    def capture(cls, extra: tuple[str, ...] = ()) -> MeasurementState:
        """The state now (``GUARDED_FUNCTIONS`` and the ``extra`` paths, ``SETTINGS``); missing modules
        are left out."""
        functions = {}
        for path in GUARDED_FUNCTIONS + tuple(extra):
            found = _resolve(path)
            if found is not None:
                owner, attribute = found
                functions[path] = (owner, attribute, owner.__dict__.get(attribute))
        return cls(functions, {s.name: _read_quietly(s) for s in SETTINGS})

    def changes(self) -> list[str]:
        """One line per guarded function replaced and setting changed since the capture."""
        found = []
        for path, (owner, attribute, original) in self.functions.items():
            now = owner.__dict__.get(attribute)
            if now is not original:
                found.append(f"replaced {path.replace(':', '.')} with {_name(now)}")
        for setting in SETTINGS:
            before, now = self.settings[setting.name], _read_quietly(setting)
            if now != before:
                found.append(f"changed {setting.name} from {before!r} to {now!r}")
        return found

    def restore(self) -> None:
        """Put every replaced function and changed setting back."""
        for owner, attribute, original in self.functions.values():
            if owner.__dict__.get(attribute) is not original:
                if original is None:
                    delattr(owner, attribute)
                else:
                    setattr(owner, attribute, original)
        for setting in SETTINGS:
            before = self.settings[setting.name]
            if _read_quietly(setting) != before and not str(before).startswith("<unreadable"):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    setting.write(before)

    def check_and_restore(self, variant_name: str, during: str) -> str | None:
        """The failure naming what the variant changed ``during`` its calls (restored), or None."""
        changes = self.changes()
        if not changes:
            return None
        self.restore()
        return (
            f"variant {variant_name} tampered with the measurement during {during}: "
            + "; ".join(changes)
            + ". The suite's timers and settings were restored for the variants after it; "
            "a variant must not change global state that times or checks it"
        )


def _name(value: object) -> str:
    if value is None:
        return "nothing (deleted)"
    module = getattr(value, "__module__", None) or type(value).__module__
    qualname = getattr(value, "__qualname__", None) or type(value).__qualname__
    return f"{module}.{qualname}"
