// Vanka blocks B_e = R_e A R_e^T of the assembled matrix on a structured box: element
// e's own matrix plus, for each of its (up to 26) neighbours, the entries of the
// neighbour's matrix whose row and column are both unknowns e shares with it.
//
// A       (E, NL, LD) row-major element matrices of type MAT_T (double or float)
// nbr     (E, 26) int32 neighbour of each element at each grid offset, -1 where none
// ia, ja  int32 shared positions of all offsets, concatenated: offset o holds
//         ia[starts[o]:starts[o + 1]] (local unknowns of e) and the same slice of ja
//         (the same unknowns as the neighbour's local unknowns)
// starts  (27,) int32
// out     (last - first, NL, NL) float64 blocks of elements first <= e < last
//
// Compile-time: LD and MAT_T, set by fem3d.kernels.vanka.

#include "element_matrices.cuh"
#define OFFSETS 26

// One block per element. Entries of one offset are distinct, so its threads add
// without atomics; offsets follow each other after a barrier (two offsets may reach the
// same entry).
extern "C" __global__ void __launch_bounds__(256)
vanka_blocks(const MAT_T* __restrict__ A, const int* __restrict__ nbr, const int* __restrict__ ia,
             const int* __restrict__ ja, const int* __restrict__ starts, double* __restrict__ out,
             int first, int last)
{
    const long e = first + blockIdx.x;
    if (e >= last) return;
    double* B = out + (e - first) * (long)(NL * NL);
    const MAT_T* Ae = A + e * (long)(NL * LD);
    for (int t = threadIdx.x; t < NL * NL; t += blockDim.x) B[t] = (double)Ae[(t / NL) * LD + t % NL];
    for (int o = 0; o < OFFSETS; ++o) {
        const int nb = nbr[e * OFFSETS + o];  // the same for the whole block: barriers stay uniform
        if (nb < 0) continue;
        __syncthreads();
        const int s = starts[o], m = starts[o + 1] - s;
        const MAT_T* An = A + nb * (long)(NL * LD);
        for (int t = threadIdx.x; t < m * m; t += blockDim.x) {
            const int p = s + t / m, q = s + t % m;
            B[ia[p] * NL + ia[q]] += (double)An[ja[p] * LD + ja[q]];
        }
    }
}
