#include "kernels/common.cuh"
#include "kernels/launch.cuh"
#include "kernels/speculative/verify.h"

namespace llm::kernels {
namespace {

constexpr int kThreads = 128;

// A thread per sampling row; the first row of each group walks the group.
__global__ void __launch_bounds__(kThreads) VerifyKernel(VerifyParams p) {
  AfterPriorGrids();  // launch.cuh: before reading what earlier kernels wrote
  const int32_t r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= p.rows || p.row_offset[r] != 0) return;
  VerifyGroup(p, r);
}

}  // namespace

cudaError_t LaunchVerify(const VerifyParams& p, cudaStream_t stream) {
  if (p.rows <= 0) return cudaSuccess;
  if (p.row_offset == nullptr) return cudaErrorInvalidValue;
  return Launch(VerifyKernel, CeilDiv(p.rows, kThreads), kThreads, 0, stream, p);
}

}  // namespace llm::kernels
