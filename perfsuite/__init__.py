"""perfsuite: a performance-regression and correctness suite for attention in PyTorch.

The public API, importable from ``perfsuite`` whatever module it lives in (names resolve on
first use, so ``import perfsuite`` stays cheap and subpackages can move without breaking users):

- variants: ``register_variant``, ``Variant``, ``get_variant``, ``variant_names``, ``AttentionFn``, ``Form``, ``handles``;
- the problem: ``AttentionCase``, ``AttentionMask``, ``MaskKind``, ``mask_kind``, ``ScoreMods``, ``make_inputs``, and the
  named values ``Mode``, ``Device``, ``FullyMaskedRows`` (``StrEnum``: members are their strings);
- property checks for users' own tests: ``ALL_CHECKS``, ``applicable`` and each ``check_*``;
  hypothesis strategies: ``attention_cases``, ``score_mods``;
- errors: ``PerfsuiteError`` and its subclasses (``perfsuite.errors``).
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "register_variant": "perfsuite.variants",
    "Variant": "perfsuite.variants",
    "get_variant": "perfsuite.variants",
    "variant_names": "perfsuite.variants",
    "AttentionFn": "perfsuite.attention.contract",
    "Form": "perfsuite.attention.contract",
    "handles": "perfsuite.attention.contract",
    "AttentionCase": "perfsuite.attention.cases",
    "AttentionMask": "perfsuite.attention.masks",
    "MaskKind": "perfsuite.attention.masks",
    "mask_kind": "perfsuite.attention.masks",
    "ScoreMods": "perfsuite.attention.score_mods",
    "Mode": "perfsuite.attention.modes",
    "Device": "perfsuite.attention.cases",
    "FullyMaskedRows": "perfsuite.attention.reference",
    "make_inputs": "perfsuite.attention.inputs",
    "attention_cases": "perfsuite.testing.strategies",
    "score_mods": "perfsuite.testing.strategies",
    "ALL_CHECKS": "perfsuite.testing.properties",
    "applicable": "perfsuite.testing.properties",
    "check_matches_reference": "perfsuite.testing.properties",
    "check_batch_and_head_independence": "perfsuite.testing.properties",
    "check_causality": "perfsuite.testing.properties",
    "check_masked_keys_do_not_matter": "perfsuite.testing.properties",
    "check_nan_masked_key": "perfsuite.testing.properties",
    "check_shift_invariance": "perfsuite.testing.properties",
    "check_score_copies": "perfsuite.testing.properties",
    "check_alibi_position_shift": "perfsuite.testing.properties",
    "check_huge_softcap_changes_nothing": "perfsuite.testing.properties",
    "check_minus_infinity_sink_is_no_sink": "perfsuite.testing.properties",
    "PerfsuiteError": "perfsuite.errors",
    "ConfigError": "perfsuite.errors",
    "TraceError": "perfsuite.errors",
    "BaselineError": "perfsuite.errors",
    "IncomparableRuns": "perfsuite.errors",
    "ReportError": "perfsuite.errors",
    "UsageError": "perfsuite.errors",
    "WorkerError": "perfsuite.errors",
}
__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'perfsuite' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
