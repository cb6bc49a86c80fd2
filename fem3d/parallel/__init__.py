"""Several ranks: communicators (serial, MPI, NCCL), the partition of a mesh with its interface
sums and dot products, and stop requests agreed by every rank.
"""
