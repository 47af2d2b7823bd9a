"""The shell lines init-ci writes, run by bash: a requirement with spaces (``perfsuite[postgresql] @ git+URL``)
reaches pip as one argument; the store is restored from the newest finished run that kept one, a failed run
(a night whose gate found a regression) included; main's history job records the merge gate and runs
``history detect``."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from perfsuite.cli.init_ci import render, render_shards

TORCH = "torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
REQUIREMENT = "perfsuite[postgresql] @ git+https://github.com/example/perfsuite@v0.1.0"
# stand-ins for the runner's programs, as shell functions: each prints what it was given
STUBS = r"""
python() { printf '<%s>' "$@"; echo; }
gh() {
  if [ "$1 $2" = "run list" ]; then printf '%s\n' 30 29 28; return 0; fi
  echo "gh $*" >&2
  [ "$3" = 29 ]  # run 30 kept no store (it failed before); run 29 failed at its gate, after keeping it
}
"""


def workflows() -> dict[str, dict]:
    return {
        "gate": yaml.safe_load(render(TORCH, REQUIREMENT, "3.11", None)),
        "shards": yaml.safe_load(render_shards(2, TORCH, REQUIREMENT, "3.11")),
    }


def step(job: dict, starts: str) -> str:
    (found,) = [s["run"] for s in job["steps"] if s.get("name", "").startswith(starts)]
    return found


def bash(script: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-e", "-c", STUBS + script],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
    )


@pytest.mark.parametrize("name", ["gate", "shards"])
def test_the_install_lines_give_pip_the_requirement_as_one_argument(name):
    for job in workflows()[name]["jobs"].values():
        if not any(s.get("name", "").startswith("Install") for s in job["steps"]):
            continue
        done = bash(step(job, "Install"), {"PERFSUITE_HISTORY_URL": "postgresql+psycopg://h/db"})
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert (
            lines[0]
            == "<-m><pip><install><torch==2.13.0><--index-url><https://download.pytorch.org/whl/cpu>"
        )
        assert lines[1] == f"<-m><pip><install><{REQUIREMENT}>"


@pytest.mark.parametrize(("name", "job"), [("gate", "history"), ("shards", "record")])
def test_the_store_of_a_failed_run_is_restored(name, job):
    done = bash(step(workflows()[name]["jobs"][job], "Restore"), {"WORKFLOW": "w"})
    assert done.returncode == 0, done.stderr
    assert "history store of run 29 restored" in done.stdout
    assert "gh run download 30 --name perfsuite-history" in done.stderr


def test_mains_history_job_records_the_merge_gate_and_runs_detect():
    history = workflows()["gate"]["jobs"]["history"]
    names = [s.get("name", "") for s in history["steps"]]
    merge = step(history, "Merge gate")
    assert "perfsuite ab --base-ref HEAD~1 --head-ref HEAD" in merge and "--json" in merge
    assert step(history, "Gate on the history") == "perfsuite history detect"
    # the store and the dashboard are kept before detect can fail the job
    assert names.index("Keep the store for the next run") < names.index(
        "Gate on the history (exit 1 when this commit is a confirmed regression; the store is kept above)"
    )
