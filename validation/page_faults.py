"""Minor page faults and wall time per forward call, per variant and case, in this process.

Why: glibc serves every allocation of at least ``M_MMAP_THRESHOLD`` with a fresh ``mmap`` that is
page-faulted on first touch and unmapped on ``free``; the threshold cannot be set above 32 MiB on
64-bit glibc (``HEAP_MAX_SIZE / 2``, malloc/arena.c), so a score matrix of 32 MiB or more
(``[1, 8, 1024, 1024]`` fp32) is faulted in again on every call whatever the process conditions say.
``MALLOC_MMAP_MAX_=0`` (mallopt(3) ``M_MMAP_MAX``) keeps such blocks on the heap instead.

    eval "$(.venv/bin/python -m perfsuite.measure.conditions)"
    .venv/bin/python -m validation.page_faults                       # glibc's default: large blocks mmap'd
    MALLOC_MMAP_MAX_=0 .venv/bin/python -m validation.page_faults    # every block from the heap

Faults come from ``getrusage(RUSAGE_SELF).ru_minflt`` (all threads), over ``--calls`` calls after
3 warm-up calls, of the forward the suite profiles (``perfsuite.measure.evidence.bind``: under
``torch.no_grad()``, the variant prepared for the case). ``--blocks N`` also prints N block medians of ``--calls``
calls each and their spread (max / min - 1): the drift of one step within one process.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import torch

from perfsuite.attention.cases import parse_case_id
from perfsuite.attention.inputs import make_inputs
from perfsuite.measure.evidence import bind
from perfsuite.variants import get_variant


def faults_and_ms(forward, calls: int) -> tuple[float, float]:
    """Minor faults and milliseconds per call of ``forward``, after 3 warm-up calls."""
    for _ in range(3):
        forward()
    faults, start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
    for _ in range(calls):
        forward()
    seconds = time.perf_counter() - start
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    return faults / calls, seconds / calls * 1e3


def block_medians_ms(forward, blocks: int, calls: int) -> list[float]:
    """``blocks`` medians of ``calls`` single-call times of ``forward``, in ms."""
    medians = []
    for _ in range(blocks):
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            forward()
            times.append(time.perf_counter() - start)
        medians.append(statistics.median(times) * 1e3)
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cases", default="b2h8s256d64-fp32-causal-cpu b1h8s1024d64-fp32-causal-cpu"
    )
    parser.add_argument("--variants", default="naive naive_inplace sdpa_math sdpa")
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument(
        "--blocks", type=int, default=0, help="also print this many block medians and their spread"
    )
    args = parser.parse_args()
    for case_id in args.cases.split():
        case = parse_case_id(case_id)
        inputs = make_inputs(case, 0)
        score_mib = torch.Size(case.score_shape).numel() * inputs.query.element_size() / 2**20
        for name in args.variants.split():
            forward = bind(
                get_variant(name), inputs
            )  # prepared for the case, under torch.no_grad()
            faults, ms = faults_and_ms(forward, args.calls)
            print(
                f"{case_id} (scores {score_mib:g} MiB) {name:14s} {faults:8.0f} minor faults/call {ms:8.2f} ms/call"
            )
            if args.blocks:
                medians = block_medians_ms(forward, args.blocks, args.calls)
                print(
                    f"    block medians ms: {' '.join(f'{m:.1f}' for m in medians)}; "
                    f"spread {max(medians) / min(medians) - 1:.0%}"
                )


if __name__ == "__main__":
    main()
