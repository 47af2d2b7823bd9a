"""``torch.compile`` per case, and the post's naive attention compiled by Inductor.

Dynamo keeps its compiled graphs on the Python code object it traced and, past
``torch._dynamo.config.recompile_limit`` (8) graphs for one code object, silently falls back
to eager. A suite with dozens of cases would hit that limit with one shared function, so
``compile_for_case`` compiles copies of the function with code objects of their own: each case
gets its own caches, compiled once and reused by every test of the case. There is one copy per
grad mode, so a compile that fails in one mode (flex_attention's backward on the CPU) cannot
disturb the graph of the other (a failed compile makes Dynamo recompile the frame's next call).
"""

from __future__ import annotations

import types

import torch

from perfsuite.variants.naive import naive_attention
from perfsuite.variants.registry import VariantFn, register_variant


def own_code_copy(fn: types.FunctionType) -> types.FunctionType:
    """A copy of ``fn`` with its own code object (so its own Dynamo cache), same behaviour."""
    code = fn.__code__.replace()
    copy = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__doc__ = fn.__doc__
    return copy


def compile_for_case(fn: types.FunctionType) -> VariantFn:
    """``torch.compile(fn, dynamic=False)`` on private copies of ``fn``, one per grad mode
    (see the module docstring).

    Compilation happens at the first call in each grad mode, which the suite times separately
    as compile time.
    """
    by_grad_mode = {grad: torch.compile(own_code_copy(fn), dynamic=False) for grad in (False, True)}

    def compiled(*args, **kwargs):
        return by_grad_mode[torch.is_grad_enabled()](*args, **kwargs)

    return compiled


@register_variant(
    "naive_compiled",
    "the naive code under torch.compile (Inductor): does the masked_fill copy survive?",
    fully_masked_rows="nan",
    prepare=lambda inputs: compile_for_case(naive_attention),
    compiled=True,
    forms=("value_head_dim",),
)
def naive_compiled_attention(query, key, value, *, mask, scale):
    """``naive_attention`` compiled once per case by ``prepare``; called directly it runs eager."""
    return naive_attention(query, key, value, mask=mask, scale=scale)
