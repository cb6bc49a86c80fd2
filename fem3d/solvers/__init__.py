"""Solvers: element-by-element operators (stored element matrices, or sum factorisation from
data at the Gauss points: partial_assembly), Krylov methods, monolithic multigrid with Vanka
smoothing, the linear solvers of --solver and the nonlinear (Newton, continuation) iteration.
They see operators and vectors, never a problem.
"""
