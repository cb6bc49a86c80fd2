"""Mesh sequencing (fem3d.solvers.sequencing): the coarser meshes in their true geometry, the
interpolation of a coarse solution (exact for the coarse spaces: against polynomial fields on a
graded box and against the multigrid prolongation on a refined mesh), the plan of --sequence,
and a sequenced cavity run reaching the solution of an unsequenced one."""

import json

import numpy as np
import pytest

from fem3d import cavity
from fem3d.discretisation.element import Q1
from fem3d.discretisation.mesh import box_mesh
from fem3d.solvers.multigrid import REFINED, child_prolongations
from fem3d.solvers.sequencing import SEQUENCE_MIN, chain, coarsening, interpolate, plan, redundant
from gpucfd.errors import InputError
from support import sample_mesh


def fields(mesh):
    """[u | v | w | p] of a triquadratic velocity and a trilinear pressure at the mesh's nodes."""
    x, y, z = mesh.points.T
    X, Y, Z = mesh.points[mesh.pressure_nodes].T
    return np.concatenate([x * x * y * z * z + y, x * y * y - z, x * x * y * y * z * z, 1 + X + Y * Z - X * Y * Z])


def test_coarser_box_has_the_fine_box_graded_vertices_and_the_interpolation_is_exact(backend):
    fine = box_mesh(6, 5, 7, grading=(1.0, 0.5, 1.5))
    c = coarsening(fine)
    assert c.coarse.grid == (3, 3, 4) and c.coarse.tag_names == fine.tag_names
    for d in range(3):  # the coarse vertices are fine vertices: the graded coordinates kept
        assert np.isin(np.unique(c.coarse.geometry[:, :, d]), np.unique(fine.geometry[:, :, d])).all()
    parent, scale, shift = c.at(fine.element_ids)
    assert scale.min() < 0.45 and scale.max() == 1.0  # graded halves, and the odd sides' whole layer
    for e in range(fine.n_elements):  # each element's nodes are its parent's map at scale * xi + shift
        xi = scale[e] * Q1.nodes + shift[e]
        assert np.allclose(Q1.values(xi) @ c.coarse.geometry[parent[e]], fine.geometry[e], atol=1e-14)
    got = backend.to_numpy(interpolate(backend.xp, backend.asarray(fields(c.coarse)), fine, c))
    assert np.abs(got - fields(fine)).max() < 1e-14


def test_coarser_boxes_of_an_odd_graded_box_keep_neighbouring_layers_alike():
    """An odd side's whole layer is never left whole again one level down: the sequence's
    boxes of a graded 25^3 box (13^3, 7^3) hold no layer less than half as thick as its
    neighbour (a whole middle layer at every level gave 7^3 a layer 3.8 times thinner)."""
    fine = box_mesh(25, grading=1.0)
    grids, ratios = [], []
    for c in chain(fine, 2):
        widths = np.diff(c.coarse.box_vertices[0])
        grids.append(c.coarse.grid)
        ratios.append(np.maximum(widths[1:] / widths[:-1], widths[:-1] / widths[1:]).max())
    assert grids == [(13, 13, 13), (7, 7, 7)]
    assert max(ratios) < 2.1, ratios


def test_interpolation_on_a_refined_mesh_is_the_multigrid_prolongation():
    fine = sample_mesh("distorted").refined(1)
    c = coarsening(fine)
    assert c.coarse is fine.coarser
    x = np.random.default_rng(2).standard_normal(c.coarse.n_dofs)
    got = interpolate(np, x, fine, c)[fine.dofs()]
    P = child_prolongations()[REFINED[fine.child_position]]  # (E, 89, 89) dense, from the 3D bases
    parent = c.at(fine.element_ids)[0]
    assert np.array_equal(parent, fine.parent)
    assert np.abs(got - np.einsum("enm,em->en", P, x[c.coarse.dofs()[parent]])).max() < 1e-13


class _Rank:
    """A communicator that only names a rank (the part is laid out, nothing is sent)."""

    def __init__(self, rank, size):
        self.rank, self.size = rank, size

    def connect(self, peers):
        pass


@pytest.mark.parametrize("mesh", ["box", "refined"])
def test_each_rank_interpolates_its_own_part(mesh):
    from fem3d.parallel.partition import distribute_owned, partition_elements
    from gpucfd.backend import get_backend

    fine = box_mesh(6, 5, 7, grading=(1.0, 0.5, 1.5)) if mesh == "box" else sample_mesh("distorted").refined(1)
    c = coarsening(fine)
    x = np.random.default_rng(3).standard_normal(c.coarse.n_dofs)
    whole = interpolate(np, x, fine, c)
    ranks = partition_elements(fine, 3)
    for r in range(3):
        part = distribute_owned(fine, ranks, _Rank(r, 3), get_backend("cpu"))
        assert (
            np.abs(interpolate(np, x, fine, c, part) - whole[part.dist.gdofs]).max() < 1e-13
        )  # a node shared by elements: any one's value


def test_plan_of_the_sequence_option():
    mesh = box_mesh(40, grading=1.0)
    assert plan("none", mesh, "gpu") == []
    assert [c.coarse.grid for c in plan("auto", mesh, "gpu")] == [
        (20, 20, 20),
        (10, 10, 10),
    ]  # 5^3 is under SEQUENCE_MIN
    assert SEQUENCE_MIN == {"gpu": 1000, "cpu": 200}
    assert redundant(box_mesh(50)) and not redundant(box_mesh(51))  # at most REDUNDANT_MAX: solved whole on every rank
    assert [c.coarse.grid for c in plan("auto", mesh, "cpu")] == [(20, 20, 20), (10, 10, 10)]
    assert [c.coarse.grid for c in plan("auto", box_mesh(12), "cpu")] == [
        (6, 6, 6)
    ]  # 216 elements: solved first on a CPU
    assert plan("auto", box_mesh(10), "cpu") == []
    assert [c.coarse.grid for c in plan("3", mesh, "gpu")] == [(20, 20, 20), (10, 10, 10), (5, 5, 5)]
    assert [c.coarse.grid for c in plan("3", mesh, "cpu", usable=lambda m: m.n_elements > 200)] == [
        (20, 20, 20),
        (10, 10, 10),
    ]
    assert plan("1", sample_mesh("distorted"), "cpu") == []  # neither refined nor a box
    for bad in ("some", "11", "-1", "1.5"):
        with pytest.raises(InputError, match="--sequence"):
            plan(bad, mesh, "cpu")


def test_sequenced_cavity_reaches_the_unsequenced_solution_in_fewer_fine_steps(tmp_path):
    runs = {}
    for spec in ("none", "1"):
        out = tmp_path / spec
        assert (
            cavity.main(
                [
                    "--n",
                    "8",
                    "--re",
                    "400",
                    "--grading",
                    "1",
                    "--device",
                    "cpu",
                    "--sequence",
                    spec,
                    "--out",
                    str(out),
                    "--quiet",
                    "--no-plots",
                    "--no-vtu",
                ]
            )
            == 0
        )
        runs[spec] = json.loads((out / "summary.json").read_text()), np.load(out / "solution.npy")
    (plain, x0), (sequenced, x1) = runs["none"], runs["1"]
    assert plain["sequence"] == [] and plain["continuation"][0]["steps"][0]["kind"] == "picard"
    [coarse] = sequenced["sequence"]
    assert coarse["elements"] == 64 and coarse["converged"] and coarse["stages"][-1]["re"] == 400.0
    assert sequenced["continuation"][0]["steps"][0]["kind"] == "newton"  # Newton from the interpolated guess
    assert sequenced["nonlinear_steps"] < plain["nonlinear_steps"] and sequenced["converged"]
    assert np.abs(x1 - x0)[: 3 * 15625].max() < 1e-4  # the same discrete solution, to the solver's tolerance
    assert sum(sequenced["times_s"].values()) - sequenced["times_s"]["output"] == pytest.approx(sequenced["t_run_s"])
    assert sequenced["t_run_s"] <= sequenced["wall_s"]
