// llm-bench structured: what structured output costs.
//   1. Per tokenizer (--tokenizers): the time to build the vocabulary's byte table, then per
//      schema (--schemas, a JSON array; plus json_object) the compile time and the time to mask
//      one token's logits (p50, p99, max) along random walks through the constraint (each step
//      takes a random allowed token, as a sampler would), a state's first mask included; and
//      the median time of a mask that walks the whole vocabulary (a first mask's worst case).
//   2. On a backend (--model, default random:small; --backend cpu or cuda): output tokens/s
//      with every request constrained (json_object) against none, at each --batches
//      concurrency, side by side in one process; with the device busy ratio and the gaps over
//      the steps in which every request decodes (on CUDA, a constrained step's wait for its
//      masks counts as a gap).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "tools/bench/bench_util.h"
#include "tools/bench/commands.h"
#include "tools/bench/worker_driver.h"
#include "worker/backend/backend.h"
#include "worker/constraint/constraint.h"
#include "worker/frontend/tokenizer.h"
#include "worker/loop/constraint_compiler.h"
#include "worker/loop/worker.h"

namespace llm::bench {
namespace {

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Mask times (ms) of `walks` random walks of up to `steps` tokens through `c`.
std::vector<double> WalkMasks(const std::shared_ptr<const constraint::CompiledConstraint>& c,
                              int walks, int steps, std::mt19937& rng) {
  std::vector<double> times;
  const int32_t vocab = c->tokens().vocab_size();
  std::vector<float> logits(static_cast<size_t>(vocab));
  std::vector<int32_t> allowed;
  const int32_t stop[] = {-1};
  for (int w = 0; w < walks; ++w) {
    constraint::Matcher m(c);
    for (int s = 0; s < steps; ++s) {
      std::fill(logits.begin(), logits.end(), 0.0f);
      const auto start = Clock::now();
      m.Apply(logits, stop);
      times.push_back(Ms(Clock::now() - start));
      allowed.clear();
      for (int32_t t = 0; t < vocab; ++t) {
        if (logits[t] > -std::numeric_limits<float>::infinity()) allowed.push_back(t);
      }
      if (allowed.empty()) break;  // complete, nothing may follow
      m.Advance(allowed[rng() % allowed.size()]);
    }
  }
  return times;
}

// The median times of a mask that allows every token (a state every byte leads on from, as
// inside a JSON string): the worst case of a state's first mask, walked byte by byte
// (ForEachAccepted) and by byte classes (MaskByClass, what MaskOf does), the two
// interleaved.
std::pair<double, double> FullWalkMs(const frontend::Tokenizer& tok) {
  const constraint::TokenTable table(loop::TokenBytesOf(tok));
  constraint::TokenMask mask((static_cast<size_t>(table.vocab_size()) + 63) / 64);
  const auto set = [&](int32_t t) { mask[static_cast<size_t>(t) / 64] |= uint64_t{1} << (t % 64); };
  const auto step = [](int32_t, uint8_t) { return 0; };
  std::vector<double> bytes, classes;
  for (int r = 0; r < 21; ++r) {
    auto start = Clock::now();
    table.ForEachAccepted(0, step, set);
    bytes.push_back(Ms(Clock::now() - start));
    start = Clock::now();
    table.MaskByClass(
        0, step, [](int32_t) { return ~uint64_t{0}; }, mask);
    classes.push_back(Ms(Clock::now() - start));
  }
  return {Percentile(bytes, 0.5), Percentile(classes, 0.5)};
}

// A constraint to time, and the name of its row.
struct NamedSpec {
  std::string name;
  constraint::ConstraintSpec spec;
};

absl::StatusOr<nlohmann::json> MaskTimes(const std::string& tokenizer_dir,
                                         const std::vector<NamedSpec>& specs, int walks,
                                         int steps) {
  LLM_ASSIGN_OR_RETURN(auto tok, frontend::Tokenizer::Load(tokenizer_dir));
  const auto t0 = Clock::now();
  loop::ConstraintCompiler compiler(*tok);
  // The first Compile builds the byte table: time it with a trivial constraint.
  LLM_RETURN_IF_ERROR(compiler.Compile({constraint::Kind::kChoice, "", {"x"}}).status());
  const double table_ms = Ms(Clock::now() - t0);
  const std::pair<double, double> full_walk = FullWalkMs(*tok);
  nlohmann::json out = {{"tokenizer", tokenizer_dir},
                        {"vocab_size", tok->vocab_size()},
                        {"table_ms", table_ms},
                        {"full_walk_ms", full_walk.second},
                        {"full_walk_byte_trie_ms", full_walk.first}};
  std::mt19937 rng(1);
  nlohmann::json rows = nlohmann::json::array();
  std::vector<double> all, grammars;
  for (const NamedSpec& named : specs) {
    const auto c0 = Clock::now();
    // Each spec's first compile: nothing cached yet.
    auto compiled = compiler.Compile(named.spec);
    if (!compiled.ok()) return compiled.status();
    const double compile_ms = Ms(Clock::now() - c0);
    std::vector<double> times = WalkMasks(*compiled, walks, steps, rng);
    auto& pool = named.spec.kind == constraint::Kind::kGrammar ? grammars : all;
    pool.insert(pool.end(), times.begin(), times.end());
    rows.push_back({{"schema", named.name},
                    {"compile_ms", compile_ms},
                    {"states", (*compiled)->num_states()},
                    {"mask_ms_p50", Percentile(times, 0.5)},
                    {"mask_ms_p99", Percentile(times, 0.99)},
                    {"mask_ms_max", Percentile(times, 1.0)}});
  }
  out["schemas"] = rows;
  out["mask_ms_p50"] = Percentile(all, 0.5);
  out["mask_ms_p99"] = Percentile(all, 0.99);
  if (!grammars.empty()) {
    out["grammar_mask_ms_p50"] = Percentile(grammars, 0.5);
    out["grammar_mask_ms_p99"] = Percentile(grammars, 0.99);
  }
  return out;
}

// Output tokens/s of `batch` concurrent requests of `max_tokens`, constrained or not, and the
// busy ratio and gaps of the steps in which all `batch` decode.
absl::StatusOr<nlohmann::json> Throughput(const backend::BackendOptions& bo, int batch,
                                          int32_t max_tokens, bool constrained) {
  LLM_ASSIGN_OR_RETURN(backend::Backend b, backend::CreateBackend(bo));
  loop::WorkerOptions wo;
  wo.scheduler.max_batch_tokens = 0;
  wo.scheduler.prefix_cache = false;
  Recorder recorder;
  LLM_ASSIGN_OR_RETURN(auto worker,
                       loop::Worker::Create(wo, std::move(b.runner), std::move(b.tokenizer),
                                            b.config.eos_token_ids, &recorder, &recorder));
  // Counts the tokens of every stream; `done` counts the streams down.
  struct Sink : loop::StreamSink {
    Countdown* done;
    std::atomic<int64_t>* tokens;
    void OnUpdate(loop::StreamUpdate u) override {
      *tokens += static_cast<int64_t>(u.token_ids.size());
      if (u.finished) done->Done(absl::OkStatus());
    }
    void OnError(const absl::Status& st) override { done->Done(st); }
  };
  Countdown done;
  done.Add(batch);
  std::atomic<int64_t> tokens{0};
  const auto start = Clock::now();
  for (int i = 0; i < batch; ++i) {
    loop::GenerateSpec g;
    g.text = "Once upon a time";
    g.max_tokens = max_tokens;
    g.sampling.temperature = 1.0f;
    g.sampling.seed = static_cast<uint64_t>(i);
    g.ignore_eos = !constrained;
    if (constrained) g.constraint.kind = constraint::Kind::kJsonObject;
    auto sink = std::make_shared<Sink>();
    sink->done = &done;
    sink->tokens = &tokens;
    if (auto key = worker->Submit(g, sink); !key.ok()) {
      for (int j = i; j < batch; ++j) done.Done(absl::OkStatus());  // never submitted
      done.Wait().IgnoreError();  // the submitted ones hold `done`
      return key.status();
    }
  }
  LLM_RETURN_IF_ERROR(done.Wait());
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  nlohmann::json out = {{"tokens_per_second", static_cast<double>(tokens) / wall}};
  std::vector<double> step_s, gaps;
  Clock::time_point first{}, last{};
  for (const StepRecord& r : recorder.TakeSteps()) {
    if (r.decodes != batch || r.prompt_tokens != 0) continue;
    if (step_s.empty()) first = r.at;
    last = r.at;
    step_s.push_back(r.step_s);
    if (r.gap_s >= 0) gaps.push_back(r.gap_s);
  }
  out["steady_steps"] = step_s.size();
  if (step_s.size() >= 2) {
    const double busy = std::accumulate(step_s.begin() + 1, step_s.end(), 0.0);
    out["busy_ratio"] = busy / std::chrono::duration<double>(last - first).count();
    out["gap_us_p50"] = Percentile(gaps, 0.5) * 1e6;
    out["gap_us_p99"] = Percentile(gaps, 0.99) * 1e6;
  }
  return out;
}

// The settings of one run, read from its flags once.
struct StructuredBenchSettings {
  std::string tokenizers, schemas, grammars, batches;
  int64_t walks = 0, steps = 0, max_tokens = 0;
  backend::BackendOptions backend;  // of the throughput runs; slots set per batch
};

void AddStructuredBenchFlags(FlagSet& flags) {
  flags
      .Value("tokenizers", "tokenizer directories, comma-separated",
             std::string(LLM_SHARED_DIR) + "/tokenizers/llama3," + LLM_SHARED_DIR +
                 "/tokenizers/qwen3," + LLM_SHARED_DIR + "/tokenizers/mistral")
      .Value("schemas", "a JSON array of schemas",
             std::string(LLM_SOURCE_DIR) + "/tests/data/structured/schemas.json")
      .Value("grammars", "a JSON array of GBNF grammars (recursive ones: pushdown masks)",
             std::string(LLM_SOURCE_DIR) + "/tests/data/structured/grammars.json")
      .Value("walks", "random walks per schema", "20")
      .Value("steps", "tokens per walk at most", "64")
      .Value("model", "model of the throughput runs", "random:small")
      .Value("backend", "backend of the throughput runs: cpu or cuda", "cpu")
      .Value("batches", "concurrent requests of the throughput runs, comma-separated", "1,64")
      .Value("max-tokens", "output tokens per request of the throughput runs", "64")
      .Value("cpu-threads", "cpu: threads (0: all cores)", "0");
}

absl::StatusOr<StructuredBenchSettings> SettingsFromFlags(const FlagSet& flags) {
  StructuredBenchSettings s;
  int64_t threads = 0;
  for (auto [name, to] : {std::pair<const char*, int64_t*>{"walks", &s.walks},
                          {"steps", &s.steps},
                          {"max-tokens", &s.max_tokens},
                          {"cpu-threads", &threads}}) {
    auto v = flags.GetInt(name);
    if (!v.ok()) return v.status();
    *to = *v;
  }
  s.tokenizers = flags.GetString("tokenizers");
  s.schemas = flags.GetString("schemas");
  s.grammars = flags.GetString("grammars");
  s.batches = flags.GetString("batches");
  s.backend.model = flags.GetString("model");
  s.backend.backend = flags.GetString("backend");
  s.backend.cpu_threads = static_cast<int>(threads);
  return s;
}

// The constraints to time: every schema of --schemas, then json_object, then every grammar of
// --grammars.
absl::StatusOr<std::vector<NamedSpec>> ReadSpecs(const StructuredBenchSettings& s) {
  std::vector<NamedSpec> specs;
  for (const char* flag : {"schemas", "grammars"}) {
    const std::string& path = flag == std::string("schemas") ? s.schemas : s.grammars;
    std::ifstream f(path);
    const nlohmann::ordered_json list = nlohmann::ordered_json::parse(f, nullptr, false);
    if (!list.is_array()) {
      return absl::InvalidArgumentError(std::string("--") + flag + ": not a JSON array: " + path);
    }
    for (size_t i = 0; i < list.size(); ++i) {
      const bool schema = flag == std::string("schemas");
      if (!schema && !list[i].is_string()) {
        return absl::InvalidArgumentError(absl::StrCat("--grammars[", i, "]: not a string"));
      }
      specs.push_back(
          schema ? NamedSpec{std::to_string(i), {constraint::Kind::kJsonSchema, list[i].dump()}}
                 : NamedSpec{absl::StrCat("grammar ", i),
                             {constraint::Kind::kGrammar, list[i].get<std::string>()}});
    }
    if (flag == std::string("schemas")) {
      specs.push_back({"json_object", {constraint::Kind::kJsonObject, ""}});
    }
  }
  return specs;
}

// 1. The mask times per tokenizer of --tokenizers.
absl::StatusOr<nlohmann::json> MeasureMasks(const StructuredBenchSettings& s,
                                            const std::vector<NamedSpec>& specs) {
  nlohmann::json masks = nlohmann::json::array();
  const std::vector<std::string> dirs = absl::StrSplit(s.tokenizers, ',', absl::SkipEmpty());
  for (const std::string& dir : dirs) {
    auto m = MaskTimes(dir, specs, static_cast<int>(s.walks), static_cast<int>(s.steps));
    if (!m.ok()) return m.status();
    masks.push_back(*m);
  }
  return masks;
}

// 2. Per batch of --batches, the throughput without constraints and with json_object.
absl::StatusOr<nlohmann::json> MeasureThroughput(const StructuredBenchSettings& s) {
  backend::BackendOptions bo = s.backend;
  const auto max_tokens = static_cast<int32_t>(s.max_tokens);
  nlohmann::json runs = nlohmann::json::array();
  for (int32_t batch : ParsePositiveInts(s.batches)) {
    bo.sizes.max_slots = batch;
    auto plain = Throughput(bo, batch, max_tokens, false);
    if (!plain.ok()) return plain.status();
    auto constrained = Throughput(bo, batch, max_tokens, true);
    if (!constrained.ok()) return constrained.status();
    const double plain_tps = (*plain)["tokens_per_second"];
    const double constrained_tps = (*constrained)["tokens_per_second"];
    runs.push_back({{"batch", batch},
                    {"tokens_per_second_unconstrained", plain_tps},
                    {"tokens_per_second_json_object", constrained_tps},
                    {"ratio", constrained_tps / plain_tps},
                    {"unconstrained", *plain},
                    {"json_object", *constrained}});
  }
  return runs;
}

}  // namespace

int RunStructuredBench(const std::vector<std::string>& args) {
  const char* cmd = "llm-bench structured";
  auto parsed = ParseSettings(cmd, args, AddStructuredBenchFlags, SettingsFromFlags);
  if (!parsed.settings) return parsed.exit_code;
  auto specs = ReadSpecs(*parsed.settings);
  if (!specs.ok()) return Fail(cmd, specs.status());
  nlohmann::json out = {{"benchmark", "structured"}};
  auto masks = MeasureMasks(*parsed.settings, *specs);
  if (!masks.ok()) return Fail(cmd, masks.status());
  out["masks"] = *masks;
  auto runs = MeasureThroughput(*parsed.settings);
  if (!runs.ok()) return Fail(cmd, runs.status());
  out["throughput"] = *runs;
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace llm::bench
