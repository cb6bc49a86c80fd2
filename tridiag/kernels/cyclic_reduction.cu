// Cyclic reduction for any n, one block per system, working arrays in global memory
// (Esfahanian et al. 2014). Level l keeps floor(n / 2^l) rows; its odd rows survive to
// level l + 1 (eliminating the even ones), until one row is left; the back substitution
// then solves the even rows of each level from the level above. Rows past the end are
// identity rows.
//
//   cr_inplace_*  rows stay where they are: level l is every 2^l-th row, so the deeper
//                 levels read with ever wider strides (uncoalesced). Work arrays w*
//                 (nsys, max(1, n/2)) hold the odd rows, row i at w[i / 2].
//   cr_sorted_*   the step-by-step reordering: each level's survivors are written
//                 contiguously after the previous level, so every level reads and writes
//                 unit-stride. Work arrays w* (nsys, n) hold levels 1, 2, ... one after
//                 another, wx their solutions.
#include "common.cuh"

#define CR_THREADS 256

template <typename T>
__device__ __forceinline__ Row<T> work_row(const T* wa, const T* wb, const T* wc, const T* wd, long long k)
{
    Row<T> r;
    r.a = wa[k]; r.b = wb[k]; r.c = wc[k]; r.d = wd[k];
    return r;
}

template <typename T>
__device__ __forceinline__ void store_row(T* wa, T* wb, T* wc, T* wd, long long k, const Row<T>& r)
{
    wa[k] = r.a; wb[k] = r.b; wc[k] = r.c; wd[k] = r.d;
}

template <typename T>
__device__ void cr_inplace(const T* __restrict__ a, const T* __restrict__ b, const T* __restrict__ c,
                           const T* __restrict__ d, T* __restrict__ wa, T* __restrict__ wb,
                           T* __restrict__ wc, T* __restrict__ wd, T* __restrict__ x, int n, long long inner)
{
    const long long base = system_base(blockIdx.x, n, inner);
    const long long w = (long long)blockIdx.x * (n / 2 > 0 ? n / 2 : 1);
    // Row i at level l: the inputs at level 0, the work arrays above (all rows there are odd).
    auto row = [&](int level, int i) -> Row<T> {
        if (i < 0 || i >= n) return identity_row<T>();
        if (level == 0) return load_row(a, b, c, d, base + (long long)i * inner, i, n);
        return work_row(wa, wb, wc, wd, w + i / 2);
    };
    int level = 0, st = 1;
    for (; 2 * st <= n; st *= 2, ++level) {
        const int count = n / (2 * st);
        for (int q = threadIdx.x; q < count; q += blockDim.x) {
            const int i = (2 * q + 2) * st - 1;
            store_row(wa, wb, wc, wd, w + i / 2, reduce_row(row(level, i - st), row(level, i), row(level, i + st)));
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        const Row<T> r = row(level, st - 1);
        x[base + (long long)(st - 1) * inner] = r.d / r.b;
    }
    __syncthreads();
    for (--level, st /= 2; level >= 0; --level, st /= 2) {
        const int count = ((n / st) + 1) / 2;
        for (int q = threadIdx.x; q < count; q += blockDim.x) {
            const int i = (2 * q + 1) * st - 1;
            const Row<T> r = row(level, i);
            const T xl = i - st >= 0 ? x[base + (long long)(i - st) * inner] : T(0);
            const T xr = i + st < n ? x[base + (long long)(i + st) * inner] : T(0);
            x[base + (long long)i * inner] = (r.d - r.a * xl - r.c * xr) / r.b;
        }
        __syncthreads();
    }
}

template <typename T>
__device__ void cr_sorted(const T* __restrict__ a, const T* __restrict__ b, const T* __restrict__ c,
                          const T* __restrict__ d, T* __restrict__ wa, T* __restrict__ wb,
                          T* __restrict__ wc, T* __restrict__ wd, T* __restrict__ wx, T* __restrict__ x,
                          int n, long long inner)
{
    const long long base = system_base(blockIdx.x, n, inner);
    const long long w = (long long)blockIdx.x * n;
    // Row j of a level whose rows start at `off` in the work arrays (level 0: the inputs).
    auto row = [&](int level, int off, int rows, int j) -> Row<T> {
        if (j >= rows) return identity_row<T>();
        if (level == 0) return load_row(a, b, c, d, base + (long long)j * inner, j, n);
        return work_row(wa, wb, wc, wd, w + off + j);
    };
    auto xref = [&](int level, int off, int j) -> T& {
        return level == 0 ? x[base + (long long)j * inner] : wx[w + off + j];
    };
    int level = 0, off = 0, rows = n;
    for (; rows > 1; ++level) {
        const int up_rows = rows / 2, up_off = level == 0 ? 0 : off + rows;
        for (int j = threadIdx.x; j < up_rows; j += blockDim.x)
            store_row(wa, wb, wc, wd, w + up_off + j,
                      reduce_row(row(level, off, rows, 2 * j), row(level, off, rows, 2 * j + 1),
                                 row(level, off, rows, 2 * j + 2)));
        __syncthreads();
        rows = up_rows;
        off = up_off;
    }
    if (threadIdx.x == 0) {
        const Row<T> r = row(level, off, 1, 0);
        xref(level, off, 0) = r.d / r.b;
    }
    __syncthreads();
    for (; level > 0; --level) {
        const int up_off = off, up_rows = rows;
        rows = n >> (level - 1);
        off = level - 1 == 0 ? 0 : up_off - rows;
        for (int j = threadIdx.x; j < rows; j += blockDim.x) {
            T xj;
            if (j % 2 == 1) {
                xj = xref(level, up_off, j / 2);
            } else {
                const Row<T> r = row(level - 1, off, rows, j);
                const T xl = j > 0 ? xref(level, up_off, j / 2 - 1) : T(0);
                const T xr = j / 2 < up_rows ? xref(level, up_off, j / 2) : T(0);
                xj = (r.d - r.a * xl - r.c * xr) / r.b;
            }
            xref(level - 1, off, j) = xj;
        }
        __syncthreads();
    }
}

#define CR_INPLACE(T, NAME)                                                                   \
    extern "C" __global__ void __launch_bounds__(CR_THREADS)                                  \
    NAME(const T* a, const T* b, const T* c, const T* d, T* wa, T* wb, T* wc, T* wd, T* x,    \
         int n, long long inner)                                                              \
    {                                                                                         \
        cr_inplace<T>(a, b, c, d, wa, wb, wc, wd, x, n, inner);                               \
    }
#define CR_SORTED(T, NAME)                                                                    \
    extern "C" __global__ void __launch_bounds__(CR_THREADS)                                  \
    NAME(const T* a, const T* b, const T* c, const T* d, T* wa, T* wb, T* wc, T* wd, T* wx,   \
         T* x, int n, long long inner)                                                        \
    {                                                                                         \
        cr_sorted<T>(a, b, c, d, wa, wb, wc, wd, wx, x, n, inner);                            \
    }
CR_INPLACE(float, cr_inplace_f32)
CR_INPLACE(double, cr_inplace_f64)
CR_SORTED(float, cr_sorted_f32)
CR_SORTED(double, cr_sorted_f64)
