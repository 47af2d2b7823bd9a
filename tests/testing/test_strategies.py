from hypothesis import find, given

from perfsuite.testing.strategies import CUDA_HEAD_DIMS, attention_cases


@given(attention_cases(devices=("cuda",), dtypes=("bf16",)))
def test_cuda_cases_draw_head_dims_every_fused_backend_takes(case):
    assert case.device == "cuda" and case.head_dim in CUDA_HEAD_DIMS


def test_cpu_cases_still_draw_odd_head_dims():
    assert find(attention_cases(), lambda case: case.head_dim == 1).head_dim == 1
