// llm-bench engine: the host cost of the engine loop. A runner that returns at once stands in
// for the model, so each engine step costs only the host's work: draining the intake,
// Schedule(), Launch/Collect bookkeeping, Update(), and handing the tokens to the output
// stage. Reports microseconds per step at 1..max running slots in steady decode, and,
// separately, the output stage's detokenization throughput per thread.
#include <chrono>
#include <cstdio>
#include <deque>
#include <mutex>
#include <thread>

#include "nlohmann/json.hpp"
#include "tools/bench/bench_util.h"
#include "tools/bench/commands.h"
#include "worker/frontend/tokenizer.h"
#include "worker/loop/engine_loop.h"
#include "worker/loop/output_stage.h"

namespace llm::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Keeps the per-slot state a real runner keeps, and nothing else.
class NullRunner : public runner::ModelRunner {
 public:
  NullRunner(int32_t slots, int32_t blocks, int32_t vocab) : slots_(slots) {
    info_.sizes = {.max_slots = slots, .kv_blocks = blocks, .block_tokens = 16};
    info_.vocab_size = vocab;
    info_.max_context = 1 << 30;
    info_.device = "null";
    vocab_ = vocab;
  }
  const runner::RunnerInfo& info() const override { return info_; }
  int in_flight() const override { return static_cast<int>(plans_.size()); }
  absl::Status Launch(engine::StepPlan plan) override {
    plans_.push_back(std::move(plan));
    return absl::OkStatus();
  }
  absl::StatusOr<engine::StepResult> Collect() override {
    engine::StepPlan plan = std::move(plans_.front());
    plans_.pop_front();
    for (int32_t s : plan.releases) slots_[s] = Slot{};
    for (const auto& a : plan.admissions)
      slots_[a.slot] = Slot{a.request->key, a.request->max_tokens};
    engine::StepResult r;
    r.step_id = plan.step_id;
    r.outputs.reserve(plan.decodes.size() + plan.prefills.size());
    auto sample = [&](int32_t s) {
      Slot& slot = slots_[s];
      if (slot.finished) return;
      ++slot.generated;
      engine::SlotOutput out{s, slot.key, {(s * 7 + slot.generated) % vocab_, 0.0f, {}}};
      if (slot.generated >= slot.max_tokens) out.finish = sampling::FinishReason::kLength;
      slot.finished = out.finish != sampling::FinishReason::kNone;
      r.outputs.push_back(std::move(out));
    };
    for (const auto& p : plan.prefills) {
      if (p.samples) sample(p.slot);
    }
    for (const auto& d : plan.decodes) sample(d.slot);
    r.device_seconds = 0;
    return r;
  }

 private:
  struct Slot {
    uint64_t key = 0;
    int32_t max_tokens = 0;
    int32_t generated = 0;
    bool finished = false;
  };
  runner::RunnerInfo info_;
  std::vector<Slot> slots_;
  std::deque<engine::StepPlan> plans_;
  int32_t vocab_;
};

// Takes the events as a real consumer would (under a lock, moved out) and drops them.
class DroppingEvents : public loop::EngineEvents {
 public:
  void OnAdmitted(const std::vector<uint64_t>&, Clock::time_point) override {}
  void OnTokens(std::vector<engine::TokenEvent>& events, Clock::time_point) override {
    std::lock_guard<std::mutex> lock(mu_);
    tokens_ += events.size();
    sink_.swap(events);
  }
  void OnFailed(const std::vector<uint64_t>&, const absl::Status&) override {}
  uint64_t tokens() {
    std::lock_guard<std::mutex> lock(mu_);
    return tokens_;
  }

 private:
  std::mutex mu_;
  std::vector<engine::TokenEvent> sink_;
  uint64_t tokens_ = 0;
};

struct StepCost {
  int32_t running;
  double us_per_step;
  uint64_t steps;
  double tokens_per_s;
};

StepCost MeasureSteps(int32_t max_slots, int32_t running, double seconds) {
  constexpr int32_t kPrompt = 16, kMaxTokens = 1 << 20;
  const int32_t blocks_each = (kPrompt + kMaxTokens + 15) / 16;
  engine::SchedulerConfig config;
  config.sizes.max_slots = max_slots;
  config.sizes.kv_blocks = blocks_each * running;
  config.max_batch_tokens = max_slots + 512;
  config.max_prefill_tokens = 512;
  DroppingEvents events;
  loop::EngineLoop loop(config,
                        std::make_unique<NullRunner>(max_slots, config.sizes.kv_blocks, 32000),
                        &events, nullptr);
  loop.Start();
  for (int32_t i = 0; i < running; ++i) {
    auto r = std::make_shared<engine::EngineRequest>();
    r->key = static_cast<uint64_t>(i + 1);
    r->prompt_ids.assign(kPrompt, 5);
    r->max_tokens = kMaxTokens;
    loop.Submit(r);
  }
  // Wait until every request decodes, then measure.
  while (loop.stats().scheduler.running_requests < running) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const uint64_t steps0 = loop.stats().steps;
  const uint64_t tokens0 = events.tokens();
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const uint64_t steps1 = loop.stats().steps;
  const uint64_t tokens1 = events.tokens();
  const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  loop.Stop();
  const uint64_t steps = steps1 - steps0;
  return {running, steps > 0 ? elapsed * 1e6 / steps : 0.0, steps,
          static_cast<double>(tokens1 - tokens0) / elapsed};
}

// Output-stage throughput: one thread detokenizing and stop-matching `requests` streams.
double MeasureOutputStage(const frontend::Tokenizer& tok, int requests, int tokens_each) {
  class NullSink : public loop::StreamSink {
   public:
    void OnUpdate(loop::StreamUpdate u) override {
      if (u.finished) done.fetch_add(1);
    }
    void OnError(const absl::Status&) override { done.fetch_add(1); }
    std::atomic<int> done{0};
  };
  auto sink = std::make_shared<NullSink>();
  loop::OutputStage stage(
      tok, 1, [](uint64_t) {}, nullptr);
  const std::vector<int32_t> prompt = *tok.Encode("Once upon a time", true);
  for (int r = 0; r < requests; ++r) {
    loop::OutputContext ctx;
    ctx.sink = sink;
    ctx.prompt_ids = prompt;
    ctx.stop = {"\n\n\n"};
    ctx.arrival = Clock::now();
    stage.Register(static_cast<uint64_t>(r + 1), ctx);
  }
  const auto t0 = Clock::now();
  std::vector<engine::TokenEvent> step;
  for (int t = 0; t < tokens_each; ++t) {
    step.clear();
    for (int r = 0; r < requests; ++r) {
      step.push_back(
          {static_cast<uint64_t>(r + 1),
           {100 + (r * 31 + t * 17) % 1800, 0.0f, {}},
           t + 1 == tokens_each ? sampling::FinishReason::kLength : sampling::FinishReason::kNone});
    }
    stage.OnTokens(step, Clock::now());
  }
  while (sink->done.load() < requests) std::this_thread::yield();
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return static_cast<double>(requests) * tokens_each / s;
}

}  // namespace

int RunEngineBench(const std::vector<std::string>& args) {
  const std::string cmd = "llm-bench engine";
  FlagSet flags;
  flags.Value("slots", "slot table size; running slots go 1, 2, 4, ... up to it", "256")
      .Value("seconds", "measuring time per point", "1")
      .Value("tokenizer", "tokenizer for the output-stage part",
             SharedPath("models/tinystories-656k"));
  if (int rc = ParseOrExit(cmd, flags, args); rc >= 0) return rc;
  auto slots = flags.GetInt("slots");
  auto seconds = flags.GetDouble("seconds");
  if (!slots.ok()) return Fail(cmd, slots.status());
  if (!seconds.ok()) return Fail(cmd, seconds.status());
  nlohmann::json points = nlohmann::json::array();
  for (int64_t running = 1; running <= *slots; running *= 2) {
    const StepCost c =
        MeasureSteps(static_cast<int32_t>(*slots), static_cast<int32_t>(running), *seconds);
    points.push_back({{"running_slots", c.running},
                      {"host_us_per_step", c.us_per_step},
                      {"steps", c.steps},
                      {"tokens_per_s", c.tokens_per_s}});
    if (running * 2 > *slots && running != *slots) running = *slots / 2;  // end on --slots
  }
  auto tok = frontend::Tokenizer::Load(flags.GetString("tokenizer"));
  if (!tok.ok()) return Fail(cmd, tok.status());
  const double detok = MeasureOutputStage(**tok, 256, 400);
  nlohmann::json out = {{"benchmark", "engine"},
                        {"what",
                         "host time per engine step with a runner that returns at once: intake, "
                         "Schedule, Launch/Collect, Update, handing tokens to the output stage"},
                        {"max_slots", *slots},
                        {"points", points},
                        {"output_stage_tokens_per_s_per_thread", detok}};
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace llm::bench
