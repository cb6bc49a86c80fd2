// Checkerboard Thomas (Zolfaghari & Foadaddini 2016/2018), one block per system.
// The system is cut into nop = ceil(n / dop) pieces of dop rows. One iteration solves
// the even pieces (0, 2, 4, ...) by Thomas with their end couplings moved to the right-hand
// side using the neighbouring pieces' current values, then the odd pieces with the fresh
// values. A system stops when max|x_new - x_old| <= tol * max|x_new| over one iteration
// (converged), when that update is not finite (diverged), or after maxiter iterations.
// iters[s] = iterations done, negated when the system did not converge.
// SHARED: c' and d' of each piece sit in shared memory ([row][thread], no bank conflicts;
// needs dop <= CB_MAX_DOP); otherwise in the global scratch arrays (storage of the inputs).
#include "common.cuh"

#define CB_THREADS 128
#define CB_MAX_DOP 32

template <typename T, bool SHARED>
__device__ void checkerboard(const T* __restrict__ a, const T* __restrict__ b, const T* __restrict__ c,
                             const T* __restrict__ d, T* __restrict__ x, T* __restrict__ gcp,
                             T* __restrict__ gdp, int* __restrict__ iters, int n, long long inner,
                             int dop, T tol, int maxiter)
{
    extern __shared__ __align__(16) unsigned char smem[];
    T* red = reinterpret_cast<T*>(smem);  // [2][blockDim]: max update, max |x|
    T* scp = red + 2 * blockDim.x;        // [dop][blockDim] when SHARED
    T* sdp = scp + dop * blockDim.x;
    const long long base = system_base(blockIdx.x, n, inner);
    const int nop = (n + dop - 1) / dop;
    auto at = [&](int i) { return base + (long long)i * inner; };
    auto cpref = [&](int k, int i) -> T& { return SHARED ? scp[k * blockDim.x + threadIdx.x] : gcp[at(i)]; };
    auto dpref = [&](int k, int i) -> T& { return SHARED ? sdp[k * blockDim.x + threadIdx.x] : gdp[at(i)]; };
    int it = 0;
    bool converged = false;
    while (it < maxiter) {
        T du = T(0), xmax = T(0);
        for (int colour = 0; colour < 2; ++colour) {
            for (int p = 2 * threadIdx.x + colour; p < nop; p += 2 * blockDim.x) {
                const int r0 = p * dop, m = min(dop, n - r0);
                const T xl = r0 > 0 ? x[at(r0 - 1)] : T(0);
                const T xr = r0 + m < n ? x[at(r0 + m)] : T(0);
                T cprev = T(0), dprev = T(0);
                for (int k = 0; k < m; ++k) {
                    Row<T> r = load_row(a, b, c, d, at(r0 + k), r0 + k, n);
                    if (k == 0) { r.d -= r.a * xl; r.a = T(0); }
                    if (k == m - 1) { r.d -= r.c * xr; r.c = T(0); }
                    const T inv = T(1) / (r.b - r.a * cprev);
                    cprev = r.c * inv;
                    dprev = (r.d - r.a * dprev) * inv;
                    cpref(k, r0 + k) = cprev;
                    dpref(k, r0 + k) = dprev;
                }
                T xn = T(0);
                for (int k = m - 1; k >= 0; --k) {
                    xn = dpref(k, r0 + k) - cpref(k, r0 + k) * xn;
                    const long long i = at(r0 + k);
                    du = nan_max(du, fabs(xn - x[i]));
                    xmax = nan_max(xmax, fabs(xn));
                    x[i] = xn;
                }
            }
            __syncthreads();
        }
        red[threadIdx.x] = du;
        red[blockDim.x + threadIdx.x] = xmax;
        __syncthreads();
        for (int half = blockDim.x / 2; half > 0; half /= 2) {
            if (threadIdx.x < half) {
                red[threadIdx.x] = nan_max(red[threadIdx.x], red[threadIdx.x + half]);
                red[blockDim.x + threadIdx.x] = nan_max(red[blockDim.x + threadIdx.x], red[blockDim.x + threadIdx.x + half]);
            }
            __syncthreads();
        }
        du = red[0];
        xmax = red[blockDim.x];
        __syncthreads();
        ++it;
        converged = du <= tol * xmax;
        if (converged || !isfinite(du)) break;
    }
    if (threadIdx.x == 0) iters[blockIdx.x] = converged ? it : -it;
}

#define CHECKERBOARD(T, NAME, SHARED)                                                         \
    extern "C" __global__ void __launch_bounds__(CB_THREADS)                                  \
    NAME(const T* a, const T* b, const T* c, const T* d, T* x, T* gcp, T* gdp, int* iters,    \
         int n, long long inner, int dop, T tol, int maxiter)                                 \
    {                                                                                         \
        checkerboard<T, SHARED>(a, b, c, d, x, gcp, gdp, iters, n, inner, dop, tol, maxiter); \
    }
CHECKERBOARD(float, checkerboard_shared_f32, true)
CHECKERBOARD(double, checkerboard_shared_f64, true)
CHECKERBOARD(float, checkerboard_global_f32, false)
CHECKERBOARD(double, checkerboard_global_f64, false)
