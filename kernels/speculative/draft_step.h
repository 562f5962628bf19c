// The draft model's passes of speculative decoding on the device (engine.speculative.method:
// draft; worker/runner/cuda/cuda_draft.h enqueues them before the target's forward pass, in the
// same stream, so a speculative step's graph holds them). The draft is a second, smaller model
// with its own KV cache on the target's block ids; it reads the target's slot table and writes
// only the slots' proposals.
//
// A step's passes:
//   - the prompt pass (round kDraftPromptPass), in a step with prompt rows: the step's prompt
//     rows as the upload gives them (the target's step inputs mark prompts and count resumed
//     tokens; this pass changes nothing in the slot table), through the draft's layers up to
//     the last layer's K/V write, so the draft's cache holds every prompt it may propose after;
//   - round 0: two rows per decoding slot, its token before the last (pos - 1, from the history)
//     and its last token (pos); the second row's argmax is proposal 0. Two rows are enough:
//     after a verification that accepted a of k proposals, the draft has seen every position
//     before the new pos - 1 (it fed proposals 0 .. k - 2 itself, and the accepted ones are the
//     target's tokens there), so only the last two can be new. A position the draft never saw
//     (a step that did not speculate, a prefix-cache hit the draft never computed) costs
//     acceptance, never correctness: verification decides every token;
//   - round r = 1 .. group - 2: one row per decoding slot, proposal r - 1 at pos + r, whose
//     argmax is proposal r, while the slot's allowance (SlotAllowance, as every proposer) lasts.
//   - the catch-up pass (round kDraftCatchUp), in a decode step that does not verify (group 1:
//     the policy's choice, no allowance left, or too many rows): round 0's two rows per decoding
//     slot, up to the last layer's K/V write, no pick. After a verification only pos - 1 and pos
//     can be new, after a plain step only pos: the draft's cache keeps every position, and
//     speculation resumes at full acceptance. The runner skips it where speculation is settled
//     off (StepPlan::draft_may_lapse) or no decoding slot may propose; the slots that decode
//     then lapse and get no proposals afterwards (worker/runner/cuda/step_layout.h).
// A row that stands for nothing (no slot, a finished slot, a slot past its allowance) is a
// padding row (slot -1: no K/V, no attention). Proposals are the draft's argmax for every
// request: verification is sample-and-compare (verify.h), which keeps a sampled request's
// distribution, and its seeded ids, whatever was proposed.
#ifndef LLM_KERNELS_SPECULATIVE_DRAFT_STEP_H_
#define LLM_KERNELS_SPECULATIVE_DRAFT_STEP_H_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/sampling/sampling.h"
#include "kernels/speculative/ngram_propose.h"

namespace llm::kernels {

inline constexpr int32_t kDraftPromptPass = -1;
inline constexpr int32_t kDraftCatchUp = -3;  // (-2 is ForwardShape::kNotDraft)

// Rows per decoding slot in a round.
__host__ __device__ inline int32_t DraftRowsPerSlot(int32_t round) {
  return round == 0 || round == kDraftCatchUp ? 2 : 1;
}

struct DraftRowsParams {
  // The prompt pass: the step's prompt rows (upload; padding rows have slot -1), then padding
  // rows up to num_rows (the pass's rows, rounded up to a prepared matrix shape).
  const int32_t* prefill_slot;
  const int32_t* prefill_pos;
  const int32_t* prefill_token;
  int32_t num_prefill;
  int32_t num_rows;
  // A round: the step's decoding slots (-1 unused), their allowances and block limits (as the
  // proposers read them, ngram_propose.h).
  const int32_t* decode_list;
  const int32_t* decode_draft;
  const int32_t* decode_limit;
  int32_t num_decode;  // decode entries (the bucket)
  int32_t round;       // kDraftPromptPass, kDraftCatchUp, or the round
  DeviceSlots slots;   // the target's: reads pos, last_token, done, history, proposals
  int32_t vocab;
  // The draft's row tables and residual stream.
  int32_t* row_token;
  int32_t* row_pos;
  int32_t* row_slot;
  const __nv_bfloat16* embedding;  // the draft's [vocab, hidden]
  float* x;                        // [rows, hidden]
  int32_t hidden;
};

__host__ __device__ inline int32_t DraftRows(const DraftRowsParams& p) {
  return p.round == kDraftPromptPass ? p.num_rows : p.num_decode * DraftRowsPerSlot(p.round);
}

struct DraftRow {
  int32_t slot = -1;  // -1: padding
  int32_t pos = 0;
  int32_t token = 0;
};

// Row r of a pass: its slot, position and token (the kernel's rule, run by the host tests).
__host__ __device__ inline DraftRow DraftRowAt(const DraftRowsParams& p, int32_t r) {
  if (p.round == kDraftPromptPass) {
    if (r >= p.num_prefill) return {};
    const int32_t slot = p.prefill_slot[r];
    if (slot < 0) return {};
    return {slot, p.prefill_pos[r], p.prefill_token[r]};
  }
  const int32_t per = DraftRowsPerSlot(p.round);
  const int32_t d = r / per, j = r % per;
  const int32_t slot = p.decode_list[d];
  const DeviceSlots& s = p.slots;
  if (slot < 0 || s.done[slot]) return {};
  const int32_t pos = s.pos[slot];
  if (p.round == 0 || p.round == kDraftCatchUp) {
    if (j == 1) return {slot, pos, s.last_token[slot]};
    const int32_t at = pos - 1;
    const int32_t from = s.history_from != nullptr ? s.history_from[slot] : 0;
    if (at < 0 || s.history == nullptr || at < from || at >= s.history_stride) return {};
    return {slot, at, s.history[static_cast<int64_t>(slot) * s.history_stride + at]};
  }
  if (s.num_proposals[slot] != p.round ||
      p.round >= SlotAllowance(s, slot, p.decode_draft[d], p.decode_limit[d])) {
    return {};
  }
  return {slot, pos + p.round,
          s.proposals[static_cast<int64_t>(slot) * s.max_proposals + p.round - 1]};
}

// Writes each row's inputs and embeds its token into x (one block per row; a padding row
// embeds id 0, whose values nothing reads).
cudaError_t LaunchDraftRows(const DraftRowsParams& params, cudaStream_t stream);

struct DraftPickParams {
  const float* logits;  // [num_decode * DraftRowsPerSlot(round), vocab] the round's rows
  int32_t vocab;        // row stride
  int32_t valid_vocab;  // ids >= this are never proposed
  const int32_t* decode_list;
  const int32_t* decode_draft;
  const int32_t* decode_limit;
  int32_t num_decode;
  int32_t round;
  DeviceSlots slots;  // writes proposals and num_proposals
};

// Decode entry d's slot after the round picked `token` from its last row: round 0 sets the
// slot's proposals to [token] (none when its allowance is 0); round r appends token as
// proposal r while the slot's proposals reach r and its allowance lasts (the rows DraftRowAt
// made real). The kernel's last step, run by the host tests.
__host__ __device__ inline void DraftPickApply(const DraftPickParams& p, int32_t d, int32_t token) {
  const int32_t slot = p.decode_list[d];
  if (slot < 0) return;
  const DeviceSlots& s = p.slots;
  const int32_t allowed = SlotAllowance(s, slot, p.decode_draft[d], p.decode_limit[d]);
  int32_t* out = s.proposals + static_cast<int64_t>(slot) * s.max_proposals;
  if (p.round == 0) {
    s.num_proposals[slot] = allowed > 0 ? 1 : 0;
    if (allowed > 0) out[0] = token;
    return;
  }
  if (s.num_proposals[slot] != p.round || p.round >= allowed) return;
  out[p.round] = token;
  s.num_proposals[slot] = p.round + 1;
}

// One block per decode entry: the argmax of its last row (the lowest id among equal maxima),
// then DraftPickApply.
cudaError_t LaunchDraftPick(const DraftPickParams& params, cudaStream_t stream);

}  // namespace llm::kernels

#endif  // LLM_KERNELS_SPECULATIVE_DRAFT_STEP_H_
