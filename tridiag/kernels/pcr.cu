// Parallel cyclic reduction for any n (rows outside the system are identity rows), in the
// two thread mappings of Wei et al. 2013:
//   pcr_block_*  one block per system, the block's threads iterate over the system in
//                sections of blockDim rows; the system lives in shared memory
//                (4 arrays a, b, c, d; the _x5 variant stages x in a 5th array).
//   pcr_step_* / pcr_last_*  several blocks per system, one launch per reduction step;
//                each block stages its section of the current a, b, c, d (4 arrays) in
//                shared memory; neighbours outside the section come from global memory.
//                The last step also solves x = d / b (the _x5 variant stages x in shared).
// After ceil(log2 n) steps every row is decoupled.
#include "common.cuh"

#define PCR_ROWS_PER_THREAD 8
#define PCR_BLOCK_THREADS 512  // so one block holds n <= 4096 rows

template <typename T>
__device__ __forceinline__ Row<T> shared_row(const T* s, int n, int i)
{
    if (i < 0 || i >= n) return identity_row<T>();
    Row<T> r;
    r.a = s[i]; r.b = s[n + i]; r.c = s[2 * n + i]; r.d = s[3 * n + i];
    return r;
}

template <typename T, bool X5>
__device__ void pcr_block(const T* __restrict__ a, const T* __restrict__ b, const T* __restrict__ c,
                          const T* __restrict__ d, T* __restrict__ x, int n, long long inner)
{
    extern __shared__ __align__(16) unsigned char smem[];
    T* s = reinterpret_cast<T*>(smem);  // [a | b | c | d | x] each n long
    const long long base = system_base(blockIdx.x, n, inner);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const Row<T> r = load_row(a, b, c, d, base + (long long)i * inner, i, n);
        s[i] = r.a; s[n + i] = r.b; s[2 * n + i] = r.c; s[3 * n + i] = r.d;
    }
    __syncthreads();
    for (int st = 1; st < n; st <<= 1) {
        Row<T> next[PCR_ROWS_PER_THREAD];
#pragma unroll
        for (int q = 0; q < PCR_ROWS_PER_THREAD; ++q) {
            const int i = threadIdx.x + q * blockDim.x;
            if (i < n) next[q] = reduce_row(shared_row(s, n, i - st), shared_row(s, n, i), shared_row(s, n, i + st));
        }
        __syncthreads();
#pragma unroll
        for (int q = 0; q < PCR_ROWS_PER_THREAD; ++q) {
            const int i = threadIdx.x + q * blockDim.x;
            if (i < n) {
                s[i] = next[q].a; s[n + i] = next[q].b; s[2 * n + i] = next[q].c; s[3 * n + i] = next[q].d;
            }
        }
        __syncthreads();
    }
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const T xi = s[3 * n + i] / s[n + i];
        if (X5) s[4 * n + i] = xi;
        else x[base + (long long)i * inner] = xi;
    }
    if (X5) {
        __syncthreads();
        for (int i = threadIdx.x; i < n; i += blockDim.x) x[base + (long long)i * inner] = s[4 * n + i];
    }
}

// Row of element k (row i) of the current arrays: from the block's staged section when
// k lies in it, else from global memory. `first` marks the raw inputs of step one, whose
// a[0] and c[n-1] must read as zero.
template <typename T>
__device__ __forceinline__ Row<T> step_row(const T* a, const T* b, const T* c, const T* d,
                                           const T* s, long long k0, int nsec, long long k, int i, int n)
{
    if (i < 0 || i >= n) return identity_row<T>();
    const long long off = k - k0;
    if (off >= 0 && off < nsec) {
        Row<T> r;
        r.a = s[off]; r.b = s[nsec + off]; r.c = s[2 * nsec + off]; r.d = s[3 * nsec + off];
        return r;
    }
    return load_row(a, b, c, d, k, i, n);
}

// One reduction step with stride st over all elements (threads in storage order, so
// loads are coalesced in every layout). LAST: also x = d / b.
template <typename T, bool LAST, bool X5>
__device__ void pcr_step(const T* __restrict__ a, const T* __restrict__ b, const T* __restrict__ c,
                         const T* __restrict__ d, T* __restrict__ a2, T* __restrict__ b2,
                         T* __restrict__ c2, T* __restrict__ d2, T* __restrict__ x,
                         int n, long long inner, long long total, int st)
{
    extern __shared__ __align__(16) unsigned char smem[];
    T* s = reinterpret_cast<T*>(smem);  // [a | b | c | d | x] each blockDim long
    const int nsec = blockDim.x;
    const long long k0 = (long long)blockIdx.x * nsec;
    const long long k = k0 + threadIdx.x;
    const int i = k < total ? (int)((k / inner) % n) : -1;
    if (i >= 0) {
        const Row<T> r = load_row(a, b, c, d, k, i, n);
        s[threadIdx.x] = r.a; s[nsec + threadIdx.x] = r.b; s[2 * nsec + threadIdx.x] = r.c;
        s[3 * nsec + threadIdx.x] = r.d;
    }
    __syncthreads();
    if (i >= 0) {
        const long long dk = (long long)st * inner;
        const Row<T> r = reduce_row(step_row(a, b, c, d, s, k0, nsec, k - dk, i - st, n),
                                    step_row(a, b, c, d, s, k0, nsec, k, i, n),
                                    step_row(a, b, c, d, s, k0, nsec, k + dk, i + st, n));
        if (!LAST) {
            a2[k] = r.a; b2[k] = r.b; c2[k] = r.c; d2[k] = r.d;
        } else if (X5) {
            s[4 * nsec + threadIdx.x] = r.d / r.b;
        } else {
            x[k] = r.d / r.b;
        }
    }
    if (LAST && X5) {
        __syncthreads();
        if (i >= 0) x[k] = s[4 * nsec + threadIdx.x];
    }
}

#define PCR_BLOCK(T, NAME, X5)                                                                \
    extern "C" __global__ void __launch_bounds__(PCR_BLOCK_THREADS)                           \
    NAME(const T* a, const T* b, const T* c, const T* d, T* x, int n, long long inner)        \
    {                                                                                         \
        pcr_block<T, X5>(a, b, c, d, x, n, inner);                                            \
    }
#define PCR_STEP(T, NAME, LAST, X5)                                                           \
    extern "C" __global__ void NAME(const T* a, const T* b, const T* c, const T* d, T* a2,    \
                                    T* b2, T* c2, T* d2, T* x, int n, long long inner,        \
                                    long long total, int st)                                  \
    {                                                                                         \
        pcr_step<T, LAST, X5>(a, b, c, d, a2, b2, c2, d2, x, n, inner, total, st);            \
    }
PCR_BLOCK(float, pcr_block4_f32, false)
PCR_BLOCK(double, pcr_block4_f64, false)
PCR_BLOCK(float, pcr_block5_f32, true)
PCR_BLOCK(double, pcr_block5_f64, true)
PCR_STEP(float, pcr_step_f32, false, false)
PCR_STEP(double, pcr_step_f64, false, false)
PCR_STEP(float, pcr_last4_f32, true, false)
PCR_STEP(double, pcr_last4_f64, true, false)
PCR_STEP(float, pcr_last5_f32, true, true)
PCR_STEP(double, pcr_last5_f64, true, true)
