"""Modes a variant is checked and timed in: forward, backward, forward+backward.

Each mode is a no-argument *step* the suite checks, profiles and times:

* ``forward``: one forward under ``torch.no_grad()`` (no graph, nothing saved for backward);
* ``backward``: ``torch.autograd.grad`` of one stored forward, ``retain_graph=True`` so the
  same graph is differentiated on every call; the forward runs once, at the first (untimed) call;
* ``forward_backward``: a forward with autograd on, then ``torch.autograd.grad``.

Gradients are returned, never accumulated into ``.grad``, so every call does the same work.
Replaying one graph needs AOTAutograd's donated buffers off (see ``allow_graph_replay``).
Work per mode is in ``perfsuite.attention.cost_model``.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable

import torch

from perfsuite.attention.inputs import AttentionInputs
from perfsuite.attention.contract import VariantFn


class Mode(enum.StrEnum):
    """A step the suite checks and times (see the module docstring); stored as its value."""

    FORWARD = "forward"
    BACKWARD = "backward"
    FORWARD_BACKWARD = "forward_backward"


MODES = tuple(Mode)
GRADIENT_MODES = (Mode.BACKWARD, Mode.FORWARD_BACKWARD)


def parse_mode(text: str) -> Mode:
    """Validate a mode name; ``ValueError`` names the value and the allowed ones."""
    name = text.strip().lower()
    if name not in MODES:
        raise ValueError(
            f"mode {text!r} is not supported; allowed: {', '.join(MODES)} (or 'all' alone)"
        )
    return Mode(name)


@dataclasses.dataclass(frozen=True)
class StepResult:
    """One call of a step: the attention output ``[B, H, Sq, D]`` (a layout case's: packed
    ``[total_q, H, Dv]``) and, in gradient modes, ``(grad_query, grad_key, grad_value)`` shaped like
    query, key and value (else None)."""

    output: torch.Tensor
    gradients: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None


Step = Callable[[], StepResult]


def _leaves(inputs: AttentionInputs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Query, key and value as fresh leaves that require grad (strides kept)."""
    return tuple(t.detach().requires_grad_(True) for t in (inputs.query, inputs.key, inputs.value))


def allow_graph_replay() -> None:
    """Turn off AOTAutograd's donated buffers (``torch._functorch.config.donated_buffer``), process-wide.

    A compiled backward with donated buffers frees saved tensors as it runs, so torch refuses
    ``retain_graph=True`` on it (``RuntimeError: ... compiled with non-empty donated buffers``), and
    the ``backward`` mode replays one graph. It is process-wide because the graph of a case is compiled
    once, at its first call in any gradient mode, by perfsuite or by the user's own ``torch.compile``.
    Cost: a compiled backward keeps its saved tensors until it ends, as eager autograd does.
    """
    from torch._functorch import config as functorch_config

    functorch_config.donated_buffer = False


def make_step(mode: str, fn: VariantFn, inputs: AttentionInputs, grad_output: torch.Tensor) -> Step:
    """The step of ``mode`` for ``fn`` on ``inputs``; ``grad_output``, shaped as the output
    (``[B, H, Sq, D]``; packed ``[total_q, H, Dv]``), seeds backward.

    Raises ``ValueError`` for an unknown mode.
    """
    parse_mode(mode)
    call = lambda q, k, v: fn(q, k, v, **inputs.keywords())
    if mode == Mode.FORWARD:

        def forward() -> StepResult:
            with torch.no_grad():
                return StepResult(call(inputs.query, inputs.key, inputs.value), None)

        return forward
    allow_graph_replay()
    leaves = _leaves(inputs)
    if mode == "forward_backward":

        def forward_backward() -> StepResult:
            with torch.enable_grad():
                output = call(*leaves)
                return StepResult(output.detach(), torch.autograd.grad(output, leaves, grad_output))

        return forward_backward
    stored: dict[object, torch.Tensor] = {}  # one forward per stream (``stream_key``)

    def backward() -> StepResult:
        with torch.enable_grad():
            key = stream_key(inputs.query.device)
            if key not in stored:
                stored[key] = call(*leaves)
            output = stored[key]
            grads = torch.autograd.grad(output, leaves, grad_output, retain_graph=True)
        return StepResult(output.detach(), grads)

    return backward


def stream_key(device: torch.device) -> object:
    """The stream the backward mode's stored forward belongs to: the current CUDA stream's
    ``(device, stream_id)`` on CUDA, the device elsewhere.

    Autograd runs each backward op on the stream its forward ran on, so a backward captured in a
    CUDA graph on a side stream needs a forward that ran on that stream: the backward mode keeps
    one forward per stream (each kept alive, since a captured graph reads its saved tensors).
    """
    if device.type != "cuda":
        return device
    stream = torch.cuda.current_stream(device)
    return (device, stream.stream_id)
