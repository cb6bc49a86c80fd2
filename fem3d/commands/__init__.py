"""What the programs (python -m fem3d.cavity, verify, run) share: solver options, outputs
and pictures (drawn in child processes), the memory estimate and the cavity's resolution model.
"""
