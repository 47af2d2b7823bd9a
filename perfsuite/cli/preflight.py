"""``perfsuite verify --preflight``: each finding the CPU cannot prove, checked on the GPU in about
a minute, before anything else runs there (``scripts/gpu_suite.sh`` runs it first).

Every check is one small call on the device with the code the suite uses, and reports ``pass``,
``FAIL`` (with the error) or ``skip`` (with the reason the variant gave):

- ``kineto_records``: one profiled matmul read through ``TorchCuda.trace_kernels`` (Kineto events
  with or without ``activity_type``) gives its kernel;
- ``failed_capture_released``: a step that synchronizes fails its CUDA-graph capture with its own
  cause, after which ``torch.cuda.empty_cache()`` and a later capture work;
- ``backward_capture``: the ``backward`` mode's step, first run on the default stream, is captured
  and its replay's gradients equal the eager ones;
- ``unrolled_graph``: ``DeviceSampler`` sizes and replays a graph of several steps;
- ``sdpa_fp8_gqa``, ``varlen_attn_gqa``, ``flex_paged_decode``: one call of each on a grouped-query
  case (4 query heads per key/value head), compared with the plain computation where one exists;
- ``nvml_throttle_counters``: NVML's cumulative throttle counters can be read.

One JSON object is written (``RESULTS/preflight.json``, and printed): torch's version, the device,
and the checks. Exit codes: 0 every check passed or skipped; 1 a check failed; 3 no CUDA device
(``torch.cuda.is_available()`` is False: nothing was checked, the JSON says so).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path

from perfsuite.storage import write_text_atomic

PREFLIGHT_FILE = "preflight.json"
NO_GPU_EXIT = 3
GQA_CASES = {
    "sdpa_fp8": "b2h8kv2s256d64-bf16-causal-fp8-cuda",
    "varlen_attn": "b4h8kv2s256d64-bf16-causal_br-packed-uniform-cuda",
    "flex_paged_decode": "b4h8kv2q1k1024d64-bf16-causal_br-paged16-uniform-cuda",
}
# the plain computation each is compared with (same inputs), where there is one
PLAIN = {"sdpa_fp8": "fp8_dequant_sdpa", "varlen_attn": "varlen_padded_sdpa"}
# largest |difference| allowed from the plain computation: two bf16 attention kernels; FP8 quantizes
# the probabilities as well
TOLERANCE = {"varlen_attn": 2e-2, "sdpa_fp8": 1e-1}


@dataclasses.dataclass(frozen=True)
class PreflightCheck:
    """One preflight check: ``outcome`` is ``"pass"``, ``"FAIL"`` or ``"skip"``."""

    name: str
    outcome: str
    detail: str
    seconds: float


def run_check(name: str, check: Callable[[], str]) -> PreflightCheck:
    """Run ``check`` (returns what it saw); ``CaseUnsupported`` is a skip with its reason, any
    other exception a failure naming its type and first line."""
    from perfsuite.variants.unsupported import CaseUnsupported

    began = time.perf_counter()
    try:
        outcome, detail = "pass", check()
    except CaseUnsupported as exc:
        outcome, detail = "skip", str(exc)
    except Exception as exc:  # every failure is reported, the next check still runs
        outcome, detail = "FAIL", f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
    return PreflightCheck(name, outcome, detail, round(time.perf_counter() - began, 3))


def check_kineto_records() -> str:
    import torch

    from perfsuite.measure.device_api import TorchCuda

    a = torch.randn(512, 512, device="cuda")
    records = TorchCuda().trace_kernels(lambda: a @ a)
    if not records:
        raise AssertionError("the profiled matmul gave no device records")
    has = hasattr(torch._C._autograd._KinetoEvent, "activity_type")
    return f"{len(records)} record(s), first {records[0].name[:80]!r}; activity_type: {has}"


def check_failed_capture_released() -> str:
    import torch

    from perfsuite.measure.device_api import TorchCuda, capture_step

    api = TorchCuda()
    a = torch.randn(256, 256, device="cuda")

    def syncing() -> None:
        (a @ a).sum().item()  # a host read: not allowed while capturing

    failed = capture_step(api, syncing)
    if failed.replayed:
        raise AssertionError("a step that synchronizes was captured")
    torch.cuda.empty_cache()  # fails "captures_underway.empty()" when the allocator was left capturing
    later = capture_step(api, lambda: a @ a)
    if not later.replayed:
        raise AssertionError(f"the next capture failed: {later.failure}")
    later.step()
    torch.cuda.synchronize()
    return f"the failure named: {failed.failure}; empty_cache and a later capture worked"


def check_backward_capture() -> str:
    import torch

    from perfsuite.attention.cases import parse_case_id
    from perfsuite.attention.inputs import make_grad_output, make_inputs
    from perfsuite.attention.modes import make_step
    from perfsuite.measure.device_api import TorchCuda, capture_step
    from perfsuite.variants import get_variant

    case = parse_case_id("b2h4kv2s128d64-bf16-causal-cuda")
    inputs, grad_output = make_inputs(case, 0), make_grad_output(case, 0)
    step = make_step("backward", get_variant("sdpa").for_case(inputs), inputs, grad_output)
    eager = step()  # the forward stored on the default stream, as the suite's checks do
    kept: dict[str, object] = {}

    def keeping() -> (
        None
    ):  # the captured call's gradients: the graph's outputs, rewritten per replay
        kept["gradients"] = step().gradients

    captured = capture_step(TorchCuda(), keeping)
    if not captured.replayed:
        raise AssertionError(f"the backward step was not captured: {captured.failure}")
    for gradient in kept["gradients"]:
        gradient.zero_()
    captured.step()
    torch.cuda.synchronize()
    for got, expected in zip(kept["gradients"], eager.gradients, strict=True):
        torch.testing.assert_close(got, expected)
    return "captured on the warm-ups' stream; the replay's gradients equal the eager ones"


def check_unrolled_graph() -> str:
    import torch

    from perfsuite.measure.device_timing import DeviceSampler

    a = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
    sampler = DeviceSampler(lambda: a @ a)
    samples = sampler.samples(5)
    if not sampler.cuda_graph.startswith("replayed") or not all(s > 0 for s in samples):
        raise AssertionError(f"{sampler.cuda_graph}; samples {samples}")
    return f"{sampler.cuda_graph}; median {sorted(samples)[2] * 1e6:.2f} us a step"


def check_variant(name: str) -> Callable[[], str]:
    def check() -> str:
        import torch

        from perfsuite.attention.cases import parse_case_id
        from perfsuite.attention.inputs import make_inputs
        from perfsuite.variants import get_variant

        inputs = make_inputs(parse_case_id(GQA_CASES[name]), 0)
        with torch.no_grad():
            out = get_variant(name).for_case(inputs)(
                inputs.query, inputs.key, inputs.value, **inputs.keywords()
            )
            torch.cuda.synchronize()
            if name not in PLAIN:
                return f"ran: output {tuple(out.shape)}"
            plain = get_variant(PLAIN[name]).for_case(inputs)(
                inputs.query, inputs.key, inputs.value, **inputs.keywords()
            )
        error = (out.float() - plain.float()).abs().max().item()
        if not error <= TOLERANCE[name]:
            raise AssertionError(f"max |{name} - {PLAIN[name]}| = {error:.3g} > {TOLERANCE[name]}")
        return f"output {tuple(out.shape)}, max |difference| from {PLAIN[name]} {error:.3g}"

    return check


def check_nvml_counters() -> str:
    from perfsuite.measure.gpu_state import read_throttle_counters

    counters = read_throttle_counters()
    if counters is None:
        raise AssertionError("NVML's throttle counters could not be read (nvidia-ml-py installed?)")
    return ", ".join(f"{k} {v / 1e9:.3f} s" for k, v in counters.items()) or "no counters reported"


CHECKS: dict[str, Callable[[], str]] = {
    "kineto_records": check_kineto_records,
    "failed_capture_released": check_failed_capture_released,
    "backward_capture": check_backward_capture,
    "unrolled_graph": check_unrolled_graph,
    "sdpa_fp8_gqa": check_variant("sdpa_fp8"),
    "varlen_attn_gqa": check_variant("varlen_attn"),
    "flex_paged_decode": check_variant("flex_paged_decode"),
    "nvml_throttle_counters": check_nvml_counters,
}


def run_preflight(results_dir: Path) -> int:
    """Run ``CHECKS`` on the CUDA device, write ``RESULTS/preflight.json`` and print it; returns
    the exit code (0 passed or skipped, 1 a failure, ``NO_GPU_EXIT`` without a CUDA device)."""
    import torch

    report: dict[str, object] = {"torch": torch.__version__, "cuda": torch.version.cuda}
    if not torch.cuda.is_available():
        report |= {"device": None, "outcome": "NO GPU", "checks": []}
        code = NO_GPU_EXIT
    else:
        checks = [run_check(name, check) for name, check in CHECKS.items()]
        failed = any(c.outcome == "FAIL" for c in checks)
        report |= {
            "device": torch.cuda.get_device_name(),
            "outcome": "FAIL" if failed else "PASS",
            "checks": [dataclasses.asdict(c) for c in checks],
        }
        code = 1 if failed else 0
    text = json.dumps(report, indent=1)
    results_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(results_dir / PREFLIGHT_FILE, text + "\n")
    print(text)
    if code == NO_GPU_EXIT:
        print(
            f"perfsuite preflight: NO GPU (torch {torch.__version__}, torch.version.cuda="
            f"{torch.version.cuda}): nothing checked; exit {NO_GPU_EXIT}"
        )
    return code
