// llm-bench kv: what KV blocks on demand (engine.kv_on_demand) are worth. --requests requests
// whose answers end after about --answer tokens (each drawn from [answer - spread, answer +
// spread], the same in every run) run three ways on fresh workers of one backend:
//   - "known":     max_tokens is each answer's length (what a client that knew would ask);
//   - "on_demand": max_tokens is --max-tokens and the answer ends early, blocks on demand;
//   - "reserved":  the same load with engine.kv_on_demand off (prompt + max_tokens reserved).
// An answer that ends early is one whose client closes the stream after its tokens (a cancel:
// random weights have no EOS to stop at; the cancel reaches the engine a step or two later, as
// an EOS would be seen a step later). Each run reports output tokens per second (the answers'
// tokens over the wall time), the most requests decoding in one step, and preemptions. The
// issue's check: on_demand within 10% of known, where reserved is far below.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "tools/bench/bench_util.h"
#include "tools/bench/commands.h"
#include "tools/bench/worker_driver.h"
#include "worker/backend/backend.h"
#include "worker/loop/worker.h"

namespace llm::bench {
namespace {

// Calls Worker::Cancel off the output stage's threads (a sink must not call back into the
// worker), for the keys the sinks hand it.
class Canceller {
 public:
  explicit Canceller(loop::Worker& worker) : worker_(worker), thread_([this] { Loop(); }) {}
  ~Canceller() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Cancel(uint64_t key) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      keys_.push_back(key);
    }
    cv_.notify_all();
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !keys_.empty(); });
      if (keys_.empty()) return;
      const uint64_t key = keys_.front();
      keys_.pop_front();
      lock.unlock();
      worker_.Cancel(key);
      lock.lock();
    }
  }

  loop::Worker& worker_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<uint64_t> keys_;
  bool stop_ = false;
  std::thread thread_;
};

// Counts a request's tokens; once it has `answer` of them, the answer is over: it counts the
// request done and, if the stream goes on, has it cancelled.
class AnswerSink : public loop::StreamSink {
 public:
  AnswerSink(int32_t answer, Countdown* done, Canceller* canceller)
      : answer_(answer), done_(done), canceller_(canceller) {}
  void set_key(uint64_t key) {
    key_ = key;
    has_key_ = true;
    MaybeEnd();
  }
  void OnUpdate(loop::StreamUpdate u) override {
    tokens_ += static_cast<int32_t>(u.token_ids.size());
    if (u.finished) finished_ = true;
    MaybeEnd();
  }
  void OnError(const absl::Status& status) override { End(status); }
  int32_t answered() const { return std::min(tokens_.load(), answer_); }

 private:
  void MaybeEnd() {
    if (!has_key_) return;
    if (finished_) {
      End(absl::OkStatus());
    } else if (tokens_ >= answer_) {
      if (End(absl::OkStatus())) canceller_->Cancel(key_);
    }
  }
  bool End(const absl::Status& st) {
    if (ended_.exchange(true)) return false;
    done_->Done(st);
    return true;
  }

  const int32_t answer_;
  Countdown* done_;
  Canceller* canceller_;
  std::atomic<uint64_t> key_{0};
  std::atomic<bool> has_key_{false};
  std::atomic<int32_t> tokens_{0};
  std::atomic<bool> finished_{false};
  std::atomic<bool> ended_{false};
};

struct KvRun {
  std::string name;
  bool on_demand;
  bool known;  // max_tokens = the answer's length
};

struct KvLoad {
  int32_t prompt_tokens;
  int32_t max_tokens;
  std::vector<int32_t> answers;
};

// Runs `load` on `worker`: every request at once; the answers' tokens per wall second.
absl::StatusOr<nlohmann::json> RunLoad(loop::Worker& worker, Recorder& recorder, const KvRun& run,
                                       const KvLoad& load, int32_t id_range) {
  Canceller canceller(worker);
  Countdown done;
  std::vector<std::shared_ptr<AnswerSink>> sinks;
  std::mt19937 rng(17);
  recorder.TakeSteps();
  const auto start = Clock::now();
  done.Add(static_cast<int>(load.answers.size()));
  for (const int32_t answer : load.answers) {
    loop::GenerateSpec spec;
    spec.has_text = false;
    spec.token_ids.resize(static_cast<size_t>(load.prompt_tokens));
    for (auto& id : spec.token_ids) id = 256 + static_cast<int32_t>(rng() % (id_range - 256));
    spec.max_tokens = run.known ? answer : load.max_tokens;
    spec.ignore_eos = true;
    sinks.push_back(std::make_shared<AnswerSink>(answer, &done, &canceller));
    auto key = worker.Submit(std::move(spec), sinks.back());
    if (!key.ok()) {
      done.Done(key.status());
      continue;
    }
    sinks.back()->set_key(*key);
  }
  LLM_RETURN_IF_ERROR(done.Wait());
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  // Let the cancels land so the next run starts from an idle worker.
  worker.WaitIdle(Clock::now() + std::chrono::seconds(60));
  int64_t tokens = 0;
  for (const auto& s : sinks) tokens += s->answered();
  int32_t most = 0;
  double decodes = 0;
  const std::vector<StepRecord> steps = recorder.TakeSteps();
  for (const StepRecord& r : steps) {
    most = std::max(most, r.decodes);
    decodes += r.decodes;
  }
  const auto sched = worker.Load().engine.scheduler;
  return nlohmann::json{
      {"run", run.name},
      {"kv_on_demand", run.on_demand},
      {"max_tokens", run.known ? "each answer's length" : std::to_string(load.max_tokens)},
      {"seconds", seconds},
      {"output_tokens", tokens},
      {"tokens_per_second", static_cast<double>(tokens) / seconds},
      {"most_decoding", most},
      {"mean_decoding", steps.empty() ? 0.0 : decodes / steps.size()},
      {"steps", steps.size()},
      {"preemptions", sched.preemptions}};
}

// The settings of one run, read from its flags once.
struct KvBenchSettings {
  backend::BackendOptions backend;  // every run's fresh backend
  int64_t requests = 0, prompt = 0, answer = 0, spread = 0, max_tokens = 0;
  std::string runs;  // --runs, comma-separated
};

void AddKvBenchFlags(FlagSet& flags) {
  flags.Value("model", "checkpoint directory or random:<shape>", "random:small")
      .Value("tokenizer", "tokenizer.json or its directory (default: the model's)", "")
      .Value("backend", "auto, cpu or cuda", "auto")
      .Value("slots", "slot table size", "64")
      .Value("kv-blocks", "KV blocks (0: the backend's sizing)", "0")
      .Value("requests", "requests, all submitted at once", "128")
      .Value("prompt", "prompt tokens per request", "32")
      .Value("answer", "mean answer tokens", "200")
      .Value("spread", "answers are drawn from [answer - spread, answer + spread]", "100")
      .Value("max-tokens", "max_tokens of the runs whose answers end early (at most the context)",
             "4096")
      .Value("runs", "which runs, comma-separated: known, on_demand, reserved",
             "known,on_demand,reserved")
      .Value("cpu-threads", "cpu: threads (0: all cores)", "0");
}

absl::StatusOr<KvBenchSettings> SettingsFromFlags(const FlagSet& flags) {
  KvBenchSettings s;
  int64_t slots = 0, kv_blocks = 0, threads = 0;
  for (auto [name, to] : {std::pair<const char*, int64_t*>{"slots", &slots},
                          {"kv-blocks", &kv_blocks},
                          {"requests", &s.requests},
                          {"prompt", &s.prompt},
                          {"answer", &s.answer},
                          {"spread", &s.spread},
                          {"max-tokens", &s.max_tokens},
                          {"cpu-threads", &threads}}) {
    auto v = flags.GetInt(name);
    if (!v.ok()) return v.status();
    *to = *v;
  }
  if (s.answer < 1 || s.spread < 0 || s.spread >= s.answer) {
    return absl::InvalidArgumentError("--spread: must be in [0, --answer)");
  }
  backend::BackendOptions& bo = s.backend;
  bo.model = flags.GetString("model");
  bo.tokenizer = flags.GetString("tokenizer");
  bo.backend = flags.GetString("backend");
  bo.sizes.max_slots = static_cast<int32_t>(slots);
  bo.sizes.kv_blocks = static_cast<int32_t>(kv_blocks);
  bo.cpu_threads = static_cast<int>(threads);
  s.runs = flags.GetString("runs");
  return s;
}

// The requests' answer lengths, drawn once so that every run gets the same.
KvLoad MakeLoad(const KvBenchSettings& s) {
  KvLoad load{static_cast<int32_t>(s.prompt), static_cast<int32_t>(s.max_tokens), {}};
  std::mt19937 rng(5);
  for (int64_t i = 0; i < s.requests; ++i) {
    load.answers.push_back(static_cast<int32_t>(s.answer - s.spread + rng() % (2 * s.spread + 1)));
  }
  return load;
}

// One run on a fresh backend and worker (what the backend settled goes into `out`), after a
// short warm-up.
absl::StatusOr<nlohmann::json> MeasureRun(const KvBenchSettings& s, const KvLoad& load,
                                          const KvRun& run, nlohmann::json& out) {
  // Declared before the worker: the backend's thread pool must outlive the runner.
  auto b = backend::CreateBackend(s.backend);
  if (!b.ok()) return b.status();
  const runner::RunnerInfo info = b->runner->info();
  out["backend"] = b->backend;
  out["device"] = info.device;
  out["kv_blocks"] = info.sizes.kv_blocks;
  out["slots"] = info.sizes.max_slots;
  const int32_t id_range = std::min(b->tokenizer->vocab_size(), 30000);
  KvLoad capped = load;
  capped.max_tokens = std::min(load.max_tokens, info.max_context - load.prompt_tokens);
  if (capped.max_tokens < s.answer + s.spread) {
    return absl::InvalidArgumentError(
        "--max-tokens: the context leaves fewer than the longest answer");
  }
  Recorder recorder;
  loop::WorkerOptions wo;
  wo.scheduler.kv_on_demand = run.on_demand;
  wo.scheduler.max_batch_tokens = 0;
  wo.max_queued_requests = static_cast<int32_t>(s.requests);
  auto worker = loop::Worker::Create(wo, std::move(b->runner), std::move(b->tokenizer),
                                     b->config.eos_token_ids, &recorder, &recorder);
  if (!worker.ok()) return worker.status();
  // A short warm-up, so one-time costs stay out.
  if (absl::Status st = RunRequests(**worker, 2, load.prompt_tokens, 4, id_range, 3); !st.ok()) {
    return st;
  }
  return RunLoad(**worker, recorder, run, capped, id_range);
}

}  // namespace

int RunKvBench(const std::vector<std::string>& args) {
  const char* cmd = "llm-bench kv";
  auto parsed = ParseSettings(cmd, args, AddKvBenchFlags, SettingsFromFlags);
  if (!parsed.settings) return parsed.exit_code;
  const KvBenchSettings& s = *parsed.settings;
  const KvLoad load = MakeLoad(s);
  const std::string wanted = "," + s.runs + ",";
  nlohmann::json out = {{"benchmark", "kv"},
                        {"model", s.backend.model},
                        {"requests", s.requests},
                        {"prompt_tokens", s.prompt},
                        {"answer_tokens", {{"mean", s.answer}, {"spread", s.spread}}}};
  nlohmann::json runs = nlohmann::json::array();
  for (const KvRun& run : {KvRun{"known", true, true}, KvRun{"on_demand", true, false},
                           KvRun{"reserved", false, false}}) {
    if (wanted.find("," + run.name + ",") == std::string::npos) continue;
    auto r = MeasureRun(s, load, run, out);
    if (!r.ok()) return Fail(cmd, r.status());
    runs.push_back(*r);
  }
  out["runs"] = runs;
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace llm::bench
