// Speculative verification on the device: after the sampler drew a token for every row of each
// slot's verify group (SampleParams::row_offset set, so it appended nothing), the group's
// accepted run is appended, token by token, with the sampler's own append and stop check
// (kernels/sampling/append.h).
//
// Row j of a group took the slot's last token (j = 0) or its (j-1)-th proposal as input, so
// its token t_j is the target's next token after that input. t_0 always stands; t_j (j >= 1)
// stands when t_{j-1} equals proposal j-1 and j is within the slot's real proposals
// (slots.num_proposals); the run ends at the first that does not, or at a finish (stop id or
// max_tokens). Rows after the run get slot -1 and token -1: the host skips them, as it skips a
// finished slot's row. Rejected proposals' K/V lie past the slot's new position, inside its
// blocks, where the next tokens overwrite them.
//
// Exactness: each row's draw is the one a run without speculation makes for that token
// (the counter generated + j, the same logits when the inputs before it agree), so greedy and
// seeded sampled requests alike give the ids they give without speculation. For a point-mass
// proposal (n-gram) this is also the rejection rule of speculative sampling: the proposal
// stands with probability p(proposal), and otherwise the token is a draw from p without it.
#ifndef LLM_KERNELS_SPECULATIVE_VERIFY_H_
#define LLM_KERNELS_SPECULATIVE_VERIFY_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/sampling/append.h"
#include "kernels/sampling/sampling.h"

namespace llm::kernels {

// The input of row j of a slot's verify group (kernels/step/step_inputs.h): the slot's last
// token, then its proposals; a row past the real ones repeats the last token.
__host__ __device__ inline int32_t VerifyRowToken(const DeviceSlots& slots, int32_t slot,
                                                  int32_t j) {
  if (j == 0 || slots.proposals == nullptr || j > slots.num_proposals[slot]) {
    return slots.last_token[slot];
  }
  return slots.proposals[static_cast<int64_t>(slot) * slots.max_proposals + j - 1];
}

struct VerifyParams {
  const int32_t* row_slot;    // [rows] the sampling rows' slots (-1: padding), as SampleParams
  const int32_t* row_pos;     // [rows] their positions
  const int32_t* row_offset;  // [rows] their offsets in their verify groups
  SampleOutput* out;          // [rows] the sampler's rows, completed here
  int32_t rows;
  DeviceSlots slots;
  int32_t vocab;
};

// Appends the accepted run of the group whose first row (offset 0) is `first`; returns the
// tokens appended. The group's first row reports its proposals and how many the target agreed
// with (SampleOutput::draft_tokens, accepted_tokens), as the CPU runner counts them. Host and
// device code: the host tests run it on host memory.
__host__ __device__ inline int32_t VerifyGroup(const VerifyParams& p, int32_t first) {
  SampleOutput* out = p.out;
  const int32_t slot = out[first].slot;  // -1: padding, or a slot already finished
  int32_t end = first + 1;               // the group's rows are [first, end)
  while (end < p.rows && p.row_offset[end] == end - first && p.row_slot[end] == p.row_slot[first]) {
    ++end;
  }
  int32_t taken = 0, accepted = 0;
  const int32_t real = slot >= 0 && p.slots.proposals != nullptr ? p.slots.num_proposals[slot] : 0;
  if (slot >= 0) {
    for (int32_t r = first; r < end; ++r) {
      const int32_t j = r - first;
      const int32_t token = out[r].token;
      out[r].finish = AppendToken(p.slots, slot, token, p.row_pos[r], p.vocab);
      ++taken;
      // Row j + 1 computed the token after proposal j: it stands only if that was t_j. A
      // proposal the target agreed with counts as accepted even when its token ends the run.
      const bool agreed = j < real && token == VerifyRowToken(p.slots, slot, j + 1);
      accepted += agreed ? 1 : 0;
      if (out[r].finish != sampling::FinishReason::kNone || !agreed) break;
    }
  }
  if (slot >= 0 && end - first > 1) {
    out[first].draft_tokens = real;
    out[first].accepted_tokens = accepted;
  }
  for (int32_t r = first + taken; r < end; ++r) {
    out[r].slot = -1;
    out[r].token = -1;
    out[r].finish = sampling::FinishReason::kNone;
    out[r].num_top = 0;
  }
  return taken;
}

cudaError_t LaunchVerify(const VerifyParams& params, cudaStream_t stream);

}  // namespace llm::kernels

#endif  // LLM_KERNELS_SPECULATIVE_VERIFY_H_
