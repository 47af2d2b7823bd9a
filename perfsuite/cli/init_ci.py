"""``perfsuite init-ci``: write a GitHub Actions workflow that gates your pull requests with ``perfsuite ab``.

The workflow comes from the template kept in the package (``cli/templates/perfsuite-gate.yml``,
linted by perfsuite's own tests with actionlint and zizmor). An existing file is never replaced
unless ``--force`` is given.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from perfsuite.errors import UsageError
from perfsuite.storage import write_text_atomic

TEMPLATE = Path(__file__).with_name("templates") / "perfsuite-gate.yml"
DEFAULT_PATH = Path(".github/workflows/perfsuite-gate.yml")
# --shards N: a nightly workflow, one job per shard then a job that records and gates (fleet how-to)
SHARDS_TEMPLATE = Path(__file__).with_name("templates") / "perfsuite-shards.yml"
SHARDS_PATH = Path(".github/workflows/perfsuite-shards.yml")
MAX_SHARDS = 256  # GitHub Actions runs at most 256 jobs per matrix
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def default_torch() -> str:
    """pip arguments for the torch this environment runs (``torch==2.13.0`` from the CPU index), so that
    CI times the torch the user has; a local version label (``+cpu``) is left to the index. Read from
    the installed distribution's metadata: importing torch would slow every command's start."""
    from importlib import metadata

    return f"torch=={metadata.version('torch').split('+')[0]} --index-url {TORCH_CPU_INDEX}"


def installed_requirement() -> str:
    """The pip requirement for the perfsuite installed here: ``perfsuite==0.1.0`` for a release from a
    package index, ``git+URL@COMMIT`` for an install from a git URL (pip's ``direct_url.json``).

    Raises:
        UsageError: perfsuite runs from a local folder (an editable install, a checkout), which the
            runner cannot install; ``--perfsuite`` must say how.
    """
    from importlib import metadata

    try:
        dist = metadata.distribution("perfsuite")
    except metadata.PackageNotFoundError:
        dist = None
    direct = json.loads((dist.read_text("direct_url.json") if dist else None) or "null")
    if dist is not None and direct is None:
        return f"perfsuite=={dist.version}"
    vcs = (direct or {}).get("vcs_info") or {}
    if vcs.get("vcs") == "git" and vcs.get("commit_id"):
        return f"git+{direct['url']}@{vcs['commit_id']}"
    where = (direct or {}).get("url") or "a source folder"
    raise UsageError(
        f"perfsuite here is installed from {where}, which a CI runner cannot install; give --perfsuite "
        "REQUIREMENT (perfsuite==VERSION from PyPI, or git+https://github.com/ORG/perfsuite@TAG)"
    )


def add_command(commands) -> None:
    init = commands.add_parser(
        "init-ci", help="write a GitHub workflow gating your pull requests with perfsuite ab"
    )
    init.add_argument(
        "--output", help=f"where to write it (default {DEFAULT_PATH}; with --shards {SHARDS_PATH})"
    )
    init.add_argument(
        "--shards",
        type=int,
        help="write instead a nightly workflow timing the suite in N shards (one "
        "job each), then a job that records them and gates on the history",
    )
    init.add_argument(
        "--torch",
        help="pip arguments for torch (default: the version installed here, from the "
        f"CPU index: {default_torch()!r})",
    )
    init.add_argument(
        "--perfsuite",
        metavar="REQUIREMENT",
        help="how the runner installs perfsuite: a pip requirement such as a git URL "
        "(git+https://github.com/ORG/perfsuite@TAG) or a wheel's URL (default: the release "
        "installed here, perfsuite==VERSION, or the git commit it was installed from)",
    )
    init.add_argument(
        "--python", default="3.11", help="Python version of the runner (default 3.11)"
    )
    init.add_argument(
        "--case-set",
        help="case set to gate (default: perfsuite_case_set of your pytest "
        "configuration, read by perfsuite ab on the runner)",
    )
    init.add_argument("--force", action="store_true", help="replace an existing file")


def render(torch: str, perfsuite: str, python: str, case_set: str | None) -> str:
    """The workflow text with its placeholders filled (no ``--case-set`` when ``case_set`` is None);
    ``UsageError`` for a value that would break YAML."""
    values = {"@TORCH@": torch, "@PERFSUITE@": perfsuite, "@PYTHON@": python}
    values |= {"@CASE_SET@": case_set} if case_set is not None else {}
    for name, value in values.items():
        if not value.strip() or any(c in value for c in "\n\"'`$#"):
            raise UsageError(
                f"{name.strip('@').lower()} value {value!r}: give a non-empty value without newlines, "
                "quotes, '$', '#' or backquotes"
            )
    text = TEMPLATE.read_text()
    if case_set is None:  # perfsuite ab reads perfsuite_case_set from the user's configuration
        text = text.replace("--case-set @CASE_SET@ ", "")
    for name, value in values.items():
        text = text.replace(name, value)
    return text


def render_shards(count: int, torch: str, perfsuite: str, python: str) -> str:
    """The sharded nightly workflow for ``count`` shards. Raises UsageError outside 1..MAX_SHARDS."""
    if not 1 <= count <= MAX_SHARDS:
        raise UsageError(
            f"--shards {count}: give 1..{MAX_SHARDS} (a GitHub Actions matrix runs at most {MAX_SHARDS} jobs)"
        )
    render(torch, perfsuite, python, None)  # the same checks of the values
    text = SHARDS_TEMPLATE.read_text()
    for name, value in {
        "@TORCH@": torch,
        "@PERFSUITE@": perfsuite,
        "@PYTHON@": python,
        "@SHARDS@": str(count),
        "@SHARD_LIST@": ", ".join(str(i) for i in range(1, count + 1)),
    }.items():
        text = text.replace(name, value)
    return text


def run_init_ci(args: argparse.Namespace) -> int:
    if args.shards is not None:
        return write_shards_workflow(args)
    output = Path(args.output or DEFAULT_PATH)
    if output.exists() and not args.force:
        raise UsageError(f"{output} exists; it is left as it is (use --force to replace it)")
    torch = args.torch or default_torch()
    requirement = args.perfsuite or installed_requirement()
    write_text_atomic(output, render(torch, requirement, args.python, args.case_set))
    case_set = (
        f"case set {args.case_set}"
        if args.case_set
        else "the case set of your pytest configuration"
    )
    print(
        f"wrote {output}: it gates every pull request with perfsuite ab ({case_set}; {torch}; {requirement})",
        file=sys.stderr,
    )
    return 0


def write_shards_workflow(args: argparse.Namespace) -> int:
    output = Path(args.output or SHARDS_PATH)
    if output.exists() and not args.force:
        raise UsageError(f"{output} exists; it is left as it is (use --force to replace it)")
    torch = args.torch or default_torch()
    write_text_atomic(output, render_shards(args.shards, torch, args.perfsuite, args.python))
    print(
        f"wrote {output}: it times the suite nightly in {args.shards} shard jobs, then records and gates ({torch})",
        file=sys.stderr,
    )
    return 0
