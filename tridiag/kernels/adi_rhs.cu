// The element-wise passes of an ADI sweep (adi_rhs.py) on a (rows, cols) row-major field:
//   laplacian = 1: value = coef1 (lo1 - 2 v + hi1) + coef0 (lo0 - 2 v + hi0) + coef_source f at
//                  interior nodes that are not fixed, 0 elsewhere (lo0, hi0: neighbours along
//                  axis 0; lo1, hi1: along axis 1); the adi_pass_masked kernels read the fixed
//                  mask and the source f (either may be null: none), the adi_pass kernels have
//                  neither (the box edge only);
//   laplacian = 0: value = v;
// then out = value (accumulate = 0) or out += value (accumulate = 1), with out (rows, cols),
// or (cols, rows) when transposed. A 32 x 32 tile with a one-node halo is staged in shared
// memory, so that reads and (transposed) writes are coalesced. Compiled with --fmad=false:
// the same roundings as the NumPy reference.
#define RHS_TILE 32
#define RHS_ROWS 8  // blockDim.y; blockDim.x = RHS_TILE

template <typename T, bool MASKED>
__device__ void adi_pass(const T* __restrict__ src, T* __restrict__ out, int rows, int cols, T coef0, T coef1,
                         int laplacian, int accumulate, int transpose, const unsigned char* __restrict__ fixed,
                         const T* __restrict__ source, T coef_source)
{
    __shared__ T tile[RHS_TILE + 2][RHS_TILE + 3];
    const int r0 = blockIdx.y * RHS_TILE, c0 = blockIdx.x * RHS_TILE;
    for (int r = threadIdx.y; r < RHS_TILE + 2; r += RHS_ROWS) {
        for (int c = threadIdx.x; c < RHS_TILE + 2; c += RHS_TILE) {
            const int gr = r0 + r - 1, gc = c0 + c - 1;
            tile[r][c] = (gr >= 0 && gr < rows && gc >= 0 && gc < cols) ? src[(long long)gr * cols + gc] : T(0);
        }
    }
    __syncthreads();
    for (int k = threadIdx.y; k < RHS_TILE; k += RHS_ROWS) {
        const int lr = transpose ? threadIdx.x : k;  // consecutive threads write consecutive outputs
        const int lc = transpose ? k : threadIdx.x;
        const int gr = r0 + lr, gc = c0 + lc;
        if (gr >= rows || gc >= cols) continue;
        const long long g = (long long)gr * cols + gc;
        T v = tile[lr + 1][lc + 1];
        if (laplacian) {
            const bool inside = gr > 0 && gr < rows - 1 && gc > 0 && gc < cols - 1 && !(MASKED && fixed && fixed[g]);
            v = inside ? coef1 * (tile[lr + 1][lc] - T(2) * v + tile[lr + 1][lc + 2])
                             + coef0 * (tile[lr][lc + 1] - T(2) * v + tile[lr + 2][lc + 1])
                             + (MASKED && source ? coef_source * source[g] : T(0))
                       : T(0);
        }
        const long long o = transpose ? (long long)gc * rows + gr : g;
        out[o] = accumulate ? out[o] + v : v;
    }
}

#define ADI_PASS(T, NAME, MASKED)                                                                         \
    extern "C" __global__ void __launch_bounds__(RHS_TILE * RHS_ROWS)                                     \
        NAME(const T* src, T* out, int rows, int cols, T coef0, T coef1, int laplacian, int accumulate,   \
             int transpose, const unsigned char* fixed, const T* source, T coef_source)                  \
    {                                                                                                     \
        adi_pass<T, MASKED>(src, out, rows, cols, coef0, coef1, laplacian, accumulate, transpose, fixed, \
                            source, coef_source);                                                         \
    }
ADI_PASS(float, adi_pass_f32, false)
ADI_PASS(double, adi_pass_f64, false)
ADI_PASS(float, adi_pass_masked_f32, true)
ADI_PASS(double, adi_pass_masked_f64, true)
