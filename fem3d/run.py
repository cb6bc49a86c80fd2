"""Run a flow described in a case file: ``python -m fem3d.run case.toml``.

Reads the case (fem3d.problems.case), solves it (fem3d.problems.flow) on one process or every rank of an
MPI job, steady or, with a [time] table, in time, reports the forces, coefficients, point
pressures and pressure differences it asks for, and writes to the output folder, results
first and each atomically: solution.npy, flow.vtu (flow.pvtu joining one piece per rank
under MPI; hexahedron27 cells with velocity, pressure, speed and vorticity), summary.json
(the run, its convergence and the quantities; in time their extrema over the steps); then
the picture slice.png (speed on the mid-plane z = centre, drawn in a child process: a
failure is a warning) and, in time, history.png. In time the quantities of every step go to
history.csv as the steps are made (fem3d.problems.history), checkpoint.npz every so many steps
(fem3d.problems.checkpoint; --initial continues from it), VTU snapshots with flow.pvd, and the
solution files hold the last step's state. Exit code 0 when
converged, 3 when not (results still written and marked), 2 for bad input, 130/143
after Ctrl-C/SIGTERM (results of the last iterate written; ``--initial`` continues from
them).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from contextlib import ExitStack


from .problems.case import check_report, read_case
from .problems.quantities import fluxes
from .commands.cli import add_solver_arguments, linear_options, nonlinear_options
from .parallel.comm import agreed_errors
from .problems.distributed import add_parallel_arguments, partition_balance, partition_line, start
from gpucfd.errors import ArgumentParser, ConvergenceError, check_range, run_cli
from .discretisation.fields import mid_plane
from .problems.flow import Flow
from .commands.time_output import FILES as IN_TIME
from .commands.time_output import PICTURE, StepBar, TimeOutput, resume_from, strouhal_line, time_exit
from .problems.result import FlowResult
from gpucfd.output import claim_output
from .solvers.nonlinear import out_of_reach_hint
from .parallel.interrupt import agreed, graceful_stop, requested
from .problems.memory import check_fits, largest_refinement, refined_share
from .discretisation.mesh import read_mesh
from .commands import plots
from .commands.picture_process import PictureError, draw_in_child
from .discretisation.refine import REFINE_MAX, refine
from .problems.lid_driven import read_initial

FLOW_RATE_TOL = 1e-3  # a velocity boundary that delivers a flow rate this far from its expressions' is reported
RUN_DEFAULTS = {"tol": 1e-8, "max_steps": 200, "newton": 1.0}  # nonlinear settings neither the file nor the command
# line gives: to 1e-8, Newton once the residual is below 1


def parse(argv):
    ap = ArgumentParser(
        prog="python -m fem3d.run",
        description="Solve the flow described in a TOML case file (steady, or in time with a [time] table).",
        allow_abbrev=False,
    )
    ap.add_argument("case", help="the case file (TOML; see fem3d.problems.case)")
    ap.add_argument("--out", help="output folder (default: the case file's [output] dir)")
    ap.add_argument(
        "--refine",
        type=int,
        default=None,
        help=f"refine the case's mesh uniformly this many times, 0 to "
        f"{REFINE_MAX} (default: the case file's [mesh] refine, else 0)",
    )
    ap.add_argument(
        "--initial",
        help="start from this solution.npy of an earlier run of the same case and --refine (a restart); in time, "
        "a checkpoint.npz continues the run from where it was written",
    )
    ap.add_argument("--no-plots", action="store_true", help="skip slice.png")
    ap.add_argument("--no-vtu", action="store_true", help="skip the VTU/PVTU solution files")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    add_solver_arguments(ap, suppress=True, **RUN_DEFAULTS)  # a setting not given: the case file's, else these
    add_parallel_arguments(ap)
    return ap.parse_args(argv)


def main(argv=None) -> int:
    t_start = (
        time.perf_counter()
    )  # data preparation begins (reading the case and its mesh included), as in fem3d.cavity
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse(argv)
    backend, comm = start(args, argv)
    root = comm.rank == 0
    say = (lambda s: print(s, flush=True)) if root and not args.quiet else (lambda s: None)
    with graceful_stop(), ExitStack() as held:
        with agreed_errors(comm):
            case = read_case(args.case)
            nonlinear = nonlinear_options(args, {**RUN_DEFAULTS, **case.nonlinear})
            linear = linear_options(args, case.linear)
            times = check_range(
                "--refine", case.refine if args.refine is None else args.refine, low=0, high=REFINE_MAX, integer=True
            )
            mesh = read_mesh(case.mesh_file, case.tag_field)
            check_report(case, mesh)
            check_fits(
                backend,
                linear.matrix_dtype,
                linear.solver,
                mesh.n_elements * 8**times,
                comm.size,
                lambda e: largest_refinement(mesh.n_elements, e),
                linear.assembly,
                in_time=case.time is not None,
                whole_mesh=refined_share(times),  # memory.host_share
            )
            mesh = refine(mesh, times)
            flow = Flow(mesh, case.boundaries, nu=case.nu, re=case.re)
            resume = resume_from(args.initial, mesh, case.time, "[time]")
            x0 = read_initial(args.initial, mesh.n_dofs) if args.initial and resume is None else None
            simulation = flow.simulation(
                backend,
                comm,
                nonlinear,
                linear,
                case.continuation,
                case.sequence,
                initial=x0,
                started=t_start,
                time=case.time,
                resume=resume,
            )
            for note in simulation.notes if root else []:
                print(f"fem3d.run: warning: {note}", file=sys.stderr, flush=True)
            out = args.out or _shown(os.path.join(os.path.dirname(os.path.abspath(args.case)), case.out))
            if root:  # the folder is this run's until it ends; an earlier run's files go
                stale = [*FlowResult.stale_files(), "slice.png", PICTURE] + ([] if resume else IN_TIME)
                keep = [args.initial] if args.initial else []
                held.enter_context(claim_output(out, stale, keep, "--out" if args.out else "[output] dir"))
        say(
            f"{os.path.basename(args.case)}: nu {1 / flow.re:g}, {mesh.n_elements} elements, {mesh.n_dofs} unknowns, "
            f"{backend.describe()}" + (f" on {comm.size} ranks ({comm.name})" if comm.size > 1 else "")
        )

        def measure(state):  # each step's quantities (history.csv)
            return step_quantities(state, case)

        timed = None if case.time is None else TimeOutput(out, mesh, case.time, comm, measure, resume)
        bar = StepBar(case.time.t_end) if timed and root and not args.quiet and sys.stdout.isatty() else None
        try:
            result = simulation.run(
                log=bar.say if bar else say,
                on_step=timed and timed.on_step,
                on_checkpoint=timed and timed.on_checkpoint,
                status=bar and bar.status,
            )
        finally:
            if bar:
                bar.close()
            if timed:
                timed.close()
        if timed:  # the last step's quantities, at its time (a midpoint step's stage)
            timed.finish(result, case.strouhal)
            result.quantities["flow_rates"] = result.flow_rates()  # at the time reached
        else:
            result.quantities = quantities(result, case)
        files = result.write(
            out,
            claimed=True,
            vtu=not args.no_vtu,
            extra={
                "case": os.path.abspath(args.case),
                "refine": times,
                "command": " ".join(["python -m fem3d.run", *argv]),
            },
        )
        for line in report_lines(result):
            say(line)
        if root and case.pictures and not args.no_plots and not requested():
            name = os.path.splitext(os.path.basename(args.case))[0]
            picture(result, out, files, name)
            if timed:
                timed.picture(files, f"{name}: reported quantities in time", "fem3d.run")
        if root:
            say(f"wrote {out}/: {', '.join(files + (timed.files() if timed else []))}")
        signum = agreed(comm)
    if case.time:
        return time_exit("fem3d.run", result, signum, out, root, "[time] dt")
    if signum:
        if root:
            print(
                f"fem3d.run: interrupted by {signal.Signals(signum).name}; the last iterate and its results are in "
                f"{out}: continue with --initial {os.path.join(out, 'solution.npy')}",
                file=sys.stderr,
                flush=True,
            )
        return 128 + signum
    if not result.converged:
        hint = out_of_reach_hint(result.reason, "[solver] continuation", "refine the mesh (--refine)")
        raise ConvergenceError(
            f"results in {out} are marked as not converged (residual {result.residual:.2e}){hint}", result.reason
        )
    return 0


def _shown(path: str) -> str:
    """``path`` relative to the working folder when it lies inside it."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def quantities(result, case) -> dict:
    """The forces (and coefficients), point values, pressure differences and fluxes the case
    asks for, and the boundary conditions' flow rates (collective)."""
    return {**step_quantities(result, case), "flow_rates": result.flow_rates()}


def step_quantities(result, case) -> dict:
    """:func:`quantities` but the flow rates: those of each step in time (history.csv)."""
    out = {"forces": {}, "points": {}, "differences": {}}
    out["fluxes"] = fluxes(result.part.mesh, result.x_local, case.fluxes, result.comm)
    for tag, scales in case.forces.items():
        force = result.force(tag)
        entry = {"force": force.tolist()}
        if scales:
            entry.update(
                scales, coefficients=(2.0 * force / (scales["reference_velocity"] ** 2 * scales["area"])).tolist()
            )
        out["forces"][tag] = entry
    if case.points:
        names = list(case.points)
        velocity, pressure = result.values([case.points[n] for n in names])
        for name, v, p in zip(names, velocity, pressure):
            out["points"][name] = {"at": case.points[name], "velocity": v.tolist(), "pressure": float(p)}
        for name, (a, b) in case.differences.items():
            out["differences"][name] = out["points"][a]["pressure"] - out["points"][b]["pressure"]
    return out


def report_lines(result) -> list[str]:
    """Progress lines of the quantities and the run's totals."""
    q = {"forces": {}, "points": {}, "differences": {}, "fluxes": {}, "flow_rates": {}, **result.quantities}
    lines = []
    for tag, f in q["forces"].items():
        line = f"force on {tag}: ({', '.join(f'{v:.6g}' for v in f['force'])})"
        if "coefficients" in f:
            line += f"  coefficients ({', '.join(f'{v:.6g}' for v in f['coefficients'])})"
        lines.append(line)
    lines += [f"p({name}) = {v['pressure']:.6g}" for name, v in q["points"].items()]
    lines += [f"{name} = {v:.6g}" for name, v in q["differences"].items()]
    lines += [f"flux {name} = {v:.6g}" for name, v in q["fluxes"].items()]
    lines += [
        f"{tag}: flow rate {r['delivered']:.6g} delivered of {r['nominal']:.6g} prescribed (nodes shared with walls "
        "take the walls' zero)"
        for tag, r in q["flow_rates"].items()
        if abs(r["delivered"] - r["nominal"]) > FLOW_RATE_TOL * abs(r["nominal"])
    ]
    balance = partition_balance(result.per_rank)
    if result.time is not None:
        t = result.time
        lines.append(
            f"{'reached' if result.converged else 'NOT reached (' + result.reason + ')'} t = {t['t']:.6g} in "
            f"{t['steps']} steps of {t['scheme']}: {t['newton_steps']} Newton steps, {t['linear_iterations']} Krylov "
            f"iterations ({t['linear_iterations_per_newton_step']:.1f} per Newton step), {t['seconds_per_step']:.3g} s "
            f"per step, {result.timing()['wall_s']:.1f} s wall"
        )
        return lines + strouhal_line(t) + ([partition_line(balance)] if balance else [])
    steps = result.steps
    its = sum(s["linear_iterations"] for s in steps)
    timing, stages = result.timing(), result.history
    every = (
        f" over {sum(len(s['steps']) for s in stages)} steps of {len(stages)} Reynolds numbers"
        if len(stages) > 1
        else ""
    )
    lines.append(
        f"{'converged' if result.converged else 'NOT converged (' + result.reason + ')'}: {len(steps)} nonlinear "
        f"steps, {its} linear iterations, residual {result.residual:.2e}, T_run {timing['t_run_s']:.1f} s of "
        f"{timing['wall_s']:.1f} s wall, T_unit {timing['t_unit_us']:.1f} us{every}"
    )
    if balance:
        lines.append(partition_line(balance))
    return lines


def picture(result, out: str, files: list, name: str) -> None:
    """slice.png, the mid-plane speed of the case ``name``, in a child process; a failure
    is a warning."""
    mesh = result.flow.mesh
    lo, hi = mesh.bounds()
    wide = (hi[0] - lo[0]) / max(hi[1] - lo[1], 1e-300)
    samples = (int(min(480, 120 * max(wide, 1.0))), int(min(480, 120 / min(wide, 1.0))))
    try:
        draw_in_child(
            plots.slice_png,
            os.path.join(out, "slice.png"),
            plane=mid_plane(mesh, result.x, samples),
            title=f"{name}, nu {1 / result.flow.re:g}",
        )
    except Exception as exc:  # a picture is never worth the run: its results are already on disk
        reason = exc if isinstance(exc, PictureError) else f"{type(exc).__name__}: {exc}"
        print(f"fem3d.run: warning: slice.png not written ({reason})", file=sys.stderr, flush=True)
    else:
        files.append("slice.png")


if __name__ == "__main__":
    raise SystemExit(run_cli(main, prog="fem3d.run"))
