// Builds a step's per-row inputs on the device. Rows [0, num_prefill) are prompt tokens whose
// slot, position and id the host uploaded with the step; rows [num_prefill, num_prefill +
// num_decode) decode one token for each slot of `decode_list` (-1: a padding row), reading the
// token and position from the device slot table, so decode steps need no host-to-device copy.
// With speculative decoding (group > 1) each decoding slot has `group` consecutive rows, its
// verify group: row j holds the slot's last token at pos for j = 0 and its (j-1)-th proposal at
// pos + j after (slots.proposals, made by the proposer earlier in the step); a row past the
// slot's real proposals is a padding row, so it writes no K/V. Rows record their offset j in
// row_offset. Prefill rows record their tokens in the slot's history, where it is kept.
// Prompt tokens of slots using the repetition penalty are marked in the slot's prompt mask;
// prefill rows past the prompt (tokens a preempted request generated) add to its output counts.
// In the same launch, each row's token is embedded into the fp32 residual stream (x[r, :] =
// float(embedding[token, :]), zeros for an id outside [0, vocab); a padding row embeds id 0):
// one block per row, its first thread picking the row's inputs, the block gathering the row
// (embedding.cuh), so a step starts with one launch, not two.
#ifndef LLM_KERNELS_STEP_STEP_INPUTS_H_
#define LLM_KERNELS_STEP_STEP_INPUTS_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/sampling/sampling.h"

namespace llm::kernels {

struct StepInputsParams {
  const int32_t* prefill_slot;   // [num_prefill]
  const int32_t* prefill_pos;    // [num_prefill]
  const int32_t* prefill_token;  // [num_prefill]
  int32_t num_prefill;
  const int32_t* decode_list;  // [num_decode / group] slots, -1 for padding
  int32_t num_decode;          // decode rows
  DeviceSlots slots;
  int32_t vocab;
  int32_t* row_token;  // [num_prefill + num_decode]
  int32_t* row_pos;
  int32_t* row_slot;
  const __nv_bfloat16* embedding;  // [vocab, hidden]
  float* x;                        // [num_prefill + num_decode, hidden]
  int32_t hidden;
  // Speculative decoding: rows per decoding slot (1: none), and each row's offset in its
  // verify group, written when not null (0 for prefill and padding rows).
  int32_t group = 1;
  int32_t* row_offset = nullptr;
};

cudaError_t LaunchStepInputs(const StepInputsParams& params, cudaStream_t stream);

// Gathers rows[i] of `src` into `dst` (ints), for the sampling rows' positions and slots.
cudaError_t LaunchGatherInts(const int32_t* src, const int32_t* rows, int32_t* dst, int32_t n,
                             cudaStream_t stream);

}  // namespace llm::kernels

#endif  // LLM_KERNELS_STEP_STEP_INPUTS_H_
