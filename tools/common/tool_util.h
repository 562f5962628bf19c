// Shared plumbing of the llm-cli and llm-bench subcommands.
#ifndef LLM_TOOLS_COMMON_TOOL_UTIL_H_
#define LLM_TOOLS_COMMON_TOOL_UTIL_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/flags.h"
#include "worker/sampling/sampling_params.h"

namespace llm::tools {

// Parses args into `flags`, handling --help. Returns -1 to continue, else the exit code.
int ParseOrExit(const std::string& command, FlagSet& flags, const std::vector<std::string>& args);

// Declares the sampling flags (--temperature, --top-k, --top-p, --min-p, --seed and the
// penalties) and reads them back. Without --seed the seed is random.
void AddSamplingFlags(FlagSet& flags);
absl::StatusOr<sampling::SamplingParams> ReadSamplingFlags(const FlagSet& flags);

// Prints "COMMAND: message" to stderr and returns 1.
int Fail(const std::string& command, const absl::Status& status);

// A subcommand's settings, read once from its flags; none, with the exit code, after --help or a
// bad flag (printed as Fail prints it).
template <typename Settings>
struct ParsedSettings {
  std::optional<Settings> settings;
  int exit_code = 0;
};

// Declares the flags (`add`), parses `args` and reads the settings (`read`).
template <typename Settings>
ParsedSettings<Settings> ParseSettings(const std::string& command,
                                       const std::vector<std::string>& args, void (*add)(FlagSet&),
                                       absl::StatusOr<Settings> (*read)(const FlagSet&)) {
  FlagSet flags;
  add(flags);
  if (int rc = ParseOrExit(command, flags, args); rc >= 0) return {std::nullopt, rc};
  absl::StatusOr<Settings> settings = read(flags);
  if (!settings.ok()) return {std::nullopt, Fail(command, settings.status())};
  return {*std::move(settings), 0};
}

}  // namespace llm::tools

#endif  // LLM_TOOLS_COMMON_TOOL_UTIL_H_
