"""Every torch and NVML name the CUDA paths call, checked against the installed torch on the CPU.

The GPU machine is lent rarely; a binding missing from one supported torch (``_KinetoEvent.
activity_type`` is absent from 2.11, ``varlen_attn``'s ``enable_gqa`` too) must fail CI, not the
first GPU run. Both CI lanes run this file: the main lane (newest torch) and
``scripts/oldest_torch.sh`` (the oldest torch ``pyproject.toml`` allows). A name a CPU build cannot
show at run time (a CUDA-only binding of ``torch._C``) is read from the installed stubs
(``torch/_C/*.pyi``), which are generated from the same build as the wheel.

Three kinds of check: (1) every ``torch.…`` name the CUDA-path modules spell out is resolved
(attribute chains and ``from torch… import …``, found by reading the modules' source with ``ast``);
(2) the methods called on Kineto events, the signatures and keywords the code passes, and the
rules it mirrors (flex's decode template) are compared with torch's; (3) the fake GPU of the tests
(``fake_gpu.FakeTorch``) offers only names real torch has.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest
import torch

import perfsuite
from perfsuite.measure import device_api

PACKAGE = Path(perfsuite.__file__).parent
TORCH = Path(torch.__file__).parent
# the modules on the CUDA paths: device timing, GPU state, modes, the CUDA-only variants,
# the preflight and smoke test, the machine description
CUDA_PATH_MODULES = (
    "measure/device_api.py",
    "measure/device_timing.py",
    "measure/gpu_state.py",
    "measure/machine.py",
    "measure/memory_budget.py",
    "attention/modes.py",
    "variants/fp8.py",
    "variants/varlen.py",
    "variants/paged.py",
    "cli/verify.py",
    "cli/gpu_smoke.py",
    "cli/preflight.py",
)
# names the code uses only after checking for them (feature detection), with why they may be absent
OPTIONAL = {
    "torch.nn.attention.experimental.paged_attention": "a public name tried before the private one",
}


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        if isinstance(node.value, ast.Name) and node.value.id == "self" and node.attr == "_torch":
            return ".".join(["torch", *reversed(parts)])  # TorchCuda's module
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id == "torch":
        return ".".join(["torch", *reversed(parts)])
    return None


def _guarded_imports(tree: ast.AST) -> set[int]:
    """Line numbers of imports inside ``try: … except ImportError`` (optional by design)."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
            isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
            for h in node.handlers
        ):
            for inner in node.body:
                for sub in ast.walk(inner):
                    if isinstance(sub, ast.ImportFrom | ast.Import):
                        lines.add(sub.lineno)
    return lines


def torch_names_used() -> dict[str, str]:
    """``torch.a.b.c`` -> ``module:line`` for every torch name the CUDA-path modules spell out."""
    found: dict[str, str] = {}
    for relative in CUDA_PATH_MODULES:
        path = PACKAGE / relative
        if not path.exists():
            continue
        tree = ast.parse(path.read_text())
        guarded = _guarded_imports(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                name = _dotted(node)
                if name:
                    found.setdefault(name, f"{relative}:{node.lineno}")
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch"):
                if node.lineno in guarded:
                    continue
                for alias in node.names:
                    found.setdefault(f"{node.module}.{alias.name}", f"{relative}:{node.lineno}")
    # only the longest chains: torch.cuda.Event.elapsed_time covers torch.cuda.Event
    return {n: w for n, w in found.items() if not any(o.startswith(n + ".") for o in found)}


def stub_tree(name: str = "__init__") -> ast.Module:
    return ast.parse((TORCH / "_C" / f"{name}.pyi").read_text())


def stub_defs(tree: ast.Module) -> dict[str, ast.AST]:
    return {
        node.name: node
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef)
    } | {
        target.id: node
        for node in tree.body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
    }


def stub_members(tree: ast.Module, cls: str) -> set[str]:
    node = stub_defs(tree)[cls]
    members = set()
    for item in node.body:
        if isinstance(item, ast.FunctionDef):
            members.add(item.name)
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            members.add(item.target.id)
    return members


def stub_params(tree: ast.Module, function: str) -> list[str]:
    node = stub_defs(tree)[function]
    return [a.arg for a in node.args.args + node.args.kwonlyargs]


def resolve(name: str) -> bool:
    """Whether ``torch.a.b`` exists: as attributes (importing submodules as needed), or, for
    ``torch._C.x`` and the CUDA classes a CPU build replaces by dummies, in the stubs."""
    import importlib

    parts = name.split(".")
    obj, index = None, len(parts)
    while index > 0:  # the longest importable module prefix
        try:
            obj = importlib.import_module(".".join(parts[:index]))
            break
        except ImportError:
            index -= 1
    for attribute in parts[index:]:
        if not hasattr(obj, attribute):
            break
        obj = getattr(obj, attribute)
    else:
        return True
    if parts[:2] == ["torch", "_C"] and len(parts) >= 3:
        defs = stub_defs(stub_tree())
        if parts[2] not in defs:
            return False
        return len(parts) == 3 or parts[3] in stub_members(stub_tree(), parts[2])
    return False


# (1) every torch name the CUDA paths spell out --------------------------------------------------


@pytest.mark.parametrize("name", sorted(torch_names_used()))
def test_every_torch_name_the_cuda_paths_use_exists(name):
    where = torch_names_used()[name]
    if name in OPTIONAL:
        pytest.skip(f"{name} is optional: {OPTIONAL[name]}")
    assert resolve(name), f"{where} uses {name}, which torch {torch.__version__} does not have"


def test_the_scan_finds_the_cuda_calls():
    """The scan itself: it sees the calls the timing code makes (else every check above is void)."""
    used = torch_names_used()
    for name in ("torch.cuda._sleep", "torch.cuda.Event", "torch.cuda.get_device_properties"):
        assert any(n.startswith(name) for n in used), name


# (2) the members, signatures and rules the code relies on -----------------------------------------


def test_the_kineto_event_methods_device_timing_calls_exist():
    """``kineto_records`` calls these on every torch; device work is told by ``activity_type()``
    where torch has it, else by ``is_user_annotation()`` (torch 2.11)."""
    methods = set(dir(torch._C._autograd._KinetoEvent))
    stubbed = stub_members(stub_tree("_autograd"), "_KinetoEvent")
    for name in device_api.KINETO_EVENT_METHODS:
        assert name in methods and name in stubbed, f"_KinetoEvent.{name} missing"
    assert "activity_type" in methods or "is_user_annotation" in methods
    assert torch.autograd.DeviceType.CUDA != torch.autograd.DeviceType.CPU


def test_every_method_called_on_a_kineto_event_is_one_torch_has_or_is_feature_detected():
    """Read ``device_api``'s source: each ``event.x()`` / ``e.x()`` call is a method of the
    installed ``_KinetoEvent``, or reached only through ``getattr`` (feature detection)."""
    tree = ast.parse(Path(device_api.__file__).read_text())
    readers = [  # the functions that handle Kineto events
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
        and any(part in node.name for part in ("kineto", "device_work", "trace_kernels"))
    ]
    methods = set(dir(torch._C._autograd._KinetoEvent))
    called = {
        node.func.attr
        for reader in readers
        for node in ast.walk(reader)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id in ("e", "event")
    }
    assert called, "no Kineto event calls found: the scan is void"
    assert called <= methods, f"not on torch {torch.__version__}'s _KinetoEvent: {called - methods}"


def test_a_cpu_profiler_session_yields_kineto_events_the_reader_takes():
    """A real profiler session on the CPU: ``profile().profiler.kineto_results.events()`` gives
    ``_KinetoEvent``s, and ``kineto_records`` reads them (no device work on the CPU)."""
    from torch.profiler import ProfilerActivity, profile

    assert "activities" in inspect.signature(profile).parameters
    assert hasattr(ProfilerActivity, "CUDA")
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        torch.ones(4).sum()
    events = list(profiler.profiler.kineto_results.events())
    assert events and all(isinstance(e, torch._C._autograd._KinetoEvent) for e in events)
    assert device_api.kineto_records(events) == []


def test_cuda_graph_capture_names_and_signatures():
    """What ``capture_cuda_graph`` and ``release_failed_capture`` call."""
    graph_params = inspect.signature(torch.cuda.graph.__init__).parameters
    assert {"cuda_graph", "pool", "stream"} <= set(graph_params)
    assert callable(torch.cuda.graph_pool_handle)  # the pool named before capture
    for name in ("replay", "pool", "capture_begin", "capture_end"):
        assert hasattr(torch.cuda.CUDAGraph, name) or name in stub_members(
            stub_tree(), "_CUDAGraph"
        ), f"CUDAGraph.{name}"
    assert stub_params(stub_tree(), "_cuda_endAllocateToPool") == ["device", "mempool_id"]
    assert "stream_id" in stub_members(stub_tree(), "_CudaStreamBase")
    assert "L2_cache_size" in stub_members(stub_tree(), "_CudaDeviceProperties")
    assert "enable_timing" in inspect.signature(torch.cuda.Event.__new__).parameters
    for name in ("record", "query", "elapsed_time", "synchronize"):
        assert hasattr(torch.cuda.Event, name), f"torch.cuda.Event.{name}"
    for name in ("wait_stream", "synchronize"):
        assert hasattr(torch.cuda.Stream, name), f"torch.cuda.Stream.{name}"


def test_the_allocator_messages_release_failed_capture_relies_on():
    """``release_failed_capture`` takes the allocator's "not currently recording" answer as done;
    the assert it prevents is "captures_underway.empty()". Read from the CUDA build's library
    where this torch ships one (the oldest-torch lane installs the CUDA wheel)."""
    libraries = sorted((TORCH / "lib").glob("libc10_cuda*.so*"))
    if not libraries:
        pytest.skip(f"torch {torch.__version__} is a CPU build: no libc10_cuda to read")
    data = libraries[0].read_bytes()
    assert b"not currently recording" in data
    assert b"captures_underway.empty()" in data


def test_the_fake_gpus_torch_offers_only_names_real_torch_has():
    """``fake_gpu.FakeTorch`` stands in for torch in the capture tests: each name it offers, and
    each keyword its ``graph`` takes, exists in the installed torch."""
    from fake_gpu import FakeGpu

    fake = FakeGpu().torch
    for name in (
        "Stream",
        "current_stream",
        "current_device",
        "stream",
        "synchronize",
        "empty_cache",
        "graph",
        "CUDAGraph",
        "graph_pool_handle",
        "set_stream",
    ):
        assert hasattr(fake.cuda, name) and hasattr(torch.cuda, name), name
    assert resolve("torch._C._cuda_endAllocateToPool")
    fake_params = set(inspect.signature(fake.cuda.graph).parameters) - {"graph"}
    assert fake_params <= set(inspect.signature(torch.cuda.graph.__init__).parameters)


def test_varlen_attn_takes_what_the_variant_passes():
    """Positional ``q, k, v, cu_seq_q, cu_seq_k, max_q, max_k`` and keywords ``scale``,
    ``window_size`` on every supported torch; ``enable_gqa`` only where the signature has it
    (``varlen_gqa_keywords``)."""
    from torch.nn.attention.varlen import varlen_attn

    from perfsuite.variants.varlen import varlen_gqa_keywords

    params = inspect.signature(varlen_attn).parameters
    assert len([p for p in params.values() if p.kind == p.POSITIONAL_OR_KEYWORD]) >= 7
    assert {"scale", "window_size"} <= set(params)
    assert set(varlen_gqa_keywords(varlen_attn, 8, 2)) <= set(params)


def test_the_quantized_sdpa_path_and_flash_implementation_switch():
    """``sdpa_fp8``: the quantized entry point's keywords, its descales validated against
    ``(batch, num_kv_heads)``, and the activation API ``flash_impl_active`` uses."""
    from torch.nn.attention.experimental import _scaled_dot_product_attention_quantized as quantized

    params = inspect.signature(quantized._scaled_dot_product_attention_quantized).parameters
    assert {"is_causal", "scale", "q_descale", "k_descale", "v_descale"} <= set(params)
    assert "num_kv_heads = key.size(1)" in inspect.getsource(quantized._validate_descale)
    attention = torch.nn.attention
    for name in (
        "list_flash_attention_impls",
        "activate_flash_attention_impl",
        "restore_flash_attention_impl",
        "current_flash_attention_impl",
    ):
        assert hasattr(attention, name), f"torch.nn.attention.{name}"
    assert "_raise_warn" in inspect.signature(attention.restore_flash_attention_impl).parameters
    assert "FA3" in attention.list_flash_attention_impls()


def test_flex_decodings_rule_has_the_conditions_the_variant_mirrors_and_no_other():
    """``flex_decode_refusal`` mirrors torch's ``_use_flex_decoding``: the terms of its result are
    read from torch's source; a new term fails here, naming it."""
    from torch._inductor.kernel.flex import flex_decoding

    source = inspect.getsource(flex_decoding._use_flex_decoding)
    result = re.search(r"out = \((.*?)\n    \)", source, re.S)
    assert result, "torch's _use_flex_decoding no longer builds `out = (...)`"
    terms = {t.strip() for t in re.split(r"\band\b", result.group(1)) if t.strip()}
    known = {
        "not force_flex",  # FORCE_USE_FLEX_ATTENTION: never set by the variant
        'not kernel_options.get("OUTPUT_MAX", False)',  # never set by the variant
        "short_query_length",  # mirrored: query_len < 128
        "non_zero_length",  # mirrored: query_len > 0
        "static_batch",  # the suite compiles static shapes
        "static_num_heads",
        "valid_block_mask_num_heads",  # mirrored: block_mask_heads
        "pw_of_two",  # mirrored: power-of-two head ratio
    }
    assert terms == known, f"torch's decode rule changed: {terms ^ known}"
    from torch._inductor.kernel.flex import flex_attention as lowering

    from perfsuite.variants.paged import FLEX_DECODE_REFUSED

    assert FLEX_DECODE_REFUSED in inspect.getsource(lowering)


# NVML ------------------------------------------------------------------------------------------


def test_the_nvml_names_gpu_state_calls_exist():
    """``gpu_state`` reads clocks, power, throttle reasons and the cumulative throttle counters
    through ``nvidia-ml-py`` (a dev dependency); each function, constant and field it uses."""
    pynvml = pytest.importorskip("pynvml")
    from perfsuite.measure.gpu_state import THROTTLE_COUNTER_FIELDS, throttle_field_ids

    for name in (
        "nvmlInit",
        "nvmlDeviceGetHandleByUUID",
        "nvmlDeviceGetHandleByIndex",
        "nvmlDeviceGetClockInfo",
        "nvmlDeviceGetMaxClockInfo",
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetEnforcedPowerLimit",
        "nvmlDeviceGetTemperature",
        "nvmlDeviceGetFieldValues",
        "NVML_CLOCK_SM",
        "NVML_CLOCK_MEM",
        "NVML_TEMPERATURE_GPU",
        "NVML_SUCCESS",
        "NVMLError",
    ):
        assert hasattr(pynvml, name), f"pynvml.{name}"
    assert hasattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons") or hasattr(
        pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons"
    )
    assert set(throttle_field_ids(pynvml)) == set(THROTTLE_COUNTER_FIELDS)
    fields = {name for name, _ in pynvml.c_nvmlFieldValue_t._fields_}
    assert {"fieldId", "nvmlReturn", "value"} <= fields
    assert "ullVal" in {name for name, _ in pynvml.c_nvmlValue_t._fields_}
