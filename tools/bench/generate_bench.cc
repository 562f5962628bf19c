// llm-bench generate: one sequence on the CPU runner: prefill time for the prompt, then decode
// throughput (tokens/s) and time per output token, over several runs. With --batch 1,8,32 it
// also decodes B copies of the prompt in lockstep through the batched forward pass (B rows per
// step, each with its own KV blocks and sampler draw) and reports decode tokens/s per B: the
// backend's own batching gain, without the serving path (gRPC, threads, client) around it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/thread_pool.h"
#include "nlohmann/json.hpp"
#include "tools/bench/bench_util.h"
#include "tools/bench/commands.h"
#include "worker/frontend/tokenizer.h"
#include "worker/runner/cpu_model.h"
#include "worker/runner/sequence_generator.h"
#include "worker/sampling/sampler.h"

namespace llm::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Decode tokens/s of `batch` sequences stepping together for `tokens` steps after one batched
// prefill of their prompts; the median of `runs`.
absl::StatusOr<double> BatchedDecodeTokensPerSecond(runner::CpuModel& model,
                                                    const std::vector<int32_t>& prompt, int batch,
                                                    int tokens, int runs, float temperature) {
  const model::ModelConfig& c = model.config();
  const int32_t bt = 16;
  const int64_t positions = static_cast<int64_t>(prompt.size()) + tokens;
  if (positions > c.max_position_embeddings) {
    return absl::InvalidArgumentError("--max-tokens: prompt + max-tokens exceed the context");
  }
  const auto blocks_per_seq = static_cast<int32_t>((positions + bt - 1) / bt);
  runner::CpuKvCache kv(c, blocks_per_seq * batch, bt);
  std::vector<std::vector<int32_t>> tables(batch);
  for (int b = 0; b < batch; ++b) {
    for (int32_t k = 0; k < blocks_per_seq; ++k) tables[b].push_back(b * blocks_per_seq + k);
  }
  sampling::SamplingParams params;
  params.temperature = temperature;
  sampling::Sampler sampler;
  sampling::PenaltyState none;
  std::vector<double> rates;
  for (int r = 0; r < runs; ++r) {
    std::vector<int32_t> ids;
    std::vector<runner::SeqChunk> chunks;
    for (int b = 0; b < batch; ++b) {
      chunks.push_back({static_cast<int32_t>(ids.size()), static_cast<int32_t>(prompt.size()), 0,
                        tables[b], true});
      ids.insert(ids.end(), prompt.begin(), prompt.end());
    }
    std::vector<float> logits;
    std::vector<int32_t> last(batch);
    Clock::time_point decode_start{};
    for (int step = 0; step <= tokens; ++step) {
      if (step == 1) decode_start = Clock::now();
      if (absl::Status st = model.Forward({ids, chunks}, kv, logits); !st.ok()) return st;
      for (int b = 0; b < batch; ++b) {
        params.seed = static_cast<uint64_t>(b);
        std::span<float> row(logits.data() + static_cast<size_t>(b) * c.vocab_size, c.vocab_size);
        last[b] = sampler.Sample(row, params, none, static_cast<uint64_t>(step)).token_id;
      }
      if (step == tokens) break;
      const int32_t position = static_cast<int32_t>(prompt.size()) + step;
      ids.assign(last.begin(), last.end());
      for (int b = 0; b < batch; ++b) chunks[b] = {b, 1, position, tables[b], true};
    }
    const double s = std::chrono::duration<double>(Clock::now() - decode_start).count();
    rates.push_back(static_cast<double>(batch) * tokens / s);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

// The settings of one run, read from its flags once.
struct GenerateBenchSettings {
  std::string model, prompt;
  std::string batch;  // --batch as given; each item is checked as its turn comes
  int64_t max_tokens = 0, runs = 0, threads = 0;
  // Checked only where used: with --batch.
  absl::StatusOr<double> temperature;
};

void AddGenerateBenchFlags(FlagSet& flags) {
  flags.Value("model", "checkpoint directory", SharedPath("models/tinystories-656k"))
      .Value("prompt", "prompt text", "Once upon a time")
      .Value("max-tokens", "tokens to generate per run", "256")
      .Value("runs", "runs; the median is reported", "5")
      .Value("threads", "CPU threads (0 = all cores)", "0")
      .Value("batch", "also decode this many sequences in lockstep; a comma list runs each", "")
      .Value("temperature", "sampling temperature of the batched decode", "0.8");
}

absl::StatusOr<GenerateBenchSettings> SettingsFromFlags(const FlagSet& flags) {
  GenerateBenchSettings s;
  for (auto [name, to] : {std::pair<const char*, int64_t*>{"max-tokens", &s.max_tokens},
                          {"runs", &s.runs},
                          {"threads", &s.threads}}) {
    auto v = flags.GetInt(name);
    if (!v.ok()) return v.status();
    *to = *v;
  }
  s.model = flags.GetString("model");
  s.prompt = flags.GetString("prompt");
  s.batch = flags.GetString("batch");
  s.temperature = flags.GetDouble("temperature");
  return s;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One sequence, --runs times: the medians of its prefill time, decode tokens/s and time per
// output token, into `out`.
absl::Status MeasureSequence(const GenerateBenchSettings& s, runner::CpuModel& model,
                             const std::vector<int32_t>& prompt, nlohmann::json& out) {
  std::vector<double> prefill_ms, decode_tok_s, tpot_ms;
  for (int64_t r = 0; r < s.runs; ++r) {
    runner::SequenceOptions opt;
    opt.max_tokens = static_cast<int32_t>(s.max_tokens);
    opt.sampling.temperature = 0;  // no EOS stop: ignore_eos by leaving stop ids empty
    const auto start = Clock::now();
    Clock::time_point first{};
    int generated = 0;
    auto result = runner::GenerateSequence(model, prompt, opt, [&](int32_t) {
      if (generated++ == 0) first = Clock::now();
      return true;
    });
    const auto end = Clock::now();
    if (!result.ok()) return result.status();
    const double decode_s = std::chrono::duration<double>(end - first).count();
    prefill_ms.push_back(std::chrono::duration<double, std::milli>(first - start).count());
    decode_tok_s.push_back((generated - 1) / decode_s);
    tpot_ms.push_back(decode_s * 1e3 / (generated - 1));
  }
  out["ttft_ms_median"] = Median(prefill_ms);
  out["decode_tokens_per_s_median"] = Median(decode_tok_s);
  out["time_per_output_token_ms_median"] = Median(tpot_ms);
  return absl::OkStatus();
}

// --batch: decode tokens/s per batch size, and against the first size's.
absl::StatusOr<nlohmann::json> MeasureBatched(const GenerateBenchSettings& s,
                                              runner::CpuModel& model,
                                              const std::vector<int32_t>& prompt) {
  if (!s.temperature.ok()) return s.temperature.status();
  nlohmann::json batched = nlohmann::json::array();
  double first = 0;
  for (const auto& part : absl::StrSplit(s.batch, ',')) {
    int b = 0;
    if (!absl::SimpleAtoi(part, &b) || b < 1) {
      return absl::InvalidArgumentError("--batch: '" + std::string(part) +
                                        "' is not a positive integer");
    }
    auto rate =
        BatchedDecodeTokensPerSecond(model, prompt, b, static_cast<int>(s.max_tokens),
                                     static_cast<int>(s.runs), static_cast<float>(*s.temperature));
    if (!rate.ok()) return rate.status();
    if (first == 0) first = *rate;
    batched.push_back(
        {{"batch", b}, {"decode_tokens_per_s_median", *rate}, {"vs_first_batch", *rate / first}});
  }
  return nlohmann::json{{"temperature", *s.temperature}, {"results", batched}};
}

}  // namespace

int RunGenerateBench(const std::vector<std::string>& args) {
  const std::string cmd = "llm-bench generate";
  auto parsed = ParseSettings(cmd, args, AddGenerateBenchFlags, SettingsFromFlags);
  if (!parsed.settings) return parsed.exit_code;
  const GenerateBenchSettings& s = *parsed.settings;
  ThreadPool pool(static_cast<int>(s.threads));  // declared first: the model computes on it
  auto model = runner::CpuModel::Load(s.model, &pool);
  if (!model.ok()) return Fail(cmd, model.status());
  auto tok = frontend::Tokenizer::Load(s.model);
  if (!tok.ok()) return Fail(cmd, tok.status());
  auto prompt = (*tok)->Encode(s.prompt, true);
  if (!prompt.ok()) return Fail(cmd, prompt.status());
  nlohmann::json out = {{"benchmark", "generate"},
                        {"backend", "cpu-fp32"},
                        {"model", s.model},
                        {"threads", pool.num_threads()},
                        {"prompt_tokens", prompt->size()},
                        {"generated_tokens", s.max_tokens},
                        {"runs", s.runs}};
  if (absl::Status st = MeasureSequence(s, **model, *prompt, out); !st.ok()) return Fail(cmd, st);
  if (!s.batch.empty()) {
    auto batched = MeasureBatched(s, **model, *prompt);
    if (!batched.ok()) return Fail(cmd, batched.status());
    out["batched_decode"] = *batched;
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace llm::bench
