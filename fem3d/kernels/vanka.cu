// Vanka blocks B_e = R_e A R_e^T of the assembled matrix, summed from element matrices given
// in chunks: a chunk's element f adds its whole matrix to B_f and, to each neighbour e's
// block, the entries whose row and column are both unknowns e shares with f.
//
// A        (m, NL, LD) row-major element matrices of the chunk, of type MAT_T (double or float)
// slot     (E,) int32 the chunk's row of each element, -1 for elements not in the chunk
// targets  (T,) int32 the elements whose blocks are summed
// nbr      (E, K) int32 neighbours of each element, -1 where none
// pattern  (E, K) int32 how each neighbour meets the element: pattern p holds the shared
//          positions ia[starts[p]:starts[p + 1]] (local unknowns of e) and the same slice
//          of ja (the same unknowns as the neighbour's local unknowns)
// starts   (P + 1,) int32
// out      (T, NL, NL) blocks of the targets, of type OUT_T (float or double), added to
//
// and their inverses (vanka_invert): blocks (B, n, n) row-major MAT_T, n <= 16 * TILES.
//
// Compile-time: LD, MAT_T and OUT_T, set by fem3d.kernels.vanka.

#include "element_matrices.cuh"
#ifdef ROW_SCALE
#error "vanka.cu reads double or float matrices: __half rows would need their scales"
#endif
#ifndef OUT_T
#define OUT_T double
#endif

// One thread block per target element e, which adds the chunk's contributions to B_e in a fixed
// order (its own matrix, then its neighbours in table order): the sums are the same bits in
// every run. Entries of one neighbour are distinct, so its threads add without atomics;
// neighbours follow each other after a barrier (two may reach the same entry).
extern "C" __global__ void __launch_bounds__(256)
vanka_accumulate(const MAT_T* __restrict__ A, const int* __restrict__ slot, const int* __restrict__ targets,
                 const int* __restrict__ nbr, const int* __restrict__ pattern, const int* __restrict__ ia,
                 const int* __restrict__ ja, const int* __restrict__ starts, OUT_T* __restrict__ out, int K)
{
    const long e = targets[blockIdx.x];
    OUT_T* B = out + blockIdx.x * (long)(NL * NL);
    const int own = slot[e];
    if (own >= 0) {
        const MAT_T* Ae = A + own * (long)(NL * LD);
        for (int t = threadIdx.x; t < NL * NL; t += blockDim.x) B[t] += (OUT_T)mat_entry(Ae[(t / NL) * LD + t % NL]);
    }
    for (int o = 0; o < K; ++o) {
        const int nb = nbr[e * K + o];  // the same for the whole block: barriers stay uniform
        if (nb < 0) continue;
        const int s = slot[nb];
        if (s < 0) continue;
        __syncthreads();
        const int pat = pattern[e * K + o];
        const int p0 = starts[pat], m = starts[pat + 1] - p0;
        const MAT_T* An = A + s * (long)(NL * LD);
        for (int t = threadIdx.x; t < m * m; t += blockDim.x) {
            const int p = p0 + t / m, q = p0 + t % m;
            B[ia[p] * NL + ia[q]] += (OUT_T)mat_entry(An[ja[p] * LD + ja[q]]);
        }
    }
}

#define TILES 6  // vanka_invert: each thread holds TILES x TILES entries, so n <= 16 * TILES (96)

// Inverse of each matrix A of ``in`` into ``out``: inv(A) = inv(C)^T, C = A^T, by Gauss-Jordan
// elimination of C with partial pivoting (so pivoting over A's columns), in MAT_T. One block
// of 256 threads per matrix, a 16 x 16 grid: thread (tx, ty) holds in registers the entries
// (ty + 16 a, tx + 16 b) of C (read along A's rows, so coalesced). Rows are never swapped:
// step k pivots on the unused row r_k of largest |C[r_k][k]| (the first on ties; a NaN counts
// as zero, so that a row is always chosen), scales it and eliminates column k from every
// other row, in place; after the n steps, C's entry (i, c) is inv(A)[r_c][k] for the step k
// with r_k = i. Column k lies in one
// half-warp (tx = k % 16), which finds the pivot by shuffles; two barriers per step, the
// pivot column and row in shared memory alternating between two buffers so that the next
// step's pivot search overlaps this step's updates. A zero pivot (singular matrix) gives
// 1 / 0 and so non-finite entries, which later steps keep non-finite. Registers: 64 for float
// (four blocks per multiprocessor), 126 for double (two), no spills (ptxas, sm_90).
extern "C" __global__ void __launch_bounds__(256, sizeof(MAT_T) == 4 ? 4 : 2)
vanka_invert(const MAT_T* __restrict__ in, MAT_T* __restrict__ out, int n)
{
    __shared__ MAT_T col_s[2][16 * TILES], row_s[2][16 * TILES];  // step k's pivot column and scaled pivot row, at k % 2
    __shared__ int piv_s[16 * TILES], step_s[16 * TILES];  // r_k by step k; the step whose pivot row is row i
    const int tx = threadIdx.x >> 4, ty = threadIdx.x & 15;
    const long base = blockIdx.x * (long)n * n;
    MAT_T c[TILES][TILES];  // c[a][b] = C[ty + 16 a][tx + 16 b]; 0 outside n x n
    unsigned used = 0;      // bit a: row ty + 16 a was a pivot row, or is past n
#pragma unroll
    for (int a = 0; a < TILES; ++a) {
        const int i = ty + 16 * a;
        if (i >= n) used |= 1u << a;
#pragma unroll
        for (int b = 0; b < TILES; ++b) {
            const int j = tx + 16 * b;
            c[a][b] = (i < n && j < n) ? in[base + (long)j * n + i] : (MAT_T)0;
        }
    }
    for (int k = 0; k < n; ++k) {
        const int s = k & 1, kb = k >> 4, kx = k & 15;
        if (threadIdx.x >> 5 == kx >> 1) {  // the warp holding column k; its other half-warp reduces alongside
            MAT_T best = -1;
            int arg = 16 * TILES;
#pragma unroll
            for (int a = 0; a < TILES; ++a) {
                MAT_T x = c[a][0];
#pragma unroll
                for (int b = 1; b < TILES; ++b)
                    if (b == kb) x = c[a][b];
                if (tx == kx) col_s[s][ty + 16 * a] = x;
                MAT_T v = fabs(x);
                v = (v == v) ? v : (MAT_T)0;
                if (!(used >> a & 1u) && v > best) {
                    best = v;
                    arg = ty + 16 * a;
                }
            }
#pragma unroll
            for (int o = 8; o > 0; o >>= 1) {  // within each half-warp: the largest, then the lowest row
                const MAT_T ob = __shfl_xor_sync(0xffffffffu, best, o);
                const int oa = __shfl_xor_sync(0xffffffffu, arg, o);
                if (ob > best || (ob == best && oa < arg)) {
                    best = ob;
                    arg = oa;
                }
            }
            if (tx == kx) {  // column k, saved in col_s, becomes the unit vector of row r_k
#pragma unroll
                for (int a = 0; a < TILES; ++a)
#pragma unroll
                    for (int b = 0; b < TILES; ++b)
                        if (b == kb) c[a][b] = ty + 16 * a == arg ? (MAT_T)1 : (MAT_T)0;
                if (ty == 0) {
                    piv_s[k] = arg;
                    step_s[arg] = k;
                }
            }
        }
        __syncthreads();
        const int r = piv_s[k], ra = r >> 4;
        if (ty == (r & 15)) {  // the threads holding row r_k: row_s = C[r_k] / p (1 / p in column k)
            const MAT_T inv_p = (MAT_T)1 / col_s[s][r];
#pragma unroll
            for (int b = 0; b < TILES; ++b) {
                MAT_T y = c[0][b];
#pragma unroll
                for (int a = 1; a < TILES; ++a)
                    if (a == ra) y = c[a][b];
                row_s[s][tx + 16 * b] = y * inv_p;
            }
            used |= 1u << ra;
        }
        __syncthreads();
#pragma unroll
        for (int a = 0; a < TILES; ++a) {  // C[i] -= C[i][k] row_s for i != r_k (column k: -C[i][k] / p), C[r_k] = row_s
            const MAT_T f = col_s[s][ty + 16 * a];
            const bool pivot_row = ty + 16 * a == r;
#pragma unroll
            for (int b = 0; b < TILES; ++b) {
                const MAT_T p = row_s[s][tx + 16 * b];
                c[a][b] = pivot_row ? p : c[a][b] - f * p;
            }
        }
    }
#pragma unroll
    for (int a = 0; a < TILES; ++a) {
        const int i = ty + 16 * a;
        if (i < n) {
            const int k = step_s[i];
#pragma unroll
            for (int b = 0; b < TILES; ++b) {
                const int j = tx + 16 * b;
                if (j < n) out[base + (long)piv_s[j] * n + k] = c[a][b];
            }
        }
    }
}
