// The input of one forward pass: a flat, variable-length batch of tokens from several
// sequences, each with its paged KV-cache block table. A plain value built by the engine (or a
// simple generation loop) and read by any runner.
#ifndef LLM_WORKER_RUNNER_FORWARD_BATCH_H_
#define LLM_WORKER_RUNNER_FORWARD_BATCH_H_

#include <cstdint>
#include <span>
#include <vector>

namespace llm::runner {

// The tokens of one sequence in this step: prefill chunks have several, decode has one.
struct SeqChunk {
  int32_t token_begin = 0;  // index of the first token in ForwardBatch::token_ids
  int32_t num_tokens = 0;
  int32_t start_position = 0;  // position of the first token = tokens already in the KV cache
  // KV blocks holding positions [0, start_position + num_tokens), in order.
  std::span<const int32_t> block_table;
  bool need_logits = false;  // produce logits for the chunk's last token
  // With need_logits: logits for the chunk's last `logit_tokens` tokens (a decode chunk with
  // proposals needs one row per proposal and one after them), 1 .. num_tokens.
  int32_t logit_tokens = 1;
};

struct ForwardBatch {
  std::span<const int32_t> token_ids;  // [num_tokens]
  std::span<const SeqChunk> seqs;      // chunks in token order, covering token_ids exactly
};

}  // namespace llm::runner

#endif  // LLM_WORKER_RUNNER_FORWARD_BATCH_H_
