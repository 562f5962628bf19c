#include "kernels/common.cuh"
#include "kernels/elementwise/embedding.cuh"
#include "kernels/launch.cuh"
#include "kernels/speculative/verify.h"
#include "kernels/step/step_inputs.h"

namespace llm::kernels {
namespace {

// Adds one to a saturating 16-bit output count; rows of one slot run in parallel blocks, so
// through a compare-and-swap on the aligned 32-bit word holding it.
__device__ void CountOutput(uint16_t* count) {
  const auto address = reinterpret_cast<uintptr_t>(count);
  auto* word = reinterpret_cast<unsigned int*>(address & ~uintptr_t{3});
  const unsigned int shift = (address & 2) != 0 ? 16u : 0u;
  unsigned int seen = *word;
  for (;;) {
    if (((seen >> shift) & 0xFFFFu) == 0xFFFFu) return;
    const unsigned int prior = atomicCAS(word, seen, seen + (1u << shift));
    if (prior == seen) return;
    seen = prior;
  }
}

// Row r's slot, position and token (written to the row tables); returns the token.
__device__ int32_t RowInputs(const StepInputsParams& p, int32_t r) {
  if (r < p.num_prefill) {
    const int32_t slot = p.prefill_slot[r];
    const int32_t token = p.prefill_token[r];
    p.row_slot[r] = slot;
    p.row_pos[r] = p.prefill_pos[r];
    p.row_token[r] = token;
    if (p.row_offset != nullptr) p.row_offset[r] = 0;
    if (slot >= 0 && p.slots.history != nullptr && p.prefill_pos[r] < p.slots.history_stride) {
      p.slots.history[static_cast<int64_t>(slot) * p.slots.history_stride + p.prefill_pos[r]] =
          token;
      if (p.slots.history_from != nullptr) atomicMin(p.slots.history_from + slot, p.prefill_pos[r]);
    }
    if (slot >= 0 && p.slots.sampling[slot].has_penalties && token >= 0 && token < p.vocab) {
      const int64_t at = static_cast<int64_t>(slot) * p.vocab + token;
      if (p.prefill_pos[r] < p.slots.sampling[slot].prompt_tokens) {
        p.slots.prompt_mask[at] = 1;
      } else {
        CountOutput(p.slots.out_counts + at);  // generated before a preemption
      }
    }
    return token;
  }
  const int32_t d = (r - p.num_prefill) / p.group, j = (r - p.num_prefill) % p.group;
  const int32_t slot = p.decode_list[d];
  // Row j > 0 of a verify group stands only for a real proposal.
  if (slot < 0 || (j > 0 && (p.slots.proposals == nullptr || j > p.slots.num_proposals[slot]))) {
    p.row_slot[r] = -1;  // padding: skipped by every kernel
    p.row_pos[r] = 0;
    p.row_token[r] = 0;
    if (p.row_offset != nullptr) p.row_offset[r] = 0;
    return 0;
  }
  // NOTE: a slot that finished in the previous step still decodes here (the pipeline's extra
  // step): its K/V go to the position after its last token, inside its reservation, and the
  // sampler reports the row as skipped (the proposer gives a finished slot no proposals).
  const int32_t token = VerifyRowToken(p.slots, slot, j);
  p.row_slot[r] = slot;
  p.row_pos[r] = p.slots.pos[slot] + j;
  p.row_token[r] = token;
  if (p.row_offset != nullptr) p.row_offset[r] = j;
  return token;
}

// One block per row: thread 0 picks the row's inputs, then the block embeds its token.
__global__ void StepInputsKernel(StepInputsParams p) {
  AfterPriorGrids();  // launch.cuh: before reading what earlier kernels wrote
  __shared__ int32_t token;
  const int32_t r = blockIdx.x;
  if (threadIdx.x == 0) token = RowInputs(p, r);
  __syncthreads();
  EmbedRow(p.embedding, token, p.vocab, p.hidden, p.x + static_cast<int64_t>(r) * p.hidden);
}

__global__ void GatherIntsKernel(const int32_t* src, const int32_t* rows, int32_t* dst, int32_t n) {
  AfterPriorGrids();  // launch.cuh: before reading what earlier kernels wrote
  const int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = rows[i] < 0 ? -1 : src[rows[i]];
}

}  // namespace

cudaError_t LaunchStepInputs(const StepInputsParams& p, cudaStream_t stream) {
  const int32_t n = p.num_prefill + p.num_decode;
  if (n <= 0) return cudaSuccess;
  return Launch(StepInputsKernel, n, 128, 0, stream, p);
}

cudaError_t LaunchGatherInts(const int32_t* src, const int32_t* rows, int32_t* dst, int32_t n,
                             cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return Launch(GatherIntsKernel, CeilDiv(n, 128), 128, 0, stream, src, rows, dst, n);
}

}  // namespace llm::kernels
