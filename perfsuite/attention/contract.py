"""The attention-function contract every variant provides, and the forms a function declares.

``fn(query, key, value, *, mask, scale, **form_keywords) -> output``:

- ``query``: ``[batch, num_heads, seq_len_q, head_dim]``; ``key``/``value``:
  ``[batch, num_kv_heads, seq_len_kv, head_dim]`` (GQA when ``num_kv_heads < num_heads``).
- ``mask``: a ``perfsuite.attention.masks.AttentionMask`` (``mask.is_causal`` is the causal flag).
- ``scale``: the softmax scale (float, usually ``head_dim ** -0.5``).
- returns ``[batch, num_heads, seq_len_q, head_dim]`` in the inputs' dtype and device.

**Forms.** A case may depart from dense masked attention in named ways (``Form``): a score
modification (ALiBi, softcapping, sinks, query positions) or an inference layout (packed
variable-length sequences, a paged KV cache, split-KV decode, a value head dim of its own, FP8).
Each form states the keyword arguments that carry it (``FORMS``). A function **declares** a form
by naming all of the form's keywords as parameters (``def attn(query, key, value, *, mask, scale,
softcap)``), or, for a form with no keyword, with ``@handles(Form.VALUE_HEAD_DIM)`` (built-ins:
``register_variant(forms=...)``). The suite passes a function the keywords of the forms the case
carries, and only those; a function that does not declare one of them is not run on the case,
and the run names the form it lacks (``undeclared_forms_reason``). A function with the plain
signature therefore keeps working, unchanged, on every case without forms.

A function **requires** a form when it names the form's keywords without defaults
(``def paged(query, key_cache, value_cache, *, mask, scale, block_table, seq_lens_kv)``): it is
not run on a case that does not carry the form (``required_forms``, ``missing_required_reason``).
Giving the keywords defaults (``block_table=None``) declares the form without requiring it.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
from typing import Any, Protocol
from collections.abc import Callable, Iterable, Mapping

import torch


class AttentionFn(Protocol):
    """An attention implementation as the suite calls it (see the module docstring for shapes)."""

    def __call__(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        *,
        mask: Any,
        scale: float,
    ) -> torch.Tensor: ...


VariantFn = Callable[
    ..., torch.Tensor
]  # an AttentionFn; Callable so wrappers (torch.compile) type-check
PrepareFn = Callable[[Any], VariantFn]  # (AttentionInputs) -> the variant function for that case


class Form(enum.StrEnum):
    """A way a case departs from dense masked attention (see ``FORMS`` for what each passes)."""

    ALIBI = "alibi"
    SOFTCAP = "softcap"
    SINKS = "sinks"
    QUERY_POSITIONS = "query_positions"
    VARLEN = "varlen"
    PAGED = "paged"
    SPLIT_KV = "split_kv"
    VALUE_HEAD_DIM = "value_head_dim"
    FP8 = "fp8"


@dataclasses.dataclass(frozen=True)
class FormSpec:
    """What one form means and which keyword arguments carry it.

    ``keywords``: the arguments the suite passes for the form; a function declares the form by
    naming all of them (empty: declared with ``handles`` only). ``meaning``: one line for skip
    reasons and the documentation.
    """

    form: Form
    keywords: tuple[str, ...]
    meaning: str


FORMS: dict[Form, FormSpec] = {
    spec.form: spec
    for spec in (
        FormSpec(
            Form.ALIBI,
            ("alibi_slopes", "query_positions"),
            "a per-head linear position bias added to the scaled scores, "
            "-alibi_slopes[h] * (query position - key position); alibi_slopes: float32 [num_heads]",
        ),
        FormSpec(
            Form.SOFTCAP,
            ("softcap",),
            "scores capped as softcap * tanh(scores / softcap) (Gemma 2); softcap: float > 0",
        ),
        FormSpec(
            Form.SINKS,
            ("sinks",),
            "a per-head sink logit that joins the softmax denominator only (gpt-oss); "
            "sinks: float32 [num_heads]",
        ),
        FormSpec(
            Form.QUERY_POSITIONS,
            ("query_positions",),
            "queries at given positions of the key sequence (a cache offset, left padding); "
            "query_positions: int64 [batch, seq_len_q]",
        ),
        FormSpec(
            Form.VARLEN,
            ("cu_seqlens_q", "cu_seqlens_kv", "max_seqlen_q", "max_seqlen_kv"),
            "sequences of different lengths packed into query [total_q, num_heads, head_dim] and "
            "key/value [total_kv, num_kv_heads, head_dim]; cu_seqlens_*: int32 [batch + 1] offsets",
        ),
        FormSpec(
            Form.PAGED,
            ("block_table", "seq_lens_kv"),
            "key/value in a paged cache [num_pages, page_size, num_kv_heads, head_dim]; "
            "block_table: int32 [batch, max_pages_per_seq]; seq_lens_kv: int32 [batch]",
        ),
        FormSpec(
            Form.SPLIT_KV,
            ("num_splits",),
            "decode split over the keys into num_splits chunks merged by their log-sum-exp",
        ),
        FormSpec(
            Form.VALUE_HEAD_DIM,
            (),
            "value heads of another size than query/key heads (MLA: 192 and 128)",
        ),
        FormSpec(
            Form.FP8,
            ("q_descale", "k_descale", "v_descale"),
            "float8 query/key/value with float32 per-head descales [batch, num_kv_heads]",
        ),
    )
}

FORM_KEYWORDS = frozenset(k for spec in FORMS.values() for k in spec.keywords)

# Names other libraries give the same arguments (FlashAttention, FlashInfer, vLLM, transformers):
# a function using one of them is told the keyword perfsuite passes instead.
KEYWORD_ALIASES: dict[str, str] = {
    "attn_logit_softcapping": "softcap",  # transformers' Gemma 2 config
    "logit_softcapping": "softcap",
    "logits_soft_cap": "softcap",  # FlashInfer
    "soft_cap": "softcap",
    "s_aux": "sinks",  # vLLM's gpt-oss sinks
    "sink": "sinks",
    "attention_sinks": "sinks",
    "slopes": "alibi_slopes",
    "alibi": "alibi_slopes",
    "positions": "query_positions",
    "cu_seqlens_k": "cu_seqlens_kv",  # FlashAttention's varlen and KV-cache functions
    "max_seqlen_k": "max_seqlen_kv",
    "block_tables": "block_table",
    "page_table": "block_table",
    "cache_seqlens": "seq_lens_kv",
    "seqused_k": "seq_lens_kv",
    "seq_lens": "seq_lens_kv",
}


def parse_form(name: str | Form) -> Form:
    """The ``Form`` called ``name``; ``ValueError`` naming the value and the allowed forms."""
    try:
        return Form(str(name).strip().lower())
    except ValueError:
        raise ValueError(f"form {name!r} is unknown; allowed: {', '.join(Form)}") from None


def handles(*forms: str | Form) -> Callable[[Callable], Callable]:
    """Decorator: declare forms a function handles beyond those its keywords declare.

    Needed for forms without keywords (``Form.VALUE_HEAD_DIM``); raises ``ValueError`` for an
    unknown form name. The function is returned unchanged, with ``__perfsuite_forms__`` set.
    """
    declared = frozenset(parse_form(f) for f in forms)

    def decorate(fn: Callable) -> Callable:
        fn.__perfsuite_forms__ = frozenset(getattr(fn, "__perfsuite_forms__", ())) | declared
        return fn

    return decorate


def declared_forms(fn: Callable, extra: Iterable[Form] = ()) -> frozenset[Form]:
    """The forms ``fn`` declares: those whose keywords all name parameters of ``fn`` (``**kwargs``
    does not count), those set with ``handles``, and ``extra`` (a registration's ``forms``)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin or C extension without a signature
        params = ()
    names = {p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
    by_keywords = {f for f, spec in FORMS.items() if spec.keywords and set(spec.keywords) <= names}
    return frozenset(by_keywords) | frozenset(getattr(fn, "__perfsuite_forms__", ())) | set(extra)


def required_forms(fn: Callable) -> frozenset[Form]:
    """The declared forms ``fn`` cannot run without: those with keywords, all of which are
    parameters of ``fn`` without a default. A function with no signature requires none."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return frozenset()
    names = {
        p.name
        for p in params
        if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    }
    return frozenset(
        f for f, spec in FORMS.items() if spec.keywords and set(spec.keywords) <= names
    )


def missing_required_reason(
    name: str, required: frozenset[Form], carried: Iterable[Form]
) -> str | None:
    """Why the function ``name``, which requires ``required`` forms, is not run on a case carrying
    ``carried``, or None. A required form is met when the carried forms pass all its keywords (an
    ALiBi case passes ``query_positions`` too). The reason names each form the case lacks."""
    passed = {k for form in carried for k in FORMS[form].keywords}
    missing = sorted(f for f in required if not set(FORMS[f].keywords) <= passed)
    if not missing:
        return None
    return (
        f"{name} requires {', '.join(f.value for f in missing)} (its keywords "
        f"{', '.join(k for f in missing for k in FORMS[f].keywords)} have no default), "
        "which this case does not carry"
    )


def undeclared_forms_reason(
    name: str, declared: frozenset[Form], carried: Iterable[Form]
) -> str | None:
    """Why the function ``name`` is not run on a case carrying ``carried`` forms, or None.

    The reason names each form it lacks, what the form means and how to declare it.
    """
    missing = sorted(set(carried) - declared)
    if not missing:
        return None
    parts = []
    for form in missing:
        spec = FORMS[form]
        how = (
            f"keywords {', '.join(spec.keywords)}"
            if spec.keywords
            else f"@perfsuite.handles({form.value!r})"
        )
        parts.append(f"{form.value} ({spec.meaning}; declare with {how})")
    return f"{name} does not declare {'; '.join(parts)}"


def forms_in(values: Mapping[str, Any]) -> frozenset[Form]:
    """The forms with keywords whose keywords are all in ``values`` (an ``AttentionInputs.forms``):
    what a call's keywords carry (forms without keywords, such as a value head dim, are not seen)."""
    return frozenset(
        f for f, spec in FORMS.items() if spec.keywords and all(k in values for k in spec.keywords)
    )


def form_keyword_values(carried: Iterable[Form], values: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments for the forms a case carries, taken from ``values``.

    Raises ``KeyError`` naming a keyword the case's inputs lack (a defect of the case builder).
    """
    wanted = [k for form in carried for k in FORMS[form].keywords]
    missing = [k for k in wanted if k not in values]
    if missing:
        raise KeyError(f"the case's inputs lack {', '.join(missing)}")
    return {k: values[k] for k in wanted}
