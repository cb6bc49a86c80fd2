"""Solvers: element-by-element operators, Krylov methods, monolithic multigrid with Vanka
smoothing, the linear solvers of --solver and the nonlinear (Newton, continuation) iteration.
They see operators and vectors, never a problem.
"""
