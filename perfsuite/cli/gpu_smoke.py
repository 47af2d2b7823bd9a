"""``perfsuite verify --smoke``: the fail-fast first step of ``scripts/gpu_suite.sh``.

In well under a minute it checks what every later GPU check depends on, on the post's case
(``[8, 16, 1024, 64]`` bf16, causal):

- the device is visible to torch (name, capability);
- each pinned SDPA backend (``sdpa_math``, ``sdpa_flash``, ``sdpa_efficient``, ``sdpa_cudnn``) runs one
  forward, and each fused one ran its own kernel family and no unfused matmul/softmax, ``sdpa_flash``
  torch's built-in FA2 (``perfsuite.trace.kernel_families.pinned_backend_failure``);
- one profiled ``naive`` forward shows the score copy of its out-of-place ``masked_fill`` on the
  device lane (a ``Memcpy DtoD`` or copy kernel of ``[8, 16, 1024, 1024]``), and ``naive_inplace``
  shows none.

On ``--device cpu`` the same steps run on the CPU lane (the fused backends do not exist there and are
reported as skipped), which is how the smoke step itself is tested without a GPU.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import torch

from perfsuite.storage import path_inside
from perfsuite.attention.cases import parse_case_id
from perfsuite.attention.inputs import make_inputs
from perfsuite.measure.profiling import profile_steps
from perfsuite.trace.kernel_families import pinned_backend_failure
from perfsuite.variants import get_variant
from perfsuite.variants.sdpa import PINNED_BACKENDS

POST_CASE = "b8h16s1024d64-bf16-causal-{device}"
CPU_CASE = "b2h4s128d32-bf16-causal-cpu"  # the CPU lane: the same steps, sized for a CPU


@dataclasses.dataclass(frozen=True)
class SmokeCheck:
    """One smoke check: ``outcome`` is ``"pass"``, ``"FAIL"`` or ``"skip"``; ``detail`` says what was seen."""

    name: str
    outcome: str
    detail: str


def _profile(variant_name: str, case_id: str, scratch: Path):
    """The first active window's summary of one profiled forward of ``variant_name`` on ``case_id``."""
    case = parse_case_id(case_id)
    inputs = make_inputs(case, seed=0)
    fn = get_variant(variant_name).for_case(inputs)
    with torch.no_grad():
        windows = profile_steps(
            lambda: fn(inputs.query, inputs.key, inputs.value, **inputs.keywords()),
            case.device,
            path_inside(scratch, f"{variant_name}.json.gz"),
        )
    return case, windows[0]


def _kernel_list(kernels: dict[str, int], limit: int = 4) -> str:
    names = sorted(kernels, key=lambda n: -kernels[n])[:limit]
    return ", ".join(f"{n[:90]} x{kernels[n]}" for n in names) or "no kernels"


def device_check(device: str) -> SmokeCheck:
    """Is ``device`` usable by torch: for CUDA, the device name and compute capability."""
    if device == "cpu":
        return SmokeCheck("device visible", "pass", f"cpu, torch {torch.__version__}")
    if not torch.cuda.is_available():
        return SmokeCheck("device visible", "FAIL", "torch.cuda.is_available() is False")
    major, minor = torch.cuda.get_device_capability()
    return SmokeCheck(
        "device visible",
        "pass",
        f"{torch.cuda.get_device_name()} (sm_{major}{minor}), torch {torch.__version__}",
    )


def backend_check(variant_name: str, case_id: str, scratch: Path) -> SmokeCheck:
    """One forward of a pinned SDPA backend; fused backends must run their own kernel family only."""
    backend = PINNED_BACKENDS[variant_name]
    device = parse_case_id(case_id).device
    if device == "cpu" and backend != "MATH":
        return SmokeCheck(variant_name, "skip", f"SDPBackend.{backend} has no CPU kernel")
    try:
        _, window = _profile(variant_name, case_id, scratch)
    except RuntimeError as exc:  # torch: "No available kernel", with its reasons as warnings
        return SmokeCheck(
            variant_name, "FAIL", f"SDPBackend.{backend} did not run: {str(exc).splitlines()[0]}"
        )
    if backend == "MATH" or device == "cpu":
        return SmokeCheck(
            variant_name,
            "pass",
            f"ran: {_kernel_list(window.kernels) if window.kernels else 'cpu ops'}",
        )
    rocm = getattr(torch.version, "hip", None) is not None
    problem = pinned_backend_failure(
        window.kernels, backend, get_variant(variant_name).flash_impl, rocm=rocm
    )
    return SmokeCheck(
        variant_name, "FAIL" if problem else "pass", problem or _kernel_list(window.kernels)
    )


def score_copy_check(
    variant_name: str, case_id: str, scratch: Path, expect_copy: bool
) -> SmokeCheck:
    """Does one ``variant_name`` forward copy the ``[B, H, S_q, S_kv]`` scores on the device lane (or
    the CPU lane on CPU), as ``expect_copy`` says it must or must not."""
    case, window = _profile(variant_name, case_id, scratch)
    lane = "cpu" if case.device == "cpu" else "device"
    scores = (case.batch, case.num_heads, case.seq_len_q, case.seq_len_kv)
    copies = window.copies_with_shape(scores, lane)
    seen = "; ".join(f"{c.kind} {c.name[:80]}" for c in copies) or "no score-sized copy"
    shape = "x".join(map(str, scores))
    ok = bool(copies) == expect_copy
    want = "a copy" if expect_copy else "no copy"
    return SmokeCheck(
        f"{variant_name} score copy",
        "pass" if ok else "FAIL",
        f"{lane} lane, [{shape}]: expected {want}; saw {seen}",
    )


def run_smoke(device: str, scratch: Path | None = None) -> list[SmokeCheck]:
    """Every smoke check on ``device`` (``"cuda"`` or ``"cpu"``), in order; stops after a failed
    device check (nothing else can run). ``scratch`` keeps the traces (a temporary folder if None)."""
    first = device_check(device)
    if first.outcome == "FAIL":
        return [first]
    case_id = POST_CASE.format(device=device) if device != "cpu" else CPU_CASE
    with tempfile.TemporaryDirectory() as tmp:
        folder = scratch or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        checks = [first] + [backend_check(name, case_id, folder) for name in PINNED_BACKENDS]
        checks.append(score_copy_check("naive", case_id, folder, expect_copy=True))
        checks.append(score_copy_check("naive_inplace", case_id, folder, expect_copy=False))
    return checks


def smoke_report(checks: list[SmokeCheck]) -> str:
    """The smoke checks as a Markdown section (a table, failures first in the result line)."""
    failed = [c.name for c in checks if c.outcome == "FAIL"]
    verdict = "PASS" if not failed else f"FAIL: {', '.join(failed)}"
    lines = [
        "## Smoke step",
        "",
        f"**Smoke: {verdict}**",
        "",
        "| check | result | detail |",
        "| --- | --- | --- |",
    ]
    lines += [f"| {c.name} | {c.outcome} | {c.detail.replace('|', '/')} |" for c in checks]
    return "\n".join(lines) + "\n"
