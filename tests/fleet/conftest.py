"""A throwaway user repository for fleet tests: a git repository with its own attention function
(``killable_attention``, which kills its own process when ``FLEET_TEST_KILL=1``: a shard dying
mid-run) and a pytest configuration selecting it and sdpa on one small case, forward only."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from validation.user_repo import UserRepo

ATTENTION = '''"""Softmax attention that can kill its own process (a shard dying mid-run)."""
import os
import signal

import torch


def killable_attention(query, key, value, *, mask, scale):
    if os.environ.get("FLEET_TEST_KILL") == "1":
        os.kill(os.getpid(), signal.SIGKILL)
    scores = torch.matmul(query, key.transpose(-2, -1)).mul_(scale)
    if mask.additive is not None:
        scores.add_(mask.additive)
    if mask.masked_out is not None:
        scores.masked_fill_(mask.masked_out, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1).nan_to_num(0.0), value)
'''
PYPROJECT = """[tool.pytest.ini_options]
perfsuite_user_variants = ["myattn:killable_attention"]
perfsuite_variants = "killable_attention sdpa"
perfsuite_cases = "b1h2s16d8-fp32-causal-cpu"
perfsuite_modes = "forward"
perfsuite_isolate = "none"
"""


@pytest.fixture
def user_repo(tmp_path: Path) -> Path:
    repo = UserRepo.init(tmp_path / "repo")
    repo.commit(
        "base",
        {
            "myattn.py": ATTENTION,
            "pyproject.toml": PYPROJECT,
            ".gitignore": "perfsuite-results/\n.perfsuite/\n__pycache__/\n",
        },
    )
    return repo.path


@pytest.fixture
def run_perfsuite():
    """``run_perfsuite(repo, *args, env=...)``: ``perfsuite ARGS`` in ``repo`` (``perfsuite_in``)."""
    return perfsuite_in


def perfsuite_in(
    repo: Path, *args: str, env: dict | None = None, timeout: int = 600
) -> subprocess.CompletedProcess:
    """``perfsuite ARGS`` in ``repo`` (its own functions importable there), output as text."""
    environ = {k: v for k, v in os.environ.items() if not k.endswith("VISIBLE_DEVICES")}
    environ.update(PYTHONPATH=str(repo), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "perfsuite", *args],
        cwd=repo,
        env=environ,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# -- a real one-node Slurm cluster (slurm-wlm, munge; .ci/install-packages.sh installs them) -----------------
SLURM_REQUIRED = (
    "PERFSUITE_REQUIRE_SLURM"  # set by .ci/run: a missing Slurm fails instead of skipping
)
SLURM_CONF = """ClusterName=perfsuite
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.pid
SlurmctldLogFile={folder}/slurmctld.log
SlurmdLogFile={folder}/slurmd.log
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
NodeName={host} CPUs={cpus} RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
MUNGE_SOCKET = Path("/run/munge/munge.socket.2")


def _slurm_missing() -> str | None:
    import shutil

    missing = [
        tool
        for tool in ("slurmctld", "slurmd", "sbatch", "sinfo", "munged")
        if not shutil.which(tool) and not Path("/usr/sbin", tool).exists()
    ]
    if missing:
        return f"Slurm/munge not installed ({', '.join(missing)} missing; Debian: apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "a one-node Slurm needs root here (slurmd runs tasks as their users)"
    try:
        import submitit  # noqa: F401
    except ImportError:
        return "submitit is not installed (the dev extra has it)"
    return None


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _munge_works() -> bool:
    munge = subprocess.run("munge -n | unmunge", shell=True, capture_output=True, text=True)
    return munge.returncode == 0


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory) -> dict[str, str]:
    """slurmctld and slurmd started from a generated slurm.conf in a temporary folder (munged too when it
    is not running); the environment to reach it (``SLURM_CONF``). Stopped afterwards, munged only if started here."""
    import socket
    import time

    reason = _slurm_missing()
    if reason:
        if os.environ.get(SLURM_REQUIRED) == "1":
            pytest.fail(f"{SLURM_REQUIRED}=1 but {reason}")
        pytest.skip(reason)
    folder = tmp_path_factory.mktemp("slurm")
    for sub in ("state", "spool"):
        (folder / sub).mkdir()
    conf = folder / "slurm.conf"
    conf.write_text(
        SLURM_CONF.format(
            host=socket.gethostname().split(".")[0],
            folder=folder,
            cpus=os.cpu_count(),
            ctld_port=_free_port(),
            d_port=_free_port(),
        )
    )
    munged = None
    if not _munge_works():
        Path("/run/munge").mkdir(parents=True, exist_ok=True)
        subprocess.run(["chown", "munge:munge", "/run/munge"], check=True)
        munged = subprocess.Popen(
            ["runuser", "-u", "munge", "--", "/usr/sbin/munged", "--foreground"]
        )
        deadline = time.monotonic() + 30
        while not _munge_works():
            assert time.monotonic() < deadline and munged.poll() is None, "munged did not start"
            time.sleep(0.2)
    env = {"SLURM_CONF": str(conf)}
    daemons = [
        subprocess.Popen(
            [f"/usr/sbin/{name}", "-D", "-f", str(conf)],
            env={**os.environ, **env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for name in ("slurmctld", "slurmd")
    ]
    try:
        deadline = time.monotonic() + 60
        while True:
            info = subprocess.run(
                ["sinfo", "-h", "-o", "%T"],
                env={**os.environ, **env},
                capture_output=True,
                text=True,
            )
            if info.stdout.strip() in ("idle", "mixed", "allocated"):
                break
            if time.monotonic() > deadline or any(d.poll() is not None for d in daemons):
                logs = "\n".join(
                    (folder / f).read_text()[-2000:]
                    for f in ("slurmctld.log", "slurmd.log")
                    if (folder / f).exists()
                )
                pytest.fail(
                    f"Slurm did not come up (sinfo: {info.stdout.strip()!r} {info.stderr.strip()!r}):\n{logs}"
                )
            time.sleep(0.5)
        yield env
    finally:
        for daemon in daemons:
            daemon.terminate()
        for daemon in daemons:
            daemon.wait(timeout=30)
        if munged is not None:
            munged.terminate()
            munged.wait(timeout=30)


def _history_fixtures():
    """The history store's PostgreSQL fixtures (tests/history/conftest.py), reused here."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "history_store_fixtures", Path(__file__).resolve().parents[1] / "history" / "conftest.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_HISTORY = _history_fixtures()


@pytest.fixture
def postgresql_store_url(request) -> str:
    """A new, empty PostgreSQL database on the history tests' server, as a store URL (skips without one)."""
    return _HISTORY.postgresql_url(request)


if _HISTORY.MISSING is None and not _HISTORY.SERVER_URL:
    postgresql_history_proc = _HISTORY.postgresql_history_proc
