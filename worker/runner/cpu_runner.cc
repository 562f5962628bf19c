#include "worker/runner/cpu_runner.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/thread_name.h"
#include "common/thread_pool.h"
#include "worker/speculative/ngram.h"

namespace llm::runner {

using engine::SlotOutput;
using engine::StepPlan;
using engine::StepResult;
using sampling::FinishReason;

CpuRunner::CpuRunner(std::unique_ptr<CpuModel> model, const CpuRunnerOptions& options,
                     std::unique_ptr<CpuModel> draft)
    : model_(std::move(model)),
      options_(options),
      kv_(model_->config(), options.sizes.kv_blocks, options.sizes.block_tokens),
      slots_(options.sizes.max_slots) {
  const model::ModelConfig& c = model_->config();
  if (options_.valid_vocab_size <= 0 || options_.valid_vocab_size > c.vocab_size) {
    options_.valid_vocab_size = c.vocab_size;
  }
  info_.sizes = options.sizes;
  info_.vocab_size = c.vocab_size;
  info_.max_context = options_.max_context > 0
                          ? std::min(options_.max_context, c.max_position_embeddings)
                          : c.max_position_embeddings;
  info_.device = model_->pool() != nullptr
                     ? absl::StrCat("cpu (", model_->pool()->num_threads(), " threads)")
                     : "cpu";
  if (draft != nullptr && options_.speculative.method == engine::SpeculativeMethod::kDraft) {
    draft_ = std::make_unique<CpuDraft>(std::move(draft), options.sizes.kv_blocks,
                                        options.sizes.block_tokens);
  }
  info_.kv_cache_bytes = kv_.bytes() + (draft_ != nullptr ? draft_->kv_bytes() : 0);
  info_.default_prefill_tokens = kCpuDefaultPrefillTokens;
  info_.constraints = true;
  info_.speculates_constrained = true;  // SampleSlot masks each verified row
  info_.logit_bias = true;
  info_.prompt_logprobs = true;
  info_.kv_on_demand = true;
  if (options_.async) {
    thread_ = std::thread([this] {
      SetCurrentThreadName("runner");
      ThreadLoop();
    });
  }
}

CpuRunner::~CpuRunner() {
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
}

absl::Status CpuRunner::Launch(StepPlan plan) {
  if (in_flight_ >= kMaxInFlight) {
    return absl::FailedPreconditionError("Launch: too many steps in flight");
  }
  Pending pending{std::move(plan), in_flight_ == 0};
  ++in_flight_;
  if (!options_.async) {
    Done d;
    d.status = Execute(pending, d.result);
    std::lock_guard<std::mutex> lock(mu_);
    done_.push_back(std::move(d));
    return absl::OkStatus();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.push_back(std::move(pending));
  }
  cv_.notify_all();
  return absl::OkStatus();
}

absl::StatusOr<StepResult> CpuRunner::Collect() {
  if (in_flight_ == 0) return absl::FailedPreconditionError("Collect: no step in flight");
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !done_.empty(); });
  Done d = std::move(done_.front());
  done_.pop_front();
  --in_flight_;
  if (!d.status.ok()) return d.status;
  return std::move(d.result);
}

void CpuRunner::ThreadLoop() {
  for (;;) {
    std::optional<Pending> pending;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
      if (stop_) return;
      pending.emplace(std::move(pending_.front()));
      pending_.pop_front();
    }
    Done d;
    d.status = Execute(*pending, d.result);
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_.push_back(std::move(d));
    }
    cv_.notify_all();
  }
}

absl::Status CpuRunner::ApplyAdmissions(const StepPlan& plan) {
  for (int32_t s : plan.releases) {
    if (s >= 0 && s < options_.sizes.max_slots) slots_[s] = SlotState{};
  }
  for (const auto& a : plan.admissions) {
    if (a.slot < 0 || a.slot >= options_.sizes.max_slots || a.request == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("plan ", plan.step_id, ": bad admission"));
    }
    SlotState& slot = slots_[a.slot];
    slot = SlotState{};
    slot.request = a.request;
    slot.blocks = a.blocks;
    if (a.request->sampling.repetition_penalty != 1.0f) {
      slot.penalties.AddPrompt(a.request->prompt_ids);
    }
    if (options_.speculative.enabled()) slot.history = a.request->prompt_ids;
    if (a.request->constraint) {
      slot.matcher = std::make_unique<constraint::Matcher>(a.request->constraint);
    }
    if (!a.resumed.empty()) Resume(slot, a.resumed);
  }
  for (const engine::BlockGrant& g : plan.grants) {
    if (g.slot < 0 || g.slot >= options_.sizes.max_slots || slots_[g.slot].request == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan ", plan.step_id, ": blocks granted to free slot ", g.slot));
    }
    std::vector<int32_t>& blocks = slots_[g.slot].blocks;
    blocks.insert(blocks.end(), g.blocks.begin(), g.blocks.end());
  }
  return absl::OkStatus();
}

void CpuRunner::Resume(SlotState& slot, const std::vector<int32_t>& resumed) {
  // The tokens count as generated: max_tokens, penalties, the sampler's counter, the
  // proposers' history and the constraint continue from them.
  slot.prefix = slot.request->prompt_ids;
  slot.prefix.insert(slot.prefix.end(), resumed.begin(), resumed.end());
  for (const int32_t token : resumed) {
    ++slot.generated;
    slot.penalties.AddOutput(token);
    if (options_.speculative.enabled()) slot.history.push_back(token);
    if (slot.matcher != nullptr) slot.matcher->Advance(token);
  }
  slot.last_token = resumed.back();
}

absl::Status CpuRunner::AddPrefills(const StepPlan& plan, int32_t& rows) {
  for (const auto& p : plan.prefills) {
    SlotState& slot = slots_[p.slot];
    const std::vector<int32_t>& prefix =
        slot.prefix.empty() && slot.request != nullptr ? slot.request->prompt_ids : slot.prefix;
    if (slot.request == nullptr || p.start < 0 ||
        p.start + p.num_tokens > static_cast<int32_t>(prefix.size()) ||
        static_cast<int64_t>(slot.blocks.size()) * options_.sizes.block_tokens <
            p.start + p.num_tokens) {
      return absl::InvalidArgumentError(absl::StrCat("plan ", plan.step_id, ": bad prefill"));
    }
    // The first chunk starts after the prompt's cached blocks, which hold the draft's K/V too.
    if (slot.draft_written < 0) slot.draft_written = p.start;
    // Prompt logprobs: a row per token (once: a readmitted request's prefix is not computed
    // for them again).
    const bool every_row = slot.request->prompt_logprobs >= 0 && slot.prefix.empty();
    const int32_t logit_rows = every_row ? p.num_tokens : p.samples ? 1 : 0;
    chunks_.push_back(SeqChunk{static_cast<int32_t>(tokens_.size()), p.num_tokens, p.start,
                               slot.blocks, logit_rows > 0, std::max(1, logit_rows)});
    tokens_.insert(tokens_.end(), prefix.begin() + p.start,
                   prefix.begin() + p.start + p.num_tokens);
    if (every_row) prompt_rows_.push_back(PromptRows{p.slot, p.start, p.num_tokens, rows});
    if (p.samples) sampling_.push_back(SamplingSlot{p.slot, 0, rows + logit_rows - 1});
    rows += logit_rows;
  }
  return absl::OkStatus();
}

absl::Status CpuRunner::BuildBatch(const StepPlan& plan) {
  tokens_.clear();
  chunks_.clear();
  sampling_.clear();
  prompt_rows_.clear();
  int32_t row = 0;  // the next logits row
  if (absl::Status st = AddPrefills(plan, row); !st.ok()) return st;
  const size_t first_decode = sampling_.size();
  for (const engine::DecodeChunk& d : plan.decodes) {
    if (d.slot < 0 || d.slot >= options_.sizes.max_slots || d.max_draft < 0) {
      return absl::InvalidArgumentError(absl::StrCat("plan ", plan.step_id, ": bad decode"));
    }
    const SlotState& slot = slots_[d.slot];
    if (slot.request == nullptr || slot.finished || slot.generated == 0) continue;
    // No proposal past max_tokens (the last output is sampled after the proposals), the
    // context or the slot's blocks.
    const auto position =
        static_cast<int32_t>(slot.request->prompt_ids.size()) + slot.generated - 1;
    const int32_t held =
        static_cast<int32_t>(slot.blocks.size()) * options_.sizes.block_tokens - 1 - position;
    if (held < 0) {
      return absl::InvalidArgumentError(absl::StrCat("plan ", plan.step_id, ": slot ", d.slot,
                                                     " decodes position ", position,
                                                     " past its KV blocks"));
    }
    const int32_t room = std::min(
        {slot.request->max_tokens - slot.generated - 1, info_.max_context - 1 - position, held});
    const int32_t max_draft = options_.speculative.enabled() ? std::clamp(d.max_draft, 0, room) : 0;
    sampling_.push_back(SamplingSlot{d.slot, max_draft});
  }
  if (absl::Status st = Propose(); !st.ok()) return st;
  for (size_t i = first_decode; i < sampling_.size(); ++i) {
    SamplingSlot& s = sampling_[i];
    const SlotState& slot = slots_[s.slot];
    const auto n = static_cast<int32_t>(1 + s.drafts.size());
    const auto position =
        static_cast<int32_t>(slot.request->prompt_ids.size()) + slot.generated - 1;
    chunks_.push_back(
        SeqChunk{static_cast<int32_t>(tokens_.size()), n, position, slot.blocks, true, n});
    tokens_.push_back(slot.last_token);
    tokens_.insert(tokens_.end(), s.drafts.begin(), s.drafts.end());
    s.row = row;
    row += n;
  }
  return absl::OkStatus();
}

absl::Status CpuRunner::Propose() {
  std::vector<DraftJob> jobs;
  for (SamplingSlot& s : sampling_) {
    if (s.max_draft <= 0) continue;
    SlotState& slot = slots_[s.slot];
    if (options_.speculative.method == engine::SpeculativeMethod::kNgram) {
      speculative::ProposeNgram(
          slot.history,
          {.min = options_.speculative.ngram_min, .max = options_.speculative.ngram_max},
          s.max_draft, s.drafts);
    } else if (options_.speculative.method == engine::SpeculativeMethod::kOracle) {
      // Output `generated` comes from the row of the last token; the proposals guess it and
      // the ones after it.
      const std::vector<int32_t>& oracle = slot.request->oracle_ids;
      const auto from = std::min(oracle.size(), static_cast<size_t>(slot.generated));
      const size_t n = std::min(oracle.size() - from, static_cast<size_t>(s.max_draft));
      s.drafts.assign(oracle.begin() + from, oracle.begin() + from + n);
    } else if (draft_ != nullptr) {
      jobs.push_back(DraftJob{slot.request.get(), slot.history, slot.blocks, slot.generated,
                              &slot.penalties, s.max_draft, &slot.draft_written, &s.drafts,
                              &s.draft_probs, slot.matcher.get(), slot.request->stop_token_ids});
    }
  }
  if (!jobs.empty()) LLM_RETURN_IF_ERROR(draft_->Propose(jobs));
  // N-gram and oracle proposals stop where a constrained slot's constraint would refuse one:
  // verification masks each row, so such a proposal could not stand, nor any after it. (The
  // draft model proposes under the mask already, CpuDraft, so every proposal it makes is one
  // the constraint allows.)
  if (draft_ != nullptr) return absl::OkStatus();
  for (SamplingSlot& s : sampling_) {
    const SlotState& slot = slots_[s.slot];
    if (s.drafts.empty() || slot.matcher == nullptr) continue;
    s.drafts.resize(slot.matcher->AllowedPrefix(s.drafts, slot.request->stop_token_ids));
  }
  return absl::OkStatus();
}

void CpuRunner::AddPromptLogprobs() {
  const int32_t vocab = model_->config().vocab_size;
  // Ids past the tokenizer's vocabulary are never a prompt token nor an alternative.
  const auto valid = static_cast<size_t>(std::min(options_.valid_vocab_size, vocab));
  for (const PromptRows& pr : prompt_rows_) {
    SlotState& slot = slots_[pr.slot];
    const engine::EngineRequest& req = *slot.request;
    const auto prompt = static_cast<int32_t>(req.prompt_ids.size());
    if (pr.start == 0) slot.prompt_logprobs = {sampling::SampledToken{req.prompt_ids[0], 0.0f, {}}};
    // Row j is the distribution of the token after position start + j; rows over the pool.
    const int32_t rows = std::max(0, std::min(pr.num_tokens, prompt - 1 - pr.start));
    const size_t first = slot.prompt_logprobs.size();
    slot.prompt_logprobs.resize(first + static_cast<size_t>(rows));
    const auto score = [&](size_t begin, size_t end) {
      for (size_t j = begin; j < end; ++j) {
        const std::span<const float> row(logits_.data() + (static_cast<size_t>(pr.row) + j) * vocab,
                                         valid);
        slot.prompt_logprobs[first + j] = sampling::RawLogprobs(
            row, req.prompt_ids[static_cast<size_t>(pr.start) + j + 1], req.prompt_logprobs);
      }
    };
    if (ThreadPool* pool = model_->pool(); pool != nullptr && rows > 1) {
      pool->ParallelFor(static_cast<size_t>(rows), 16, score);
    } else {
      score(0, static_cast<size_t>(rows));
    }
  }
}

FinishReason CpuRunner::Append(SlotState& slot, int32_t token) {
  const engine::EngineRequest& req = *slot.request;
  ++slot.generated;
  slot.last_token = token;
  slot.penalties.AddOutput(token);
  if (options_.speculative.enabled()) slot.history.push_back(token);
  if (std::find(req.stop_token_ids.begin(), req.stop_token_ids.end(), token) !=
      req.stop_token_ids.end()) {
    return FinishReason::kStopToken;
  }
  return slot.generated >= req.max_tokens ? FinishReason::kLength : FinishReason::kNone;
}

void CpuRunner::SampleSlot(SamplingSlot& s, sampling::Sampler& sampler) {
  SlotState& slot = slots_[s.slot];
  const engine::EngineRequest& req = *slot.request;
  const int32_t vocab = model_->config().vocab_size;
  const auto drafts = static_cast<int32_t>(s.drafts.size());
  const auto history_before = static_cast<int32_t>(slot.history.size());
  s.outputs.clear();
  s.accepted = 0;
  for (int32_t i = 0; i <= drafts; ++i) {
    std::span<float> row(logits_.data() + static_cast<size_t>(s.row + i) * vocab, vocab);
    for (int32_t t = options_.valid_vocab_size; t < vocab; ++t) {
      row[t] = -std::numeric_limits<float>::infinity();
    }
    if (slot.matcher != nullptr) slot.matcher->Apply(row, req.stop_token_ids);
    bool accepted = false;
    sampling::SampledToken token;
    if (i < drafts) {
      std::span<const float> q;
      if (!s.draft_probs.empty())
        q = std::span<const float>(s.draft_probs).subspan(i * vocab, vocab);
      token = sampler.Verify(row, req.sampling, slot.penalties, slot.generated, s.drafts[i], q,
                             accepted, req.num_top_logprobs, req.want_logprobs);
    } else {
      token = sampler.Sample(row, req.sampling, slot.penalties, slot.generated,
                             req.num_top_logprobs, req.want_logprobs);
    }
    const FinishReason finish = Append(slot, token.token_id);
    if (slot.matcher != nullptr && finish != FinishReason::kStopToken) {
      slot.matcher->Advance(token.token_id);
    }
    s.outputs.push_back(SlotOutput{s.slot, req.key, std::move(token), finish});
    s.accepted += accepted ? 1 : 0;
    slot.finished = finish != FinishReason::kNone;
    if (slot.finished || !accepted) break;
  }
  if (drafts > 0) {
    s.outputs.front().draft_tokens = drafts;
    s.outputs.front().accepted_tokens = s.accepted;
  }
  // The prefix's sampled output: the prompt's logprobs, complete now.
  if (!slot.prompt_logprobs.empty()) {
    s.outputs.front().prompt_logprobs = std::move(slot.prompt_logprobs);
    slot.prompt_logprobs.clear();
  }
  // The draft saw the history and its proposals (all of them, even where the constraint cut
  // them to none); what stands is the history up to the last accepted proposal.
  if (draft_ != nullptr) CpuDraft::Rollback(history_before + s.accepted, &slot.draft_written);
}

absl::Status CpuRunner::Execute(const Pending& pending, StepResult& result) {
  const StepPlan& plan = pending.plan;
  const auto start = std::chrono::steady_clock::now();
  if (absl::Status st = ApplyAdmissions(plan); !st.ok()) return st;
  if (absl::Status st = BuildBatch(plan); !st.ok()) return st;

  result = StepResult{};
  result.step_id = plan.step_id;
  result.computed_tokens = static_cast<int32_t>(tokens_.size());
  if (!chunks_.empty()) {
    if (absl::Status st = model_->Forward({tokens_, chunks_}, kv_, logits_); !st.ok()) return st;
  }
  AddPromptLogprobs();
  // Sampling is independent per slot (its own seed, counter and penalties), so the slots are
  // spread over the thread pool; a slot's tokens do not depend on which thread samples them.
  auto sample_slots = [&](size_t begin, size_t end) {
    thread_local sampling::Sampler sampler;
    for (size_t i = begin; i < end; ++i) SampleSlot(sampling_[i], sampler);
  };
  if (ThreadPool* pool = model_->pool(); pool != nullptr && sampling_.size() > 1) {
    pool->ParallelFor(sampling_.size(), 2, sample_slots);
  } else {
    sample_slots(0, sampling_.size());
  }
  for (SamplingSlot& s : sampling_) {
    for (SlotOutput& out : s.outputs) result.outputs.push_back(std::move(out));
  }
  if (options_.extra_step_seconds > 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(options_.extra_step_seconds));
  }
  const auto end = std::chrono::steady_clock::now();
  result.device_seconds = std::chrono::duration<double>(end - start).count();
  if (!pending.after_idle && has_last_end_) {
    result.gap_seconds = std::max(0.0, std::chrono::duration<double>(start - last_end_).count());
  }
  last_end_ = end;
  has_last_end_ = true;
  return absl::OkStatus();
}

}  // namespace llm::runner
