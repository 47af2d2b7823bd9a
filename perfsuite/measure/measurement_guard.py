"""The measurement is the suite's: timers, synchronize functions and global torch settings a variant must not touch.

A variant that replaces ``time.perf_counter`` (or pytest-benchmark's timer, or
``torch.cuda.Event.elapsed_time``, or ``torch.cuda.synchronize``) could report any time it
likes; one that changes a global torch setting (``torch.backends.*`` flags, the default dtype,
deterministic mode, the number of threads) can make the variants after it slower, or the float64
reference wrong. ``MeasurementState.capture()`` records all of them before a variant's calls;
``MeasurementState.check_and_restore(name)`` after them names each change as that variant's failure
and puts the suite's value back, so the variants after it run as they would have.

Besides the timers, every function of the namespaces the float64 reference and the built-ins call
(``GUARDED_NAMESPACES``: ``torch``, ``torch.nn.functional``, ``torch.Tensor``' methods, ...) is
compared by identity, so a module that patches ``torch.matmul`` at import, or a variant that does it
during its calls, is named and the original put back; the process's CPU affinity and torch's thread
counts, default dtype and device and backend flags are ``SETTINGS``. ``import_changes`` applies the
same check around the import of users' modules.

Not covered: state kept elsewhere (environment variables, ``torch._dynamo.config``,
``torch._inductor.config``, a library's own globals, functions of torch submodules not listed), and
functions a variant wraps without replacing the attribute (monkeypatching the C++ clock is out of
reach of any Python check).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import types
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

# Namespaces whose every function (by identity) a variant must not replace: the reference, the
# built-ins and the checks call them. New attributes are allowed (torch imports submodules lazily).
GUARDED_NAMESPACES = (
    "torch",
    "torch.nn.functional",
    "torch.Tensor",
    "torch.linalg",
    "torch.special",
    "torch.nn.attention",
    "torch.nn.attention.flex_attention",
)


class MeasurementTampered(AssertionError):
    """A variant's calls failed after it changed the measurement's state (named in the message, and
    restored): the failure is the tampering's, not the variant's arithmetic."""


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


def _affinity() -> tuple[int, ...]:
    return tuple(sorted(os.sched_getaffinity(0)))


def _set_affinity(cpus: object) -> None:
    os.sched_setaffinity(0, set(cpus))  # type: ignore[arg-type]


def _set_interop_threads(count: object) -> None:
    try:
        torch.set_num_interop_threads(count)  # type: ignore[arg-type]
    except RuntimeError:  # torch refuses once inter-op work started: the change is still named
        pass


_PLATFORM = (
    (_Setting("os.sched_getaffinity(0)", _affinity, _set_affinity),)
    if hasattr(os, "sched_getaffinity")
    else ()
)

SETTINGS = _PLATFORM + (
    _Setting("torch.get_default_dtype()", torch.get_default_dtype, torch.set_default_dtype),
    _Setting("torch.get_default_device()", torch.get_default_device, torch.set_default_device),
    _Setting(
        "torch.get_num_interop_threads()", torch.get_num_interop_threads, _set_interop_threads
    ),
    _Setting("torch.is_anomaly_enabled()", torch.is_anomaly_enabled, torch.set_anomaly_enabled),
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


def _namespace(name: str) -> object | None:
    """The module or class ``torch.Tensor`` / ``torch.nn.functional`` names, or None when missing."""
    module_name, _, attribute = name.rpartition(".")
    try:
        return importlib.import_module(name)
    except ImportError:
        pass
    try:
        return getattr(importlib.import_module(module_name), attribute, None)
    except ImportError:
        return None


def _functions_of(owner: object) -> dict[str, object]:
    """``owner``'s own callables (functions, builtins, methods), by name; modules and classes left out."""
    found = {}
    for name, value in list(vars(owner).items()):
        if name.startswith("__") or isinstance(value, (type, types.ModuleType)):
            continue
        if callable(value) or isinstance(value, (staticmethod, classmethod, property)):
            found[name] = value
    return found


def _read(setting: _Setting) -> object:
    try:
        return setting.read()
    except Exception as exc:  # a setting this torch cannot read is compared as its error
        return f"<unreadable: {type(exc).__name__}>"


def _read_quietly(settings: tuple[_Setting, ...]) -> dict[str, object]:
    """Each setting's value by name, warnings silenced (torch deprecates some flags' getters,
    ``allow_tf32``): one ``catch_warnings`` for all (the gate's workers read them after every block)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {setting.name: _read(setting) for setting in settings}


def _same(original: object, now: object) -> bool:
    """``now`` is ``original``, or torch's own ``_disable_dynamo`` wrapper of it (importing
    ``torch._dynamo``, as ``torch.compile`` does, wraps ``torch.manual_seed`` so; a variant that merely
    compiles is no tamperer). Recognised by its code's file, torch's ``_compile.py``, not by name."""
    if now is original:
        return True
    code = getattr(now, "__code__", None)
    return (
        getattr(now, "__wrapped__", None) is original
        and original is not None
        and code is not None
        and code.co_filename == _TORCH_COMPILE_FILE
    )


_TORCH_COMPILE_FILE = importlib.import_module("torch._compile").__file__


@dataclasses.dataclass(frozen=True)
class MeasurementState:
    """The guarded functions (by identity) and torch settings (by value) at one moment."""

    functions: dict[str, tuple[object, str, object]]  # path -> (owner, attribute, the function)
    settings: dict[str, object]
    namespaces: dict[str, tuple[object, dict[str, object]]] = dataclasses.field(
        default_factory=dict
    )  # namespace -> (owner, its functions by name)

    @classmethod
    def capture(cls, extra: tuple[str, ...] = ()) -> MeasurementState:
        """The state now (``GUARDED_FUNCTIONS`` and the ``extra`` paths, ``SETTINGS``,
        ``GUARDED_NAMESPACES``); missing modules are left out. ``torch._dynamo`` is not imported (1.5-2 s
        of every gate worker's start): the wrapper its import puts around ``torch.manual_seed`` is
        recognised instead (``_same``)."""
        functions = {}
        for path in GUARDED_FUNCTIONS + tuple(extra):
            found = _resolve(path)
            if found is not None:
                owner, attribute = found
                functions[path] = (owner, attribute, owner.__dict__.get(attribute))
        namespaces = {}
        for name in GUARDED_NAMESPACES:
            owner = _namespace(name)
            if owner is not None:
                namespaces[name] = (owner, _functions_of(owner))
        return cls(functions, _read_quietly(SETTINGS), namespaces)

    def _replaced_in_namespaces(self) -> list[tuple[str, object, str, object, object]]:
        """``(namespace, owner, attribute, original, now)`` per guarded namespace function replaced or deleted."""
        found = []
        for name, (owner, functions) in self.namespaces.items():
            current = vars(owner)
            for attribute, original in functions.items():
                now = current.get(attribute)
                if not _same(original, now):
                    found.append((name, owner, attribute, original, now))
        return found

    def changes(self, namespaces: bool = True) -> list[str]:
        """One line per guarded function replaced and setting changed since the capture
        (``namespaces`` False: not the ``GUARDED_NAMESPACES``' thousands of functions, the timers and
        settings only)."""
        found = []
        for path, (owner, attribute, original) in self.functions.items():
            now = owner.__dict__.get(attribute)
            if not _same(original, now):
                found.append(f"replaced {path.replace(':', '.')} with {_name(now)}")
        for name, _, attribute, _, now in self._replaced_in_namespaces() if namespaces else ():
            found.append(f"replaced {name}.{attribute} with {_name(now)}")
        for name, now in _read_quietly(SETTINGS).items():
            if now != (before := self.settings[name]):
                found.append(f"changed {name} from {before!r} to {now!r}")
        return found

    def restore(self) -> None:
        """Put every replaced function and changed setting back."""
        for owner, attribute, original in self.functions.values():
            if not _same(original, owner.__dict__.get(attribute)):
                if original is None:
                    delattr(owner, attribute)
                else:
                    setattr(owner, attribute, original)
        for _, owner, attribute, original, _ in self._replaced_in_namespaces():
            setattr(owner, attribute, original)
        now = _read_quietly(SETTINGS)
        for setting in SETTINGS:
            before = self.settings[setting.name]
            if now[setting.name] != before and not str(before).startswith("<unreadable"):
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


def import_changes(source: str, load: Callable[[], object]) -> object:
    """``load()`` (the import of users' modules) with the measurement's state compared before and after.

    Returns what ``load`` returned. Raises ``ValueError`` naming ``source`` and each function the
    import replaced or setting it changed, all restored first: a module must not change, at import,
    the functions and settings every variant and the float64 reference are measured and checked with.
    """
    state = MeasurementState.capture()
    loaded = load()
    changes = state.changes()
    if changes:
        state.restore()
        raise ValueError(
            f"importing {source} changed what the suite measures and checks with: "
            + "; ".join(changes)
            + ". Restored; a module must not replace torch's functions or change global settings at import"
        )
    return loaded


def _name(value: object) -> str:
    if value is None:
        return "nothing (deleted)"
    module = getattr(value, "__module__", None) or type(value).__module__
    qualname = getattr(value, "__qualname__", None) or type(value).__qualname__
    return f"{module}.{qualname}"


class RecordingTimer:
    """pytest-benchmark's timer read through the suite: every reading kept, so each round it records
    can be checked against the clock's own readings (``unrecorded_rounds``).

    pytest-benchmark's runner times a round as ``end - start`` with two locals of its frame; a variant
    that rewrites ``start`` in that frame (``sys._getframe().f_back.f_locals``) makes a round look
    shorter. The readings are this object's, out of the frame's reach: an honest round's duration is
    exactly the difference of two consecutive readings (the same floating-point subtraction), so the
    check has no tolerance to tune and no machine is slow enough to trip it. It adds one Python call
    per reading (two per round, outside the loop of iterations).
    """

    def __init__(self, clock: Callable[[], float]):
        self.clock = clock
        self.readings: list[float] = []

    def __call__(self) -> float:
        now = self.clock()
        self.readings.append(now)
        return now

    def __str__(
        self,
    ) -> str:  # what pytest-benchmark saves as the timer: the clock's name, as before
        return str(self.clock)

    def __repr__(self) -> str:
        return f"the suite's recording timer over {self.clock}"

    def unrecorded_rounds(self, round_s: list[float], iterations: int) -> str | None:
        """None when the last ``len(round_s)`` rounds pytest-benchmark recorded (seconds per iteration,
        ``iterations`` per round) are the clock's own readings; else what differs, naming the first
        round whose duration was not the clock's (a rewritten ``start``), in seconds."""
        if not round_s:
            return None
        readings = self.readings[-2 * len(round_s) :]
        if len(readings) < 2 * len(round_s):
            return (
                f"pytest-benchmark recorded {len(round_s)} rounds but its timer was read "
                f"{len(self.readings)} times"
            )
        for index, recorded in enumerate(round_s):
            measured = readings[2 * index + 1] - readings[2 * index]
            if not _same_duration(recorded * iterations, measured):
                return (
                    f"round {index + 1} of {len(round_s)} was recorded as {recorded * iterations:.6g} s "
                    f"but the clock read {measured:.6g} s between its start and end (the timer's frame "
                    "was rewritten: its start or end is not the clock's)"
                )
        return None


def _same_duration(recorded_s: float, measured_s: float) -> bool:
    """The same subtraction, up to the rounding of pytest-benchmark's division by iterations and
    the multiplication back (a few units in the last place)."""
    return abs(recorded_s - measured_s) <= 1e-9 * max(abs(measured_s), abs(recorded_s)) + 1e-15
