// The benchmark-only oracle proposer on the device (engine::SpeculativeMethod::kOracle): each
// decoding slot proposes the tokens its history holds past its last token, where the host wrote
// the request's oracle continuation at admission (history_write.h, which clears the rest of
// the row to -1, so the proposals end where the oracle does). Output i sits at position prompt + i,
// so the proposals are the oracle's ids from the slot's generated count on: what the CPU runner
// proposes from EngineRequest::oracle_ids. Verification appends the target's own tokens over them
// as they are accepted.
//
// It proves the upper bound of speculation (every proposal stands while the target agrees with
// the oracle) at no proposing cost; past a divergence its proposals are the oracle's, as on the
// CPU (an oracle the step's span budget cut proposes only what was written). The same caps as the
// n-gram proposer (ProposalsAllowed): the plan's allowance, the table's width, max_tokens, the
// slot's KV blocks; none for a finished slot.
#ifndef LLM_KERNELS_SPECULATIVE_ORACLE_PROPOSE_H_
#define LLM_KERNELS_SPECULATIVE_ORACLE_PROPOSE_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/sampling/sampling.h"

namespace llm::kernels {

struct OracleProposeParams {
  const int32_t* decode_list;   // [num_decode] the step's decoding slots, -1 unused
  const int32_t* decode_draft;  // [num_decode] the proposals each may have
  const int32_t* decode_limit;  // [num_decode] each slot's KV blocks times block_tokens
  int32_t num_decode;
  DeviceSlots slots;  // reads pos, generated, done, sampling, history; writes the proposals
};

// The oracle's proposals from a slot's history row: at most `allowed` of the tokens at
// positions pos + 1, pos + 2, ... before the first negative one or the row's end. Returns the
// count written to `out`.
__host__ __device__ inline int32_t OracleProposals(const int32_t* history_row, int32_t stride,
                                                   int32_t pos, int32_t allowed, int32_t* out) {
  int32_t n = 0;
  while (n < allowed && pos + 1 + n < stride && history_row[pos + 1 + n] >= 0) {
    out[n] = history_row[pos + 1 + n];
    ++n;
  }
  return n;
}

// One thread per decode entry.
cudaError_t LaunchOraclePropose(const OracleProposeParams& params, cudaStream_t stream);

}  // namespace llm::kernels

#endif  // LLM_KERNELS_SPECULATIVE_ORACLE_PROPOSE_H_
