"""Pristine copies of a case's inputs, and which of them a variant's call changed in place.

The float64 reference is computed from the pristine copies, taken before the variant first
sees the inputs (its ``prepare`` included), so a variant that changes its inputs cannot move the
reference along with its own answer. After each checked call the inputs are compared with the
copies; changed ones are named and restored, so no later call runs on drifted values.
"""

from __future__ import annotations

import dataclasses

import torch

from perfsuite.attention.inputs import AttentionInputs

# The names a variant sees: its arguments, then the mask's tensors.
_MASK_FIELDS = ("allowed", "masked_out", "additive", "sdpa_mask")


def named_input_tensors(inputs: AttentionInputs) -> dict[str, torch.Tensor]:
    """``query``, ``key``, ``value``, the mask's tensors (``mask.allowed``, ...) and the forms'
    tensors (``alibi_slopes``, ``sinks``, ``block_table``, ...: ``AttentionInputs.forms``) by name."""
    found = {"query": inputs.query, "key": inputs.key, "value": inputs.value}
    for field in _MASK_FIELDS:
        tensor = getattr(inputs.mask, field, None)
        if isinstance(tensor, torch.Tensor):
            found[f"mask.{field}"] = tensor
    for name, value in inputs.forms.items():
        if isinstance(value, torch.Tensor):
            found[name] = value
    return found


def pristine_copy(inputs: AttentionInputs) -> AttentionInputs:
    """A copy of ``inputs`` whose tensors share no storage with them (strides kept)."""
    tensors = named_input_tensors(inputs)
    copies = {name: _clone(tensor) for name, tensor in tensors.items()}
    mask = dataclasses.replace(
        inputs.mask,
        **{name.split(".", 1)[1]: copies[name] for name in copies if name.startswith("mask.")},
    )
    forms = {name: copies.get(name, value) for name, value in inputs.forms.items()}
    return inputs.replace(
        query=copies["query"], key=copies["key"], value=copies["value"], mask=mask, forms=forms
    )


def _clone(tensor: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return tensor.detach().clone(memory_format=torch.preserve_format)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shapes and values, NaN equal to NaN (a changed tensor is one whose values moved)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.element_size() == 1 and a.is_floating_point():  # float8: compare the bits
        return torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    if a.is_floating_point():
        return bool(torch.where(torch.isnan(a), torch.isnan(b), a == b).all())
    return torch.equal(a, b)


def changed_inputs(inputs: AttentionInputs, pristine: AttentionInputs) -> list[str]:
    """Names of the tensors of ``inputs`` whose values differ from ``pristine`` (``query``, ``mask.additive``)."""
    theirs = named_input_tensors(pristine)
    return [
        name
        for name, tensor in named_input_tensors(inputs).items()
        if name in theirs and not _same(tensor.detach(), theirs[name])
    ]


def restore_inputs(inputs: AttentionInputs, pristine: AttentionInputs, names: list[str]) -> None:
    """Copy the pristine values back into the tensors ``names`` of ``inputs``, in place."""
    theirs, ours = named_input_tensors(pristine), named_input_tensors(inputs)
    with torch.no_grad():
        for name in names:
            try:
                ours[name].copy_(theirs[name])
            except (
                RuntimeError
            ):  # an expanded (stride 0) mask view cannot be written back; the check failed anyway
                pass


def modification_message(variant_name: str, names: list[str]) -> str:
    """``variant v modified its `query` in place ...``: the failure for changed inputs."""
    listed = ", ".join(f"`{n}`" for n in names)
    return (
        f"variant {variant_name} modified its {listed} in place; a variant must not change its inputs "
        "(its result would be checked and timed on other values than the case's). The inputs were restored "
        "and the reference computed from copies taken before the variant ran"
    )


def check_and_restore(
    variant_name: str, inputs: AttentionInputs, pristine: AttentionInputs
) -> str | None:
    """The ``modification_message`` for inputs a call changed (restored before returning), or None."""
    names = changed_inputs(inputs, pristine)
    if not names:
        return None
    restore_inputs(inputs, pristine, names)
    return modification_message(variant_name, names)
