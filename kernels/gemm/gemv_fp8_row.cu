// The GEMV's kernels for Fp8Row weights (gemv_kernel.cuh).
#include "kernels/gemm/gemv_kernel.cuh"

namespace llm::kernels::gemv_internal {

cudaError_t LaunchFp8Row(const GemvParams& p, cudaStream_t stream) {
  return LaunchKind<kWFp8Row>(p, stream);
}

}  // namespace llm::kernels::gemv_internal
