// The hybrid solver: a partition method with one thread per chunk of M consecutive rows
// (Thomas-like sweeps in registers) and parallel cyclic reduction on the reduced system.
//
// Chunk j holds rows j*M .. j*M+m-1 (m <= M; the last chunk may be shorter). With
// xl = last unknown of chunk j-1 and xr = last unknown of chunk j, a forward sweep and a
// backward sweep over rows 0..m-2 give x_k = D_k - A_k xl - C_k xr. Putting rows m-2 (own
// chunk) and 0 (next chunk, "F") into row m-1 leaves one reduced equation per chunk in
// its last unknown: a tridiagonal system of J = ceil(n / M) rows. Once it is solved,
// every row follows from the same relations.
//
//   hybrid_onchip<M>_*  one block per system (thread j = chunk j, J <= blockDim):
//       rows are staged G at a time per chunk through shared memory with cp.async
//       (coalesced), the relations stay in registers, the reduced system is solved by
//       PCR in shared memory, x goes out through the staging buffer (coalesced).
//   hybrid_reduce<M>_* / hybrid_expand<M>_*  one thread per (system, chunk) over
//       the whole grid, threads in storage order (coalesced for interleaved systems):
//       reduce writes each chunk's F relation and its own part of the reduced row; the
//       caller completes the reduced rows and solves them; expand redoes the sweeps and
//       writes x. Any n, any layout.
#include "common.cuh"

#define PART_GROUP 8  // rows of each chunk staged per step (M is a multiple of it)

template <typename T>
__device__ __forceinline__ void copy_async(T* dst_shared, const T* src_global)
{
    const unsigned dst = (unsigned)__cvta_generic_to_shared(dst_shared);
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(dst), "l"(src_global), "n"(sizeof(T)));
}

__device__ __forceinline__ void copy_async_wait()
{
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
}

template <typename T, int M>
struct Chunk {
    T D[M], A[M], C[M];  // rows k < m-1: x_k = D_k - A_k xl - C_k xr
    T FD, FA, FC;        // row 0 (the first row) in that form
    T PD, PA, PC;        // row m-2 in that form (m = 1: it is xl itself)
    Row<T> last;         // row m-1
    int m;
};

template <typename T, int M>
__device__ __forceinline__ void chunk_begin(Chunk<T, M>& ch, int m)
{
    ch.m = m;
    ch.PD = T(0); ch.PA = T(-1); ch.PC = T(0);
    ch.last = identity_row<T>();
}

// Forward sweep step for row k < m (k must be a compile-time constant after unrolling).
// Rows are told apart by inequalities only: nvcc 13.0 compiled `k == m - 1` with the clamped
// row count m = max(0, min(M, n - j M)) as if m were unclamped (seen in the PTX), so no `==` here.
template <typename T, int M>
__device__ __forceinline__ void chunk_row(Chunk<T, M>& ch, int k, const Row<T>& r)
{
    if (k < ch.m - 1) {
        if (k == 0) {
            const T inv = T(1) / r.b;
            ch.D[0] = r.d * inv; ch.A[0] = r.a * inv; ch.C[0] = r.c * inv;
        } else {
            const int p = k > 0 ? k - 1 : 0;
            const T inv = T(1) / (r.b - r.a * ch.C[p]);
            ch.D[k] = (r.d - r.a * ch.D[p]) * inv;
            ch.A[k] = -r.a * ch.A[p] * inv;
            ch.C[k] = r.c * inv;
        }
        if (k + 2 >= ch.m) { ch.PD = ch.D[k]; ch.PA = ch.A[k]; ch.PC = ch.C[k]; }  // row m-2
    } else {
        ch.last = r;  // row m-1
    }
}

// Backward sweep: rows k < m-2 in terms of xl and xr; then the F relation.
template <typename T, int M>
__device__ __forceinline__ void chunk_finish(Chunk<T, M>& ch)
{
#pragma unroll
    for (int k = M - 3; k >= 0; --k) {
        if (k <= ch.m - 3) {
            ch.D[k] -= ch.C[k] * ch.D[k + 1];
            ch.A[k] -= ch.C[k] * ch.A[k + 1];
            ch.C[k] = -ch.C[k] * ch.C[k + 1];
        }
    }
    if (ch.m >= 2) { ch.FD = ch.D[0]; ch.FA = ch.A[0]; ch.FC = ch.C[0]; }
    else { ch.FD = T(0); ch.FA = T(0); ch.FC = T(-1); }  // one row: it is xr itself
}

template <typename T, int M>
__device__ __forceinline__ T chunk_x(const Chunk<T, M>& ch, int k, T xl, T xr)
{
    return k < ch.m - 1 ? ch.D[k] - ch.A[k] * xl - ch.C[k] * xr : xr;
}

// The reduced row of the chunk, given the next chunk's F relation (fd, fa, fc).
template <typename T, int M>
__device__ __forceinline__ Row<T> chunk_reduced(const Chunk<T, M>& ch, T fd, T fa, T fc)
{
    const Row<T>& l = ch.last;
    Row<T> r;
    r.a = -l.a * ch.PA;
    r.b = l.b - l.a * ch.PC - l.c * fa;
    r.c = -l.c * fc;
    r.d = l.d - l.a * ch.PD - l.c * fd;
    return r;
}

template <typename T, int M>
__device__ void hybrid_onchip(const T* __restrict__ a, const T* __restrict__ b, const T* __restrict__ c,
                                 const T* __restrict__ d, T* __restrict__ x, int n, long long inner)
{
    constexpr int G = PART_GROUP, GP = G + 1;  // padded: lanes read rows GP apart, no bank conflicts
    extern __shared__ __align__(16) unsigned char smem[];
    const int nt = blockDim.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32, j = threadIdx.x;
    T* stage = reinterpret_cast<T*>(smem) + warp * (4 * 32 * GP);  // per warp [4][32][GP]
    T* red = reinterpret_cast<T*>(smem) + (nt / 32) * (4 * 32 * GP);  // [4][nt] reduced rows
    T* F = red + 4 * nt;                                                // [3][nt] F relations
    T* L = F + 3 * nt;                                                  // [nt] reduced solution
    const long long base = system_base(blockIdx.x, n, inner);
    const T* src[4] = {a, b, c, d};

    Chunk<T, M> ch;
    chunk_begin(ch, max(0, min(M, n - j * M)));
#pragma unroll
    for (int q = 0; q < M / G; ++q) {
#pragma unroll
        for (int u = 0; u < G; ++u) {
            const int p = lane + 32 * u, cj = p / G, g = p % G;
            const int row = (warp * 32 + cj) * M + q * G + g;
            if (row < n) {
                const long long k = base + (long long)row * inner;
#pragma unroll
                for (int v = 0; v < 4; ++v) copy_async(&stage[(v * 32 + cj) * GP + g], src[v] + k);
            }
        }
        copy_async_wait();
        __syncwarp();
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const int k = q * G + g, row = j * M + k;
            if (k < ch.m) {
                Row<T> r;
                r.a = row > 0 ? stage[lane * GP + g] : T(0);
                r.b = stage[(32 + lane) * GP + g];
                r.c = row < n - 1 ? stage[(64 + lane) * GP + g] : T(0);
                r.d = stage[(96 + lane) * GP + g];
                chunk_row(ch, k, r);
            }
        }
        __syncwarp();
    }
    chunk_finish(ch);

    F[j] = ch.FD; F[nt + j] = ch.FA; F[2 * nt + j] = ch.FC;
    __syncthreads();
    Row<T> me = identity_row<T>();
    if (ch.m > 0) {
        const bool next = j + 1 < nt;
        me = chunk_reduced(ch, next ? F[j + 1] : T(0), next ? F[nt + j + 1] : T(0), next ? F[2 * nt + j + 1] : T(0));
    }
    me = pcr_rows(me, red, nt, j);
    L[j] = me.d / me.b;
    __syncthreads();
    const T xl = j > 0 ? L[j - 1] : T(0), xr = L[j];

#pragma unroll
    for (int q = 0; q < M / G; ++q) {
#pragma unroll
        for (int g = 0; g < G; ++g) stage[lane * GP + g] = chunk_x(ch, q * G + g, xl, xr);
        __syncwarp();
#pragma unroll
        for (int u = 0; u < G; ++u) {
            const int p = lane + 32 * u, cj = p / G, g = p % G;
            const int row = (warp * 32 + cj) * M + q * G + g;
            if (row < n) x[base + (long long)row * inner] = stage[cj * GP + g];
        }
        __syncwarp();
    }
}

// Thread g of the (outer, J, inner) grid of chunks, in storage order.
struct ChunkIndex {
    long long base;  // first element of the system
    int j;           // chunk
};

__device__ __forceinline__ ChunkIndex chunk_index(long long g, int n, long long inner, int nchunks)
{
    const long long i = g % inner, t = g / inner;
    ChunkIndex ci;
    ci.j = (int)(t % nchunks);
    ci.base = system_base((t / nchunks) * inner + i, n, inner);
    return ci;
}

template <typename T, int M>
__device__ __forceinline__ void chunk_from_global(Chunk<T, M>& ch, const T* a, const T* b, const T* c,
                                                  const T* d, const ChunkIndex& ci, long long inner, int n)
{
    chunk_begin(ch, max(0, min(M, n - ci.j * M)));
#pragma unroll
    for (int k = 0; k < M; ++k) {
        const int row = ci.j * M + k;
        if (k < ch.m) chunk_row(ch, k, load_row(a, b, c, d, ci.base + (long long)row * inner, row, n));
    }
    chunk_finish(ch);
}

// red: [7][total] = F (d, a, c), reduced row without the next chunk (a, b, d), last row's c.
template <typename T, int M>
__device__ void hybrid_reduce(const T* __restrict__ a, const T* __restrict__ b, const T* __restrict__ c,
                                 const T* __restrict__ d, T* __restrict__ red, int n, long long inner,
                                 int nchunks, long long total)
{
    const long long g = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (g >= total) return;
    Chunk<T, M> ch;
    chunk_from_global(ch, a, b, c, d, chunk_index(g, n, inner, nchunks), inner, n);
    const Row<T> own = chunk_reduced(ch, T(0), T(0), T(0));
    red[g] = ch.FD; red[total + g] = ch.FA; red[2 * total + g] = ch.FC;
    red[3 * total + g] = own.a; red[4 * total + g] = own.b; red[5 * total + g] = own.d;
    red[6 * total + g] = ch.last.c;
}

// l: (outer, J, inner) solution of the reduced systems.
template <typename T, int M>
__device__ void hybrid_expand(const T* __restrict__ a, const T* __restrict__ b, const T* __restrict__ c,
                                 const T* __restrict__ d, const T* __restrict__ l, T* __restrict__ x,
                                 int n, long long inner, int nchunks, long long total)
{
    const long long g = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (g >= total) return;
    const ChunkIndex ci = chunk_index(g, n, inner, nchunks);
    Chunk<T, M> ch;
    chunk_from_global(ch, a, b, c, d, ci, inner, n);
    const T xl = ci.j > 0 ? l[g - inner] : T(0), xr = l[g];
#pragma unroll
    for (int k = 0; k < M; ++k)
        if (k < ch.m) x[ci.base + (long long)(ci.j * M + k) * inner] = chunk_x(ch, k, xl, xr);
}

#define HYBRID_ONCHIP(T, M, THREADS, NAME)                                                 \
    extern "C" __global__ void __launch_bounds__(THREADS)                                     \
    NAME(const T* a, const T* b, const T* c, const T* d, T* x, int n, long long inner)        \
    {                                                                                         \
        hybrid_onchip<T, M>(a, b, c, d, x, n, inner);                                      \
    }
#define HYBRID_GRID(T, M, NAME_R, NAME_E)                                                  \
    extern "C" __global__ void __launch_bounds__(256)                                         \
    NAME_R(const T* a, const T* b, const T* c, const T* d, T* red, int n, long long inner,    \
           int nchunks, long long total)                                                      \
    {                                                                                         \
        hybrid_reduce<T, M>(a, b, c, d, red, n, inner, nchunks, total);                    \
    }                                                                                         \
    extern "C" __global__ void __launch_bounds__(256)                                         \
    NAME_E(const T* a, const T* b, const T* c, const T* d, const T* l, T* x, int n,           \
           long long inner, int nchunks, long long total)                                     \
    {                                                                                         \
        hybrid_expand<T, M>(a, b, c, d, l, x, n, inner, nchunks, total);                   \
    }
// Threads per block cap: registers hold 3M relation values per thread.
HYBRID_ONCHIP(float, 8, 512, hybrid_onchip8_f32)
HYBRID_ONCHIP(double, 8, 512, hybrid_onchip8_f64)
HYBRID_ONCHIP(float, 16, 512, hybrid_onchip16_f32)
HYBRID_ONCHIP(double, 16, 512, hybrid_onchip16_f64)
HYBRID_ONCHIP(float, 32, 512, hybrid_onchip32_f32)
HYBRID_ONCHIP(double, 32, 256, hybrid_onchip32_f64)
HYBRID_GRID(float, 8, hybrid_reduce8_f32, hybrid_expand8_f32)
HYBRID_GRID(double, 8, hybrid_reduce8_f64, hybrid_expand8_f64)
HYBRID_GRID(float, 16, hybrid_reduce16_f32, hybrid_expand16_f32)
HYBRID_GRID(double, 16, hybrid_reduce16_f64, hybrid_expand16_f64)
