"""The fork server: a gate's workers forked from one process that imported torch behave as started ones."""

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from perfsuite.errors import UsageError, WorkerError
from perfsuite.gate.ab import Side, WorkerProcess, ab_method, fork_server, run_ab
from perfsuite.gate.forkserver import WORKER_START_ENV, shadowed
from perfsuite.gate.sequential import SequentialPlan
from perfsuite.gate.verdicts import ContendedPairs, GateSettings

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform != "linux", reason="the fork server runs on Linux only"),
]

SIDE_MODULE = """import torch.nn.functional as F


def attention_{side}(query, key, value, *, mask, scale):
    return F.scaled_dot_product_attention(query, key, value, is_causal=mask.is_causal, scale=scale)
"""


def setup(worker: WorkerProcess, variant: str, specs: list[str]) -> dict:
    request = {
        "variant": variant,
        "case": "b1h2s16d8-fp32-causal-cpu",
        "seed": 0,
        "mode": "forward",
        "specs": specs,
        "slowdown": 0.0,
        "fingerprint": False,
    }
    return worker.ask({"setup": request}, 120, "a set-up")


@pytest.fixture
def server():
    found = fork_server(Side(None), Side(None), None, ["cpu"])
    assert found is not None, "the fork server did not start"
    yield found
    found.close()


def cpu_ticks(pid: int) -> int:
    """User and system clock ticks of process ``pid`` (``/proc/PID/stat`` fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return int(fields[11]) + int(fields[12])


def test_each_forked_worker_imports_its_own_side_s_tree(tmp_path, server):
    """A module in the base's tree (its ``src/``) is the base worker's and not the head's, and the head's
    (a tree without ``src/``) is the head's alone: each child's path is its side's, as a started
    worker's is."""
    base_tree, head_tree = tmp_path / "base", tmp_path / "head"
    (base_tree / "src").mkdir(parents=True)
    head_tree.mkdir()
    (base_tree / "src" / "sidemark.py").write_text(SIDE_MODULE.format(side="base"))
    (head_tree / "sidemark.py").write_text(SIDE_MODULE.format(side="head"))
    base = WorkerProcess(Side(base_tree), None, "base", server)
    head = WorkerProcess(Side(head_tree), None, "head", server)
    try:
        assert setup(base, "attention_base", ["sidemark:attention_base"])["ready"]
        assert setup(head, "attention_head", ["sidemark:attention_head"])["ready"]
        with pytest.raises(WorkerError, match="attention_base"):
            setup(head, "attention_base", ["sidemark:attention_base"])
    finally:
        for worker in (base, head):
            worker.close()


ADDRESS_MODULE = """import torch
import torch.nn.functional as F

with open({path!r}, "a") as found:
    found.write(f"{{torch.empty(1 << 18).data_ptr()}} {{torch.empty(16 << 20).data_ptr()}}\\n")


def attention(query, key, value, *, mask, scale):
    return F.scaled_dot_product_attention(query, key, value, is_causal=mask.is_causal, scale=scale)
"""


def test_forked_siblings_put_what_they_build_at_addresses_of_their_own(tmp_path, server):
    """Children forked alike would put a 1 MiB tensor (on the heap) and a 64 MiB one (a mapping of its
    own) at the same addresses as each other (seen before each drew its start layout); a started
    interpreter draws its own, so each child does too."""
    found = tmp_path / "addresses.txt"
    (tmp_path / "addresses.py").write_text(ADDRESS_MODULE.format(path=str(found)))
    for _ in range(3):
        worker = WorkerProcess(Side(tmp_path), None, "base", server)
        try:
            setup(worker, "attention", ["addresses:attention"])
        finally:
            worker.close()
    rows = [line.split() for line in found.read_text().splitlines()]
    assert len(rows) == 3
    for column in (0, 1):
        addresses = [int(row[column]) for row in rows]
        assert len(set(addresses)) == 3


def test_a_forked_worker_s_command_line_names_the_worker_module(server):
    """``pgrep -f ab_worker`` finds forked workers as it finds started ones (a new user's check for
    leftovers matched nothing while the command line was the server's whole program text)."""
    worker = WorkerProcess(Side(None), None, "base", server)
    try:
        words = Path(f"/proc/{worker.process.pid}/cmdline").read_bytes().split(b"\0")
        assert b"perfsuite.gate.ab_worker" in words and len(b" ".join(words)) < 1000
    finally:
        worker.close()


def test_a_forked_worker_that_crashes_is_named_by_its_signal(server):
    """Its exit status reaches the coordinator through the server (its parent), as a started
    worker's does through ``subprocess``."""
    worker = WorkerProcess(Side(None), None, "head", server)
    assert worker.ask({"ping": True})["pong"]
    os.kill(worker.process.pid, signal.SIGSEGV)
    with pytest.raises(WorkerError, match="crashed: killed by signal SIGSEGV"):
        worker.ask({"ping": True})
    assert worker.process.poll() == -signal.SIGSEGV


def test_the_server_takes_no_cpu_while_its_workers_answer(server):
    """The server waits in select, woken only by a child's end: 400 requests to two workers over about
    a second cost it no clock tick (a polling loop would cost some)."""
    workers = [WorkerProcess(Side(None), None, role, server) for role in ("base", "head")]
    try:
        before = cpu_ticks(server.process.pid)
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            for worker in workers:
                worker.ask({"ping": True})
        assert cpu_ticks(server.process.pid) - before <= 1
    finally:
        for worker in workers:
            worker.close()
    assert all(w.process.poll() == 0 for w in workers)


def test_a_server_that_ended_is_a_worker_error_that_names_the_way_out(server):
    server.process.kill()
    server.process.wait()
    with pytest.raises(WorkerError, match=f"{WORKER_START_ENV}=exec starts each worker on its own"):
        WorkerProcess(Side(None), None, "base", server)


def test_the_server_ends_when_the_coordinator_closes_its_channel(server):
    server.channel.close()
    assert server.process.wait(timeout=30) == 0


def test_a_tree_that_holds_a_module_the_server_imported_starts_its_workers_itself(tmp_path):
    """A side's ``numpy/`` package would shadow the server's numpy: no server (each worker imports its
    own). A ``site/`` folder of built docs (no ``__init__.py``) shadows nothing: it kept this repository's
    own gate from forking."""
    (tmp_path / "numpy").mkdir()
    (tmp_path / "site").mkdir()
    assert shadowed([str(tmp_path)], ["site", "numpy"]) is None
    (tmp_path / "numpy" / "__init__.py").write_text("")
    assert shadowed([str(tmp_path)], ["site", "torch", "numpy"]) == str(tmp_path / "numpy")
    assert shadowed([str(tmp_path)], ["torch"]) is None
    assert fork_server(Side(tmp_path), Side(None), None, ["cpu"]) is None


def test_workers_start_on_their_own_for_cuda_two_interpreters_or_when_asked(monkeypatch):
    assert fork_server(Side(None), Side(None), None, ["cpu", "cuda"]) is None
    assert fork_server(Side(None), Side(None, python="/usr/bin/python3"), None, ["cpu"]) is None
    monkeypatch.setenv(WORKER_START_ENV, "exec")
    assert fork_server(Side(None), Side(None), None, ["cpu"]) is None
    monkeypatch.setenv(WORKER_START_ENV, "spawn")
    with pytest.raises(UsageError, match=f"{WORKER_START_ENV}='spawn': expected one of fork, exec"):
        fork_server(Side(None), Side(None), None, ["cpu"])


@pytest.mark.parametrize("start", ["fork", "exec"])
def test_a_gate_finds_the_same_structure_with_either_start_and_says_which(monkeypatch, start):
    monkeypatch.setenv(WORKER_START_ENV, start)
    plan = SequentialPlan(worker_pairs=2, budget_s=10, rounds=20, blocks=3)
    results, info = run_ab(
        Side(Path("."), "naive_inplace"),
        Side(Path("."), "naive"),
        ["naive"],
        ["b1h2s16d8-fp32-causal-cpu"],
        plan=plan,
    )
    [result] = results
    assert "+1 aten::clone" in result.comparison.structure
    assert set(result.clusters) == {0, 1}
    assert info["worker_start"] == start
    method = ab_method(plan, GateSettings(), ContendedPairs.SHARED, None, info["worker_start"])
    expected = (
        "forked from one process that imported torch" if start == "fork" else "its own interpreter"
    )
    assert expected in method
