"""``perfsuite run``: the attention suite in the current directory (your repository), timed by default.

    perfsuite run [--check] [PYTEST ARGS...]

Runs the suite shipped in the package with your repository as pytest's root (from a
subdirectory, the nearest directory above whose pytest configuration has perfsuite keys, else
the git root, as pytest and git find theirs): your
``[tool.pytest.ini_options]`` keys (``perfsuite_user_variants``, ``perfsuite_variants``,
``perfsuite_case_set``, ``perfsuite_modes``, ...) apply, and the table, traces and baseline are
written here (``perfsuite-results/``, ``.benchmarks/``, named by your git commit). ``--check``
skips timing (correctness and profiler checks only). Other arguments go to pytest, and the
exit code is pytest's (0 passed, 1 failed, 2 interrupted, 4 usage error, 5 nothing collected).
Ctrl-C or SIGTERM is passed on to pytest, which stops after the running test and saves what
finished, marked partial; a second Ctrl-C stops it at once (nothing more is saved).
pytest starts under the process conditions of every timed run (``perfsuite.measure.conditions``;
an ``OMP_NUM_THREADS`` you exported is kept).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
from pathlib import Path
from collections.abc import Sequence

_PR_SET_PDEATHSIG = 1  # prctl(2): the signal a child gets when its parent dies


def add_command(commands) -> None:
    run = commands.add_parser(
        "run",
        help="the attention suite here (your repository): checked, profiled, timed",
        usage="perfsuite run [-h] [--check] [PYTEST ARGS ...]",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument(
        "--check", action="store_true", help="correctness and profiler checks only, no timing"
    )


def run_suite(args: argparse.Namespace) -> int:
    """pytest in a child process, so it imports and assert-rewrites the plugin itself, and starts
    under the process conditions (the OpenMP wait policy cannot be set later); its exit code."""
    from perfsuite.measure.conditions import required_env
    from perfsuite.suite.runner import find_project, suite_arguments

    project = find_project(Path.cwd())  # from a subdirectory: the repository's configuration
    root = project.root
    if root != Path.cwd().resolve():
        print(f"perfsuite run: running in {root} ({project.describe()})", file=sys.stderr)
    arguments = suite_arguments(root, not args.check, list(args.pytest_args), project.config_path)
    command = [sys.executable, "-m", "pytest", *arguments]
    storage = root / ".benchmarks"
    existed = storage.exists()
    # PERFSUITE_HISTORY_SOURCE: the history store records this run as perfsuite run's
    code = run_forwarding_signals(
        command, {**os.environ, **required_env(), "PERFSUITE_HISTORY_SOURCE": "run"}, cwd=root
    )
    if args.check and not existed:
        _remove_if_empty(storage)
    return code


def _remove_if_empty(folder: Path) -> None:
    """pytest-benchmark makes its storage folder even when timing is off: a check leaves none."""
    try:
        folder.rmdir()  # only ever removes an empty folder
    except OSError:
        pass


def _interrupt_when_parent_dies() -> None:
    """In the child, before exec: SIGINT back to its default, so that pytest hears the interrupt the
    wrapper passes on even where the wrapper was started with SIGINT ignored (a shell's background
    job without job control, ``nohup``); and, on Linux, SIGINT if the wrapper dies (even of SIGKILL),
    so pytest stops and saves as on Ctrl-C instead of running on as an orphan."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # its own process group: only the wrapper sends it
    if sys.platform != "linux":
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGINT)
    except (OSError, AttributeError):
        pass


def run_forwarding_signals(
    command: Sequence[str], env: dict[str, str], cwd: Path | None = None
) -> int:
    """Run ``command`` and return its exit code, passing SIGINT and SIGTERM on to it as SIGINT.

    The child runs in its own process group, so a terminal's Ctrl-C reaches it once, through
    this wrapper (twice would stop pytest while it saves). The first signal asks it to stop
    (pytest finishes the running test and saves, marked partial); a second one kills its
    process group. A child killed by signal N gives ``128 + N``, as a shell reports it.
    """
    child = subprocess.Popen(
        list(command),
        env=env,
        cwd=cwd,
        process_group=0,
        preexec_fn=None if sys.platform == "win32" else _interrupt_when_parent_dies,
    )
    received: list[int] = []

    def forward(signum, frame) -> None:
        received.append(signum)
        if len(received) == 1:
            child.send_signal(signal.SIGINT)
            return
        print(
            "perfsuite run: second interrupt: stopping pytest now; this run's results are not saved",
            file=sys.stderr,
            flush=True,
        )
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 - code if code < 0 else code
