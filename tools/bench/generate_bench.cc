// llm-bench generate: one sequence on the CPU runner: prefill time for the prompt, then decode
// throughput (tokens/s) and time per output token, over several runs.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "common/thread_pool.h"
#include "nlohmann/json.hpp"
#include "tools/bench/bench_util.h"
#include "tools/bench/commands.h"
#include "worker/frontend/tokenizer.h"
#include "worker/runner/cpu_model.h"
#include "worker/runner/sequence_generator.h"

namespace llm::bench {

int RunGenerateBench(const std::vector<std::string>& args) {
  const std::string cmd = "llm-bench generate";
  FlagSet flags;
  flags.Value("model", "checkpoint directory", SharedPath("models/tinystories-656k"))
      .Value("prompt", "prompt text", "Once upon a time")
      .Value("max-tokens", "tokens to generate per run", "256")
      .Value("runs", "runs; the median is reported", "5")
      .Value("threads", "CPU threads (0 = all cores)", "0");
  if (int rc = ParseOrExit(cmd, flags, args); rc >= 0) return rc;
  auto max_tokens = flags.GetInt("max-tokens");
  auto runs = flags.GetInt("runs");
  auto threads = flags.GetInt("threads");
  for (const auto* v : {&max_tokens, &runs, &threads}) {
    if (!v->ok()) return Fail(cmd, v->status());
  }
  ThreadPool pool(static_cast<int>(*threads));
  const std::string dir = flags.GetString("model");
  auto model = runner::CpuModel::Load(dir, &pool);
  if (!model.ok()) return Fail(cmd, model.status());
  auto tok = frontend::Tokenizer::Load(dir);
  if (!tok.ok()) return Fail(cmd, tok.status());
  auto prompt = (*tok)->Encode(flags.GetString("prompt"), true);
  if (!prompt.ok()) return Fail(cmd, prompt.status());

  using Clock = std::chrono::steady_clock;
  std::vector<double> prefill_ms, decode_tok_s, tpot_ms;
  for (int64_t r = 0; r < *runs; ++r) {
    runner::SequenceOptions opt;
    opt.max_tokens = static_cast<int32_t>(*max_tokens);
    opt.sampling.temperature = 0;  // no EOS stop: ignore_eos by leaving stop ids empty
    const auto start = Clock::now();
    Clock::time_point first{};
    int generated = 0;
    auto result = runner::GenerateSequence(**model, *prompt, opt, [&](int32_t) {
      if (generated++ == 0) first = Clock::now();
      return true;
    });
    const auto end = Clock::now();
    if (!result.ok()) return Fail(cmd, result.status());
    const double decode_s = std::chrono::duration<double>(end - first).count();
    prefill_ms.push_back(std::chrono::duration<double, std::milli>(first - start).count());
    decode_tok_s.push_back((generated - 1) / decode_s);
    tpot_ms.push_back(decode_s * 1e3 / (generated - 1));
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  nlohmann::json out = {{"benchmark", "generate"},
                        {"backend", "cpu-fp32"},
                        {"model", dir},
                        {"threads", pool.num_threads()},
                        {"prompt_tokens", prompt->size()},
                        {"generated_tokens", *max_tokens},
                        {"runs", *runs},
                        {"ttft_ms_median", median(prefill_ms)},
                        {"decode_tokens_per_s_median", median(decode_tok_s)},
                        {"time_per_output_token_ms_median", median(tpot_ms)}};
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace llm::bench
