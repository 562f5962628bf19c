// The GEMV's kernels for Bf16 weights (gemv_kernel.cuh).
#include "kernels/gemm/gemv_kernel.cuh"

namespace llm::kernels::gemv_internal {

cudaError_t LaunchBf16(const GemvParams& p, cudaStream_t stream) {
  return LaunchKind<kWBf16>(p, stream);
}

}  // namespace llm::kernels::gemv_internal
