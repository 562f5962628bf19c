#include "kernels/common.cuh"
#include "kernels/elementwise/activation.h"
#include "kernels/launch.cuh"

namespace llm::kernels {
namespace {

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
  const int64_t n = static_cast<int64_t>(p.rows) * p.inter;
  if (n <= 0) return cudaSuccess;
  const int blocks = static_cast<int>(n / 256 + 1 < 65535 ? n / 256 + 1 : 65535);
  return Launch(SiluMulKernel, blocks, 256, 0, stream, p);
}

}  // namespace llm::kernels
