#include "worker/runner/cpu_runner.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/thread_name.h"
#include "common/thread_pool.h"

namespace llm::runner {

using engine::SlotOutput;
using engine::StepPlan;
using engine::StepResult;
using sampling::FinishReason;

CpuRunner::CpuRunner(std::unique_ptr<CpuModel> model, const CpuRunnerOptions& options)
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
  info_.kv_cache_bytes = kv_.bytes();
  info_.default_prefill_tokens = kCpuDefaultPrefillTokens;
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

absl::Status CpuRunner::Execute(const Pending& pending, StepResult& result) {
  const StepPlan& plan = pending.plan;
  const auto start = std::chrono::steady_clock::now();
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
  }

  // The batch: prefill chunks, then one token per live decoding slot.
  tokens_.clear();
  chunks_.clear();
  sampling_slots_.clear();
  for (const auto& p : plan.prefills) {
    SlotState& slot = slots_[p.slot];
    if (slot.request == nullptr ||
        p.start + p.num_tokens > static_cast<int32_t>(slot.request->prompt_ids.size())) {
      return absl::InvalidArgumentError(absl::StrCat("plan ", plan.step_id, ": bad prefill"));
    }
    chunks_.push_back(SeqChunk{static_cast<int32_t>(tokens_.size()), p.num_tokens, p.start,
                               slot.blocks, p.samples});
    tokens_.insert(tokens_.end(), slot.request->prompt_ids.begin() + p.start,
                   slot.request->prompt_ids.begin() + p.start + p.num_tokens);
    if (p.samples) sampling_slots_.push_back(p.slot);
  }
  for (int32_t s : plan.decodes) {
    SlotState& slot = slots_[s];
    if (slot.request == nullptr || slot.finished || slot.generated == 0) continue;
    const auto position =
        static_cast<int32_t>(slot.request->prompt_ids.size()) + slot.generated - 1;
    chunks_.push_back(
        SeqChunk{static_cast<int32_t>(tokens_.size()), 1, position, slot.blocks, true});
    tokens_.push_back(slot.last_token);
    sampling_slots_.push_back(s);
  }

  result = StepResult{};
  result.step_id = plan.step_id;
  if (!chunks_.empty()) {
    if (absl::Status st = model_->Forward({tokens_, chunks_}, kv_, logits_); !st.ok()) return st;
  }
  // Sampling is independent per slot (its own seed, counter and penalties), so the rows are
  // spread over the thread pool; a slot's token does not depend on which thread samples it.
  const int32_t vocab = model_->config().vocab_size;
  samples_.resize(sampling_slots_.size());
  auto sample_rows = [&](size_t begin, size_t end) {
    thread_local sampling::Sampler sampler;
    for (size_t i = begin; i < end; ++i) {
      SlotState& slot = slots_[sampling_slots_[i]];
      const engine::EngineRequest& req = *slot.request;
      std::span<float> row(logits_.data() + i * vocab, vocab);
      for (int32_t t = options_.valid_vocab_size; t < vocab; ++t) {
        row[t] = -std::numeric_limits<float>::infinity();
      }
      samples_[i] = sampler.Sample(row, req.sampling, slot.penalties, slot.generated,
                                   req.num_top_logprobs, req.want_logprobs);
    }
  };
  if (ThreadPool* pool = model_->pool(); pool != nullptr && sampling_slots_.size() > 1) {
    pool->ParallelFor(sampling_slots_.size(), 2, sample_rows);
  } else {
    sample_rows(0, sampling_slots_.size());
  }
  for (size_t i = 0; i < sampling_slots_.size(); ++i) {
    SlotState& slot = slots_[sampling_slots_[i]];
    const engine::EngineRequest& req = *slot.request;
    const int32_t token = samples_[i].token_id;
    ++slot.generated;
    slot.last_token = token;
    slot.penalties.AddOutput(token);
    SlotOutput out{sampling_slots_[i], req.key, std::move(samples_[i])};
    if (std::find(req.stop_token_ids.begin(), req.stop_token_ids.end(), token) !=
        req.stop_token_ids.end()) {
      out.finish = FinishReason::kStopToken;
    } else if (slot.generated >= req.max_tokens) {
      out.finish = FinishReason::kLength;
    }
    slot.finished = out.finish != FinishReason::kNone;
    result.outputs.push_back(std::move(out));
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
