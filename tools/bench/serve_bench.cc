// llm-bench serve: a closed-loop load generator against a worker or router. C client lanes
// each send Generate requests one after another until N requests are done; per request it
// records time to first token, time per output token and end-to-end latency as the client sees
// them. Several concurrencies (--concurrency 1,8,32) run one after another against the same
// target in one invocation, so their throughputs can be compared side by side.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "llm/v1/generation.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "tools/bench/bench_util.h"
#include "tools/bench/commands.h"

namespace llm::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct RequestSample {
  double ttft_s = -1;
  double tpot_s = -1;
  double e2e_s = 0;
  int tokens = 0;
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  return v[i];
}

// One level's closed loop: `concurrency` lanes, each starting its next request when the last
// one ends, until `requests` have been started. Calls use gRPC's callback API, so the client
// spends no thread per stream (it shares the machine with the server it measures).
struct Level {
  int requests = 0;
  std::chrono::seconds timeout{600};  // per request
  llm::v1::GenerateRequest base;
  std::vector<std::unique_ptr<llm::v1::Generation::Stub>> stubs;
  std::atomic<int> next{0};
  std::mutex mu;
  std::condition_variable cv;
  int active_lanes = 0;                // guarded by mu
  std::vector<RequestSample> samples;  // guarded by mu
  std::map<std::string, int> errors;   // guarded by mu
};

void StartNext(Level* level, int lane);

class BenchCall : public grpc::ClientReadReactor<llm::v1::GenerateResponse> {
 public:
  BenchCall(Level* level, int lane, int index) : level_(level), lane_(lane) {
    request_ = level->base;
    request_.set_request_id("bench-" + std::to_string(index));
    request_.mutable_sampling()->set_seed(static_cast<uint64_t>(index));
  }
  void Start() {
    t0_ = Clock::now();
    // A stream that never ends fails its request instead of holding the benchmark forever.
    context_.set_deadline(std::chrono::system_clock::now() + level_->timeout);
    level_->stubs[lane_ % level_->stubs.size()]->async()->Generate(&context_, &request_, this);
    StartRead(&response_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    if (response_.token_ids_size() > 0) {
      const auto now = Clock::now();
      if (sample_.tokens == 0) first_ = now;
      sample_.tokens += response_.token_ids_size();
      last_ = now;
    }
    StartRead(&response_);
  }
  void OnDone(const grpc::Status& status) override {
    const auto t1 = Clock::now();
    Level* level = level_;
    const int lane = lane_;
    {
      std::lock_guard<std::mutex> lock(level->mu);
      if (!status.ok()) {
        ++level->errors[std::to_string(static_cast<int>(status.error_code())) + " " +
                        status.error_message()];
      } else {
        sample_.e2e_s = std::chrono::duration<double>(t1 - t0_).count();
        if (sample_.tokens > 0)
          sample_.ttft_s = std::chrono::duration<double>(first_ - t0_).count();
        if (sample_.tokens > 1) {
          sample_.tpot_s =
              std::chrono::duration<double>(last_ - first_).count() / (sample_.tokens - 1);
        }
        level->samples.push_back(sample_);
      }
    }
    delete this;
    StartNext(level, lane);
  }

 private:
  Level* level_;
  int lane_;
  grpc::ClientContext context_;
  llm::v1::GenerateRequest request_;
  llm::v1::GenerateResponse response_;
  RequestSample sample_;
  Clock::time_point t0_{}, first_{}, last_{};
};

void StartNext(Level* level, int lane) {
  const int i = level->next.fetch_add(1);
  if (i >= level->requests) {
    std::lock_guard<std::mutex> lock(level->mu);
    if (--level->active_lanes == 0) level->cv.notify_all();
    return;
  }
  (new BenchCall(level, lane, i))->Start();
}

nlohmann::json RunLevel(const std::string& target, int concurrency, int requests, int channels,
                        const llm::v1::GenerateRequest& base) {
  Level level;
  level.requests = requests;
  level.base = base;
  // Lanes share `channels` connections round-robin (1: every stream multiplexed on one
  // connection, as a router does; = concurrency: independent clients).
  for (int k = 0; k < std::max(1, std::min(channels, concurrency)); ++k) {
    grpc::ChannelArguments args;
    args.SetInt("llm.bench.channel", k);  // distinct connections, not one shared subchannel
    level.stubs.push_back(llm::v1::Generation::NewStub(
        grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args)));
  }
  level.active_lanes = concurrency;
  const auto start = Clock::now();
  for (int c = 0; c < concurrency; ++c) StartNext(&level, c);
  {
    std::unique_lock<std::mutex> lock(level.mu);
    level.cv.wait(lock, [&] { return level.active_lanes == 0; });
  }
  std::vector<RequestSample>& samples = level.samples;
  std::map<std::string, int>& errors = level.errors;
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> ttft, tpot, e2e;
  int64_t tokens = 0;
  for (const auto& s : samples) {
    if (s.ttft_s >= 0) ttft.push_back(s.ttft_s * 1e3);
    if (s.tpot_s >= 0) tpot.push_back(s.tpot_s * 1e3);
    e2e.push_back(s.e2e_s * 1e3);
    tokens += s.tokens;
  }
  int error_count = 0;
  nlohmann::json error_list = nlohmann::json::object();
  for (const auto& [what, n] : errors) {
    error_list[what] = n;
    error_count += n;
  }
  return {{"concurrency", concurrency},
          {"requests", requests},
          {"completed", samples.size()},
          {"errors", error_count},
          {"error_messages", error_list},
          {"wall_s", wall},
          {"output_tokens", tokens},
          {"output_tokens_per_s", tokens / wall},
          {"requests_per_s", samples.size() / wall},
          {"ttft_ms_p50", Percentile(ttft, 0.5)},
          {"ttft_ms_p99", Percentile(ttft, 0.99)},
          {"tpot_ms_p50", Percentile(tpot, 0.5)},
          {"tpot_ms_p99", Percentile(tpot, 0.99)},
          {"e2e_ms_p50", Percentile(e2e, 0.5)},
          {"e2e_ms_p99", Percentile(e2e, 0.99)}};
}

}  // namespace

int RunServeBench(const std::vector<std::string>& args) {
  const std::string cmd = "llm-bench serve";
  FlagSet flags;
  flags.Value("target", "worker or router address, host:port")
      .Value("concurrency", "client streams at once; a comma list runs each in turn", "1")
      .Value("requests", "requests per concurrency level", "64")
      .Value("prompt", "prompt text", "Once upon a time")
      .Value("max-tokens", "tokens per request", "128")
      .Value("channels", "connections the client streams share (1: like a router)", "1")
      .Value("rounds",
             "times the whole list of concurrencies runs, interleaved; each level reports its "
             "median round (by throughput) and every round's throughput",
             "1")
      .Value("temperature", "sampling temperature (each request gets its own seed)", "0.8")
      .Bool("ignore-eos", "always generate max-tokens tokens");
  if (int rc = ParseOrExit(cmd, flags, args); rc >= 0) return rc;
  if (absl::Status st = flags.Require({"target"}); !st.ok()) return Fail(cmd, st);
  auto requests = flags.GetInt("requests");
  auto max_tokens = flags.GetInt("max-tokens");
  auto temperature = flags.GetDouble("temperature");
  auto channels = flags.GetInt("channels");
  if (!channels.ok()) return Fail(cmd, channels.status());
  for (const auto* v : {&requests, &max_tokens}) {
    if (!v->ok()) return Fail(cmd, v->status());
  }
  if (!temperature.ok()) return Fail(cmd, temperature.status());
  std::vector<int> levels;
  for (const auto& part : absl::StrSplit(flags.GetString("concurrency"), ',')) {
    int c = 0;
    if (!absl::SimpleAtoi(part, &c) || c < 1) {
      return Fail(cmd, absl::InvalidArgumentError("--concurrency: '" + std::string(part) +
                                                  "' is not a positive integer"));
    }
    levels.push_back(c);
  }
  llm::v1::GenerateRequest base;
  base.set_text(flags.GetString("prompt"));
  base.set_max_tokens(static_cast<uint32_t>(*max_tokens));
  base.mutable_sampling()->set_temperature(static_cast<float>(*temperature));
  base.set_ignore_eos(flags.GetBool("ignore-eos"));
  nlohmann::json results = nlohmann::json::array();
  auto rounds = flags.GetInt("rounds");
  if (!rounds.ok() || *rounds < 1) {
    return Fail(cmd, rounds.ok() ? absl::InvalidArgumentError("--rounds: must be at least 1")
                                 : rounds.status());
  }
  // Rounds interleave the levels (1, 8, 32, 1, 8, 32, ...) so that a noisy neighbour slows
  // every level alike rather than one of them.
  std::vector<std::vector<nlohmann::json>> by_level(levels.size());
  for (int64_t r = 0; r < *rounds; ++r) {
    for (size_t l = 0; l < levels.size(); ++l) {
      by_level[l].push_back(RunLevel(flags.GetString("target"), levels[l],
                                     static_cast<int>(*requests), static_cast<int>(*channels),
                                     base));
    }
  }
  for (auto& runs : by_level) {
    std::vector<double> rates;
    for (const auto& run : runs) rates.push_back(run["output_tokens_per_s"].get<double>());
    std::sort(runs.begin(), runs.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
      return a["output_tokens_per_s"].get<double>() < b["output_tokens_per_s"].get<double>();
    });
    nlohmann::json median = runs[runs.size() / 2];
    median["rounds_output_tokens_per_s"] = rates;
    results.push_back(median);
  }
  nlohmann::json out = {{"benchmark", "serve"},
                        {"target", flags.GetString("target")},
                        {"prompt", flags.GetString("prompt")},
                        {"max_tokens", *max_tokens},
                        {"ignore_eos", flags.GetBool("ignore-eos")},
                        {"channels", *channels},
                        {"rounds", *rounds},
                        {"results", results}};
  if (results.size() > 1) {
    const double base_tps = results[0]["output_tokens_per_s"].get<double>();
    nlohmann::json ratios = nlohmann::json::object();
    for (const auto& r : results) {
      ratios["c" + std::to_string(r["concurrency"].get<int>())] =
          base_tps > 0 ? r["output_tokens_per_s"].get<double>() / base_tps : 0.0;
    }
    out["throughput_vs_first_level"] = ratios;
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace llm::bench
