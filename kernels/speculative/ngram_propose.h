// The n-gram (prompt-lookup) proposer on the device: at the start of a speculative step, for
// each decoding slot, the tokens that followed the latest earlier occurrence of the slot's last
// n tokens (ngram_match.h; the CPU proposer worker/speculative/ngram.h is the reference), read
// from the slot's token history in the device slot table. No host round trip: the previous
// step's accepted tokens are in the history when this runs, in stream order, and the step's
// input kernel (kernels/step/step_inputs.h) reads the proposals.
//
// One block per decoding slot. It writes slots.proposals and slots.num_proposals: at most
// decode_draft[d] (the plan's allowance), slots.max_proposals, the tokens the slot may still
// generate after its next one (max_tokens), so no row past max_tokens is computed, and the
// positions its KV blocks hold (decode_limit[d]), so no proposal row writes K/V past them (row
// 0, the slot's own next token, is held to its blocks by the scheduler, as any decode is). A
// slot gets none when it is finished or has no history (a slot with penalties gets them: each
// verify row counts the proposals before it, kernels/sampling/append.h GroupOutputCount). The
// history searched is [history_from, pos]: a prefix-cached prompt's cached positions come from the
// host's history spans (history_write.h), or, where a step's span budget cut them, are not
// searched.
#ifndef LLM_KERNELS_SPECULATIVE_NGRAM_PROPOSE_H_
#define LLM_KERNELS_SPECULATIVE_NGRAM_PROPOSE_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/sampling/sampling.h"

namespace llm::kernels {

struct NgramProposeParams {
  const int32_t* decode_list;   // [num_decode] the step's decoding slots, -1 unused
  const int32_t* decode_draft;  // [num_decode] the proposals each may have
  // [num_decode] each slot's KV blocks times block_tokens: its rows write positions below it
  // (the scheduler grants blocks for every allowed proposal; this holds it on the device).
  const int32_t* decode_limit;
  int32_t num_decode;
  DeviceSlots slots;  // reads pos, generated, done, sampling, history; writes the proposals
  int32_t min_n;      // engine.speculative.ngram_min (>= 1)
  int32_t max_n;      // engine.speculative.ngram_max
};

// The proposals a slot may have: the plan's allowance, within the table's width, the tokens
// left before max_tokens after the one its last token's row gives, and the positions its KV
// blocks hold after its last token's (`positions_left`: blocks * block_tokens - 1 - pos).
__host__ __device__ inline int32_t ProposalsAllowed(int32_t draft, int32_t max_proposals,
                                                    int32_t max_tokens, int32_t generated,
                                                    int32_t positions_left) {
  int32_t k = draft < max_proposals ? draft : max_proposals;
  const int32_t left = max_tokens - generated - 1;
  if (left < k) k = left;
  if (positions_left < k) k = positions_left;
  return k > 0 ? k : 0;
}

// The proposals the slot of a decode entry may have (ProposalsAllowed over its state, its last
// token at pos), given the entry's allowance and block limit; 0 for a finished slot. Every
// proposer applies it.
__host__ __device__ inline int32_t SlotAllowance(const DeviceSlots& s, int32_t slot, int32_t draft,
                                                 int32_t limit) {
  if (s.done[slot]) return 0;
  return ProposalsAllowed(draft, s.max_proposals, s.sampling[slot].max_tokens, s.generated[slot],
                          limit - 1 - s.pos[slot]);
}

cudaError_t LaunchNgramPropose(const NgramProposeParams& params, cudaStream_t stream);

}  // namespace llm::kernels

#endif  // LLM_KERNELS_SPECULATIVE_NGRAM_PROPOSE_H_
