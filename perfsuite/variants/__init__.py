"""Attention variants; importing this package registers the built-in ones (in table order)."""

from perfsuite.variants import naive, naive_inplace, compiled, sdpa, flex, score_mods  # noqa: F401  (registers, in order)
from perfsuite.variants import transformers_attn, multihead, external  # noqa: F401  (optional packages: skips)
from perfsuite.variants import varlen, paged, split_kv, fp8  # noqa: F401  (layout forms: packed, paged, split-KV, FP8)
from perfsuite.variants import paged_prefill  # noqa: F401  (packed queries over a paged cache)
from perfsuite.variants.registry import Variant, get_variant, register_variant, variant_names

__all__ = ["Variant", "get_variant", "register_variant", "variant_names"]
