"""Incompressible Navier-Stokes, steady or in time, on Q2-Q1 hexahedra (Kao & Sheu 2018) with NumPy or CuPy.

Groups, each using only those above it in this list:
  discretisation  reference element, meshes (boxes, files, refinement, checks), geometry,
                  assembly, upwinding, fields, VTU writers
  parallel        communicators (serial, MPI, NCCL), partitions and interface sums, agreed stops
  solvers         operators, Krylov methods, multigrid and Vanka, the linear solvers, Newton,
                  time stepping
  problems        the Navier-Stokes system, boundary conditions, forces and fluxes, the API and
                  case files, exact solutions, reference data, running a system on several
                  ranks, the memory a run needs, and the one pipeline every front end runs
                  (simulation: Simulation -> result: FlowResult)
  commands        what the programs share: options, outputs, pictures and resolution
  kernels/        CUDA sources with a NumPy reference beside each
The programs: python -m fem3d.cavity | verify | run | mesh.

The Python API (fem3d.problems.flow): ``read_mesh``, ``box_mesh``, ``Flow``, the boundary
conditions ``Wall``, ``Velocity``, ``Outflow``, ``Slip`` and the solver settings
``NonlinearOptions``, ``LinearOptions``, ``TimeOptions``; loaded on first use, so that
``import fem3d`` stays light for the command-line programs.
"""

import importlib

import gpucfd  # noqa: F401  (first: under MPI it sizes the BLAS thread pools before NumPy loads them)

API = {
    "read_mesh": "discretisation.mesh",
    "box_mesh": "discretisation.mesh",
    "Flow": "problems.flow",
    "FlowResult": "problems.result",
    "NonlinearOptions": "solvers.nonlinear",
    "LinearOptions": "solvers.linear",
    "TimeOptions": "solvers.time_stepping",
    "Wall": "problems.boundary",
    "Velocity": "problems.boundary",
    "Outflow": "problems.boundary",
    "Slip": "problems.boundary",
}
__all__ = sorted(API)


def __getattr__(name):
    if name in API:
        return getattr(importlib.import_module(f".{API[name]}", __name__), name)
    raise AttributeError(f"module 'fem3d' has no attribute {name!r}")
