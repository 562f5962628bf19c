#include <climits>

#include "kernels/launch.cuh"
#include "kernels/speculative/ngram_match.h"
#include "kernels/speculative/ngram_propose.h"

namespace llm::kernels {
namespace {

constexpr int kThreads = 256;

// The candidates of suffix length n, folded by the block: each thread takes every
// blockDim.x-th start, then the block's maximum and minimum by shared atomics.
__device__ NgramChoice BlockNgramChoice(const int32_t* h, int32_t len, int32_t n, int32_t k,
                                        int32_t* full, int32_t* partial) {
  if (threadIdx.x == 0) {
    *full = -1;
    *partial = kNoNgramStart;
  }
  __syncthreads();
  NgramBest best;
  for (int32_t i = threadIdx.x; i < len - n; i += blockDim.x) {
    if (NgramMatchesAt(h, len, n, i)) NgramFold(best, len, n, k, i);
  }
  if (best.full >= 0) atomicMax(full, best.full);
  if (best.partial != kNoNgramStart) atomicMin(partial, best.partial);
  __syncthreads();
  NgramBest all;
  all.full = *full;
  all.partial = *partial;
  __syncthreads();  // the next length resets them
  return NgramPick(all, len, n, k);
}

__global__ void __launch_bounds__(kThreads) NgramProposeKernel(NgramProposeParams p) {
  AfterPriorGrids();  // launch.cuh: before reading what earlier kernels wrote
  __shared__ int32_t full, partial;
  const int32_t d = blockIdx.x;
  const int32_t slot = p.decode_list[d];
  if (slot < 0) return;
  const DeviceSlots& s = p.slots;
  const int32_t pos = s.pos[slot];  // the last token sits at pos
  const int32_t k = SlotAllowance(s, slot, p.decode_draft[d], p.decode_limit[d]);
  const int32_t from = s.history_from != nullptr ? s.history_from[slot] : 0;
  int32_t* out = s.proposals + static_cast<int64_t>(slot) * s.max_proposals;
  const bool none = k == 0 || s.history == nullptr || pos >= s.history_stride || from > pos;
  if (none) {
    if (threadIdx.x == 0) s.num_proposals[slot] = 0;
    return;
  }
  const int32_t len = pos + 1 - from;
  const int32_t* h = s.history + static_cast<int64_t>(slot) * s.history_stride + from;
  for (int32_t n = NgramLongest(len, p.max_n); n >= NgramShortest(p.min_n); --n) {
    const NgramChoice c = BlockNgramChoice(h, len, n, k, &full, &partial);
    if (c.count > 0) {  // the same for the whole block
      for (int32_t t = threadIdx.x; t < c.count; t += blockDim.x) out[t] = h[c.start + t];
      if (threadIdx.x == 0) s.num_proposals[slot] = c.count;
      return;
    }
  }
  if (threadIdx.x == 0) s.num_proposals[slot] = 0;
}

}  // namespace

cudaError_t LaunchNgramPropose(const NgramProposeParams& p, cudaStream_t stream) {
  if (p.num_decode <= 0) return cudaSuccess;
  if (p.slots.proposals == nullptr || p.slots.num_proposals == nullptr ||
      p.decode_draft == nullptr || p.decode_limit == nullptr || p.min_n < 1) {
    return cudaErrorInvalidValue;
  }
  return Launch(NgramProposeKernel, p.num_decode, kThreads, 0, stream, p);
}

}  // namespace llm::kernels
