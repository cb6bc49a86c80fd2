// Element matrices as the fem3d kernels read them: (E, NL, LD) row-major entries of type
// MAT_T (double or float). LD and MAT_T come from fem3d.kernels.ebe.matrix_options.
#pragma once

#define NL 89
#ifndef LD
#define LD 89
#endif
#ifndef MAT_T
#define MAT_T double
#endif
