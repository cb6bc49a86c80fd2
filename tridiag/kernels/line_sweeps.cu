// Fused line sweeps of the 2D cases (line_sweeps.py names the NumPy reference of each): one
// thread block per grid line builds the line's tridiagonal rows in shared memory, solves them
// (line_solve.cuh) and writes the solution. Fields are (ny, nx), x contiguous; `along` 0 =
// x-lines (block = row j), 1 = y-lines (block = column i). `fixed` (ny, nx) uint8: fixed
// nodes give identity rows.
#include "line_solve.cuh"

// One line sweep: rows(k, step_a) gives the Row of free node k (flat index; step_a the flat
// step to the neighbour across the line); fixed nodes get identity rows keeping keep[k] (0 if
// keep is null); store(k, x) puts the solution of node k where it belongs.
template <typename T, typename Rows, typename Store>
__device__ void sweep(Rows rows, Store store, const T* __restrict__ keep, const unsigned char* __restrict__ fixed,
                      int nx, int ny, int along)
{
    const int n = along == 0 ? nx : ny, line = blockIdx.x;
    const long long first = along == 0 ? (long long)line * nx : line, step = along == 0 ? 1 : nx;
    const long long step_a = along == 0 ? nx : 1;
    LineShared<T> s = line_shared<T>(n);
    for (int p = threadIdx.x; p < n; p += blockDim.x) {
        const long long k = first + p * step;
        Row<T> r;
        if (fixed[k]) { r.a = T(0); r.b = T(1); r.c = T(0); r.d = keep ? keep[k] : T(0); }
        else r = rows(k, step_a);
        s.a[p] = r.a; s.b[p] = r.b; s.c[p] = r.c; s.d[p] = r.d;
    }
    line_solve(s, n);
    for (int p = threadIdx.x; p < n; p += blockDim.x) store(first + p * step, s.d[p]);
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
    auto rows = [=](long long k, long long step_a) {
        const T u = (psi[k + nx] - psi[k - nx]) / two_hy, v = (psi[k - 1] - psi[k + 1]) / two_hx;
        const T speed = along == 0 ? u : v, speed_a = along == 0 ? v : u;
        const T centre = w[k], plus = w[k + step_a], minus = w[k - step_a];
        const T conv = speed * conv_k;
        Row<T> r;
        r.a = -diff - conv;
        r.b = T(1) + T(2) * diff;
        r.c = conv - diff;
        r.d = centre + (diff_a * (plus - T(2) * centre + minus) - (speed_a * conv_a) * (plus - minus));
        return r;
    };
    sweep<T>(rows, [=](long long k, T x) { out[k] = x; }, w, fixed, nx, ny, along);
}

// The two halves of a Peaceman–Rachford double sweep of -lap u = f in delta form (scaled by
// 1/rho: s = 1/(rho h^2) along the line, s_a across it; tridiag/cases/peaceman_rachford.py):
//   first:  (1 - s d2) D = 2 s d2 u + 2 s_a d2_a u + two_rho f   (f may be null: no source), out = D;
//   second: (1 - s d2) delta = D, u += delta (and delta stored where delta is not null).
// Fixed nodes: identity rows with right-hand side 0 (they keep u).
template <typename T>
__device__ void adi_first(const T* __restrict__ u, const T* __restrict__ f, const unsigned char* __restrict__ fixed,
                          T* __restrict__ out, int nx, int ny, int along, T s, T s_a, T two_rho)
{
    auto rows = [=](long long k, long long step_a) {
        const long long step = along == 0 ? 1 : nx;
        const T centre = u[k];
        Row<T> r;
        r.a = -s;
        r.b = T(1) + T(2) * s;
        r.c = -s;
        r.d = T(2) * s * (u[k - step] - T(2) * centre + u[k + step])
              + T(2) * s_a * (u[k - step_a] - T(2) * centre + u[k + step_a]) + (f ? two_rho * f[k] : T(0));
        return r;
    };
    sweep<T>(rows, [=](long long k, T x) { out[k] = x; }, (const T*)nullptr, fixed, nx, ny, along);
}

template <typename T>
__device__ void adi_second(const T* __restrict__ D, const unsigned char* __restrict__ fixed, T* __restrict__ u,
                           T* __restrict__ delta, int nx, int ny, int along, T s)
{
    auto rows = [=](long long k, long long) {
        Row<T> r;
        r.a = -s;
        r.b = T(1) + T(2) * s;
        r.c = -s;
        r.d = D[k];
        return r;
    };
    auto store = [=](long long k, T x) {
        u[k] += x;
        if (delta) delta[k] = x;
    };
    sweep<T>(rows, store, (const T*)nullptr, fixed, nx, ny, along);
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
    extern "C" __global__ void adi_first_##S(const T* u, const T* f, const unsigned char* fixed, T* out, int nx,     \
                                             int ny, int along, T s, T s_a, T two_rho)                               \
    {                                                                                                                \
        adi_first<T>(u, f, fixed, out, nx, ny, along, s, s_a, two_rho);                                              \
    }                                                                                                                \
    extern "C" __global__ void adi_second_##S(const T* D, const unsigned char* fixed, T* u, T* delta, int nx,        \
                                              int ny, int along, T s)                                                \
    {                                                                                                                \
        adi_second<T>(D, fixed, u, delta, nx, ny, along, s);                                                         \
    }                                                                                                                \
    extern "C" __global__ void thom_##S(const T* psi, T* omega, const long long* node, const long long* nbr,         \
                                        const T* coef, const T* hspeed, const T* count, int K, T alpha)              \
    {                                                                                                                \
        thom<T>(psi, omega, node, nbr, coef, hspeed, count, K, alpha);                                               \
    }

SWEEPS(double, f64)
SWEEPS(float, f32)
