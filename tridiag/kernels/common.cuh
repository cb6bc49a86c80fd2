// Shared helpers of the tridiag kernels.
// Storage: system s of a batch stored as (outer, n, inner) starts at
// (s / inner) * n * inner + s % inner and its rows lie `inner` elements apart.
#pragma once

__device__ __forceinline__ long long system_base(long long s, int n, long long inner)
{
    return (s / inner) * (long long)n * inner + s % inner;
}

// One row of a tridiagonal system: a x[i-1] + b x[i] + c x[i+1] = d.
template <typename T>
struct Row {
    T a, b, c, d;
};

// Row i of a system, stored at element k (a[0] and c[n-1] read as zero).
template <typename T>
__device__ __forceinline__ Row<T> load_row(const T* a, const T* b, const T* c, const T* d,
                                           long long k, int i, int n)
{
    Row<T> r;
    r.a = i > 0 ? a[k] : T(0);
    r.b = b[k];
    r.c = i < n - 1 ? c[k] : T(0);
    r.d = d[k];
    return r;
}

// The row that stands for an unknown outside the system: x = 0, coupled to nothing.
template <typename T>
__device__ __forceinline__ Row<T> identity_row()
{
    Row<T> r;
    r.a = T(0); r.b = T(1); r.c = T(0); r.d = T(0);
    return r;
}

// One cyclic-reduction elimination: row `r` takes in its neighbours `lo` (above) and `hi`
// (below), which couple it to the unknowns one stride further out.
template <typename T>
__device__ __forceinline__ Row<T> reduce_row(const Row<T>& lo, const Row<T>& r, const Row<T>& hi)
{
    const T k1 = r.a / lo.b, k2 = r.c / hi.b;
    Row<T> o;
    o.a = -lo.a * k1;
    o.b = r.b - lo.c * k1 - hi.a * k2;
    o.c = -hi.c * k2;
    o.d = r.d - lo.d * k1 - hi.d * k2;
    return o;
}

// Parallel cyclic reduction of a reduced system in shared memory: thread j of nt holds row
// `me`; red has room for [4][nt]; returns row j decoupled (x_j = d / b). All threads call it.
template <typename T>
__device__ Row<T> pcr_rows(Row<T> me, T* red, int nt, int j)
{
    for (int st = 1; st < nt; st *= 2) {
        red[j] = me.a; red[nt + j] = me.b; red[2 * nt + j] = me.c; red[3 * nt + j] = me.d;
        __syncthreads();
        Row<T> lo = identity_row<T>(), hi = identity_row<T>();
        if (j >= st) { lo.a = red[j - st]; lo.b = red[nt + j - st]; lo.c = red[2 * nt + j - st]; lo.d = red[3 * nt + j - st]; }
        if (j + st < nt) { hi.a = red[j + st]; hi.b = red[nt + j + st]; hi.c = red[2 * nt + j + st]; hi.d = red[3 * nt + j + st]; }
        me = reduce_row(lo, me, hi);
        __syncthreads();
    }
    return me;
}

// max that propagates NaN (fmax would drop it and hide a diverging iteration).
template <typename T>
__device__ __forceinline__ T nan_max(T x, T y)
{
    return (x != x || x > y) ? x : y;
}
