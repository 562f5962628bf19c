#include "kernels/common.cuh"
#include "kernels/elementwise/activation.h"
#include "kernels/elementwise/fp8_row_kernel.cuh"
#include "kernels/launch.cuh"

namespace llm::kernels {
namespace {

// Fp8RowKernel's source: silu(gate) * up of a gate/up row.
struct SiluMulRows {
  const __nv_bfloat16* gate_up;
  int32_t inter;
  __device__ float4 Values(int32_t r, int32_t i) const {
    const __nv_bfloat16* g = gate_up + static_cast<int64_t>(r) * 2 * inter + i;
    const __nv_bfloat16* u = g + inter;
    return make_float4(
        SiluTimes(ToFloat(g[0]), ToFloat(u[0])), SiluTimes(ToFloat(g[1]), ToFloat(u[1])),
        SiluTimes(ToFloat(g[2]), ToFloat(u[2])), SiluTimes(ToFloat(g[3]), ToFloat(u[3])));
  }
};

__global__ void SiluMulKernel(SiluMulParams p) {
  AfterPriorGrids();  // launch.cuh: before reading what earlier kernels wrote
  const int64_t n = static_cast<int64_t>(p.rows) * p.inter;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = k / p.inter, i = k % p.inter;
    const __nv_bfloat16* row = p.gate_up + r * 2 * p.inter;
    const float g = ToFloat(row[i]);
    const float u = ToFloat(row[p.inter + i]);
    p.out[k] = ToBf16(SiluTimes(g, u));
  }
}

}  // namespace

cudaError_t LaunchSiluMul(const SiluMulParams& p, cudaStream_t stream) {
  if (p.fp8.on())
    return LaunchFp8Rows(SiluMulRows{p.gate_up, p.inter}, p.rows, p.inter, p.fp8, stream);
  const int64_t n = static_cast<int64_t>(p.rows) * p.inter;
  if (n <= 0) return cudaSuccess;
  const int blocks = static_cast<int>(n / 256 + 1 < 65535 ? n / 256 + 1 : 65535);
  return Launch(SiluMulKernel, blocks, 256, 0, stream, p);
}

}  // namespace llm::kernels
