"""The memory layout of a variant's output, and where variants disagree about it."""

from __future__ import annotations

import torch

_DIM_NAMES = ("B", "H", "Sq", "D")


def describe_layout(tensor: torch.Tensor) -> str:
    """``contiguous``; ``dense as [B, Sq, H, D]`` for a dense tensor in another dimension order
    (outermost first, as a transposed ``[B, S, H, D]`` buffer); else ``strides (a, b, c, d)``."""
    if tensor.is_contiguous():
        return "contiguous"
    order = sorted(range(tensor.dim()), key=lambda d: (-tensor.stride(d), -tensor.shape[d]))
    names = _DIM_NAMES if tensor.dim() == 4 else tuple(f"d{i}" for i in range(tensor.dim()))
    if tensor.permute(order).is_contiguous():
        return f"dense as [{', '.join(names[d] for d in order)}]"
    return f"strides {tuple(tensor.stride())}"


def layout_differences(layouts_seen: list[tuple[str, str, str, str]]) -> list[str]:
    """Lines naming the cases and modes where variants returned outputs of different layouts.

    ``layouts_seen``: ``(variant, case_id, mode, output_layout)`` per evidence (``Evidence.layout_record``).
    ``b1h2s8d4-fp32-causal-strided-cpu (forward): contiguous (sdpa_math); dense as [B, Sq, H, D] (sdpa_flash)``.
    """
    groups: dict[tuple[str, str], dict[str, list[str]]] = {}
    for variant, case_id, mode, layout in layouts_seen:
        if layout:
            layouts = groups.setdefault((case_id, mode), {})
            layouts.setdefault(layout, []).append(variant)
    return [
        f"{case_id} ({mode}): "
        + "; ".join(f"{layout} ({', '.join(names)})" for layout, names in layouts.items())
        for (case_id, mode), layouts in groups.items()
        if len(layouts) > 1
    ]
