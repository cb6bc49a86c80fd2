"""The 2D cases built on the tridiagonal solvers: ADI heat conduction (``python -m
tridiag.cases.heat``), the vorticity–stream-function lid-driven cavity (``tridiag.cases.cavity2d``)
and the flow past a square cylinder in a channel (``tridiag.cases.cylinder``), with the line
sweeps, boundaries, outputs and reference data they share."""
