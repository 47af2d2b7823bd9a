"""matplotlib is the optional extra [plots]: without it the plugin and the command load, and plots say what to install."""

import subprocess
import sys
from pathlib import Path

RUN = Path(__file__).resolve().parents[2] / "tests" / "data" / "runs" / "cpu-sequence-sweep.json"

# Runs in a fresh interpreter in which importing matplotlib fails as it does where it is not installed.
WITHOUT_MATPLOTLIB = """
import sys
sys.modules["matplotlib"] = None  # import matplotlib now raises ModuleNotFoundError
import perfsuite.suite.plugin  # the pytest plugin loads in every pytest run of the environment
from perfsuite.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def _report(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_MATPLOTLIB, "report", str(RUN), *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )


def test_plots_without_matplotlib_name_the_extra_to_install(tmp_path):
    done = _report(tmp_path, "--plots", str(tmp_path / "plots"))
    assert done.returncode == 2, done.stderr
    assert (
        "plots need matplotlib, which is not installed: pip install 'perfsuite[plots]'"
        in done.stderr
    )
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "plots").exists()


def test_reports_without_plots_need_no_matplotlib(tmp_path):
    done = _report(
        tmp_path, "--markdown", str(tmp_path / "report.md"), "--html", str(tmp_path / "report.html")
    )
    assert done.returncode == 0, done.stderr
    assert "| naive | forward |" in (tmp_path / "report.md").read_text()
    assert (tmp_path / "report.html").read_text().startswith("<!doctype html>")
