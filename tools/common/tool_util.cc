#include "tools/common/tool_util.h"

#include <cstdio>
#include <random>

#include "common/status_macros.h"

namespace llm::tools {

int ParseOrExit(const std::string& command, FlagSet& flags, const std::vector<std::string>& args) {
  flags.Bool("help", "show this help");
  if (absl::Status st = flags.Parse(args); !st.ok()) {
    std::fprintf(stderr, "%s: %s\nflags:\n%s", command.c_str(), std::string(st.message()).c_str(),
                 flags.Help().c_str());
    return 2;
  }
  if (flags.GetBool("help")) {
    std::printf("%s flags:\n%s", command.c_str(), flags.Help().c_str());
    return 0;
  }
  return -1;
}

void AddSamplingFlags(FlagSet& flags) {
  flags.Value("temperature", "softmax temperature; 0 = greedy", "1.0")
      .Value("top-k", "keep the k most likely tokens; 0 = all", "0")
      .Value("top-p", "nucleus sampling mass, in (0, 1]", "1.0")
      .Value("min-p", "drop tokens below min-p x the top probability", "0")
      .Value("repetition-penalty", "penalty for tokens in the prompt or output", "1.0")
      .Value("presence-penalty", "penalty for tokens in the output", "0")
      .Value("frequency-penalty", "penalty per occurrence in the output", "0")
      .Value("seed", "random seed (default: random)");
}

absl::StatusOr<sampling::SamplingParams> ReadSamplingFlags(const FlagSet& flags) {
  sampling::SamplingParams p;
  LLM_ASSIGN_OR_RETURN(double temperature, flags.GetDouble("temperature"));
  LLM_ASSIGN_OR_RETURN(int64_t top_k, flags.GetInt("top-k"));
  LLM_ASSIGN_OR_RETURN(double top_p, flags.GetDouble("top-p"));
  LLM_ASSIGN_OR_RETURN(double min_p, flags.GetDouble("min-p"));
  LLM_ASSIGN_OR_RETURN(double rep, flags.GetDouble("repetition-penalty"));
  LLM_ASSIGN_OR_RETURN(double presence, flags.GetDouble("presence-penalty"));
  LLM_ASSIGN_OR_RETURN(double frequency, flags.GetDouble("frequency-penalty"));
  if (top_k < 0 || top_k > INT32_MAX) return absl::InvalidArgumentError("--top-k: out of range");
  p.temperature = static_cast<float>(temperature);
  p.top_k = static_cast<int32_t>(top_k);
  p.top_p = static_cast<float>(top_p);
  p.min_p = static_cast<float>(min_p);
  p.repetition_penalty = static_cast<float>(rep);
  p.presence_penalty = static_cast<float>(presence);
  p.frequency_penalty = static_cast<float>(frequency);
  if (flags.Has("seed")) {
    LLM_ASSIGN_OR_RETURN(int64_t seed, flags.GetInt("seed"));
    p.seed = static_cast<uint64_t>(seed);
  } else {
    std::random_device rd;
    p.seed = (static_cast<uint64_t>(rd()) << 32) | rd();
  }
  return p;
}

int Fail(const std::string& command, const absl::Status& status) {
  std::fprintf(stderr, "%s: %s\n", command.c_str(), std::string(status.message()).c_str());
  return 1;
}

}  // namespace llm::tools
