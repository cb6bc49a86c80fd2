// Dense products of the Krylov and multigrid cycles without cuBLAS (cuBLAS cannot be
// captured into a CUDA graph through CuPy). fem3d.kernels.vectors has the NumPy references.
//
// V (m, ldv) row-major: m vectors of length n (n <= ldv); w, x (n,); h (m,); all float64.

#include <cuda_fp16.h>

#define THREADS 256
#define GROUP 8  // vectors per block row of multi_dot

// out[j] = sum_i V[j][i] w[i] for j < m. Block (b, g) sums its grid-stride range of the entries
// for the GROUP vectors of blockIdx.y = g into part[b * m + j]; the last block to finish (a ticket
// from *done, which it sets back to 0) sums part over b for every j: lane l of a warp takes
// b = l, l + 32, ... in turn, then the lanes are combined by a fixed tree. Every sum's order
// follows from the launch's shape alone, whichever block finishes last: the same bits every run.
extern "C" __global__ void __launch_bounds__(THREADS)
multi_dot(const double* __restrict__ V, long ldv, const double* __restrict__ w, double* __restrict__ part,
          double* __restrict__ out, unsigned* __restrict__ done, int m, long n)
{
    __shared__ double sh[GROUP][THREADS];
    __shared__ bool last;
    const int j0 = blockIdx.y * GROUP;
    double acc[GROUP];
    for (int t = 0; t < GROUP; ++t) acc[t] = 0.0;
    for (long i = blockIdx.x * (long)THREADS + threadIdx.x; i < n; i += (long)gridDim.x * THREADS) {
        const double wi = w[i];
        for (int t = 0; t < GROUP; ++t)
            if (j0 + t < m) acc[t] += V[(j0 + t) * ldv + i] * wi;
    }
    for (int t = 0; t < GROUP; ++t) sh[t][threadIdx.x] = acc[t];
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            for (int t = 0; t < GROUP; ++t) sh[t][threadIdx.x] += sh[t][threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x < GROUP && j0 + threadIdx.x < m) part[blockIdx.x * (long)m + j0 + threadIdx.x] = sh[threadIdx.x][0];
    __threadfence();  // this block's sums visible on the device before its ticket
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(done, 1u) == gridDim.x * gridDim.y - 1;
    __syncthreads();
    if (!last) return;
    const int lane = threadIdx.x & 31;
    for (int j = threadIdx.x >> 5; j < m; j += THREADS / 32) {
        double s = 0.0;
        for (int b = lane; b < gridDim.x; b += 32) s += __ldcg(part + b * (long)m + j);  // L2: other blocks' writes
        for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
        if (lane == 0) out[j] = s;
    }
    if (threadIdx.x == 0) *done = 0;
}

// x[i] += sign * sum_j V[j][i] h[j]
extern "C" __global__ void __launch_bounds__(THREADS)
combine(const double* __restrict__ V, long ldv, const double* __restrict__ h, double* __restrict__ x,
        int m, long n, double sign)
{
    for (long i = blockIdx.x * (long)THREADS + threadIdx.x; i < n; i += (long)gridDim.x * THREADS) {
        double s = 0.0;
        for (int j = 0; j < m; ++j) s += V[j * ldv + i] * h[j];
        x[i] += sign * s;
    }
}

// dst = src / d with d = sqrt(sq[0]) where that is positive, else 1 (a vector made of unit
// norm, left as it is when zero); and the column of an Arnoldi step: col[i * stride] =
// h[i] + h2[i] for i < m, col[m * stride] = sqrt(sq[0]) (h, h2 unread when m = 0)
extern "C" __global__ void __launch_bounds__(THREADS)
normalise(const double* __restrict__ src, double* __restrict__ dst, long n, const double* __restrict__ sq,
          const double* __restrict__ h, const double* __restrict__ h2, int m, double* __restrict__ col, long stride)
{
    const double norm = sqrt(sq[0]);
    const double d = norm > 0.0 ? norm : 1.0;
    for (long i = blockIdx.x * (long)THREADS + threadIdx.x; i < n; i += (long)gridDim.x * THREADS) dst[i] = src[i] / d;
    if (blockIdx.x == 0)
        for (int i = threadIdx.x; i <= m; i += blockDim.x) col[i * stride] = i < m ? h[i] + h2[i] : norm;
}

// out (rows, k) = a (rows, k) P (k, k), or a P^T with transpose = 1; row-major, one thread per entry of out
extern "C" __global__ void __launch_bounds__(THREADS)
rows_times(const double* __restrict__ a, const double* __restrict__ P, double* __restrict__ out, long rows, int k,
           int transpose)
{
    const long t = blockIdx.x * (long)THREADS + threadIdx.x;
    if (t >= rows * k) return;
    const long r = t / k;
    const int c = t % k;
    const double* ar = a + r * k;
    double s = 0.0;
    const int step = transpose ? 1 : k;
    const double* Pc = transpose ? P + c * k : P + c;
    for (int q = 0; q < k; ++q) s += ar[q] * Pc[q * step];
    out[t] = s;
}

// y (n,) = A (n, n) x, one warp per row
extern "C" __global__ void __launch_bounds__(THREADS)
gemv(const double* __restrict__ A, const double* __restrict__ x, double* __restrict__ y, long n)
{
    const long row = (blockIdx.x * (long)THREADS + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (row >= n) return;
    const double* Ar = A + row * n;
    double s = 0.0;
    for (long q = lane; q < n; q += 32) s += Ar[q] * x[q];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffff, s, o);
    if (lane == 0) y[row] = s;
}

// y[b][r] = (accumulate ? y[b][r] : 0) + sign sum_c M[b][r][c] x[b][c] for b < batch, r < rows, c < cols;
// items and rows at the given strides (entries); one warp per row of one item
template <typename T>
__device__ void batched_gemv(const T* __restrict__ M, long item, int row, const T* __restrict__ x, long x_item,
                             T* __restrict__ y, long y_item, long batch, int rows, int cols, T sign, int accumulate)
{
    const long w = (blockIdx.x * (long)THREADS + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (w >= batch * rows) return;
    const long b = w / rows;
    const int r = w % rows;
    const T* Mr = M + b * item + (long)r * row;
    const T* xb = x + b * x_item;
    T s = 0;
    for (int c = lane; c < cols; c += 32) s += Mr[c] * xb[c];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffff, s, o);
    if (lane == 0) {
        T* out = y + b * y_item + r;
        *out = (accumulate ? *out : T(0)) + sign * s;
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
batched_gemv_f32(const float* M, long item, int row, const float* x, long x_item, float* y, long y_item, long batch,
                 int rows, int cols, float sign, int accumulate)
{
    batched_gemv(M, item, row, x, x_item, y, y_item, batch, rows, cols, sign, accumulate);
}

extern "C" __global__ void __launch_bounds__(THREADS)
batched_gemv_f64(const double* M, long item, int row, const double* x, long x_item, double* y, long y_item,
                 long batch, int rows, int cols, double sign, int accumulate)
{
    batched_gemv(M, item, row, x, x_item, y, y_item, batch, rows, cols, sign, accumulate);
}

// *flag = 1 where any of the n entries of a is not finite (NaN or infinite); flag untouched otherwise
__device__ __forceinline__ double as_double(double v) { return v; }
__device__ __forceinline__ double as_double(float v) { return v; }
__device__ __forceinline__ double as_double(__half v) { return __half2float(v); }

template <typename T>
__device__ void flag_nonfinite(const T* __restrict__ a, long n, int* __restrict__ flag)
{
    for (long i = blockIdx.x * (long)THREADS + threadIdx.x; i < n; i += (long)gridDim.x * THREADS)
        if (!isfinite(as_double(a[i]))) {
            *flag = 1;
            return;
        }
}

extern "C" __global__ void __launch_bounds__(THREADS)
nonfinite_f16(const __half* __restrict__ a, long n, int* __restrict__ flag) { flag_nonfinite(a, n, flag); }

extern "C" __global__ void __launch_bounds__(THREADS)
nonfinite_f32(const float* __restrict__ a, long n, int* __restrict__ flag) { flag_nonfinite(a, n, flag); }

extern "C" __global__ void __launch_bounds__(THREADS)
nonfinite_f64(const double* __restrict__ a, long n, int* __restrict__ flag) { flag_nonfinite(a, n, flag); }
