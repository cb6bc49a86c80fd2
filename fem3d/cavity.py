"""3D lid-driven cavity: ``python -m fem3d.cavity --re 1000``.

The unit cube (or any hexahedral mesh read with meshio) with the lid moving at unit
speed in +x on y = 1 and no-slip walls elsewhere; z is the spanwise direction. Where
the lid meets a wall, the wall's zero velocity is imposed. The defaults (Re 100, 8^3
elements) finish on a laptop CPU in well under a minute; use ``--n 24`` or
``--n 40 --grading 1`` on a GPU for results that match the reference data to 0.01.

Under MPI (``mpirun -n 4 python -m fem3d.cavity --re 1000``) every rank solves on its
part of the mesh, one GPU each; the results do not depend on the number of ranks.

Writes to --out, results first, each file atomically: solution.npy (the unknowns
[u | v | w | p], the input of --initial for a restart), cavity.vtu (unless --no-vtu;
hexahedron27 cells: velocity, pressure, speed, vorticity; under MPI cavity.pvtu joining
one cavity_<rank>.vtu piece per rank), profiles.csv (u on the vertical and v on the
horizontal centre line, evaluated from the finite element field) and summary.json; then
the pictures profiles.png and slice.png (mid-plane speed and streamlines), each drawn in
a child process: a picture that fails is a warning on stderr, and summary.json lists the
files written. Exit code 0 when converged, 3 when not (results still written and
marked), 2 for bad input.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import time
from contextlib import ExitStack

from .commands import resolution
from .commands.cavity_output import PICTURES, CavityReport, final_lines, write_pictures, write_results, write_summary
from .commands.cli import add_solver_arguments, linear_options, nonlinear_options
from .parallel.comm import agreed_errors
from .problems.distributed import add_parallel_arguments, start
from gpucfd.errors import ArgumentParser, ConvergenceError, InputError, check_range, run_cli
from .parallel.interrupt import agreed, graceful_stop, requested
from .problems.memory import check_fits, largest_refinement, refined_share
from .discretisation.mesh import box_mesh, read_mesh
from .solvers.nonlinear import continuation_steps, out_of_reach_hint
from gpucfd.output import claim_output, ensure_writable_dir, save_npy
from .problems.result import FlowResult
from .problems.flow import Flow
from .problems.lid_driven import lid_driven_problem, read_initial
from .problems.navier_stokes import RE_MAX
from .problems.simulation import Simulation
from .solvers.time_stepping import TimeOptions, check_alone
from .commands.time_output import FILES as TIME_FILES
from .commands.time_output import PICTURE as TIME_PICTURE
from .commands.time_output import StepBar, TimeOutput, resume_from, time_exit
from gpucfd.options import add_arguments, build, command_line, given
from .discretisation.refine import REFINE_MAX, refine
from .solvers.sequencing import REDUNDANT_MAX, SEQUENCE_MAX, SEQUENCE_MIN
from .solvers.sequencing import limits as sequence_limits

STROUHAL = {"of": "points.centre.velocity.x", "length": 1.0, "velocity": 1.0}  # in time: f L / U_lid of the centre's u


def build_mesh(args, fits, kind: str, ranks: int, warn):
    """The mesh and a description of it for the summary. ``fits(elements, largest)`` checks
    the memory of a mesh of that many elements before it is built (fem3d.commands.memory). With
    ``--n auto`` the size comes from the Reynolds number and the device (``kind`` "cpu" or
    "gpu", ``ranks`` of them; fem3d.commands.resolution); ``warn(line)`` says before the run when
    that mesh is not expected to resolve the flow."""
    times = check_range("--refine", args.refine, low=0, high=REFINE_MAX, integer=True)
    if args.mesh:
        if args.n != "auto" or args.nx or args.ny or args.nz or args.grading is not None:
            raise InputError("--mesh cannot be combined with --n, --nx/--ny/--nz or --grading")
        mesh = read_mesh(args.mesh, args.tag_field)
        fits(mesh.n_elements * 8**times, lambda e: largest_refinement(mesh.n_elements, e))
        return refine(mesh, times), {"file": args.mesh, "refine": times}
    if times:
        raise InputError("--refine needs --mesh (a box is refined by --n)")
    if args.n == "auto":
        n = resolution.automatic_size(args.re, kind, ranks)
        grading = resolution.GRADING if args.grading is None else args.grading
        expected = resolution.expected_deviation(args.re, n)
        if expected > resolution.TARGET:
            fine = resolution.resolving_size(args.re)
            where = f"the {kind.upper()}" if ranks == 1 else f"{ranks} {kind.upper()} ranks"
            warn(
                f"Re {args.re:g} on {where}: {n}^3 elements (about "
                f"{resolution.estimated_seconds(kind, args.re, n, ranks):.0f} s) are expected to miss the published "
                f"profiles by about {expected:.2f}; profiles within {resolution.TARGET:g} need --n {fine} (about "
                f"{resolution.estimated_seconds('gpu', args.re, fine):.0f} s on one GPU: python -m fem3d.cavity "
                f"--re {args.re:g} --n {fine} --grading {resolution.GRADING:g} --device gpu)"
            )
    else:
        try:
            n = int(args.n)
        except ValueError:
            raise InputError(f"--n must be auto or an integer >= 1 (got {args.n!r})") from None
        grading = 0.0 if args.grading is None else args.grading
    sizes = []
    for name, v in (("--nx", args.nx), ("--ny", args.ny), ("--nz", args.nz)):
        sizes.append(
            check_range(name if v is not None else "--n", n if v is None else v, low=1, high=10**4, integer=True)
        )
    check_range("--grading", grading, low=0, high=10)
    fits(math.prod(sizes), lambda e: f"--n {int(e ** (1 / 3))} fits at most")
    return box_mesh(*sizes, grading=grading), {"box": sizes, "grading": grading, "automatic": args.n == "auto"}


def parse(argv):
    ap = ArgumentParser(
        prog="python -m fem3d.cavity",
        description=__doc__.split("\n\n")[0].split(": ")[0] + ".",
        epilog="The mesh is chosen from the Reynolds number and the device (--n auto): fine enough for "
        "profiles within 0.01 of the published ones where the device affords it in minutes, else a "
        "smaller one with a warning that says what to run. Re 100 takes seconds on a laptop CPU; "
        "Re 1000 needs a GPU and starts from Re 400 (--continuation auto).",
    )
    ap.add_argument(
        "--re", type=float, default=100.0, help="Reynolds number (lid speed and cavity side 1; default 100)"
    )
    ap.add_argument(
        "--n",
        default="auto",
        help="elements per side of the unit cube, or auto: from the Reynolds number and the device (default auto)",
    )
    ap.add_argument("--nx", type=int, help="elements along x (default --n)")
    ap.add_argument("--ny", type=int, help="elements along y (default --n)")
    ap.add_argument("--nz", type=int, help="elements along z (default --n)")
    ap.add_argument(
        "--grading",
        type=float,
        default=None,
        help="clustering of elements toward the walls, 0 uniform (default 1 with --n auto, else 0; 1 to 2 is typical)",
    )
    ap.add_argument("--mesh", help="hexahedral mesh file read with meshio instead of the unit cube")
    ap.add_argument(
        "--refine",
        type=int,
        default=0,
        help=f"refine --mesh uniformly this many times, 0 to {REFINE_MAX}: each "
        "element into 8 placed by its own map (nested levels for --solver mg; default 0)",
    )
    ap.add_argument(
        "--tag-field",
        help="integer cell data holding the boundary tags of --mesh (default gmsh:physical, boundary or tag)",
    )
    ap.add_argument("--lid", default="y=1", help="the lid: a boundary tag name or a plane such as y=1 (default y=1)")
    ap.add_argument(
        "--continuation",
        default=None,
        help="Reynolds numbers solved first: auto (steps of at most 2.5x from 400 when Re > 400), none, or a list "
        "like 100,400 (default auto; none in time)",
    )
    ap.add_argument(
        "--initial",
        help="start from this solution.npy of an earlier run on the same mesh (restart; "
        "combine with --continuation none to stay at --re); in time, a checkpoint.npz continues the run",
    )
    ap.add_argument(
        "--sequence",
        default=None,
        help="mesh sequencing: solve first on this many coarser nested meshes (the multigrid hierarchy's, "
        f"0 to {SEQUENCE_MAX}), the continuation on the coarsest, each solution the next mesh's initial "
        f"guess, so that the finest takes a few Newton steps; none, or auto: the coarser meshes of at least "
        f"{SEQUENCE_MIN['gpu']} elements on a GPU, {SEQUENCE_MIN['cpu']} on the CPU, with --solver mg; those of at "
        f"most {REDUNDANT_MAX} elements solved whole on every rank (default auto; none in time)",
    )
    ap.add_argument("--out", default="cavity-out", help="output directory (default cavity-out)")
    ap.add_argument("--no-plots", action="store_true", help="skip profiles.png and slice.png")
    ap.add_argument(
        "--no-vtu", action="store_true", help="skip the VTU/PVTU solution files (benchmarks of large meshes)"
    )
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    add_solver_arguments(
        ap, tol=1e-6, max_steps=200, newton=1.0
    )  # Newton below a residual of 1: Picard stalls near Re 1000
    add_arguments(
        ap.add_argument_group(
            "in time (an unsteady run from rest: give --t-end and --dt; history.csv holds the "
            "velocity and pressure at the centre every step)"
        ),
        TimeOptions,
        suppress=True,
    )
    add_parallel_arguments(ap)
    return ap.parse_args(argv)


def main(argv=None) -> int:
    t_start = time.perf_counter()  # data preparation begins: the run's T_run counts from here
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse(argv)
    backend, comm = start(args, argv)
    root = comm.rank == 0
    with graceful_stop(), ExitStack() as held:
        with agreed_errors(comm):
            check_range("--re", args.re, low=0, high=RE_MAX, low_open=True)
            timing = given(args, TimeOptions)
            in_time = build(TimeOptions, timing, command_line) if timing else None
            args.continuation = args.continuation or ("none" if in_time else "auto")
            args.sequence = args.sequence or ("none" if in_time else "auto")
            if in_time:
                check_alone(args.continuation, args.sequence, lambda name: f"--{name}")
            continuation_steps(args.continuation, args.re)  # the options first, before any file is read
            sequence_limits(args.sequence, backend.kind)
            nonlinear, linear = nonlinear_options(args), linear_options(args)
            notes = []
            cores = os.cpu_count() or 1
            if not backend.is_gpu and comm.local_size > cores:
                notes.append(
                    f"{comm.local_size} ranks share this node's {cores} CPU cores: oversubscribed ranks wait on "
                    f"each other and run several times slower than one rank; start at most {cores}"
                )

            whole = 0.0 if args.mesh is None else refined_share(args.refine or 0)  # memory.host_share

            def fits(elements, largest):
                return check_fits(
                    backend,
                    linear.matrix_dtype,
                    linear.solver,
                    elements,
                    comm.size,
                    largest,
                    linear.assembly,
                    in_time=in_time is not None,
                    whole_mesh=whole,
                )

            mesh, mesh_info = build_mesh(args, fits, backend.kind, comm.size, notes.append)
            flow = Flow.posed(mesh, args.re, lambda m: lid_driven_problem(m, args.re, args.lid))
            resume = resume_from(args.initial, mesh, in_time, "--t-end and --dt")
            initial = read_initial(args.initial, mesh.n_dofs) if args.initial and resume is None else None
            simulation = Simulation(
                flow,
                backend,
                comm,
                nonlinear,
                linear,
                continuation=args.continuation,
                sequence=args.sequence,
                initial=initial,
                started=t_start,
                time=in_time,
                resume=resume,
            )
            notes += simulation.notes
            out = ensure_writable_dir(args.out)
            if root:  # the folder is this run's until it ends; an earlier run's files go
                stale = [*FlowResult.stale_files("cavity"), "profiles.csv", *PICTURES, TIME_PICTURE]
                stale += [] if resume else TIME_FILES
                held.enter_context(claim_output(out, stale, keep=[args.initial] if args.initial else []))
        for line in notes if root else []:
            print(f"fem3d.cavity: warning: {line}", file=sys.stderr, flush=True)
        say = (lambda s: print(s, flush=True)) if root and not args.quiet else (lambda s: None)
        ranks = f" on {comm.size} ranks ({comm.name})" if comm.size > 1 else ""
        say(f"cavity Re {args.re:g}: {mesh.n_elements} elements, {mesh.n_dofs} unknowns, {backend.describe()}{ranks}")
        terminal = root and not args.quiet and sys.stdout.isatty()
        bar = _progress_bar() if terminal and in_time is None else None
        steps = StepBar(in_time.t_end) if terminal and in_time is not None else None

        def checkpoint(stage, whole):  # a converged continuation stage: restartable from here
            if root:
                save_npy(os.path.join(out, "solution.npy"), whole)

        lo, hi = mesh.bounds()
        centre = [float(v) for v in (lo + hi) / 2]
        timed = (
            None
            if in_time is None
            else TimeOutput(out, mesh, in_time, comm, lambda state: probes(state, centre), resume)
        )
        try:
            result = simulation.run(
                steps.say if steps else say,
                bar,
                checkpoint,
                on_step=timed and timed.on_step,
                on_checkpoint=timed and timed.on_checkpoint,
                status=steps and steps.status,
            )
        finally:
            if steps:
                steps.close()
            if timed:
                timed.close()
        if timed:
            timed.finish(result, STROUHAL)
        result.mesh_info = mesh_info
        run = CavityReport(result, out, " ".join(["python -m fem3d.cavity", *argv]), vtu=not args.no_vtu)
        files = write_results(run)
        if root:
            warnings = []

            def warn(message):
                warnings.append(message)
                print(f"fem3d.cavity: warning: {message}", file=sys.stderr, flush=True)

            pictures = [] if args.no_plots else write_pictures(run, warn, stop=requested)
            if timed and not args.no_plots and not requested():
                timed.picture(pictures, f"3D lid-driven cavity, Re {args.re:g}: the centre in time", "fem3d.cavity")
            written = files + pictures + (timed.files() if timed else [])
            for line in final_lines(run, write_summary(run, written, warnings)):
                say(line)
        signum = agreed(comm)
    if in_time is not None:
        return time_exit("fem3d.cavity", result, signum, out, root, "--dt")
    reached, steps = result.history[-1]["re"], len(result.steps)
    if signum:
        if root:
            solution = os.path.join(out, "solution.npy")
            rest = ",".join(f"{r:g}" for r in simulation.stages if r >= reached) or "none"
            where = (
                f"after the solve; the converged solution and its results are in {out}"
                if result.converged
                else f"at Re {reached:g} after {steps} steps; the last iterate (residual {result.residual:.2e}) "
                f"is in {solution}: continue with --initial {solution} --continuation {rest}"
            )
            print(f"fem3d.cavity: interrupted by {signal.Signals(signum).name} {where}", file=sys.stderr, flush=True)
        return 128 + signum
    if not result.converged:
        hint = out_of_reach_hint(result.reason, "--continuation auto", "use a finer mesh (--n)")
        raise ConvergenceError(
            f"results in {out} are marked as not converged (Re {reached:g}, residual {result.residual:.2e} "
            f"after {steps} steps){hint}",
            result.reason,
        )
    return 0


def probes(state, centre: list) -> dict:
    """The quantities of a cavity run in time: velocity and pressure at the mesh's centre."""
    velocity, pressure = state.values([centre])
    return {"points": {"centre": {"at": centre, "velocity": velocity[0].tolist(), "pressure": float(pressure[0])}}}


def _progress_bar():
    """A one-line progress display of the linear solves for terminals."""

    def show(it, relres):
        bar = "#" * min(30, max(0, int(3 * -math.log10(max(relres, 1e-30)))))
        print(f"\r    linear {it:7d}  relres {relres:.1e}  {bar:<30}", end="\r", flush=True)

    return show


if __name__ == "__main__":
    raise SystemExit(run_cli(main, prog="fem3d.cavity"))
