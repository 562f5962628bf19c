// The end of a split decode attention, shared by its two kernels (attention.cu on CUDA cores,
// attention_mma.cu on tensor cores): a chunk's block, having written its partials (out, max in
// natural-log units, sum), counts itself in; the last chunk of a (row, KV head) to arrive
// combines the head group's chunks, in chunk order, and writes the output. Internal to kernels/.
#ifndef LLM_KERNELS_ATTENTION_ATTENTION_SPLIT_CUH_
#define LLM_KERNELS_ATTENTION_ATTENTION_SPLIT_CUH_

#include <cfloat>
#include <cstdint>

#include "kernels/attention/attention.h"
#include "kernels/common.cuh"

namespace llm::kernels {

// Called by every thread of the block after its partials are written: true in the last chunk
// of (row, KV head) to arrive, which also puts the counter back to zero for the next launch.
// `flag` is one int of shared memory.
__device__ __forceinline__ bool LastChunkToArrive(const AttentionParams& p, int32_t local_row,
                                                  int32_t kv_head, int32_t pos, int* flag) {
  __threadfence();
  __syncthreads();
  int32_t* arrivals = p.split_arrivals + static_cast<int64_t>(local_row) * p.num_kv_heads + kv_head;
  if (threadIdx.x == 0) {
    const int32_t used = UsedChunks(pos, p.sliding_window, p.splits);
    *flag = atomicAdd(arrivals, 1) == used - 1 ? 1 : 0;
  }
  __syncthreads();
  if (*flag == 0) return false;
  __threadfence();
  if (threadIdx.x == 0) *arrivals = 0;
  return true;
}

// The combine, for blocks of kThreads threads: a warp per head takes its chunks' maxima and
// sums, lane c holding chunks c, c + 32, ... (all their loads in flight at once), and reduces
// them by butterfly into head_m and head_l (G floats of shared memory each), writing every
// chunk's scale into `scale` (G * kMaxAttentionSplits floats of shared memory); then each
// thread sums its (head, dim) outputs over the chunks in chunk order, the loads of all its
// outputs for a chunk issued together. Reads with __ldcg: other blocks wrote the partials.
// Called by every thread of the block; G <= G_MAX.
template <int D, int kThreads, int G_MAX>
__device__ void CombineChunks(const AttentionParams& p, int32_t local_row, int32_t row,
                              int32_t kv_head, int32_t G, int32_t pos, float* head_m, float* head_l,
                              float* scale) {
  constexpr int kPerThread = (G_MAX * D + kThreads - 1) / kThreads;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int32_t parts = UsedChunks(pos, p.sliding_window, p.splits);
  const int64_t base0 = (static_cast<int64_t>(local_row) * p.num_heads + kv_head * G) * p.splits;
  for (int g = warp; g < G; g += kThreads / 32) {
    const float* part_max = p.partial_max + base0 + static_cast<int64_t>(g) * p.splits;
    const float* part_sum = p.partial_sum + base0 + static_cast<int64_t>(g) * p.splits;
    float m = -FLT_MAX;
    for (int c = lane; c < parts; c += 32) m = fmaxf(m, __ldcg(part_max + c));
    m = WarpMax(m);
    float total = 0.0f;
    for (int c = lane; c < parts; c += 32) {
      const float f = __expf(__ldcg(part_max + c) - m);
      scale[g * parts + c] = f;
      total = fmaf(f, __ldcg(part_sum + c), total);
    }
    total = GroupSum(total, 32);
    if (lane == 0) {
      head_m[g] = m;
      head_l[g] = total;
    }
  }
  __syncthreads();
  float o[kPerThread];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) o[i] = 0.0f;
  const float* part_out = p.partial_out + base0 * D;
#pragma unroll 4
  for (int c = 0; c < parts; ++c) {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int k = tid + i * kThreads;
      if (k < G * D) {
        const int g = k / D, d = k % D;
        o[i] = fmaf(scale[g * parts + c],
                    __ldcg(part_out + (static_cast<int64_t>(g) * p.splits + c) * D + d), o[i]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int k = tid + i * kThreads;
    if (k < G * D) {
      const int g = k / D, d = k % D;
      p.out[row * static_cast<int64_t>(p.num_heads) * D + (kv_head * G + g) * D + d] =
          ToBf16(o[i] / head_l[g]);
    }
  }
}

}  // namespace llm::kernels

#endif  // LLM_KERNELS_ATTENTION_ATTENTION_SPLIT_CUH_
