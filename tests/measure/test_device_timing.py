"""Device timing on a fake device: the CUDA calls behind ``DeviceApi`` are replaced by a clock
this test drives, so what pytest-benchmark stores can be checked exactly on a CPU."""

import types

import pytest
from pytest_benchmark.fixture import BenchmarkFixture
from pytest_benchmark.utils import NameWrapper

from perfsuite.measure.device_api import L2_FLUSH_FACTOR
from perfsuite.measure.device_timing import (
    DeviceClock,
    DeviceTimingError,
    L2Flush,
    capture_step,
    parse_timer,
    time_on_device,
)

STEP_DEVICE_S, STEP_HOST_S, FLUSH_DEVICE_S, L2_BYTES = 0.003, 0.004, 0.005, 50 * 2**20


class FakeDevice:
    """A device whose clock advances only when work runs on it; events read that clock."""

    def __init__(self, capture_error=None):
        self.device_now = self.host_now = 0.0
        self.calls = {
            "sync": 0,
            "flush": 0,
            "step": 0,
            "replay": 0,
            "trace_start": 0,
            "trace_stop": 0,
        }
        self.buffers = []
        self.capture_error = capture_error
        self._trace_from = None

    def run_step(self):
        self.calls["step"] += 1
        self.device_now += STEP_DEVICE_S
        self.host_now += STEP_HOST_S

    def host_clock(self):
        return self.host_now

    # DeviceApi
    def synchronize(self):
        self.calls["sync"] += 1

    def record_event(self):
        return self.device_now

    def elapsed_s(self, start, end):
        return end - start

    def start_kernel_trace(self):
        assert self._trace_from is None, "a kernel trace is already running"
        self.calls["trace_start"] += 1
        self._trace_from = self.device_now

    def stop_kernel_trace(self):
        self.calls["trace_stop"] += 1
        elapsed, self._trace_from = self.device_now - self._trace_from, None
        return elapsed

    def l2_cache_bytes(self):
        return L2_BYTES

    def flush_buffer(self, size_bytes):
        self.buffers.append(size_bytes)
        return size_bytes

    def write(self, buffer):
        self.calls["flush"] += 1
        self.device_now += FLUSH_DEVICE_S

    def capture_graph(self, step):
        if self.capture_error:
            raise self.capture_error

        def replay():
            self.calls["replay"] += 1
            step()

        return replay


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


def with_host_clock(device, monkeypatch):
    original = DeviceClock.__init__

    def init(self, api, kind, host_clock=None):
        original(self, api, kind, device.host_clock)

    monkeypatch.setattr(DeviceClock, "__init__", init)


@pytest.mark.parametrize("timer", ["cuda_event", "kernel"])
def test_pytest_benchmark_stores_device_time_with_the_flush_left_out(timer, monkeypatch):
    device = FakeDevice()
    with_host_clock(device, monkeypatch)
    fixture, stats = make_fixture()
    timing = time_on_device(fixture, device.run_step, timer, rounds=5, warmup_rounds=2, api=device)
    assert (
        device.calls["step"] == 7 and device.calls["flush"] == 7
    )  # every round, warm-up included, flushed first
    assert stats[0].stats.rounds == 5
    assert stats[0].stats.median == pytest.approx(STEP_DEVICE_S)  # the 5 ms flush is not in it
    assert timing.device_s == pytest.approx((STEP_DEVICE_S,) * 5)
    assert timing.wall_s == pytest.approx((STEP_HOST_S,) * 5)
    assert timing.overhead_median_s == pytest.approx(STEP_HOST_S - STEP_DEVICE_S)
    assert timing.l2_flush_bytes == L2_FLUSH_FACTOR * L2_BYTES == device.buffers[0]
    assert stats[0].as_dict()["options"]["timer"] == f"perfsuite_{timer}_clock"
    assert (
        fixture._timer.__name__ not in fixture._precisions
    )  # the preset precision is removed afterwards
    if timer == "kernel":
        assert (
            device.calls["trace_start"] == device.calls["trace_stop"] > 0
        )  # no trace left running


def test_without_flush_nothing_is_written():
    device = FakeDevice()
    fixture, stats = make_fixture()
    timing = time_on_device(
        fixture,
        device.run_step,
        "cuda_event",
        rounds=3,
        warmup_rounds=0,
        flush_l2=False,
        api=device,
    )
    assert device.calls["flush"] == 0 and device.buffers == []
    assert timing.l2_flush_bytes == 0 and timing.device_s == pytest.approx((STEP_DEVICE_S,) * 3)


def test_cuda_graph_replay_is_timed_when_capture_works():
    device = FakeDevice()
    fixture, _ = make_fixture()
    timing = time_on_device(
        fixture,
        device.run_step,
        "cuda_event",
        rounds=3,
        warmup_rounds=1,
        cuda_graph=True,
        api=device,
    )
    assert timing.cuda_graph == "replayed" and device.calls["replay"] == 4


def test_a_failed_capture_is_reported_and_the_eager_step_timed():
    device = FakeDevice(
        capture_error=RuntimeError("operation not permitted when stream is capturing\ndetails")
    )
    fixture, _ = make_fixture()
    timing = time_on_device(
        fixture,
        device.run_step,
        "cuda_event",
        rounds=2,
        warmup_rounds=0,
        cuda_graph=True,
        api=device,
    )
    assert (
        timing.cuda_graph
        == "capture failed: RuntimeError: operation not permitted when stream is capturing"
    )
    assert device.calls["replay"] == 0 and device.calls["step"] == 2
    assert timing.extra_info()["cuda_graph"] == timing.cuda_graph


def test_disabled_benchmark_runs_the_step_once_untimed():
    device = FakeDevice()
    fixture, stats = make_fixture(disabled=True)
    assert time_on_device(fixture, device.run_step, "kernel", rounds=5, api=device) is None
    assert device.calls["step"] == 1 and stats == [] and device.calls["trace_start"] == 0


def test_bad_settings_and_device_answers_name_the_value():
    with pytest.raises(DeviceTimingError, match="'cupti'"):
        parse_timer("cupti")
    assert parse_timer(" CUDA_EVENT ") == "cuda_event"
    fixture, _ = make_fixture()
    with pytest.raises(DeviceTimingError, match="benchmark\\(step\\)"):
        time_on_device(fixture, lambda: None, "host", rounds=3, api=FakeDevice())
    with pytest.raises(DeviceTimingError, match="rounds must be >= 1"):
        time_on_device(fixture, lambda: None, "kernel", rounds=0, api=FakeDevice())
    broken = FakeDevice()
    broken.l2_cache_bytes = lambda: 0
    with pytest.raises(DeviceTimingError, match="L2 cache of 0 bytes"):
        L2Flush(broken)
    with pytest.raises(DeviceTimingError, match="'wall'"):
        DeviceClock(FakeDevice(), "wall")


def test_capture_step_keeps_the_step_on_failure():
    def step():
        return "eager"

    device = FakeDevice(capture_error=ValueError("bad"))
    captured = capture_step(device, step)
    assert captured.step is step and not captured.replayed and captured.failure == "ValueError: bad"


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
    timing = time_on_device(
        fixture, lambda: a @ a, timer, rounds=5, warmup_rounds=1, cuda_graph=True, api=api
    )
    assert all(d > 0 for d in timing.device_s) and len(timing.wall_s) == 5
    assert timing.l2_flush_bytes == 2 * api.l2_cache_bytes() > 0
    assert timing.cuda_graph == "replayed"


def test_benchmark_step_uses_the_device_clock_only_for_cuda_cases():
    from perfsuite.measure.device_timing import benchmark_step

    device = FakeDevice()
    fixture, stats = make_fixture()
    timing, info = benchmark_step(fixture, device.run_step, "cuda", "kernel", rounds=4, api=device)
    assert timing.device_s == pytest.approx((STEP_DEVICE_S,) * 4) and info["timer"] == "kernel"
    assert stats[0].stats.median == pytest.approx(STEP_DEVICE_S)


def test_benchmark_step_on_the_cpu_is_host_timed_whatever_the_setting():
    import time

    from perfsuite.measure.device_timing import benchmark_step

    calls = []
    fixture, stats = make_fixture()
    fixture._timer = time.perf_counter  # a real clock: pytest-benchmark calibrates its own timer
    timing, info = benchmark_step(
        fixture, lambda: calls.append(1), "cpu", "cuda_event", rounds=4, api=FakeDevice()
    )
    assert timing is None and info == {"timer": "host", "cuda_graph": "off"}
    assert calls and stats[0].stats.rounds >= 1
