// Sums into a vector by a fixed index array without atomics (fem3d.kernels.scatter has the
// plan and the NumPy reference): out[targets[t]] += sum of values[order[k]] for
// starts[t] <= k < starts[t + 1], in increasing k, one thread per target, so every run
// gives the same bits.

extern "C" __global__ void __launch_bounds__(256)
segment_sum(const double* __restrict__ values, const int* __restrict__ order, const int* __restrict__ starts,
            const int* __restrict__ targets, double* __restrict__ out, int n_targets)
{
    const int t = blockIdx.x * 256 + threadIdx.x;
    if (t >= n_targets) return;
    double s = 0.0;
    for (int k = starts[t]; k < starts[t + 1]; ++k) s += values[order[k]];
    out[targets[t]] += s;
}

// out[targets[t]] = (out[targets[t]] if accumulate, else 0) + values[order[k]] for
// starts[t] <= k < starts[t + 1], added one at a time in increasing k: the bits of adding
// each value to out in turn (fem3d.kernels.ebe's products by colours).
extern "C" __global__ void __launch_bounds__(256)
segment_fold(const double* __restrict__ values, const int* __restrict__ order, const int* __restrict__ starts,
             const int* __restrict__ targets, double* __restrict__ out, int n_targets, int accumulate)
{
    const int t = blockIdx.x * 256 + threadIdx.x;
    if (t >= n_targets) return;
    double s = accumulate ? out[targets[t]] : 0.0;
    for (int k = starts[t]; k < starts[t + 1]; ++k) s += values[order[k]];
    out[targets[t]] = s;
}
