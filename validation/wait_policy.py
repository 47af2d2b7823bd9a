"""What a missing OMP_WAIT_POLICY=PASSIVE costs: one step timed in fresh processes, each wait policy,
with and without busy processes beside them (``validation/contend.py``).

    .venv/bin/python -m validation.wait_policy --busy 1 --calls 40

Prints, per (busy processes, policy), the median and IQR of the calls (ms), the contention evidence
of the window and the load average. A measurement, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from perfsuite.measure.conditions import required_env

from validation.contend import busy_processes, load_average


CODE = r"""
import json, statistics, sys, time
from perfsuite.attention.cases import parse_case_id
from perfsuite.attention.modes import make_step
from perfsuite.measure.contention import Probe
from perfsuite.measure.evidence import prepare_case
from perfsuite.variants import get_variant
prepared = prepare_case(get_variant(sys.argv[1]), parse_case_id(sys.argv[2]), 0)
step = make_step("forward", prepared.fn, prepared.inputs, prepared.grad_output)
for _ in range(5):
    step()
times = []
with Probe() as probe:
    for _ in range(int(sys.argv[3])):
        start = time.perf_counter(); step(); times.append(time.perf_counter() - start)
q = statistics.quantiles(times, n=4)
e = probe.evidence(times)
print(json.dumps({"median_ms": statistics.median(times) * 1e3, "iqr_pct": 100 * (q[2] - q[0]) / statistics.median(times),
                  "wait_fraction": e.wait_fraction, "contended": e.contended}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="naive")
    parser.add_argument("--case", default="b2h8s256d64-fp32-causal-cpu")
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--busy", type=int, default=1)
    args = parser.parse_args()
    rows = [
        "| busy processes | OMP_WAIT_POLICY | median ms | IQR / median | threads waited / wall | contended | load before |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for busy in (0, args.busy):
        with busy_processes(busy):
            for policy in ("unset (libgomp default)", "PASSIVE"):
                env = dict(os.environ, **required_env())
                if policy != "PASSIVE":
                    env.pop("OMP_WAIT_POLICY")
                load = load_average().split()[0]
                out = subprocess.run(
                    [sys.executable, "-c", CODE, args.variant, args.case, str(args.calls)],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
                r = json.loads(out.strip().splitlines()[-1])
                rows.append(
                    f"| {busy} | {policy} | {r['median_ms']:.2f} | {r['iqr_pct']:.0f}% | {r['wait_fraction']:.2f} | "
                    f"{r['contended']} | {load} |"
                )
                print(rows[-1], flush=True)
    print("\n".join(rows))


if __name__ == "__main__":
    main()
