"""The base layer that fem3d and tridiag share: the array backend (NumPy or CuPy, CUDA
kernel compilation, timing), errors and the command-line conventions (one-line messages,
exit codes), and atomic result files. It imports neither package.

Importing it divides the machine's cores among the ranks of an MPI launch (before NumPy
loads its BLAS: gpucfd.threads)."""

from .threads import share_cores_among_ranks

share_cores_among_ranks()
