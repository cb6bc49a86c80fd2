// Fused sweeps of the vorticity–stream-function step (vorticity_sweeps.py has the NumPy
// reference of each): one thread block per grid line builds the line's tridiagonal rows in
// shared memory, solves them (line_solve.cuh) and writes the solution. Fields are (ny, nx),
// x contiguous; `along` 0 = x-lines (block = row j), 1 = y-lines (block = column i).
// `fixed` (ny, nx) uint8: fixed nodes give identity rows that keep the input value.
#include "line_solve.cuh"

// Node (j, i) of position p on line `line`.
__device__ __forceinline__ void line_node(int along, int line, int p, int& j, int& i)
{
    if (along == 0) { j = line; i = p; } else { j = p; i = line; }
}

// Half step of the vorticity transport implicit along the line, explicit across:
// a = -diff - conv, c = conv - diff, b = 1 + 2 diff, conv = speed conv_k (speed the velocity
// along the line), d = w + diff_a (w+ - 2w + w-) - (speed_a conv_a) (w+ - w-) across the line;
// velocities u = (psi[j+1,i] - psi[j-1,i]) / two_hy, v = (psi[j,i-1] - psi[j,i+1]) / two_hx.
template <typename T>
__device__ void transport(const T* __restrict__ psi, const T* __restrict__ w, const unsigned char* __restrict__ fixed,
                          T* __restrict__ out, int nx, int ny, int along, T two_hx, T two_hy, T diff, T conv_k,
                          T diff_a, T conv_a)
{
    const int n = along == 0 ? nx : ny, line = blockIdx.x;
    LineShared<T> s = line_shared<T>(n);
    const long long step_a = along == 0 ? nx : 1;  // to the neighbour across the line
    for (int p = threadIdx.x; p < n; p += blockDim.x) {
        int j, i;
        line_node(along, line, p, j, i);
        const long long k = (long long)j * nx + i;
        const T centre = w[k];
        if (fixed[k]) {
            s.a[p] = T(0); s.b[p] = T(1); s.c[p] = T(0); s.d[p] = centre;
            continue;
        }
        const T u = (psi[k + nx] - psi[k - nx]) / two_hy, v = (psi[k - 1] - psi[k + 1]) / two_hx;
        const T speed = along == 0 ? u : v, speed_a = along == 0 ? v : u;
        const T plus = w[k + step_a], minus = w[k - step_a];
        const T conv = speed * conv_k;
        s.a[p] = -diff - conv;
        s.b[p] = T(1) + T(2) * diff;
        s.c[p] = conv - diff;
        s.d[p] = centre + (diff_a * (plus - T(2) * centre + minus) - (speed_a * conv_a) * (plus - minus));
    }
    line_solve(s, n);
    for (int p = threadIdx.x; p < n; p += blockDim.x) {
        int j, i;
        line_node(along, line, p, j, i);
        out[(long long)j * nx + i] = s.d[p];
    }
}

// Half of a Peaceman–Rachford sweep of lap psi = -omega, implicit along the line:
// a = c = off, b = diag, d = rho psi + (psi+ - 2 psi + psi-) inv_ha2 + omega across the line.
template <typename T>
__device__ void poisson(const T* __restrict__ psi, const T* __restrict__ omega, const unsigned char* __restrict__ fixed,
                        T* __restrict__ out, int nx, int ny, int along, T rho, T off, T diag, T inv_ha2)
{
    const int n = along == 0 ? nx : ny, line = blockIdx.x;
    LineShared<T> s = line_shared<T>(n);
    const long long step_a = along == 0 ? nx : 1;
    for (int p = threadIdx.x; p < n; p += blockDim.x) {
        int j, i;
        line_node(along, line, p, j, i);
        const long long k = (long long)j * nx + i;
        const T centre = psi[k];
        if (fixed[k]) {
            s.a[p] = T(0); s.b[p] = T(1); s.c[p] = T(0); s.d[p] = centre;
            continue;
        }
        s.a[p] = off;
        s.b[p] = diag;
        s.c[p] = off;
        s.d[p] = rho * centre + (psi[k + step_a] - T(2) * centre + psi[k - step_a]) * inv_ha2 + omega[k];
    }
    line_solve(s, n);
    for (int p = threadIdx.x; p < n; p += blockDim.x) {
        int j, i;
        line_node(along, line, p, j, i);
        out[(long long)j * nx + i] = s.d[p];
    }
}

// Thom's wall vorticity at K wall nodes: thom = sum_q coef[q] (psi[nbr[q]] - psi[node] - hspeed[q]) / count,
// q over the node's two direction slots (absent ones have coef 0 and nbr = node);
// omega[node] = alpha thom + (1 - alpha) omega[node].
template <typename T>
__device__ void thom(const T* __restrict__ psi, T* __restrict__ omega, const long long* __restrict__ node,
                     const long long* __restrict__ nbr, const T* __restrict__ coef, const T* __restrict__ hspeed,
                     const T* __restrict__ count, int K, T alpha)
{
    const int q = blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= K) return;
    const long long k = node[q];
    const T p = psi[k];
    const T t = (coef[2 * q] * (psi[nbr[2 * q]] - p - hspeed[2 * q])
                 + coef[2 * q + 1] * (psi[nbr[2 * q + 1]] - p - hspeed[2 * q + 1])) / count[q];
    omega[k] = alpha == T(1) ? t : alpha * t + (T(1) - alpha) * omega[k];
}

#define SWEEPS(T, S)                                                                                                \
    extern "C" __global__ void transport_##S(const T* psi, const T* w, const unsigned char* fixed, T* out, int nx,   \
                                             int ny, int along, T two_hx, T two_hy, T diff, T conv_k, T diff_a,      \
                                             T conv_a)                                                               \
    {                                                                                                                \
        transport<T>(psi, w, fixed, out, nx, ny, along, two_hx, two_hy, diff, conv_k, diff_a, conv_a);              \
    }                                                                                                                \
    extern "C" __global__ void poisson_##S(const T* psi, const T* omega, const unsigned char* fixed, T* out, int nx, \
                                           int ny, int along, T rho, T off, T diag, T inv_ha2)                       \
    {                                                                                                                \
        poisson<T>(psi, omega, fixed, out, nx, ny, along, rho, off, diag, inv_ha2);                                 \
    }                                                                                                                \
    extern "C" __global__ void thom_##S(const T* psi, T* omega, const long long* node, const long long* nbr,         \
                                        const T* coef, const T* hspeed, const T* count, int K, T alpha)              \
    {                                                                                                                \
        thom<T>(psi, omega, node, nbr, coef, hspeed, count, K, alpha);                                               \
    }

SWEEPS(double, f64)
SWEEPS(float, f32)
