"""Findings shared by the history dashboard and the single-run page: the post's findings as checks, and the
ratio of a runner-up to the fastest implementation with its interval."""

from __future__ import annotations

from collections.abc import Iterable

from perfsuite.dashboard.model import Check


def hides_keys(case_id: str) -> bool | None:
    """Whether the case's mask hides some key from some query (``attention.masks.MaskKind.hides_keys``): only
    then does the out-of-place ``masked_fill`` copy the scores. None for a case id perfsuite cannot parse."""
    from perfsuite.attention.cases import parse_case_id
    from perfsuite.attention.masks import mask_kind

    try:
        return mask_kind(parse_case_id(case_id).mask).hides_keys
    except ValueError:
        return None


# The post's findings: the out-of-place masked_fill copies the score matrix, masked_fill_ does not;
# a pinned SDPA backend runs its own kernel (torch's SDPBackend names, as the structure records them).
SCORE_COPIES = {"naive": "copies the score matrix", "naive_inplace": "no score copy"}
PINNED = {
    "sdpa_math": "MATH",
    "sdpa_flash": "FLASH_ATTENTION",
    "sdpa_efficient": "EFFICIENT_ATTENTION",
    "sdpa_cudnn": "CUDNN_ATTENTION",
}


def checks_from(
    newest: Iterable[tuple[str, str, str, str, float | None, dict | None]],
) -> list[Check]:
    """The post's findings on the newest point of each benchmark: ``newest`` yields (variant, case id, testbed,
    torch, score copies per forward, structural fingerprint). naive copies the scores once when the mask hides
    keys and not otherwise (``Variant.expected_score_copies``); naive_inplace never does."""
    found = []
    for variant, case_id, testbed, torch, copies, structure in newest:
        hidden = hides_keys(case_id)
        if variant in SCORE_COPIES and copies is not None and hidden is not None:
            wanted = 1 if variant == "naive" and hidden else 0
            finding = (
                f"{variant} {SCORE_COPIES[variant]}"
                if wanted or variant == "naive_inplace"
                else "naive makes no copy when the mask hides nothing"
            )
            found.append(
                Check(
                    f"{finding} ({case_id})",
                    variant,
                    testbed,
                    torch,
                    f"{wanted} score cop{'y' if wanted == 1 else 'ies'}",
                    f"{copies:g} score copies per forward",
                    copies == wanted,
                )
            )
        if variant in PINNED and structure is not None:
            ran = structure.get("sdpa_backends") or []
            ok = any(b.split(" ")[0] == PINNED[variant] for b in ran)
            found.append(
                Check(
                    f"pinned {PINNED[variant]} ran its kernel ({case_id})",
                    variant,
                    testbed,
                    torch,
                    PINNED[variant],
                    ", ".join(ran) or "no SDPA backend op",
                    ok,
                )
            )
    return found


def fastest_ratio(
    fast: tuple[float, float, float], other: tuple[float, float, float]
) -> tuple[float, float, float] | None:
    """(ratio, low, high) of ``other``'s median to ``fast``'s, each given as (median, interval low, interval high)
    in seconds; the interval is the ratio of the intervals' far ends (conservative). None when a bound is not positive."""
    (m0, lo0, hi0), (m1, lo1, hi1) = fast, other
    if min(m0, lo0, hi0, lo1) <= 0:
        return None
    return m1 / m0, lo1 / hi0, hi1 / lo0


def case_dtype(case_id: str) -> str:
    """``fp32`` from ``b2h4s64d32-fp32-causal-cpu``: the case id's second field (``attention.cases``)."""
    parts = case_id.split("-")
    return parts[1] if len(parts) > 1 else "?"


def roofline_fraction(
    tflops: float | None,
    flop: int | None,
    bytes_moved: int | None,
    dtype: str,
    peaks: dict | None,
) -> tuple[float, str] | None:
    """(achieved / attainable, which roof): attainable = min(the ``dtype`` matmul peak, arithmetic intensity
    ``flop / bytes_moved`` x the copy bandwidth) under the measured peaks (``perfsuite.measure.peaks``:
    ``matmul_tflops`` per dtype in TFLOP/s, ``memory_gbps`` in GB/s); Williams, Waterman and Patterson 2009,
    "Roofline". ``tflops``: the achieved rate, TFLOP/s. None without peaks, a rate, FLOP or bytes."""
    if not peaks or tflops is None or not flop or not bytes_moved or not peaks.get("memory_gbps"):
        return None
    peak = (peaks.get("matmul_tflops") or {}).get(dtype)
    if not peak:
        return None
    memory_tflops = flop / bytes_moved * peaks["memory_gbps"] / 1e3
    if peak <= memory_tflops:
        return tflops / peak, f"{peak:.3g} TFLOP/s matmul peak"
    return tflops / memory_tflops, f"{peaks['memory_gbps']:.3g} GB/s bandwidth roof"
