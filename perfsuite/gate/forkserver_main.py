"""The fork server's program: imports torch (and its compiler stack) once, then forks a gate's workers.

Run by ``perfsuite.gate.forkserver.ForkServer`` as ``python -c <runpy launcher> <this file>
perfsuite.gate.ab_worker FD`` (never imported: it must not import perfsuite, whose gate worker each child
imports from its own side's tree; the module named is the one each child runs). ``FD`` is a
``SOCK_SEQPACKET`` Unix socket to the coordinator. Messages, one JSON object per packet:

* server -> coordinator, once torch is imported: ``{"modules": [top-level names imported]}`` (a side's
  tree that holds one of them would be shadowed: the coordinator then starts its workers itself);
* coordinator -> server: ``{"cwd", "sys_path", "pythonpath"}`` with two file descriptors (the
  worker's stdin and stdout) -> ``{"started": pid}``: a child in its own session runs
  ``perfsuite.gate.ab_worker`` as ``python -m`` would, from ``cwd`` with ``sys_path`` first;
* server -> coordinator, whenever a child ends: ``{"exited": pid, "code": ...}`` (``subprocess``'s
  return code: negative for a signal). The server waits in ``select`` (woken by ``SIGCHLD``), never by
  polling, so it takes no CPU while a gate times; it ends when the coordinator's socket closes.
"""

import atexit
import json
import mmap
import os
import random
import runpy
import select
import signal
import socket
import sys


def main() -> None:
    channel = socket.socket(fileno=int(sys.argv[-1]))
    del sys.path[0]  # ``-c``'s current folder: nothing there may shadow what the workers import
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the coordinator's to handle
    # what every worker would import on its own: torch (about 2.5 s of CPU), and its compiler stack
    # (torch._dynamo, about 2.2 s) for a variant that compiles (flex_attention's eager call does)
    import torch
    import torch._dynamo  # noqa: F401

    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    modules = sorted({name.partition(".")[0] for name in sys.modules})
    channel.send(json.dumps({"modules": modules}).encode())
    while True:
        ready, _, _ = select.select([channel, wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
            reap(channel)
        if channel in ready:
            message, fds, _, _ = socket.recv_fds(channel, 1 << 16, 2)
            if not message:
                return
            pid = os.fork()
            if pid == 0:
                run_worker(json.loads(message), fds, (channel.fileno(), wake_r, wake_w))
            for fd in fds:
                os.close(fd)
            channel.send(json.dumps({"started": pid}).encode())


def reap(channel: socket.socket) -> None:
    """Report every child that ended since the last call."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        code = os.waitstatus_to_exitcode(status)
        channel.send(json.dumps({"exited": pid, "code": code}).encode())


def draw_layout() -> tuple:
    """Where the child's own allocations will land, drawn at random and held for its life: forked
    children are copies, so each would put what it builds at the same addresses as its siblings, where a
    started interpreter draws its own (ASLR: a page-granular shift of its heap and of its mappings). So
    does this: a never-touched anonymous mapping of 1-1023 pages (shifts later mappings: a tensor of 32 MiB
    or more, a library a variant loads) and a buffer of 1-255 pages on the malloc heap (shifts what the
    heap holds: the score matrices of these cases). Whole pages, as ASLR's, so a forked worker's layout varies
    as a started one's does; a draw within a page too (tried first) would also move buffers' offsets within a
    page, which started workers keep."""
    rng = random.Random(os.urandom(16))
    mapping = mmap.mmap(-1, rng.randrange(1, 1024) * mmap.PAGESIZE)
    return mapping, bytearray(rng.randrange(1, 256) * mmap.PAGESIZE)


def run_worker(request: dict, fds: list, server_fds: tuple) -> None:
    """In the child: become the worker the coordinator would have started (never returns)."""
    code = 1
    try:
        layout = draw_layout()  # noqa: F841  held until the child ends
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()  # its own process group: the coordinator ends it and what it starts together
        os.dup2(fds[0], 0)
        os.dup2(fds[1], 1)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        for fd in (*fds, *server_fds, devnull):
            os.close(fd)
        sys.stdin = sys.__stdin__ = open(0, encoding="utf-8", closefd=False)
        sys.stdout = sys.__stdout__ = open(1, "w", encoding="utf-8", closefd=False)
        sys.stderr = sys.__stderr__ = open(2, "w", encoding="utf-8", closefd=False)
        os.chdir(request["cwd"])
        os.environ["PYTHONPATH"] = request["pythonpath"]
        sys.path[:] = [*request["sys_path"], *sys.path]
        runpy.run_module(sys.argv[-2], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


if __name__ == "__main__":
    main()
