"""Registry of attention variants.

A variant is a function ``fn(query, key, value, *, mask, scale)`` returning the attention
output ``[batch, num_heads, seq_len_q, head_dim]``; ``mask`` is a ``perfsuite.attention.masks.AttentionMask``
(its ``is_causal`` is the causal flag), see ``perfsuite.attention.inputs.AttentionInputs``. It is registered with
``@register_variant(...)``, which returns the function unchanged.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any
from collections.abc import Callable, Mapping, Sequence


from perfsuite.attention.case_sets import get_case_set
from perfsuite.attention.cases import DEVICES
from perfsuite.attention.modes import GRADIENT_MODES
from perfsuite.attention.contract import (
    FORM_KEYWORDS,
    KEYWORD_ALIASES,
    FORMS,
    Form,
    PrepareFn,
    VariantFn,
    declared_forms,
    missing_required_reason,
    parse_form,
    required_forms,
    undeclared_forms_reason,
)
from perfsuite.attention.reference import FullyMaskedRows
from perfsuite.errors import did_you_mean

_POSITIONAL = ("query", "key", "value")
_KEYWORD_ONLY = ("mask", "scale")
FULLY_MASKED_ROW_RESULTS = tuple(FullyMaskedRows)


@dataclasses.dataclass(frozen=True)
class DeclaredScoreCopy:
    """A score-sized copy a variant is known to make once per forward on some cases, beyond the
    masked copy of ``copies_scores_when_masked`` (a library's own: ``nn.MultiheadAttention``'s
    ``baddbmm`` copies a per-batch mask into its score buffer). ``applies(case)``: True on the
    cases where it copies (an ``AttentionCase``); ``why``: the reason, shown in the variants
    reference and in the score-accounting test's message. Score accounting
    (``perfsuite.measure.score_accounting``) then expects one more copy on those cases."""

    applies: Callable[[Any], bool]
    why: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class Variant:
    """A registered attention implementation.

    ``sdpa_backend``: the ``torch.nn.attention.SDPBackend`` member name the variant is
    pinned to (``"FLASH_ATTENTION"``), or ``None`` when it is not pinned.
    ``copies_scores_when_masked``: True when the implementation is expected to copy the
    ``[batch, num_heads, seq_len_q, seq_len_kv]`` score matrix once per forward that hides
    keys (the out-of-place ``masked_fill`` of the post); the profiler test asserts it.
    ``fully_masked_rows``: what the variant returns for a query that sees no key
    (a ``FullyMaskedRows`` value): ``"zeros"`` (SDPA's ``_safe_softmax`` semantics, the reference's), ``"nan"`` (a plain
    softmax over all ``-inf``), ``"finite"`` (some finite value, as libraries that mask with
    a large negative number return: the mean of the values, or anything else) or ``"any"`` (finite
    or not: a large negative mask value plus a negative score can overflow to ``-inf`` in fp16, and
    the row becomes NaN); the equivalence check asserts it, and with ``"finite"``/``"any"`` leaves
    those rows out of the numeric comparison.
    ``prepare``: per-case setup (see the module docstring), or None to call ``fn`` as is.
    ``compiled``: the variant runs through ``torch.compile``; the suite records its compile
    time, compiled graphs and graph breaks, and asserts nothing recompiles while it is timed.
    ``forward_only``: why the variant has no backward on any device (its backward modes are
    skipped with this reason), or None. ``forward_only_on``: ``(device, reason)`` pairs for a
    variant with no backward on some devices only (``register_variant(forward_only={"cpu": ...})``).
    ``saves_scores_for_backward``: True when its forward saves a score matrix for backward (the
    unfused softmax), False when it must not (fused kernels save a logsumexp per row), None
    when it depends on the case (torch's dispatch, Inductor's pattern matching): then the
    suite reports what it measured without asserting it.
    ``fused``: the forward is one fused attention kernel; the profiler test asserts no
    unfused matmul or softmax runs (no ATen matmul/softmax op, no GEMM/softmax kernel).
    ``property_tests``: whether ``perfsuite.testing.properties`` runs on the variant: None (the
    default) runs them unless the variant is ``compiled`` (every transformed input would
    compile anew); True runs them anyway (a variant that calls ``torch.compile`` inside with
    dynamic shapes, or caches per shape); False never.
    ``wraps``: the library whose attention the variant calls (``"transformers"``,
    ``"torch.nn.MultiheadAttention"``, ``"flash-attn"``), or None for perfsuite's own; the suite runs
    such adapters on ``perfsuite_adapter_cases`` when that is set.
    ``devices``: the device types the variant runs on (``DEVICES``), or None for every one; on
    another device its tests are not generated (``device_unsupported`` gives the reason the run
    counts), so declare only what holds for every case there (a CUDA-only library or backend).
    ``preload``: imports the variant's library once per process; the suite calls it for every
    selected variant before any test runs (``preload_variants``), so a slow import is paid only by
    runs that select the variant, and never between a compile and its next call.
    ``deterministic``: the variant promises bitwise identical outputs (and gradients) for identical
    inputs; the suite reruns each checked step (``--perfsuite-determinism-runs``, default 10) and
    compares bitwise, and the table says which variants were reproducible.
    ``forms``: the forms (``perfsuite.attention.contract.Form``) the variant handles: those its
    function's keywords declare plus ``register_variant(forms=...)``; on a case carrying another form
    its tests are not generated (``forms_unsupported`` gives the reason the run counts).
    ``forms_refused``: ``(form, reason)`` pairs saying why the variant cannot do a form (SDPA has no
    hook for a softcap), given in place of "does not declare" on a case carrying it.
    ``needs_a_form``: the variant exists for cases with forms (``naive_mods``); on a plain case its
    tests are not generated (the plain built-ins cover those).
    ``requires``: the forms whose keywords its function takes without a default
    (``perfsuite.attention.contract.required_forms``); it is not run on a case without them.
    ``score_copy``: a declared score-sized copy on some cases (``DeclaredScoreCopy``), or None.
    ``flash_impl``: for a variant pinned to SDPA's flash backend, the flash implementation it claims
    to run on CUDA (``"FA2"``, torch's built-in; ``"FA3"``, ``"FA4"`` once activated): the profiler
    test reads it from the kernel names (``perfsuite.trace.kernel_families.flash_impl_failure``).
    """

    name: str
    fn: VariantFn
    description: str
    sdpa_backend: str | None = None
    copies_scores_when_masked: bool = False
    fully_masked_rows: str = FullyMaskedRows.ZEROS
    prepare: PrepareFn | None = None
    compiled: bool = False
    forward_only: str | None = None
    saves_scores_for_backward: bool | None = None
    fused: bool = False
    forward_only_on: tuple[tuple[str, str], ...] = ()
    property_tests: bool | None = None
    wraps: str | None = None
    preload: Callable[[], object] | None = None
    devices: tuple[str, ...] | None = None
    deterministic: bool = False
    forms: frozenset[Form] = frozenset()
    forms_refused: tuple[tuple[Form, str], ...] = ()
    needs_a_form: bool = False
    requires: frozenset[Form] = frozenset()
    score_copy: DeclaredScoreCopy | None = None
    flash_impl: str | None = None
    # the case sets (``attention.case_sets``) this variant's model runs; a run pairs it with their cases only
    case_sets: tuple[str, ...] = ()

    def device_unsupported(self, device: str) -> str | None:
        """Why the variant cannot run on ``device`` (``"cpu"``, ``"cuda"``) at all, or None."""
        if self.devices is None or device in self.devices:
            return None
        return f"{self.name} runs on {', '.join(self.devices)} only"

    def forms_unsupported(self, carried: frozenset[Form], generating: bool = True) -> str | None:
        """Why the variant is not run on a case carrying the forms ``carried``, or None: the
        variant's own reasons (``forms_refused``) for the forms it refuses, else the forms it does
        not declare; for a ``needs_a_form`` variant, that a plain case is not its; the forms it
        requires (``requires``) that the case does not carry. ``generating=False`` (a direct call):
        ``needs_a_form`` does not refuse, since such a variant can run a plain case."""
        if generating and self.needs_a_form and not carried:
            return f"{self.name} runs on cases with forms (score modifications, layouts) only"
        refused = [f"{form.value}: {why}" for form, why in self.forms_refused if form in carried]
        if refused:
            return f"{self.name} cannot do " + "; ".join(refused)
        reason = undeclared_forms_reason(self.name, self.forms, carried)
        if reason is not None:
            return reason + _near_misses(self.fn, set(carried) - self.forms)
        return missing_required_reason(self.name, self.requires, carried)

    def backward_unsupported(self, device: str) -> str | None:
        """Why the variant has no backward on ``device`` (``"cpu"``, ``"cuda"``), or None when it has one."""
        return self.forward_only or dict(self.forward_only_on).get(device)

    @property
    def runs_property_tests(self) -> bool:
        """``property_tests``, defaulting to True for eager variants and False for compiled ones."""
        return (not self.compiled) if self.property_tests is None else self.property_tests

    def for_case(self, inputs: Any) -> VariantFn:
        """The function to call on ``inputs`` (an ``AttentionInputs``): ``prepare(inputs)`` or ``fn``."""
        return self.prepare(inputs) if self.prepare else self.fn

    def expected_score_copies(self, hides_keys: bool) -> int:
        """Score-sized copies one forward must make: 1 for a copying variant whose mask hides keys, else 0."""
        return 1 if (self.copies_scores_when_masked and hides_keys) else 0

    def declared_score_copy(self, case: Any) -> str | None:
        """Why the variant makes one more score-sized copy per forward on ``case`` (an
        ``AttentionCase``; ``score_copy``), or None where it makes none."""
        if self.score_copy is not None and self.score_copy.applies(case):
            return self.score_copy.why
        return None


_REGISTRY: dict[str, Variant] = {}


def _near_misses(fn: VariantFn, missing: set[Form]) -> str:
    """``; its parameter logit_softcap is no form keyword (did you mean 'softcap'?)`` for each
    parameter of ``fn`` whose name is close to a keyword of the ``missing`` forms, else ``""``."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return ""
    wanted = [k for form in missing for k in FORMS[form].keywords]
    known = {*_POSITIONAL, *_KEYWORD_ONLY, *FORM_KEYWORDS}
    hints = []
    for name in params:
        if name in known:
            continue
        alias = KEYWORD_ALIASES.get(name)
        if alias in wanted:
            hints.append(f"; its parameter {name} is what perfsuite passes as {alias!r}: rename it")
        elif hint := did_you_mean(name, wanted):
            hints.append(f"; its parameter {name} is no form keyword{hint}")
    return "".join(hints)


def check_signature(name: str, fn: VariantFn) -> None:
    """Raise ``TypeError`` unless ``fn`` takes (query, key, value, *, mask, scale); further parameters
    with defaults (``chunk=32``, keyword-only or after ``value``) are accepted and left at their defaults,
    and the keywords of forms (``FORM_KEYWORDS``: ``softcap``, ``alibi_slopes``, ...) need none."""
    params = inspect.signature(fn).parameters.values()
    extra_without_default = [
        p.name
        for p in params
        if p.default is p.empty
        and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        and p.name not in (*_POSITIONAL, *_KEYWORD_ONLY, *FORM_KEYWORDS)
    ]
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    keyword = {p.name for p in params if p.kind is p.KEYWORD_ONLY}
    if (
        tuple(positional[: len(_POSITIONAL)]) != _POSITIONAL
        or not set(_KEYWORD_ONLY) <= keyword
        or extra_without_default
    ):
        extra = (
            f" ({', '.join(extra_without_default)} without a default)"
            if extra_without_default
            else ""
        )
        raise TypeError(
            f"attention variant {name!r} has signature {inspect.signature(fn)}{extra}; expected "
            f"({', '.join(_POSITIONAL)}, *, {', '.join(_KEYWORD_ONLY)}), further parameters with defaults"
        )


_NAME_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.+-")


def check_variant_name(name: object) -> None:
    """Raise ``ValueError`` unless ``name`` is a variant name: letters, digits, ``_ . + -``, not
    starting with ``.``. A name becomes part of file names (traces) and of the key
    ``variant/case/mode``, so a separator or ``..`` is refused here, where it is written."""
    if (
        not isinstance(name, str)
        or not name
        or name.startswith(".")
        or not set(name) <= _NAME_CHARACTERS
    ):
        raise ValueError(
            f"variant name {name!r}: allowed: letters, digits and _ . + - (not starting with '.')"
        )


def _required_by_declaration(name: str, fn: Callable, requires: Sequence[str]) -> set[Form]:
    """The forms ``requires`` names, each refused unless ``fn`` takes all its keywords (as
    parameters, or through ``**kwargs``): a case of that form would call it with them."""
    forms = {parse_form(f) for f in requires}
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # no signature to check
        return forms
    if any(p.kind == p.VAR_KEYWORD for p in params):
        return forms
    names = {p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
    for form in sorted(forms):
        missing = [k for k in FORMS[form].keywords if k not in names]
        if missing:
            raise ValueError(
                f"variant {name!r}: requires='{form}', but its function takes no keyword "
                f"{', '.join(missing)}: a {form} case passes "
                f"{', '.join(FORMS[form].keywords)}; add them to its signature"
            )
    return forms


def register_variant(
    name: str,
    description: str,
    *,
    sdpa_backend: str | None = None,
    copies_scores_when_masked: bool = False,
    fully_masked_rows: str = FullyMaskedRows.ZEROS,
    prepare: PrepareFn | None = None,
    compiled: bool = False,
    forward_only: str | Mapping[str, str] | None = None,
    saves_scores_for_backward: bool | None = None,
    fused: bool = False,
    property_tests: bool | None = None,
    wraps: str | None = None,
    preload: Callable[[], object] | None = None,
    devices: Sequence[str] | None = None,
    deterministic: bool = False,
    forms: Sequence[str | Form] = (),
    forms_refused: Mapping[str | Form, str] | None = None,
    needs_a_form: bool = False,
    requires: Sequence[str | Form] = (),
    score_copy: DeclaredScoreCopy | None = None,
    flash_impl: str | None = None,
    case_sets: Sequence[str] = (),
) -> Callable[[VariantFn], VariantFn]:
    """Decorator that registers ``fn`` under ``name`` and returns it unchanged.

    ``forward_only``: a reason (no backward anywhere) or ``{device: reason}`` (no backward on
    those devices only, e.g. ``{"cpu": "the CPU kernel has no backward"}``). ``devices``: the
    device types the variant runs on (``Variant.devices``), None for every one. ``deterministic``:
    bitwise reproducible outputs and gradients, checked by reruns (``Variant.deterministic``). ``forms``: forms
    the variant handles beyond those its function's keywords declare (``Variant.forms``).
    ``forms_refused``: ``{form: why the variant cannot do it}`` (``Variant.forms_refused``);
    ``needs_a_form``: not generated on plain cases (``Variant.needs_a_form``);
    ``requires``: forms it cannot run without beyond those its keywords require (a variant with
    ``prepare`` whose direct-call function takes ``**forms``), declared too.
    ``score_copy``: a score-sized copy the variant makes on some cases, and why
    (``DeclaredScoreCopy``): score accounting expects it there instead of failing. ``flash_impl``: the flash
    implementation a variant pinned to the flash backend claims (``Variant.flash_impl``).
    ``case_sets``: the named case sets (``perfsuite.attention.case_sets``) of the model this function
    serves (``Variant.case_sets``): a run pairs the variant with those sets' cases only, unless the
    command line chooses cases (``--perfsuite-case-set``, ``--perfsuite-cases``).

    Raises:
        ValueError: ``name`` is not a variant name (``check_variant_name``) or is already
            registered, ``requires`` names a form whose keywords ``fn`` does not take, ``fully_masked_rows`` is not one of
            ``FULLY_MASKED_ROW_RESULTS``, ``forward_only`` names a device not in ``DEVICES``
            or gives an empty reason, ``devices`` is empty or names a device not in ``DEVICES``,
            or ``forms`` or ``forms_refused`` names an unknown form, or ``flash_impl`` is given
            without ``sdpa_backend="FLASH_ATTENTION"`` or is not one of ``FLASH_IMPLS``.
        TypeError: ``fn`` does not have the variant signature.
    """

    def decorate(fn: VariantFn) -> VariantFn:
        check_variant_name(name)
        if name in _REGISTRY:
            raise ValueError(f"attention variant {name!r} is already registered")
        if fully_masked_rows not in FULLY_MASKED_ROW_RESULTS:
            raise ValueError(
                f"fully_masked_rows={fully_masked_rows!r}; allowed: {', '.join(FULLY_MASKED_ROW_RESULTS)}"
            )
        anywhere, per_device = _forward_only(name, forward_only)
        unknown = [d for d in devices or () if d not in DEVICES]
        if unknown or devices == ():
            raise ValueError(
                f"variant {name!r}: devices={devices!r}; allowed: a non-empty list of {', '.join(DEVICES)}"
            )
        _check_flash_impl(name, flash_impl, sdpa_backend)
        check_signature(name, fn)
        needed = required_forms(fn) | _required_by_declaration(name, fn, requires)
        handled = declared_forms(fn, (parse_form(f) for f in forms)) | needed
        refused = tuple((parse_form(f), why) for f, why in (forms_refused or {}).items())
        _REGISTRY[name] = Variant(
            name=name,
            fn=fn,
            description=description,
            sdpa_backend=sdpa_backend,
            copies_scores_when_masked=copies_scores_when_masked,
            fully_masked_rows=fully_masked_rows,
            prepare=prepare,
            compiled=compiled,
            forward_only=anywhere,
            saves_scores_for_backward=saves_scores_for_backward,
            fused=fused,
            forward_only_on=per_device,
            property_tests=property_tests,
            wraps=wraps,
            preload=preload,
            devices=tuple(devices) if devices is not None else None,
            deterministic=bool(deterministic),
            forms=handled,
            forms_refused=refused,
            needs_a_form=needs_a_form,
            requires=needed,
            score_copy=score_copy,
            flash_impl=flash_impl,
            case_sets=_known_case_sets(name, case_sets),
        )
        return fn

    return decorate


# The flash implementations SDPA's flash backend can switch to (torch.nn.attention.list_flash_attention_impls);
# perfsuite.trace.kernel_families has one kernel-name rule per name (a test keeps the two lists equal).
FLASH_IMPLS = ("FA4", "FA3", "FA2")


def _known_case_sets(name: str, case_sets: Sequence[str]) -> tuple[str, ...]:
    """``case_sets`` as a tuple; ``ValueError`` naming the variant and the unknown set otherwise."""
    if isinstance(case_sets, str):
        case_sets = case_sets.split()
    for set_name in case_sets:
        try:
            get_case_set(set_name)
        except ValueError as exc:
            raise ValueError(f"register_variant({name!r}, case_sets=...): {exc}") from None
    return tuple(dict.fromkeys(case_sets))


def _check_flash_impl(name: str, flash_impl: str | None, sdpa_backend: str | None) -> None:
    if flash_impl is None:
        return
    if flash_impl not in FLASH_IMPLS or sdpa_backend != "FLASH_ATTENTION":
        raise ValueError(
            f"variant {name!r}: flash_impl={flash_impl!r} with sdpa_backend={sdpa_backend!r}; allowed: "
            f"one of {', '.join(FLASH_IMPLS)}, for a variant pinned to FLASH_ATTENTION"
        )


def _forward_only(
    name: str, value: str | Mapping[str, str] | None
) -> tuple[str | None, tuple[tuple[str, str], ...]]:
    """Split ``forward_only`` into (reason everywhere, ((device, reason), ...)); ValueError when malformed."""
    if value is None or isinstance(value, str):
        return value, ()
    if not isinstance(value, Mapping):
        raise ValueError(
            f"attention variant {name!r}: forward_only={value!r}; give a reason (str) or "
            f"{{device: reason}} with devices from {', '.join(DEVICES)}"
        )
    for device, reason in value.items():
        if device not in DEVICES or not isinstance(reason, str) or not reason:
            raise ValueError(
                f"attention variant {name!r}: forward_only entry {device!r}: {reason!r}; devices are "
                f"{', '.join(DEVICES)} and each needs a reason (a non-empty str)"
            )
    return None, tuple(sorted(value.items()))


def add_variant(variant: Variant) -> None:
    """Register an existing ``Variant`` again (one ``unregister_variant`` returned); ValueError if its name is taken."""
    if variant.name in _REGISTRY:
        raise ValueError(f"attention variant {variant.name!r} is already registered")
    _REGISTRY[variant.name] = variant


def bind_case_sets(name: str, case_sets: Sequence[str]) -> Variant:
    """Bind the registered variant ``name`` to the named case sets (``Variant.case_sets``),
    replacing what it declared; returns the bound variant.

    Raises:
        ValueError: ``name`` is not registered, or a case set is unknown (the known ones listed).
    """
    variant = get_variant(name)
    bound = dataclasses.replace(variant, case_sets=_known_case_sets(name, case_sets))
    _REGISTRY[name] = bound
    return bound


def unregister_variant(name: str) -> Variant:
    """Remove the variant called ``name`` and return it; ``ValueError`` when it is not registered."""
    variant = get_variant(name)
    del _REGISTRY[name]
    return variant


def get_variant(name: str) -> Variant:
    """Return the variant called ``name``; ``ValueError`` lists the known names otherwise."""
    if name not in _REGISTRY:
        raise ValueError(
            f"unknown attention variant {name!r}{did_you_mean(name, _REGISTRY)}; "
            f"known: {', '.join(_REGISTRY)}"
        )
    return _REGISTRY[name]


def preload_variants(names) -> None:
    """Run ``Variant.preload`` of each named variant (each import happens once per process)."""
    for name in names:
        variant = get_variant(name)
        if variant.preload is not None:
            variant.preload()


def registered_variants() -> list[Variant]:
    """All registered variants, in registration order."""
    return list(_REGISTRY.values())


def variant_names() -> list[str]:
    """Names of all registered variants, in registration order."""
    return list(_REGISTRY)


def prepared_on_every_call(prepare: PrepareFn, doc: str) -> VariantFn:
    """A variant function for direct calls: it runs ``prepare`` (per-case setup) on every call.

    The suite calls ``Variant.for_case`` once per case instead; this is what a user gets when
    calling the registered function by hand. ``doc`` becomes its docstring.
    """
    from perfsuite.attention.inputs import AttentionInputs

    def attention(query, key, value, *, mask, scale, **forms):
        return prepare(AttentionInputs(query, key, value, mask, scale, forms))(
            query, key, value, mask=mask, scale=scale, **forms
        )

    attention.__doc__ = doc
    return attention


# Layout forms that are inference only: their gradient modes are skipped with the reason. Padded
# and packed (varlen) batches and a value head dim of its own are trained through (varlen_attn, flex
# with a document mask and SDPA with a padding mask have a backward) and run in every mode.
LAYOUT_FORWARD_ONLY = {
    "paged": (
        "paged KV-cache cases are inference only (decode and chunked prefill read a cache that "
        "training never builds): checked and timed forward only"
    ),
    "split_kv": (
        "split-KV cases are inference only (flash-decoding splits one decode step over the keys): "
        "checked and timed forward only"
    ),
    "fp8": (
        "FP8 cases are inference only (torch's FP8 attention, SDPA's quantized path and cuDNN FP8, "
        "has no backward): checked and timed forward only"
    ),
}


def layout_forward_only(layout: Any) -> str | None:
    """Why a case of ``layout`` (a ``perfsuite.attention.layouts.Layout``) has no gradient modes
    (``LAYOUT_FORWARD_ONLY``: paged, chunked prefill over pages, split-KV, FP8), or None: plain, padded, packed and value-head-dim
    cases run backward and forward_backward, each variant by its own declaration."""
    if layout.storage in ("paged", "packedpaged"):
        return LAYOUT_FORWARD_ONLY["paged"]
    if layout.num_splits is not None:
        return LAYOUT_FORWARD_ONLY["split_kv"]
    if layout.fp8:
        return LAYOUT_FORWARD_ONLY["fp8"]
    return None


def inapplicable_reason(variant: Variant, case: Any) -> str | None:
    """Why ``variant`` is not for ``case`` (an ``AttentionCase``) in any mode, or None: a device it
    does not run on (``Variant.device_unsupported``) or forms it does not fit
    (``Variant.forms_unsupported``: one the case carries and it does not declare, one it requires
    and the case lacks, or a plain case for a ``needs_a_form`` variant)."""
    return variant.device_unsupported(case.device) or variant.forms_unsupported(case.forms)


def certain_skip(variant: Variant, case: Any, mode: str | None) -> str | None:
    """Why ``variant`` certainly cannot run ``case`` (an ``AttentionCase``) in ``mode`` (None: it may
    run): the suite does not generate such a test, and ``perfsuite ab``'s workers do not run it."""
    inapplicable = inapplicable_reason(variant, case)
    if inapplicable is not None:
        return inapplicable
    layout_reason = layout_forward_only(case.layout) if mode in GRADIENT_MODES else None
    if layout_reason:
        return layout_reason
    no_backward = variant.backward_unsupported(case.device) if mode in GRADIENT_MODES else None
    if no_backward:
        return f"{variant.name} has no backward on {case.device}: {no_backward}"
    return None
