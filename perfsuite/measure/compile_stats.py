"""What ``torch.compile`` did: graphs compiled and graph breaks, counted around a call.

Read from TorchDynamo's counters (``torch._dynamo.utils.counters``), the same ones
``torch._dynamo.explain`` and ``TORCH_LOGS=recompiles`` report: ``stats/unique_graphs`` grows by
one for every graph compiled (a first compile or a recompile), ``graph_break`` counts breaks by
reason. Counters are process-wide, so a delta is only meaningful around calls of one function.
"""

from __future__ import annotations

import dataclasses
import sys


@dataclasses.dataclass(frozen=True)
class CompileSnapshot:
    """Dynamo's counters at one moment: graphs compiled so far and graph breaks by reason."""

    graphs: int
    graph_breaks: dict[str, int]


@dataclasses.dataclass(frozen=True)
class CompileActivity:
    """What was compiled between two snapshots.

    ``graphs_compiled``: graphs Dynamo compiled (0 when every call hit its cache);
    ``graph_breaks``: reason -> count of the breaks seen while compiling them.
    """

    graphs_compiled: int
    graph_breaks: dict[str, int]

    @property
    def graph_break_count(self) -> int:
        return sum(self.graph_breaks.values())


def snapshot() -> CompileSnapshot:
    """The current counters; zeros while TorchDynamo is not imported (nothing can have been
    compiled; importing it here would cost every process about 2 s of start-up)."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return CompileSnapshot(0, {})
    return CompileSnapshot(
        int(utils.counters["stats"]["unique_graphs"]), dict(utils.counters["graph_break"])
    )


def since(before: CompileSnapshot) -> CompileActivity:
    """Compile activity from ``before`` until now."""
    now = snapshot()
    breaks = {
        reason: count - before.graph_breaks.get(reason, 0)
        for reason, count in now.graph_breaks.items()
    }
    return CompileActivity(now.graphs - before.graphs, {r: c for r, c in breaks.items() if c > 0})
