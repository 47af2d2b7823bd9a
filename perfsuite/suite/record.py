"""What the suite stores with each benchmark: the ``extra_info`` schema, built from a variant's evidence.

Every table row is read back from this dict by ``report.results.result_from_benchmark``, the
same reader ``perfsuite report`` uses on saved files, so the live table and a saved run agree.
"""

from __future__ import annotations

import dataclasses

from perfsuite.attention.cost_model import (
    kv_read_bytes,
    mode_bytes,
    mode_flop,
    padding_bytes,
    padding_flop,
)
from perfsuite.trace.structure import fingerprint
from perfsuite.measure.copy_kinds import copies_by_kind
from perfsuite.measure.evidence import Evidence
from perfsuite.storage import EXTRA_INFO_SCHEMA_VERSION


def compile_info(evidence: Evidence) -> dict[str, object] | None:
    """torch.compile facts of a compiled variant's evidence (None for eager variants)."""
    if not evidence.variant.compiled:
        return None
    first = evidence.compile_first_call
    return {
        "first_call_s": evidence.first_call_s,
        "graphs_compiled": first.graphs_compiled,
        "graph_breaks": first.graph_breaks,
        "graphs_compiled_while_profiled": evidence.compile_while_profiled.graphs_compiled,
    }


def benchmark_extra_info(evidence: Evidence) -> dict[str, object]:
    """The facts stored with each saved benchmark (units in the key names; counts per timed step)."""
    case, first = evidence.case, evidence.steps[0]
    read, written = mode_bytes(case, evidence.mode)
    lane = "device" if case.device == "cuda" else "cpu"
    return {
        "schema_version": EXTRA_INFO_SCHEMA_VERSION,
        "variant": evidence.variant.name,
        "case": case.id,
        "mode": evidence.mode,
        "case_fields": dataclasses.asdict(case),
        "sdpa_backend": evidence.variant.sdpa_backend,
        "flop": mode_flop(case, evidence.mode),
        "bytes_read": read,
        "bytes_written": written,
        "layout": None
        if case.layout.is_plain
        else {
            "padding_flop": padding_flop(case),
            "padding_bytes": padding_bytes(case),
            "kv_read_bytes": kv_read_bytes(case),
        },
        "cpu_ops_per_step": first.cpu_op_count,
        "kernels_per_step": first.kernel_count,
        "score_copies_per_step": evidence.score_copies(lane)[0],
        "copies_by_kind": copies_by_kind(first, case),
        "memcpy_per_step": first.memcpy_counts,
        "allocated_bytes_per_step": first.allocated_bytes.get(case.device, 0),
        "peak_memory_bytes": first.peak_bytes.get(case.device, 0),
        "max_abs_error": evidence.comparison.max_abs_error if evidence.comparison else None,
        "correct": (evidence.comparison.failure is None and not evidence.deceptions)
        if evidence.comparison
        else (False if evidence.deceptions else None),
        "deceptions": list(evidence.deceptions),
        "kept_bytes_per_call": evidence.kept_bytes_per_call,
        "bitwise_reproducible": evidence.bitwise_reproducible,
        "not_compared": evidence.not_compared,
        "compile": compile_info(evidence),
        "saved_for_backward": dataclasses.asdict(evidence.saved_for_backward)
        if evidence.saved_for_backward
        else None,
        "sdpa_backends_ran": first.sdpa_backends,
        "score_accounting": evidence.score_accounting[0].to_dict()
        if evidence.score_accounting
        else None,
        "output_stride": list(evidence.output_stride),
        "output_layout": evidence.output_layout,
        "variant_warnings": list(evidence.warnings),
        "fingerprint": fingerprint(
            first,
            case.device,
            evidence.score_accounting[0].by_label() if evidence.score_accounting else None,
            evidence.saved_for_backward.bytes if evidence.saved_for_backward else None,
        ),
        "trace_file": str(evidence.trace_path),
    }
