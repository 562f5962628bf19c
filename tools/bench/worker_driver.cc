#include "tools/bench/worker_driver.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>

#include "common/status_macros.h"

namespace llm::bench {
namespace {

class CountingSink : public loop::StreamSink {
 public:
  explicit CountingSink(Countdown* c) : c_(c) {}
  void OnUpdate(loop::StreamUpdate u) override {
    if (u.finished) c_->Done(absl::OkStatus());
  }
  void OnError(const absl::Status& st) override { c_->Done(st); }

 private:
  Countdown* c_;
};

}  // namespace

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return -1.0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

void Recorder::OnStep(double step_s, double gap_s, int32_t tokens, int32_t decodes,
                      int32_t prompt_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  steps_.push_back({step_s, gap_s, tokens, decodes, prompt_tokens, Clock::now()});
  max_decodes_ = std::max(max_decodes_, decodes);
  cv_.notify_all();
}

void Recorder::OnRequestFinished(const loop::RequestStats& s) {
  std::lock_guard<std::mutex> lock(mu_);
  requests_.push_back(s);
}

bool Recorder::WaitForDecodes(int32_t n, const Countdown& requests) {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return max_decodes_ >= n; })) {
    if (requests.pending() == 0) return false;
  }
  return true;
}

std::vector<StepRecord> Recorder::TakeSteps() {
  std::lock_guard<std::mutex> lock(mu_);
  max_decodes_ = 0;
  return std::exchange(steps_, {});
}

std::vector<loop::RequestStats> Recorder::TakeRequests() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(requests_, {});
}

void Countdown::Add(int n) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_ += n;
}

void Countdown::Done(const absl::Status& st) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!st.ok() && error_.ok()) error_ = st;
  if (--pending_ == 0) cv_.notify_all();
}

int Countdown::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_;
}

absl::Status Countdown::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return pending_ == 0; });
  return error_;
}

absl::Status SubmitRequests(loop::Worker& worker, int n, int32_t prompt_tokens, int32_t max_tokens,
                            int32_t id_range, uint64_t seed, Countdown& done, float temperature) {
  done.Add(n);
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int i = 0; i < n; ++i) {
    loop::GenerateSpec spec;
    spec.has_text = false;
    spec.token_ids.resize(prompt_tokens);
    for (auto& id : spec.token_ids) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      id = 256 + static_cast<int32_t>((state >> 33) % static_cast<uint64_t>(id_range - 256));
    }
    spec.max_tokens = max_tokens;
    spec.ignore_eos = true;
    spec.sampling.temperature = temperature;
    spec.sampling.seed = seed + static_cast<uint64_t>(i);
    auto key = worker.Submit(std::move(spec), std::make_shared<CountingSink>(&done));
    if (!key.ok()) {
      for (int j = i; j < n; ++j) done.Done(absl::OkStatus());  // never submitted
      // The ones submitted hold `done`: they finish before the caller may drop it.
      done.Wait().IgnoreError();
      return key.status();
    }
  }
  return absl::OkStatus();
}

absl::Status RunRequests(loop::Worker& worker, int n, int32_t prompt_tokens, int32_t max_tokens,
                         int32_t id_range, uint64_t seed, float temperature) {
  Countdown done;
  LLM_RETURN_IF_ERROR(
      SubmitRequests(worker, n, prompt_tokens, max_tokens, id_range, seed, done, temperature));
  return done.Wait();
}

absl::StatusOr<nlohmann::json> MeasureTtft(loop::Worker& worker, Recorder& recorder,
                                           const std::vector<int32_t>& prompts, int64_t runs,
                                           int32_t max_context, int32_t id_range) {
  nlohmann::json ttft = nlohmann::json::array();
  for (int32_t len : prompts) {
    if (len >= max_context) {
      ttft.push_back({{"prompt_tokens", len},
                      {"skipped", "past the runner's context of " + std::to_string(max_context)}});
      continue;
    }
    std::vector<double> ms;
    for (int64_t r = 0; r < runs; ++r) {
      // A prompt of its own per length and run: none is a prefix of another (prefix cache).
      LLM_RETURN_IF_ERROR(RunRequests(worker, 1, len, 1, id_range, (uint64_t{1} << 20) * len + r));
      for (const auto& s : recorder.TakeRequests()) {
        if (s.ttft_seconds >= 0) ms.push_back(s.ttft_seconds * 1e3);
      }
      recorder.TakeSteps();
    }
    ttft.push_back({{"prompt_tokens", len}, {"ttft_ms_median", Percentile(ms, 0.5)}});
  }
  return ttft;
}

absl::StatusOr<nlohmann::json> MeasureStall(loop::Worker& worker, Recorder& recorder,
                                            int32_t decodes, int32_t long_prompt,
                                            int32_t max_prefill_tokens, double slowdown,
                                            int32_t id_range) {
  nlohmann::json stall = {{"decoding_requests", decodes},
                          {"prompt_tokens", long_prompt},
                          {"max_prefill_tokens", max_prefill_tokens}};
  recorder.TakeSteps();
  recorder.TakeRequests();
  // The decoding requests outlast their own admission (64-token prompts) and the long prompt's
  // chunks, with a margin on both sides.
  constexpr int32_t kShortPrompt = 64;
  const int32_t chunks = (long_prompt + max_prefill_tokens - 1) / max_prefill_tokens;
  const int32_t admission = (decodes * kShortPrompt + max_prefill_tokens - 1) / max_prefill_tokens;
  Countdown decoding, prefilling;
  // Paced, a chunk may wait many steps (about its cost over (slowdown - 1) decode steps).
  const int32_t per_chunk =
      slowdown > 0 ? 2 + static_cast<int32_t>(std::ceil(64 / (slowdown - 1))) : 2;
  LLM_RETURN_IF_ERROR(SubmitRequests(worker, decodes, kShortPrompt,
                                     per_chunk * chunks + admission + 128, id_range, 3000,
                                     decoding));
  // From here the decoding requests hold `decoding`: every path waits for them.
  absl::Status st = absl::OkStatus();
  if (!recorder.WaitForDecodes(decodes, decoding)) {
    st = absl::InternalError(
        "stall run: the decoding requests ended before all of them decoded in one step");
  }
  // Drop the steps so far, the one that completed the last decoder's prompt included.
  recorder.TakeSteps();
  if (st.ok()) {
    st = SubmitRequests(worker, 1, long_prompt, 1, id_range, 3001, prefilling);
  }
  if (st.ok()) st = prefilling.Wait();
  const absl::Status decoded = decoding.Wait();
  LLM_RETURN_IF_ERROR(st);
  LLM_RETURN_IF_ERROR(decoded);
  std::vector<double> mixed, plain;
  const std::vector<StepRecord> steps = recorder.TakeSteps();
  // The decoders' time per token while the prompt prefills: every step from its first chunk
  // to its last (paced steps without a chunk included), with every decoder in it.
  double window_ms = 0;
  int window_steps = 0, pending = 0;
  double pending_ms = 0;
  bool started = false;
  for (const StepRecord& r : steps) {
    if (r.decodes < decodes) continue;  // before all decode, or after some finished
    (r.prompt_tokens > 0 ? mixed : plain).push_back(r.step_s * 1e3);
    started = started || r.prompt_tokens > 0;
    if (!started) continue;
    pending_ms += r.step_s * 1e3;
    ++pending;
    if (r.prompt_tokens > 0) {  // the window reaches this chunk
      window_ms += pending_ms;
      window_steps += pending;
      pending_ms = 0;
      pending = 0;
    }
  }
  for (const auto& s : recorder.TakeRequests()) {
    if (s.prompt_tokens == long_prompt && s.ttft_seconds >= 0) {
      stall["long_prompt_ttft_ms"] = s.ttft_seconds * 1e3;
    }
  }
  stall["prefill_steps"] = mixed.size();
  stall["tpot_ms_during_prefill_median"] = Percentile(mixed, 0.5);
  stall["tpot_ms_during_prefill_max"] = Percentile(mixed, 1.0);
  stall["tpot_ms_decode_only_median"] = Percentile(plain, 0.5);
  stall["tpot_ms_during_prefill_mean"] = window_steps > 0 ? window_ms / window_steps : 0.0;
  stall["prefill_window_steps"] = window_steps;
  return stall;
}

nlohmann::json SpeculationByBatch(const engine::SchedulerStats& stats) {
  using engine::SpeculationPolicy;
  nlohmann::json j = nlohmann::json::object();
  for (int g = 0; g < SpeculationPolicy::kGroups; ++g) {
    const int8_t k = stats.speculation_by_batch[static_cast<size_t>(g)];
    if (k != SpeculationPolicy::kMeasuring) j[SpeculationPolicy::GroupLabel(g)] = k;
  }
  return j;
}

nlohmann::json SpeculationAt(const engine::SchedulerStats& stats, int32_t decoding) {
  using engine::SpeculationPolicy;
  const int8_t k =
      stats.speculation_by_batch[static_cast<size_t>(SpeculationPolicy::GroupOf(decoding))];
  if (k == SpeculationPolicy::kMeasuring) return "measuring";
  return k;
}

}  // namespace llm::bench
