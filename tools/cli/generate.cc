// llm-cli generate: runs a Hugging Face checkpoint on the CPU and prints the completion.
#include <algorithm>
#include <cstdio>
#include <string>

#include "absl/strings/numbers.h"
#include "common/thread_pool.h"
#include "nlohmann/json.hpp"
#include "tools/cli/commands.h"
#include "tools/common/tool_util.h"
#include "worker/frontend/detokenizer.h"
#include "worker/frontend/stop_strings.h"
#include "worker/frontend/tokenizer.h"
#include "worker/runner/cpu_model.h"
#include "worker/runner/sequence_generator.h"

namespace llm::cli {

using tools::AddSamplingFlags;
using tools::Fail;
using tools::ParseOrExit;
using tools::ReadSamplingFlags;

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

  ThreadPool pool(static_cast<int>(*threads));
  const std::string dir = flags.GetString("model");
  auto model = runner::CpuModel::Load(dir, &pool);
  if (!model.ok()) return Fail(cmd, model.status());
  auto tokenizer = frontend::Tokenizer::Load(dir);
  if (!tokenizer.ok()) return Fail(cmd, tokenizer.status());

  const std::string prompt = flags.GetString("prompt");
  auto prompt_ids = (*tokenizer)->Encode(prompt, !flags.GetBool("no-special"));
  if (!prompt_ids.ok()) return Fail(cmd, prompt_ids.status());

  runner::SequenceOptions opt;
  opt.max_tokens = static_cast<int32_t>(*max_tokens);
  opt.sampling = *sampling;
  if (!flags.GetBool("ignore-eos")) opt.stop_token_ids = (*model)->config().eos_token_ids;
  for (const std::string& s : flags.GetAll("stop-id")) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(s, &id) || id < 0 || id >= (*model)->config().vocab_size) {
      return Fail(cmd, absl::InvalidArgumentError("--stop-id: '" + s + "' is not a token id"));
    }
    opt.stop_token_ids.push_back(id);
  }

  const bool print_ids = flags.GetBool("ids");
  frontend::IncrementalDetokenizer detok(**tokenizer, *prompt_ids, /*skip_special_tokens=*/true);
  frontend::StopStringMatcher stops(flags.GetAll("stop"), /*include_stop=*/false);
  const auto& eos = opt.stop_token_ids;
  if (!print_ids) {
    std::fputs(prompt.c_str(), stdout);
    std::fflush(stdout);
  }
  auto on_token = [&](int32_t id) {
    if (std::find(eos.begin(), eos.end(), id) != eos.end()) return true;  // not part of the text
    const auto r = stops.Add(detok.Add(id));
    if (!print_ids) {
      std::fputs(r.text.c_str(), stdout);
      std::fflush(stdout);
    }
    return !r.stopped;
  };
  auto result = runner::GenerateSequence(**model, *prompt_ids, opt, on_token);
  if (!result.ok()) return Fail(cmd, result.status());
  if (print_ids) {
    nlohmann::ordered_json j;
    j["prompt_ids"] = *prompt_ids;
    j["generated_ids"] = result->generated_ids;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s\n", stops.Add(detok.Flush()).text.append(stops.Flush()).c_str());
  }
  return 0;
}

}  // namespace llm::cli
