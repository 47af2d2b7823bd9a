"""Score accounting: how many score-sized tensors one step writes, and which of them are copies.

The score matrix of a case is ``[batch, num_heads, seq_len_q, seq_len_kv]`` (``AttentionCase.score_shape``).
Per profiled step this module counts, from the profiler's ATen op records with shapes
(``Input Dims``, ``Input type``, ``Input Strides``), every **write of a score-sized tensor**:

* the op that writes is the innermost writing ATen op (no writing op runs inside it on its
  thread), so ``masked_fill`` -> ``clone`` -> ``copy_`` counts once, as the ``copy_``, and
  ``matmul`` -> ``bmm`` once, as the ``bmm``; views (``expand``,
  ``transpose``, ``_unsafe_view``), allocations (``empty*``), reductions (``amax``, ``sum``),
  fused attention kernels and autograd's node records (``MaskedFillBackward0``: what a node
  writes is in the ATen ops it calls; a view's node calls none) write no score-sized tensor;
* its output shape is read from the record: input 0 for in-place ops (``masked_fill_``,
  ``copy_``), the matrix-product rule for ``bmm``/``mm``/``baddbmm``/``addmm``, and the
  broadcast of the tensor inputs for every other (elementwise) op (``add``, ``_softmax``, ``where``);
* an output with the score's element count counts 1 (``bmm``'s ``[B*H, Sq, Skv]`` too); a piece
  of the score matrix (``[..., c, Skv]`` query chunks, ``[..., Sq, c]`` key chunks, with
  ``1 < c != head_dim``: ``[..., head_dim, Skv]`` is a transposed key) counts its fraction ``numel / (B*H*Sq*Skv)``, so the pieces of a chunked
  variant sum to what the whole matrix would count.

Each write is labelled by ``kind``:

* ``"copy"``: a same-dtype ``copy_`` from a score-sized, non-broadcast source (the clone inside
  an out-of-place ``masked_fill``, a ``contiguous`` of transposed scores): a duplicate;
* ``"cast"``: a ``copy_`` between dtypes (an fp32 softmax in a bf16 model, SDPA math's upcast);
* ``"mask expansion"``: a ``copy_`` whose source is a bool tensor (into any dtype) or a broadcast view (a zero
  stride in a dimension of size > 1): a mask materialised per head or batch, not a score copy;
* ``"computed"``: any other op writing score-sized data (``bmm``, ``mul``, an out-of-place
  ``add`` of an additive mask, ``masked_fill_``, ``_softmax``).

The post's findings restated: per forward that hides keys, ``naive`` makes 1 copy,
``naive_inplace`` and SDPA's fused backends none.

Limits: Inductor-compiled code runs its own kernels, not ATen ops, so only what it calls
through ATen (extern matmuls) is seen; an op with ``out=`` or a non-broadcast output rule not
listed here (``cat``, ``index``) is read by the broadcast rule.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import re
from typing import Any
from collections.abc import Iterable

from perfsuite.trace.summary import TraceIndex

KINDS = ("copy", "cast", "mask expansion", "computed")

# Ops that return views or fresh uninitialised memory, reduce, or are fused attention: no score-sized write.
_NO_WRITE = frozenset(
    {
        "aten::as_strided",
        "aten::view",
        "aten::_unsafe_view",
        "aten::reshape",
        "aten::_reshape_alias",
        "aten::expand",
        "aten::expand_as",
        "aten::transpose",
        "aten::t",
        "aten::permute",
        "aten::select",
        "aten::slice",
        "aten::unsqueeze",
        "aten::squeeze",
        "aten::alias",
        "aten::detach",
        "aten::resolve_conj",
        "aten::resolve_neg",
        "aten::split",
        "aten::split_with_sizes",
        "aten::chunk",
        "aten::narrow",
        "aten::unbind",
        "aten::unflatten",
        "aten::flatten",
        "aten::view_as",
        "aten::contiguous",
        "aten::clone",
        "aten::to",
        "aten::_to_copy",
        "aten::lift_fresh",
        "aten::empty",
        "aten::empty_like",
        "aten::empty_strided",
        "aten::new_empty",
        "aten::new_empty_strided",
        "aten::sum",
        "aten::amax",
        "aten::amin",
        "aten::max",
        "aten::min",
        "aten::mean",
        "aten::logsumexp",
        "aten::all",
        "aten::any",
        "aten::argmax",
        "aten::argmin",
        "aten::norm",
        "aten::var",
        "aten::std",
        "aten::prod",
        "aten::item",
        "aten::_local_scalar_dense",
        "aten::is_nonzero",
        "aten::size",
        "aten::stride",
    }
)
_FUSED_ATTENTION_MARKERS = (
    "scaled_dot_product",
    "flash_attention",
    "efficient_attention",
    "cudnn_attention",
    "flex_attention",
)
# Autograd node records in a backward step (``BmmBackward0``, ``ViewBackward0``): wrappers, never writers.
_AUTOGRAD_NODE = re.compile(r"Backward\d*$")
_MATMULS = {"aten::bmm", "aten::mm", "aten::baddbmm", "aten::addmm", "aten::matmul"}
_NOT_TENSOR_TYPES = ("", "Scalar", "ScalarList", "TensorList", "GenericList")


@dataclasses.dataclass(frozen=True)
class ScoreWrite:
    """One score-sized write in a step.

    ``op``: the innermost ATen op that wrote (``aten::copy_``); ``path``: the ops around it,
    outermost first (``("aten::masked_fill", "aten::clone", "aten::copy_")``); ``kind``: one
    of ``KINDS``; ``shape``: the written tensor's dims; ``fraction``: its element count over the
    score matrix's (1.0 for a whole matrix, 0.25 for a quarter chunk).
    """

    op: str
    path: tuple[str, ...]
    kind: str
    shape: tuple[int, ...]
    fraction: float

    @property
    def label(self) -> str:
        """``copy [2x8x256x256] in aten::masked_fill > aten::clone > aten::copy_``."""
        return f"{self.kind} [{'x'.join(map(str, self.shape))}] in {' > '.join(self.path)}"


@dataclasses.dataclass(frozen=True)
class ScoreAccounting:
    """Score-sized writes of one profiled step (a forward, a backward, or both).

    Figures are in score matrices per step (floats: chunks count their fraction).
    ``written``: all score-sized writes; ``copies``/``casts``/``mask_expansions``: the writes of
    each labelled kind (see the module docstring); ``writes``: every write, in time order.
    """

    score_shape: tuple[int, ...]
    writes: tuple[ScoreWrite, ...]

    def total(self, kind: str | None = None) -> float:
        """Score matrices written by ``kind`` (all kinds when None), rounded to 1e-9 against float noise."""
        if kind is not None and kind not in KINDS:
            raise ValueError(f"score write kind {kind!r}; allowed: {', '.join(KINDS)}")
        return round(sum(w.fraction for w in self.writes if kind is None or w.kind == kind), 9)

    @property
    def written(self) -> float:
        return self.total()

    @property
    def copies(self) -> float:
        return self.total("copy")

    @property
    def casts(self) -> float:
        return self.total("cast")

    @property
    def mask_expansions(self) -> float:
        return self.total("mask expansion")

    def by_kind(self) -> dict[str, float]:
        """``{"copy": 1.0, "cast": 0.0, "mask expansion": 0.0, "computed": 3.0}``."""
        return {kind: self.total(kind) for kind in KINDS}

    def by_label(self) -> dict[str, int]:
        """Writes counted by ``kind [shape] in path``: the fingerprint's deterministic form."""
        return dict(sorted(collections.Counter(w.label for w in self.writes).items()))

    def describe(self) -> str:
        """``4 written (1 copy, 0 casts, 0 mask expansions)``: the table's cell."""
        return (
            f"{_number(self.written)} written ({_number(self.copies)} cop{'y' if self.copies == 1 else 'ies'}, "
            f"{_number(self.casts)} cast{'' if self.casts == 1 else 's'}, "
            f"{_number(self.mask_expansions)} mask expansion{'' if self.mask_expansions == 1 else 's'})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "score_shape": list(self.score_shape),
            "written": self.written,
            "copies": self.copies,
            "casts": self.casts,
            "mask_expansions": self.mask_expansions,
            "by_label": self.by_label(),
        }


def copy_count_words(counted: float, expected: float) -> str:
    """How a failure's first line says a score copy count: ``1 extra copy of the score matrix per
    forward`` (``counted`` above ``expected``), ``1 copy of the score matrix per forward fewer than
    expected (1)`` below it; copies per forward, as counts or accounted fractions."""
    difference = abs(counted - expected)
    amount = _number(difference)
    copies = "copy" if difference == 1 else "copies"
    if counted > expected:
        return f"{amount} extra {copies} of the score matrix per forward"
    return f"{amount} {copies} of the score matrix per forward fewer than expected ({_number(expected)})"


def copy_labels(accounting: ScoreAccounting | None) -> list[str]:
    """The ``copy`` writes' labels of one step (``copy [1x2x16x16] in aten::masked_fill > aten::clone >
    aten::copy_``), each once in time order: where a score copy came from."""
    if accounting is None:
        return []
    return list(dict.fromkeys(w.label for w in accounting.writes if w.kind == "copy"))


def _number(value: float) -> str:
    return f"{value:g}" if value == int(value) else f"{value:.2f}"


def _tensor_dims(event: dict[str, Any]) -> list[tuple[int, ...]]:
    """Dims of the tensor arguments of an op record, in order."""
    args = event.get("args", {})
    dims, types = args.get("Input Dims") or [], args.get("Input type") or []
    found = []
    for index, value in enumerate(dims):
        kind = types[index] if index < len(types) else ""
        if (
            isinstance(value, list)
            and kind not in _NOT_TENSOR_TYPES
            and all(isinstance(d, int) for d in value)
        ):
            found.append(tuple(value))
    return found


def _broadcast(shapes: Iterable[tuple[int, ...]]) -> tuple[int, ...] | None:
    result: list[int] = []
    for shape in shapes:
        padded = [1] * (len(shape) - len(result)) + result
        other = [1] * (len(result) - len(shape)) + list(shape)
        merged = []
        for a, b in zip(padded, other):
            if a != b and 1 not in (a, b):
                return None
            merged.append(max(a, b) if 0 not in (a, b) else 0)
        result = merged
    return tuple(result) if result else None


def output_dims(event: dict[str, Any]) -> tuple[int, ...] | None:
    """The dims an op record wrote, by the rules of the module docstring; None when it writes nothing known."""
    name = str(event.get("name", ""))
    if (
        name in _NO_WRITE
        or _AUTOGRAD_NODE.search(name)
        or any(marker in name for marker in _FUSED_ATTENTION_MARKERS)
    ):
        return None
    dims = _tensor_dims(event)
    if not dims:
        return None
    if name.endswith("_") and not name.endswith("__"):
        return dims[0]  # in place: writes its first argument
    if name in _MATMULS:
        a, b = (dims[-2], dims[-1]) if len(dims) >= 2 else (None, None)
        if a is None or len(a) < 2 or len(b) < 2:
            return None
        batch = _broadcast([a[:-2], b[:-2]])
        return (batch or ()) + (a[-2], b[-1])
    return _broadcast(dims)


def score_fraction(dims: tuple[int, ...], score_shape: tuple[int, ...], head_dim: int) -> float:
    """How much of a score matrix a tensor of ``dims`` is: 1.0 for its element count, the element
    ratio for a query or key chunk of it (``[..., c, Skv]``, ``[..., Sq, c]`` with ``1 < c != head_dim``), else 0.

    A chunk as long as ``head_dim`` is not counted: ``[..., head_dim, Skv]`` is a transposed key."""
    b, h, sq, skv = score_shape
    numel, full = math.prod(dims), b * h * sq * skv
    if numel == full:
        return 1.0
    if numel > full or len(dims) < 2 or math.prod(dims[:-2]) > b * h:
        return 0.0
    query_chunk = dims[-1] == skv and dims[-2] <= sq and head_dim not in (skv, dims[-2])
    key_chunk = dims[-2] == sq and 1 < dims[-1] < skv and dims[-1] != head_dim and sq > 1
    return numel / full if (query_chunk or key_chunk) else 0.0


# profiler "Input type" words of floating tensors (float, double, c10::Half, c10::BFloat16, c10::Float8_*), and of
# arguments that are no tensor
_FLOATING_WORDS = ("float", "double", "Half", "BFloat16", "Float8")
_NOT_TENSORS = ("", "Scalar", "ScalarList", "TensorList", "GenericList", "None")


def may_write_scores(event: dict[str, Any]) -> bool:
    """Whether an op's written tensor can hold scores: scores are floating point, so an op that writes
    an integer tensor (a block table cast from int32 to int64, a clamp of it) or computes a bool one
    (a mask built with ``|``) writes none, whatever its shape; a ``copy_`` into a bool tensor of score
    size is a mask expansion and counts. The written tensor's type is the first argument's for
    ``copy_`` and in-place ops, else any floating argument's; an op whose types the profiler did not
    record counts."""
    types = [str(t) for t in (event.get("args", {}).get("Input type") or [])]
    name = event.get("name", "").rsplit("::", 1)[-1]
    tensors = [t for t in types if t not in _NOT_TENSORS]
    if not tensors:
        return True
    floating = _FLOATING_WORDS + (("bool",) if name == "copy_" else ())
    if name.endswith("_") and not name.endswith("__") and types[0] not in _NOT_TENSORS:
        return any(word in types[0] for word in floating)
    return any(word in t for t in tensors for word in floating)


def _copy_kind(event: dict[str, Any]) -> str:
    """Kind of a score-sized ``copy_`` (destination, source): cast, mask expansion or copy."""
    args = event.get("args", {})
    types = args.get("Input type") or []
    dims = args.get("Input Dims") or []
    strides = args.get("Input Strides") or []
    if len(types) >= 2 and types[1] == "bool":
        return "mask expansion"  # into any dtype: a bool source is a mask (nan_to_num's backward makes one)
    if len(types) >= 2 and types[0] != types[1]:
        return "cast"
    if (
        len(dims) >= 2
        and len(strides) >= 2
        and isinstance(dims[1], list)
        and isinstance(strides[1], list)
    ):
        if any(stride == 0 and size > 1 for size, stride in zip(dims[1], strides[1])):
            return "mask expansion"
        if math.prod(dims[1]) < math.prod(dims[0] or [0]):
            return "mask expansion"  # a smaller source broadcast into the destination
    return "copy"


def _score_writers(
    ops: list[dict[str, Any]], score_shape: tuple[int, ...], head_dim: int
) -> list[tuple[dict[str, Any], tuple[str, ...], tuple[int, ...], float]]:
    """Ops that write score-sized data with no such op inside them on their thread, each with the
    names of the ops around it (outermost first), the dims it wrote and its score fraction; in time
    order. (A small write inside, such as the 0-dim scalar ``mul`` wraps, does not hide the op.)"""
    by_thread: dict[Any, list[dict[str, Any]]] = collections.defaultdict(list)
    for op in ops:
        by_thread[op.get("tid")].append(op)
    found = []
    for thread_ops in by_thread.values():
        thread_ops.sort(key=lambda e: (e.get("ts", 0), -e.get("dur", 0)))
        children: dict[int, list[int]] = collections.defaultdict(list)
        parents: dict[int, int | None] = {}
        stack: list[int] = []
        for position, op in enumerate(thread_ops):
            start = op.get("ts", 0)
            while stack and _end(thread_ops[stack[-1]]) < start:
                stack.pop()
            parents[position] = stack[-1] if stack else None
            if stack:
                children[stack[-1]].append(position)
            stack.append(position)
        counted: set[int] = set()
        writes_below: dict[int, bool] = {}
        for position in reversed(range(len(thread_ops))):  # children come after their parent
            below = any(c in counted or writes_below[c] for c in children[position])
            writes_below[position] = below
            dims = None if below else output_dims(thread_ops[position])
            if dims is not None and not may_write_scores(thread_ops[position]):
                dims = None  # an integer or bool tensor of score size is no score
            fraction = score_fraction(dims, score_shape, head_dim) if dims is not None else 0.0
            if fraction:
                counted.add(position)
                path, up = [thread_ops[position]["name"]], parents[position]
                while up is not None:
                    path.append(thread_ops[up]["name"])
                    up = parents[up]
                found.append((thread_ops[position], tuple(reversed(path)), dims, fraction))
    found.sort(key=lambda item: item[0].get("ts", 0))
    return found


def _end(event: dict[str, Any]) -> float:
    return event.get("ts", 0) + event.get("dur", 0)


def account_ops(
    ops: list[dict[str, Any]], score_shape: tuple[int, ...], head_dim: int
) -> ScoreAccounting:
    """Score accounting of a list of ``cpu_op`` trace events (one step's ops)."""
    writes = []
    for op, path, dims, fraction in _score_writers(ops, tuple(score_shape), head_dim):
        kind = _copy_kind(op) if op["name"] == "aten::copy_" else "computed"
        writes.append(ScoreWrite(op["name"], path, kind, dims, fraction))
    return ScoreAccounting(tuple(score_shape), tuple(writes))


def account_windows(
    trace: dict[str, Any], annotation: str, score_shape: tuple[int, ...], head_dim: int
) -> list[ScoreAccounting]:
    """One ``ScoreAccounting`` per window named ``annotation`` (``perfsuite::forward``) in ``trace``.

    ``trace``: a Chrome trace recorded with ``record_shapes=True`` (``load_trace``'s dict);
    ``score_shape``: ``[batch, num_heads, seq_len_q, seq_len_kv]``; ``head_dim``: the case's,
    to tell a key chunk from an output. Windows are read like ``summarize_windows`` reads them.
    """
    index = TraceIndex(trace)
    accounts = []
    for window in index.windows(annotation):
        start, end, pid = window["ts"], window["ts"] + window["dur"], window.get("pid")
        if pid not in index.host_pids:
            pid = None
        ops = [
            e
            for e in index.cpu_ops
            if (pid is None or e.get("pid") == pid) and start <= e.get("ts", -1) <= end
        ]
        accounts.append(account_ops(ops, score_shape, head_dim))
    return accounts
