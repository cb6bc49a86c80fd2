"""Steady incompressible Navier-Stokes on Q2-Q1 hexahedra (Kao & Sheu 2018) with NumPy or CuPy."""
import gpucfd  # noqa: F401  (first: under MPI it sizes the BLAS thread pools before NumPy loads them)
