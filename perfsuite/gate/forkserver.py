"""One process that imports torch, from which a gate forks every worker of both sides.

A gate of 12 worker pairs started 24 interpreters, each importing torch: about 2-2.5 s of CPU each, 20-30 s
of a 2-CPU machine before any timing. When both sides run the same interpreter, ``ForkServer`` imports
torch once (``forkserver_main``) and forks each worker from it: the child then imports its own side's
perfsuite and code, from its own tree and folder, as ``python -m perfsuite.gate.ab_worker`` would.

Both sides fork from the same server, so a base and a head worker share the library layout that one
import drew (identical code at identical addresses: it cancels in their ratio, where separately started
workers drew a layout each). Forked children are copies, so each first draws where its own allocations
will land (``forkserver_main.draw_layout``: a random-size mapping, malloc buffer and set of small
objects, held for its life), as a started interpreter draws its own; its inputs are re-placed every few
block pairs as before (``perfsuite.measure.placement``). They share the server's string-hash seed. Workers are
started the old way (``subprocess``) when the sides' interpreters differ (a torch upgrade: each side's
own import), when a side's tree holds a module the server imported (it would shadow it), off Linux, or
with ``PERFSUITE_AB_WORKER_START=exec``.
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from perfsuite.errors import WorkerError

# ``fork`` (default where it can) or ``exec`` (each worker its own interpreter).
WORKER_START_ENV = "PERFSUITE_AB_WORKER_START"
WORKER_STARTS = ("fork", "exec")
SERVER_PROGRAM = Path(__file__).with_name("forkserver_main.py")
# Runs the server's file without importing perfsuite; the worker module is named on the command line so
# that ``pgrep -f ab_worker`` finds the server and every worker forked from it (they share its command line).
LAUNCHER = "import runpy, sys; runpy.run_path(sys.argv[1], run_name='__main__')"
WORKER_MODULE = "perfsuite.gate.ab_worker"
# Seconds a fork server may take to import torch and say so (a first import from a cold disk).
SERVER_START_LIMIT_S = 300.0


def requested_start(environ: Mapping[str, str] = os.environ) -> str:
    """The worker start ``WORKER_START_ENV`` asks for (default ``fork``); ``ValueError`` naming
    the bad value and the allowed ones."""
    start = environ.get(WORKER_START_ENV, "fork")
    if start not in WORKER_STARTS:
        raise ValueError(
            f"{WORKER_START_ENV}={start!r}: expected one of {', '.join(WORKER_STARTS)}"
        )
    return start


def can_fork() -> bool:
    """Whether this platform has what the server needs (fork, ``SOCK_SEQPACKET``, passing descriptors)."""
    return sys.platform == "linux" and hasattr(socket, "send_fds")


def shadowed(paths: list[str], modules: list[str]) -> str | None:
    """The first of ``modules`` (top-level names) that a folder in ``paths`` holds as a package (with
    its ``__init__.py``) or a module file, which a worker started on its own would import from there;
    None when none does. A folder without ``__init__.py`` (a ``site/`` of built docs) shadows nothing:
    Python imports the regular module found further along the path."""
    for folder in map(Path, paths):
        for name in modules:
            if (folder / name / "__init__.py").is_file() or (folder / f"{name}.py").is_file():
                return str(folder / name)
    return None


class ForkServer:
    """A running ``forkserver_main`` for ``python`` with ``env`` (the workers' environment without a
    side's ``PYTHONPATH``): ``start`` forks a worker from it. ``RuntimeError`` when it cannot start."""

    def __init__(self, python: str, env: Mapping[str, str]):
        self.channel, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.process = subprocess.Popen(
            [python, "-c", LAUNCHER, str(SERVER_PROGRAM), WORKER_MODULE, str(theirs.fileno())],
            env=dict(env),
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        theirs.close()
        self.exits: dict[int, int] = {}
        self._gone = False
        hello = self._read(SERVER_START_LIMIT_S)
        if hello is None or "modules" not in hello:
            self.close()
            raise RuntimeError(f"the fork server ({python}) did not start: {hello!r}")
        self.modules: list[str] = hello["modules"]

    def start(self, cwd: str, sys_path: list[str], pythonpath: str) -> ForkedProcess:
        """Fork a worker that runs from ``cwd`` with ``sys_path`` first and ``PYTHONPATH`` set to
        ``pythonpath``; its stdin and stdout are pipes to this process. ``WorkerError`` when the server
        has ended."""
        to_child, from_child = os.pipe(), os.pipe()
        request = {"cwd": cwd, "sys_path": sys_path, "pythonpath": pythonpath}
        try:
            socket.send_fds(
                self.channel, [json.dumps(request).encode()], [to_child[0], from_child[1]]
            )
        except OSError:
            self._gone = True
        os.close(to_child[0])
        os.close(from_child[1])
        while True:
            message = None if self._gone else self._read(None)
            if message is None:
                os.close(to_child[1])
                os.close(from_child[0])
                raise WorkerError(
                    "the fork server ended before starting a worker (it imports torch once for every "
                    f"worker; {WORKER_START_ENV}=exec starts each worker on its own)"
                )
            if "started" in message:
                return ForkedProcess(self, message["started"], to_child[1], from_child[0])

    def returncode(self, pid: int, timeout_s: float | None) -> int | None:
        """``pid``'s exit code once it ended, waiting up to ``timeout_s`` (None: no limit); None
        while it runs. A server that ended can report nothing more: its children count as killed."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while pid not in self.exits:
            if self._gone:
                return self.exits.setdefault(pid, -9)
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if self._read(left) is None and not self._gone:
                return None
        return self.exits[pid]

    def _read(self, timeout_s: float | None) -> dict | None:
        """The next message (exits recorded on the way), or None after ``timeout_s`` or at the end."""
        ready, _, _ = select.select([self.channel], [], [], timeout_s)
        if not ready:
            return None
        data = self.channel.recv(1 << 16)
        if not data:
            self._gone = True
            return None
        message = json.loads(data)
        if "exited" in message:
            self.exits[message["exited"]] = message["code"]
        return message

    def close(self) -> None:
        """End the server (its workers end on their own: their input closes)."""
        self.channel.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class ForkedProcess:
    """A forked worker, as much of ``subprocess.Popen`` as the gate uses: ``pid``, ``stdin`` and
    ``stdout`` (text pipes), ``poll`` and ``wait``; its exit code comes from the server, its parent."""

    def __init__(self, server: ForkServer, pid: int, stdin_fd: int, stdout_fd: int):
        self.server, self.pid = server, pid
        self.stdin = open(stdin_fd, "w", encoding="utf-8")
        self.stdout = open(stdout_fd, encoding="utf-8")

    def poll(self) -> int | None:
        return self.server.returncode(self.pid, 0)

    def wait(self, timeout: float | None = None) -> int:
        code = self.server.returncode(self.pid, timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout or 0)
        return code
