"""Dense products of the Krylov and multigrid cycles (fem3d.solvers.krylov, fem3d.solvers.multigrid)
without cuBLAS, so that a cycle can be captured into a CUDA graph (CuPy refuses cuBLAS calls
while capturing): the CUDA kernels of vectors.cu beside their NumPy references, each pair
with one signature. Arrays are float64 and C-contiguous along their last axis.

multi_dot(V, w)           (m,) = V (m, n) w (n,), summed in a fixed order (the same bits every run)
combine(V, h, x, sign)    x (n,) += sign V (m, n)^T h (m,), in place
normalise(src, dst, sq, h, h2, col)
                          dst (n,) = src / sqrt(sq[0]) (src where that is 0), and an Arnoldi
                          step's column: col (m + 1,), of any stride, = [h + h2, sqrt(sq[0])] (h, h2 (m,) or None)
rows_times(a, P, out, transpose)  out (r, k) = a (r, k) P (k, k), or a P^T
gemv(A, x)                (n,) = A (n, n) x
batched_gemv(M, x, y, sign, accumulate)
                          y (b, r) = (y if accumulate else 0) + sign M (b, r, c) x (b, c), float32 or
                          float64; any of them views with strides between items and rows (fem3d.solvers.line_vanka)
all_finite(a)             True when no entry of the float16, float32 or float64 array a is NaN or infinite
                          (one read-back)

all_finite is a kernel of its own rather than CuPy's isfinite(a).all(): CuPy reduces through
CUB block reductions compiled for each block size, which it picks from the array's size below
2,048 entries and widens past 2^31 entries, so that a new mesh size could compile a new one,
seconds each (docs/performance.md, time to solution against N).
"""

from __future__ import annotations

import numpy as np

from gpucfd.backend import cuda_module

_THREADS, _GROUP, _MAX_BLOCKS = 256, 8, 1024  # THREADS and GROUP of vectors.cu


class NumpyVectors:
    """The NumPy references."""

    @staticmethod
    def multi_dot(V, w):
        return V @ w

    @staticmethod
    def combine(V, h, x, sign: float = 1.0):
        x += sign * (V.T @ h)
        return x

    @staticmethod
    def normalise(src, dst, sq, h, h2, col):
        norm = np.sqrt(sq[0])
        np.divide(src, norm if norm > 0 else 1.0, out=dst)
        m = 0 if h is None else h.size
        if m:
            col[:m] = h + h2
        col[m] = norm
        return col

    @staticmethod
    def rows_times(a, P, out, transpose: bool = False):
        np.matmul(a, P.T if transpose else P, out=out)
        return out

    @staticmethod
    def gemv(A, x):
        return A @ x

    @staticmethod
    def batched_gemv(M, x, y, sign: float = 1.0, accumulate: bool = False):
        products = np.matmul(M, x[:, :, None])[:, :, 0]
        if sign != 1.0:
            products *= M.dtype.type(sign)
        if accumulate:
            y += products
        else:
            y[...] = products
        return y

    @staticmethod
    def all_finite(a) -> bool:
        return bool(np.isfinite(a).all())


class CudaVectors:
    """The CUDA kernels (CuPy arrays): launches only, nothing read back but all_finite's flag."""

    @staticmethod
    def _kernel(name):
        return cuda_module("fem3d.kernels", "vectors.cu").get_function(name)

    @staticmethod
    def _blocks(n: int) -> int:
        return max(1, min(_MAX_BLOCKS, -(-n // _THREADS)))

    @classmethod
    def multi_dot(cls, V, w):
        import cupy

        m, n = V.shape
        blocks = cls._blocks(n)
        part = cupy.empty((blocks, m), dtype=np.float64)
        out = cupy.empty(m, dtype=np.float64)
        cls._kernel("multi_dot")(
            (blocks, -(-m // _GROUP)),
            (_THREADS,),
            (V, np.int64(V.strides[0] // 8), w, part, out, cls._ticket(), np.int32(m), np.int64(n)),
        )
        return out

    _tickets: dict = {}

    @classmethod
    def _ticket(cls):
        """The current device's counter of multi_dot's finished blocks (zero between launches;
        one per device: multi_dot launches on one device must not run concurrently), made in
        CuPy's default pool: never in a CUDA graph's (gpucfd.graphs.Replayed)."""
        import cupy

        device = cupy.cuda.Device().id
        if device not in cls._tickets:
            with cupy.cuda.using_allocator(cupy.get_default_memory_pool().malloc):
                cls._tickets[device] = cupy.zeros(1, dtype=np.uint32)
        return cls._tickets[device]

    @classmethod
    def combine(cls, V, h, x, sign: float = 1.0):
        m, n = V.shape
        cls._kernel("combine")(
            (cls._blocks(n),),
            (_THREADS,),
            (V, np.int64(V.strides[0] // 8), h, x, np.int32(m), np.int64(n), np.float64(sign)),
        )
        return x

    @classmethod
    def normalise(cls, src, dst, sq, h, h2, col):
        n = src.size
        m = 0 if h is None else h.size
        null = np.uint64(0)
        cls._kernel("normalise")(
            (cls._blocks(n),),
            (_THREADS,),
            (
                src,
                dst,
                np.int64(n),
                sq,
                null if h is None else h,
                null if h2 is None else h2,
                np.int32(m),
                col,
                np.int64(col.strides[0] // 8),
            ),
        )
        return col

    @classmethod
    def rows_times(cls, a, P, out, transpose: bool = False):
        rows, k = a.shape
        if rows:
            cls._kernel("rows_times")(
                (-(-rows * k // _THREADS),), (_THREADS,), (a, P, out, np.int64(rows), np.int32(k), np.int32(transpose))
            )
        return out

    @classmethod
    def gemv(cls, A, x):
        import cupy

        n = A.shape[0]
        y = cupy.empty(n, dtype=np.float64)
        cls._kernel("gemv")((-(-n * 32 // _THREADS),), (_THREADS,), (A, x, y, np.int64(n)))
        return y

    @classmethod
    def batched_gemv(cls, M, x, y, sign: float = 1.0, accumulate: bool = False):
        batch, rows, cols = M.shape
        size = M.dtype.itemsize
        if not (M.dtype == x.dtype == y.dtype and M.dtype in (np.float32, np.float64)) or not (
            M.strides[2] == x.strides[1] == y.strides[1] == size
        ):
            raise ValueError(
                "batched_gemv takes float32 or float64 arrays of one type, contiguous along their last axis"
            )
        if batch and rows:
            cls._kernel("batched_gemv_f32" if size == 4 else "batched_gemv_f64")(
                (-(-batch * rows * 32 // _THREADS),),
                (_THREADS,),
                (
                    M,
                    np.int64(M.strides[0] // size),
                    np.int32(M.strides[1] // size),
                    x,
                    np.int64(x.strides[0] // size),
                    y,
                    np.int64(y.strides[0] // size),
                    np.int64(batch),
                    np.int32(rows),
                    np.int32(cols),
                    M.dtype.type(sign),
                    np.int32(accumulate),
                ),
            )
        return y

    @classmethod
    def all_finite(cls, a) -> bool:
        import cupy

        a = cupy.ascontiguousarray(a)
        kernel = {
            np.dtype(np.float16): "nonfinite_f16",
            np.dtype(np.float32): "nonfinite_f32",
            np.dtype(np.float64): "nonfinite_f64",
        }[a.dtype]  # KeyError: other types
        flag = cupy.zeros(1, dtype=np.int32)
        cls._kernel(kernel)((cls._blocks(a.size),), (_THREADS,), (a, np.int64(a.size), flag))
        return not int(flag.get()[0])


def for_backend(backend):
    """The implementation for ``backend``."""
    return CudaVectors if backend.is_gpu else NumpyVectors
