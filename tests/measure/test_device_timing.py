"""Device timing on a simulated GPU (``fake_gpu.FakeGpu``): a host clock and a device queue in
simulated seconds behind ``DeviceApi``, so the blocked start, the idle-GPU check, throttled
samples, kernel sets, graph capture and replay and the stopping rule are checked exactly on a CPU
(seeded, no timing). The fake's capture runs the step and fails as torch does, its replays and
events cost device time, its spin has its own clock and its kernel names come from real traces."""

import types

import pytest
from fake_gpu import (
    ALLOCATOR_ASSERT,
    FLASH_FWD,
    FLUSH_KERNEL,
    GEMM,
    MAX_CLOCK_HZ,
    SOFTMAX,
    FakeGpu,
    backward_step,
    trace_events,
    trace_kineto_events,
)
from pytest_benchmark.fixture import BenchmarkFixture
from pytest_benchmark.utils import NameWrapper

from perfsuite.measure.device_api import (
    L2_FLUSH_FACTOR,
    SPIN_KERNEL,
    KernelRecord,
    TorchCuda,
    kineto_records,
)
from perfsuite.measure.device_timing import (
    MAX_SPIN_S,
    BlockedEventTimer,
    DeviceTimingError,
    KernelTimer,
    L2Flush,
    ReplayClock,
    benchmark_step,
    capture_step,
    kernel_set_findings,
    measure_dispatch_s,
    merged_seconds,
    parse_timer,
    split_iterations,
    time_on_device,
)
from perfsuite.measure.sampling import SamplingRule

STEP_S = 100e-6  # the fake step's one kernel
QUICK = SamplingRule(warmup_s=0.002, min_sample_s=0.001, max_wall_s=0.5)


def make_fixture(disabled=False):
    node = types.SimpleNamespace(name="test_x", nodeid="tests/x.py::test_x")
    stats = []
    logger = types.SimpleNamespace(
        debug=lambda *a, **k: None, info=lambda *a, **k: None, warning=lambda *a, **k: None
    )
    fixture = BenchmarkFixture(
        node,
        disable_gc=False,
        timer=NameWrapper(lambda: 0.0),
        min_rounds=1,
        min_time=0.0,
        max_time=1.0,
        precision=None,
        confidence=None,
        warmup=False,
        warmup_iterations=0,
        calibration_precision=10,
        add_stats=stats.append,
        logger=logger,
        warner=lambda *a: None,
        disabled=disabled,
        cprofile=False,
        cprofile_loops=None,
        cprofile_dump=None,
    )
    return fixture, stats


def old_event_sample(gpu):
    """The event timer as it was: synchronize, record the start on the idle GPU, step, record."""
    gpu.synchronize()
    start = gpu.record_event()
    gpu.step()
    end = gpu.record_event()
    gpu.synchronize()
    return gpu.elapsed_s(start, end)


def blocked_timer(gpu, spin_s=None):
    dispatch = measure_dispatch_s(gpu, gpu.step, MAX_CLOCK_HZ, gpu.host_clock)
    return BlockedEventTimer(
        gpu,
        gpu.step,
        flush=L2Flush(gpu),
        sm_clock_hz=MAX_CLOCK_HZ,
        spin_s=2 * dispatch if spin_s is None else spin_s,
        host_clock=gpu.host_clock,
    )


def test_the_blocked_start_removes_the_host_gap_the_old_timer_measured():
    gpu = FakeGpu(host_gap_s=50e-6)
    assert old_event_sample(gpu) >= STEP_S + 50e-6  # Python and dispatch inside the interval
    sample = blocked_timer(gpu).sample()
    # the step and the end event's own device time, nothing of the host
    assert sample.device_s == pytest.approx(STEP_S + gpu.event_s, rel=1e-9) and not sample.ran_dry
    assert sample.dispatch_s == pytest.approx(50e-6 + gpu.launch_s)  # measured apart, on the host
    # the spins' cycles / their seconds (the event behind each adds its 0.5 us)
    assert sample.sm_clock_hz == pytest.approx(MAX_CLOCK_HZ, rel=0.03)


def test_the_idle_gpu_check_fires_and_the_spin_grows_until_the_gap_is_covered():
    gpu = FakeGpu(host_gap_s=200e-6)
    timer = blocked_timer(gpu, spin_s=20e-6)
    first = timer.sample()
    assert first.ran_dry and first.device_s > STEP_S + 150e-6  # the GPU waited inside the interval
    timer.lengthen()
    spins = [timer.spin_s]
    while (sample := timer.sample()).ran_dry:
        timer.lengthen()
        spins.append(timer.spin_s)
    assert spins == pytest.approx([40e-6, 80e-6, 160e-6, 320e-6])  # doubled until it covers 202 us
    assert sample.device_s == pytest.approx(STEP_S + gpu.event_s, rel=1e-9)


def test_a_step_that_waits_on_the_host_is_named_in_the_row():
    gpu = FakeGpu(host_gap_s=10e-6, step_syncs=True)  # the step synchronizes: no spin can cover it
    fixture, _ = make_fixture()
    rule = SamplingRule(warmup_s=0.0, min_sample_s=0.0, min_samples=5, max_wall_s=0.5)
    timing = time_on_device(
        fixture, gpu.step, "cuda_event", rule, cuda_graph=False, api=gpu, host_clock=gpu.host_clock
    )
    assert timing.host_bound  # dry at the longest spin: kept, and the row says why
    assert any(f"{MAX_SPIN_S * 1e3:g} ms spin" in note for note in timing.notes())


def test_throttled_samples_are_flagged_left_out_and_the_benchmark_named():
    """A power cap that bites only while the step runs: the one-thread spin runs at the maximum
    clock throughout, so only NVML's cumulative throttle counters, read around each sample, see
    it (every tenth block of 10 calls, i.e. one replay of the 10-step graph, runs at 60%)."""
    slow = lambda n: 0.6 * MAX_CLOCK_HZ if (n // 10) % 4 == 3 else MAX_CLOCK_HZ
    state = {"present": True, "max_sm_clock_mhz": 2000.0, "throttle_reasons": ["sw_power_cap"]}
    gpu = FakeGpu(clock_for_call=slow, state=state, noise=0.002, seed=1)
    fixture, stats = make_fixture()
    timing = time_on_device(
        fixture, gpu.step, "cuda_event", QUICK, api=gpu, host_clock=gpu.host_clock
    )
    assert timing.cuda_graph == "replayed (10 steps a replay)"
    assert timing.throttled_samples >= timing.estimate.samples // 4
    assert max(timing.samples_s) < STEP_S * 1.1  # the slow samples (x1.67) are not among the kept
    assert timing.device_median_s == pytest.approx(STEP_S, rel=0.01)
    assert timing.throttle().startswith("sw_power_cap; ") and "throttled while timed" in (
        timing.throttle()
    )
    assert timing.extra_info()["throttle"] == timing.throttle()
    # without NVML's counters the spin's clock alone cannot see a cap that spares the spin
    blind = FakeGpu(clock_for_call=slow, state=state, noise=0.002, seed=1, nvml_counters=False)
    timing = time_on_device(
        make_fixture()[0], blind.step, "cuda_event", QUICK, api=blind, host_clock=blind.host_clock
    )
    assert timing.throttled_samples == 0 and max(timing.samples_s) > STEP_S * 1.5


def test_a_slow_spin_flags_the_sample_without_nvml():
    """A thermal slowdown slows the whole chip, the spin included: its clock flags the sample."""
    slow = lambda n: 0.6 * MAX_CLOCK_HZ if (n // 10) % 4 == 3 else MAX_CLOCK_HZ
    gpu = FakeGpu(clock_for_call=slow, spin_clock_for_call=slow, nvml_counters=False)
    timing = time_on_device(
        make_fixture()[0], gpu.step, "cuda_event", QUICK, api=gpu, host_clock=gpu.host_clock
    )
    assert timing.throttled_samples > 0 and max(timing.samples_s) < STEP_S * 1.1


def test_kernel_intervals_are_merged_and_the_flush_left_out():
    records = [KernelRecord("a", 0.0, 10.0, 1), KernelRecord("b", 5.0, 12.0, 2)]
    assert merged_seconds(records + [KernelRecord("c", 20.0, 25.0)]) == 17.0  # not 10 + 7 + 5
    kernels = ((GEMM, 40e-6), (SOFTMAX, 20e-6), (GEMM, 40e-6))  # names from recorded traces
    gpu = FakeGpu(kernels=kernels)
    block = KernelTimer(gpu, gpu.step, L2Flush(gpu)).block(count=5)
    assert len(block) == 5 and all(i.merged_s == pytest.approx(STEP_S) for i in block)
    assert all(i.names == (GEMM, SOFTMAX, GEMM) for i in block)  # no flush, no spin, no annotation
    assert FLUSH_KERNEL not in {n for i in block for n in i.names}
    assert kernel_set_findings(block) == []
    records, trace = [], gpu.trace_kernels
    gpu.trace_kernels = lambda run: records.extend(trace(run)) or list(records)
    KernelTimer(gpu, gpu.step, L2Flush(gpu)).block(count=3)
    assert records[0].name == FLUSH_KERNEL
    # a session that missed its first records (Kineto at session start) still splits by the lone flush
    assert [i.names for i in split_iterations(records[1:])] == [(GEMM, SOFTMAX, GEMM)] * 4
    spins = [n for n, r in enumerate(records) if SPIN_KERNEL in r.name]
    del records[spins[2] - 1]  # iteration 1 no longer ends with the flush
    with pytest.raises(DeviceTimingError, match="iteration 1 of the kernel block does not end"):
        split_iterations(records)


def test_another_kernel_set_on_one_iteration_is_a_named_finding():
    profiled = []

    def odd(n):  # the sixth profiled step (the first of a session is dropped) copies once more
        profiled.extend([n] if gpu.recording is not None else [])
        usual = (("attn_fwd", STEP_S),)
        return usual + (("copy_", 5e-6),) if len(profiled) == 6 else usual

    gpu = FakeGpu(kernels_for_call=odd)
    fixture, _ = make_fixture()
    rule = SamplingRule(warmup_s=0.0, min_sample_s=0.0, max_wall_s=0.01)
    timing = time_on_device(
        fixture, gpu.step, "kernel", rule, cuda_graph=False, api=gpu, host_clock=gpu.host_clock
    )
    findings = [n for n in timing.notes() if "another kernel set" in n]
    assert findings == ["iteration 5 of 20 ran another kernel set: +1 x copy_"]
    assert timing.clock == "kernel" and timing.kernel_median_s == pytest.approx(STEP_S)


def test_graph_replay_is_the_default_clock_and_a_failed_capture_is_recorded():
    gpu = FakeGpu()
    fixture, stats = make_fixture()
    timing = time_on_device(
        fixture, gpu.step, "cuda_event", QUICK, api=gpu, host_clock=gpu.host_clock
    )
    assert timing.clock == "cuda_graph" and gpu.replays > 0
    assert timing.cuda_graph == "replayed (10 steps a replay)"  # 1 ms / 0.1 ms steps
    # the replay's launch and the end event (3.5 us) shared by 10 steps
    assert (
        timing.device_median_s == pytest.approx(STEP_S + 3.5e-6 / 10) and timing.estimate.converged
    )
    # pytest-benchmark holds exactly the kept samples (ReplayClock), in device seconds
    assert stats[0].stats.rounds == len(timing.samples_s) == timing.estimate.samples
    assert stats[0].stats.median == pytest.approx(timing.device_median_s)
    assert stats[0].as_dict()["options"]["timer"] == "perfsuite_cuda_graph_clock"
    assert timing.l2_flush_bytes == L2_FLUSH_FACTOR * gpu.l2_cache_bytes() == gpu.buffers[0]
    assert timing.kernel_median_s == pytest.approx(STEP_S) and timing.dispatch_median_s > 0
    failing = FakeGpu(step_syncs=True)  # synchronizes inside: the capture is invalidated
    fixture, _ = make_fixture()
    timing = time_on_device(
        fixture, failing.step, "cuda_event", QUICK, api=failing, host_clock=failing.host_clock
    )
    assert timing.clock == "blocked_event" and failing.replays == 0
    # the cause, not torch's generic "operation failed due to a previous error during capture"
    assert timing.cuda_graph == (
        "capture failed: RuntimeError: CUDA error: operation not permitted when stream is capturing"
    )
    # the step synchronizes, so the end event is launched onto an idle GPU: its launch is inside
    assert timing.device_median_s == pytest.approx(STEP_S + failing.launch_s + failing.event_s)


def test_noise_that_does_not_shrink_stops_and_says_not_converged():
    gpu = FakeGpu(noise=0.3, seed=3)
    fixture, _ = make_fixture()
    rule = SamplingRule(warmup_s=0.0, min_sample_s=0.0, max_wall_s=0.01)
    timing = time_on_device(
        fixture, gpu.step, "cuda_event", rule, api=gpu, host_clock=gpu.host_clock
    )
    assert not timing.estimate.converged and timing.estimate.rel_spread > 0.01
    assert timing.notes()[0].startswith("not converged: time limit at ")
    assert timing.extra_info()["sampling"]["converged"] is False


def test_replay_clock_differences_are_the_samples():
    clock = ReplayClock([0.5, 0.25], "c")
    readings = [clock() for _ in range(4)]
    assert [readings[1] - readings[0], readings[3] - readings[2]] == [0.5, 0.25]


def test_disabled_benchmark_runs_the_step_once_untimed():
    gpu = FakeGpu()
    fixture, stats = make_fixture(disabled=True)
    assert time_on_device(fixture, gpu.step, "kernel", api=gpu) is None
    assert gpu.calls == 1 and stats == []


def test_bad_settings_and_device_answers_name_the_value():
    with pytest.raises(DeviceTimingError, match="'cupti'"):
        parse_timer("cupti")
    assert parse_timer(" CUDA_EVENT ") == "cuda_event"
    fixture, _ = make_fixture()
    with pytest.raises(DeviceTimingError, match="benchmark\\(step\\)"):
        time_on_device(fixture, lambda: None, "host", api=FakeGpu())
    broken = FakeGpu()
    broken.l2_cache_bytes = lambda: 0
    with pytest.raises(DeviceTimingError, match="L2 cache of 0 bytes"):
        L2Flush(broken)
    with pytest.raises(DeviceTimingError, match="SM clock of 0"):
        BlockedEventTimer(FakeGpu(), lambda: None, flush=None, sm_clock_hz=0)


def test_capture_step_keeps_the_step_on_failure():
    gpu = FakeGpu()

    def step():
        gpu.step()
        if gpu.torch.cuda.capturing() is not None:
            raise ValueError("bad")

    captured = capture_step(gpu, step)
    assert captured.step is step and not captured.replayed and captured.failure == "ValueError: bad"
    assert gpu.calls == 3  # the warm-ups ran the step; the captured call recorded, not ran


def test_a_failed_capture_leaves_the_allocator_usable_on_torch_2_11():
    """torch 2.11's capture_end leaves the caching allocator believing a capture is underway when
    it fails; every later ``empty_cache()`` (each later capture, teardown, the out-of-memory path)
    then fails its internal assert. ``TorchCuda`` ends the pool's capture itself, and is
    harmless where torch already did (``fixed_capture_end``)."""
    for fixed in (False, True):
        gpu = FakeGpu(step_syncs=True, fixed_capture_end=fixed)
        api = TorchCuda()
        api._torch = gpu.torch  # the real capture code against torch's CUDA surface as it behaves
        assert not capture_step(api, gpu.step).replayed
        gpu.torch.cuda.empty_cache()  # raised ALLOCATOR_ASSERT before the fix
        assert gpu.torch.cuda.captures_underway == []
        assert gpu.torch.cuda.current is gpu.torch.cuda.default  # not left on the capture stream
        gpu.step_syncs = False
        assert capture_step(api, gpu.step).replayed  # a later capture works
    assert "captures_underway.empty()" in ALLOCATOR_ASSERT


def test_a_backward_step_is_captured_on_the_stream_its_forward_ran_on():
    """Autograd runs a backward on its forward's stream. The backward step's forward first ran on
    the default stream (as the suite's checks run it), so the capture must run on the warm-ups'
    side stream, where the step keeps a forward of its own (``modes.stream_key``)."""
    gpu = FakeGpu()
    step = backward_step(gpu)
    step()  # the forward stored on the default stream
    api = TorchCuda()
    api._torch = gpu.torch
    captured = capture_step(api, step)
    assert captured.replayed, captured.failure
    before = gpu.calls
    captured.step()
    assert gpu.calls == before + 1 and gpu.replays == 1  # the backward alone, replayed


@pytest.mark.skipif(
    not __import__("torch").cuda.is_available(),
    reason="needs a CUDA device (the real TorchCuda backend)",
)
@pytest.mark.parametrize("timer", ["cuda_event", "kernel"])
def test_torch_cuda_backend_times_a_matmul_on_the_gpu(timer):
    import torch

    from perfsuite.measure.device_timing import TorchCuda

    a = torch.randn(1024, 1024, device="cuda")
    fixture, stats = make_fixture()
    api = TorchCuda()
    timing = time_on_device(fixture, lambda: a @ a, timer, api=api)
    assert all(d > 0 for d in timing.samples_s) and timing.kernel_median_s > 0
    assert timing.l2_flush_bytes == 2 * api.l2_cache_bytes() > 0
    assert timing.cuda_graph == "replayed" and timing.dispatch_median_s > 0


def test_benchmark_step_uses_the_device_clock_only_for_cuda_cases():
    gpu = FakeGpu()
    fixture, stats = make_fixture()
    timing, info = benchmark_step(fixture, gpu.step, "cuda", "kernel", QUICK, api=gpu)
    assert info["timer"] == "kernel" and info["clock"] == "kernel"
    assert stats[0].stats.median == pytest.approx(STEP_S)


def test_benchmark_step_on_the_cpu_is_host_timed_whatever_the_setting():
    import time

    calls = []
    fixture, stats = make_fixture()
    fixture._timer = time.perf_counter  # a real clock: pytest-benchmark calibrates its own timer
    timing, info = benchmark_step(
        fixture, lambda: calls.append(1), "cpu", "cuda_event", api=FakeGpu()
    )
    assert timing is None and info == {"timer": "host", "clock": "host", "cuda_graph": "off"}
    assert calls and stats[0].stats.rounds >= 1


def test_the_ab_worker_times_rounds_on_the_device_clock_and_says_which():
    from perfsuite.gate.ab_worker import Worker
    from perfsuite.measure.device_timing import DeviceSampler

    gpu = FakeGpu(host_gap_s=300e-6)  # a host gap longer than the step: host wall would be 3x
    worker = Worker()
    worker.device_sampler = DeviceSampler(gpu.step, api=gpu, host_clock=gpu.host_clock)
    worker.clock = worker.device_sampler.clock
    worker.device_sampler.warm_up(0.01)
    assert gpu.replays >= 100  # 10 ms of 0.1 ms replays
    reply = worker.handle({"time": 6, "warmup": 2})
    assert reply["clock"] == "cuda_graph" and len(reply["times"]) == 6
    assert reply["times"] == pytest.approx([STEP_S] * 6, rel=0.01)
    eager = DeviceSampler(gpu.step, api=gpu, cuda_graph=False, host_clock=gpu.host_clock)
    assert eager.clock == "blocked_event"
    assert eager.samples(3) == pytest.approx([STEP_S + gpu.event_s] * 3)


def test_the_ab_json_says_which_clock_each_benchmark_was_timed_on():
    from perfsuite.gate.ab import AbBenchmark, GateSettings, ab_payload
    from perfsuite.gate.compare import BenchmarkComparison
    from perfsuite.gate.stats import Verdict

    comparison = BenchmarkComparison("sdpa/8x16x1024x64", None, None, None, Verdict.MISSING, [], "")
    found = AbBenchmark("sdpa/8x16x1024x64", [[1e-4]], [[1e-4]], comparison, clock="cuda_graph")
    payload = ab_payload([found], {}, GateSettings())
    assert payload["benchmarks"][0]["clock"] == "cuda_graph"


def test_the_gpu_timers_script_refuses_a_machine_without_cuda_and_tabulates_ratios(
    capsys, monkeypatch
):
    import torch

    from validation import gpu_timers

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as stopped:
        gpu_timers.main(["--samples", "200"])
    assert stopped.value.code == 2
    assert "needs a CUDA device: torch.cuda.is_available() is False" in capsys.readouterr().err
    result = {
        "step": "sdpa:forward:b8h16s1024d64-bf16-causal-cuda",
        "samples_s": {"old event": [2e-4] * 10, gpu_timers.REFERENCE: [1e-4] * 10},
        "notes": {"triton do_bench": "failed: RuntimeError: no"},
        "gpu_before": {"sm_clock_mhz": 1980.0},
        "gpu_after": {"sm_clock_mhz": 1980.0},
    }
    assert gpu_timers.table(
        {"step": "sdpa:backward:x", "error": "AttributeError: no", "samples_s": {}}
    ) == [
        "### sdpa:backward:x",
        "",
        "failed: AttributeError: no",
        "",
    ]
    monkeypatch.setattr(gpu_timers, "time_step", lambda *a: 1 / 0)
    assert gpu_timers.time_step_or_failure("sdpa:forward:x", 10, 1.0, 0)["error"] == (
        "ZeroDivisionError: division by zero"
    )
    lines = gpu_timers.table(result)
    assert "| old event | 10 | 200.0 | 0.0% | 2.000 |  |" in lines
    assert "| triton do_bench | 0 | - | - | - | failed: RuntimeError: no |" in lines


def test_a_gpu_throttled_throughout_is_timed_from_every_sample_and_says_so():
    state = {"present": True, "max_sm_clock_mhz": 2000.0, "throttle_reasons": ["hw_slowdown"]}
    gpu = FakeGpu(clock_for_call=lambda n: 0.5 * MAX_CLOCK_HZ, state=state)
    fixture, _ = make_fixture()
    rule = SamplingRule(warmup_s=0.0, min_sample_s=0.0, max_wall_s=0.01)
    timing = time_on_device(
        fixture, gpu.step, "cuda_event", rule, api=gpu, host_clock=gpu.host_clock
    )
    assert timing.cuda_graph == "replayed (5 steps a replay)"  # sized from the slow step
    # every replay at half clock: (5 x 200 us + 3.5 us of launch and event) / 5 steps
    assert timing.all_set_aside and timing.device_median_s == pytest.approx(2 * STEP_S + 0.7e-6)
    assert "every event sample was set aside" in " ".join(timing.notes())
    assert timing.throttle().startswith("hw_slowdown; ")


@pytest.mark.parametrize("without", [(), ("activity_type",)], ids=["installed", "torch-2.11"])
@pytest.mark.parametrize(
    "trace", ["h100_bert-small_sdpa-flash.json.gz", "a100_train_step_rank0.json.gz"]
)
def test_device_work_is_read_from_kineto_records_with_or_without_activity_type(trace, without):
    """The records of a real trace as Kineto events with the installed torch's methods (and with
    torch 2.11's, which has no ``activity_type()``): the kernels, memcpy and memset are kept, the
    GPU-side annotations and the CPU records left out. Counted from the JSON directly."""
    raw = [e for e in trace_events(trace) if e.get("ph") == "X" and "dur" in e]
    work = [e for e in raw if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    records = kineto_records(trace_kineto_events(trace, without))
    assert len(records) == len(work) > 0
    assert sorted(r.name for r in records) == sorted(e["name"] for e in work)
    assert [r.start_s for r in records] == sorted(r.start_s for r in records)
    first = min(work, key=lambda e: float(e["ts"]))
    assert records[0].end_s - records[0].start_s == pytest.approx(
        float(first["dur"]) / 1e6, abs=1e-7
    )


def test_a_short_step_reads_its_own_time_through_a_graph_of_unrolled_steps():
    """A 20 us step: one replay a sample carries the graph's launch and the end event (3.5 us,
    17%); a graph of 49 steps (1 ms over the 20.5 us eager sample) shares them (0.35%), as
    do_bench_cudagraph's unrolled graph does."""
    fast = ((FLASH_FWD, 20e-6),)
    single = FakeGpu(kernels=fast)
    replay = capture_step(single, single.step).step
    timer = BlockedEventTimer(single, replay, flush=None, sm_clock_hz=MAX_CLOCK_HZ)
    assert timer.sample().device_s == pytest.approx(20e-6 + 3.5e-6)
    gpu = FakeGpu(kernels=fast)
    timing = time_on_device(
        make_fixture()[0], gpu.step, "cuda_event", QUICK, api=gpu, host_clock=gpu.host_clock
    )
    assert timing.cuda_graph == "replayed (49 steps a replay)"
    assert timing.device_median_s == pytest.approx(20e-6, rel=0.005)


def test_a_profiler_failure_leaves_the_event_row_and_says_why_it_has_no_kernel_time():
    """Under nsys or ncu CUPTI is taken and the profiler session fails: the cuda_event row keeps
    its graph time and names the failure instead of failing the row."""
    gpu = FakeGpu()

    def taken(run):
        raise RuntimeError("CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED\nmore")

    gpu.trace_kernels = taken
    timing = time_on_device(
        make_fixture()[0], gpu.step, "cuda_event", QUICK, api=gpu, host_clock=gpu.host_clock
    )
    assert timing.kernel_median_s is None and timing.device_median_s == pytest.approx(
        STEP_S, rel=0.01
    )
    assert (
        "kernel time unavailable: RuntimeError: CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"
        in (timing.notes())
    )


def test_clocks_locked_low_are_not_taken_for_throttling_where_nvml_counts_it():
    """A gate machine with its SM clock locked at 60% of the maximum: every spin reads 60%. NVML's
    counters (which see power and thermal throttling) stay still, so no sample is set aside; the
    clock check is against the highest clock seen. Without the counters, the maximum stands."""
    locked = 0.6 * MAX_CLOCK_HZ
    gpu = FakeGpu(locked_clock_hz=locked)
    timing = time_on_device(
        make_fixture()[0], gpu.step, "cuda_event", QUICK, api=gpu, host_clock=gpu.host_clock
    )
    assert timing.throttled_samples == 0 and not timing.all_set_aside
    assert timing.device_median_s == pytest.approx(STEP_S / 0.6, rel=0.01)
    blind = FakeGpu(locked_clock_hz=locked, nvml_counters=False)
    timing = time_on_device(
        make_fixture()[0], blind.step, "cuda_event", QUICK, api=blind, host_clock=blind.host_clock
    )
    assert timing.all_set_aside  # every sample below 75% of the maximum, and the row says so


def test_an_ab_block_is_warmed_up_and_screened_for_throttling():
    """``DeviceSampler.screened_block``, for the A/B worker: a block's samples throttled while
    timed (NVML's counters rose) are set aside and replaced, and the block warms up first."""
    from perfsuite.measure.device_timing import DeviceSampler

    slow = lambda n: 0.6 * MAX_CLOCK_HZ if (n // 10) % 4 == 3 else MAX_CLOCK_HZ
    gpu = FakeGpu(clock_for_call=slow)
    sampler = DeviceSampler(gpu.step, api=gpu, host_clock=gpu.host_clock)
    before = gpu.replays
    times, aside = sampler.screened_block(8, warmup_s=0.002)
    assert len(times) == 8 and aside >= 1
    assert max(times) < STEP_S * 1.1  # the slow replays are not among them
    assert gpu.replays - before >= 8 + aside + 2  # warm-up replays (1 ms each) came first
    with pytest.raises(DeviceTimingError, match="a block of 0 samples"):
        sampler.screened_block(0)
