// Element matrices as the fem3d kernels read them: (E, NL, LD) row-major entries of type
// MAT_T, double or float; or, with ROW_SCALE, __half entries H scaled per row: element e's
// entry (i, j) is scale[e * NL + i] * H[e][i][j], scale (E, NL) float32. LD, MAT_T and
// ROW_SCALE come from fem3d.kernels.ebe.matrix_options.
#pragma once

#define NL 89
#ifndef LD
#define LD 89
#endif
#ifndef MAT_T
#define MAT_T double
#endif
#ifdef ROW_SCALE
#include <cuda_fp16.h>
#endif

// A stored entry as a double (exact for every MAT_T): every read of a matrix goes through it.
__device__ __forceinline__ double mat_entry(double v) { return v; }
__device__ __forceinline__ double mat_entry(float v) { return v; }
#ifdef ROW_SCALE
__device__ __forceinline__ double mat_entry(__half v) { return __half2float(v); }
#endif

// The scale of row i (e * NL + local row) of the element matrices: scale[i] with ROW_SCALE,
// else 1 and ``scale`` is never read (it may be null).
__device__ __forceinline__ double row_scale(const float* __restrict__ scale, long i)
{
#ifdef ROW_SCALE
    return scale[i];
#else
    return 1.0;
#endif
}
