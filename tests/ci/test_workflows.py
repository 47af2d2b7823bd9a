"""The GitHub workflows pass actionlint and zizmor (installed by scripts/setup.sh, extra "dev")."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def run(tool, *args):
    executable = BIN / tool
    assert executable.exists(), (
        f"{tool} is missing: run scripts/setup.sh (it installs the 'dev' extra)"
    )
    return subprocess.run(
        [str(executable), *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_actionlint_finds_nothing():
    result = run(
        "actionlint",
        "-config-file",
        ".github/actionlint.yaml",
        *map(str, (ROOT / ".github" / "workflows").glob("*.yml")),
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_zizmor_finds_nothing():
    result = run("zizmor", "--offline", "--no-progress", ".github/workflows")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No findings to report" in result.stdout + result.stderr


def test_the_gate_never_runs_untrusted_code_with_write_access():
    text = (ROOT / ".github" / "workflows" / "perf-gate.yml").read_text()
    code = "\n".join(line.split("#")[0] for line in text.splitlines())
    assert "pull_request_target" not in code
    assert "permissions:\n  contents: read" in text
    assert text.count("persist-credentials: false") == text.count("actions/checkout@")
