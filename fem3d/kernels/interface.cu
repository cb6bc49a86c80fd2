// Completing interface sums between ranks: after the neighbours' partial sums arrived
// in recv, every interface entry becomes the sum of all ranks' partial sums, added in
// increasing rank order (so the copies on different ranks agree to the last bit).
//
// v      (n,) this rank's vector; entry iface[j] is interface slot j
// recv   what the peers sent, concatenated
// ptr    (n_iface + 1,) slot j's contributions are src[ptr[j] .. ptr[j+1]), in rank order
// src    -1: this rank's own partial sum v[iface[j]]; k >= 0: recv[k]

extern "C" __global__ void interface_combine(double* __restrict__ v, const int* __restrict__ iface,
                                             const double* __restrict__ recv, const int* __restrict__ ptr,
                                             const int* __restrict__ src, int n_iface)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n_iface) return;
    const int i = iface[j];
    const double own = v[i];
    double acc = 0.0;
    for (int k = ptr[j]; k < ptr[j + 1]; ++k) {
        const int s = src[k];
        acc += s < 0 ? own : recv[s];
    }
    v[i] = acc;
}
