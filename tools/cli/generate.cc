// llm-cli generate: runs a model (a Hugging Face checkpoint or random:<shape>) through the
// in-process engine (loop::Worker), on the CPU reference backend unless told otherwise, and
// prints the completion as it streams.
#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tools/cli/commands.h"
#include "tools/common/tool_util.h"
#include "worker/backend/backend.h"
#include "worker/loop/worker.h"
#include "worker/model/synthetic.h"

namespace llm::cli {

using tools::AddSamplingFlags;
using tools::Fail;
using tools::ParseOrExit;
using tools::ParseSettings;
using tools::ReadSamplingFlags;

namespace {

// Prints `prefix` (the prompt) and then a request's text as it streams; keeps its token ids.
class PrintingSink : public loop::StreamSink {
 public:
  PrintingSink(bool print_text, std::string prefix)
      : print_text_(print_text), prefix_(std::move(prefix)) {}
  void OnUpdate(loop::StreamUpdate u) override {
    if (print_text_) {
      std::fputs((prefix_ + u.text).c_str(), stdout);
      prefix_.clear();
      std::fflush(stdout);
    }
    std::lock_guard<std::mutex> lock(mu_);
    ids_.insert(ids_.end(), u.token_ids.begin(), u.token_ids.end());
    if (u.finished) Done(absl::OkStatus());
  }
  void OnError(const absl::Status& status) override {
    std::lock_guard<std::mutex> lock(mu_);
    Done(status);
  }
  absl::Status Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    return status_;
  }
  std::vector<int32_t> ids() {
    std::lock_guard<std::mutex> lock(mu_);
    return ids_;
  }

 private:
  void Done(const absl::Status& status) {
    status_ = status;
    done_ = true;
    cv_.notify_all();
  }
  bool print_text_;
  std::string prefix_;  // output-stage thread only
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int32_t> ids_;
  absl::Status status_;
  bool done_ = false;
};

// The settings of one run, read from its flags once.
struct GenerateSettings {
  backend::BackendOptions backend;  // one slot, KV blocks for the context
  sampling::SamplingParams sampling;
  int64_t max_tokens = 0;
  std::string prompt;
  std::vector<std::string> stop;
  std::vector<std::string> stop_ids;  // --stop-id as given, checked as the request is built
  bool ignore_eos = false, no_special = false, print_ids = false;
};

void AddGenerateFlags(FlagSet& flags) {
  flags.Value("model", "Hugging Face checkpoint directory, GGUF file, or random:<shape>[:<seed>]")
      .Value("tokenizer",
             "tokenizer.json (or its directory, or a GGUF file) instead of the model's")
      .Value("backend", "cpu (the fp32 reference), cuda or auto", "cpu")
      .Value("max-context",
             "positions per sequence (prompt + output); 0: the model's, at most 4096", "0")
      .Value("prompt", "prompt text")
      .Value("max-tokens", "tokens to generate at most", "64")
      .Value("stop", "stop string (repeatable)")
      .Value("stop-id", "stop token id (repeatable)")
      .Value("threads", "CPU threads (0 = all cores)", "0")
      .Bool("ignore-eos", "keep going after EOS")
      .Bool("no-special", "do not add BOS to the prompt")
      .Bool("ids", "print {\"prompt_ids\":[...],\"generated_ids\":[...]} instead of text");
  AddSamplingFlags(flags);
}

// --max-context, checked against the model's positions (its config is read for that); 0 becomes
// the model's, at most 4096.
absl::StatusOr<int64_t> MaxContextFromFlags(const FlagSet& flags) {
  auto max_context = flags.GetInt("max-context");
  if (!max_context.ok()) return max_context.status();
  if (*max_context < 0 || *max_context > (1 << 24)) {
    return absl::InvalidArgumentError("--max-context: must be in [0, 16777216]");
  }
  auto source = model::ParseModelSource(flags.GetString("model"));
  if (!source.ok()) return source.status();
  auto config = model::LoadSourceConfig(*source);
  if (!config.ok()) return config.status();
  if (*max_context > config->max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat("--max-context: ", *max_context,
                                                   " is more than the model's ",
                                                   config->max_position_embeddings, " positions"));
  }
  if (*max_context == 0) *max_context = std::min<int64_t>(4096, config->max_position_embeddings);
  return *max_context;
}

absl::StatusOr<GenerateSettings> SettingsFromFlags(const FlagSet& flags) {
  if (absl::Status st = flags.Require({"model", "prompt"}); !st.ok()) return st;
  GenerateSettings s;
  auto sampling = ReadSamplingFlags(flags);
  if (!sampling.ok()) return sampling.status();
  s.sampling = *sampling;
  auto max_tokens = flags.GetInt("max-tokens");
  if (!max_tokens.ok()) return max_tokens.status();
  auto threads = flags.GetInt("threads");
  if (!threads.ok()) return threads.status();
  if (*max_tokens < 1 || *max_tokens > (1 << 24)) {
    return absl::InvalidArgumentError("--max-tokens: must be in [1, 16777216]");
  }
  s.max_tokens = *max_tokens;
  auto max_context = MaxContextFromFlags(flags);
  if (!max_context.ok()) return max_context.status();
  // The in-process engine with one slot: the same path a worker serves requests on.
  backend::BackendOptions& bo = s.backend;
  bo.model = flags.GetString("model");
  bo.tokenizer = flags.GetString("tokenizer");
  bo.backend = flags.GetString("backend");
  bo.cpu_threads = static_cast<int>(*threads);
  bo.sizes.max_slots = 1;
  bo.max_context = static_cast<int32_t>(*max_context);
  bo.sizes.kv_blocks =
      static_cast<int32_t>((*max_context + bo.sizes.block_tokens - 1) / bo.sizes.block_tokens);
  bo.max_prefill_tokens = 4096;
  s.prompt = flags.GetString("prompt");
  s.stop = flags.GetAll("stop");
  s.stop_ids = flags.GetAll("stop-id");
  s.ignore_eos = flags.GetBool("ignore-eos");
  s.no_special = flags.GetBool("no-special");
  s.print_ids = flags.GetBool("ids");
  return s;
}

// The worker on `b`'s runner and tokenizer; `b` must outlive it (its thread pool).
absl::StatusOr<std::unique_ptr<loop::Worker>> MakeWorker(backend::Backend& b) {
  loop::WorkerOptions wo;
  wo.scheduler.max_batch_tokens = 4096;
  wo.scheduler.max_prefill_tokens = 4096;
  wo.tokenizer_threads = 1;
  return loop::Worker::Create(wo, std::move(b.runner), std::move(b.tokenizer),
                              b.config.eos_token_ids);
}

absl::StatusOr<loop::GenerateSpec> MakeSpec(const GenerateSettings& s) {
  loop::GenerateSpec spec;
  spec.text = s.prompt;
  spec.add_special_tokens = !s.no_special;
  spec.max_tokens = static_cast<int32_t>(s.max_tokens);
  spec.sampling = s.sampling;
  spec.stop = s.stop;
  spec.ignore_eos = s.ignore_eos;
  for (const std::string& id_text : s.stop_ids) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(id_text, &id)) {
      return absl::InvalidArgumentError("--stop-id: '" + id_text + "' is not a token id");
    }
    spec.stop_token_ids.push_back(id);
  }
  return spec;
}

// Runs the request to its end, printing the prompt and the completion as it streams, or with
// --ids both as ids once it ended.
absl::Status Generate(const GenerateSettings& s, loop::Worker& worker) {
  auto spec = MakeSpec(s);
  if (!spec.ok()) return spec.status();
  auto prompt_ids = worker.Tokenize(spec->text, spec->add_special_tokens);
  if (!prompt_ids.ok()) return prompt_ids.status();
  auto sink = std::make_shared<PrintingSink>(!s.print_ids, spec->text);
  if (auto key = worker.Submit(*std::move(spec), sink); !key.ok()) return key.status();
  if (absl::Status st = sink->Wait(); !st.ok()) return st;
  if (s.print_ids) {
    nlohmann::ordered_json j;
    j["prompt_ids"] = *prompt_ids;
    j["generated_ids"] = sink->ids();
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("\n");
  }
  return absl::OkStatus();
}

}  // namespace

int RunGenerate(const std::vector<std::string>& args) {
  const std::string cmd = "llm-cli generate";
  auto parsed = ParseSettings(cmd, args, AddGenerateFlags, SettingsFromFlags);
  if (!parsed.settings) return parsed.exit_code;
  const GenerateSettings& s = *parsed.settings;
  // Declared before the worker: the backend's thread pool must outlive the runner.
  auto backend = backend::CreateBackend(s.backend);
  if (!backend.ok()) return Fail(cmd, backend.status());
  auto worker = MakeWorker(*backend);
  if (!worker.ok()) return Fail(cmd, worker.status());
  if (absl::Status st = Generate(s, **worker); !st.ok()) return Fail(cmd, st);
  return 0;
}

}  // namespace llm::cli
