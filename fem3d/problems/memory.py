"""The memory a fem3d run needs, estimated before anything is allocated.

Per element of this rank's part: the stored element matrices and everything else the
solver keeps (vectors, preconditioner, assembly batches; for mg its float32 copy of the
finest matrices, Vanka inverses, coarse levels and FGMRES basis; with --assembly partial the
point data of the sum-factorised products, no element matrix kept on the finest level), plus
a fixed part (the NumPy path's batched diag(A^T A), the CUDA context and modules), fitted to
the peak memory of runs (docs/fem3d.md, memory); for mg, a hierarchy with more coarse
elements than a box's (semi-coarsened meshes: up to twice the finest level's) adds
COARSE_BYTES per element beyond; a run in time keeps TIME_VECTORS more vectors of the
unknowns (the states of earlier steps, the extrapolated guess, the step's history term).
Each rank's host also holds the whole mesh, or under MPI a box's part alone
(fem3d.discretisation.mesh.Box), or a refined mesh's part and the meshes it refines
(fem3d.discretisation.refine.Refined): :func:`host_share`.
"""

from __future__ import annotations

from dataclasses import replace

import math

from gpucfd.backend import host_free_bytes
from gpucfd.errors import InputError

# (device kind, matrix storage, solver) -> (bytes per element, fixed bytes) on the device
DEVICE_BYTES = {
    ("gpu", "float64", "paper"): (101.5e3, 0.5e9),
    ("gpu", "float32", "paper"): (65.4e3, 0.5e9),
    ("cpu", "float64", "paper"): (72e3, 2.6e9),
    ("cpu", "float32", "paper"): (100e3, 2.6e9),  # an upper bound (a float64 copy per NumPy product)
    ("gpu", "float64", "mg"): (135e3, 3.5e9),  # float16 inverses
    ("gpu", "float32", "mg"): (182e3, 2.2e9),  # no lower than float64: CuPy's pool keeps freed blocks
    ("cpu", "float64", "mg"): (245e3, 0.05e9),
    ("cpu", "float32", "mg"): (217e3, 0.05e9),
    ("gpu", "partial", "mg"): (38.5e3, 2.9e9),  # no element matrix stored, float32 point data, float16 inverses
    ("cpu", "partial", "mg"): (130e3, 0.1e9),
}
HOST_MESH_BYTES = 4e3  # per element of the mesh a rank holds on the host: connectivity, coordinates, geometry, faces
BOX_COARSE = 1.0 / 7.0  # coarse elements per element of a box's hierarchy, which DEVICE_BYTES's mg entries hold
COARSE_BYTES = {"gpu": 49e3, "cpu": 70e3}  # per coarse element beyond BOX_COARSE: its Galerkin matrix, smoother, tables
TIME_VECTORS = 6  # float64 vectors of the unknowns a run in time holds beyond a steady run's (docs/fem3d.md, memory)
UNKNOWNS_PER_ELEMENT = 25  # of a large hexahedral mesh: 8 Q2 nodes (3 velocity components) and 1 pressure vertex each


def check_fits(
    backend,
    matrix_dtype: str,
    solver: str,
    mesh_elements: int,
    ranks: int,
    largest,
    assembly: str = "element",
    coarse: float = BOX_COARSE,
    in_time: bool = False,
    whole_mesh: float = 1.0,
) -> str:
    """InputError unless this rank's share of a mesh of ``mesh_elements`` elements split
    over ``ranks`` fits its device, and the mesh its host, with the linear solver
    ``solver`` (fem3d.solvers.linear.SOLVERS; auto is counted as mg, the larger) and
    ``assembly`` (fem3d.solvers.linear.LinearOptions.assembly). ``largest(n)`` words the hint
    for a mesh of n elements, e.g. "--n 92 fits at most". Returns the assembly that fits:
    for "auto" the stored element matrices where they fit, else partial assembly (not for
    the paper solver); the error is then partial assembly's. ``coarse``: the multigrid
    hierarchy's coarse elements per element of the mesh, where known (default: a box's);
    ``in_time``: a run in time (TIME_VECTORS more vectors); ``whole_mesh``: the share of the
    whole mesh every rank's host holds (:func:`host_share`): w of the whole and 1 - w of its
    part's elements."""
    options = [assembly] if assembly != "auto" else ["element"] if solver == "paper" else ["element", "partial"]
    for k, option in enumerate(options):
        try:
            storage = "partial" if option == "partial" else matrix_dtype
            _check(backend, storage, solver, mesh_elements, ranks, largest, coarse, in_time, whole_mesh)
            return option
        except InputError:
            if k == len(options) - 1:
                raise


def fitting_assembly(
    backend,
    linear,
    mesh,
    ranks: int,
    coarse: float = BOX_COARSE,
    in_time: bool = False,
    whole_mesh: float = 1.0,
) -> tuple:
    """(options, warning line or None): ``linear`` (fem3d.solvers.linear.LinearOptions, its
    solver resolved by for_mesh) with its assembly checked by :func:`check_fits` for ``mesh``
    (a whole HexMesh) whose hierarchy has ``coarse`` coarse elements per element (``in_time``,
    ``whole_mesh``: :func:`check_fits`), "auto" resolved, and a line saying so where that took
    partial assembly. The error of a refined mesh names the most refinements of the mesh it
    was refined from that fit (:func:`largest_refinement`), of another the elements."""
    base = mesh
    while base.coarser is not None:
        base = base.coarser
    mesh_elements = mesh.n_elements
    chosen = check_fits(
        backend,
        linear.matrix_dtype,
        linear.solver,
        mesh_elements,
        ranks,
        (lambda e: f"{e:,} elements fit") if base is mesh else (lambda e: largest_refinement(base.n_elements, e)),
        linear.assembly,
        coarse,
        in_time,
        whole_mesh,
    )
    note = (
        None
        if linear.assembly != "auto" or chosen == "element"
        else (
            f"{mesh_elements:,} elements do not fit with stored element matrices: --assembly partial "
            f"(sum-factorised products, no element matrix kept; about 30 % slower where both fit)"
        )
    )
    return replace(linear, assembly=chosen), note


def host_share(mesh, ranks: int) -> float:
    """The share of the whole ``mesh`` that every rank's host holds when ``ranks`` ranks solve
    it: 0 for a box (fem3d.discretisation.mesh.Box: each rank builds its part alone), for a
    refined mesh (fem3d.discretisation.refine.Refined: each rank builds its part from its
    parents) the meshes it refines, held whole (:func:`refined_share`), 1 for any other or
    one rank."""
    from ..discretisation.mesh import LazyMesh

    if ranks == 1 or not isinstance(mesh, LazyMesh) or mesh.built:
        return 1.0
    below, level = 0, mesh.coarser
    while level is not None:
        below, level = below + level.n_elements, level.coarser
    return below / mesh.n_elements


def refined_share(times: int) -> float:
    """:func:`host_share` of a mesh refined ``times`` times: 1/8 + 1/64 + ... of its elements."""
    return sum(8.0**-k for k in range(1, times + 1)) if times else 1.0


def _check(
    backend,
    storage: str,
    solver: str,
    mesh_elements: int,
    ranks: int,
    largest,
    coarse: float,
    in_time: bool,
    whole_mesh: float,
) -> None:
    """InputError unless the mesh fits with ``storage`` (a matrix dtype, or partial), a
    hierarchy of ``coarse`` coarse elements per element and, ``in_time``, a run in time's
    vectors, its host holding the share ``whole_mesh`` of the whole mesh (:func:`check_fits`)."""
    elements = -(-mesh_elements // ranks)
    per_element, fixed = DEVICE_BYTES[(backend.kind, storage, "paper" if solver == "paper" else "mg")]
    if solver != "paper":
        per_element += COARSE_BYTES[backend.kind] * max(0.0, coarse - BOX_COARSE)
    if in_time:
        per_element += TIME_VECTORS * 8.0 * UNKNOWNS_PER_ELEMENT
    host = HOST_MESH_BYTES * (whole_mesh * ranks + 1 - whole_mesh)  # per element of the part: the mesh on the host
    if backend.is_gpu:
        checks = [
            (per_element, fixed, elements, ranks, backend.free_bytes(), "GPU"),
            (host, 0.0, elements, ranks, host_free_bytes(), "host"),
        ]
    else:
        per = per_element + host
        checks = [(per, fixed, elements, ranks, backend.free_bytes(), "host")]
    what = "partial assembly" if storage == "partial" else f"{storage} element matrices"
    for per, base, count, share, free, where in checks:
        need = base + per * count
        if need > free:
            fits = max(0, int((free - base) // per)) * share
            raise InputError(
                f"{mesh_elements:,} elements need about {need / 2**30:.3g} GiB of {where} memory"
                f"{' per rank' if ranks > 1 and share > 1 else ''} ({what}), "
                f"{max(free, 0) / 2**30:.3g} GiB is free: {largest(fits)}"
            )


def largest_refinement(elements: int, fitting: int) -> str:
    """The hint of a memory error for a mesh of ``elements`` elements of which ``fitting``
    fit: the largest --refine that fits."""
    if fitting < elements:
        return f"not even the file's mesh ({elements:,} elements) fits, at most {fitting:,} elements do"
    return f"--refine {int(math.log(fitting / elements, 8) + 1e-9)} fits at most"
