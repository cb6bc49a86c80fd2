"""Shared fixtures: every backend-parametrised test runs on NumPy, and on CuPy when a GPU is present.

Select the GPU variants alone with ``pytest -m gpu``.
"""
import pytest

from fem3d.backend import cupy_module, get_backend


@pytest.fixture(params=["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def backend(request):
    if request.param == "gpu" and cupy_module() is None:
        pytest.skip("no CUDA GPU")
    return get_backend(request.param)
