"""The sum-factorised operator (fem3d.solvers.partial_assembly) is the stored-matrix operator."""

import os

import numpy as np
import pytest

from fem3d.discretisation.assembly import scale_rows
from fem3d.discretisation.refine import refine
from fem3d.discretisation.mesh import read_mesh
from fem3d.kernels import partial_assembly as kernels
from fem3d.kernels.ebe import NL
from fem3d.problems.navier_stokes import FlowProblem, NavierStokesSystem
from fem3d.solvers.partial_assembly import ASSEMBLIES, PartialAssemblyOperator
from fem3d.solvers.linear import LinearOptions, make_linear_solver
from fem3d.solvers.nonlinear import NonlinearOptions, NonlinearSolver
from fem3d.discretisation.mesh import box_mesh
from gpucfd.errors import InputError
from gpucfd.backend import cupy_module, get_backend
from support import MESHES, sample_mesh, twisted_mesh

RE = 40.0


def force(xp, x):
    return xp.stack([xp.sin(3 * x[..., 1]), x[..., 0] * x[..., 2], 1.0 + x[..., 0] ** 2], axis=-1)


def mesh_named(name):
    """sample_mesh's graded box, distorted hex8 and curved hex27 annulus, and the DFG channel (hex27)."""
    return read_mesh(os.path.join(MESHES, "dfg3d", "channel_coarse.msh")) if name == "channel" else sample_mesh(name)


def both_operators(mesh, backend, kind, seed=0, sigma=0.0, points_dtype=np.float64):
    """The stored operator D A (Picard) or D J (Newton) of NavierStokesSystem about a random
    iterate, with a body force, the Dirichlet rows and the rows weighted by the residual's
    scale, and the sum-factorised operator of the same (in chunks of 50 elements, its point
    data of ``points_dtype``: float64 to see its arithmetic exact); with ``sigma`` > 0 in a
    time step with a random history term, tau limited at the time scale sigma / 2 (a step
    shorter than the run's)."""
    problem = FlowProblem.with_boundary_velocity(mesh, RE, lambda x: np.tile([1.0, 0.5, 0.0], (len(x), 1)), force=force)
    system = NavierStokesSystem(problem, backend)
    rng = np.random.default_rng(seed)
    x = backend.asarray(rng.standard_normal(mesh.n_dofs))
    if sigma:
        system.set_time(sigma, backend.asarray(rng.standard_normal((mesh.n_nodes, 3))), tau_sigma=0.5 * sigma)
    state = system.assemble(x, kind)
    scale_rows(system.op.mats, system.op.dofs, None, state.scale)
    return system, system.partial_assembly(x, kind, state.scale, chunk=50, points_dtype=points_dtype)


def products(op, backend, v):
    """A v and A^T v on the host."""
    va = backend.asarray(v)
    return [backend.to_numpy(f(va, backend.xp.empty(op.n))) for f in (op.matvec, op.rmatvec)]


@pytest.mark.parametrize("kind", ["picard", "newton"])
@pytest.mark.parametrize(
    "name, sigma", [("box", 0.0), ("distorted", 0.0), ("annulus", 0.0), ("channel", 0.0), ("distorted", 30.0)]
)
def test_sum_factorised_products_equal_stored_matrices(backend, name, kind, sigma):
    """A x and A^T x agree to 1e-12 relative, also on the free rows alone (whose entries are
    not the diagonal of Algorithm 1), on an affine graded box, a distorted trilinear mesh and
    two curved triquadratic ones; and in a time step (sigma > 0: the mass term, the time
    limit of tau and the history term in the Jacobian's strong residual)."""
    mesh = mesh_named(name)
    system, op = both_operators(mesh, backend, kind, sigma=sigma)
    v = np.random.default_rng(1).standard_normal(mesh.n_dofs)
    free = ~backend.to_numpy(system.fixed)
    for got, ref in zip(products(op, backend, v), products(system.op, backend, v)):
        assert np.linalg.norm(got - ref) <= 1e-12 * np.linalg.norm(ref)
        assert np.linalg.norm((got - ref)[free]) <= 1e-12 * np.linalg.norm(ref[free])


@pytest.mark.parametrize("kind", ["picard", "newton"])
def test_float32_point_data_round_the_products_only(backend, kind):
    """The default point data (float32, half the bytes) give the stored float64 products to
    float32's rounding (relative 1e-6, against 1e-12 in float64) on the curved annulus in a
    time step, and differ from the float64 data's (the rounding is there)."""
    mesh = mesh_named("annulus")
    system, op = both_operators(mesh, backend, kind, sigma=30.0, points_dtype=None)
    _, exact = both_operators(mesh, backend, kind, sigma=30.0)
    assert op.points.rounded.dtype == np.float32 and exact.points.rounded.dtype == np.float64
    v = np.random.default_rng(1).standard_normal(mesh.n_dofs)
    for got, ref, stored in zip(products(op, backend, v), products(exact, backend, v), products(system.op, backend, v)):
        assert 1e-10 * np.linalg.norm(stored) < np.linalg.norm(got - ref) <= 1e-6 * np.linalg.norm(stored)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["picard", "newton"])
@pytest.mark.parametrize(
    "name, sigma, points_dtype",
    [("box", 0.0, np.float64), ("distorted", 0.0, np.float64), ("distorted", 30.0, np.float64), ("box", 0.0, None)],
)
def test_cuda_products_equal_the_numpy_reference(name, kind, sigma, points_dtype):
    """fem3d.kernels.partial_assembly: A x and A^T x by the CUDA kernel agree with the NumPy
    reference to 1e-12 relative (the kernel sums each entry over its elements colour by
    colour, bincount in element order), with float64 point data also with the stored
    matrices, on the graded box (12 elements in colours of 1 to 2: thread blocks mostly
    empty, colour ranges starting at elements that are no multiple of 8) and the distorted
    mesh, also in a time step; with the default float32 point data too (the kernel built
    for them)."""
    if cupy_module() is None:
        pytest.skip("no CUDA GPU")
    mesh = mesh_named(name)
    gpu, cpu = get_backend("gpu"), get_backend("cpu")
    _, op = both_operators(mesh, gpu, kind, sigma=sigma, points_dtype=points_dtype)
    system, reference = both_operators(mesh, cpu, kind, sigma=sigma, points_dtype=points_dtype)
    assert op.products is kernels.products_cuda and reference.products is kernels.products_numpy
    assert op.points.rounded.dtype == reference.points.rounded.dtype == (points_dtype or np.float32)
    v = np.random.default_rng(1).standard_normal(mesh.n_dofs)
    exact = points_dtype == np.float64
    for got, ref, stored in zip(products(op, gpu, v), products(reference, cpu, v), products(system.op, cpu, v)):
        assert np.linalg.norm(got - ref) <= 1e-12 * np.linalg.norm(ref)
        assert np.linalg.norm(got - stored) <= (1e-12 if exact else 1e-6) * np.linalg.norm(stored)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["picard", "newton"])
@pytest.mark.parametrize("name", ["distorted", "channel"])
def test_cuda_products_are_deterministic(name, kind):
    """Two products of the same vector by the CUDA kernel are the same bits (matvec and
    rmatvec): one launch per colour adds without atomics, as the stored operator does."""
    if cupy_module() is None:
        pytest.skip("no CUDA GPU")
    gpu = get_backend("gpu")
    _, op = both_operators(mesh_named(name), gpu, kind)
    v = np.random.default_rng(2).standard_normal(op.n)
    first, second = products(op, gpu, v), products(op, gpu, v)
    for a, b in zip(first, second):
        assert np.array_equal(a.view(np.int64), b.view(np.int64))


def test_colour_offsets_must_split_the_elements(backend):
    """PartialAssemblyOperator refuses colour offsets that are no ranges covering all elements."""
    mesh = sample_mesh("box")
    for offsets in ([0, mesh.n_elements - 1], [1, mesh.n_elements], [0, 5, 3, mesh.n_elements], [0]):
        with pytest.raises(ValueError):
            PartialAssemblyOperator(backend, mesh.dofs(), offsets, mesh.n_dofs)


def test_upwind_and_newton_terms_are_active(backend):
    """Control for the test above: the streamline-upwind terms and the Newton terms change the
    products, so that test would see them wrong."""
    mesh = sample_mesh("distorted")
    v = np.random.default_rng(1).standard_normal(mesh.n_dofs)
    _, picard = both_operators(mesh, backend, "picard")
    _, newton = both_operators(mesh, backend, "newton")
    a, j = products(picard, backend, v)[0], products(newton, backend, v)[0]
    assert np.linalg.norm(j - a) > 0.1 * np.linalg.norm(a)
    picard.data["tau"][:] = 0.0
    assert np.linalg.norm(products(picard, backend, v)[0] - a) > 0.01 * np.linalg.norm(a)


def test_bytes_per_element(backend):
    """50 numbers per Gauss point (the Newton Jacobian's; the Picard matrix uses 26 of them),
    the first 10 (jinv, wq) in float64 and the others in float32, and the NL unknowns: a
    ninth of a stored float64 element matrix (all in float64: a sixth)."""
    mesh = sample_mesh("box")
    for kind in ("picard", "newton"):
        for points_dtype, size in ((None, 4), (np.float64, 8)):
            _, op = both_operators(mesh, backend, kind, points_dtype=points_dtype)
            assert (
                op.bytes_per_element
                == (10 * 8 + 40 * size) * 27 + NL * 4
                < NL * NL * 8 * (1 / 9 if size == 4 else 1 / 5)
            )
            fields = 50 if kind == "newton" else 26
            assert sum(a[..., 0].nbytes for a in op.data.values()) == (10 * 8 + (fields - 10) * size) * 27


def test_node_classes_follow_the_q2_node_order():
    """The kernels' middle-node masks (built without the element module) are Q2's."""
    from fem3d.discretisation.element import Q2

    assert np.array_equal(kernels.CLASSES[1:], (Q2.node_indices == 1).T)
    assert np.array_equal(kernels.CLASSES[0], np.ones(27))


@pytest.mark.parametrize("name", ["box", "refined twisted"])
def test_multigrid_with_sum_factorised_products_reaches_the_same_solution(backend, name, monkeypatch):
    """--assembly partial: FGMRES on the sum-factorised Newton operator and no element matrix
    kept by the system; multigrid's finest level is the sum-factorised operator, its
    Galerkin product and smoother blocks from matrices computed chunk by chunk (the refined
    mesh: a general mesh of 4^3 jittered and turned hex8 elements refined once, 15,468
    unknowns, over that mesh, 2,312, and its sheets paired, 2^3 and 402, with levels
    coarsened down to 1,000 unknowns instead of 5,000 so that a small mesh has all three),
    or, where the mesh is the coarsest level (the box), a float32 copy of the matrices
    computed chunk by chunk. The stored operator's Newton steps, FGMRES iterations and
    solution (to 1e-8 relative; both solved to the residual 1e-10)."""
    if name == "refined twisted":
        monkeypatch.setattr("fem3d.solvers.multigrid.COARSE_MAX", 1000)
        mesh = refine(twisted_mesh(4))
    else:
        mesh = mesh_named(name)
    problem = FlowProblem.with_boundary_velocity(mesh, RE, lambda x: np.tile([1.0, 0.5, 0.0], (len(x), 1)), force=force)
    results = {}
    for assembly in ASSEMBLIES:
        system = NavierStokesSystem(problem, backend, assembly=assembly)
        linear = make_linear_solver(LinearOptions(solver="mg", assembly=assembly).for_mesh(mesh))
        results[assembly] = NonlinearSolver(system, linear, NonlinearOptions(tol=1e-10)).solve()
        fine = linear.mg.levels[0].op
        if assembly == "partial":
            assert system.elements is None and isinstance(system.op, PartialAssemblyOperator)
            assert (fine is system.op) == (name == "refined twisted") and len(linear.mg.levels) == (
                3 if fine is system.op else 1
            )
        else:
            assert system.elements.mats.dtype == np.float64 and fine.mats.dtype == np.float32
        if name == "refined twisted":
            assert [level.op.n for level in linear.mg.levels] == [15468, 2312, 402]
    ref, got = results["element"], results["partial"]
    assert ref.converged and got.converged
    assert [s.linear_iterations for s in got.steps] == [s.linear_iterations for s in ref.steps]
    assert np.abs(got.x - ref.x).max() <= 1e-8 * np.abs(ref.x).max()


def test_partial_assembly_needs_the_multigrid_solver():
    with pytest.raises(InputError, match="assembly= partial needs solver= mg or auto"):
        LinearOptions(solver="paper", assembly="partial")
    with pytest.raises(InputError, match="assembly= must be one of auto, element, partial"):
        LinearOptions(assembly="matrix-free")
    with pytest.raises(InputError, match="solver= auto: the mesh has one element, too few for multigrid"):
        LinearOptions(assembly="partial").for_mesh(box_mesh(1))
