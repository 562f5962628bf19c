// llm-bench serve: a closed-loop load generator against a worker or router. C client threads
// each send Generate requests one after another until N requests are done; per request it
// records time to first token, time per output token and end-to-end latency as the client sees
// them. Several concurrencies (--concurrency 1,8,32) run one after another against the same
// target in one invocation, so their throughputs can be compared side by side.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>

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

nlohmann::json RunLevel(const std::string& target, int concurrency, int requests, int channels,
                        const llm::v1::GenerateRequest& base) {
  std::atomic<int> next{0};
  std::mutex mu;
  std::vector<RequestSample> samples;
  std::map<std::string, int> errors;
  // Client threads share `channels` connections round-robin (1: every stream multiplexed on one
  // connection, as a router does; = concurrency: independent clients).
  std::vector<std::shared_ptr<grpc::Channel>> pool;
  for (int k = 0; k < std::max(1, std::min(channels, concurrency)); ++k) {
    grpc::ChannelArguments args;
    args.SetInt("llm.bench.channel", k);  // distinct connections, not one shared subchannel
    pool.push_back(grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args));
  }
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < concurrency; ++c) {
    threads.emplace_back([&, c] {
      auto stub = llm::v1::Generation::NewStub(pool[c % pool.size()]);
      for (int i; (i = next.fetch_add(1)) < requests;) {
        llm::v1::GenerateRequest req = base;
        req.set_request_id("bench-" + std::to_string(i));
        req.mutable_sampling()->set_seed(static_cast<uint64_t>(i));
        grpc::ClientContext ctx;
        const auto t0 = Clock::now();
        auto reader = stub->Generate(&ctx, req);
        llm::v1::GenerateResponse resp;
        RequestSample s;
        Clock::time_point first{}, last{};
        while (reader->Read(&resp)) {
          if (resp.token_ids_size() == 0) continue;
          if (s.tokens == 0) first = Clock::now();
          s.tokens += resp.token_ids_size();
          last = Clock::now();
        }
        const grpc::Status st = reader->Finish();
        const auto t1 = Clock::now();
        std::lock_guard<std::mutex> lock(mu);
        if (!st.ok()) {
          ++errors[std::to_string(static_cast<int>(st.error_code())) + " " + st.error_message()];
          continue;
        }
        s.e2e_s = std::chrono::duration<double>(t1 - t0).count();
        if (s.tokens > 0) s.ttft_s = std::chrono::duration<double>(first - t0).count();
        if (s.tokens > 1)
          s.tpot_s = std::chrono::duration<double>(last - first).count() / (s.tokens - 1);
        samples.push_back(s);
      }
    });
  }
  for (auto& t : threads) t.join();
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
  for (int c : levels) {
    results.push_back(RunLevel(flags.GetString("target"), c, static_cast<int>(*requests),
                               static_cast<int>(*channels), base));
  }
  nlohmann::json out = {{"benchmark", "serve"},
                        {"target", flags.GetString("target")},
                        {"prompt", flags.GetString("prompt")},
                        {"max_tokens", *max_tokens},
                        {"ignore_eos", flags.GetBool("ignore-eos")},
                        {"channels", *channels},
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
