// llm-cli generate: runs a Hugging Face checkpoint on the CPU through the in-process engine
// (loop::Worker) and prints the completion as it streams.
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>

#include "absl/strings/numbers.h"
#include "common/thread_pool.h"
#include "nlohmann/json.hpp"
#include "tools/cli/commands.h"
#include "tools/common/tool_util.h"
#include "worker/frontend/tokenizer.h"
#include "worker/loop/worker.h"
#include "worker/runner/cpu_model.h"
#include "worker/runner/cpu_runner.h"

namespace llm::cli {

using tools::AddSamplingFlags;
using tools::Fail;
using tools::ParseOrExit;
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

}  // namespace

int RunGenerate(const std::vector<std::string>& args) {
  const std::string cmd = "llm-cli generate";
  FlagSet flags;
  flags.Value("model", "Hugging Face checkpoint directory")
      .Value("prompt", "prompt text")
      .Value("max-tokens", "tokens to generate at most", "64")
      .Value("stop", "stop string (repeatable)")
      .Value("stop-id", "stop token id (repeatable)")
      .Value("threads", "CPU threads (0 = all cores)", "0")
      .Bool("ignore-eos", "keep going after EOS")
      .Bool("no-special", "do not add BOS to the prompt")
      .Bool("ids", "print {\"prompt_ids\":[...],\"generated_ids\":[...]} instead of text");
  AddSamplingFlags(flags);
  if (int rc = ParseOrExit(cmd, flags, args); rc >= 0) return rc;
  if (absl::Status st = flags.Require({"model", "prompt"}); !st.ok()) return Fail(cmd, st);

  auto sampling = ReadSamplingFlags(flags);
  if (!sampling.ok()) return Fail(cmd, sampling.status());
  auto max_tokens = flags.GetInt("max-tokens");
  if (!max_tokens.ok()) return Fail(cmd, max_tokens.status());
  auto threads = flags.GetInt("threads");
  if (!threads.ok()) return Fail(cmd, threads.status());
  if (*max_tokens < 1 || *max_tokens > (1 << 24)) {
    return Fail(cmd, absl::InvalidArgumentError("--max-tokens: must be in [1, 16777216]"));
  }

  // The in-process engine with one slot: the same path a worker serves requests on.
  ThreadPool pool(static_cast<int>(*threads));
  const std::string dir = flags.GetString("model");
  auto model = runner::CpuModel::Load(dir, &pool);
  if (!model.ok()) return Fail(cmd, model.status());
  auto tokenizer = frontend::Tokenizer::Load(dir);
  if (!tokenizer.ok()) return Fail(cmd, tokenizer.status());
  const model::ModelConfig config = (*model)->config();
  runner::CpuRunnerOptions ro;
  ro.max_slots = 1;
  ro.num_kv_blocks = (config.max_position_embeddings + ro.block_tokens - 1) / ro.block_tokens;
  ro.valid_vocab_size = (*tokenizer)->vocab_size();
  loop::WorkerOptions wo;
  wo.scheduler.max_batch_tokens = 4096;
  wo.scheduler.max_prefill_tokens = 4096;
  wo.tokenizer_threads = 1;
  auto worker = loop::Worker::Create(wo, std::make_unique<runner::CpuRunner>(*std::move(model), ro),
                                     *std::move(tokenizer), config.eos_token_ids);
  if (!worker.ok()) return Fail(cmd, worker.status());

  loop::GenerateSpec spec;
  spec.text = flags.GetString("prompt");
  spec.add_special_tokens = !flags.GetBool("no-special");
  spec.max_tokens = static_cast<int32_t>(*max_tokens);
  spec.sampling = *sampling;
  spec.stop = flags.GetAll("stop");
  spec.ignore_eos = flags.GetBool("ignore-eos");
  for (const std::string& s : flags.GetAll("stop-id")) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(s, &id)) {
      return Fail(cmd, absl::InvalidArgumentError("--stop-id: '" + s + "' is not a token id"));
    }
    spec.stop_token_ids.push_back(id);
  }
  auto prompt_ids = (*worker)->Tokenize(spec.text, spec.add_special_tokens);
  if (!prompt_ids.ok()) return Fail(cmd, prompt_ids.status());

  const bool print_ids = flags.GetBool("ids");
  auto sink = std::make_shared<PrintingSink>(!print_ids, spec.text);
  if (auto key = (*worker)->Submit(std::move(spec), sink); !key.ok()) {
    return Fail(cmd, key.status());
  }
  if (absl::Status st = sink->Wait(); !st.ok()) return Fail(cmd, st);
  if (print_ids) {
    nlohmann::ordered_json j;
    j["prompt_ids"] = *prompt_ids;
    j["generated_ids"] = sink->ids();
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("\n");
  }
  return 0;
}

}  // namespace llm::cli
