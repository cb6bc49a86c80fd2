// Fused vector kernels of the normal-equations Jacobi PCG (Chronopoulos-Gear form,
// one reduction per iteration). Scalars live on the device in sc[]:
//   sc[0] gamma = (r, z)   sc[1] delta = (s, z)   sc[2] rr = (r, r)
//   sc[3] gamma_prev       sc[4] alpha_prev       sc[5] alpha   sc[6] beta
//   sc[7] 1 before the first iteration, then 0   sc[8] 1 once a breakdown was seen

#define THREADS 256

// Per-block partial sums of the weighted products (w r, z), (w s, z), (w r, r) into
// part[3 * blockIdx.x + k]; w is 1 at the entries this rank owns, 0 at other ranks' copies.
extern "C" __global__ void __launch_bounds__(THREADS)
cg_dots_partial(const double* __restrict__ r, const double* __restrict__ z,
                const double* __restrict__ s, const double* __restrict__ w,
                double* __restrict__ part, long n)
{
    __shared__ double sh[3][THREADS];
    double a = 0.0, b = 0.0, c = 0.0;
    for (long i = blockIdx.x * (long)THREADS + threadIdx.x; i < n; i += (long)gridDim.x * THREADS) {
        const double wri = w[i] * r[i], zi = z[i];
        a += wri * zi;
        b += w[i] * s[i] * zi;
        c += wri * r[i];
    }
    sh[0][threadIdx.x] = a; sh[1][threadIdx.x] = b; sh[2][threadIdx.x] = c;
    __syncthreads();
    for (int w = THREADS / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) {
            sh[0][threadIdx.x] += sh[0][threadIdx.x + w];
            sh[1][threadIdx.x] += sh[1][threadIdx.x + w];
            sh[2][threadIdx.x] += sh[2][threadIdx.x + w];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        part[3 * blockIdx.x] = sh[0][0];
        part[3 * blockIdx.x + 1] = sh[1][0];
        part[3 * blockIdx.x + 2] = sh[2][0];
    }
}

// alpha and beta from gamma = sc[0], delta = sc[1]:
//   beta = gamma / gamma_prev, alpha = gamma / (delta - beta gamma / alpha_prev)
// (first iteration: beta = 0, alpha = gamma / delta); flags a breakdown when the
// denominator or gamma is not positive (or NaN): gamma = 0 means the recursive
// residual vanished at round-off.
__device__ void derive_scalars(double* sc)
{
    const double gamma = sc[0], delta = sc[1];
    double beta = 0.0, denom = delta;
    if (sc[7] == 0.0) {
        beta = gamma / sc[3];
        denom = delta - beta * gamma / sc[4];
    }
    const double alpha = gamma / denom;
    if (!(denom > 0.0) || !(gamma > 0.0)) sc[8] = 1.0;
    sc[5] = alpha; sc[6] = beta;
    sc[3] = gamma; sc[4] = alpha; sc[7] = 0.0;
}

// Sums the partials in a fixed order (deterministic) into gamma, delta, rr; with
// derive != 0 then derives alpha and beta. (A distributed run sums gamma, delta, rr
// over the ranks first and calls cg_scalars.)
extern "C" __global__ void __launch_bounds__(THREADS)
cg_dots_finish(const double* __restrict__ part, int n_part, double* __restrict__ sc, int derive)
{
    __shared__ double sh[3][THREADS];
    double a = 0.0, b = 0.0, c = 0.0;
    for (int i = threadIdx.x; i < n_part; i += THREADS) {
        a += part[3 * i]; b += part[3 * i + 1]; c += part[3 * i + 2];
    }
    sh[0][threadIdx.x] = a; sh[1][threadIdx.x] = b; sh[2][threadIdx.x] = c;
    __syncthreads();
    for (int w = THREADS / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) {
            sh[0][threadIdx.x] += sh[0][threadIdx.x + w];
            sh[1][threadIdx.x] += sh[1][threadIdx.x + w];
            sh[2][threadIdx.x] += sh[2][threadIdx.x + w];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        sc[0] = sh[0][0]; sc[1] = sh[1][0]; sc[2] = sh[2][0];
        if (derive) derive_scalars(sc);
    }
}

extern "C" __global__ void cg_scalars(double* __restrict__ sc)
{
    derive_scalars(sc);
}

// p = z + beta p; q = s + beta q; x += alpha p; r -= alpha q; z = minv * r.
extern "C" __global__ void __launch_bounds__(THREADS)
cg_update(double* __restrict__ x, double* __restrict__ r, double* __restrict__ z,
          double* __restrict__ p, double* __restrict__ q, const double* __restrict__ s,
          const double* __restrict__ minv, const double* __restrict__ sc, long n)
{
    if (sc[8] != 0.0) return;  // after a breakdown the iterate stays until the solver restarts
    const double alpha = sc[5], beta = sc[6];
    for (long i = blockIdx.x * (long)THREADS + threadIdx.x; i < n; i += (long)gridDim.x * THREADS) {
        const double pi = z[i] + beta * p[i];
        const double qi = s[i] + beta * q[i];
        const double ri = r[i] - alpha * qi;
        p[i] = pi;
        q[i] = qi;
        x[i] += alpha * pi;
        r[i] = ri;
        z[i] = minv[i] * ri;
    }
}
