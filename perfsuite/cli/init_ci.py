"""``perfsuite init-ci``: write a GitHub Actions workflow that gates your pull requests with ``perfsuite ab``.

The workflow comes from the template kept in the package (``cli/templates/perfsuite-gate.yml``,
linted by perfsuite's own tests with actionlint and zizmor). An existing file is never replaced
unless ``--force`` is given.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from perfsuite.errors import UsageError
from perfsuite.storage import write_text_atomic

TEMPLATE = Path(__file__).with_name("templates") / "perfsuite-gate.yml"
DEFAULT_PATH = Path(".github/workflows/perfsuite-gate.yml")
DEFAULT_TORCH = "torch --index-url https://download.pytorch.org/whl/cpu"


def add_command(commands) -> None:
    init = commands.add_parser("init-ci", help="write a GitHub workflow gating your pull requests with perfsuite ab")
    init.add_argument("--output", default=str(DEFAULT_PATH), help=f"where to write it (default {DEFAULT_PATH})")
    init.add_argument("--torch", default=DEFAULT_TORCH, help=f"pip arguments for torch (default: {DEFAULT_TORCH!r})")
    init.add_argument("--perfsuite", default="perfsuite", help="pip requirement for perfsuite (a version, path or git URL)")
    init.add_argument("--python", default="3.11", help="Python version of the runner (default 3.11)")
    init.add_argument("--case-set", default="smoke", help="case set to gate (default smoke)")
    init.add_argument("--force", action="store_true", help="replace an existing file")


def render(torch: str, perfsuite: str, python: str, case_set: str) -> str:
    """The workflow text with its placeholders filled; ``UsageError`` for a value that would break YAML."""
    values = {"@TORCH@": torch, "@PERFSUITE@": perfsuite, "@PYTHON@": python, "@CASE_SET@": case_set}
    for name, value in values.items():
        if not value.strip() or any(c in value for c in "\n\"'`$#"):
            raise UsageError(f"{name.strip('@').lower()} value {value!r}: give a non-empty value without newlines, "
                             "quotes, '$', '#' or backquotes")
    text = TEMPLATE.read_text()
    for name, value in values.items():
        text = text.replace(name, value)
    return text


def run_init_ci(args: argparse.Namespace) -> int:
    output = Path(args.output)
    if output.exists() and not args.force:
        raise UsageError(f"{output} exists; it is left as it is (use --force to replace it)")
    write_text_atomic(output, render(args.torch, args.perfsuite, args.python, args.case_set))
    print(f"wrote {output}: it gates every pull request with perfsuite ab (case set {args.case_set})", file=sys.stderr)
    return 0
