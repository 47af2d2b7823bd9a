"""Named case sets for the timed suite, chosen with ``--perfsuite-case-set NAME``.

Each set gives, per device, shapes (``B x H[:Hkv] x S[:Skv] x D``), dtypes and masks; the
suite runs their product. CPU sets are sized for a 2-core machine; CUDA sets for one
datacenter GPU (the post's case is ``8x16x1024x64`` bf16 causal).
"""

from __future__ import annotations

import dataclasses

from perfsuite.attention.cases import build_cases, parse_shape
from perfsuite.errors import did_you_mean


@dataclasses.dataclass(frozen=True)
class DeviceCases:
    """Shapes, dtypes and masks of a set on one device (strings as the ini keys take them).

    ``transposed``: a shape also run with query/key/value whose last dimension is not contiguous
    (``-transposed`` case ids), in the set's first dtype and mask, so the skip reason of the kernels
    that refuse that layout is seen without asking for it; "" for none. ``score_mods``: the score
    modifications every case is built with (``perfsuite.attention.score_mods.parse_score_mods``:
    ``none``, ``alibi``, ``softcap50-sinks``, ...), space-separated.
    ``cases``: exact case ids added to the product, for cases a shape cannot say (layouts:
    ``-packed-uniform``, ``-paged16-onelong``, ``-dv128``; ``perfsuite.attention.layouts``);
    "" for none. Like ``transposed``, they are added when the set's shapes, dtypes and masks are used.
    """

    shapes: str
    dtypes: str
    masks: str
    transposed: str = ""
    score_mods: str = "none"
    cases: str = ""


@dataclasses.dataclass(frozen=True)
class CaseSet:
    """A named set: what it is for, and its cases on each device."""

    description: str
    cpu: DeviceCases
    cuda: DeviceCases


CASE_SETS: dict[str, CaseSet] = {
    "smoke": CaseSet(
        "one small causal case per device: a fast end-to-end check",
        DeviceCases("2x8x256x64", "fp32", "causal", transposed="2x8x256x64"),
        DeviceCases("8x16x1024x64", "bf16", "causal", transposed="8x16x1024x64"),
    ),
    "default": CaseSet(
        "the post's causal self-attention at two lengths (CPU: fp32; bf16 is 10x slower on CPUs without bf16 matmul)",
        DeviceCases("2x8x256x64 1x8x1024x64", "fp32", "causal", transposed="2x8x256x64"),
        DeviceCases(
            "8x16x1024x64 4x16x4096x64 2x16x8192x64", "bf16", "causal", transposed="8x16x1024x64"
        ),
    ),
    "llm-decode": CaseSet(
        "one new token against a KV cache (seq_len_q=1, bottom-right causal), grouped-query heads",
        DeviceCases("8x16:4x1:2048x64 1x16:4x16:2048x64", "fp32 bf16", "causal_br"),
        DeviceCases(
            "32x32:8x1:4096x128 8x32:8x1:32768x128 1x32:8x128:8192x128", "bf16", "causal_br"
        ),
    ),
    "long-context": CaseSet(
        "long sequences, causal and sliding window",
        DeviceCases("1x4x4096x64", "fp32", "causal window512"),
        DeviceCases("1x16x16384x64 1x16x32768x64", "bf16", "causal window4096"),
    ),
    "gqa": CaseSet(
        "grouped-query (4 and 8 query heads per kv head) and multi-query attention",
        DeviceCases("2x8:2x512x64 2x8:1x512x64", "fp32 bf16", "causal"),
        DeviceCases("4x32:8x2048x128 4x32:1x2048x128", "bf16", "causal"),
    ),
    "masks": CaseSet(
        "every mask kind on one shape, prefill with a cached prefix (seq_len_q < seq_len_kv), and "
        "queries that see no key (a score modification applied after the mask shows there)",
        DeviceCases(
            "2x4x256:384x64",
            "fp32",
            "noncausal causal causal_br bool additive padding window128",
            cases="b2h4q48k32d64-fp32-causal_br-cpu",
        ),
        DeviceCases(
            "4x16x1024:2048x64",
            "bf16",
            "noncausal causal causal_br bool additive padding window512",
        ),
    ),
}


@dataclasses.dataclass(frozen=True)
class ModelShape:
    """The attention shape of a released model, with where the numbers come from.

    ``num_heads``/``num_kv_heads``/``head_dim``: one attention layer of the model (every layer
    has the same). ``sliding_window``: keys a query sees in its sliding-window layers, or None.
    ``source``: the model's config the numbers are read from. ``score_mods``: how the model
    modifies its attention scores (``perfsuite.attention.score_mods.parse_score_mods``), ``none``
    for plain attention. ``alternating``: sliding-window layers alternate with full (causal) ones.
    """

    model: str
    num_heads: int
    num_kv_heads: int
    head_dim: int
    source: str
    sliding_window: int | None = None
    score_mods: str = "none"
    alternating: bool = False

    def shape(self, batch: int, seq_len_q: int, seq_len_kv: int) -> str:
        """``B x H:Hkv x Sq:Skv x D`` as the shapes setting writes it."""
        heads = (
            f"{self.num_heads}:{self.num_kv_heads}"
            if self.num_kv_heads != self.num_heads
            else f"{self.num_heads}"
        )
        seq = f"{seq_len_q}:{seq_len_kv}" if seq_len_q != seq_len_kv else f"{seq_len_q}"
        return f"{batch}x{heads}x{seq}x{self.head_dim}"


# One attention call of each model: its head counts and head_dim, with short sequences on the CPU
# (one call, so the number of layers does not matter; the lengths are what a 2-core CPU runs in minutes).
MODEL_SHAPES: dict[str, ModelShape] = {
    "llama-3-8b": ModelShape(
        "Llama-3-8B (grouped-query decoder)",
        32,
        8,
        128,
        "meta-llama/Meta-Llama-3-8B config.json: hidden_size 4096, num_attention_heads 32, "
        "num_key_value_heads 8 (head_dim 4096 / 32)",
    ),
    "gemma-3-1b": ModelShape(
        "Gemma-3-1B (sliding-window decoder, multi-query)",
        4,
        1,
        256,
        "google/gemma-3-1b-pt config.json: num_attention_heads 4, num_key_value_heads 1, "
        "head_dim 256, sliding_window 512, query_pre_attn_scalar 256 (scale 256**-0.5)",
        sliding_window=512,
    ),
    "gemma-2-2b": ModelShape(
        "Gemma-2-2B (logit softcapping, sliding-window layers alternating with global ones)",
        8,
        4,
        256,
        "google/gemma-2-2b config.json: num_attention_heads 8, num_key_value_heads 4, head_dim 256, "
        "attn_logit_softcapping 50.0, sliding_window 4096 (every other layer), query_pre_attn_scalar "
        "256 (scale 256**-0.5)",
        sliding_window=4096,
        score_mods="softcap50",
        alternating=True,
    ),
    "gpt-oss-20b": ModelShape(
        "gpt-oss-20b (attention sinks, sliding-window layers alternating with full ones)",
        64,
        8,
        64,
        "openai/gpt-oss-20b config.json: num_attention_heads 64, num_key_value_heads 8, head_dim 64, "
        "sliding_window 128, layer_types alternating sliding_attention / full_attention; a learned "
        "sink logit per head (the model card's attention sinks)",
        sliding_window=128,
        score_mods="sinks",
        alternating=True,
    ),
    "bloom-7b1": ModelShape(
        "BLOOM-7b1 (ALiBi position bias, causal)",
        32,
        32,
        128,
        "bigscience/bloom-7b1 config.json: n_head 32, hidden_size 4096 (head_dim 128); ALiBi slopes "
        "of transformers' build_alibi_tensor (the geometric slopes) in place of position embeddings",
        score_mods="alibi",
    ),
    "bert-base": ModelShape(
        "BERT-base (bidirectional encoder)",
        12,
        12,
        64,
        "google-bert/bert-base-uncased config.json (= transformers' BertConfig() defaults): "
        "hidden_size 768, num_attention_heads 12",
    ),
}


def _model_set(
    key: str, what: str, cpu: tuple[str, str, str], cuda: tuple[str, str, str]
) -> CaseSet:
    """A model's set; a model with a softcap also gets ``unseen_rows_case`` on each device."""
    model = MODEL_SHAPES[key]
    mods = (
        "" if model.score_mods == "none" else f" and its score modifications ({model.score_mods})"
    )
    unseen = " (and queries that see no key)" if "softcap" in model.score_mods else ""
    return CaseSet(
        f"{model.model}: {what}{unseen} with its heads and head_dim{mods}; source: {model.source}",
        DeviceCases(
            *cpu,
            score_mods=model.score_mods,
            cases=unseen_rows_case(model, cpu[1].split()[0], "cpu") if unseen else "",
        ),
        DeviceCases(
            *cuda,
            score_mods=model.score_mods,
            cases=unseen_rows_case(model, cuda[1].split()[0], "cuda") if unseen else "",
        ),
    )


def unseen_rows_case(model: ModelShape, dtype: str, device: str) -> str:
    """The id of a small case on ``device`` with ``model``'s heads and head dim in which the first 4 of 12
    queries see no key (bottom-right causal over 8 keys): the one place where the order of a softcap
    and the mask shows (a softcap after the mask gives hidden keys ``-softcap``, not ``-inf``, and
    such a query averages the values instead of returning zeros); elsewhere a hidden key's weight
    ``exp(-softcap)`` is below every tolerance."""
    shape = parse_shape(model.shape(1, 12, 8))
    [case] = build_cases([shape], [dtype], device, ["causal_br"], "all")
    return case.id


_LLAMA, _GEMMA, _BERT = (
    MODEL_SHAPES["llama-3-8b"],
    MODEL_SHAPES["gemma-3-1b"],
    MODEL_SHAPES["bert-base"],
)
_GEMMA2, _GPT_OSS, _BLOOM = (
    MODEL_SHAPES["gemma-2-2b"],
    MODEL_SHAPES["gpt-oss-20b"],
    MODEL_SHAPES["bloom-7b1"],
)
CASE_SETS.update(
    {
        # prefill of 256 tokens (bottom-right causal equals causal when seq_len_q == seq_len_kv), decode of
        # 4 sequences against a 1024-token cache
        "model-llama-3-8b": _model_set(
            "llama-3-8b",
            "prefill and decode",
            (f"{_LLAMA.shape(1, 256, 256)} {_LLAMA.shape(4, 1, 1024)}", "fp32", "causal_br"),
            (f"{_LLAMA.shape(4, 4096, 4096)} {_LLAMA.shape(32, 1, 8192)}", "bf16", "causal_br"),
        ),
        # prefill longer than the window, so it bites; decode against a cache twice the window
        "model-gemma-3-1b": _model_set(
            "gemma-3-1b",
            "prefill and decode",
            (
                f"{_GEMMA.shape(1, 1024, 1024)} {_GEMMA.shape(4, 1, 2048)}",
                "fp32",
                f"window{_GEMMA.sliding_window}",
            ),
            (
                f"{_GEMMA.shape(4, 8192, 8192)} {_GEMMA.shape(32, 1, 32768)}",
                "bf16",
                f"window{_GEMMA.sliding_window}",
            ),
        ),
        # a chunk of 64 queries at the end of 4160 keys (chunked prefill: the 4096 window hides the first
        # 64 keys, on the CPU too) and decode; both layer kinds: the sliding window and the global causal layers
        "model-gemma-2-2b": _model_set(
            "gemma-2-2b",
            "chunked prefill and decode, local (window) and global layers",
            (
                f"{_GEMMA2.shape(1, 64, 4160)} {_GEMMA2.shape(2, 1, 4160)}",
                "fp32",
                f"window{_GEMMA2.sliding_window} causal_br",
            ),
            (
                f"{_GEMMA2.shape(4, 8192, 8192)} {_GEMMA2.shape(32, 1, 8192)}",
                "bf16",
                f"window{_GEMMA2.sliding_window} causal_br",
            ),
        ),
        "model-gpt-oss-20b": _model_set(
            "gpt-oss-20b",
            "prefill and decode, sliding-window and full layers",
            (
                f"{_GPT_OSS.shape(1, 256, 256)} {_GPT_OSS.shape(2, 1, 1024)}",
                "fp32",
                f"window{_GPT_OSS.sliding_window} causal_br",
            ),
            (
                f"{_GPT_OSS.shape(4, 4096, 4096)} {_GPT_OSS.shape(64, 1, 8192)}",
                "bf16",
                f"window{_GPT_OSS.sliding_window} causal_br",
            ),
        ),
        "model-bloom-7b1": _model_set(
            "bloom-7b1",
            "prefill and decode",
            (f"{_BLOOM.shape(1, 256, 256)} {_BLOOM.shape(2, 1, 1024)}", "fp32", "causal_br"),
            (f"{_BLOOM.shape(4, 2048, 2048)} {_BLOOM.shape(32, 1, 2048)}", "bf16", "causal_br"),
        ),
        # a batch of 128-token sentences, right-padded per row
        "model-bert-base": _model_set(
            "bert-base",
            "encoder self-attention over padded sentences",
            (f"{_BERT.shape(8, 128, 128)}", "fp32", "padding noncausal"),
            (f"{_BERT.shape(64, 512, 512)}", "bf16 fp16", "padding noncausal"),
        ),
    }
)


# Serving workloads (layout cases, perfsuite.attention.layouts). Each names its source; CPU cases
# keep the heads and head dims and scale batch and lengths down to what a 2-core CPU runs in seconds.
SERVING_SOURCES = {
    "llama-4-decode": (
        "tritonbench operators/decoding_attention (Llama-4 decode: 40 query heads over 8 KV heads, "
        "head_dim 128, q_len 1 and 4, batch 16-128, cache 1k-32k); split-KV over pages: "
        "Dao et al., Flash-Decoding for long-context inference (2023)"
    ),
    "deepseek-v3-mla": (
        "deepseek-ai/DeepSeek-V3 config.json: num_attention_heads 128, qk_nope_head_dim 128 + "
        "qk_rope_head_dim 64 = query/key head dim 192, v_head_dim 128"
    ),
    "ragged-prefill": (
        "FlashInfer's ragged prefill benchmark and serving batches: sequences of mixed lengths "
        "packed together, against the same batch padded; chunked prefill over a paged cache: "
        "vLLM's chunked prefill and FlashInfer's BatchPrefillWithPagedKVCacheWrapper (packed new "
        "tokens per sequence behind a block table)"
    ),
}


def _ids(text: str) -> str:
    return " ".join(text.split())


CASE_SETS.update(
    {
        "llama-4-decode": CaseSet(
            "decode of 1 and 4 tokens over a paged KV cache (page 16, mixed lengths), split-KV, "
            "and split-KV over the pages; "
            f"source: {SERVING_SOURCES['llama-4-decode']}",
            DeviceCases(
                "",
                "fp32",
                "causal_br",
                cases=_ids(
                    """b4h40kv8q1k256d128-fp32-causal_br-paged16-uniform-cpu
                    b4h40kv8q4k256d128-fp32-causal_br-paged16-onelong-cpu
                    b4h40kv8q1k256d128-fp32-causal_br-split4-cpu
                    b4h40kv8q1k256d128-fp32-causal_br-paged16-uniform-split4-cpu"""
                ),
            ),
            DeviceCases(
                "",
                "bf16",
                "causal_br",
                cases=_ids(
                    """b16h40kv8q1k8192d128-bf16-causal_br-paged256-uniform-cuda
                    b64h40kv8q4k4096d128-bf16-causal_br-paged256-uniform-cuda
                    b128h40kv8q1k1024d128-bf16-causal_br-paged256-onelong-cuda
                    b16h40kv8q1k32768d128-bf16-causal_br-split8-cuda
                    b16h40kv8q1k32768d128-bf16-causal_br-paged256-uniform-split8-cuda"""
                ),
            ),
        ),
        "deepseek-v3-mla": CaseSet(
            "MLA prefill and decode: query/key head dim 192, value head dim 128 (and the reverse, "
            f"64/128, for variants that take any value head dim); source: {SERVING_SOURCES['deepseek-v3-mla']}",
            DeviceCases(
                "",
                "fp32",
                "causal_br",
                cases=_ids(
                    """b1h16s128d192-fp32-causal_br-dv128-cpu
                    b4h16q1k256d192-fp32-causal_br-dv128-cpu
                    b4h16q1k256d192-fp32-causal_br-paged16-uniform-dv128-cpu
                    b1h8s128d64-fp32-causal_br-dv128-cpu"""
                ),
            ),
            DeviceCases(
                "",
                "bf16",
                "causal_br",
                cases=_ids(
                    """b1h128s4096d192-bf16-causal_br-dv128-cuda
                    b32h128q1k4096d192-bf16-causal_br-dv128-cuda
                    b32h128q1k4096d192-bf16-causal_br-paged256-uniform-dv128-cuda
                    b2h16s2048d64-bf16-causal_br-dv128-cuda"""
                ),
            ),
        ),
        "ragged-prefill": CaseSet(
            "causal prefill of sequences of mixed lengths (uniform; one long and many short), packed "
            "and padded, so padding's cost shows, a chunked prefill over cached prefixes (queries "
            "aligned bottom-right), and chunked prefill over a paged cache (packed chunks of their own "
            f"lengths behind a block table); source: {SERVING_SOURCES['ragged-prefill']}",
            DeviceCases(
                "",
                "fp32",
                "causal",
                cases=_ids(
                    """b8h8kv2s128d64-fp32-causal-packed-uniform-cpu
                    b8h8kv2s128d64-fp32-causal-padded-uniform-cpu
                    b8h8kv2s256d64-fp32-causal-packed-onelong-cpu
                    b8h8kv2s256d64-fp32-causal-padded-onelong-cpu
                    b8h8kv2q64k192d64-fp32-causal_br-packed-uniform-cpu
                    b4h8kv2q32k128d64-fp32-causal_br-packedpaged16-uniform-cpu"""
                ),
            ),
            DeviceCases(
                "",
                "bf16",
                "causal",
                cases=_ids(
                    """b32h32kv8s2048d128-bf16-causal-packed-uniform-cuda
                    b32h32kv8s2048d128-bf16-causal-padded-uniform-cuda
                    b32h32kv8s8192d128-bf16-causal-packed-onelong-cuda
                    b32h32kv8s8192d128-bf16-causal-padded-onelong-cuda
                    b8h32kv8s2048d128-bf16-causal-fp8-cuda
                    b8h32kv8q256k2048d128-bf16-causal_br-packedpaged256-uniform-cuda"""
                ),
            ),
        ),
    }
)


def get_case_set(name: str) -> CaseSet:
    """The set called ``name``; ``ValueError`` lists the known sets otherwise."""
    if name not in CASE_SETS:
        raise ValueError(
            f"case set {name!r} is unknown{did_you_mean(name, CASE_SETS)}; known: {', '.join(CASE_SETS)}"
        )
    return CASE_SETS[name]
