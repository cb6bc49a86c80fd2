"""Repeated device work replayed from CUDA graphs.

A time-stepping loop that launches only kernels (no host reads, no allocations) is captured
once on a side stream and replayed on the current stream, so that a block of steps costs one
launch from the host. NumPy work is simply run.
"""

from __future__ import annotations

import re

import numpy as np


class StepGraphs:
    """Graphs of ``count`` calls of a step function, one per ``key`` (what else the captured
    launches depend on: host scalars passed to kernels are frozen into the graph).

    The first call runs the work directly (kernels compile and load outside any capture);
    later calls with a new key capture it, then every call with that key replays it."""

    def __init__(self, xp):
        self.xp = xp
        self.graphs: dict = {}
        self.warm = False

    def run(self, key, count: int, step) -> None:
        """``count`` calls of ``step()``, from the graph of ``key`` when there is one."""
        if self.xp is np or not self.warm:
            for _ in range(count):
                step()
            self.warm = True
            return
        graph = self.graphs.get(key)
        if graph is None:
            stream = self.xp.cuda.Stream(non_blocking=True)
            stream.wait_event(self.xp.cuda.get_current_stream().record())
            graph = self.graphs[key] = capture(stream, count, step)
        graph.launch(self.xp.cuda.get_current_stream())

    def operations(self, key) -> int:
        """Operations (kernel launches, copies, memsets) the graph of ``key`` replays, counted in
        its DOT description (cudaGraphDebugDotPrint)."""
        return len(re.findall(r'_node_\d+"\[', self.graphs[key].debug_dot_str()))


def capture(stream, count: int, step):
    """The CUDA graph of ``count`` calls of ``step()`` captured on ``stream`` (a CuPy stream,
    made current meanwhile; not the null stream). Nothing runs while capturing."""
    with stream:
        stream.begin_capture()
        try:
            for _ in range(count):
                step()
        finally:
            graph = stream.end_capture()
    return graph


class Replayed:
    """out = f(b) for 1-D device arrays b of one size, from a CUDA graph: the first call runs
    f directly (kernels compile and load outside any capture), the second captures f on a
    side stream, reading a static copy of b, with its temporaries drawn from a memory pool
    of its own that the graph keeps (no other array takes their addresses), and every call
    from the second on copies b into the static input and replays the graph. The returned
    array is the graph's static output: read it before the next call. f must launch only
    kernels (no read-back) and read arrays that keep their addresses (they are baked in);
    with NumPy, f is simply called."""

    def __init__(self, xp, f):
        self.xp, self.f = xp, f
        self.graph = self.input = self.output = self.pool = None
        self.calls = 0

    def __call__(self, b):
        self.calls += 1
        if self.xp is np or self.calls == 1:
            return self.f(b)
        cuda = self.xp.cuda
        if self.graph is None:
            self.pool = cuda.MemoryPool()
            with cuda.using_allocator(self.pool.malloc):
                self.input = b.copy()
                stream = cuda.Stream(non_blocking=True)
                stream.wait_event(cuda.get_current_stream().record())
                with stream:
                    stream.begin_capture()
                    try:
                        self.output = self.f(self.input)
                    finally:
                        self.graph = stream.end_capture()
        else:
            self.input[...] = b
        self.graph.launch(cuda.get_current_stream())
        return self.output
