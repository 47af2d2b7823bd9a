"""Probe a risky variant's first calls in a child process, so a crash costs only its own results.

A variant that crashes the process (a segfault or abort inside a compiled kernel) would kill
pytest and every other variant's results with it. Before such a variant runs in the suite's
process, ``probe`` runs the first call of each of its (case, mode) pairs once in a child
Python process (``python -m perfsuite.measure.isolation``): inputs drawn, per-case setup,
one step of the mode (forward, backward or both), synchronized. The child reports each pair
as it starts and ends; when it dies, the pair it was running is reported ``crashed`` with the
signal or exit code and the end of its stderr, and a fresh child continues with the remaining
pairs. Pairs that pass run in the suite's process as usual, so timing and profiling are
unchanged. A crash that only happens later (after many calls, under the profiler) is not
caught here; the suite's results written as they come (``run.json``) say which test was running.

Cost: one child per probed variant, plus one more per crash: Python, torch and perfsuite start-up,
measured at 7 s of CPU time (8-15 s wall on this project's loaded 2-core machine; 45 s for
5 pairs with 2 crashes, so 3 children, in ``tests/measure/test_isolation.py``), and one extra
call per pair (for a compiled variant, one extra compilation per case and grad mode).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable

from perfsuite.measure.call_limit import default_limit_s

# Seconds a probe child may take to start (Python, torch, perfsuite and the variants imported), on top
# of the call time limit of each pair it runs.
PROBE_STARTUP_S = 120.0

STATUSES = ("ok", "unsupported", "error", "crashed", "hung")
_STDERR_TAIL_LINES = 12


@dataclasses.dataclass(frozen=True)
class ProbeOutcome:
    """How the first call of one (case, mode) went in the child.

    ``status``: ``"ok"``; ``"unsupported"`` (torch refused it: the suite skips it in-process);
    ``"error"`` (a Python exception: the suite reports it in-process); ``"crashed"`` (the child
    died); ``"hung"`` (the call ran past its call limit: the child was killed). ``detail``: the
    exception, or for a crash or hang the signal / exit code or the limit, and the last lines of
    the child's stderr.
    """

    case_id: str
    mode: str
    status: str
    detail: str = ""


def _exit_description(returncode: int) -> str:
    """``signal SIGSEGV`` for a negative return code, ``exit code 3`` otherwise."""
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


def _child_command(
    variant: str, specs: Iterable[str], pairs: list[tuple[str, str]], seed: int
) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "perfsuite.measure.isolation",
        "--variant",
        variant,
        "--seed",
        str(seed),
    ]
    for spec in specs:
        command += ["--spec", spec]
    for case_id, mode in pairs:
        command += ["--pair", f"{case_id}:{mode}"]
    return command


def probe(
    variant: str,
    pairs: Iterable[tuple[str, str]],
    seed: int,
    specs: Iterable[str] = (),
    call_limit_s: Callable[[str], float | None] = default_limit_s,
) -> dict[tuple[str, str], ProbeOutcome]:
    """Run the first call of ``variant`` on each ``(case_id, mode)`` pair in child processes.

    ``specs``: the ``--perfsuite-variant`` specs (``module:function``) the child loads, besides
    installed entry points, so it knows the same variants; ``seed``: the suite's. The child
    inherits ``sys.path`` through ``PYTHONPATH``. Returns an outcome for every pair.

    ``call_limit_s(device)``: seconds one call may take on that device (``--perfsuite-call-time-limit``;
    None: no limit). The child's output is read as it comes: it gets ``PROBE_STARTUP_S`` to start
    (and between pairs), and each pair its call limit from the moment it starts; a pair that runs
    past it is reported ``hung`` (the child killed, a fresh one continues with the pairs left), at
    the call limit, not after the child's whole budget. A child that dies is reported ``crashed``.
    """
    remaining = list(dict.fromkeys(pairs))
    outcomes: dict[tuple[str, str], ProbeOutcome] = {}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    specs = list(specs)
    while remaining:
        command = _child_command(variant, specs, remaining, seed)
        run = _ChildRun(command, env, remaining, call_limit_s)
        for pair, outcome in run.outcomes.items():
            outcomes[pair] = outcome
        remaining = [pair for pair in remaining if pair not in outcomes]
        if not remaining:
            break
        tail = "\n".join(run.stderr.strip().splitlines()[-_STDERR_TAIL_LINES:])
        if (
            run.running is None
        ):  # died (or ran past its start-up time) before its first pair, or after the last
            for pair in remaining:
                outcomes[pair] = ProbeOutcome(
                    pair[0],
                    pair[1],
                    "crashed",
                    f"the probe process for {variant} ended ({run.how}) before running it:\n{tail}",
                )
            break
        status = "hung" if run.hung else "crashed"
        outcomes[run.running] = ProbeOutcome(
            run.running[0], run.running[1], status, f"{run.how}; the child's stderr ends:\n{tail}"
        )
        remaining.remove(run.running)
    return outcomes


class _ChildRun:
    """One probe child, its output read line by line with a deadline per pair (see ``probe``)."""

    def __init__(self, command, env, pairs, call_limit_s):
        from perfsuite.attention.cases import parse_case_id

        limits = {pair: call_limit_s(parse_case_id(pair[0]).device) for pair in pairs}
        bounded = all(limits.values())  # a pair without a limit: no deadline anywhere (as asked)
        self.outcomes: dict[tuple[str, str], ProbeOutcome] = {}
        self.running: tuple[str, str] | None = None
        self.hung, self.how = False, ""
        child = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        lines: queue.Queue[str | None] = queue.Queue()
        errors: list[str] = []
        readers = [
            threading.Thread(target=_pump, args=(child.stdout, lines.put), daemon=True),
            threading.Thread(target=lambda: errors.append(child.stderr.read()), daemon=True),
        ]
        for reader in readers:
            reader.start()
        allowed = PROBE_STARTUP_S
        deadline = time.monotonic() + allowed if bounded else None
        while True:
            try:
                line = lines.get(
                    timeout=None if deadline is None else max(deadline - time.monotonic(), 0)
                )
            except queue.Empty:
                child.kill()
                if self.running is not None:
                    self.hung = True
                    self.how = (
                        f"did not return within the call limit of {allowed:g} s (--perfsuite-call-time-limit): "
                        "a hang; the child was killed"
                    )
                else:
                    self.how = f"ran past {allowed:g} s without starting a pair"
                break
            if line is None:
                break
            kind, _, payload = line.rstrip("\n").partition(" ")
            if kind == "perfsuite-start":
                self.running = tuple(json.loads(payload))
                allowed = limits.get(self.running) or PROBE_STARTUP_S
            elif kind == "perfsuite-done":
                record = json.loads(payload)
                pair = (record["case_id"], record["mode"])
                self.outcomes[pair] = ProbeOutcome(
                    pair[0], pair[1], record["status"], record["detail"]
                )
                self.running, allowed = None, PROBE_STARTUP_S
            else:
                continue
            deadline = time.monotonic() + allowed if bounded else None
        returncode = child.wait()
        for reader in readers:
            reader.join(timeout=5)
        self.stderr = "".join(errors)
        if not self.how:
            self.how = _exit_description(returncode)


def _pump(stream, put) -> None:
    """Each line of ``stream`` to ``put``, then None at its end."""
    for line in stream:
        put(line)
    put(None)


def probe_timeout_s(
    pairs: Iterable[tuple[str, str]], call_limit_s: Callable[[str], float | None]
) -> float | None:
    """``PROBE_STARTUP_S`` plus each pair's call limit (by its case's device); None if any has none."""
    from perfsuite.attention.cases import parse_case_id

    limits = [call_limit_s(parse_case_id(case_id).device) for case_id, _ in pairs]
    return None if any(not limit for limit in limits) else PROBE_STARTUP_S + sum(limits)


def _run_pairs(variant_name: str, pairs: list[tuple[str, str]], seed: int) -> None:
    """The child: run each pair's first call, reporting it on stdout as it starts and ends."""
    # imported here: only the isolated child process needs them
    from perfsuite.attention.cases import parse_case_id
    from perfsuite.attention.modes import Mode, make_step
    from perfsuite.measure.children import ChildWatch, end_children
    from perfsuite.measure.refusals import VariantUnsupported
    from perfsuite.measure.evidence import prepare_case, run_once
    from perfsuite.measure.timing import synchronized
    from perfsuite.variants import get_variant

    variant = get_variant(variant_name)
    for case_id, mode in pairs:
        print("perfsuite-start", json.dumps([case_id, mode]), flush=True)
        status, detail = "ok", ""
        try:
            case = parse_case_id(case_id)
            no_backward = variant.backward_unsupported(case.device)
            if mode != Mode.FORWARD and no_backward:
                raise VariantUnsupported(no_backward)
            prepared = prepare_case(variant, case, seed)
            step = make_step(mode, prepared.fn, prepared.inputs, prepared.grad_output)
            # a child the call leaves holds this probe's output pipe: the suite would wait for its
            # end (the in-process run names it; here it is only ended)
            with ChildWatch() as children:
                run_once(variant, case, synchronized(step, case.device))
            end_children(children.left_running())
        except VariantUnsupported as exc:
            status, detail = "unsupported", str(exc)
        except Exception as exc:  # reported, not a crash: the suite reports it in-process
            status, detail = "error", f"{type(exc).__name__}: {exc}"
        print(
            "perfsuite-done",
            json.dumps({"case_id": case_id, "mode": mode, "status": status, "detail": detail}),
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m perfsuite.measure.isolation",
        description="probe one variant's first calls (run by perfsuite, not by hand)",
    )
    parser.add_argument("--variant", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--spec", action="append", default=[])
    parser.add_argument("--pair", action="append", default=[], help="CASE_ID:MODE")
    args = parser.parse_args(argv)
    import warnings

    warnings.simplefilter("ignore")  # the suite's process shows the variant's warnings
    from perfsuite.variants.user import load_entry_point_variants, load_variant_spec

    load_entry_point_variants()
    for spec in args.spec:
        load_variant_spec(spec)
    _run_pairs(args.variant, [tuple(p.rsplit(":", 1)) for p in args.pair], args.seed)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # every pair is reported: a thread a variant left running (not a daemon) must not keep the child
    # alive until the parent's deadline, which would report a finished probe as hung
    os._exit(code)
