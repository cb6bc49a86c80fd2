"""The base layer that fem3d and tridiag share: the array backend (NumPy or CuPy, CUDA
kernel compilation, timing), errors and the command-line conventions (one-line messages,
exit codes), and atomic result files. It imports neither package."""
