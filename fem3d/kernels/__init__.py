"""Kernels of fem3d: each CUDA kernel (``*.cu``, compiled by gpucfd.backend.cuda_module)
has a NumPy reference with the same signature beside it in the matching module
(quadrature's stay in fem3d.discretisation, whose functions dispatch to it); tests
compare the two."""
