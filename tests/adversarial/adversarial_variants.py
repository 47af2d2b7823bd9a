"""The corpus: one small variant per way a fast, "correct" attention can lie, and one per existing check.

Each is loaded by ``--perfsuite-variant adversarial_variants:NAME`` (its ``@register_variant``
declarations kept) and fails the suite with its reason named; ``EXPECTED`` says which test fails
and with what words. ``honest`` must pass every test: the corpus run also proves the checks do not
fire on a correct variant. Cases: ``b2h2s8d4-fp32-causal-cpu`` (two batch elements and two heads,
so a variant computing a subset of them is wrong).
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
import time

import pytest_benchmark.timers
import torch

from perfsuite.variants.registry import register_variant

F = torch.nn.functional
STOP = threading.Event()  # set by the test's cleanup: ends the thread that never ends


def _sdpa(query, key, value, mask, scale):
    return F.scaled_dot_product_attention(query, key, value, is_causal=mask.is_causal, scale=scale)


def _plain(query, key, value, mask, scale, mask_value=float("-inf"), subtract_max=True, add=False):
    scores = torch.matmul(query, key.transpose(-2, -1)) * scale
    if mask.masked_out is not None and add:
        scores = scores + mask.masked_out.to(scores.dtype) * mask_value
    elif mask.masked_out is not None:
        scores = scores.masked_fill(mask.masked_out, mask_value)
    if subtract_max:
        scores = scores - scores.amax(dim=-1, keepdim=True)
    weights = scores.exp()
    return torch.matmul(weights / weights.sum(dim=-1, keepdim=True), value)


# (test that fails, words its failure contains), per variant
EXPECTED: dict[str, list[tuple[str, str]]] = {}


def expect(name: str, *failures: tuple[str, str], **declared):
    """Register ``fn`` as ``name`` (with ``declared``) and note the failures the suite must name."""

    def decorate(fn):
        EXPECTED[name] = list(failures)
        return register_variant(name, f"adversarial: {fn.__doc__}", **declared)(fn)

    return decorate


CALLS = "test_calls_cannot_fool_the_measurement"
FLOAT64 = "test_matches_float64_reference"
BENCH = "test_benchmark"


@expect("honest")
def honest(query, key, value, *, mask, scale):
    """SDPA: passes every check (no false alarm)."""
    return _sdpa(query, key, value, mask, scale)


# -- work that escapes the timer ------------------------------------------------------------


@expect("thread_fills_later", (CALLS, "left 1 thread(s) running after the first call"))
def thread_fills_later(query, key, value, *, mask, scale):
    """Returns an empty tensor a thread fills 0.3 s after the call returned."""
    out = torch.zeros_like(query)

    def fill():
        time.sleep(0.3)
        out.copy_(_sdpa(query, key, value, mask, scale))

    threading.Thread(target=fill, name="fill-after-return").start()
    return out


@expect("thread_never_ends", (CALLS, "'never-ends' (not a daemon"))
def thread_never_ends(query, key, value, *, mask, scale):
    """Leaves a non-daemon thread running that would keep the process alive at exit."""
    threading.Thread(target=STOP.wait, name="never-ends").start()
    return _sdpa(query, key, value, mask, scale)


class Deferred(torch.Tensor):
    """A tensor subclass, standing for one that computes only when read."""


@expect("lazy_subclass", (FLOAT64, "torch.Tensor subclass, not a plain tensor"))
def lazy_subclass(query, key, value, *, mask, scale):
    """Returns a tensor subclass (work deferred until it is compared)."""
    return _sdpa(query, key, value, mask, scale).as_subclass(Deferred)


# -- answers that do not depend on this call's inputs ---------------------------------------

_BY_SHAPE: dict = {}
_BY_POINTER: dict = {}
_BUFFER: dict = {}


@expect("cache_by_shape", (CALLS, "the output did not change with the inputs"))
def cache_by_shape(query, key, value, *, mask, scale):
    """Computes once per shape and returns that answer for later inputs."""
    shape = tuple(query.shape)
    if shape not in _BY_SHAPE:
        _BY_SHAPE[shape] = _sdpa(query, key, value, mask, scale)
    return _BY_SHAPE[shape].clone()


@expect("cache_by_pointer", (CALLS, "the output did not change with the inputs"))
def cache_by_pointer(query, key, value, *, mask, scale):
    """Computes once per data pointer and returns that answer for later calls on the same tensors."""
    pointer = (query.data_ptr(), key.data_ptr(), value.data_ptr())
    if pointer not in _BY_POINTER:
        _BY_POINTER[pointer] = _sdpa(query, key, value, mask, scale)
    return _BY_POINTER[pointer].clone()


@expect("aliased_output", (CALLS, "a later call overwrote the output of an earlier one"))
def aliased_output(query, key, value, *, mask, scale):
    """Writes every answer into one buffer it keeps and returns that buffer."""
    buffer = _BUFFER.setdefault(tuple(query.shape), torch.empty_like(query))
    buffer.copy_(_sdpa(query, key, value, mask, scale))
    return buffer


@expect("first_batch_only", (FLOAT64, "not within atol"))
def first_batch_only(query, key, value, *, mask, scale):
    """Computes the first batch element and repeats it."""
    out = _sdpa(query[:1], key[:1], value[:1], mask, scale)
    return out.expand_as(query).contiguous()


@expect("first_head_only", (FLOAT64, "not within atol"))
def first_head_only(query, key, value, *, mask, scale):
    """Computes the first head and repeats it."""
    out = _sdpa(query[:, :1], key[:, :1], value[:, :1], mask, scale)
    return out.expand_as(query).contiguous()


# -- tampering with the measurement ---------------------------------------------------------


def _tamper(name, what, change):
    def fn(query, key, value, *, mask, scale):
        change()
        return _sdpa(query, key, value, mask, scale)

    fn.__name__ = name
    fn.__doc__ = f"Changes {what} from inside its call."
    globals()[name] = expect(name, (CALLS, what))(fn)


_tamper(
    "replaces_perf_counter",
    "time.perf_counter",
    lambda: setattr(time, "perf_counter", time.process_time),
)
_tamper(
    "replaces_benchmark_timer",
    "pytest_benchmark.timers.default_timer",
    lambda: setattr(pytest_benchmark.timers, "default_timer", time.process_time),
)
_tamper(
    "replaces_cuda_synchronize",
    "torch.cuda.synchronize",
    lambda: setattr(torch.cuda, "synchronize", lambda device=None: None),
)
_tamper(
    "replaces_event_elapsed_time",
    "torch.cuda.Event.elapsed_time",
    lambda: setattr(torch.cuda.Event, "elapsed_time", lambda self, end: 0.001),
)
_tamper(
    "changes_default_dtype",
    "torch.get_default_dtype()",
    lambda: torch.set_default_dtype(torch.float64),
)
_tamper(
    "changes_deterministic_mode",
    "torch.are_deterministic_algorithms_enabled()",
    lambda: torch.use_deterministic_algorithms(True, warn_only=True),
)
_tamper(
    "changes_num_threads",
    "torch.get_num_threads()",
    lambda: torch.set_num_threads(torch.get_num_threads() + 1),
)
_tamper(
    "patches_torch_matmul",
    "torch.matmul",
    lambda: setattr(torch, "matmul", lambda a, b: torch.bmm(a.flatten(0, -3), b.flatten(0, -3))),
)
if len(os.sched_getaffinity(0)) > 1:  # on one CPU there is nothing to pin
    _tamper(
        "pins_one_cpu",
        "os.sched_getaffinity(0)",
        lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}),
    )
_tamper(
    "changes_backend_flag",
    "torch.backends.mkldnn.enabled",
    lambda: setattr(torch.backends.mkldnn, "enabled", False),
)


# -- quietly less precise -------------------------------------------------------------------


@expect("float16_inside", (FLOAT64, "computed below the case's precision"))
def float16_inside(query, key, value, *, mask, scale):
    """Computes in float16 inside a float32 case."""
    half = [t.half() for t in (query, key, value)]
    return _plain(*half, mask, scale).to(query.dtype)


@expect("no_max_subtraction", (CALLS, "overflow in the softmax"))
def no_max_subtraction(query, key, value, *, mask, scale):
    """exp of the raw scores: overflows on large scores."""
    return _plain(query, key, value, mask, scale, subtract_max=False)


@expect("mask_minus_1e4", (CALLS, "a hidden key was weighed"))
def mask_minus_1e4(query, key, value, *, mask, scale):
    """Fills hidden keys' scores with -1e4 instead of -inf."""
    return _plain(query, key, value, mask, scale, mask_value=-1e4)


@expect("adds_minus_1e4", (CALLS, "a hidden key was weighed"))
def adds_minus_1e4(query, key, value, *, mask, scale):
    """Adds -1e4 to hidden keys' scores (an additive mask too small for large scores)."""
    return _plain(query, key, value, mask, scale, mask_value=-1e4, add=True)


# -- nondeterminism -------------------------------------------------------------------------

_RUNS = [0]


@expect(
    "not_deterministic", (CALLS, "declares itself deterministic, but rerun"), deterministic=True
)
def not_deterministic(query, key, value, *, mask, scale):
    """Declares determinism; every other call differs in the last bit of one element."""
    _RUNS[0] += 1
    out = _sdpa(query, key, value, mask, scale)
    if _RUNS[0] % 2 == 0:
        out.view(-1)[0] = torch.nextafter(out.view(-1)[0], torch.tensor(float("inf")))
    return out


@expect("deterministic_sdpa", deterministic=True)
def deterministic_sdpa(query, key, value, *, mask, scale):
    """SDPA declaring determinism (bitwise reproducible on the CPU): passes."""
    return _sdpa(query, key, value, mask, scale)


# -- memory kept across calls (reported, not a failure) -------------------------------------

_KEPT: list = []


@expect("keeps_memory")
def keeps_memory(query, key, value, *, mask, scale):
    """Keeps 8 MiB per call in a list: measured and reported (row and warning), not failed."""
    _KEPT.append(torch.ones(2 * 2**20))
    return _sdpa(query, key, value, mask, scale)


# -- the existing checks --------------------------------------------------------------------


@expect(
    "mutates_query", (FLOAT64, "modified its `query` in place")
)  # and not timed: a skip naming it
def mutates_query(query, key, value, *, mask, scale):
    """Changes its input."""
    query.mul_(2)
    return _sdpa(query, key, value, mask, scale)


@expect("wrong_shape", (FLOAT64, "returned shape [2, 2, 4, 4]"))
def wrong_shape(query, key, value, *, mask, scale):
    """Returns half the query rows."""
    return _sdpa(query, key, value, mask, scale)[:, :, :4]


@expect("returns_tuple", (FLOAT64, "returned tuple, not a torch.Tensor"))
def returns_tuple(query, key, value, *, mask, scale):
    """Returns (output, weights)."""
    return _sdpa(query, key, value, mask, scale), None


_NAN_CALLS = [0]


@expect("nan_every_third", (BENCH, "returned non-finite values"))
def nan_every_third(query, key, value, *, mask, scale):
    """NaN on every third call once it has been called 12 times: the checked calls look right."""
    _NAN_CALLS[0] += 1
    out = _sdpa(query, key, value, mask, scale)
    return out * float("nan") if _NAN_CALLS[0] > 12 and _NAN_CALLS[0] % 3 == 0 else out


@expect(
    "copies_scores_undeclared", ("test_score_copies_per_step", "score-sized copies per forward")
)
def copies_scores_undeclared(query, key, value, *, mask, scale):
    """Copies the scores (out-of-place masked_fill) without declaring it."""
    scores = torch.matmul(query, key.transpose(-2, -1)) * scale
    scores = scores.masked_fill(mask.masked_out, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), value)


@expect(
    "fused_but_unfused",
    ("test_fused_variant_runs_no_unfused_matmul_or_softmax", "unfused work in a forward"),
    fused=True,
)
def fused_but_unfused(query, key, value, *, mask, scale):
    """Declares one fused kernel, runs matmul and softmax."""
    scores = torch.matmul(query, key.transpose(-2, -1)) * scale
    scores.masked_fill_(mask.masked_out, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), value)


@expect(
    "compiled_but_eager",
    ("test_compiled_once_without_graph_breaks", "no '## Call CompiledFxGraph' range"),
    compiled=True,
)
def compiled_but_eager(query, key, value, *, mask, scale):
    """Declares torch.compile, runs eagerly."""
    return _sdpa(query, key, value, mask, scale)


@expect(
    "saves_scores_undeclared",
    ("test_scores_saved_for_backward", "expected no score-sized tensor"),
    saves_scores_for_backward=False,
)
def saves_scores_undeclared(query, key, value, *, mask, scale):
    """Declares that it saves no scores for backward; its softmax saves them."""
    scores = torch.matmul(query, key.transpose(-2, -1)) * scale
    scores = scores.masked_fill(mask.masked_out, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), value)


@expect("rewrites_timer_start", (BENCH, "not the clock's"))
def rewrites_timer_start(query, key, value, *, mask, scale):
    """Sleeps 2 ms, then moves pytest-benchmark's ``start`` local (in the runner's frame) to now."""
    time.sleep(0.002)
    frame = sys._getframe(1)
    while frame is not None and not {"start", "loops_range"} <= frame.f_locals.keys():
        frame = frame.f_back
    if frame is not None:
        frame.f_locals["start"] = time.perf_counter()  # writes through from Python 3.13
        if sys.version_info < (3, 13):
            ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(0))
    return _sdpa(query, key, value, mask, scale)


_CHILDREN: list[subprocess.Popen] = []


@expect("leaves_a_child_process", (CALLS, "child process(es) running"))
def leaves_a_child_process(query, key, value, *, mask, scale):
    """Starts ``sleep 300`` on its first call and returns while it runs."""
    if not _CHILDREN:
        _CHILDREN.append(subprocess.Popen(["sleep", "300"]))
    return _sdpa(query, key, value, mask, scale)


_FORKED: list[int] = []


@expect("forks_the_suite", (CALLS, "child process(es) running"))
def forks_the_suite(query, key, value, *, mask, scale):
    """Forks on its first call; the child (a copy of pytest) goes on running the suite."""
    if not _FORKED:
        pid = os.fork()
        if pid:
            _FORKED.append(pid)
        else:
            _FORKED.append(os.getpid())  # the copy returns into the suite like its parent
    return _sdpa(query, key, value, mask, scale)


@expect("never_returns", (FLOAT64, "ran past the time limit"))
def never_returns(query, key, value, *, mask, scale):
    """Never returns (until the call time limit interrupts it)."""
    while not STOP.is_set():
        time.sleep(0.01)
    return _sdpa(query, key, value, mask, scale)
