"""Square cylinder in a channel (tridiag.cases.channel, tridiag.cases.cylinder_flow,
python -m tridiag.cases.cylinder)."""

import json

import numpy as np
import pytest

from gpucfd.backend import get_backend
from gpucfd.errors import run_cli
from tridiag.cases import breuer2000
from tridiag.cases.channel import (
    FLUX,
    HEIGHT,
    LENGTH,
    Channel,
    inflow_omega,
    inflow_psi,
    inflow_u,
    normal_vorticity_flux,
    pressure_mismatch,
    section_flux,
)
from tridiag.cases.body_pressure import RELAX
from tridiag.cases.cylinder import main
from tridiag.cases.cylinder_output import centre_line
from tridiag.cases.cylinder_flow import CylinderFlow, default_dt
from tridiag.kernels.channel_flow import outflow_numpy
from tridiag.cases.line_solver import ITERATIVE, LIBRARY
from tridiag.cases.vorticity import laplacian, velocity, wall_vorticity
from tridiag.cases.wake import recirculation_length


CPU = get_backend("cpu")


def test_cylinder_faces_lie_on_grid_lines_and_mid_cell_faces_snap_down():
    c = Channel.create(160, 800)
    assert c.body == (70, 90, 192, 208)
    assert c.faces == pytest.approx((3.5, 4.5, 12.0, 13.0), abs=1e-12)
    assert c.psi_body == pytest.approx(FLUX / 2, abs=1e-14)
    c = Channel.create(200, 1000)  # hy = 0.04: faces at 3.5, 4.5 fall mid-cell
    assert c.body == (87, 112, 240, 260)
    assert c.faces[:2] == pytest.approx((3.48, 4.48), abs=1e-12)
    assert c.size == pytest.approx((1.0, 1.0), abs=1e-12)
    mask = c.fixed_mask()
    assert mask.sum() == 2 * 1001 + 2 * 199 + 26 * 21
    assert mask[87:113, 240:261].all() and not mask[86, 240] and not mask[113, 250] and not mask[100, 261]


def test_inflow_profile_flux_and_vorticity():
    y = np.linspace(0.0, HEIGHT, 161)
    assert inflow_psi(HEIGHT) == pytest.approx(FLUX, rel=1e-15)
    assert inflow_u(HEIGHT / 2) == 1.0
    h = y[1] - y[0]  # trapezoid rule of the parabola: Q (1 - h²/H²) exactly
    assert np.trapezoid(inflow_u(y), y) == pytest.approx(FLUX * (1 - h**2 / HEIGHT**2), rel=1e-13)
    psi = inflow_psi(y)  # a cubic: central differences carry exactly h^2/6 psi''' = -(4/3) h^2/H^2
    assert np.allclose((psi[2:] - psi[:-2]) / (2 * h), inflow_u(y[1:-1]) - 4 * h**2 / (3 * HEIGHT**2), atol=1e-12)
    assert np.allclose(-np.gradient(inflow_u(y), y, edge_order=2), inflow_omega(y), atol=1e-12)


def test_boundary_values_and_walls():
    c = Channel.create(16, 50)
    psi, omega = c.initial_fields(np)
    _, y = c.grid.coordinates()
    assert np.all(psi[0] == 0) and np.all(psi[-1] == FLUX)
    assert np.allclose(psi[:, 0], inflow_psi(y), atol=1e-14) and np.allclose(omega[:, 0], inflow_omega(y))
    j0, j1, i0, i1 = c.body
    assert np.all(psi[j0 : j1 + 1, i0 : i1 + 1] == c.psi_body)
    b = c.boundary(np)
    walls = set(b.wall_nodes.tolist())
    nx = c.grid.nx
    assert not any(n % nx in (0, nx - 1) for n in walls)  # inflow and outflow are open, not Thom walls
    assert {j * nx + i for j in (0, c.grid.ny - 1) for i in range(1, nx - 1)} <= walls
    corners = {j * nx + i for j in (j0, j1) for i in (i0, i1)}
    assert corners <= walls
    count = dict(zip(b.wall_nodes.tolist(), b.wall_count.tolist()))
    assert all(count[n] == 2 for n in corners)
    assert sum(v == 2 for v in count.values()) == 4


def test_outflow_condition_on_known_fields():
    c = Channel.create(16, 50)
    g = c.grid
    x, y = g.coordinates()
    psi = np.repeat(1.0 + 0.3 * ((x - LENGTH) ** 2)[None, :], g.ny, axis=0)  # ∂ψ/∂x = 0 at x = L
    psi[1:-1, -1] = 99.0
    dt = 0.5
    omega = np.repeat((2.0 - 0.1 * x)[None, :], g.ny, axis=0)  # linear in x, slope b = -0.1
    w_old = omega[1:-1, -1].copy()
    outflow_numpy(psi, omega, (FLUX / HEIGHT) * dt / g.hx)
    assert np.allclose(psi[1:-1, -1], 1.0, atol=1e-13)  # second-order one-sided: exact for quadratics
    cfl = (FLUX / HEIGHT) * dt / g.hx
    assert np.allclose(omega[1:-1, -1], w_old + 0.1 * (FLUX / HEIGHT) * dt / (1 + cfl), atol=1e-13)
    flat = np.ones(g.shape)  # a field uniform in x is left alone
    outflow_numpy(flat.copy(), flat, (FLUX / HEIGHT) * dt / g.hx)
    assert np.all(flat == 1.0)


def test_pressure_mismatch_is_the_area_integral_of_the_laplacian():
    c = Channel.create(40, 250)
    x, y = c.grid.coordinates()
    omega = np.repeat((x**2)[None, :], c.grid.ny, axis=0) + (y**2)[:, None]  # ∇²ω = 4: ∮∂ω/∂n = 4 D²
    assert pressure_mismatch(omega, c, re=2.0) == pytest.approx(4.0 * c.size[0] * c.size[1] / 2.0, rel=1e-12)
    assert pressure_mismatch(np.ones_like(omega), c, re=1.0) == 0.0


@pytest.fixture(scope="module")
def steady_re20():
    """Re 20 on 40 x 250 cells marched to a steady residual 1e-4 (about 350 steps)."""
    c = Channel.create(40, 250)
    flow = CylinderFlow(CPU, c, 20.0, default_dt(c, 2.0, 20.0), solver="thomas")
    result = flow.run(2000, check_every=50, tol=1e-4)
    return flow, result


def test_coarse_steady_recirculation_length(steady_re20):
    # measured: L_r/D = 0.9202 on 40x250 (h = D/5), 11.8 % below the Breuer fit 1.043; the
    # 160x800 grid is needed for the 3 % goal (scripts/cylinder_validation.py)
    flow, result = steady_re20
    assert result["converged"]
    u, _ = velocity(flow.psi, flow.grid, flow.boundary)
    lr = recirculation_length(*centre_line(flow.channel, u), flow.channel.faces[3])
    assert lr == pytest.approx(0.9202, abs=5e-3)
    assert abs(breuer2000.relative_difference(lr, breuer2000.recirculation_length(20))) < 0.15


def test_mass_conservation_through_sections(steady_re20):
    flow, _ = steady_re20
    c, g = flow.channel, flow.grid
    u, _ = velocity(flow.psi, g, flow.boundary)
    j0, j1, i0, i1 = c.body
    for i in (1, i0 - 5, i1 + 10, g.nx // 2, g.nx - 1):
        assert section_flux(u, g, i) == pytest.approx(FLUX, rel=5e-3)
    mid = (i0 + i1) // 2  # through the two gaps beside the cylinder; the trapezoid rule of the central-
    below, above = section_flux(u, g, mid, slice(0, j0 + 1)), section_flux(u, g, mid, slice(j1, None))
    assert below + above == pytest.approx(FLUX, rel=2e-2)  # difference u misses O(h²) near the walls (1.5 % here)
    assert below == pytest.approx(c.psi_body, rel=2e-2)
    assert below / above == pytest.approx(c.psi_body / (FLUX - c.psi_body), rel=2e-2)


def _few_steps(backend, solver, steps=5, layout="auto"):
    c = Channel.create(16, 50)
    flow = CylinderFlow(backend, c, 100.0, 0.2, solver=solver, layout=layout)
    flow.kick(0.5)
    flow.run(steps, check_every=steps)
    return flow


def test_every_line_solver_gives_the_same_fields():
    ref = _few_steps(CPU, "thomas")
    assert np.abs(ref.omega).max() > 1.0
    for solver in (s for s in LIBRARY if s not in ITERATIVE):
        other = _few_steps(CPU, solver, layout="contiguous")
        assert np.abs(other.psi - ref.psi).max() < 1e-10, solver
        assert np.abs(other.omega - ref.omega).max() < 1e-10 * np.abs(ref.omega).max(), solver


@pytest.mark.parametrize("solver", ["thomas", "pta", "pcr", "fused"])
def test_device_matches_numpy(backend, solver):
    if solver == "fused" and not backend.is_gpu:
        pytest.skip("the fused sweeps run on the GPU")
    ref = _few_steps(CPU, "thomas")
    flow = _few_steps(backend, solver)
    assert np.abs(backend.to_numpy(flow.psi) - ref.psi).max() < 1e-10
    assert np.abs(backend.to_numpy(flow.omega) - ref.omega).max() < 1e-10 * np.abs(ref.omega).max()
    assert flow.signal == pytest.approx(ref.signal, abs=1e-10)


def test_cli_writes_its_files(tmp_path, capsys):
    out = tmp_path / "run"
    code = run_cli(
        main,
        [
            "--grid",
            "16x50",
            "--t-end",
            "4",
            "--dt",
            "0.2",
            "--snapshots",
            "2",
            "--solver",
            "thomas",
            "--check-every",
            "5",
            "--out",
            str(out),
        ],
        prog="tridiag.cases.cylinder",
    )
    assert code == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["grid"] == "16x50" and s["steps"] == 20 and s["t"] == pytest.approx(4.0)
    assert s["snapshots"] == ["fields_0000010.vtu", "fields_0000020.vtu"]
    for name in ["probe.csv", "fields.png", "probe.png", *s["snapshots"]]:
        assert (out / name).stat().st_size > 0
    assert len((out / "probe.csv").read_text().splitlines()) == 21
    assert "step      10" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--grid", "160x"], "--grid must look like 160x800"),
        (["--grid", "8x800"], "--grid needs at least"),
        (["--re", "-1"], "--re must be >= 0.001 and <= 100000"),
        (["--solver", "magic"], "--solver must be one of"),
        (["--probe", "3"], "--probe must be X,Y"),
        (["--probe", "12.5,4"], "--probe (12.5, 4) must lie in the fluid"),
        (["--dtype", "float16"], "--dtype must be one of"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, message):
    code = run_cli(main, [*argv, "--out", str(tmp_path)], prog="tridiag.cases.cylinder")
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1


def test_unknown_option_exits_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--reynolds", "5"])
    assert exc.value.code == 2 and capsys.readouterr().err.count("\n") == 1


def test_absurd_time_step_exits_3_with_the_cfl_limit(tmp_path, capsys):
    code = run_cli(main, ["--grid", "16x50", "--dt", "50", "--out", str(tmp_path)], prog="tridiag.cases.cylinder")
    err = capsys.readouterr().err
    assert code == 3 and err.count("\n") == 1
    assert "time step too large for the convective CFL" in err and "runs are stable at CFL <= 2: use dt <=" in err
    assert json.loads((tmp_path / "summary.json").read_text())["diverged"] is True


def test_pressure_body_value_closes_the_pressure_loop():
    c = Channel.create(40, 250)
    flow = CylinderFlow(CPU, c, 100.0, 0.1, solver="thomas", body="pressure")
    psi1 = flow.body.psi1
    j0, j1, i0, i1 = c.body
    assert np.all(psi1[j0 : j1 + 1, i0 : i1 + 1] == 1.0) and np.all(psi1[0] == 0) and np.all(psi1[-1] == 0)
    assert np.all(psi1[:, 0] == 0) and psi1.min() >= 0 and psi1.max() == 1.0
    assert np.abs(laplacian(psi1, c.grid) * flow.boundary.free).max() < 1e-8
    flow.kick(0.5)
    flow.run(30, check_every=30)

    def loop(psi):  # ∮ ∂ω/∂n ds with the Thom vorticity of psi
        scratch = flow.omega.copy()
        wall_vorticity(psi, scratch, flow.boundary)
        return float(normal_vorticity_flux(scratch, c))

    before = loop(flow.psi)
    assert abs(before) > 1e-3
    flow.body.correct(flow.psi, flow.omega)  # linear in c: removes the fraction RELAX of the loop integral
    assert loop(flow.psi) == pytest.approx((1 - RELAX) * before, rel=1e-9)
    assert flow.body_psi[-1] != pytest.approx(c.psi_body, abs=1e-4)  # the asymmetric wake moves the body value


def test_pressure_body_value_keeps_a_symmetric_flow_symmetric():
    c = Channel.create(32, 200)  # cylinder centred on grid lines
    flow = CylinderFlow(CPU, c, 20.0, 0.1, solver="thomas", body="pressure")
    flow.run(20, check_every=20)
    assert flow.body_psi[-1] == pytest.approx(FLUX / 2, abs=1e-10)
    assert np.allclose(flow.psi + flow.psi[::-1], FLUX, atol=1e-9)


@pytest.mark.parametrize("solver", ["thomas", "pcr"])
def test_float32_runs_take_the_body_field_from_a_float64_solve(solver):
    """float32 ADI sweeps stall at 1e-6..1e-5 per cycle (pcr above the old 50-epsilon tolerance): ψ₁ is
    solved in float64 and rounded, the same field as a float64 run's."""
    c = Channel.create(32, 200)
    single = CylinderFlow(CPU, c, 100.0, 0.1, solver=solver, dtype=np.float32, body="pressure").body
    double = CylinderFlow(CPU, c, 100.0, 0.1, solver=solver, body="pressure").body
    assert single.psi1.dtype == np.float32 and single.sweeps == double.sweeps == 248
    assert np.array_equal(single.psi1, double.psi1.astype(np.float32))
