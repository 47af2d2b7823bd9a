"""A/B worker: times one implementation on request, in its own process and source tree.

Started by ``perfsuite.gate.ab`` as ``python -m perfsuite.gate.ab_worker`` with ``PYTHONPATH`` set to a
source tree, so it imports that tree's perfsuite and variants. It reads one JSON request
per line on stdin and answers one JSON line on stdout:

* ``{"setup": {"variant", "case", "seed", "slowdown"}}`` -> ``{"fingerprint": ...}`` or
  ``{"unsupported": reason}``. ``slowdown`` (0.1 = 10%) adds busy CPU work after each
  forward, lasting that fraction of the forward's median measured at setup (calibration of
  the gate: a real slowdown, not a sleep);
* ``{"time": rounds}`` -> ``{"times": [seconds, ...]}``, one synchronized forward per round;
* ``{"info": true}`` -> torch version and device names; ``{"quit": true}`` ends the worker.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class Worker:
    def __init__(self):
        self.forward = None

    def setup(self, request: dict) -> dict:
        from perfsuite.attention.cases import parse_case_id
        from perfsuite.measure.evidence import VariantUnsupported, bind, run_once
        from perfsuite.trace.structure import fingerprint
        from perfsuite.attention.inputs import make_inputs
        from perfsuite.measure.profiling import profile_steps
        from perfsuite.measure.timing import synchronized
        from perfsuite.variants import get_variant

        from perfsuite.measure.evidence import device_unavailable_reason

        case = parse_case_id(request["case"])
        variant = get_variant(request["variant"])
        if device_unavailable_reason(case.device):
            return {"unsupported": device_unavailable_reason(case.device)}
        forward = synchronized(bind(variant, make_inputs(case, request["seed"])), case.device)
        try:
            run_once(variant, case, forward)
        except VariantUnsupported as exc:
            return {"unsupported": str(exc)}
        with tempfile.TemporaryDirectory() as scratch:
            summary = profile_steps(forward, case.device, Path(scratch) / "t.json.gz")[0]
        extra_s = request.get("slowdown", 0.0) * statistics.median(self._times(forward, 7))
        self.forward = forward if not extra_s else (lambda: (forward(), _spin(extra_s)))
        self._times(self.forward, 5)  # warm-up
        return {"fingerprint": fingerprint(summary, case.device)}

    @staticmethod
    def _times(forward, rounds: int) -> list[float]:
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            forward()
            times.append(time.perf_counter() - start)
        return times

    def handle(self, request: dict) -> dict:
        if "setup" in request:
            return self.setup(request["setup"])
        if "time" in request:
            return {"times": self._times(self.forward, int(request["time"]))}
        if "info" in request:
            from perfsuite.measure.machine import torch_machine_info

            return torch_machine_info(request["info"])
        raise ValueError(f"unknown request {request!r}")


def main() -> None:
    replies = sys.stdout
    sys.stdout = sys.stderr  # nothing but replies on the reply channel
    worker = Worker()
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("quit"):
            break
        try:
            reply = worker.handle(request)
        except Exception as exc:  # reported to the coordinator, which fails with it
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


if __name__ == "__main__":
    main()
