"""The discretisation: reference element, meshes (boxes, meshio files, nested refinement, checks),
geometry, element matrices and upwinding, finite element fields and the VTU writers.
"""
