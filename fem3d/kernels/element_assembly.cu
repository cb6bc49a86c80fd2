// Element matrices, loads, residuals and squared row norms of the stabilised Navier-Stokes
// equations from their per-point quantities: fem3d.discretisation.assembly.element_matrices_chunk,
// whose array code is the NumPy reference, in one launch. One thread block per element; the
// element's point data, its Picard blocks K, G, D and the Newton factors live in shared memory.
//
// Q points, nodes i, j of the Q2 basis (27), l of the Q1 basis (8), components c, d (3):
// wq (E, Q) det J * weight; dN (E, Q, 27, 3) and dM (E, Q, 8, 3) physical gradients; lap (E, Q, 27)
// the Q2 basis' Laplacian; a (E, Q, 3) the velocity at the points; tau (E, Q, 27) and, for the
// Jacobian with the test functions' derivative, dtau (E, Q, 27, 3) (else null); terms: 0 the
// Picard matrices, 1 the Jacobian's with the test functions frozen (the reaction term alone),
// 2 the Jacobian's; u (E, 27, 3) nodal velocity; p (E, 8) nodal
// pressure or null; f (E, Q, 3) body force (and a time step's history term h) at the points or null;
// N (Q, 27), M (Q, 8) basis values; sigma the time step's coefficient of the new velocity (0: steady).
// dofs (E, 89) int32, fixed (n,) bool, valence (n,) float64, or null: the rows of prescribed
// unknowns are stored as zero with 1 / valence on the diagonal (fem3d.discretisation.assembly.
// apply_dirichlet_rows), after the sums below are formed from the unmodified rows.
// Out: mats (E, 89, ld) float64 or null (not formed); load, row_sq (E, 89); residual (E, 89)
// or null (formed where p is given). All C-contiguous.

#define NN 27  // Q2 nodes
#define NM 8   // Q1 nodes
#define NV 81  // velocity unknowns of an element
#define NL 89  // unknowns of an element

// Shared doubles of a block: fem3d.kernels.element_assembly.shared_doubles.
extern "C" __global__ void __launch_bounds__(256)
element_matrices(int Q, int terms, double nu, double sigma, const double* __restrict__ wq_g,
                 const double* __restrict__ dN_g, const double* __restrict__ dM_g, const double* __restrict__ lap_g,
                 const double* __restrict__ a_g,
                 const double* __restrict__ tau_g, const double* __restrict__ dtau_g, const double* __restrict__ u_g,
                 const double* __restrict__ p_g, const double* __restrict__ f_g, const double* __restrict__ Nt,
                 const double* __restrict__ Mt, const int* __restrict__ dofs, const bool* __restrict__ fixed,
                 const double* __restrict__ valence, double* __restrict__ mats, int ld, double* __restrict__ load,
                 double* __restrict__ residual, double* __restrict__ row_sq)
{
    extern __shared__ double sh[];
    const long long e = blockIdx.x;
    const int tid = threadIdx.x, nt = blockDim.x;
    const bool newton = terms > 0, derivative = terms == 2;
    double* wq = sh;                  // Q
    double* dN = wq + Q;              // Q x 27 x 3
    double* lap = dN + Q * NV;        // Q x 27
    double* adv = lap + Q * NN;       // Q x 27: a . grad N_i
    double* Wt = adv + Q * NN;        // Q x 27: (N_i + S_i) wq, S_i = tau_i a . grad N_i
    double* St = Wt + Q * NN;         // Q x 27: S_i wq
    double* dM = St + Q * NN;         // Q x 8 x 3
    double* a = dM + Q * NM * 3;      // Q x 3
    double* f = a + Q * 3;            // Q x 3, zero without a force
    double* u = f + Q * 3;            // 27 x 3
    double* p = u + NV;               // 8, zero without a pressure
    double* pin = p + NM;             // 89: 1 / valence on a prescribed row, else -1
    double* K = pin + NL;             // 27 x 27
    double* G = K + NN * NN;          // 3 x 27 x 8: [d][i][l]
    double* D = G + 3 * NN * NM;      // 3 x 8 x 27: [d][l][j]
    double* ga = D + 3 * NM * NN;     // Newton: Q x 3 x 3, d a_c / d x_d
    double* sw = ga + Q * 9;          // Newton: Q x 3, wq times the strong momentum residual r_c
    double* R = sw + Q * 3;           // Newton: Q x 27 x 3, d S_i / d a_d

    for (int t = tid; t < Q; t += nt) wq[t] = wq_g[e * Q + t];
    for (int t = tid; t < Q * NV; t += nt) dN[t] = dN_g[e * Q * NV + t];
    for (int t = tid; t < Q * NN; t += nt) lap[t] = lap_g[e * Q * NN + t];
    for (int t = tid; t < Q * NM * 3; t += nt) dM[t] = dM_g[e * Q * NM * 3 + t];
    for (int t = tid; t < Q * 3; t += nt) {
        a[t] = a_g[e * Q * 3 + t];
        f[t] = f_g ? f_g[e * Q * 3 + t] : 0.0;
    }
    for (int t = tid; t < NV; t += nt) u[t] = u_g[e * NV + t];
    for (int t = tid; t < NM; t += nt) p[t] = p_g ? p_g[e * NM + t] : 0.0;
    for (int t = tid; t < NL; t += nt) {
        const int k = dofs ? dofs[e * NL + t] : 0;
        pin[t] = dofs && fixed[k] ? 1.0 / valence[k] : -1.0;
    }
    __syncthreads();

    // Per point and node: a . grad N_i, the test-function factors and, for Newton, d S_i / d a_d;
    // per point: grad a.
    for (int t = tid; t < Q * NN; t += nt) {
        const int q = t / NN;
        const double* g = dN + t * 3;
        const double v = a[q * 3] * g[0] + a[q * 3 + 1] * g[1] + a[q * 3 + 2] * g[2];
        const double ta = tau_g[e * Q * NN + t];
        const double S = ta * v;
        adv[t] = v;
        Wt[t] = (Nt[t] + S) * wq[q];
        St[t] = S * wq[q];
        if (derivative) {
#pragma unroll
            for (int d = 0; d < 3; ++d) R[t * 3 + d] = dtau_g[(e * Q * NN + t) * 3 + d] * v + ta * g[d];
        }
    }
    if (newton) {
        for (int t = tid; t < Q * 9; t += nt) {
            const int q = t / 9, c = (t / 3) % 3, d = t % 3;
            double s = 0.0;
            for (int j = 0; j < NN; ++j) s += u[j * 3 + c] * dN[(q * NN + j) * 3 + d];
            ga[t] = s;
        }
    }
    __syncthreads();
    if (derivative) {  // r_c = (a . grad) a_c - nu lap a_c + dp/dx_c - f_c + sigma a_c
        for (int t = tid; t < Q * 3; t += nt) {
            const int q = t / 3, c = t % 3;
            double conv = 0.0, visc = 0.0, pres = 0.0;
#pragma unroll
            for (int d = 0; d < 3; ++d) conv += ga[q * 9 + c * 3 + d] * a[q * 3 + d];
            for (int j = 0; j < NN; ++j) visc += u[j * 3 + c] * lap[q * NN + j];
#pragma unroll
            for (int l = 0; l < NM; ++l) pres += dM[(q * NM + l) * 3 + c] * p[l];
            sw[t] = wq[q] * (conv - nu * visc + pres - f[t] + sigma * a[t]);
        }
    }

    // The Picard blocks: K_ij, G_d,il and D_d,lj (module docstring of fem3d.discretisation.assembly).
    for (int t = tid; t < NN * NN + 3 * NN * NM; t += nt) {
        if (t < NN * NN) {
            const int i = t / NN, j = t % NN;
            double s = 0.0;
            for (int q = 0; q < Q; ++q) {
                const double* gi = dN + (q * NN + i) * 3;
                const double* gj = dN + (q * NN + j) * 3;
                s += Wt[q * NN + i] * adv[q * NN + j] + nu * wq[q] * (gi[0] * gj[0] + gi[1] * gj[1] + gi[2] * gj[2])
                     - nu * St[q * NN + i] * lap[q * NN + j] + sigma * Wt[q * NN + i] * Nt[q * NN + j];
            }
            K[t] = s;
        } else {
            const int r = t - NN * NN, d = r / (NN * NM), i = (r / NM) % NN, l = r % NM;
            double g = 0.0, dv = 0.0;
            for (int q = 0; q < Q; ++q) {
                const double m = Mt[q * NM + l] * wq[q];
                const double gq = dN[(q * NN + i) * 3 + d];
                g += St[q * NN + i] * dM[(q * NM + l) * 3 + d] - gq * m;
                dv += m * gq;
            }
            G[r] = g;
            D[(d * NM + l) * NN + i] = dv;
        }
    }
    __syncthreads();

    if (mats) {
        double* out = mats + e * NL * (long long)ld;
        // Velocity blocks (c, d): delta_cd K_ij, plus for Newton int (W_i da_c/dx_d + dS_i/da_d r_c) N_j (the
        // second term not where the test functions are frozen).
        for (int t = tid; t < NN * NN; t += nt) {
            const int i = t / NN, j = t % NN;
            double v[3][3] = {};
            if (newton) {
                for (int q = 0; q < Q; ++q) {
                    const double w = Wt[q * NN + i], n = Nt[q * NN + j];
                    const double* Rq = R + (q * NN + i) * 3;
                    const double* g = ga + q * 9;
                    const double* s = sw + q * 3;
#pragma unroll
                    for (int c = 0; c < 3; ++c)
#pragma unroll
                        for (int d = 0; d < 3; ++d)
                            v[c][d] += (w * g[c * 3 + d] + (derivative ? Rq[d] * s[c] : 0.0)) * n;
                }
            }
#pragma unroll
            for (int c = 0; c < 3; ++c) {
                const int row = c * NN + i;
#pragma unroll
                for (int d = 0; d < 3; ++d) {
                    const int col = d * NN + j;
                    const double value = v[c][d] + (c == d ? K[t] : 0.0);
                    out[row * ld + col] = pin[row] < 0.0 ? value : (row == col ? pin[row] : 0.0);
                }
            }
        }
        for (int t = tid; t < NV * NM; t += nt) {  // G: rows 27 d + i, columns 81 + l
            const int row = t / NM, col = NV + t % NM;
            out[row * ld + col] = pin[row] < 0.0 ? G[t] : 0.0;
        }
        for (int t = tid; t < NM * NL; t += nt) {  // D and the zero pressure block: rows 81 + l
            const int l = t / NL, col = t % NL, row = NV + l;
            const double value = col < NV ? D[((col / NN) * NM + l) * NN + col % NN] : 0.0;
            out[row * ld + col] = pin[row] < 0.0 ? value : (row == col ? pin[row] : 0.0);
        }
    }

    // Per row: the squared norm of the Picard row, the load and the residual A x_e - b_e.
    for (int r = tid; r < NL; r += nt) {
        double sq = 0.0, b = 0.0, res = 0.0;
        if (r < NV) {
            const int c = r / NN, i = r % NN;
            for (int j = 0; j < NN; ++j) {
                const double k = K[i * NN + j];
                sq += k * k;
                res += k * u[j * 3 + c];
            }
#pragma unroll
            for (int l = 0; l < NM; ++l) {
                const double g = G[r * NM + l];
                sq += g * g;
                res += g * p[l];
            }
            for (int q = 0; q < Q; ++q) b += Wt[q * NN + i] * f[q * 3 + c];
        } else {
            const int l = r - NV;
            for (int d = 0; d < 3; ++d)
                for (int j = 0; j < NN; ++j) {
                    const double v = D[(d * NM + l) * NN + j];
                    sq += v * v;
                    res += v * u[j * 3 + d];
                }
        }
        row_sq[e * NL + r] = sq;
        load[e * NL + r] = b;
        if (residual) residual[e * NL + r] = res - b;
    }
}
