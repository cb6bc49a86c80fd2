"""Kernels of fem3d: each CUDA kernel (``*.cu``, compiled by gpucfd.backend.cuda_module)
has a NumPy reference with the same signature beside it in the matching module;
tests compare the two."""
