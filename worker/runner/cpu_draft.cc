#include "worker/runner/cpu_draft.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/philox.h"

namespace llm::runner {

CpuDraft::CpuDraft(std::unique_ptr<CpuModel> model, int32_t num_blocks, int32_t block_tokens)
    : model_(std::move(model)), kv_(model_->config(), num_blocks, block_tokens) {}

void CpuDraft::Choose(DraftJob& job, std::span<float> row, int32_t index, JobState& state) {
  const sampling::SamplingParams& params = job.request->sampling;
  if (state.matcher) {
    state.matcher->Apply(row, job.stop_ids);
    if (*std::max_element(row.begin(), row.end()) == -std::numeric_limits<float>::infinity()) {
      state.ended = true;  // the constraint allows nothing here
      return;
    }
  }
  int32_t token = -1;
  if (params.greedy()) {
    sampling::Adjust(row, params, state.penalties);  // logit bias and penalties, as Sample's
    token = sampling::Argmax(row);
  } else {
    sampler_.Distribution(row, params, state.penalties, probs_);
    const uint64_t counter = static_cast<uint64_t>(job.generated) + static_cast<uint64_t>(index);
    token = sampling::DrawFrom(probs_, UniformDouble(params.seed, counter, kDraftStream));
    if (token < 0) token = sampling::Argmax(row);
  }
  job.drafts->push_back(token);
  if (!params.greedy()) {
    job.draft_probs->insert(job.draft_probs->end(), probs_.begin(), probs_.end());
  }
  if (params.has_penalties()) state.penalties.AddOutput(token);
  if (state.matcher) {
    // Nothing follows a stop id; any other token the mask allowed moves the matcher.
    const bool stop =
        std::find(job.stop_ids.begin(), job.stop_ids.end(), token) != job.stop_ids.end();
    state.ended = stop || !state.matcher->Advance(token);
  }
}

absl::Status CpuDraft::Propose(std::span<DraftJob> jobs) {
  const int32_t vocab = model_->config().vocab_size;
  int32_t rounds = 0;
  states_.assign(jobs.size(), JobState{});
  for (size_t j = 0; j < jobs.size(); ++j) {
    DraftJob& job = jobs[j];
    rounds = std::max(rounds, job.max_draft);
    if (job.draft_probs != nullptr) job.draft_probs->clear();
    if (job.request->sampling.has_penalties()) states_[j].penalties = *job.penalties;
    if (job.matcher != nullptr) states_[j].matcher = *job.matcher;
  }
  for (int32_t round = 0; round < rounds; ++round) {
    tokens_.clear();
    chunks_.clear();
    active_.clear();
    for (size_t j = 0; j < jobs.size(); ++j) {
      DraftJob& job = jobs[j];
      if (round >= job.max_draft || states_[j].ended) continue;
      const auto len = static_cast<int32_t>(job.history.size());
      // Round 0 catches the cache up to the history; later rounds feed the previous proposal.
      const int32_t start = round == 0 ? std::min(*job.written, len - 1) : len + round - 1;
      const int32_t count = round == 0 ? len - start : 1;
      chunks_.push_back(
          SeqChunk{static_cast<int32_t>(tokens_.size()), count, start, job.blocks, true});
      if (round == 0) {
        tokens_.insert(tokens_.end(), job.history.begin() + start, job.history.end());
      } else {
        tokens_.push_back(job.drafts->back());
      }
      *job.written = start + count;
      active_.push_back(j);
    }
    if (active_.empty()) break;  // every job ended early
    if (absl::Status st = model_->Forward({tokens_, chunks_}, kv_, logits_); !st.ok()) {
      return absl::InternalError(absl::StrCat("draft model: ", st.message()));
    }
    for (size_t i = 0; i < active_.size(); ++i) {
      Choose(jobs[active_[i]], std::span<float>(logits_.data() + i * vocab, vocab), round,
             states_[active_[i]]);
    }
  }
  return absl::OkStatus();
}

}  // namespace llm::runner
