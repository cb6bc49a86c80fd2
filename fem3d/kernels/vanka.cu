// Vanka blocks B_e = R_e A R_e^T of the assembled matrix: element e's own matrix plus,
// for each of its neighbours, the entries of the neighbour's matrix whose row and column
// are both unknowns e shares with it.
//
// A        (E, NL, LD) row-major element matrices of type MAT_T (double or float)
// nbr      (E, K) int32 neighbours of each element, -1 where none
// pattern  (E, K) int32 how each neighbour meets the element: pattern p holds the shared
//          positions ia[starts[p]:starts[p + 1]] (local unknowns of e) and the same slice
//          of ja (the same unknowns as the neighbour's local unknowns)
// starts   (P + 1,) int32
// out      (last - first, NL, NL) float64 blocks of elements first <= e < last
//
// Compile-time: LD and MAT_T, set by fem3d.kernels.vanka.

#include "element_matrices.cuh"

// One block per element. Entries of one neighbour are distinct, so its threads add
// without atomics; neighbours follow each other after a barrier (two may reach the same
// entry).
extern "C" __global__ void __launch_bounds__(256)
vanka_blocks(const MAT_T* __restrict__ A, const int* __restrict__ nbr, const int* __restrict__ pattern,
             const int* __restrict__ ia, const int* __restrict__ ja, const int* __restrict__ starts,
             double* __restrict__ out, int first, int last, int K)
{
    const long e = first + blockIdx.x;
    if (e >= last) return;
    double* B = out + (e - first) * (long)(NL * NL);
    const MAT_T* Ae = A + e * (long)(NL * LD);
    for (int t = threadIdx.x; t < NL * NL; t += blockDim.x) B[t] = (double)Ae[(t / NL) * LD + t % NL];
    for (int o = 0; o < K; ++o) {
        const int nb = nbr[e * K + o];  // the same for the whole block: barriers stay uniform
        if (nb < 0) continue;
        __syncthreads();
        const int pat = pattern[e * K + o];
        const int s = starts[pat], m = starts[pat + 1] - s;
        const MAT_T* An = A + nb * (long)(NL * LD);
        for (int t = threadIdx.x; t < m * m; t += blockDim.x) {
            const int p = s + t / m, q = s + t % m;
            B[ia[p] * NL + ia[q]] += (double)An[ja[p] * LD + ja[q]];
        }
    }
}
