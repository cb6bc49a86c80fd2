// Parallel Thomas algorithm (Souri et al. 2020): one thread solves one system.
// c' is kept in `cp`, d' in `x` (both global, same storage as the inputs); the back
// substitution overwrites x. Coalesced when systems are interleaved (inner > 1).
#include "common.cuh"

template <typename T>
__device__ void pta(const T* __restrict__ a, const T* __restrict__ b, const T* __restrict__ c,
                    const T* __restrict__ d, T* __restrict__ cp, T* __restrict__ x,
                    int n, long long inner, long long nsys)
{
    const long long s = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (s >= nsys) return;
    const long long base = system_base(s, n, inner);
    T cprev = T(0), xprev = T(0);
    for (int i = 0; i < n; ++i) {
        const long long k = base + (long long)i * inner;
        const Row<T> r = load_row(a, b, c, d, k, i, n);
        const T inv = T(1) / (r.b - r.a * cprev);
        cprev = r.c * inv;
        xprev = (r.d - r.a * xprev) * inv;
        cp[k] = cprev;
        x[k] = xprev;
    }
    for (int i = n - 2; i >= 0; --i) {
        const long long k = base + (long long)i * inner;
        xprev = x[k] - cp[k] * xprev;
        x[k] = xprev;
    }
}

#define PTA(T, NAME)                                                                          \
    extern "C" __global__ void NAME(const T* a, const T* b, const T* c, const T* d, T* cp,    \
                                    T* x, int n, long long inner, long long nsys)             \
    {                                                                                         \
        pta<T>(a, b, c, d, cp, x, n, inner, nsys);                                            \
    }
PTA(float, pta_f32)
PTA(double, pta_f64)
