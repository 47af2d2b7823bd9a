"""Attention variants; importing this package registers the built-in ones."""

from perfsuite.variants import naive, naive_inplace, registry, sdpa  # noqa: F401  (registers)
from perfsuite.variants.registry import Variant, get_variant, register_variant, variant_names

__all__ = ["Variant", "get_variant", "register_variant", "variant_names"]
