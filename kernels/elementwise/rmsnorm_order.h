// The order of RMSNorm's sum of squares (rmsnorm.cuh), as index maps shared by the norm kernel,
// the GEMV's norm prologue and the host test that emulates both (tests/kernels/
// rmsnorm_order_test.cc): a block of kRmsNormThreads threads, thread t adding the float4s
// RmsNormVector(t, 0), RmsNormVector(t, 1), ... in turn; a warp of the GEMV plays the block,
// its lane l taking thread RmsNormThreadOfLane(l, w) in slot w.
#ifndef LLM_KERNELS_ELEMENTWISE_RMSNORM_ORDER_H_
#define LLM_KERNELS_ELEMENTWISE_RMSNORM_ORDER_H_

#include <cuda_runtime.h>

#include <cstdint>

namespace llm::kernels {

inline constexpr int kRmsNormThreads = 256;
inline constexpr int kRmsNormWarps = kRmsNormThreads / 32;

// The float4 of the row that thread `thread` adds in round `round`.
__host__ __device__ constexpr int32_t RmsNormVector(int32_t thread, int32_t round) {
  return thread + round * kRmsNormThreads;
}

// The thread of the norm's block that lane `lane` of a warp plays in its slot `slot`
// (0 to kRmsNormWarps - 1): slot w is warp w of the block.
__host__ __device__ constexpr int32_t RmsNormThreadOfLane(int32_t lane, int32_t slot) {
  return slot * 32 + lane;
}

// How many float4s each thread of the norm kernel holds for a row of n4 float4s (its template
// argument: 1, 2, 4 or 8); 0 for a row too wide for registers (the strided kernel then).
__host__ __device__ constexpr int RmsNormVecFloat4s(int32_t n4) {
  const int32_t per_thread = (n4 + kRmsNormThreads - 1) / kRmsNormThreads;
  return per_thread <= 1 ? 1 : per_thread <= 2 ? 2 : per_thread <= 4 ? 4 : per_thread <= 8 ? 8 : 0;
}

}  // namespace llm::kernels

#endif  // LLM_KERNELS_ELEMENTWISE_RMSNORM_ORDER_H_
