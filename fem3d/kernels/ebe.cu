// Element-by-element products y = sum_e C_e^T A_e C_e x (and with A_e^T) from stored
// element matrices, one launch per colour. Elements of one colour share no node, so
// the read-add-write of y needs no atomics and the summation order is fixed.
//
// A      (E, NL, LD) row-major element matrices of type MAT_T (double, or float or __half
//        summed in double); entries beyond column NL of a row are never read
// scale  (E, NL) float32 row scales of __half matrices (ROW_SCALE: the operator is
//        diag(scale_e) A_e), never read otherwise (null then)
// dofs   (E, NL) int32 global unknown of each local unknown
// x, y   global float64 vectors; elements e0 <= e < e1 form the colour
// products  (E, NL) float64 or null: where given, ebe_apply writes each element's product
//        there (row e) instead of adding it to y, for any range of elements (colours or not),
//        and fem3d.kernels.scatter sums the rows into y in a fixed order
//
// Compile-time: LD (row length in entries), MAT_T and ROW_SCALE, set by fem3d.kernels.ebe.

#include "element_matrices.cuh"
#define WARPS 4

// One block of WARPS warps per element; warp w takes rows w, w + WARPS, ...; lane l
// reads columns l, l + 32, ... of a row, so a warp reads the row coalesced. The row sums,
// times the row scales, go to shared memory and are added to y together at the end, so
// no warp waits on a read of y inside the loop (or go to the element's row of products).
#define SPANS ((NL + 31) / 32)  // 32-column spans of a row
extern "C" __global__ void __launch_bounds__(32 * WARPS)
ebe_apply(const MAT_T* __restrict__ A, const float* __restrict__ scale, const int* __restrict__ dofs,
          const double* __restrict__ x, double* __restrict__ y, int e0, int e1, double* __restrict__ products)
{
    __shared__ double xs[32 * SPANS];
    __shared__ double ys[NL];
    __shared__ int ds[NL];
    const long e = e0 + blockIdx.x;
    if (e >= e1) return;
    for (int t = threadIdx.x; t < 32 * SPANS; t += blockDim.x) {
        if (t < NL) ds[t] = dofs[e * NL + t];
        xs[t] = t < NL ? x[dofs[e * NL + t]] : 0.0;
    }
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    double xl[SPANS];
    int cl[SPANS];
#pragma unroll
    for (int c = 0; c < SPANS; ++c) {
        xl[c] = xs[lane + 32 * c];
        cl[c] = lane + 32 * c < NL ? lane + 32 * c : NL - 1;  // lanes past the last column reread it, times 0
    }
    const MAT_T* Ae = A + e * (long)(NL * LD);
#pragma unroll 2
    for (int row = warp; row < NL; row += WARPS) {
        const MAT_T* Ar = Ae + row * LD;
        double s = mat_entry(Ar[cl[0]]) * xl[0];
#pragma unroll
        for (int c = 1; c < SPANS; ++c) s += mat_entry(Ar[cl[c]]) * xl[c];
        for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
        if (lane == 0) ys[row] = s * row_scale(scale, e * NL + row);
    }
    __syncthreads();
    if (products) {
        for (int t = threadIdx.x; t < NL; t += blockDim.x) products[e * NL + t] = ys[t];
    } else {
        for (int t = threadIdx.x; t < NL; t += blockDim.x) y[ds[t]] += ys[t];
    }
}

// Transposed product: thread j accumulates column j over the rows; at each row the
// block reads the row's NL entries coalesced. (diag(s) A)^T x = A^T (s x): the local
// values are scaled by the row scales as they are loaded.
extern "C" __global__ void __launch_bounds__(96)
ebe_apply_t(const MAT_T* __restrict__ A, const float* __restrict__ scale, const int* __restrict__ dofs,
            const double* __restrict__ x, double* __restrict__ y, int e0, int e1)
{
    __shared__ double xs[NL];
    const long e = e0 + blockIdx.x;
    if (e >= e1) return;
    const int j = threadIdx.x;
    int g = 0;
    if (j < NL) {
        g = dofs[e * NL + j];
        xs[j] = x[g] * row_scale(scale, e * NL + j);
    }
    __syncthreads();
    if (j >= NL) return;
    const MAT_T* Ae = A + e * (long)(NL * LD) + j;
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    int i = 0;
    for (; i + 3 < NL; i += 4) {
        s0 += mat_entry(Ae[i * LD]) * xs[i];
        s1 += mat_entry(Ae[(i + 1) * LD]) * xs[i + 1];
        s2 += mat_entry(Ae[(i + 2) * LD]) * xs[i + 2];
        s3 += mat_entry(Ae[(i + 3) * LD]) * xs[i + 3];
    }
    for (; i < NL; ++i) s0 += mat_entry(Ae[i * LD]) * xs[i];
    y[g] += (s0 + s1) + (s2 + s3);
}
