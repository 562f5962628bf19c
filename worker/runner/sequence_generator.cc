#include "worker/runner/sequence_generator.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "worker/sampling/sampler.h"

namespace llm::runner {

absl::StatusOr<SequenceResult> GenerateSequence(CpuModel& model,
                                                std::span<const int32_t> prompt_ids,
                                                const SequenceOptions& opt,
                                                const std::function<bool(int32_t)>& on_token) {
  const model::ModelConfig& c = model.config();
  if (prompt_ids.empty()) return absl::InvalidArgumentError("prompt: empty");
  if (opt.max_tokens < 1) return absl::InvalidArgumentError("max_tokens: must be >= 1");
  const int64_t total = static_cast<int64_t>(prompt_ids.size()) + opt.max_tokens;
  if (total > c.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_tokens: prompt (", prompt_ids.size(), " tokens) + max_tokens (", opt.max_tokens,
        ") exceeds the model's context of ", c.max_position_embeddings));
  }
  if (absl::Status st = opt.sampling.Validate(c.vocab_size); !st.ok()) return st;

  const auto num_blocks =
      static_cast<int32_t>((total + opt.kv_block_tokens - 1) / opt.kv_block_tokens);
  CpuKvCache kv(c, num_blocks, opt.kv_block_tokens);
  std::vector<int32_t> block_table(num_blocks);
  std::iota(block_table.begin(), block_table.end(), 0);

  sampling::Sampler sampler;
  sampling::PenaltyState penalties;
  if (opt.sampling.repetition_penalty != 1.0f) penalties.AddPrompt(prompt_ids);

  SequenceResult result;
  std::vector<float> logits;
  std::vector<int32_t> tokens(prompt_ids.begin(), prompt_ids.end());
  int32_t position = 0;
  for (;;) {
    SeqChunk chunk{0, static_cast<int32_t>(tokens.size()), position, block_table, true};
    ForwardBatch batch{tokens, std::span<const SeqChunk>(&chunk, 1)};
    if (absl::Status st = model.Forward(batch, kv, logits); !st.ok()) return st;
    position += static_cast<int32_t>(tokens.size());

    const uint64_t counter = result.generated_ids.size();
    const int32_t id = sampler.Sample(logits, opt.sampling, penalties, counter).token_id;
    result.generated_ids.push_back(id);
    penalties.AddOutput(id);
    const bool keep_going = on_token == nullptr || on_token(id);
    if (std::find(opt.stop_token_ids.begin(), opt.stop_token_ids.end(), id) !=
        opt.stop_token_ids.end()) {
      result.finish = sampling::FinishReason::kStopToken;
      break;
    }
    if (!keep_going) {
      result.finish = sampling::FinishReason::kStopString;
      break;
    }
    if (static_cast<int32_t>(result.generated_ids.size()) >= opt.max_tokens) {
      result.finish = sampling::FinishReason::kLength;
      break;
    }
    tokens.assign(1, id);
  }
  return result;
}

}  // namespace llm::runner
