"""Uniform nested refinement (fem3d.discretisation.refine): geometry, tags, nestedness, partition, bad input."""

import hashlib
import os

import numpy as np
import pytest

from gpucfd.backend import get_backend
from gpucfd.errors import InputError
from fem3d.discretisation.element import FACES, Q1, Q2, gauss_legendre
from fem3d.discretisation.fields import evaluate, locate, pressure_weights
from fem3d.discretisation.mesh import box_mesh, read_mesh
from fem3d.solvers.multigrid import REFINED, child_prolongations
from fem3d.parallel.partition import partition_elements
from fem3d.discretisation.refine import refine
from support import MESHES, curved_hex27, sample_mesh, twisted_mesh

CPU = get_backend("cpu")


def map_points(mesh):
    """Physical position of each element's 27 Q2 nodes through its geometry map."""
    geo = Q1 if mesh.geometry.shape[1] == 8 else Q2
    return np.einsum("tg,egd->etd", geo.values(Q2.nodes), mesh.geometry)


def tag_areas(mesh) -> dict:
    """Area of the boundary faces of each tag: 10 x 10 Gauss points on each face's map (the
    curved faces' area element is no polynomial: 4 x 4 points differ by 5e-10 between the
    annulus and its refinement)."""
    geo = Q1 if mesh.geometry.shape[1] == 8 else Q2
    s, w = gauss_legendre(10)
    out = {}
    for name, tag in mesh.tag_names.items():
        area = 0.0
        for e, f in mesh.boundary_faces[mesh.boundary_tags == tag]:
            axis, side = FACES[f]
            others = [d for d in range(3) if d != axis]
            xi = np.zeros((len(s) ** 2, 3))
            xi[:, axis] = 2 * side - 1
            xi[:, others[0]], xi[:, others[1]] = np.repeat(s, len(s)), np.tile(s, len(s))
            dx = np.einsum("qgk,gd->qdk", geo.gradients(xi), mesh.geometry[e])
            normal = np.cross(dx[:, :, others[0]], dx[:, :, others[1]])
            area += float(np.linalg.norm(normal, axis=1) @ np.outer(w, w).ravel())
        out[name] = area
    return out


@pytest.mark.parametrize("name", ["distorted", "annulus"])
def test_refinement_keeps_volume_boundary_and_geometry(name):
    """Twice refined: 64 times the elements, the same volume and tag areas (to round-off: the
    children's maps are the parent's), nodes on the maps, a race-free colouring; the
    annulus keeps its curved (triquadratic) boundary."""
    coarse = sample_mesh(name)
    fine = coarse.refined(2)
    assert fine.n_elements == 64 * coarse.n_elements and fine.coarser.coarser is coarse
    assert fine.geometry.shape[1] == coarse.geometry.shape[1] and fine.grid is None
    v0, v2 = (pressure_weights(CPU, m).sum() for m in (coarse, fine))
    assert abs(v2 - v0) <= 1e-12 * v0
    if name == "annulus":
        assert abs(v0 - np.pi * 0.75 * 0.5) < 2e-4 * v0  # triquadratic arcs approximate the exact annulus
        r = np.hypot(*fine.points[fine.boundary_nodes(["outer"])][:, :2].T)
        assert np.abs(r - 1.0).max() < 2e-3 and np.abs(r - 1.0).max() > 1e-6  # on the parents' arcs, not the circle
    a0, a2 = tag_areas(coarse), tag_areas(fine)
    assert a0.keys() == a2.keys() and all(abs(a2[k] - a0[k]) <= 1e-12 * a0[k] for k in a0), (a0, a2)
    assert (fine.boundary_tags >= 0).all() and len(fine.boundary_faces) == 16 * len(coarse.boundary_faces)
    assert np.allclose(fine.points[fine.cells], map_points(fine), rtol=0, atol=1e-14)
    assert fine.colour_is_race_free() and fine.n_colours == 8  # the parents aligned: one class (Refined)
    assert np.array_equal(np.sort(fine.element_ids), np.arange(fine.n_elements))


def test_refined_box_is_a_valid_general_mesh():
    box = box_mesh(3, 2, 1, lengths=(3.0, 2.0, 1.0), grading=0.5)
    fine = refine(box, 1)
    assert (fine.n_elements, fine.n_pressure, fine.n_nodes) == (48, 7 * 5 * 3, 13 * 9 * 5)
    assert fine.grid is None and fine.colour_is_race_free()
    assert np.allclose(np.sort(fine.points[fine.pressure_nodes], axis=0), np.sort(box.points, axis=0))
    assert {k: int((fine.boundary_tags == t).sum()) for k, t in fine.tag_names.items()} == {
        k: 4 * int((box.boundary_tags == t).sum()) for k, t in box.tag_names.items()
    }
    assert refine(box, 0) is box


@pytest.mark.parametrize("name", ["distorted", "annulus"])
def test_prolongation_of_a_coarse_field_is_exact(name):
    """A random coarse Q2 velocity and Q1 pressure, prolonged child by child with P_c
    (fem3d.solvers.multigrid.child_prolongations), give every copy of a fine unknown the same value,
    and that value is the coarse field at the fine node's physical position."""
    coarse = sample_mesh(name)
    fine = refine(coarse)
    xc = np.random.default_rng(7).standard_normal(coarse.n_dofs)
    local = np.einsum("eij,ej->ei", child_prolongations()[REFINED[fine.child_position]], xc[coarse.dofs()[fine.parent]])
    xf = np.full(fine.n_dofs, np.nan)
    xf[fine.dofs()] = local
    assert np.abs(xf[fine.dofs()] - local).max() < 1e-12
    n = fine.n_nodes
    u, _ = evaluate(coarse, xc, *locate(coarse, fine.points))
    _, p = evaluate(coarse, xc, *locate(coarse, fine.points[fine.pressure_nodes]))
    assert np.abs(np.stack([xf[:n], xf[n : 2 * n], xf[2 * n : 3 * n]], axis=1) - u).max() < 1e-12
    assert np.abs(xf[3 * n :] - p).max() < 1e-12


def test_children_stay_on_their_parents_rank():
    coarse = sample_mesh("distorted")
    fine = refine(coarse, 2)
    for parts in (2, 3):
        owner = partition_elements(fine, parts)
        assert np.array_equal(owner, partition_elements(fine.coarser, parts)[fine.parent])
        assert np.array_equal(owner, partition_elements(coarse, parts)[fine.coarser.parent[fine.parent]])
        coarse_counts = np.bincount(partition_elements(coarse, parts), minlength=parts)
        assert np.array_equal(np.bincount(owner, minlength=parts), 64 * coarse_counts)  # 4^3 grandchildren each
        assert coarse_counts.min() > 0 and coarse_counts.max() <= 1.03 * coarse.n_elements / parts


@pytest.mark.parametrize(
    "times, message", [(-1, "must be >= 0 and <= 10"), (11, "must be >= 0 and <= 10"), (1.5, "must be an integer")]
)
def test_bad_refinement_counts(times, message):
    with pytest.raises(InputError, match=f"^--refine {message}"):
        refine(box_mesh(1), times)


def test_an_element_whose_children_would_be_inverted_is_refused_when_read(tmp_path):
    """det J < 0 inside the element, between its 5x5x5 samples: the file is refused, so no
    refinement can make an inverted child (refine checks no child: each is a part of a valid
    parent)."""
    with pytest.raises(
        InputError,
        match=r"curved.vtu: element 0 is inverted or degenerate \(Jacobian determinant -0.00863 at reference point "
        r"\(-0.2, -0.2, -1.0\)\)",
    ):
        read_mesh(curved_hex27(str(tmp_path / "curved.vtu")))


def mesh_fingerprint(mesh):
    """(sha256 prefix of the integer arrays of a refined mesh, cosine-weighted sums (3,) of its
    points and of its geometry nodes): equal integers and float sums to round-off mean the same mesh."""
    ints = [
        mesh.cells,
        mesh.pressure_cells,
        mesh.pressure_nodes,
        mesh.colour_offsets,
        mesh.element_ids,
        mesh.boundary_faces,
        mesh.boundary_tags,
        mesh.parent,
        mesh.child_position,
    ]
    digest = hashlib.sha256(b"".join(np.ascontiguousarray(a, dtype=np.int64).tobytes() for a in ints)).hexdigest()[:16]
    weighted = lambda x: (x * np.cos(np.arange(len(x)))[:, None]).sum(axis=0)  # noqa: E731
    return digest, weighted(mesh.points), weighted(mesh.geometry.reshape(-1, 3))


@pytest.mark.parametrize(
    "name, digest, points, geometry",
    [  # Refined's numbering: the coarse nodes, the new nodes on each coarse edge and face by its middle
        # node and their far corners, those inside each parent; colours 8 k + c (the test below: the same meshes
        # as the hex8 numbering up to the order of the nodes)
        (
            "distorted",
            "5238a50fc03de8e9",
            [25.05034459059785, -1.048686053470448, -0.11288577748206619],
            [0.5015479496189443, 0.4873663398997229, 0.48417663820319345],
        ),
        (
            "annulus",
            "f3432b75344edfc0",
            [-4.298100864216561, 2.1028085881960017, 0.29471684480412286],
            [0.9776146608765232, 0.06216127640028056, 0.23270502717666613],
        ),
        (
            "twisted",
            "1958ae0d1d8104b5",
            [4.333265300751158, 2.3910192952806075, 2.0046895163269216],
            [-0.07353538007164695, 8.916669008239106, 0.8329605933936257],
        ),
    ],
)
def test_refinement_reproduces_the_reference_mesh(name, digest, points, geometry):
    mesh = (twisted_mesh(3) if name == "twisted" else sample_mesh(name)).refined(1)
    got = mesh_fingerprint(mesh)
    assert got[0] == digest
    np.testing.assert_allclose(got[1], points, rtol=1e-13)
    np.testing.assert_allclose(got[2], geometry, rtol=1e-13)


@pytest.mark.parametrize("name", ["distorted", "annulus", "twisted"])
def test_refined_nodes_are_the_hex8_numbering_of_the_children_up_to_order(name):
    """Twice refined: the fine Q2 nodes named from the parents' lattices are those that the
    numbering of hex8 input (one node per distinct edge, face and cell of the children,
    fem3d.discretisation.mesh) gives the children's vertices: one bijection maps one onto the
    other element by element, and no two nodes sit at the same place."""
    from fem3d.discretisation.mesh import _q2_numbering

    fine = (twisted_mesh(3) if name == "twisted" else sample_mesh(name)).refined(2)
    generic, n_nodes = _q2_numbering(fine.pressure_cells, fine.n_pressure)
    assert n_nodes == fine.n_nodes
    relabel = np.full(n_nodes, -1)
    relabel[generic.ravel()] = fine.cells.ravel()
    assert np.array_equal(relabel[generic], fine.cells) and len(np.unique(relabel)) == n_nodes
    assert len(np.unique(np.round(fine.points, 12), axis=0)) == n_nodes


@pytest.mark.parametrize("name", ["annulus", "twisted", "slab"])
def test_a_refined_mesh_answers_from_its_parents_before_its_arrays_are_made(name):
    """fem3d.discretisation.refine.Refined, its arrays not made, gives the nodes, vertices,
    geometry and coordinates of any elements and nodes, its counts, colours, element ids,
    parents, boundary faces, bounds, stretches and located points as the same mesh once made:
    bit for bit (points located in the parents: to round-off)."""
    coarse = {
        "annulus": lambda: sample_mesh("annulus"),
        "twisted": lambda: twisted_mesh(3),
        "slab": lambda: read_mesh(os.path.join(MESHES, "dfg2d", "slab.msh")),
    }[name]()
    lazy, made = refine(coarse, 1), refine(coarse, 1)
    made.cells
    rng = np.random.default_rng(5)
    elements, nodes = rng.permutation(made.n_elements)[:300], rng.integers(0, made.n_nodes, (20, 30))
    assert (lazy.n_elements, lazy.n_nodes, lazy.n_pressure) == (
        made.n_elements,
        len(made.points),
        len(made.pressure_nodes),
    )
    for accessor in ("cells_of", "pressure_cells_of", "geometry_of", "vertices_of"):
        assert np.array_equal(getattr(lazy, accessor)(elements), getattr(made, accessor)(elements)), accessor
    assert np.array_equal(lazy.points_of(nodes), made.points[nodes])
    assert np.array_equal(lazy.cells_of(slice(5, 60)), made.cells[5:60])
    for field in ("colour_offsets", "element_ids", "parent", "child_position", "boundary_faces", "boundary_tags"):
        assert np.array_equal(getattr(lazy, field), getattr(made, field)), field
    assert np.array_equal(lazy.elements_with_ids(made.element_ids[elements]), elements)
    assert all(np.array_equal(a, b) for a, b in zip(lazy.bounds(), (made.points.min(axis=0), made.points.max(axis=0))))
    assert np.array_equal(lazy.stretches, made.stretches)
    points = np.concatenate([made.points[nodes[0]], made.geometry[elements[:20]].mean(axis=1)])
    x = rng.standard_normal(made.n_dofs)  # a continuous Q2-Q1 field: the same values whichever element holds a point
    (u_lazy, p_lazy), (u_made, p_made) = (
        evaluate(lazy, x, *locate(lazy, points)),
        evaluate(made, x, *locate(made, points)),
    )
    assert np.isfinite(u_lazy).all() and np.abs(u_lazy - u_made).max() < 1e-11 and np.abs(p_lazy - p_made).max() < 1e-11
    assert not lazy.built and lazy.n_colours == made.n_colours and made.colour_is_race_free()
