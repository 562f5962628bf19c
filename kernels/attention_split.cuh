// The end of a split decode attention, shared by its two kernels (attention.cu on CUDA cores,
// attention_mma.cu on tensor cores): a chunk's block, having written its partials (out, max in
// natural-log units, sum), counts itself in; the last chunk of a (row, KV head) to arrive
// combines the head group's chunks, in chunk order, and writes the output. Internal to kernels/.
#ifndef LLM_KERNELS_ATTENTION_SPLIT_CUH_
#define LLM_KERNELS_ATTENTION_SPLIT_CUH_

#include <cfloat>
#include <cstdint>

#include "kernels/attention.h"
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

// The combine: per head the chunks' maximum and weighted sum (into head_m, head_l: G floats of
// shared memory each), then every chunk's scale (into `scale`: G * kMaxAttentionSplits floats of
// shared memory), then each (head, dim) output. Reads with __ldcg: other blocks wrote the
// partials. Called by every thread of the block.
template <int D>
__device__ void CombineChunks(const AttentionParams& p, int32_t local_row, int32_t row,
                              int32_t kv_head, int32_t G, int32_t pos, float* head_m, float* head_l,
                              float* scale) {
  const int tid = threadIdx.x, threads = blockDim.x;
  const int32_t parts = UsedChunks(pos, p.sliding_window, p.splits);
  const int64_t base0 = (static_cast<int64_t>(local_row) * p.num_heads + kv_head * G) * p.splits;
  if (tid < G) {
    const int64_t base = base0 + static_cast<int64_t>(tid) * p.splits;
    float m = -FLT_MAX;
    for (int c = 0; c < parts; ++c) m = fmaxf(m, __ldcg(p.partial_max + base + c));
    float total = 0.0f;
    for (int c = 0; c < parts; ++c)
      total += __expf(__ldcg(p.partial_max + base + c) - m) * __ldcg(p.partial_sum + base + c);
    head_m[tid] = m;
    head_l[tid] = total;
  }
  __syncthreads();
  for (int k = tid; k < G * parts; k += threads) {
    const int g = k / parts, c = k % parts;
    scale[k] =
        __expf(__ldcg(p.partial_max + base0 + static_cast<int64_t>(g) * p.splits + c) - head_m[g]);
  }
  __syncthreads();
  for (int k = tid; k < G * D; k += threads) {
    const int g = k / D, d = k % D;
    const int64_t base = base0 + static_cast<int64_t>(g) * p.splits;
    float o = 0.0f;
    for (int c = 0; c < parts; ++c)
      o = fmaf(scale[g * parts + c], __ldcg(p.partial_out + (base + c) * D + d), o);
    p.out[row * static_cast<int64_t>(p.num_heads) * D + (kv_head * G + g) * D + d] =
        ToBf16(o / head_l[g]);
  }
}

}  // namespace llm::kernels

#endif  // LLM_KERNELS_ATTENTION_SPLIT_CUH_
