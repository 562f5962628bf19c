// llm-bench gpu: the CUDA backend on one device, measured in one run and reported with the
// device's name:
//   - device-to-device copy bandwidth, the ceiling the decode figures are compared with
//     (bytes read + bytes written per second);
//   - decode at batch 1: device time per step, and the memory-bandwidth utilisation it implies
//     (bytes a step must read: every weight except the embedding table, plus the sequence's
//     K/V, divided by the step time and the measured bandwidth);
//   - decode throughput with N running slots (default 64 and 256) at --context tokens, over
//     the steps where every slot decodes, with the device busy ratio and the distribution of
//     the idle gap between consecutive steps (from the engine's CUDA events);
//   - time to first token of one request with 1k, 4k and 16k-token prompts on an idle worker
//     (lengths past the runner's context are reported as skipped), in chunks of
//     --max-prefill-tokens-alone, since nothing else decodes;
//   - the stall a long prompt causes: --stall-decodes requests decode while one request's
//     --stall-prompt-token prompt prefills in chunks of --max-prefill-tokens; the device time of
//     the steps that carry both (each is one token of every decoding request) against the steps
//     that decode only, and the long prompt's TTFT under that load;
//   - with --speculative ngram (or draft, with --draft-model), every run above speculates
//   (engine.speculative, adaptive: the
//     policy picks each step's proposals per slot from measured throughput), the decode figures
//     count every token a step gave, and the batch-1 and throughput runs report the choice the
//     policy settled on for their batch size (speculation_tokens_per_slot: 0 where verifying
//     costs more than it saves, so speculation is off there) beside the run's tokens/s: run it
//     beside the same command without the flag to see where speculation pays and where the
//     policy switches it off;
//   - with --kernels, where a decode step's device time goes: a few decode-only steps at batch
//     1 and at each slot count run eagerly with CUDA events between kernels (KernelClock), and
//     the mean per step of each kernel class (attention, products, norms, RoPE/KV, sampler,
//     other) is reported with its share.
// Requests go through the in-process worker (scheduler, engine loop, output stage): the path a
// served request takes, minus gRPC.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tools/bench/bench_util.h"
#include "tools/bench/commands.h"
#include "tools/bench/worker_driver.h"

#ifdef LLM_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/device.h"
#include "kernels/launch.h"
#include "tools/bench/device_bandwidth.h"
#include "worker/backend/backend.h"
#include "worker/loop/worker.h"
#include "worker/runner/cuda/cuda_runner.h"
#include "worker/runner/cuda/kernel_clock.h"
#endif

namespace llm::bench {

#ifndef LLM_HAVE_CUDA

int RunGpuBench(const std::vector<std::string>&) {
  std::fprintf(stderr, "llm-bench gpu: this build has no CUDA backend (LLM_ENABLE_CUDA=OFF)\n");
  return 1;
}

#else

namespace {

// Per kernel class: the mean device time per step (ms) and its share of the step.
nlohmann::json KernelSplit(const runner::cuda::KernelTimes& t) {
  nlohmann::json j = {{"steps", t.steps}};
  if (t.steps == 0) return j;
  double total = 0;
  for (double ms : t.ms) total += ms;
  j["step_ms"] = total / static_cast<double>(t.steps);
  for (int k = 0; k < runner::cuda::kKernelClasses; ++k) {
    const char* name = runner::cuda::KernelClassName(static_cast<runner::cuda::KernelClass>(k));
    j[std::string(name) + "_ms"] = t.ms[static_cast<size_t>(k)] / static_cast<double>(t.steps);
    j[std::string(name) + "_share"] = total > 0 ? t.ms[static_cast<size_t>(k)] / total : 0.0;
  }
  return j;
}

// One flag per switch of runner::CudaSwitchSpecs: a bare flag that turns a boolean switch away
// from its default, or a value.
void AddCudaSwitchFlags(FlagSet& flags) {
  const runner::CudaSwitches defaults;
  for (const runner::CudaSwitchSpec& spec : runner::CudaSwitchSpecs()) {
    const std::string help = absl::StrCat(spec.help, " (", spec.key, ")");
    if (spec.flag != nullptr) {
      flags.Bool(spec.bench_flag, help);
    } else if (spec.number != nullptr) {
      flags.Value(spec.bench_flag, help, std::to_string(defaults.*spec.number));
    } else {
      flags.Value(spec.bench_flag, help, runner::TristateName(defaults.*spec.tristate));
    }
  }
}

absl::Status CudaSwitchesFromFlags(const FlagSet& flags, runner::CudaSwitches& out) {
  for (const runner::CudaSwitchSpec& spec : runner::CudaSwitchSpecs()) {
    const std::string flag = spec.bench_flag;
    if (spec.flag != nullptr) {
      if (flags.GetBool(flag)) out.*spec.flag = !(out.*spec.flag);
    } else if (spec.number != nullptr) {
      auto v = flags.GetInt(flag);
      if (!v.ok()) return v.status();
      if (*v < spec.min || *v > spec.max) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", flag, ": ", *v, " is outside [", spec.min, ", ", spec.max, "]"));
      }
      out.*spec.number = static_cast<int32_t>(*v);
    } else {
      auto v = runner::ParseTristate(flags.GetString(flag));
      if (!v.ok())
        return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", v.status().message()));
      out.*spec.tristate = *v;
    }
  }
  return absl::OkStatus();
}

// The switches as set, keyed by their configuration key's last part ("cuda_fused_norm").
nlohmann::json CudaSwitchesJson(const runner::CudaSwitches& s) {
  nlohmann::json j = nlohmann::json::object();
  for (const runner::CudaSwitchSpec& spec : runner::CudaSwitchSpecs()) {
    const std::string key = std::string(spec.key).substr(std::string("engine.").size());
    if (spec.flag != nullptr) {
      j[key] = s.*spec.flag;
    } else if (spec.number != nullptr) {
      j[key] = s.*spec.number;
    } else {
      j[key] = runner::TristateName(s.*spec.tristate);
    }
  }
  return j;
}

// The most a count or length flag may be: token counts and slots are int32 in the engine.
constexpr int64_t kMaxFlagValue = int64_t{1} << 30;

// The settings of one run, read from its flags once.
struct GpuBenchSettings {
  int64_t context = 0, decode_steps = 0, batch1_tokens = 0, ttft_runs = 0;
  int64_t stall_prompt = 0, stall_decodes = 0;
  double max_decode_slowdown = 0;
  float temperature = 0;
  std::vector<int32_t> slot_counts, ttft_prompts;
  bool kernels = false;
  backend::BackendOptions backend;  // the model, the device, the prompt budgets, speculation
};

void AddGpuBenchFlags(FlagSet& flags) {
  flags.Value("model", "checkpoint directory or random:<shape>", "random:llama-3-8b")
      .Value("tokenizer", "tokenizer instead of the model's (random models: synthetic)", "")
      .Value("quantization",
             "none (the checkpoint's own format, FP8 ones included) or fp8 (the linear layers "
             "quantised at load, per output row: engine.quantization)",
             "none")
      .Value("kv-cache-dtype", "the KV cache: auto, bf16 or fp8 (engine.kv_cache_dtype)", "auto")
      .Value("device", "CUDA device", "0")
      .Value("slots", "running slots of the throughput runs, comma-separated", "64,256")
      .Value("context", "prompt tokens of the throughput runs", "1024")
      .Value("decode-steps", "steps with every slot decoding, at least, per throughput run", "128")
      .Value("batch1-tokens", "tokens generated in the batch-1 run", "256")
      .Value("ttft-prompts", "prompt lengths of the TTFT runs, comma-separated", "1024,4096,16384")
      .Value("stall-prompt", "prompt tokens of the long request of the stall run (0: none)",
             "16384")
      .Value("stall-decodes", "requests decoding during the stall run", "8")
      .Value("ttft-runs", "runs per TTFT prompt length; the median is reported", "3")
      .Value("max-prefill-tokens", "prompt tokens per step while other requests decode", "2048")
      .Value("max-prefill-tokens-alone",
             "prompt tokens of a step with no decode in it (0: the backend's default, 4096)", "0")
      .Value("max-decode-slowdown",
             "engine.max_decode_slowdown: a long prompt's chunks spaced out so that decoding "
             "requests stay within this many times a decode-only step's time per token (0: off)",
             "2")
      .Value("kv-memory-fraction", "of the free device memory, for the KV cache", "0.9")
      .Value("temperature",
             "sampling temperature of the batch-1, throughput and kernel runs (0: greedy, the "
             "sampler's two-launch path)",
             "0")
      .Value("speculative",
             "off, ngram or draft: every run speculates under the adaptive policy, whose choice "
             "per batch size is reported",
             "off")
      .Value("draft-model",
             "--speculative draft: the draft's checkpoint directory or random:<shape> (same "
             "vocabulary)",
             "")
      .Value("num-tokens", "--speculative: proposals per slot at most", "4")
      .Bool("kernels",
            "also time a few eager decode steps per kernel class (CUDA events) at batch 1 and at "
            "each slot count, and the steps of a 4k-token prompt");
  AddCudaSwitchFlags(flags);
}

// --speculative, --num-tokens and --draft-model.
absl::StatusOr<engine::SpeculativeConfig> SpeculativeFromFlags(const FlagSet& flags) {
  engine::SpeculativeConfig spec;
  auto method = engine::ParseSpeculativeMethod(flags.GetString("speculative"));
  if (!method.ok()) return method.status();
  if (*method == engine::SpeculativeMethod::kOracle) {
    return absl::InvalidArgumentError("--speculative: off, ngram or draft");
  }
  auto num_tokens = flags.GetInt("num-tokens");
  if (!num_tokens.ok()) return num_tokens.status();
  spec.method = *method;
  spec.num_tokens = static_cast<int32_t>(*num_tokens);
  spec.draft_model = flags.GetString("draft-model");
  if (absl::Status st = spec.Validate(); !st.ok()) return st;
  return spec;
}

// The backend's options: the model and the device from the flags, slots for the largest count.
absl::Status BackendFromFlags(const FlagSet& flags, GpuBenchSettings& s) {
  backend::BackendOptions& bo = s.backend;
  bo.model = flags.GetString("model");
  bo.tokenizer = flags.GetString("tokenizer");
  bo.quantization = flags.GetString("quantization");
  bo.kv_cache_dtype = flags.GetString("kv-cache-dtype");
  bo.backend = "cuda";
  bo.sizes.max_slots = *std::max_element(s.slot_counts.begin(), s.slot_counts.end());
  struct IntFlag {
    const char* name;
    int32_t* to;
    int64_t min;
  };
  for (const IntFlag f :
       {IntFlag{"device", &bo.device, 0}, IntFlag{"max-prefill-tokens", &bo.max_prefill_tokens, 1},
        IntFlag{"max-prefill-tokens-alone", &bo.max_prefill_tokens_alone, 0}}) {
    auto v = flags.GetInt(f.name);
    if (!v.ok()) return v.status();
    if (*v < f.min || *v > kMaxFlagValue) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", f.name, ": ", *v, " is outside [", f.min, ", ", kMaxFlagValue, "]"));
    }
    *f.to = static_cast<int32_t>(*v);
  }
  auto fraction = flags.GetDouble("kv-memory-fraction");
  if (!fraction.ok()) return fraction.status();
  bo.kv_memory_fraction = *fraction;
  auto spec = SpeculativeFromFlags(flags);
  if (!spec.ok()) return spec.status();
  bo.speculative = *spec;
  return CudaSwitchesFromFlags(flags, bo.cuda);
}

absl::StatusOr<GpuBenchSettings> SettingsFromFlags(const FlagSet& flags) {
  GpuBenchSettings s;
  for (auto [name, to] : {std::pair<const char*, int64_t*>{"context", &s.context},
                          {"decode-steps", &s.decode_steps},
                          {"batch1-tokens", &s.batch1_tokens},
                          {"ttft-runs", &s.ttft_runs},
                          {"stall-prompt", &s.stall_prompt},
                          {"stall-decodes", &s.stall_decodes}}) {
    auto v = flags.GetInt(name);
    if (!v.ok()) return v.status();
    if (*v < 0 || *v > kMaxFlagValue) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, ": ", *v, " is outside [0, ", kMaxFlagValue, "]"));
    }
    *to = *v;
  }
  auto slowdown = flags.GetDouble("max-decode-slowdown");
  if (!slowdown.ok()) return slowdown.status();
  s.max_decode_slowdown = *slowdown;
  auto temperature = flags.GetDouble("temperature");
  if (!temperature.ok()) return temperature.status();
  s.temperature = static_cast<float>(*temperature);
  if (!(s.temperature >= 0.0f && s.temperature <= 100.0f)) {
    return absl::InvalidArgumentError("--temperature: must be in [0, 100]");
  }
  s.slot_counts = ParsePositiveInts(flags.GetString("slots"));
  s.ttft_prompts = ParsePositiveInts(flags.GetString("ttft-prompts"));
  if (s.slot_counts.empty()) return absl::InvalidArgumentError("--slots: no count");
  s.kernels = flags.GetBool("kernels");
  if (absl::Status st = BackendFromFlags(flags, s); !st.ok()) return st;
  return s;
}

// The worker under measurement and what every measurement of the run reads.
struct GpuBenchRun {
  const GpuBenchSettings& s;
  loop::Worker& worker;
  Recorder& recorder;
  runner::cuda::CudaRunner& cuda;  // reachable for kernel timing once the worker owns it
  runner::RunnerInfo info;
  int32_t id_range = 0;            // prompt ids are drawn below this
  double bandwidth = 0;            // bytes/s, the device-to-device copy ceiling
  double embed_bytes = 0;          // weight bytes a decode step does not read
  double kv_bytes_per_token = 0;   // K and V, every layer
  int32_t prompt_chunk_alone = 0;  // a prompt's chunk with nothing decoding, as settled
};

// What was loaded and how it runs: sizes, formats, switches, as the runner settled them.
void DescribeBackend(const backend::Backend& b, const GpuBenchSettings& s,
                     const runner::cuda::CudaRunner& cuda, nlohmann::json& out) {
  const runner::RunnerInfo info = b.runner->info();
  const runner::CudaSwitches& sw = s.backend.cuda;
  const engine::SpeculativeConfig& spec = s.backend.speculative;
  out["weights_gib"] = static_cast<double>(info.weight_bytes) / (1ull << 30);
  out["linear_layers"] = b.quant.Describe();
  out["kv_cache"] = b.kv.Describe();
  out["kv_cache_gib"] = static_cast<double>(info.kv_cache_bytes) / (1ull << 30);
  out["kv_blocks"] = info.sizes.kv_blocks;
  out["switches"] = CudaSwitchesJson(sw);
  out["gemv"] = sw.gemv && !sw.batch_invariant;       // as it ran
  out["prefill_attention"] = info.prefill_attention;  // the kernel chosen at start
  out["gemm_tuning"] = {{"on", sw.gemm_tuning},
                        {"products_tuned", cuda.gemms_tuned()},
                        {"algorithm_changed", cuda.gemms_tuned_changed()}};
  out["pdl"] = kernels::ProgrammaticLaunch();  // as --pdl settled, where the device allows it
  out["temperature"] = s.temperature;
  out["speculative"] = engine::SpeculativeMethodName(spec.method);
  if (spec.enabled()) out["num_tokens"] = spec.num_tokens;
  if (spec.method == engine::SpeculativeMethod::kDraft) out["draft_model"] = spec.draft_model;
}

absl::StatusOr<std::unique_ptr<loop::Worker> > MakeWorker(const GpuBenchSettings& s,
                                                          backend::Backend& b, Recorder& recorder) {
  loop::WorkerOptions wo;
  wo.scheduler.max_prefill_tokens = s.backend.max_prefill_tokens;
  wo.scheduler.max_prefill_tokens_alone = s.backend.max_prefill_tokens_alone;  // 0: the runner's
  wo.scheduler.max_batch_tokens = 0;  // the slots and the prompt budgets bound a step
  wo.max_queued_requests = 4 * s.backend.sizes.max_slots;
  wo.scheduler.prefix_cache = false;  // every run computes its whole prompt
  wo.scheduler.max_decode_slowdown = s.max_decode_slowdown;
  wo.scheduler.speculative = s.backend.speculative;
  return loop::Worker::Create(wo, std::move(b.runner), std::move(b.tokenizer),
                              b.config.eos_token_ids, &recorder, &recorder);
}

// 1. Batch 1: the decode steps (one token each, or with speculation the run each verification
// gave) and the bandwidth their bytes imply.
absl::StatusOr<nlohmann::json> MeasureBatch1(const GpuBenchRun& r) {
  const int32_t prompt = 128;
  const auto tokens_out = static_cast<int32_t>(r.s.batch1_tokens);
  if (absl::Status st =
          RunRequests(r.worker, 1, prompt, tokens_out, r.id_range, 1, r.s.temperature);
      !st.ok()) {
    return st;
  }
  std::vector<double> step_s;
  double busy = 0, tokens = 0;
  for (const StepRecord& step : r.recorder.TakeSteps()) {
    if (step.decodes != 1 || step.prompt_tokens != 0) continue;
    step_s.push_back(step.step_s);
    busy += step.step_s;
    tokens += step.tokens;
  }
  r.recorder.TakeRequests();
  const double median = Percentile(step_s, 0.5);
  const double bytes = static_cast<double>(r.info.weight_bytes) - r.embed_bytes +
                       r.kv_bytes_per_token * (prompt + tokens_out / 2.0);
  nlohmann::json j = {{"decode_step_ms_median", median * 1e3},
                      {"decode_step_ms_p99", Percentile(step_s, 0.99) * 1e3},
                      {"decode_tokens_per_s", busy > 0 ? tokens / busy : 0.0},
                      {"bytes_per_step_gb", bytes / 1e9},
                      {"bandwidth_utilization", bytes / median / r.bandwidth}};
  if (r.s.backend.speculative.enabled()) {
    j["speculation_tokens_per_slot"] = SpeculationAt(r.worker.Load().engine.scheduler, 1);
  }
  return j;
}

// The steady window of a throughput run: consecutive steps in which all n slots decode (with
// speculation a step gives each slot its accepted run: tokens >= n).
void SteadyWindow(const std::vector<StepRecord>& steps, int32_t n, nlohmann::json& run) {
  std::vector<double> gaps, step_s;
  Clock::time_point first{}, last{};
  int64_t window_steps = 0, window_tokens = 0;
  for (const StepRecord& r : steps) {
    if (r.tokens < n || r.decodes != n || r.prompt_tokens != 0) continue;
    if (window_steps == 0) first = r.at;
    last = r.at;
    if (window_steps > 0) window_tokens += r.tokens;
    ++window_steps;
    step_s.push_back(r.step_s);
    if (r.gap_s >= 0) gaps.push_back(r.gap_s);
  }
  run["steady_steps"] = window_steps;
  if (window_steps < 2) return;
  const double wall = std::chrono::duration<double>(last - first).count();
  const double busy = std::accumulate(step_s.begin() + 1, step_s.end(), 0.0);
  run["decode_tokens_per_s"] = static_cast<double>(window_tokens) / wall;
  run["step_ms_median"] = Percentile(step_s, 0.5) * 1e3;
  run["busy_ratio"] = busy / wall;
  run["gap_us_p50"] = Percentile(gaps, 0.5) * 1e6;
  run["gap_us_p99"] = Percentile(gaps, 0.99) * 1e6;
  run["gap_us_max"] = Percentile(gaps, 1.0) * 1e6;
}

// 2. Throughput at n running slots: requests enough that every slot is busy, long enough that
// the first ones are still decoding when the last prompt is in.
absl::StatusOr<nlohmann::json> MeasureThroughput(const GpuBenchRun& r, int32_t n) {
  const int64_t chunk = r.s.backend.max_prefill_tokens;
  const int64_t prefill_steps = (int64_t{n} * r.s.context + chunk - 1) / chunk;
  const auto max_tokens = static_cast<int32_t>(prefill_steps + r.s.decode_steps + 8);
  const auto start = Clock::now();
  if (absl::Status st = RunRequests(r.worker, n, static_cast<int32_t>(r.s.context), max_tokens,
                                    r.id_range, 100 + n, r.s.temperature);
      !st.ok()) {
    return st;
  }
  const double total_s = std::chrono::duration<double>(Clock::now() - start).count();
  nlohmann::json run = {{"slots", n}, {"context", r.s.context}, {"total_seconds", total_s}};
  SteadyWindow(r.recorder.TakeSteps(), n, run);
  r.recorder.TakeRequests();
  if (r.s.backend.speculative.enabled()) {
    run["speculation_tokens_per_slot"] = SpeculationAt(r.worker.Load().engine.scheduler, n);
  }
  return run;
}

// 4. The stall: decodes running while a long prompt prefills.
absl::StatusOr<nlohmann::json> MeasureStallRun(const GpuBenchRun& r) {
  const int32_t max_slots = r.s.backend.sizes.max_slots;
  const auto n = static_cast<int32_t>(std::min<int64_t>(r.s.stall_decodes, max_slots - 1));
  const auto long_prompt = static_cast<int32_t>(r.s.stall_prompt);
  if (n < 1 || long_prompt >= r.info.max_context) {
    return nlohmann::json{
        {"skipped", absl::StrCat("needs 2 slots and a context over ", long_prompt, " (", max_slots,
                                 " slots, context ", r.info.max_context, ")")}};
  }
  return MeasureStall(r.worker, r.recorder, n, long_prompt, r.s.backend.max_prefill_tokens,
                      r.s.max_decode_slowdown, r.id_range);
}

// Runs `n` requests of `prompt` tokens and `max_tokens` outputs with the next `steps` steps of
// kind `which` timed per kernel class.
absl::StatusOr<nlohmann::json> TimeKernels(const GpuBenchRun& r, int32_t steps,
                                           runner::cuda::CudaRunner::ProfiledSteps which, int32_t n,
                                           int32_t prompt, int32_t max_tokens, uint64_t seed) {
  if (absl::Status st = r.cuda.ProfileSteps(steps, which); !st.ok()) return st;
  (void)r.cuda.TakeKernelTimes();
  if (absl::Status st =
          RunRequests(r.worker, n, prompt, max_tokens, r.id_range, seed, r.s.temperature);
      !st.ok()) {
    return st;
  }
  nlohmann::json j = KernelSplit(r.cuda.TakeKernelTimes());
  r.recorder.TakeSteps();
  r.recorder.TakeRequests();
  return j;
}

// 5. Where a decode step's time goes (eager steps, so a little slower than graph replays) at
// batch 1 and each slot count, then the steps of one prompt on an idle worker (TTFT's steps):
// 4k tokens, or what the context allows, in chunks of --max-prefill-tokens-alone.
absl::Status MeasureKernels(const GpuBenchRun& r, nlohmann::json& out) {
  using Profiled = runner::cuda::CudaRunner::ProfiledSteps;
  constexpr int kTimedSteps = 8;
  const int64_t chunk = r.s.backend.max_prefill_tokens;
  nlohmann::json split = nlohmann::json::array();
  std::vector<int32_t> counts = {1};
  counts.insert(counts.end(), r.s.slot_counts.begin(), r.s.slot_counts.end());
  for (int32_t n : counts) {
    const int32_t prompt = n == 1 ? 128 : static_cast<int32_t>(r.s.context);
    const int64_t prefill_steps = (int64_t{n} * prompt + chunk - 1) / chunk;
    auto j = TimeKernels(r, kTimedSteps, Profiled::kDecodeOnly, n, prompt,
                         static_cast<int32_t>(prefill_steps + 4 * kTimedSteps), 2000 + n);
    if (!j.ok()) return j.status();
    (*j)["slots"] = n;
    (*j)["context"] = prompt;
    split.push_back(*j);
  }
  out["kernels"] = split;
  const int32_t prompt = std::min<int32_t>(4096, r.info.max_context - 1);
  const int32_t steps = (prompt + r.prompt_chunk_alone - 1) / r.prompt_chunk_alone;
  auto prefill = TimeKernels(r, steps, Profiled::kWithPrompt, 1, prompt, 1, 3000);
  if (!prefill.ok()) return prefill.status();
  (*prefill)["prompt_tokens"] = prompt;
  (*prefill)["max_prefill_tokens_alone"] = r.prompt_chunk_alone;
  out["kernels_prefill"] = *prefill;
  return absl::OkStatus();
}

// The runs in order: batch 1, throughput per slot count, TTFT, the stall, the kernels.
absl::Status MeasureAll(const GpuBenchRun& r, nlohmann::json& out) {
  auto batch1 = MeasureBatch1(r);
  if (!batch1.ok()) return batch1.status();
  out["batch1"] = *batch1;
  nlohmann::json runs = nlohmann::json::array();
  for (int32_t n : r.s.slot_counts) {
    auto run = MeasureThroughput(r, n);
    if (!run.ok()) return run.status();
    runs.push_back(*run);
  }
  out["throughput"] = runs;
  if (r.s.backend.speculative.enabled()) {
    out["speculation_by_batch"] = SpeculationByBatch(r.worker.Load().engine.scheduler);
  }
  // 3. Time to first token on an idle worker.
  auto ttft = MeasureTtft(r.worker, r.recorder, r.s.ttft_prompts, r.s.ttft_runs, r.info.max_context,
                          r.id_range);
  if (!ttft.ok()) return ttft.status();
  out["ttft"] = *ttft;
  if (r.s.stall_prompt > 0 && r.s.stall_decodes > 0) {
    auto stall = MeasureStallRun(r);
    if (!stall.ok()) return stall.status();
    out["stall"] = *stall;
  }
  return r.s.kernels ? MeasureKernels(r, out) : absl::OkStatus();
}

}  // namespace

int RunGpuBench(const std::vector<std::string>& args) {
  const std::string cmd = "llm-bench gpu";
  auto parsed = ParseSettings(cmd, args, AddGpuBenchFlags, SettingsFromFlags);
  if (!parsed.settings) return parsed.exit_code;
  const GpuBenchSettings& s = *parsed.settings;
  if (kernels::DeviceCount() == 0) {
    return Fail(cmd, absl::FailedPreconditionError(kernels::NoDeviceReason()));
  }
  nlohmann::json out = {{"benchmark", "gpu"}, {"model", s.backend.model}};
  out["device"] = kernels::DeviceDescription(s.backend.device);
  auto bandwidth = DeviceCopyBandwidth(s.backend.device);
  if (!bandwidth.ok()) return Fail(cmd, bandwidth.status());
  out["d2d_bandwidth_gb_per_s"] = *bandwidth / 1e9;

  const auto load_start = Clock::now();
  auto b = backend::CreateBackend(s.backend);
  if (!b.ok()) return Fail(cmd, b.status());
  out["load_seconds"] = std::chrono::duration<double>(Clock::now() - load_start).count();
  auto* cuda_runner = dynamic_cast<runner::cuda::CudaRunner*>(b->runner.get());
  if (cuda_runner == nullptr) {
    return Fail(cmd, absl::InternalError("the cuda backend did not make a CudaRunner"));
  }
  DescribeBackend(*b, s, *cuda_runner, out);
  const model::ModelConfig config = b->config;
  const runner::RunnerInfo info = b->runner->info();
  const int32_t id_range = std::min(b->tokenizer->vocab_size(), 30000);
  const bool fp8_kv = b->kv.fp8();
  Recorder recorder;
  auto worker = MakeWorker(s, *b, recorder);
  if (!worker.ok()) return Fail(cmd, worker.status());
  GpuBenchRun run{s, **worker, recorder, *cuda_runner, info};
  run.id_range = id_range;
  run.bandwidth = *bandwidth;
  // Bytes one decode step must read: every weight but the embedding table (only a row of it is
  // read; a tied head is read whole as the head), plus the sequence's K and V.
  run.embed_bytes = config.tie_word_embeddings ? 0.0 : 2.0 * config.vocab_size * config.hidden_size;
  run.kv_bytes_per_token = 2.0 * (fp8_kv ? 1.0 : 2.0) * config.num_layers * config.kv_dim();
  run.prompt_chunk_alone = (*worker)->scheduler_config().PrefillBudget(0);
  out["max_prefill_tokens"] = s.backend.max_prefill_tokens;
  out["max_prefill_tokens_alone"] = run.prompt_chunk_alone;
  out["max_decode_slowdown"] = s.max_decode_slowdown;
  if (absl::Status st = MeasureAll(run, out); !st.ok()) return Fail(cmd, st);
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

#endif  // LLM_HAVE_CUDA

}  // namespace llm::bench
