"""Kernels of tridiag: each CUDA source (``*.cu``, compiled by gpucfd.backend.cuda_module)
has a NumPy reference beside it in the matching module, with the same arithmetic.

NumPy references take rows-first arrays of shape (n, S) (row k of all S systems is
``x[k]``) with a[0] = 0 and c[n-1] = 0 already set. CUDA launchers take the canonical
(outer, n, inner) CuPy arrays of tridiag.layout and ignore a[0] and c[n-1] themselves.
"""
