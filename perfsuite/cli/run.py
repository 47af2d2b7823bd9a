"""``perfsuite run``: the attention suite in the current directory (your repository), timed by default.

    perfsuite run [--check] [PYTEST ARGS...]

Runs the suite shipped in the package with the current directory as pytest's root: your
``[tool.pytest.ini_options]`` keys (``perfsuite_user_variants``, ``perfsuite_variants``,
``perfsuite_case_set``, ``perfsuite_modes``, ...) apply, and the table, traces and baseline are
written here (``perfsuite-results/``, ``.benchmarks/``, named by your git commit). ``--check``
skips timing (correctness and profiler checks only). Other arguments go to pytest, and the
exit code is pytest's (0 passed, 1 failed, 2 interrupted, 4 usage error, 5 nothing collected).
pytest starts under the process conditions of every timed run (``perfsuite.measure.conditions``;
an ``OMP_NUM_THREADS`` you exported is kept).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path


def add_command(commands) -> None:
    run = commands.add_parser("run", help="the attention suite here (your repository): checked, profiled, timed",
                              usage="perfsuite run [-h] [--check] [PYTEST ARGS ...]",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("--check", action="store_true", help="correctness and profiler checks only, no timing")


def run_suite(args: argparse.Namespace) -> int:
    """pytest in a child process, so it imports and assert-rewrites the plugin itself, and starts
    under the process conditions (the OpenMP wait policy cannot be set later); its exit code."""
    from perfsuite.measure.conditions import required_env
    from perfsuite.suite.runner import suite_arguments

    command = [sys.executable, "-m", "pytest", *suite_arguments(Path.cwd(), not args.check, list(args.pytest_args))]
    # PERFSUITE_HISTORY_SOURCE: the history store records this run as perfsuite run's
    return subprocess.call(command, env={**os.environ, **required_env(), "PERFSUITE_HISTORY_SOURCE": "run"})
