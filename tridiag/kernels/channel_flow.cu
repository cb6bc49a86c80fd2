// Per-step kernels of the channel flow past the cylinder (channel_flow.py has the NumPy
// reference of each). Fields (ny, nx), x contiguous.

// Outflow column, interior rows j: psi[j, nx-1] = (4 psi[j, nx-2] - psi[j, nx-3]) / 3 and
// omega[j, nx-1] = (omega[j, nx-1] + c omega[j, nx-2]) / (1 + c).
template <typename T>
__device__ void outflow(T* psi, T* omega, int nx, int ny, T c)
{
    const int j = 1 + blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= ny - 1) return;
    const long long k = (long long)j * nx + nx - 1;
    psi[k] = (T(4) * psi[k - 1] - psi[k - 2]) / T(3);
    omega[k] = (omega[k] + c * omega[k - 1]) / (T(1) + c);
}

// One block: gain = scale * sum_s weight[s] (-3 thom(q[s]) + 4 omega[first[s]] - omega[second[s]]),
// thom(q) Thom's vorticity of psi at wall node q of the table (node, nbr, coef, hspeed, count).
template <typename T>
__device__ void body_gain(const T* psi, const T* omega, const long long* node, const long long* nbr, const T* coef,
                          const T* hspeed, const T* count, const int* q, const long long* first,
                          const long long* second, const T* weight, int S, T scale, T* gain)
{
    __shared__ T part[256];
    T sum = T(0);
    for (int s = threadIdx.x; s < S; s += blockDim.x) {
        const int w = q[s];
        const T p = psi[node[w]];
        const T thom = (coef[2 * w] * (psi[nbr[2 * w]] - p - hspeed[2 * w])
                        + coef[2 * w + 1] * (psi[nbr[2 * w + 1]] - p - hspeed[2 * w + 1])) / count[w];
        sum += weight[s] * (T(-3) * thom + T(4) * omega[first[s]] - omega[second[s]]);
    }
    part[threadIdx.x] = sum;
    __syncthreads();
    for (int st = blockDim.x / 2; st > 0; st /= 2) {
        if (threadIdx.x < st) part[threadIdx.x] += part[threadIdx.x + st];
        __syncthreads();
    }
    if (threadIdx.x == 0) gain[0] = scale * part[0];
}

// y += gain[0] x over n entries.
template <typename T>
__device__ void add_scaled(T* y, const T* x, const T* gain, long long n)
{
    const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (k < n) y[k] += gain[0] * x[k];
}

// One thread: record[2 c] = (psi[probe - 1] - psi[probe + 1]) half_inv_hx, record[2 c + 1] = psi[body];
// c = count[0], then count[0] = c + 1.
template <typename T>
__device__ void probe(const T* psi, long long at, long long body, T half_inv_hx, T* record, int* count)
{
    const int c = count[0];
    record[2 * c] = (psi[at - 1] - psi[at + 1]) * half_inv_hx;
    record[2 * c + 1] = psi[body];
    count[0] = c + 1;
}

#define CHANNEL(T, S)                                                                                                 \
    extern "C" __global__ void outflow_##S(T* psi, T* omega, int nx, int ny, T c) { outflow<T>(psi, omega, nx, ny, c); } \
    extern "C" __global__ void body_gain_##S(const T* psi, const T* omega, const long long* node, const long long* nbr, \
                                             const T* coef, const T* hspeed, const T* count, const int* q,             \
                                             const long long* first, const long long* second, const T* weight, int S_, \
                                             T scale, T* gain)                                                         \
    {                                                                                                                  \
        body_gain<T>(psi, omega, node, nbr, coef, hspeed, count, q, first, second, weight, S_, scale, gain);          \
    }                                                                                                                  \
    extern "C" __global__ void add_scaled_##S(T* y, const T* x, const T* gain, long long n) { add_scaled<T>(y, x, gain, n); } \
    extern "C" __global__ void probe_##S(const T* psi, long long at, long long body, T half_inv_hx, T* record, int* count) \
    {                                                                                                                  \
        probe<T>(psi, at, body, half_inv_hx, record, count);                                                           \
    }

CHANNEL(double, f64)
CHANNEL(float, f32)
