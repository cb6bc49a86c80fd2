"""Problems: the discrete Navier-Stokes system, boundary conditions by tag and their expressions,
forces and point values, the Python API (Flow) and case files, the lid-driven cavity, exact
solutions, published reference data, and a system on several ranks.
"""
