#include <cfloat>

#include "kernels/common.cuh"
#include "kernels/elementwise/embedding.cuh"
#include "kernels/launch.cuh"
#include "kernels/speculative/draft_step.h"

namespace llm::kernels {
namespace {

constexpr int kPickThreads = 256;

// One block per row: thread 0 picks the row's inputs, then the block embeds its token.
__global__ void DraftRowsKernel(DraftRowsParams p) {
  AfterPriorGrids();  // launch.cuh: before reading what earlier kernels wrote
  __shared__ int32_t token;
  const int32_t r = blockIdx.x;
  if (threadIdx.x == 0) {
    const DraftRow row = DraftRowAt(p, r);
    p.row_slot[r] = row.slot;
    p.row_pos[r] = row.pos;
    p.row_token[r] = row.token;
    token = row.token;
  }
  __syncthreads();
  EmbedRow(p.embedding, token, p.vocab, p.hidden, p.x + static_cast<int64_t>(r) * p.hidden);
}

// The better of two (value, id) candidates: the larger value, the lower id among equals.
__device__ __forceinline__ bool Better(float v, int32_t id, float best_v, int32_t best_id) {
  return v > best_v || (v == best_v && id < best_id);
}

__global__ void __launch_bounds__(kPickThreads) DraftPickKernel(DraftPickParams p) {
  AfterPriorGrids();  // launch.cuh: before reading what earlier kernels wrote
  __shared__ float values[kPickThreads];
  __shared__ int32_t ids[kPickThreads];
  const int32_t d = blockIdx.x;
  if (p.decode_list[d] < 0) return;  // the same for the whole block
  const int32_t per = DraftRowsPerSlot(p.round);
  const float* row = p.logits + (static_cast<int64_t>(d) * per + per - 1) * p.vocab;
  float best_v = -FLT_MAX;
  int32_t best_id = 0;
  for (int32_t i = threadIdx.x; i < p.valid_vocab; i += blockDim.x) {
    if (Better(row[i], i, best_v, best_id)) {
      best_v = row[i];
      best_id = i;
    }
  }
  values[threadIdx.x] = best_v;
  ids[threadIdx.x] = best_id;
  __syncthreads();
  for (int32_t stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      const int32_t other = threadIdx.x + stride;
      if (Better(values[other], ids[other], values[threadIdx.x], ids[threadIdx.x])) {
        values[threadIdx.x] = values[other];
        ids[threadIdx.x] = ids[other];
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) DraftPickApply(p, d, ids[0]);
}

}  // namespace

cudaError_t LaunchDraftRows(const DraftRowsParams& p, cudaStream_t stream) {
  const int32_t rows = DraftRows(p);
  if (rows <= 0) return cudaSuccess;
  if (p.round >= 0 && (p.slots.proposals == nullptr || p.slots.num_proposals == nullptr ||
                       p.decode_draft == nullptr || p.decode_limit == nullptr)) {
    return cudaErrorInvalidValue;
  }
  return Launch(DraftRowsKernel, rows, 128, 0, stream, p);
}

cudaError_t LaunchDraftPick(const DraftPickParams& p, cudaStream_t stream) {
  if (p.num_decode <= 0) return cudaSuccess;
  if (p.round < 0 || p.valid_vocab <= 0 || p.valid_vocab > p.vocab ||
      p.slots.proposals == nullptr || p.slots.num_proposals == nullptr) {
    return cudaErrorInvalidValue;
  }
  return Launch(DraftPickKernel, p.num_decode, kPickThreads, 0, stream, p);
}

}  // namespace llm::kernels
