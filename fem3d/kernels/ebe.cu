// Element-by-element products y = sum_e C_e^T A_e C_e x (and with A_e^T) from stored
// element matrices, one launch per colour. Elements of one colour share no node, so
// the read-add-write of y needs no atomics and the summation order is fixed.
//
// A     (E, NL, LD) row-major element matrices, rows padded with zeros to LD columns
// dofs  (E, NL) int32 global unknown of each local unknown
// x, y  global vectors; elements e0 <= e < e1 form the colour

#define NL 89
#define LD 96
#define WARPS 4

// One block of WARPS warps per element; warp w takes rows w, w + WARPS, ...; each lane
// reads three consecutive-in-row entries so that a warp reads a whole row coalesced.
extern "C" __global__ void __launch_bounds__(32 * WARPS)
ebe_apply(const double* __restrict__ A, const int* __restrict__ dofs,
          const double* __restrict__ x, double* __restrict__ y, int e0, int e1)
{
    __shared__ double xs[LD];
    __shared__ int ds[NL];
    const long e = e0 + blockIdx.x;
    if (e >= e1) return;
    for (int t = threadIdx.x; t < LD; t += blockDim.x) {
        if (t < NL) {
            const int g = dofs[e * NL + t];
            ds[t] = g;
            xs[t] = x[g];
        } else {
            xs[t] = 0.0;
        }
    }
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const double* Ae = A + e * (long)(NL * LD);
    for (int row = warp; row < NL; row += WARPS) {
        const double* Ar = Ae + row * LD;
        double s = Ar[lane] * xs[lane] + Ar[lane + 32] * xs[lane + 32] + Ar[lane + 64] * xs[lane + 64];
        for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
        if (lane == 0) y[ds[row]] += s;
    }
}

// Transposed product: thread j accumulates column j over the rows; at each row the
// block reads the row's LD entries coalesced.
extern "C" __global__ void __launch_bounds__(LD)
ebe_apply_t(const double* __restrict__ A, const int* __restrict__ dofs,
            const double* __restrict__ x, double* __restrict__ y, int e0, int e1)
{
    __shared__ double xs[NL];
    const long e = e0 + blockIdx.x;
    if (e >= e1) return;
    const int j = threadIdx.x;
    int g = -1;
    if (j < NL) {
        g = dofs[e * NL + j];
        xs[j] = x[g];
    }
    __syncthreads();
    const double* Ae = A + e * (long)(NL * LD) + j;
    double s0 = 0.0, s1 = 0.0;
    int i = 0;
    for (; i + 1 < NL; i += 2) {
        s0 += Ae[i * LD] * xs[i];
        s1 += Ae[(i + 1) * LD] * xs[i + 1];
    }
    s0 += Ae[i * LD] * xs[i];  // NL is odd: the last row
    if (j < NL) y[g] += s0 + s1;
}
