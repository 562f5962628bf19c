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
//   - time to first token of one request with 1k and 4k-token prompts on an idle worker;
//   - with --kernels, where a decode step's device time goes: a few decode-only steps at batch
//     1 and at each slot count run eagerly with CUDA events between kernels (KernelClock), and
//     the mean per step of each kernel class (attention, products, norms, RoPE/KV, sampler,
//     other) is reported with its share.
// Requests go through the in-process worker (scheduler, engine loop, output stage): the path a
// served request takes, minus gRPC.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "tools/bench/bench_util.h"
#include "tools/bench/commands.h"

#ifdef LLM_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/device.h"
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

using Clock = std::chrono::steady_clock;

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return -1.0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

// Device-to-device copy: bytes moved (read + written) per second, best of several rounds.
absl::StatusOr<double> CopyBandwidth(int device) {
  constexpr size_t kBytes = size_t{1} << 30;
  if (cudaSetDevice(device) != cudaSuccess) return absl::InternalError("cudaSetDevice");
  void *a = nullptr, *b = nullptr;
  if (cudaMalloc(&a, kBytes) != cudaSuccess || cudaMalloc(&b, kBytes) != cudaSuccess) {
    if (a != nullptr) cudaFree(a);
    return absl::ResourceExhaustedError("bandwidth test: cannot allocate 2 GiB");
  }
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaMemcpy(b, a, kBytes, cudaMemcpyDeviceToDevice);  // warm-up
  double best = 0.0;
  for (int round = 0; round < 5; ++round) {
    constexpr int kCopies = 10;
    cudaEventRecord(start);
    for (int i = 0; i < kCopies; ++i) cudaMemcpyAsync(b, a, kBytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    best = std::max(best, 2.0 * kBytes * kCopies / (ms * 1e-3));
  }
  const cudaError_t err = cudaGetLastError();
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(a);
  cudaFree(b);
  if (err != cudaSuccess) return absl::InternalError(cudaGetErrorString(err));
  return best;
}

// What the engine loop reports per step, with the time it was collected.
struct StepRecord {
  double step_s, gap_s;
  int32_t tokens, decodes;
  Clock::time_point at;
};

class Recorder : public loop::StepObserver, public loop::RequestObserver {
 public:
  void OnStep(double step_s, double gap_s, int32_t tokens, int32_t decodes) override {
    std::lock_guard<std::mutex> lock(mu_);
    steps_.push_back({step_s, gap_s, tokens, decodes, Clock::now()});
  }
  void OnRequestFinished(const loop::RequestStats& s) override {
    std::lock_guard<std::mutex> lock(mu_);
    requests_.push_back(s);
  }
  void OnRequestCancelled() override {}
  // Takes what was recorded so far.
  std::vector<StepRecord> TakeSteps() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(steps_, {});
  }
  std::vector<loop::RequestStats> TakeRequests() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(requests_, {});
  }

 private:
  std::mutex mu_;
  std::vector<StepRecord> steps_;
  std::vector<loop::RequestStats> requests_;
};

// Counts finished streams.
class Countdown {
 public:
  void Add(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    pending_ += n;
  }
  void Done(const absl::Status& st) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!st.ok() && error_.ok()) error_ = st;
    if (--pending_ == 0) cv_.notify_all();
  }
  absl::Status Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return pending_ == 0; });
    return error_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int pending_ = 0;
  absl::Status error_;
};

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

// Runs `n` requests of `prompt_tokens` random ids and `max_tokens` outputs (greedy, EOS
// ignored) to completion.
absl::Status RunRequests(loop::Worker& worker, int n, int32_t prompt_tokens, int32_t max_tokens,
                         int32_t id_range, uint64_t seed) {
  Countdown done;
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
    spec.sampling.temperature = 0;
    auto key = worker.Submit(std::move(spec), std::make_shared<CountingSink>(&done));
    if (!key.ok()) return key.status();
  }
  return done.Wait();
}

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

std::vector<int32_t> ParseInts(const std::string& s) {
  std::vector<int32_t> out;
  for (absl::string_view part : absl::StrSplit(s, ',', absl::SkipEmpty())) {
    int32_t v = 0;
    if (absl::SimpleAtoi(part, &v) && v > 0) out.push_back(v);
  }
  return out;
}

}  // namespace

int RunGpuBench(const std::vector<std::string>& args) {
  const std::string cmd = "llm-bench gpu";
  FlagSet flags;
  flags.Value("model", "checkpoint directory or random:<shape>", "random:llama-3-8b")
      .Value("tokenizer", "tokenizer instead of the model's (random models: synthetic)", "")
      .Value("device", "CUDA device", "0")
      .Value("slots", "running slots of the throughput runs, comma-separated", "64,256")
      .Value("context", "prompt tokens of the throughput runs", "1024")
      .Value("decode-steps", "steps with every slot decoding, at least, per throughput run", "128")
      .Value("batch1-tokens", "tokens generated in the batch-1 run", "256")
      .Value("ttft-prompts", "prompt lengths of the TTFT runs, comma-separated", "1024,4096")
      .Value("ttft-runs", "runs per TTFT prompt length; the median is reported", "3")
      .Value("max-prefill-tokens", "prompt tokens per step", "2048")
      .Value("kv-memory-fraction", "of the free device memory, for the KV cache", "0.9")
      .Bool("no-graphs", "run decode steps eagerly instead of from CUDA graphs")
      .Bool("batch-invariant", "fixed GEMM algorithms (engine.batch_invariant)")
      .Bool("no-gemv",
            "small decode steps through cuBLASLt, not the GEMV kernel (engine.cuda_gemv)")
      .Bool("kernels",
            "also time a few eager decode steps per kernel class (CUDA events) at batch 1 and at "
            "each slot count");
  if (int rc = ParseOrExit(cmd, flags, args); rc >= 0) return rc;
  auto device = flags.GetInt("device");
  auto context = flags.GetInt("context");
  auto decode_steps = flags.GetInt("decode-steps");
  auto batch1 = flags.GetInt("batch1-tokens");
  auto ttft_runs = flags.GetInt("ttft-runs");
  auto max_prefill = flags.GetInt("max-prefill-tokens");
  auto fraction = flags.GetDouble("kv-memory-fraction");
  for (const auto* v : {&device, &context, &decode_steps, &batch1, &ttft_runs, &max_prefill}) {
    if (!v->ok()) return Fail(cmd, v->status());
  }
  if (!fraction.ok()) return Fail(cmd, fraction.status());
  const std::vector<int32_t> slot_counts = ParseInts(flags.GetString("slots"));
  const std::vector<int32_t> ttft_prompts = ParseInts(flags.GetString("ttft-prompts"));
  if (slot_counts.empty()) return Fail(cmd, absl::InvalidArgumentError("--slots: no count"));
  if (kernels::DeviceCount() == 0) {
    return Fail(cmd, absl::FailedPreconditionError(kernels::NoDeviceReason()));
  }

  nlohmann::json out = {{"benchmark", "gpu"}, {"model", flags.GetString("model")}};
  out["device"] = kernels::DeviceDescription(static_cast<int>(*device));
  auto bandwidth = CopyBandwidth(static_cast<int>(*device));
  if (!bandwidth.ok()) return Fail(cmd, bandwidth.status());
  out["d2d_bandwidth_gb_per_s"] = *bandwidth / 1e9;

  const int32_t max_slots = *std::max_element(slot_counts.begin(), slot_counts.end());
  backend::BackendOptions bo;
  bo.model = flags.GetString("model");
  bo.tokenizer = flags.GetString("tokenizer");
  bo.backend = "cuda";
  bo.device = static_cast<int>(*device);
  bo.sizes.max_slots = max_slots;
  bo.max_prefill_tokens = static_cast<int32_t>(*max_prefill);
  bo.kv_memory_fraction = *fraction;
  bo.cuda_graphs = !flags.GetBool("no-graphs");
  bo.batch_invariant = flags.GetBool("batch-invariant");
  bo.cuda_gemv = !flags.GetBool("no-gemv");
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
  out["kv_cache_gib"] = static_cast<double>(info.kv_cache_bytes) / (1ull << 30);
  out["kv_blocks"] = info.sizes.kv_blocks;
  out["cuda_graphs"] = bo.cuda_graphs;
  out["batch_invariant"] = bo.batch_invariant;
  out["gemv"] = bo.cuda_gemv && !bo.batch_invariant;

  Recorder recorder;
  loop::WorkerOptions wo;
  wo.scheduler.max_prefill_tokens = bo.max_prefill_tokens;
  wo.scheduler.max_batch_tokens = bo.max_prefill_tokens + max_slots;
  wo.max_queued_requests = 4 * max_slots;
  auto worker = loop::Worker::Create(wo, std::move(b->runner), std::move(b->tokenizer),
                                     config.eos_token_ids, &recorder, &recorder);
  if (!worker.ok()) return Fail(cmd, worker.status());

  // Bytes one decode step must read: every weight but the embedding table (only a row of it is
  // read; a tied head is read whole as the head), plus the sequence's K and V.
  const double embed_bytes =
      config.tie_word_embeddings ? 0.0 : 2.0 * config.vocab_size * config.hidden_size;
  const double kv_bytes_per_token = 2.0 * 2.0 * config.num_layers * config.kv_dim();

  // 1. Batch 1.
  {
    const int32_t prompt = 128;
    if (absl::Status st =
            RunRequests(**worker, 1, prompt, static_cast<int32_t>(*batch1), id_range, 1);
        !st.ok()) {
      return Fail(cmd, st);
    }
    std::vector<double> step_s;
    for (const StepRecord& r : recorder.TakeSteps()) {
      if (r.decodes == 1 && r.tokens == 1) step_s.push_back(r.step_s);
    }
    recorder.TakeRequests();
    const double median = Percentile(step_s, 0.5);
    const double bytes = static_cast<double>(info.weight_bytes) - embed_bytes +
                         kv_bytes_per_token * (prompt + *batch1 / 2.0);
    out["batch1"] = {{"decode_step_ms_median", median * 1e3},
                     {"decode_step_ms_p99", Percentile(step_s, 0.99) * 1e3},
                     {"bytes_per_step_gb", bytes / 1e9},
                     {"bandwidth_utilization", bytes / median / *bandwidth}};
  }

  // 2. Throughput at N running slots: requests enough that every slot is busy, long enough
  // that the first ones are still decoding when the last prompt is in.
  nlohmann::json runs = nlohmann::json::array();
  for (int32_t n : slot_counts) {
    const int64_t prefill_steps = (int64_t{n} * *context + *max_prefill - 1) / *max_prefill;
    const int32_t max_tokens = static_cast<int32_t>(prefill_steps + *decode_steps + 8);
    const auto start = Clock::now();
    if (absl::Status st =
            RunRequests(**worker, n, static_cast<int32_t>(*context), max_tokens, id_range, 100 + n);
        !st.ok()) {
      return Fail(cmd, st);
    }
    const double total_s = std::chrono::duration<double>(Clock::now() - start).count();
    std::vector<StepRecord> steps = recorder.TakeSteps();
    recorder.TakeRequests();
    // The steady window: consecutive steps in which all n slots decode.
    std::vector<double> gaps, step_s;
    Clock::time_point first{}, last{};
    int64_t window_steps = 0;
    for (const StepRecord& r : steps) {
      if (r.tokens != n || r.decodes != n) continue;
      if (window_steps == 0) first = r.at;
      last = r.at;
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
      run["decode_tokens_per_s"] = static_cast<double>(n) * (window_steps - 1) / wall;
      run["step_ms_median"] = Percentile(step_s, 0.5) * 1e3;
      run["busy_ratio"] = busy / wall;
      run["gap_us_p50"] = Percentile(gaps, 0.5) * 1e6;
      run["gap_us_p99"] = Percentile(gaps, 0.99) * 1e6;
      run["gap_us_max"] = Percentile(gaps, 1.0) * 1e6;
    }
    runs.push_back(run);
  }
  out["throughput"] = runs;

  // 3. Time to first token on an idle worker.
  nlohmann::json ttft = nlohmann::json::array();
  for (int32_t len : ttft_prompts) {
    std::vector<double> ms;
    for (int64_t r = 0; r < *ttft_runs; ++r) {
      if (absl::Status st = RunRequests(**worker, 1, len, 1, id_range, 1000 + r); !st.ok()) {
        return Fail(cmd, st);
      }
      for (const auto& s : recorder.TakeRequests()) {
        if (s.ttft_seconds >= 0) ms.push_back(s.ttft_seconds * 1e3);
      }
      recorder.TakeSteps();
    }
    ttft.push_back({{"prompt_tokens", len}, {"ttft_ms_median", Percentile(ms, 0.5)}});
  }
  out["ttft"] = ttft;

  // 4. Where a decode step's time goes (eager steps, so a little slower than graph replays).
  if (flags.GetBool("kernels")) {
    constexpr int kTimedSteps = 8;
    nlohmann::json split = nlohmann::json::array();
    std::vector<int32_t> counts = {1};
    counts.insert(counts.end(), slot_counts.begin(), slot_counts.end());
    for (int32_t n : counts) {
      const int32_t prompt = n == 1 ? 128 : static_cast<int32_t>(*context);
      const int64_t prefill_steps = (int64_t{n} * prompt + *max_prefill - 1) / *max_prefill;
      if (absl::Status st = cuda_runner->ProfileDecodeSteps(kTimedSteps); !st.ok()) {
        return Fail(cmd, st);
      }
      (void)cuda_runner->TakeKernelTimes();
      if (absl::Status st = RunRequests(**worker, n, prompt,
                                        static_cast<int32_t>(prefill_steps + 4 * kTimedSteps),
                                        id_range, 2000 + n);
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
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

#endif  // LLM_HAVE_CUDA

}  // namespace llm::bench
