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

}  // namespace

int RunGpuBench(const std::vector<std::string>& args) {
  const std::string cmd = "llm-bench gpu";
  FlagSet flags;
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
  if (int rc = ParseOrExit(cmd, flags, args); rc >= 0) return rc;
  auto device = flags.GetInt("device");
  auto context = flags.GetInt("context");
  auto decode_steps = flags.GetInt("decode-steps");
  auto batch1 = flags.GetInt("batch1-tokens");
  auto ttft_runs = flags.GetInt("ttft-runs");
  auto stall_prompt = flags.GetInt("stall-prompt");
  auto stall_decodes = flags.GetInt("stall-decodes");
  auto num_tokens = flags.GetInt("num-tokens");
  auto max_prefill = flags.GetInt("max-prefill-tokens");
  auto max_prefill_alone = flags.GetInt("max-prefill-tokens-alone");
  auto fraction = flags.GetDouble("kv-memory-fraction");
  auto slowdown = flags.GetDouble("max-decode-slowdown");
  if (!slowdown.ok()) return Fail(cmd, slowdown.status());
  for (const auto* v : {&device, &context, &decode_steps, &batch1, &ttft_runs, &max_prefill,
                        &max_prefill_alone, &stall_prompt, &stall_decodes, &num_tokens}) {
    if (!v->ok()) return Fail(cmd, v->status());
  }
  if (!fraction.ok()) return Fail(cmd, fraction.status());
  auto temperature_flag = flags.GetDouble("temperature");
  if (!temperature_flag.ok()) return Fail(cmd, temperature_flag.status());
  const float temperature = static_cast<float>(*temperature_flag);
  if (!(temperature >= 0.0f && temperature <= 100.0f)) {
    return Fail(cmd, absl::InvalidArgumentError("--temperature: must be in [0, 100]"));
  }
  const std::vector<int32_t> slot_counts = ParsePositiveInts(flags.GetString("slots"));
  const std::vector<int32_t> ttft_prompts = ParsePositiveInts(flags.GetString("ttft-prompts"));
  if (slot_counts.empty()) return Fail(cmd, absl::InvalidArgumentError("--slots: no count"));
  engine::SpeculativeConfig spec;
  auto method = engine::ParseSpeculativeMethod(flags.GetString("speculative"));
  if (!method.ok()) return Fail(cmd, method.status());
  if (*method == engine::SpeculativeMethod::kOracle) {
    return Fail(cmd, absl::InvalidArgumentError("--speculative: off, ngram or draft"));
  }
  spec.method = *method;
  spec.num_tokens = static_cast<int32_t>(*num_tokens);
  spec.draft_model = flags.GetString("draft-model");
  if (absl::Status st = spec.Validate(); !st.ok()) return Fail(cmd, st);
  if (kernels::DeviceCount() == 0) {
    return Fail(cmd, absl::FailedPreconditionError(kernels::NoDeviceReason()));
  }

  nlohmann::json out = {{"benchmark", "gpu"}, {"model", flags.GetString("model")}};
  out["device"] = kernels::DeviceDescription(static_cast<int>(*device));
  auto bandwidth = DeviceCopyBandwidth(static_cast<int>(*device));
  if (!bandwidth.ok()) return Fail(cmd, bandwidth.status());
  out["d2d_bandwidth_gb_per_s"] = *bandwidth / 1e9;

  const int32_t max_slots = *std::max_element(slot_counts.begin(), slot_counts.end());
  backend::BackendOptions bo;
  bo.model = flags.GetString("model");
  bo.tokenizer = flags.GetString("tokenizer");
  bo.quantization = flags.GetString("quantization");
  bo.kv_cache_dtype = flags.GetString("kv-cache-dtype");
  bo.backend = "cuda";
  bo.device = static_cast<int>(*device);
  bo.sizes.max_slots = max_slots;
  bo.max_prefill_tokens = static_cast<int32_t>(*max_prefill);
  bo.max_prefill_tokens_alone = static_cast<int32_t>(*max_prefill_alone);
  bo.kv_memory_fraction = *fraction;
  bo.speculative = spec;
  if (absl::Status st = CudaSwitchesFromFlags(flags, bo.cuda); !st.ok()) return Fail(cmd, st);
  const auto load_start = Clock::now();
  auto b = backend::CreateBackend(bo);
  if (!b.ok()) return Fail(cmd, b.status());
  out["load_seconds"] = std::chrono::duration<double>(Clock::now() - load_start).count();
  const model::ModelConfig config = b->config;
  const runner::RunnerInfo info = b->runner->info();
  // The runner stays reachable for kernel timing once the worker owns it.
  auto* cuda_runner = dynamic_cast<runner::cuda::CudaRunner*>(b->runner.get());
  if (cuda_runner == nullptr) {
    return Fail(cmd, absl::InternalError("the cuda backend did not make a CudaRunner"));
  }
  const int32_t id_range = std::min(b->tokenizer->vocab_size(), 30000);
  out["weights_gib"] = static_cast<double>(info.weight_bytes) / (1ull << 30);
  out["linear_layers"] = b->quant.Describe();
  out["kv_cache"] = b->kv.Describe();
  out["kv_cache_gib"] = static_cast<double>(info.kv_cache_bytes) / (1ull << 30);
  out["kv_blocks"] = info.sizes.kv_blocks;
  out["switches"] = CudaSwitchesJson(bo.cuda);
  out["gemv"] = bo.cuda.gemv && !bo.cuda.batch_invariant;  // as it ran
  out["prefill_attention"] = info.prefill_attention;       // the kernel chosen at start
  out["gemm_tuning"] = {{"on", bo.cuda.gemm_tuning},
                        {"products_tuned", cuda_runner->gemms_tuned()},
                        {"algorithm_changed", cuda_runner->gemms_tuned_changed()}};
  out["pdl"] = kernels::ProgrammaticLaunch();  // as --pdl settled, where the device allows it
  out["temperature"] = temperature;
  out["speculative"] = engine::SpeculativeMethodName(spec.method);
  if (spec.enabled()) out["num_tokens"] = spec.num_tokens;
  if (spec.method == engine::SpeculativeMethod::kDraft) out["draft_model"] = spec.draft_model;

  Recorder recorder;
  loop::WorkerOptions wo;
  wo.scheduler.max_prefill_tokens = bo.max_prefill_tokens;
  wo.scheduler.max_prefill_tokens_alone = bo.max_prefill_tokens_alone;  // 0: the runner's
  wo.scheduler.max_batch_tokens = 0;  // the slots and the prompt budgets bound a step
  wo.max_queued_requests = 4 * max_slots;
  wo.scheduler.prefix_cache = false;  // every run computes its whole prompt
  wo.scheduler.max_decode_slowdown = *slowdown;
  wo.scheduler.speculative = spec;
  auto worker = loop::Worker::Create(wo, std::move(b->runner), std::move(b->tokenizer),
                                     config.eos_token_ids, &recorder, &recorder);
  if (!worker.ok()) return Fail(cmd, worker.status());
  // The chunk of a prompt with nothing decoding, as the worker settled it.
  const int32_t prompt_chunk_alone = (*worker)->scheduler_config().PrefillBudget(0);
  out["max_prefill_tokens"] = bo.max_prefill_tokens;
  out["max_prefill_tokens_alone"] = prompt_chunk_alone;
  out["max_decode_slowdown"] = *slowdown;

  // Bytes one decode step must read: every weight but the embedding table (only a row of it is
  // read; a tied head is read whole as the head), plus the sequence's K and V.
  const double embed_bytes =
      config.tie_word_embeddings ? 0.0 : 2.0 * config.vocab_size * config.hidden_size;
  const double kv_bytes_per_token =
      2.0 * (b->kv.fp8() ? 1.0 : 2.0) * config.num_layers * config.kv_dim();  // K and V

  // 1. Batch 1.
  {
    const int32_t prompt = 128;
    if (absl::Status st = RunRequests(**worker, 1, prompt, static_cast<int32_t>(*batch1), id_range,
                                      1, temperature);
        !st.ok()) {
      return Fail(cmd, st);
    }
    // The decode steps (one token each, or with speculation the run each verification gave).
    std::vector<double> step_s;
    double busy = 0, tokens = 0;
    for (const StepRecord& r : recorder.TakeSteps()) {
      if (r.decodes != 1 || r.prompt_tokens != 0) continue;
      step_s.push_back(r.step_s);
      busy += r.step_s;
      tokens += r.tokens;
    }
    recorder.TakeRequests();
    const double median = Percentile(step_s, 0.5);
    const double bytes = static_cast<double>(info.weight_bytes) - embed_bytes +
                         kv_bytes_per_token * (prompt + *batch1 / 2.0);
    out["batch1"] = {{"decode_step_ms_median", median * 1e3},
                     {"decode_step_ms_p99", Percentile(step_s, 0.99) * 1e3},
                     {"decode_tokens_per_s", busy > 0 ? tokens / busy : 0.0},
                     {"bytes_per_step_gb", bytes / 1e9},
                     {"bandwidth_utilization", bytes / median / *bandwidth}};
    if (spec.enabled()) {
      out["batch1"]["speculation_tokens_per_slot"] =
          SpeculationAt((*worker)->Load().engine.scheduler, 1);
    }
  }

  // 2. Throughput at N running slots: requests enough that every slot is busy, long enough
  // that the first ones are still decoding when the last prompt is in.
  nlohmann::json runs = nlohmann::json::array();
  for (int32_t n : slot_counts) {
    const int64_t prefill_steps = (int64_t{n} * *context + *max_prefill - 1) / *max_prefill;
    const int32_t max_tokens = static_cast<int32_t>(prefill_steps + *decode_steps + 8);
    const auto start = Clock::now();
    if (absl::Status st = RunRequests(**worker, n, static_cast<int32_t>(*context), max_tokens,
                                      id_range, 100 + n, temperature);
        !st.ok()) {
      return Fail(cmd, st);
    }
    const double total_s = std::chrono::duration<double>(Clock::now() - start).count();
    std::vector<StepRecord> steps = recorder.TakeSteps();
    recorder.TakeRequests();
    // The steady window: consecutive steps in which all n slots decode.
    // (With speculation a step gives each slot its accepted run: tokens >= n.)
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
    nlohmann::json run = {{"slots", n},
                          {"context", *context},
                          {"steady_steps", window_steps},
                          {"total_seconds", total_s}};
    if (window_steps >= 2) {
      const double wall = std::chrono::duration<double>(last - first).count();
      const double busy = std::accumulate(step_s.begin() + 1, step_s.end(), 0.0);
      run["decode_tokens_per_s"] = static_cast<double>(window_tokens) / wall;
      run["step_ms_median"] = Percentile(step_s, 0.5) * 1e3;
      run["busy_ratio"] = busy / wall;
      run["gap_us_p50"] = Percentile(gaps, 0.5) * 1e6;
      run["gap_us_p99"] = Percentile(gaps, 0.99) * 1e6;
      run["gap_us_max"] = Percentile(gaps, 1.0) * 1e6;
    }
    if (spec.enabled()) {
      run["speculation_tokens_per_slot"] = SpeculationAt((*worker)->Load().engine.scheduler, n);
    }
    runs.push_back(run);
  }
  out["throughput"] = runs;
  if (spec.enabled())
    out["speculation_by_batch"] = SpeculationByBatch((*worker)->Load().engine.scheduler);

  // 3. Time to first token on an idle worker.
  auto ttft = MeasureTtft(**worker, recorder, ttft_prompts, *ttft_runs, info.max_context, id_range);
  if (!ttft.ok()) return Fail(cmd, ttft.status());
  out["ttft"] = *ttft;

  // 4. The stall: decodes running while a long prompt prefills.
  if (*stall_prompt > 0 && *stall_decodes > 0) {
    const int32_t n = static_cast<int32_t>(std::min<int64_t>(*stall_decodes, max_slots - 1));
    const int32_t long_prompt = static_cast<int32_t>(*stall_prompt);
    if (n < 1 || long_prompt >= info.max_context) {
      out["stall"] = {
          {"skipped", absl::StrCat("needs 2 slots and a context over ", long_prompt, " (",
                                   max_slots, " slots, context ", info.max_context, ")")}};
    } else {
      auto stall = MeasureStall(**worker, recorder, n, long_prompt,
                                static_cast<int32_t>(*max_prefill), *slowdown, id_range);
      if (!stall.ok()) return Fail(cmd, stall.status());
      out["stall"] = *stall;
    }
  }

  // 5. Where a decode step's time goes (eager steps, so a little slower than graph replays),
  // then a prompt's.
  if (flags.GetBool("kernels")) {
    constexpr int kTimedSteps = 8;
    nlohmann::json split = nlohmann::json::array();
    std::vector<int32_t> counts = {1};
    counts.insert(counts.end(), slot_counts.begin(), slot_counts.end());
    for (int32_t n : counts) {
      const int32_t prompt = n == 1 ? 128 : static_cast<int32_t>(*context);
      const int64_t prefill_steps = (int64_t{n} * prompt + *max_prefill - 1) / *max_prefill;
      if (absl::Status st = cuda_runner->ProfileSteps(
              kTimedSteps, runner::cuda::CudaRunner::ProfiledSteps::kDecodeOnly);
          !st.ok()) {
        return Fail(cmd, st);
      }
      (void)cuda_runner->TakeKernelTimes();
      if (absl::Status st = RunRequests(**worker, n, prompt,
                                        static_cast<int32_t>(prefill_steps + 4 * kTimedSteps),
                                        id_range, 2000 + n, temperature);
          !st.ok()) {
        return Fail(cmd, st);
      }
      nlohmann::json j = KernelSplit(cuda_runner->TakeKernelTimes());
      j["slots"] = n;
      j["context"] = prompt;
      split.push_back(j);
      recorder.TakeSteps();
      recorder.TakeRequests();
    }
    out["kernels"] = split;

    // And the steps of one prompt on an idle worker (TTFT's steps): 4k tokens, or what the
    // context allows, in chunks of --max-prefill-tokens-alone.
    const int32_t prompt = std::min<int32_t>(4096, info.max_context - 1);
    const int32_t prompt_steps = (prompt + prompt_chunk_alone - 1) / prompt_chunk_alone;
    if (absl::Status st = cuda_runner->ProfileSteps(
            prompt_steps, runner::cuda::CudaRunner::ProfiledSteps::kWithPrompt);
        !st.ok()) {
      return Fail(cmd, st);
    }
    (void)cuda_runner->TakeKernelTimes();
    if (absl::Status st = RunRequests(**worker, 1, prompt, 1, id_range, 3000, temperature);
        !st.ok()) {
      return Fail(cmd, st);
    }
    nlohmann::json prefill = KernelSplit(cuda_runner->TakeKernelTimes());
    prefill["prompt_tokens"] = prompt;
    prefill["max_prefill_tokens_alone"] = prompt_chunk_alone;
    out["kernels_prefill"] = prefill;
    recorder.TakeSteps();
    recorder.TakeRequests();
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

#endif  // LLM_HAVE_CUDA

}  // namespace llm::bench
