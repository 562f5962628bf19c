// Prompt-lookup (n-gram) proposals: a request that copies its input (a code edit, an answer
// quoting a document, a summary) often continues with the tokens that followed the same few
// tokens earlier on. Pure logic over one sequence's token history.
#ifndef LLM_WORKER_SPECULATIVE_NGRAM_H_
#define LLM_WORKER_SPECULATIVE_NGRAM_H_

#include <cstdint>
#include <span>
#include <vector>

namespace llm::speculative {

struct NgramOptions {
  int32_t min = 2;  // shortest suffix matched
  int32_t max = 4;  // longest; tried first
};

// Appends to `out` up to `max_tokens` proposals for what follows `history` (the prompt and
// the output so far, the last sampled token last): for the longest n from options.max down to
// options.min whose last n tokens occurred before, the tokens that followed the latest such
// occurrence with max_tokens tokens after it (or, if none has, the one with the most). Nothing
// when no suffix recurs. Returns the count. O(len * n) a call.
int32_t ProposeNgram(std::span<const int32_t> history, const NgramOptions& options,
                     int32_t max_tokens, std::vector<int32_t>& out);

}  // namespace llm::speculative

#endif  // LLM_WORKER_SPECULATIVE_NGRAM_H_
