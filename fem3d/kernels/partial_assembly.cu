// Products of the Q2-Q1 SUPG Navier-Stokes operator (Picard matrix or Newton Jacobian) by
// sum factorisation from the point data of fem3d.solvers.partial_assembly: the math of
// products_numpy in fem3d.kernels.partial_assembly, fused with the gather of x, the
// prescribed rows and the scatter-add into out. One launch per colour.
//
// exact, rounded  the point data: fields in the order of FIELDS in
//         fem3d.kernels.partial_assembly (offsets below), those before F_ROUNDED in exact
//         (F_ROUNDED, 27, ld) double, the others in rounded (F - F_ROUNDED, 27, ld) of type
//         POINT (float, or double; a compile option), read as double; Gauss points in
//         tensor order, elements last (ld >= E, a multiple of EB: each (field, point) row
//         starts 32-byte aligned)
// dofs    (E, NL) int32 unknown of each local unknown: 27 u, 27 v, 27 w, 8 p
// tables  (39,) the 1D tables: Q2 (3, 3, 3) [order][point][node], then Q1 (2, 3, 2)
// pres    (n,) diagonal 1/S_k of prescribed unknown k, 0 on free unknowns
// x, out  (n,) float64, distinct arrays; out += sum_e C_e^T A_e C_e x (or A_e^T) over the
//         elements e0 <= e < e0 + count, one colour: no two of them share an unknown
// nu      1 / Re; sigma the time step's coefficient of the new velocity (0: steady)
//
// One block of EB x 27 threads takes EB elements e0 + EB blockIdx.x + threadIdx.x:
// threadIdx.x the element (fastest, so a warp reads 4 Gauss points x EB consecutive
// elements of a field: per point one whole 32-byte sector of float data, two of double,
// when e0 is a multiple of 8; any e0 is correct), threadIdx.y the node or Gauss point (both
// 3 x 3 x 3). Each 1D contraction of the sum factorisation is one step: every
// thread computes its position's output from a line of 3 (or 2) values in shared
// memory, then the block synchronises.
// Shared fields are (field, position, element), element fastest.
//
// The scatter is a plain read-add-write, deterministic: thread (element, t) adds rows
// t, 27 + t, 54 + t (and 81 + t, t < 8) of its element, the element's 89 unknowns are
// distinct and the colour's elements share none, so no entry of out is written twice in
// a launch; the launches of the colours follow each other in a fixed order.

#ifndef EB
#define EB 8
#endif
#ifndef POINT
#define POINT double
#endif
#ifndef F_ROUNDED
#define F_ROUNDED 10  // fields stored as POINT from here on (fem3d.kernels.partial_assembly.EXACT)
#endif
#define NQ 27
#define NL 89
#define W_FIELDS 22  // shared work fields per element (the forward test step needs the most)

// Field offsets in points (the first dimension).
#define F_JINV 0     // (3, 3) d xi_k / d x_i
#define F_WQ 9       // weight * det J
#define F_METRIC 10  // (6) packed 00, 11, 22, 01, 02, 12
#define F_CURV 16    // (3)
#define F_ADV 19     // (3) reference velocity
#define F_TAU 22     // (4) tau_m
#define F_GRAD_A 26  // Newton: (3, 3) d a_c / d x_d
#define F_STRONG 35  // Newton: (3) strong residual r
#define F_DTAU 38    // Newton: (4, 3) d tau_m / d a_d

// Shared state of one element, as seen by one of its threads.
struct Element {
    double* xs;      // (96) the local vector
    double* w;       // (W_FIELDS, 27) work fields
    const double* t2;  // Q2 table [o][q][n] at o * 9 + q * 3 + n
    const double* t1;  // Q1 table [o][q][n] at o * 6 + q * 2 + n
    __device__ double* field(int f) const { return w + f * NQ * EB; }
};

// sum_j c[j * cs] * f[(p0 + j * stride) * EB]: one 1D contraction at one position.
__device__ __forceinline__ double line(const double* f, int p0, int stride, const double* c, int cs, int len)
{
    double s = 0.0;
    for (int j = 0; j < len; ++j) s += c[j * cs] * f[(p0 + j * stride) * EB];
    return s;
}

// Value, gradient and Hessian (00, 11, 22, 01, 02, 12) at Gauss point t of velocity
// component c: d[0], d[1 + k], d[4 + h].
__device__ __forceinline__ void interpolate_velocity(const Element& s, int c, int t, double d[10])
{
    const int ix = t % 3, iy = (t / 3) % 3, iz = t / 9;
    double* const X = s.field(0);  // 3 orders along x
    double* const Y = s.field(3);  // 6 (oy, ox): 00, 01, 02, 10, 11, 20
    const double* u = s.xs + c * NQ * EB;
#pragma unroll
    for (int o = 0; o < 3; ++o) X[(o * NQ + t) * EB] = line(u, t - ix, 1, s.t2 + o * 9 + ix * 3, 1, 3);
    __syncthreads();
    const int oy[6] = {0, 0, 0, 1, 1, 2}, ox[6] = {0, 1, 2, 0, 1, 0};
#pragma unroll
    for (int k = 0; k < 6; ++k) Y[(k * NQ + t) * EB] = line(X + ox[k] * NQ * EB, t - 3 * iy, 3, s.t2 + oy[k] * 9 + iy * 3, 1, 3);
    __syncthreads();
    const int oz[10] = {0, 0, 0, 1, 0, 0, 2, 0, 1, 1}, y[10] = {0, 1, 3, 0, 2, 5, 0, 4, 1, 3};
#pragma unroll
    for (int r = 0; r < 10; ++r) d[r] = line(Y + y[r] * NQ * EB, t - 9 * iz, 9, s.t2 + oz[r] * 9 + iz * 3, 1, 3);
    __syncthreads();
}

// Pressure value at Gauss point t, and with ``gradient`` its reference gradient.
__device__ __forceinline__ void interpolate_pressure(const Element& s, int t, bool gradient, double p[4])
{
    double* const X = s.field(0);  // orders 0, 1 along x at (iz < 2, iy < 2, qx)
    double* const Y = s.field(2);  // (oy, ox) 00, 01, 10 at (iz < 2, qy, qx)
    const int no = gradient ? 2 : 1;
    if (t < 12) {
        const int qx = t % 3, iy = (t / 3) % 2, iz = t / 6, pos = iz * 9 + iy * 3 + qx;
        for (int o = 0; o < no; ++o) X[(o * NQ + pos) * EB] = line(s.xs + 81 * EB, iz * 4 + iy * 2, 1, s.t1 + o * 6 + qx * 2, 1, 2);
    }
    __syncthreads();
    if (t < 18) {
        const int qy = (t / 3) % 3;
        for (int k = 0; k < (gradient ? 3 : 1); ++k)
            Y[(k * NQ + t) * EB] = line(X + (k == 1) * NQ * EB, t - 3 * qy, 3, s.t1 + (k == 2) * 6 + qy * 2, 1, 2);
    }
    __syncthreads();
    const int qz = t / 9;
    p[0] = line(Y, t - 9 * qz, 9, s.t1 + qz * 2, 1, 2);
    if (gradient) {
        p[1] = line(Y + NQ * EB, t - 9 * qz, 9, s.t1 + qz * 2, 1, 2);
        p[2] = line(Y + 2 * NQ * EB, t - 9 * qz, 9, s.t1 + qz * 2, 1, 2);
        p[3] = line(Y, t - 9 * qz, 9, s.t1 + 6 + qz * 2, 1, 2);
    }
    __syncthreads();
}

// Node t's entry of the test of one velocity component with the fields
// f = (value, G_0 (3), G_1 (3), G_2 (3), G_3 (3)) at Gauss point t: sum over the points of
// N_t f_value + sum_k dN_t/dxi_k (G_0k + sum_m mask_m(t) G_mk), class m = 1, 2, 3 being
// the nodes in the middle along x, y, z: its mask enters at the contraction along
// that direction (z, y, x in turn).
__device__ __forceinline__ double test_velocity(const Element& s, int t, const double f[13])
{
    const int i0 = t % 3, i1 = (t / 3) % 3, i2 = t / 9;
#pragma unroll
    for (int k = 0; k < 13; ++k) s.field(k)[t * EB] = f[k];
    __syncthreads();
    {  // along z: position (nz, qy, qx); A_m(00, 01, 10): the x, y tables still to apply (value or derivative)
        const int p0 = t - 9 * i2;
        const double *c0 = s.t2 + i2, *c1 = s.t2 + 9 + i2;
        double a0 = line(s.field(0), p0, 9, c0, 3, 3) + line(s.field(3), p0, 9, c1, 3, 3);
        double a1 = line(s.field(1), p0, 9, c0, 3, 3), a2 = line(s.field(2), p0, 9, c0, 3, 3);
        if (i2 == 1) {
            a0 += line(s.field(12), p0, 9, c1, 3, 3);
            a1 += line(s.field(10), p0, 9, c0, 3, 3);
            a2 += line(s.field(11), p0, 9, c0, 3, 3);
        }
        double* const A = s.field(13) + t * EB;  // A_0, A_2, A_1: fields 13-15, 16-18, 19-21
        A[0] = a0;
        A[NQ * EB] = a1;
        A[2 * NQ * EB] = a2;
#pragma unroll
        for (int m = 0; m < 2; ++m) {  // classes 2 and 1: fields 7-9 and 4-6
            const int g = m == 0 ? 7 : 4;
            A[(3 + 3 * m) * NQ * EB] = line(s.field(g + 2), p0, 9, c1, 3, 3);
            A[(4 + 3 * m) * NQ * EB] = line(s.field(g), p0, 9, c0, 3, 3);
            A[(5 + 3 * m) * NQ * EB] = line(s.field(g + 1), p0, 9, c0, 3, 3);
        }
    }
    __syncthreads();
    {  // along y: position (nz, ny, qx); B_0, B_1 (x value, x derivative) in fields 0-1, 2-3
        const int p0 = t - 3 * i1;
        const double *c0 = s.t2 + i1, *c1 = s.t2 + 9 + i1;
        double b0 = line(s.field(13), p0, 3, c0, 3, 3) + line(s.field(15), p0, 3, c1, 3, 3);
        double b1 = line(s.field(14), p0, 3, c0, 3, 3);
        if (i1 == 1) {
            b0 += line(s.field(16), p0, 3, c0, 3, 3) + line(s.field(18), p0, 3, c1, 3, 3);
            b1 += line(s.field(17), p0, 3, c0, 3, 3);
        }
        const double b2 = line(s.field(19), p0, 3, c0, 3, 3) + line(s.field(21), p0, 3, c1, 3, 3);
        const double b3 = line(s.field(20), p0, 3, c0, 3, 3);
        s.field(0)[t * EB] = b0;
        s.field(1)[t * EB] = b1;
        s.field(2)[t * EB] = b2;
        s.field(3)[t * EB] = b3;
    }
    __syncthreads();
    const int p0 = t - i0;
    const double *c0 = s.t2 + i0, *c1 = s.t2 + 9 + i0;
    double y = line(s.field(0), p0, 1, c0, 3, 3) + line(s.field(1), p0, 1, c1, 3, 3);
    if (i0 == 1) y += line(s.field(2), p0, 1, c0, 3, 3) + line(s.field(3), p0, 1, c1, 3, 3);
    __syncthreads();
    return y;
}

// The transpose of test_velocity: the fields (value, G_0 (3), ..., G_3 (3)) at Gauss point
// t of velocity component c of the local vector: f_value the value, G_mk the derivative
// along k of the component restricted to the nodes of class m.
__device__ __forceinline__ void interpolate_velocity_by_class(const Element& s, int c, int t, double f[13])
{
    const int i0 = t % 3, i1 = (t / 3) % 3, i2 = t / 9;
    const double* u = s.xs + c * NQ * EB;
    {  // along x: position (nz, ny, qx); B_0, B_1 (all nodes, middle node along x) x (value, derivative)
        const double *c0 = s.t2 + i0 * 3, *c1 = s.t2 + 9 + i0 * 3;
        const double mid = u[(t - i0 + 1) * EB];
        s.field(0)[t * EB] = line(u, t - i0, 1, c0, 1, 3);
        s.field(1)[t * EB] = line(u, t - i0, 1, c1, 1, 3);
        s.field(2)[t * EB] = c0[1] * mid;
        s.field(3)[t * EB] = c1[1] * mid;
    }
    __syncthreads();
    {  // along y: position (nz, qy, qx); A_0, A_2, A_1 as (00, 01, 10) in fields 4-6, 7-9, 10-12
        const int p0 = t - 3 * i1;
        const double *c0 = s.t2 + i1 * 3, *c1 = s.t2 + 9 + i1 * 3;
        const double m0 = s.field(0)[(p0 + 3) * EB], m1 = s.field(1)[(p0 + 3) * EB];
        double* const A = s.field(4) + t * EB;
        A[0] = line(s.field(0), p0, 3, c0, 1, 3);
        A[NQ * EB] = line(s.field(1), p0, 3, c0, 1, 3);
        A[2 * NQ * EB] = line(s.field(0), p0, 3, c1, 1, 3);
        A[3 * NQ * EB] = c0[1] * m0;
        A[4 * NQ * EB] = c0[1] * m1;
        A[5 * NQ * EB] = c1[1] * m0;
        A[6 * NQ * EB] = line(s.field(2), p0, 3, c0, 1, 3);
        A[7 * NQ * EB] = line(s.field(3), p0, 3, c0, 1, 3);
        A[8 * NQ * EB] = line(s.field(2), p0, 3, c1, 1, 3);
    }
    __syncthreads();
    const int p0 = t - 9 * i2;
    const double *c0 = s.t2 + i2 * 3, *c1 = s.t2 + 9 + i2 * 3;
    const double m00 = s.field(4)[(p0 + 9) * EB], m01 = s.field(5)[(p0 + 9) * EB], m10 = s.field(6)[(p0 + 9) * EB];
    f[0] = line(s.field(4), p0, 9, c0, 1, 3);
    f[1] = line(s.field(5), p0, 9, c0, 1, 3);
    f[2] = line(s.field(6), p0, 9, c0, 1, 3);
    f[3] = line(s.field(4), p0, 9, c1, 1, 3);
#pragma unroll
    for (int m = 0; m < 2; ++m) {  // classes 1 and 2 from A_1, A_2
        const int a = m == 0 ? 10 : 7, g = m == 0 ? 4 : 7;
        f[g] = line(s.field(a + 1), p0, 9, c0, 1, 3);
        f[g + 1] = line(s.field(a + 2), p0, 9, c0, 1, 3);
        f[g + 2] = line(s.field(a), p0, 9, c1, 1, 3);
    }
    f[10] = c0[1] * m01;
    f[11] = c0[1] * m10;
    f[12] = c1[1] * m00;
    __syncthreads();
}

// The transpose of interpolate_velocity: node t's entry of sum over the points of
// N_t d[0] + dN_t/dxi_k d[1 + k] + d2N_t/dxi_h d[4 + h].
__device__ __forceinline__ double velocity_to_nodes(const Element& s, int t, const double d[10])
{
    const int i0 = t % 3, i1 = (t / 3) % 3, i2 = t / 9;
#pragma unroll
    for (int r = 0; r < 10; ++r) s.field(r)[t * EB] = d[r];
    __syncthreads();
    {  // along z: (oy, ox) 00, 01, 10, 02, 20, 11 in fields 10-15
        const int p0 = t - 9 * i2;
        const double *c0 = s.t2 + i2, *c1 = s.t2 + 9 + i2, *c2 = s.t2 + 18 + i2;
        double* const Y = s.field(10) + t * EB;
        Y[0] = line(s.field(0), p0, 9, c0, 3, 3) + line(s.field(3), p0, 9, c1, 3, 3) + line(s.field(6), p0, 9, c2, 3, 3);
        Y[NQ * EB] = line(s.field(1), p0, 9, c0, 3, 3) + line(s.field(8), p0, 9, c1, 3, 3);
        Y[2 * NQ * EB] = line(s.field(2), p0, 9, c0, 3, 3) + line(s.field(9), p0, 9, c1, 3, 3);
        Y[3 * NQ * EB] = line(s.field(4), p0, 9, c0, 3, 3);
        Y[4 * NQ * EB] = line(s.field(5), p0, 9, c0, 3, 3);
        Y[5 * NQ * EB] = line(s.field(7), p0, 9, c0, 3, 3);
    }
    __syncthreads();
    {  // along y: ox 0, 1, 2 in fields 0-2
        const int p0 = t - 3 * i1;
        const double *c0 = s.t2 + i1, *c1 = s.t2 + 9 + i1, *c2 = s.t2 + 18 + i1;
        s.field(0)[t * EB] = line(s.field(10), p0, 3, c0, 3, 3) + line(s.field(12), p0, 3, c1, 3, 3)
                             + line(s.field(14), p0, 3, c2, 3, 3);
        s.field(1)[t * EB] = line(s.field(11), p0, 3, c0, 3, 3) + line(s.field(15), p0, 3, c1, 3, 3);
        s.field(2)[t * EB] = line(s.field(13), p0, 3, c0, 3, 3);
    }
    __syncthreads();
    const int p0 = t - i0;
    const double y = line(s.field(0), p0, 1, s.t2 + i0, 3, 3) + line(s.field(1), p0, 1, s.t2 + 9 + i0, 3, 3)
                     + line(s.field(2), p0, 1, s.t2 + 18 + i0, 3, 3);
    __syncthreads();
    return y;
}

// The transpose of interpolate_pressure: pressure node t's (t < 8) entry of sum over the
// points of M_t p[0] (+ dM_t/dxi_k p[1 + k] with ``gradient``).
__device__ __forceinline__ double pressure_to_nodes(const Element& s, int t, bool gradient, const double p[4])
{
    const int nf = gradient ? 4 : 1;
    for (int k = 0; k < nf; ++k) s.field(k)[t * EB] = p[k];
    __syncthreads();
    if (t < 18) {  // along z: position (nz < 2, qy, qx); (oy, ox) 00, 01, 10 in fields 4-6
        const int nz = t / 9, p0 = t - 9 * nz;
        const double *c0 = s.t1 + nz, *c1 = s.t1 + 6 + nz;
        double y = line(s.field(0), p0, 9, c0, 2, 3);
        if (gradient) {
            y += line(s.field(3), p0, 9, c1, 2, 3);
            s.field(5)[t * EB] = line(s.field(1), p0, 9, c0, 2, 3);
            s.field(6)[t * EB] = line(s.field(2), p0, 9, c0, 2, 3);
        }
        s.field(4)[t * EB] = y;
    }
    __syncthreads();
    if (t < 12) {  // along y: position (nz, ny, qx); ox 0, 1 in fields 7-8
        const int qx = t % 3, ny = (t / 3) % 2, nz = t / 6, p0 = nz * 9 + qx, pos = p0 + 3 * ny;
        const double *c0 = s.t1 + ny, *c1 = s.t1 + 6 + ny;
        double y = line(s.field(4), p0, 3, c0, 2, 3);
        if (gradient) {
            y += line(s.field(6), p0, 3, c1, 2, 3);
            s.field(8)[pos * EB] = line(s.field(5), p0, 3, c0, 2, 3);
        }
        s.field(7)[pos * EB] = y;
    }
    __syncthreads();
    double y = 0.0;
    if (t < 8) {
        const int nx = t & 1, ny = (t >> 1) & 1, nz = t >> 2, p0 = nz * 9 + ny * 3;
        y = line(s.field(7), p0, 1, s.t1 + nx, 2, 3);
        if (gradient) y += line(s.field(8), p0, 1, s.t1 + 6 + nx, 2, 3);
    }
    __syncthreads();
    return y;
}

// The block's shared memory, the element's view of it, and the gather of x: thread t
// reads rows t, 27 + t, 54 + t (and 81 + t for t < 8) into xs, zero on prescribed rows
// of the transposed product (their entries off the diagonal are zero).
struct Gathered {
    int g[4];
    double x[4], pres[4];
};

#define PA_SHARED                                                              \
    __shared__ double s_xs[96 * EB], s_w[W_FIELDS * NQ * EB], s_tab[39];       \
    const int le = threadIdx.x, t = threadIdx.y;                               \
    const int k_in_colour = blockIdx.x * EB + le;                              \
    const bool valid = k_in_colour < count;                                    \
    const long e = (long)e0 + k_in_colour;                                     \
    if (t * EB + le < 39) s_tab[t * EB + le] = tables[t * EB + le];            \
    const Element s = {s_xs + le, s_w + le, s_tab, s_tab + 27};

__device__ __forceinline__ Gathered gather(const Element& s, int t, long e, bool valid, const int* dofs, const double* x,
                           const double* pres, bool transpose)
{
    Gathered r;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const int row = k * NQ + t;
        const bool load = valid && (k < 3 || t < 8);
        r.g[k] = load ? dofs[e * NL + row] : 0;
        r.x[k] = load ? x[r.g[k]] : 0.0;
        r.pres[k] = load ? pres[r.g[k]] : 0.0;
        if (k < 3 || t < 8) s.xs[row * EB] = transpose && r.pres[k] != 0.0 ? 0.0 : r.x[k];
    }
    __syncthreads();
    return r;
}

// Adds row results y (u, v, w at node t, and p at node t < 8) into out: on a prescribed
// row 1/S_k x_k instead (forward), or besides (transposed). Plain read-add-write: no
// other thread of the launch writes these entries (the colour, see the top).
__device__ __forceinline__ void scatter(const Gathered& r, int t, const double y[4], bool valid, bool transpose, double* out)
{
    if (!valid) return;
#pragma unroll
    for (int k = 0; k < (t < 8 ? 4 : 3); ++k) {
        const double v = transpose ? y[k] + r.pres[k] * r.x[k] : (r.pres[k] != 0.0 ? r.pres[k] * r.x[k] : y[k]);
        out[r.g[k]] += v;
    }
}

__device__ __forceinline__ double point(const double* exact, const POINT* rounded, int ld, int f, int t, long e,
                                        bool valid)
{
    if (!valid) return 0.0;
    return f < F_ROUNDED ? exact[((long)f * NQ + t) * ld + e]
                         : (double)rounded[((long)(f - F_ROUNDED) * NQ + t) * ld + e];
}

template <bool NEWTON>
__device__ __forceinline__ void apply(const double* __restrict__ exact, const POINT* __restrict__ rounded, int ld, const int* __restrict__ dofs,
                      int e0, int count, const double* __restrict__ tables, const double* __restrict__ pres,
                      const double* __restrict__ x, double* __restrict__ out, double nu,
                      double sigma)
{
    PA_SHARED
    const Gathered r = gather(s, t, e, valid, dofs, x, pres, false);
    double d[3][10], p[4];
    #pragma unroll
    for (int c = 0; c < 3; ++c) interpolate_velocity(s, c, t, d[c]);
    interpolate_pressure(s, t, true, p);
#define P(f) point(exact, rounded, ld, (f), t, e, valid)
    double jinv[3][3], adv[3], tau[4], v[3], R[3];
    #pragma unroll
    for (int k = 0; k < 3; ++k) {
        adv[k] = P(F_ADV + k);
        #pragma unroll
        for (int i = 0; i < 3; ++i) jinv[k][i] = P(F_JINV + 3 * k + i);
    }
    #pragma unroll
    for (int m = 0; m < 4; ++m) tau[m] = P(F_TAU + m);
    const double wq = P(F_WQ);
    double metric[6], curv[3];
    #pragma unroll
    for (int h = 0; h < 6; ++h) metric[h] = P(F_METRIC + h);
    #pragma unroll
    for (int k = 0; k < 3; ++k) curv[k] = P(F_CURV + k);
    #pragma unroll
    for (int c = 0; c < 3; ++c) {  // v = a . grad u_c (+ u . grad a_c) + sigma u_c; R = v - nu lap u_c + dp/dx_c
        double vc = 0.0, lap = 0.0, gp = 0.0;
        #pragma unroll
        for (int k = 0; k < 3; ++k) {
            vc += adv[k] * d[c][1 + k];
            lap -= curv[k] * d[c][1 + k];
            gp += p[1 + k] * jinv[k][c];
        }
        #pragma unroll
        for (int h = 0; h < 6; ++h) lap += (h < 3 ? 1.0 : 2.0) * metric[h] * d[c][4 + h];
        if (NEWTON)
            #pragma unroll
            for (int k = 0; k < 3; ++k) vc += P(F_GRAD_A + 3 * c + k) * d[k][0];
        vc += sigma * d[c][0];
        v[c] = vc;
        R[c] = vc - nu * lap + gp;
    }
    double strong[3] = {0.0, 0.0, 0.0}, dtu[4] = {0.0, 0.0, 0.0, 0.0}, ju[3] = {0.0, 0.0, 0.0};
    if (NEWTON) {
        #pragma unroll
        for (int c = 0; c < 3; ++c) strong[c] = P(F_STRONG + c);
        #pragma unroll
        for (int m = 0; m < 4; ++m)
            #pragma unroll
            for (int k = 0; k < 3; ++k) dtu[m] += P(F_DTAU + 3 * m + k) * d[k][0];
        #pragma unroll
        for (int k = 0; k < 3; ++k)
            #pragma unroll
            for (int i = 0; i < 3; ++i) ju[k] += jinv[k][i] * d[i][0];
    }
    double div = 0.0;
    #pragma unroll
    for (int k = 0; k < 3; ++k)
        #pragma unroll
        for (int c = 0; c < 3; ++c) div += d[c][1 + k] * jinv[k][c];
    const int sym[3][3] = {{0, 3, 4}, {3, 1, 5}, {4, 5, 2}};
    double y[4];
    #pragma unroll
    for (int c = 0; c < 3; ++c) {  // fields value, G_m (flux of class m along k, times wq)
        double f[13];
        f[0] = v[c] * wq;
        #pragma unroll
        for (int k = 0; k < 3; ++k) {
            const double X = wq * (adv[k] * R[c] + ju[k] * strong[c]), Y = wq * adv[k] * strong[c];
            #pragma unroll
            for (int m = 0; m < 4; ++m) f[1 + 3 * m + k] = tau[m] * X + dtu[m] * Y;
            double gal = -p[0] * jinv[k][c];
            #pragma unroll
            for (int l = 0; l < 3; ++l) gal += nu * metric[sym[k][l]] * d[c][1 + l];
            f[1 + k] += wq * gal;
        }
        y[c] = test_velocity(s, t, f);
    }
#undef P
    const double q[4] = {div * wq, 0.0, 0.0, 0.0};
    y[3] = pressure_to_nodes(s, t, false, q);
    scatter(r, t, y, valid, false, out);
}

template <bool NEWTON>
__device__ __forceinline__ void apply_t(const double* __restrict__ exact, const POINT* __restrict__ rounded, int ld, const int* __restrict__ dofs,
                        int e0, int count, const double* __restrict__ tables, const double* __restrict__ pres,
                        const double* __restrict__ x, double* __restrict__ out, double nu,
                      double sigma)
{
    PA_SHARED
    const Gathered r = gather(s, t, e, valid, dofs, x, pres, true);
    double z[3][13], p[4];
    #pragma unroll
    for (int c = 0; c < 3; ++c) interpolate_velocity_by_class(s, c, t, z[c]);
    interpolate_pressure(s, t, false, p);
#define P(f) point(exact, rounded, ld, (f), t, e, valid)
    double jinv[3][3], adv[3], tau[4];
    #pragma unroll
    for (int k = 0; k < 3; ++k) {
        adv[k] = P(F_ADV + k);
        #pragma unroll
        for (int i = 0; i < 3; ++i) jinv[k][i] = P(F_JINV + 3 * k + i);
    }
    #pragma unroll
    for (int m = 0; m < 4; ++m) tau[m] = P(F_TAU + m);
    const double wq = P(F_WQ);
    // sd (m, c) the duals of s, Rd of R, vd of v, div of div u
    double sd[4][3], Rd[3], vd[3];
    #pragma unroll
    for (int c = 0; c < 3; ++c) {
        Rd[c] = 0.0;
        #pragma unroll
        for (int m = 0; m < 4; ++m) {
            sd[m][c] = wq * (adv[0] * z[c][1 + 3 * m] + adv[1] * z[c][2 + 3 * m] + adv[2] * z[c][3 + 3 * m]);
            Rd[c] += tau[m] * sd[m][c];
        }
        vd[c] = z[c][0] * wq + Rd[c];
    }
    const double div = p[0] * wq;
    double q[4] = {0.0, 0.0, 0.0, 0.0};
    #pragma unroll
    for (int k = 0; k < 3; ++k)
        #pragma unroll
        for (int c = 0; c < 3; ++c) {
            q[0] -= wq * z[c][1 + k] * jinv[k][c];
            q[1 + k] += jinv[k][c] * Rd[c];
        }
    double u0[3] = {0.0, 0.0, 0.0};  // duals of the values of u
    if (NEWTON) {
        double strong[3], ts[3];  // ts_k = sum_{m,c} tau_m F_kmc r_c
        #pragma unroll
        for (int c = 0; c < 3; ++c) strong[c] = P(F_STRONG + c);
        #pragma unroll
        for (int k = 0; k < 3; ++k) {
            ts[k] = 0.0;
            #pragma unroll
            for (int m = 0; m < 4; ++m)
                #pragma unroll
                for (int c = 0; c < 3; ++c) ts[k] += tau[m] * wq * z[c][1 + 3 * m + k] * strong[c];
        }
        #pragma unroll
        for (int dd = 0; dd < 3; ++dd) {
            #pragma unroll
            for (int c = 0; c < 3; ++c) u0[dd] += P(F_GRAD_A + 3 * c + dd) * vd[c];
            #pragma unroll
            for (int m = 0; m < 4; ++m) {
                double rs = 0.0;
                #pragma unroll
                for (int c = 0; c < 3; ++c) rs += strong[c] * sd[m][c];
                u0[dd] += P(F_DTAU + 3 * m + dd) * rs;
            }
            #pragma unroll
            for (int k = 0; k < 3; ++k) u0[dd] += jinv[k][dd] * ts[k];
        }
    }
    #pragma unroll
    for (int c = 0; c < 3; ++c) u0[c] += sigma * vd[c];
    double metric[6], curv[3];
    #pragma unroll
    for (int h = 0; h < 6; ++h) metric[h] = P(F_METRIC + h);
    #pragma unroll
    for (int k = 0; k < 3; ++k) curv[k] = P(F_CURV + k);
#undef P
    const int sym[3][3] = {{0, 3, 4}, {3, 1, 5}, {4, 5, 2}};
    double y[4];
    #pragma unroll
    for (int c = 0; c < 3; ++c) {
        double dual[10];
        dual[0] = u0[c];
        #pragma unroll
        for (int k = 0; k < 3; ++k) {
            double g = nu * curv[k] * Rd[c] + adv[k] * vd[c] + div * jinv[k][c];
            #pragma unroll
            for (int l = 0; l < 3; ++l) g += nu * metric[sym[k][l]] * wq * z[c][1 + l];
            dual[1 + k] = g;
        }
        #pragma unroll
        for (int h = 0; h < 6; ++h) dual[4 + h] = -nu * (h < 3 ? 1.0 : 2.0) * metric[h] * Rd[c];
        y[c] = velocity_to_nodes(s, t, dual);
    }
    y[3] = pressure_to_nodes(s, t, true, q);
    scatter(r, t, y, valid, true, out);
}

#define PA_ARGS                                                                                          \
    const double* __restrict__ exact, const POINT* __restrict__ rounded, int ld, const int* __restrict__ dofs,       \
        int e0, int count,                                                                              \
        const double* __restrict__ tables, const double* __restrict__ pres, const double* __restrict__ x, \
        double* __restrict__ out, double nu, double sigma
#define PA_PASS exact, rounded, ld, dofs, e0, count, tables, pres, x, out, nu, sigma

extern "C" __global__ void __launch_bounds__(EB * NQ) pa_picard(PA_ARGS) { apply<false>(PA_PASS); }
extern "C" __global__ void __launch_bounds__(EB * NQ) pa_newton(PA_ARGS) { apply<true>(PA_PASS); }
extern "C" __global__ void __launch_bounds__(EB * NQ) pa_picard_t(PA_ARGS) { apply_t<false>(PA_PASS); }
extern "C" __global__ void __launch_bounds__(EB * NQ) pa_newton_t(PA_ARGS) { apply_t<true>(PA_PASS); }
