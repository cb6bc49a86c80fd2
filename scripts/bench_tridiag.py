"""Benchmark of tridiag.solve: every method against cuSPARSE gtsv2 (peer) and the CPU reference.

For M systems of N unknowns (float32, float64) it reports the time per solve (median over
--repeat samples; each sample is the CUDA-event time of `calls` back-to-back solves divided
by `calls`, so the host's Python overhead overlaps GPU work as in a time-stepping loop;
check=False: no device-to-host read), the time of one isolated call (Python overhead
included), the effective bandwidth over the minimal bytes
(read a, b, c, d, write x: 5 M N itemsize), that bandwidth as a fraction of a measured
device-to-device copy, and the relative residual ||Ax - d|| / ||d||. Systems are random,
strictly diagonally dominant. Writes tridiag_bench<tag>.json and tridiag_bench<tag>.md to --out.

  python scripts/bench_tridiag.py --tag _h100                        # full run (GPU)
  python scripts/bench_tridiag.py --square 1024 --sweep-systems --cpu-max 0   # smaller
"""

from __future__ import annotations

import datetime
import json
import math
import platform
import sys
import time
import traceback
from pathlib import Path

import numpy as np

import tridiag
from gpucfd.backend import DTYPES, cupy_module, get_backend
from gpucfd.errors import ArgumentParser, InputError, check_range, run_cli
from gpucfd.graphs import capture
from gpucfd.output import ensure_writable_dir
from script_options import check_names, check_tag
from tridiag.kernels import hybrid, pcr
from tridiag.cases.memory import check_fits

SQUARE = (1024, 2048, 4096, 8192)
SWEEP_SYSTEMS = (256, 1024)
SWEEP_N = (64, 256, 1024, 4096, 16384)
# (label, method, options, layout of the data)
VARIANTS = [
    ("hybrid", "hybrid", {}, "contiguous"),
    ("hybrid chunk=8", "hybrid", {"chunk": 8}, "contiguous"),
    ("hybrid chunk=16", "hybrid", {"chunk": 16}, "contiguous"),
    ("hybrid chunk=32", "hybrid", {"chunk": 32}, "contiguous"),
    ("pta contiguous", "pta", {}, "contiguous"),
    ("pta interleaved", "pta", {}, "interleaved"),
    ("hybrid interleaved", "hybrid", {}, "interleaved"),
    ("cr", "cr", {}, "contiguous"),
    ("cr_sorted", "cr_sorted", {}, "contiguous"),
    ("pcr block x4", "pcr", {"mapping": "block", "arrays": 4}, "contiguous"),
    ("pcr block x5", "pcr", {"mapping": "block", "arrays": 5}, "contiguous"),
    ("pcr grid x4", "pcr", {"mapping": "grid", "arrays": 4}, "contiguous"),
    ("pcr grid x5", "pcr", {"mapping": "grid", "arrays": 5}, "contiguous"),
    ("checkerboard shared dop=8", "checkerboard", {"dop": 8, "memory": "shared"}, "contiguous"),
    ("checkerboard global dop=8", "checkerboard", {"dop": 8, "memory": "global"}, "contiguous"),
    ("auto", "auto", {}, "contiguous"),
]
SWEEP_VARIANTS = ("hybrid", "pta contiguous", "pta interleaved", "hybrid interleaved", "auto")
CASE_ARRAYS = 16  # M x N arrays on the device at the peak of a case: a, b, c, d in two layouts, x, peers' copies, work


def make_systems(xp, m, n, dtype, interleaved, seed=0):
    """a, b, c, d of m dominant systems: (m, n) contiguous, or (n, m) interleaved (solve axis 0)."""
    rng = xp.random.default_rng(seed)
    shape = (n, m) if interleaved else (m, n)
    a = rng.uniform(-1, 1, shape)
    c = rng.uniform(-1, 1, shape)
    b = xp.abs(a) + xp.abs(c) + rng.uniform(0.5, 1.5, shape)
    d = rng.uniform(-1, 1, shape)
    return [v.astype(dtype) for v in (a, b, c, d)]


def residual(xp, a, b, c, d, x, axis):
    a, b, c, d, x = (xp.moveaxis(v.astype(np.float64), axis, -1) for v in (a, b, c, d, x))
    r = b * x - d
    r[..., 1:] += a[..., 1:] * x[..., :-1]
    r[..., :-1] += c[..., :-1] * x[..., 1:]
    return float(xp.linalg.norm(r) / xp.linalg.norm(d))


def copy_bandwidth(backend, nbytes=2 << 30):
    xp = backend.xp
    src = xp.ones(nbytes // 8)
    dst = xp.empty_like(src)
    seconds = backend.time_call(lambda: dst.__setitem__(Ellipsis, src), repeat=10, warmup=2)
    return 2 * nbytes / seconds / 1e9


class CuSparse:
    """cuSPARSE gtsv2StridedBatch (contiguous) / gtsvInterleavedBatch (interleaved), in place."""

    def __init__(self, cp):
        from cupy_backends.cuda.libs import cusparse

        self.cp, self.lib = cp, cusparse
        self.handle = cp.cuda.device.get_cusparse_handle()

    def prepare(self, a, b, c, d, interleaved):
        cp = self.cp
        dl, du = a.copy(), c.copy()
        if interleaved:
            dl[0], du[-1] = 0, 0
            n, m = a.shape
        else:
            dl[:, 0], du[:, -1] = 0, 0
            m, n = a.shape
        x = d.copy()
        p = "d" if a.dtype == np.float64 else "s"
        ptrs = (dl.data.ptr, b.data.ptr, du.data.ptr, x.data.ptr)
        if interleaved:
            size = getattr(self.lib, f"{p}gtsvInterleavedBatch_bufferSizeExt")(self.handle, 0, n, *ptrs, m)
            buf = cp.empty(max(size, 1), dtype=np.uint8)
            fn = getattr(self.lib, f"{p}gtsvInterleavedBatch")
            call = lambda: fn(self.handle, 0, n, *ptrs, m, buf.data.ptr)  # noqa: E731
        else:
            size = getattr(self.lib, f"{p}gtsv2StridedBatch_bufferSizeExt")(self.handle, n, *ptrs, m, n)
            buf = cp.empty(max(size, 1), dtype=np.uint8)
            fn = getattr(self.lib, f"{p}gtsv2StridedBatch")
            call = lambda: fn(self.handle, n, *ptrs, m, n, buf.data.ptr)  # noqa: E731
        keep = (dl, du, buf)
        return call, x, keep


def jax_peer(cp, a, b, c, d):
    """jax.lax.linalg.tridiagonal_solve on the same (contiguous) data, as a callable."""
    import jax
    import jax.numpy as jnp

    dl, du = a.copy(), c.copy()
    dl[:, 0], du[:, -1] = 0, 0
    args = [jnp.from_dlpack(v) for v in (dl, b, du)] + [jnp.from_dlpack(d)[..., None]]
    fn = jax.jit(jax.lax.linalg.tridiagonal_solve)
    return lambda: fn(*args).block_until_ready(), lambda: cp.from_dlpack(fn(*args))[..., 0]


def time_solve(backend, fn, repeat):
    """(seconds per call back-to-back, seconds of one isolated call, calls per sample, seconds per
    call replayed from a CUDA graph or None where the call cannot be captured)."""
    single = backend.time_call(fn, repeat=3, warmup=1)
    calls = int(min(50, max(1, 2e-3 / single)))
    back_to_back = backend.time_call(lambda: [fn() for _ in range(calls)], repeat=repeat, warmup=1) / calls
    return back_to_back, single, calls, time_graph(backend, fn, calls, repeat)


def time_graph(backend, fn, calls, repeat):
    """Seconds per call of ``calls`` calls of ``fn`` captured into one CUDA graph and replayed
    (median of ``repeat`` replays): the device time without the host's launch overhead.
    None if ``fn`` cannot be captured (it synchronises or allocates device memory)."""
    cp = backend.xp
    stream = cp.cuda.Stream(non_blocking=True)
    try:
        with stream:
            for _ in range(2):  # warm the memory pool of this stream
                fn()
            stream.synchronize()
        graph = capture(stream, calls, fn)
        graph.upload(stream)
        times = []
        for _ in range(repeat + 1):
            start, stop = cp.cuda.Event(), cp.cuda.Event()
            start.record(stream)
            graph.launch(stream)
            stop.record(stream)
            stop.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, stop) * 1e-3 / calls)
        return float(np.median(times[1:]))
    except Exception as exc:  # capture refused: report the back-to-back time only
        print(f"    (no CUDA graph: {exc!r})", flush=True)
        return None


def time_wall(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def bench_case(backend, m, n, dtype, variants, repeat, copy_gbs, cpu, peers):
    xp = backend.xp
    nbytes = 5 * m * n * np.dtype(dtype).itemsize
    rows = []

    def record(label, timing, res, **extra):
        seconds, single, calls, graph = timing
        extra.update(ms_single=single * 1e3, calls=calls, ms_graph=None if graph is None else graph * 1e3)
        best = seconds if graph is None else graph
        row = dict(
            systems=m,
            n=n,
            dtype=np.dtype(dtype).name,
            method=label,
            ms=seconds * 1e3,
            gbs=nbytes / best / 1e9,
            copy_fraction=nbytes / best / 1e9 / copy_gbs,
            residual=res,
            **extra,
        )
        rows.append(row)
        shown = "" if graph is None else f" graph {graph * 1e3:8.4f}"
        print(
            f"  {label:28s} {row['ms']:9.4f} ms{shown} (1 call {single * 1e3:8.4f}) {row['gbs']:7.0f} GB/s "
            f"{row['copy_fraction']:6.1%}  res {res:.1e}" + (f"  {extra.get('chosen', '')}"),
            flush=True,
        )

    data = {}
    for layout in ("contiguous", "interleaved"):
        data[layout] = make_systems(xp, m, n, dtype, layout == "interleaved")
    for label, method, opts, layout in variants:
        if "chunk" in opts and not hybrid.onchip_fits(n, opts["chunk"], dtype):
            continue
        if label.startswith("pcr block") and not pcr.block_fits(n, dtype, opts["arrays"]):
            continue
        a, b, c, d = data[layout]
        axis = 0 if layout == "interleaved" else -1
        try:
            info = {}
            x = tridiag.solve(a, b, c, d, method=method, axis=axis, info=info, **opts)
            res = residual(xp, a, b, c, d, x, axis)
            del x
            timing = time_solve(
                backend, lambda: tridiag.solve(a, b, c, d, method=method, axis=axis, check=False, **opts), repeat
            )
            extra = {}
            if method == "auto":
                extra["chosen"] = f"{info['method']} {info['options']}"
            if "iterations" in info:
                extra["iterations"] = int(np.abs(info["iterations"]).max())
            record(label, timing, res, **extra)
        except Exception as exc:  # one failing method must not stop the benchmark
            rows.append(dict(systems=m, n=n, dtype=np.dtype(dtype).name, method=label, error=repr(exc)))
            print(f"  {label:28s} ERROR {exc!r}", flush=True)
            traceback.print_exc(limit=3)
        backend.xp.get_default_memory_pool().free_all_blocks()
    for layout in ("contiguous", "interleaved"):
        a, b, c, d = data[layout]
        axis = 0 if layout == "interleaved" else -1
        label = f"cuSPARSE gtsv {layout}"
        try:
            if peers.get("cusparse"):
                call, x, keep = peers["cusparse"].prepare(a, b, c, d, layout == "interleaved")
                call()
                res = residual(xp, a, b, c, d, x, axis)
                record(label, time_solve(backend, call, repeat), res, note="in place, copy of d excluded")
                del call, x, keep
            elif peers.get("jax") and layout == "contiguous":
                run, result = jax_peer(xp, a, b, c, d)
                res = residual(xp, a, b, c, d, result(), axis)
                t = time_wall(run, repeat)
                record("JAX tridiagonal_solve", (t, t, 1, None), res, note="wall clock")
        except Exception as exc:
            rows.append(dict(systems=m, n=n, dtype=np.dtype(dtype).name, method=label, error=repr(exc)))
            print(f"  {label:28s} ERROR {exc!r}", flush=True)
    if cpu:
        host = [xp.asnumpy(v) for v in data["contiguous"]]
        t0 = time.perf_counter()
        x = tridiag.solve(*host, method="thomas")
        seconds = time.perf_counter() - t0
        res = residual(np, *host, x, -1)
        rows.append(
            dict(
                systems=m,
                n=n,
                dtype=np.dtype(dtype).name,
                method="CPU thomas (NumPy)",
                ms=seconds * 1e3,
                gbs=nbytes / seconds / 1e9,
                copy_fraction=None,
                residual=res,
            )
        )
        print(f"  {'CPU thomas (NumPy)':28s} {seconds * 1e3:9.1f} ms  res {res:.1e}", flush=True)
    del data
    backend.xp.get_default_memory_pool().free_all_blocks()
    return rows


def markdown(meta, rows):
    lines = [
        f"# tridiag benchmark ({meta['device']})",
        "",
        f"{meta['date']}; command `{meta['command']}`; copy bandwidth {meta['copy_gbs']:.0f} GB/s "
        "(device-to-device, read + write). ms: time per solve, median of CUDA-event samples of back-to-back "
        "solves from Python (check=False); graph ms: the same solves captured in a CUDA graph and replayed, "
        "the device time without Python's launch overhead; 1 call: one isolated call, Python overhead "
        "included. GB/s (over the minimal bytes 5 M N itemsize) and % copy from graph ms where there is one, "
        "else ms; residual ||Ax - d|| / ||d||.",
        "",
        "| M systems | N | dtype | method | ms | graph ms | 1 call ms | GB/s | % copy | residual | note |",
        "|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(
                f"| {r['systems']} | {r['n']} | {r['dtype']} | {r['method']} | error | | | | | | {r['error'][:80]} |"
            )
            continue
        frac = f"{100 * r['copy_fraction']:.0f}" if r.get("copy_fraction") else ""
        note = r.get("chosen") or r.get("note") or (f"{r['iterations']} iterations" if "iterations" in r else "")
        single = f"{r['ms_single']:.4g}" if "ms_single" in r else ""
        graph = f"{r['ms_graph']:.4g}" if r.get("ms_graph") is not None else ""
        lines.append(
            f"| {r['systems']} | {r['n']} | {r['dtype']} | {r['method']} | {r['ms']:.4g} | {graph} | {single} | "
            f"{r['gbs']:.0f} | {frac} | {r['residual']:.1e} | {note} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = ArgumentParser(prog="scripts/bench_tridiag.py", description=__doc__.splitlines()[0])
    p.add_argument("--out", default="benchmarks/results", help="folder for tridiag_bench<tag>.json/.md")
    p.add_argument("--tag", default="", help="suffix of the result file names, e.g. _h100")
    p.add_argument("--square", type=int, nargs="*", default=list(SQUARE), help="M = N sizes")
    p.add_argument("--dtypes", nargs="*", default=["float64", "float32"])
    p.add_argument("--sweep-systems", type=int, nargs="*", default=list(SWEEP_SYSTEMS))
    p.add_argument("--sweep-n", type=int, nargs="*", default=list(SWEEP_N))
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--cpu-max", type=int, default=8192, help="largest M = N timed with the CPU reference")
    args = p.parse_args(argv)
    for name in ("square", "sweep_systems", "sweep_n"):
        for v in getattr(args, name):
            check_range("--" + name.replace("_", "-"), v, 1, integer=True)
    check_names("--dtypes", args.dtypes, tuple(DTYPES))
    check_range("--repeat", args.repeat, 1, 1000, integer=True)
    check_range("--cpu-max", args.cpu_max, 0, integer=True)
    check_tag(args.tag)
    if cupy_module() is None:
        raise InputError(
            "this benchmark needs a CUDA GPU (CuPy with a device): it times the CUDA kernels against "
            "cuSPARSE; python -m tridiag.cases.heat and tests/test_tridiag.py run the solvers on the CPU"
        )
    backend = get_backend("gpu")
    sizes = [s * s for s in args.square] + [m * n for m in args.sweep_systems for n in args.sweep_n]
    if sizes:
        widest = np.float64 if "float64" in args.dtypes else np.float32
        check_fits(
            backend,
            max(sizes),
            CASE_ARRAYS,
            widest,
            4 if args.cpu_max else 0,
            f"M x N = {max(sizes)}",
            lambda most: f"M = N = {math.isqrt(most)}",
        )
    ensure_writable_dir(args.out)
    cp = backend.xp
    peers = {}
    try:
        peers["cusparse"] = CuSparse(cp)
        print("peer: cuSPARSE via cupy_backends.cuda.libs.cusparse")
    except Exception as exc:
        print(f"cuSPARSE binding unavailable ({exc!r}); trying JAX")
        try:
            import jax  # noqa: F401

            peers["jax"] = True
        except Exception as exc2:
            print(f"JAX unavailable ({exc2!r}): no peer")
    copy_gbs = copy_bandwidth(backend)
    print(f"{backend.describe()}; copy bandwidth {copy_gbs:.0f} GB/s", flush=True)
    rows, square_rows = [], []
    sweep = [v for v in VARIANTS if v[0] in SWEEP_VARIANTS]
    cases = [(s, s, dt, VARIANTS, s <= args.cpu_max) for dt in args.dtypes for s in args.square]
    cases += [(m, n, dt, sweep, False) for dt in args.dtypes for m in args.sweep_systems for n in args.sweep_n]
    for k, (m, n, dt, variants, cpu) in enumerate(cases):
        print(f"M={m} N={n} {dt}", flush=True)
        case_rows = bench_case(backend, m, n, np.dtype(dt), variants, args.repeat, copy_gbs, cpu, peers)
        rows += case_rows
        if k < len(args.dtypes) * len(args.square):
            square_rows += case_rows
    meta = dict(
        device=backend.describe(),
        date=datetime.datetime.now().isoformat(timespec="seconds"),
        command="python " + " ".join(sys.argv),
        copy_gbs=copy_gbs,
        python=platform.python_version(),
        peer="cuSPARSE" if "cusparse" in peers else ("JAX" if "jax" in peers else "none"),
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"tridiag_bench{args.tag}.json").write_text(json.dumps(dict(meta=meta, results=rows), indent=1))
    (out / f"tridiag_bench{args.tag}.md").write_text(markdown(meta, rows))
    print(
        "\nsummary (device ms per solve: graph replay where captured) of the M = N cases: best hybrid, "
        "then the six fastest"
    )
    for dt in args.dtypes:
        for s in args.square:
            sel = [r for r in square_rows if r["systems"] == s and r["n"] == s and r["dtype"] == dt and "ms" in r]
            best = {r["method"]: r["ms_graph"] if r.get("ms_graph") is not None else r["ms"] for r in sel}
            hyb = min((v for k, v in best.items() if k.startswith("hybrid") and "interleaved" not in k), default=None)
            print(
                f"{s:6d} {dt:8s} hybrid {hyb} | "
                + ", ".join(f"{k}={v:.3f}" for k, v in sorted(best.items(), key=lambda t: t[1])[:6])
            )
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main, prog="scripts/bench_tridiag.py"))
