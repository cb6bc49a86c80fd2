// One tridiagonal system per thread block, solved in shared memory: the fused line sweeps
// (line_sweeps.cu) build their rows straight into it, solve, and write the solution
// where it belongs, so a whole sweep (right-hand side, coefficients, solve, update) is one launch.
//
// Method: the partition method of hybrid.cu on rows already in shared memory. Thread j owns
// chunk j, rows j*M .. j*M+m-1 (M = ceil(n / blockDim.x), m <= M). Forward and backward sweeps
// over the chunk (in place) express rows 0..m-2 as x_k = D_k - A_k xl - C_k xr, with xl the last
// unknown of chunk j-1 and xr the last of chunk j; row m-1 with row m-2 and the next chunk's
// first row gives one reduced row per chunk in xr, solved by parallel cyclic reduction; then
// every row follows. Rows outside the system are identity rows (x = 0).
//
// Shared layout (T entries): a, b, c, d [n each], then reduced rows [4][nt], F [3][nt], L [nt]:
// shared_bytes() in line_sweeps.py must agree.
#pragma once
#include "common.cuh"

template <typename T>
struct LineShared {
    T *a, *b, *c, *d, *red, *F, *L;
};

template <typename T>
__device__ __forceinline__ LineShared<T> line_shared(int n)
{
    extern __shared__ __align__(16) unsigned char smem[];
    LineShared<T> s;
    const int nt = blockDim.x;
    s.a = reinterpret_cast<T*>(smem);
    s.b = s.a + n;
    s.c = s.b + n;
    s.d = s.c + n;
    s.red = s.d + n;
    s.F = s.red + 4 * nt;
    s.L = s.F + 3 * nt;
    return s;
}

// Solve the n rows in s.a..s.d (a[0] and c[n-1] must be 0); the solution ends in s.d.
// Every thread of the block must call it (it synchronises).
template <typename T>
__device__ void line_solve(LineShared<T>& s, int n)
{
    const int nt = blockDim.x, j = threadIdx.x;
    const int M = (n + nt - 1) / nt;
    const int first = j * M, m = max(0, min(M, n - first));
    __syncthreads();  // rows written by other threads
    T *A = s.a + first, *B = s.b + first, *C = s.c + first, *D = s.d + first;
    // forward sweep over rows 0..m-2 with xl and xr as parameters: x_k = D_k - A_k xl - C_k x_{k+1}
    for (int k = 0; k < m - 1; ++k) {
        const T ak = A[k];
        if (k == 0) {
            const T inv = T(1) / B[0];
            D[0] *= inv; A[0] = ak * inv; C[0] *= inv;
        } else {
            const T inv = T(1) / (B[k] - ak * C[k - 1]);
            D[k] = (D[k] - ak * D[k - 1]) * inv;
            A[k] = -ak * A[k - 1] * inv;
            C[k] *= inv;
        }
    }
    // backward: rows k < m-2 in terms of xl and xr (row m-2 already is)
    for (int k = m - 3; k >= 0; --k) {
        D[k] -= C[k] * D[k + 1];
        A[k] -= C[k] * A[k + 1];
        C[k] = -C[k] * C[k + 1];
    }
    T PD = T(0), PA = T(-1), PC = T(0);  // row m-2 (for m = 1 it is xl itself)
    if (m >= 2) { PD = D[m - 2]; PA = A[m - 2]; PC = C[m - 2]; }
    Row<T> last = identity_row<T>();
    if (m >= 1) { last.a = A[m - 1]; last.b = B[m - 1]; last.c = C[m - 1]; last.d = D[m - 1]; }
    // F relation: the chunk's first row in terms of xl and xr (for m = 1 it is xr itself)
    if (m >= 2) { s.F[j] = D[0]; s.F[nt + j] = A[0]; s.F[2 * nt + j] = C[0]; }
    else { s.F[j] = T(0); s.F[nt + j] = T(0); s.F[2 * nt + j] = T(-1); }
    __syncthreads();
    Row<T> me = identity_row<T>();
    if (m >= 1) {
        const bool next = j + 1 < nt && first + M < n;
        const T fd = next ? s.F[j + 1] : T(0), fa = next ? s.F[nt + j + 1] : T(0), fc = next ? s.F[2 * nt + j + 1] : T(0);
        me.a = -last.a * PA;
        me.b = last.b - last.a * PC - last.c * fa;
        me.c = -last.c * fc;
        me.d = last.d - last.a * PD - last.c * fd;
    }
    me = pcr_rows(me, s.red, nt, j);
    s.L[j] = me.d / me.b;
    __syncthreads();
    const T xl = j > 0 ? s.L[j - 1] : T(0), xr = s.L[j];
    for (int k = 0; k < m - 1; ++k) D[k] = D[k] - A[k] * xl - C[k] * xr;
    if (m >= 1) D[m - 1] = xr;
    __syncthreads();
}
