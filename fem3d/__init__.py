"""Steady incompressible Navier-Stokes on Q2-Q1 hexahedra (Kao & Sheu 2018) with NumPy or CuPy.

The Python API (fem3d.flow): ``read_mesh``, ``box_mesh``, ``Flow`` and the boundary
conditions ``Wall``, ``Velocity``, ``Outflow``, ``Slip``; loaded on first use, so that
``import fem3d`` stays light for the command-line programs.
"""
import importlib

import gpucfd  # noqa: F401  (first: under MPI it sizes the BLAS thread pools before NumPy loads them)

API = {"read_mesh": "mesh", "box_mesh": "mesh", "Flow": "flow", "FlowResult": "flow",
       "Wall": "boundary", "Velocity": "boundary", "Outflow": "boundary", "Slip": "boundary"}
__all__ = sorted(API)


def __getattr__(name):
    if name in API:
        return getattr(importlib.import_module(f".{API[name]}", __name__), name)
    raise AttributeError(f"module 'fem3d' has no attribute {name!r}")
