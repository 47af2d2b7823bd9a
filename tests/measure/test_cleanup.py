import gc
import weakref

import torch

from perfsuite.measure.cleanup import release_device_memory, release_exception_frames


def fails_holding(tensor_ref):
    scores = torch.zeros(64, 64)  # a local the traceback's frame keeps alive
    tensor_ref.append(weakref.ref(scores))
    try:
        raise ValueError("inner")
    except ValueError as inner:
        raise RuntimeError("no kernel") from inner


def capture():
    refs = []
    try:
        fails_holding(refs)
    except RuntimeError as exc:
        return exc, refs[0]


def test_a_cached_exception_keeps_its_frames_tensors_alive_until_released():
    exc, ref = capture()
    gc.collect()
    assert ref() is not None, "the traceback's frame holds the tensor"
    assert release_exception_frames(exc) is exc
    gc.collect()
    assert ref() is None
    assert "fails_holding" in "".join(
        __import__("traceback").format_exception(exc)
    )  # where it came from is kept
    assert isinstance(exc.__cause__, ValueError)


class FakeCuda:
    def __init__(self, available):
        self.available, self.calls = available, []

    def is_available(self):
        return self.available

    def synchronize(self):
        self.calls.append("synchronize")

    def empty_cache(self):
        self.calls.append("empty_cache")


def test_device_memory_is_released_only_on_cuda():
    cuda = FakeCuda(True)
    assert release_device_memory("cuda", cuda) is True and cuda.calls == [
        "synchronize",
        "empty_cache",
    ]
    absent = FakeCuda(False)
    assert release_device_memory("cuda", absent) is False and absent.calls == []
    assert release_device_memory("cpu", cuda) is False and cuda.calls == [
        "synchronize",
        "empty_cache",
    ]
