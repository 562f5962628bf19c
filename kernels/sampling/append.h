// Appending a sampled token to its slot in the device slot table, and the stop check: one rule,
// run by the sampler's DrawKernel for an ordinary row and by the speculative verification
// (kernels/speculative/verify.h) for each token of an accepted run. Host and device code (plain
// pointers only), so the host tests run it on host memory.
#ifndef LLM_KERNELS_SAMPLING_APPEND_H_
#define LLM_KERNELS_SAMPLING_APPEND_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "common/finish_reason.h"
#include "kernels/sampling/sampling.h"

namespace llm::kernels {

// The output count of `token` that row `offset` of the slot's verify group samples with: the
// slot's count plus the token's occurrences among the group's first `offset` proposals (the
// row is reached only if they all stood, so they are the outputs before it). Offset 0 (an
// ordinary row): the slot's count. Saturating as the counts are.
__host__ __device__ inline int32_t GroupOutputCount(const DeviceSlots& slots, int32_t slot,
                                                    int32_t offset, int32_t token, int32_t vocab) {
  int32_t c = slots.out_counts[static_cast<int64_t>(slot) * vocab + token];
  if (offset > 0 && slots.proposals != nullptr) {
    const int32_t* proposals = slots.proposals + static_cast<int64_t>(slot) * slots.max_proposals;
    for (int32_t j = 0; j < offset; ++j) c += proposals[j] == token ? 1 : 0;
  }
  return c < 0xFFFF ? c : 0xFFFF;
}

// `token`, sampled from the logits of the token at position `row_pos`, becomes the slot's next
// input: the slot's counters advance, its history (where kept) records it at row_pos + 1, its
// output count goes up (penalties), and the finish is kStopToken for a stop id, else kLength
// at max_tokens, else kNone. A finished slot is marked done, so later steps skip it.
__host__ __device__ inline sampling::FinishReason AppendToken(const DeviceSlots& slots,
                                                              int32_t slot, int32_t token,
                                                              int32_t row_pos, int32_t vocab) {
  const SlotSampling& s = slots.sampling[slot];
  const int32_t generated = slots.generated[slot] + 1;
  slots.generated[slot] = generated;
  slots.last_token[slot] = token;
  slots.pos[slot] = row_pos + 1;
  if (slots.history != nullptr && row_pos + 1 < slots.history_stride) {
    slots.history[static_cast<int64_t>(slot) * slots.history_stride + row_pos + 1] = token;
  }
  sampling::FinishReason finish = sampling::FinishReason::kNone;
  for (int k = 0; k < s.num_stop_ids; ++k) {
    if (s.stop_ids[k] == token) finish = sampling::FinishReason::kStopToken;
  }
  if (finish == sampling::FinishReason::kNone && generated >= s.max_tokens) {
    finish = sampling::FinishReason::kLength;
  }
  if (finish != sampling::FinishReason::kNone) slots.done[slot] = 1;
  if (s.has_penalties) {
    uint16_t& c = slots.out_counts[static_cast<int64_t>(slot) * vocab + token];
    if (c < 0xFFFF) ++c;
  }
  return finish;
}

}  // namespace llm::kernels

#endif  // LLM_KERNELS_SAMPLING_APPEND_H_
