// RMSNorm's sum of squares in one fixed order, shared by the norm kernel (rmsnorm.cu) and the
// GEMV's norm prologue (gemv.cu) so that both reach the same inverse RMS, bit for bit, and so
// the same normed bf16 row.
//
// The order is that of a block of kRmsNormThreads threads over a row of n4 float4s: thread t
// sums, with fmaf, the squares of float4s t, t + kRmsNormThreads, t + 2 * kRmsNormThreads, ...
// in turn (x, y, z, w of each); each warp adds its 32 threads' sums with GroupSum; then the
// warps' sums, one per lane of a warp (zeros in the other lanes), are added with GroupSum.
#ifndef LLM_KERNELS_ELEMENTWISE_RMSNORM_CUH_
#define LLM_KERNELS_ELEMENTWISE_RMSNORM_CUH_

#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/elementwise/rmsnorm_order.h"

namespace llm::kernels {

// s + v.x² + v.y² + v.z² + v.w², one fmaf at a time.
__device__ __forceinline__ float AddSquares(const float4& v, float s) {
  s = fmaf(v.x, v.x, s);
  s = fmaf(v.y, v.y, s);
  s = fmaf(v.z, v.z, s);
  return fmaf(v.w, v.w, s);
}

// 1 / rms from the row's sum of squares.
__device__ __forceinline__ float RmsInverse(float sum_squares, int32_t dim, float eps) {
  return rsqrtf(sum_squares / dim + eps);
}

// The block's sum from one warp: lane l plays threads l, l + 32, ..., l + 224
// (RmsNormThreadOfLane), keeping each one's sum apart, then adds them warp by warp as BlockSum
// does. Every lane gets the result.
// `row` is read through the read-only cache (the other warps of a block read it too).
__device__ __forceinline__ float RmsSumSquaresInWarp(const float4* row, int32_t n4) {
  constexpr int kWarps = kRmsNormWarps;
  const int lane = threadIdx.x % 32;
  float part[kWarps];
#pragma unroll
  for (int w = 0; w < kWarps; ++w) part[w] = 0.0f;
  for (int32_t round = 0; RmsNormVector(0, round) < n4; ++round) {
    float4 v[kWarps];  // every load of the round in flight before the sums
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const int32_t i = RmsNormVector(RmsNormThreadOfLane(lane, w), round);
      v[w] = i < n4 ? __ldg(row + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int w = 0; w < kWarps; ++w) part[w] = AddSquares(v[w], part[w]);
  }
  float mine = 0.0f;  // BlockSum's second stage: warp w's sum in lane w
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    const float sum = GroupSum(part[w], 32);
    if (lane == w) mine = sum;
  }
  return GroupSum(mine, 32);
}

}  // namespace llm::kernels

#endif  // LLM_KERNELS_ELEMENTWISE_RMSNORM_CUH_
