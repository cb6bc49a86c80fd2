// The small least-squares problem at the end of a fixed number of GMRES steps, solved on
// the device so that smoothing reads nothing back (fem3d.kernels.hessenberg has the
// NumPy reference and the rules).
//
// H  (m + 1, m + 1) row-major: columns 0..m-1 the Hessenberg matrix of the Arnoldi
//    process, H[0][m] = beta (the norm of the starting residual); not modified
// y  (m,) the coefficients, written

extern "C" __global__ void hessenberg_lstsq(const double* __restrict__ H, double* __restrict__ y, int m)
{
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    const int ld = m + 1;
    const double beta = H[m];
    for (int j = 0; j < m; ++j) y[j] = 0.0;
    if (!(beta > 0.0)) {  // 0: nothing to correct; NaN: the correction is NaN
        if (beta != 0.0) for (int j = 0; j < m; ++j) y[j] = nan("");
        return;
    }
    int k = m;
    for (int j = 0; j < m; ++j) {
        for (int i = 0; i <= j + 1; ++i) {
            if (!isfinite(H[i * ld + j])) {
                for (int t = 0; t < m; ++t) y[t] = nan("");
                return;
            }
        }
        if (H[(j + 1) * ld + j] <= 1e-14 * beta) { k = j + 1; break; }
    }
    // Givens rotations reduce H[:k+1, :k] to upper triangular R (kept in r), g = Q^T beta e1
    double r[32 * 32], g[33], c[32], s[32];
    for (int j = 0; j < k; ++j) {
        for (int i = 0; i <= j + 1; ++i) r[i * 32 + j] = H[i * ld + j];
        for (int i = 0; i < j; ++i) {
            const double a = r[i * 32 + j], b = r[(i + 1) * 32 + j];
            r[i * 32 + j] = c[i] * a + s[i] * b;
            r[(i + 1) * 32 + j] = -s[i] * a + c[i] * b;
        }
        const double a = r[j * 32 + j], b = r[(j + 1) * 32 + j], d = hypot(a, b);
        c[j] = d > 0.0 ? a / d : 1.0;
        s[j] = d > 0.0 ? b / d : 0.0;
        r[j * 32 + j] = d;
    }
    g[0] = beta;
    for (int j = 0; j < k; ++j) {
        g[j + 1] = -s[j] * g[j];
        g[j] = c[j] * g[j];
    }
    for (int i = k - 1; i >= 0; --i) {  // back substitution; a zero pivot leaves its coefficient 0
        double v = g[i];
        for (int j = i + 1; j < k; ++j) v -= r[i * 32 + j] * y[j];
        y[i] = r[i * 32 + i] != 0.0 ? v / r[i * 32 + i] : 0.0;
    }
}
