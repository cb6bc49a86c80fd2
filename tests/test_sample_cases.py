"""Every case file committed under meshes/ reads, names a mesh that is there, poses its
boundary conditions on that mesh's tags and reports quantities the mesh can give (the
commands the README and the case files' headers show start from these files)."""

import glob
import os

import numpy as np
import pytest

from fem3d.discretisation.mesh import read_mesh
from fem3d.problems.case import check_report, read_case
from fem3d.problems.flow import Flow
from support import MESHES

CASES = sorted(glob.glob(os.path.join(MESHES, "**", "*.toml"), recursive=True))


def test_the_sample_cases_are_found():
    names = {os.path.relpath(p, MESHES) for p in CASES}
    assert {"dfg3d/dfg_3d_3z.toml", "dfg3d/dfg_3d_3z_boundary_layer.toml", "pipe/pipe.toml"} <= names
    assert len(names) >= 8


@pytest.mark.parametrize("path", CASES, ids=lambda p: os.path.relpath(p, MESHES))
def test_a_sample_case_poses_its_flow(path):
    case = read_case(path)
    mesh = read_mesh(case.mesh_file, case.tag_field)
    check_report(case, mesh)
    flow = Flow(mesh, case.boundaries, nu=case.nu, re=case.re)
    assert flow.mesh.n_elements == mesh.n_elements > 100
    assert np.isfinite(flow.problem.re) and flow.problem.re > 0
    if case.time is not None:
        assert case.time.t_end > 0 and 0 < case.time.dt < case.time.t_end
