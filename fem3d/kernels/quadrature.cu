// Per-point quantities of the element matrices (fem3d.discretisation.assembly.element_matrices_chunk),
// one thread per element and quadrature point, everything of the point in registers:
//
// quadrature_geometry   the geometry at the points: the array code of
//                       fem3d.discretisation.assembly.quadrature_geometry
// upwind_tau            tau of fem3d.discretisation.upwind.tau
// upwind_tau_derivative tau and d tau / d a of fem3d.discretisation.upwind.tau_and_derivative
//
// Compiled with --fmad=false (fem3d.kernels.quadrature): each product and sum is rounded
// as in the NumPy reference, whose formulas are written here in the same order, so the
// two differ only by the order of the sums that NumPy leaves to BLAS and by exp/tanh.

#define NN 27  // Q2 nodes
#define NM 8   // Q1 nodes
#define THREADS 128  // fem3d.kernels.quadrature._THREADS

// X     (E, g, 3) geometry nodes of each element
// w     (Q,) Gauss weights; G (Q, g), dG (Q, g, 3), HG (Q, g, 3, 3) geometry basis values,
//       gradients and Hessians; dNr (Q, 27, 3), HN (Q, 27, 3, 3) the Q2 basis' reference
//       gradients and Hessians; dMr (Q, 8, 3) the Q1 basis' reference gradients
// out:  J (E, Q, 3, 3) d x_i / d xi_k at [i][k]; wq (E, Q) det J * w; dN (E, Q, 27, 3) and
//       dM (E, Q, 8, 3) physical gradients; lap (E, Q, 27) the Q2 basis' Laplacian with the
//       curvature term; x (E, Q, 3) the physical points. All C-contiguous.
//
// Grid (ceil(E / THREADS), Q): a block's threads share the point q, so every read of a
// table is the same address across a warp; thread e reads its element's X.
extern "C" __global__ void __launch_bounds__(THREADS)
quadrature_geometry(const double* __restrict__ X, int E, int g, int Q, const double* __restrict__ w,
                    const double* __restrict__ G, const double* __restrict__ dG, const double* __restrict__ HG,
                    const double* __restrict__ dNr, const double* __restrict__ HN, const double* __restrict__ dMr,
                    double* __restrict__ J_out, double* __restrict__ wq, double* __restrict__ dN,
                    double* __restrict__ dM, double* __restrict__ lap, double* __restrict__ x)
{
    const int q = blockIdx.y;
    const long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (e >= E) return;
    const long long p = e * Q + q;  // the point's index in the (E, Q) outputs
    const double* Xe = X + e * g * 3;

    // x_c, J[c][k] = d x_c / d xi_k and H[c][k][l] = d2 x_c / d xi_k d xi_l, summed over the geometry nodes.
    double xq[3] = {0.0, 0.0, 0.0}, J[3][3] = {}, H[3][3][3] = {};
    for (int a = 0; a < g; ++a) {
        const double Ga = G[q * g + a];
        const double* dGa = dG + (q * g + a) * 3;
        const double* HGa = HG + (q * g + a) * 9;
#pragma unroll
        for (int c = 0; c < 3; ++c) {
            const double Xc = Xe[a * 3 + c];
            xq[c] += Ga * Xc;
#pragma unroll
            for (int k = 0; k < 3; ++k) {
                J[c][k] += Xc * dGa[k];
#pragma unroll
                for (int l = 0; l < 3; ++l) H[c][k][l] += Xc * HGa[k * 3 + l];
            }
        }
    }

    // Determinant and inverse by cofactors (fem3d.discretisation.geometry.det_and_inverse):
    // Jinv[k][i] = d xi_k / d x_i.
    const double a0 = J[0][0], b0 = J[0][1], c0 = J[0][2];
    const double d0 = J[1][0], e0 = J[1][1], f0 = J[1][2];
    const double g0 = J[2][0], h0 = J[2][1], i0 = J[2][2];
    const double c00 = e0 * i0 - f0 * h0, c01 = f0 * g0 - d0 * i0, c02 = d0 * h0 - e0 * g0;
    const double det = a0 * c00 + b0 * c01 + c0 * c02;
    const double Jinv[3][3] = {{c00 / det, (c0 * h0 - b0 * i0) / det, (b0 * f0 - c0 * e0) / det},
                               {c01 / det, (a0 * i0 - c0 * g0) / det, (c0 * d0 - a0 * f0) / det},
                               {c02 / det, (b0 * g0 - a0 * h0) / det, (a0 * e0 - b0 * d0) / det}};

    // metric[k][l] = sum_i Jinv[k][i] Jinv[l][i]; curv[c] = sum_kl H[c][k][l] metric[k][l]
    // (fem3d.discretisation.assembly.laplacian_metric).
    double metric[3][3], curv[3];
#pragma unroll
    for (int k = 0; k < 3; ++k)
#pragma unroll
        for (int l = 0; l < 3; ++l) metric[k][l] = Jinv[k][0] * Jinv[l][0] + Jinv[k][1] * Jinv[l][1] + Jinv[k][2] * Jinv[l][2];
#pragma unroll
    for (int c = 0; c < 3; ++c) {
        double s = 0.0;
#pragma unroll
        for (int k = 0; k < 3; ++k)
#pragma unroll
            for (int l = 0; l < 3; ++l) s += H[c][k][l] * metric[k][l];
        curv[c] = s;
    }

#pragma unroll
    for (int i = 0; i < 3; ++i) {
        x[p * 3 + i] = xq[i];
#pragma unroll
        for (int k = 0; k < 3; ++k) J_out[p * 9 + i * 3 + k] = J[i][k];
    }
    wq[p] = det * w[q];

    // dN[n][i] = sum_k dNr[n][k] Jinv[k][i]; lap[n] = sum_kl HN[n][k][l] metric[k][l] - dN[n] . curv.
    for (int n = 0; n < NN; ++n) {
        const double* r = dNr + (q * NN + n) * 3;
        const double* h = HN + (q * NN + n) * 9;
        double grad[3], l2 = 0.0;
#pragma unroll
        for (int i = 0; i < 3; ++i) grad[i] = r[0] * Jinv[0][i] + r[1] * Jinv[1][i] + r[2] * Jinv[2][i];
#pragma unroll
        for (int k = 0; k < 3; ++k)
#pragma unroll
            for (int l = 0; l < 3; ++l) l2 += h[k * 3 + l] * metric[k][l];
        lap[p * NN + n] = l2 - (grad[0] * curv[0] + grad[1] * curv[1] + grad[2] * curv[2]);
#pragma unroll
        for (int i = 0; i < 3; ++i) dN[(p * NN + n) * 3 + i] = grad[i];
    }
    for (int n = 0; n < NM; ++n) {
        const double* r = dMr + (q * NM + n) * 3;
#pragma unroll
        for (int i = 0; i < 3; ++i) dM[(p * NM + n) * 3 + i] = r[0] * Jinv[0][i] + r[1] * Jinv[1][i] + r[2] * Jinv[2][i];
    }
}

// The optimal coefficients of fem3d.discretisation.upwind and their derivatives, for Pe >= 0:
// the Taylor series below ``below`` (SERIES_BELOW), else the closed forms at min(Pe, large) (LARGE).
__device__ double delta_mid(double pe, double below, double large)
{
    if (pe < below) {
        const double p2 = pe * pe;
        return pe * (1.0 / 12 + p2 * (-1.0 / 720 + p2 * (1.0 / 30240 + p2 * (-1.0 / 1209600 + p2 / 47900160))));
    }
    const double p = fmin(pe, large);
    return 0.5 / tanh(0.5 * p) - 1.0 / p;
}

__device__ double delta_end(double pe, double below, double large)
{
    if (pe < below) {
        const double p2 = pe * pe;
        return pe * (1.0 / 12 + p2 * (1.0 / 1440 + p2 * (-109.0 / 241920 + p2 * (277.0 / 1935360 + p2 * (-337571.0 / 7664025600 + p2 * 1131324167.0 / 83691159552000)))));
    }
    const double p = fmin(pe, large);
    const double t = exp(-p);
    const double t2 = t * t, t3 = t * t * t;
    return (p * (1 - 3 * t - 3 * t2 + t3) - 1 + 7 * t - 7 * t2 + t3) / (p * (1 - 7 * t + 7 * t2 - t3) + 6 * (1 - t - t2 + t3));
}

__device__ double delta_mid_derivative(double pe, double below, double large)
{
    if (pe < below) {
        const double p2 = pe * pe;
        return 1.0 / 12 + p2 * (-3.0 / 720 + p2 * (5.0 / 30240 + p2 * (-7.0 / 1209600 + p2 * 9.0 / 47900160)));
    }
    const double p = fmin(pe, large);
    const double t = exp(-p);
    return 1.0 / (p * p) - t / ((1.0 - t) * (1.0 - t));
}

__device__ double delta_end_derivative(double pe, double below, double large)
{
    if (pe < below) {
        const double p2 = pe * pe;
        return (1.0 / 12 + p2 * (3.0 / 1440 + p2 * (-5 * 109.0 / 241920 + p2 * (7 * 277.0 / 1935360 + p2 * (
            -9 * 337571.0 / 7664025600 + p2 * 11 * 1131324167.0 / 83691159552000)))));
    }
    const double p = fmin(pe, large);
    const double t = exp(-p);
    const double t2 = t * t, t3 = t * t * t;
    const double num = p * (1 - 3 * t - 3 * t2 + t3) - 1 + 7 * t - 7 * t2 + t3;
    const double den = p * (1 - 7 * t + 7 * t2 - t3) + 6 * (1 - t - t2 + t3);
    const double d_num = (1 - 3 * t - 3 * t2 + t3) + p * (3 * t + 6 * t2 - 3 * t3) - 7 * t + 14 * t2 - 3 * t3;
    const double d_den = (1 - 7 * t + 7 * t2 - t3) + p * (7 * t - 14 * t2 + 3 * t3) + 6 * (t + 2 * t2 - 3 * t3);
    return (d_num * den - num * d_den) / (den * den);
}

// a     (P, 3) velocity at the points (P = E Q); J (P, 3, 3) d x_i / d xi_k at [i][k]
// mid0, mid1, mid2  bit n set where Q2 node n is a middle node along xi, eta, zeta
// out:  tau (P, 27); with DERIVATIVE also dtau (P, 27, 3) d tau_n / d a_c at [n][c]
//
// tau_n = sum_k (middle along k ? delta_mid : delta_end)(Pe_k) w_k with s_k = a . J[:, k],
// Pe_k = Re |s_k|, w_k = |s_k| / |a|^2 (0 where a = 0) (fem3d.discretisation.upwind,
// _directional and tau_and_derivative_by_direction); the middle-node terms are added
// first, then the end-node ones, as the product with the 0/1 class table of _by_node.
template <bool DERIVATIVE>
__device__ __forceinline__ void upwind_point(const double* __restrict__ a, const double* __restrict__ J, double re,
                                             double below, double large, unsigned mid0, unsigned mid1,
                                             unsigned mid2, long long points, double* __restrict__ tau,
                                             double* __restrict__ dtau)
{
    const long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (p >= points) return;
    double A[3], Jp[3][3];
#pragma unroll
    for (int c = 0; c < 3; ++c) {
        A[c] = a[p * 3 + c];
#pragma unroll
        for (int k = 0; k < 3; ++k) Jp[c][k] = J[p * 9 + c * 3 + k];
    }
    const double a2 = A[0] * A[0] + A[1] * A[1] + A[2] * A[2];
    const bool moving = a2 > 0;
    const double safe = moving ? a2 : 1.0;
    const unsigned mid[3] = {mid0, mid1, mid2};
    // t[0][k], t[1][k]: the middle- and end-node terms along k; dt[.][k][c] their derivatives in a_c.
    double t[2][3], dt[2][3][3];
#pragma unroll
    for (int k = 0; k < 3; ++k) {
        const double s = A[0] * Jp[0][k] + A[1] * Jp[1][k] + A[2] * Jp[2][k];
        const double abs_s = fabs(s);
        const double wk = moving ? abs_s / safe : 0.0;
        const double pe = re * abs_s;
        const double d[2] = {delta_mid(pe, below, large), delta_end(pe, below, large)};
#pragma unroll
        for (int m = 0; m < 2; ++m) t[m][k] = d[m] * wk;
        if (DERIVATIVE) {
            const double sign = (double)((s > 0) - (s < 0));
            const double dd[2] = {delta_mid_derivative(pe, below, large), delta_end_derivative(pe, below, large)};
#pragma unroll
            for (int c = 0; c < 3; ++c) {
                const double sJ = sign * Jp[c][k];  // d |s_k| / d a_c
                const double dw = moving ? sJ / safe - 2.0 * abs_s * A[c] / (safe * safe) : 0.0;
                const double dpe = re * sJ;
#pragma unroll
                for (int m = 0; m < 2; ++m) dt[m][k][c] = dd[m] * dpe * wk + d[m] * dw;
            }
        }
    }
    for (int n = 0; n < NN; ++n) {
        double sum = 0.0, dsum[3] = {0.0, 0.0, 0.0};
#pragma unroll
        for (int m = 0; m < 2; ++m)
#pragma unroll
            for (int k = 0; k < 3; ++k) {
                if ((((mid[k] >> n) & 1u) != 0) != (m == 0)) continue;
                sum += t[m][k];
                if (DERIVATIVE) {
#pragma unroll
                    for (int c = 0; c < 3; ++c) dsum[c] += dt[m][k][c];
                }
            }
        tau[p * NN + n] = sum;
        if (DERIVATIVE) {
#pragma unroll
            for (int c = 0; c < 3; ++c) dtau[(p * NN + n) * 3 + c] = dsum[c];
        }
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
upwind_tau(const double* __restrict__ a, const double* __restrict__ J, double re, double below, double large,
           unsigned mid0, unsigned mid1, unsigned mid2, long long points, double* __restrict__ tau)
{
    upwind_point<false>(a, J, re, below, large, mid0, mid1, mid2, points, tau, nullptr);
}

extern "C" __global__ void __launch_bounds__(THREADS)
upwind_tau_derivative(const double* __restrict__ a, const double* __restrict__ J, double re, double below,
                      double large, unsigned mid0, unsigned mid1, unsigned mid2, long long points,
                      double* __restrict__ tau, double* __restrict__ dtau)
{
    upwind_point<true>(a, J, re, below, large, mid0, mid1, mid2, points, tau, dtau);
}
