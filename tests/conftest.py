"""Shared fixtures: every backend-parametrised test runs on NumPy, and on CuPy when a GPU is present.

Select the GPU variants alone with ``pytest -m gpu``.
"""

import os

import pytest

from gpucfd.backend import cupy_module, get_backend

TESTS = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(params=["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def backend(request):
    if request.param == "gpu" and cupy_module() is None:
        pytest.skip("no CUDA GPU")
    return get_backend(request.param)


@pytest.fixture
def child_imports_tests(monkeypatch):
    """Let child Python processes (fem3d.commands.picture_process) import the modules in tests/."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [TESTS, os.environ.get("PYTHONPATH")])))
