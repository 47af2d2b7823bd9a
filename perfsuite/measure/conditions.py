"""The process conditions of every timed run, stated once.

The timed suite (``scripts/bench.sh``, ``perfsuite run``, ``pytest -c benchmarks.ini``), the A/B gate's workers
(``perfsuite.gate.ab``) and the fidelity check (``python -m validation.fidelity``) all run under these
conditions; the run header says which are missing and what that costs.

Each condition is an environment variable read when a library starts (libgomp reads
``OMP_*`` when torch loads it; glibc reads ``MALLOC_*`` at the first allocation). Some can
be applied later in a running process (``apply_in_process``): glibc's thresholds through
``mallopt(3)``, the thread count through ``torch.set_num_threads``. The OpenMP wait policy
cannot: libgomp has no call to change it after it started, so a process started without it
keeps spinning threads, and only the header's warning remains.

Command line: ``python -m perfsuite.measure.conditions`` prints ``export NAME=VALUE`` lines for
a shell (``scripts/bench.sh`` evaluates them).
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import platform
from pathlib import Path
from collections.abc import Callable, Mapping

# mallopt(3) parameter numbers (glibc <malloc.h>).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def physical_cores() -> int:
    """Physical cores among the CPUs this process may run on (``sched_getaffinity``).

    SMT siblings (``/sys/devices/system/cpu/cpuN/topology/thread_siblings_list``) count once:
    torch's own default is one thread per physical core. Falls back to the CPU count.
    """
    cpus = (
        sorted(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else list(range(os.cpu_count() or 1))
    )
    siblings = set()
    for cpu in cpus:
        path = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
        try:
            siblings.add(path.read_text().strip())
        except OSError:
            siblings.add(str(cpu))
    return max(1, len(siblings))


@dataclasses.dataclass(frozen=True)
class Condition:
    """One process condition.

    ``name``: the environment variable; ``value``: its required value (a function, for values
    that depend on the machine); ``why``: what it prevents; ``cost``: what a run without it
    risks (the header prints it); ``accepts``: whether a value already set counts as the
    condition (default: equal to ``value()``).
    """

    name: str
    value: Callable[[], str]
    why: str
    cost: str
    accepts: Callable[[str], bool] | None = None

    def holds(self, environ: Mapping[str, str]) -> bool:
        """True when ``environ`` sets this variable to an accepted value."""
        found = environ.get(self.name)
        if found is None:
            return False
        return self.accepts(found) if self.accepts else found == self.value()


def _positive_int(text: str) -> bool:
    return text.strip().isdigit() and int(text) >= 1


CONDITIONS: tuple[Condition, ...] = (
    Condition(
        "OMP_WAIT_POLICY",
        lambda: "PASSIVE",
        "idle OpenMP threads sleep instead of spin-waiting after a parallel region (libgomp's default "
        "spins), so they neither steal a core from another process nor lose theirs to one",
        "on a machine where other processes run, spinning threads and the scheduler's tick inflate "
        "medians several-fold with a small IQR; it cannot be set after torch started: use `perfsuite run` "
        "(or perfsuite's scripts/bench.sh), which set it, or export OMP_WAIT_POLICY=PASSIVE before pytest",
    ),
    Condition(
        "MALLOC_MMAP_THRESHOLD_",
        lambda: str(32 * 2**20),
        "a fixed mmap threshold turns off glibc's adaptive threshold (mallopt(3)), so a score matrix under "
        "32 MiB comes from the heap, not from fresh page-faulting mmap'd memory depending on the process's "
        "history (32 MiB is glibc's cap on 64-bit: larger blocks are always mmap'd; python -m validation.page_faults)",
        "identical code measured up to 2x apart between two processes (the A/B gate's calibration)",
    ),
    Condition(
        "MALLOC_TRIM_THRESHOLD_",
        lambda: str(256 * 2**20),
        "freed memory stays in the heap instead of being returned to the kernel after every step "
        "(mallopt(3) M_TRIM_THRESHOLD)",
        "each step may page-fault its buffers again",
    ),
    Condition(
        "OMP_NUM_THREADS",
        lambda: str(physical_cores()),
        "an explicit thread count, the same in every process of a comparison (machine.MUST_MATCH holds it)",
        "the thread count follows whatever the environment or torch picks, and two runs may differ",
        accepts=_positive_int,
    ),
)


def required_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a timed process needs: every condition, keeping an accepted value already
    set in ``environ`` (an explicit ``OMP_NUM_THREADS`` of the caller is kept)."""
    environ = os.environ if environ is None else environ
    return {c.name: environ[c.name] if c.holds(environ) else c.value() for c in CONDITIONS}


def missing(environ: Mapping[str, str] | None = None) -> list[Condition]:
    """The conditions ``environ`` (default: this process's start environment) does not set."""
    environ = os.environ if environ is None else environ
    return [c for c in CONDITIONS if not c.holds(environ)]


def _mallopt(parameter: int, value: int) -> bool:
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        return bool(ctypes.CDLL(None).mallopt(ctypes.c_int(parameter), ctypes.c_int(value)))
    except (OSError, AttributeError):
        return False


def apply_in_process(environ: Mapping[str, str] | None = None) -> list[str]:
    """Apply, in this running process, the missing conditions that can still be applied.

    glibc's thresholds with ``mallopt(3)`` (same effect as the variables at start, for the
    allocations made from now on); the thread count with ``torch.set_num_threads``. Returns the
    names applied. The OpenMP wait policy is never among them (see the module docstring).
    """
    applied = []
    for condition in missing(environ):
        if condition.name == "MALLOC_MMAP_THRESHOLD_" and _mallopt(
            _M_MMAP_THRESHOLD, int(condition.value())
        ):
            applied.append(condition.name)
        elif condition.name == "MALLOC_TRIM_THRESHOLD_" and _mallopt(
            _M_TRIM_THRESHOLD, int(condition.value())
        ):
            applied.append(condition.name)
        elif condition.name == "OMP_NUM_THREADS":
            import torch

            torch.set_num_threads(int(condition.value()))
            applied.append(condition.name)
    return applied


def header_lines(environ: Mapping[str, str] | None = None, applied: list[str] = ()) -> list[str]:
    """The run header's lines about process conditions: all set, or each missing one, whether it
    was applied after start, and what a missing one costs."""
    absent = missing(environ)
    if not absent:
        return [
            "perfsuite: process conditions: "
            + " ".join(f"{k}={v}" for k, v in required_env(environ).items())
        ]
    lines = []
    for condition in absent:
        if condition.name in applied:
            lines.append(
                f"perfsuite: process condition {condition.name} was not in the environment; applied after "
                f"start ({condition.name}={condition.value()})"
            )
        else:
            lines.append(
                f"perfsuite: WARNING: process condition {condition.name}={condition.value()} is missing: "
                f"{condition.cost}"
            )
    return lines


def shell_exports(environ: Mapping[str, str] | None = None) -> str:
    """``export NAME=VALUE`` lines for a POSIX shell (``eval "$(python -m perfsuite.measure.conditions)"``)."""
    return "".join(f"export {name}={value}\n" for name, value in required_env(environ).items())


if __name__ == "__main__":
    print(shell_exports(), end="")
