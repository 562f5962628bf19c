// llm-bench prefill: how a backend's prompt-chunk size (engine.max_prefill_tokens) trades time to
// first token against the stall of running decodes, measured on that backend in one run. For
// each --chunks value a fresh backend and worker take prompts in chunks of that many tokens, and
// report time to first token at --ttft-prompts on an idle worker and the stall of
// MeasureStall (--stall-decodes requests decoding while a --stall-prompt-token prompt
// prefills). A run's chunk is the same with and without decodes (engine.max_prefill_tokens and
// engine.max_prefill_tokens_alone both set to it), so the idle TTFT shows what the chunk costs.
// The per-backend defaults of both come from this (docs/engine.md). Each chunk is run at each
// --slowdowns value (engine.max_decode_slowdown: 0 leaves the long prompt unpaced), and the
// stall reports the decoders' mean time per token over the long prompt's prefill.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "tools/bench/bench_util.h"
#include "tools/bench/commands.h"
#include "tools/bench/worker_driver.h"
#include "worker/backend/backend.h"
#include "worker/loop/worker.h"

namespace llm::bench {

namespace {

// The run's settings, from the flags.
struct PrefillSettings {
  std::string model, tokenizer, backend;
  int32_t slots = 8, max_context = 0, threads = 0;
  std::vector<int32_t> ttft_prompts;
  int32_t ttft_runs = 1, stall_prompt = 0, stall_decodes = 4;
};

// One fresh backend and worker at `chunk` and `slowdown`: the idle TTFT and the stall. Sets the
// backend's name and device in `out`.
absl::StatusOr<nlohmann::json> RunOne(const PrefillSettings& p, int32_t chunk, double slowdown,
                                      nlohmann::json& out) {
  backend::BackendOptions bo;
  bo.model = p.model;
  bo.tokenizer = p.tokenizer;
  bo.backend = p.backend;
  bo.sizes.max_slots = p.slots;
  bo.max_prefill_tokens = chunk;
  bo.max_prefill_tokens_alone = chunk;
  bo.max_context = p.max_context;
  bo.cpu_threads = p.threads;
  auto b = backend::CreateBackend(bo);
  if (!b.ok()) return b.status();
  const runner::RunnerInfo info = b->runner->info();
  out["backend"] = b->backend;
  out["device"] = info.device;
  const int32_t id_range = std::min(b->tokenizer->vocab_size(), 30000);
  Recorder recorder;
  loop::WorkerOptions wo;
  wo.scheduler.max_prefill_tokens = chunk;
  wo.scheduler.max_prefill_tokens_alone = chunk;
  wo.scheduler.max_batch_tokens = 0;  // the slots and the chunk bound a step
  wo.scheduler.prefix_cache = false;  // every run computes its whole prompt
  wo.scheduler.max_decode_slowdown = slowdown;
  auto worker = loop::Worker::Create(wo, std::move(b->runner), std::move(b->tokenizer),
                                     b->config.eos_token_ids, &recorder, &recorder);
  if (!worker.ok()) return worker.status();
  nlohmann::json run = {{"max_prefill_tokens", chunk}, {"max_decode_slowdown", slowdown}};
  // One request first, so one-time costs (module load, first touch of buffers) stay out.
  LLM_RETURN_IF_ERROR(
      RunRequests(**worker, 1, std::min(2 * chunk, info.max_context / 2), 2, id_range, 7));
  recorder.TakeSteps();
  recorder.TakeRequests();
  auto ttft =
      MeasureTtft(**worker, recorder, p.ttft_prompts, p.ttft_runs, info.max_context, id_range);
  if (!ttft.ok()) return ttft.status();
  run["ttft"] = *ttft;
  if (p.stall_prompt >= info.max_context) {
    run["stall"] = {{"skipped", "--stall-prompt " + std::to_string(p.stall_prompt) +
                                    " is past the runner's context of " +
                                    std::to_string(info.max_context)}};
  } else if (p.stall_prompt > 0) {
    auto stall = MeasureStall(**worker, recorder, p.stall_decodes, p.stall_prompt, chunk, slowdown,
                              id_range);
    if (!stall.ok()) return stall.status();
    run["stall"] = *stall;
  }
  return run;
}

}  // namespace

int RunPrefillBench(const std::vector<std::string>& args) {
  const char* cmd = "llm-bench prefill";
  FlagSet flags;
  flags.Value("model", "checkpoint directory or random:<shape>", "random:small")
      .Value("tokenizer", "tokenizer.json or its directory (default: the model's)", "")
      .Value("backend", "auto, cpu or cuda", "auto")
      .Value("chunks", "prompt tokens per step to compare, comma-separated", "128,256,512,1024")
      .Value("ttft-prompts", "prompt lengths of the idle TTFT runs, comma-separated", "1024")
      .Value("ttft-runs", "runs per TTFT prompt length; the median is reported", "1")
      .Value("stall-prompt", "prompt tokens of the long request of the stall run", "1536")
      .Value("stall-decodes", "requests decoding during the stall run", "4")
      .Value("slowdowns", "engine.max_decode_slowdown values to compare (0: off)", "0,2")
      .Value("slots", "slot table size", "8")
      .Value("max-context", "positions per sequence (0: the model's)", "0")
      .Value("cpu-threads", "cpu: threads (0: all cores)", "0");
  if (int rc = ParseOrExit(cmd, flags, args); rc >= 0) return rc;
  auto ttft_runs = flags.GetInt("ttft-runs");
  auto stall_prompt = flags.GetInt("stall-prompt");
  auto stall_decodes = flags.GetInt("stall-decodes");
  auto slots = flags.GetInt("slots");
  auto max_context = flags.GetInt("max-context");
  auto threads = flags.GetInt("cpu-threads");
  for (const auto* v :
       {&ttft_runs, &stall_prompt, &stall_decodes, &slots, &max_context, &threads}) {
    if (!v->ok()) return Fail(cmd, v->status());
  }
  const PrefillSettings p{flags.GetString("model"),
                          flags.GetString("tokenizer"),
                          flags.GetString("backend"),
                          static_cast<int32_t>(*slots),
                          static_cast<int32_t>(*max_context),
                          static_cast<int32_t>(*threads),
                          ParsePositiveInts(flags.GetString("ttft-prompts")),
                          static_cast<int32_t>(*ttft_runs),
                          static_cast<int32_t>(*stall_prompt),
                          static_cast<int32_t>(*stall_decodes)};
  const std::vector<int32_t> chunks = ParsePositiveInts(flags.GetString("chunks"));
  if (chunks.empty()) return Fail(cmd, absl::InvalidArgumentError("--chunks: no size"));
  std::vector<double> slowdowns;
  for (absl::string_view v : absl::StrSplit(flags.GetString("slowdowns"), ',')) {
    double x = 0;
    if (!absl::SimpleAtod(v, &x) || !(x == 0 || x > 1)) {
      return Fail(cmd, absl::InvalidArgumentError(
                           absl::StrCat("--slowdowns: 0 or more than 1 each, got '", v, "'")));
    }
    slowdowns.push_back(x);
  }
  if (p.stall_decodes < 1 || p.stall_decodes >= p.slots) {
    return Fail(cmd, absl::InvalidArgumentError("--stall-decodes: between 1 and --slots - 1"));
  }
  nlohmann::json out = {{"benchmark", "prefill"}, {"model", p.model}};
  nlohmann::json runs = nlohmann::json::array();
  for (int32_t chunk : chunks) {
    for (double slowdown : slowdowns) {
      auto run = RunOne(p, chunk, slowdown, out);
      if (!run.ok()) return Fail(cmd, run.status());
      runs.push_back(*std::move(run));
    }
  }
  out["runs"] = runs;
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace llm::bench
