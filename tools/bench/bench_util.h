// Shared plumbing of the llm-bench benchmarks.
#ifndef LLM_TOOLS_BENCH_BENCH_UTIL_H_
#define LLM_TOOLS_BENCH_BENCH_UTIL_H_

#include <string>

#include "absl/status/statusor.h"
#include "tools/common/tool_util.h"

namespace llm::bench {

using tools::Fail;
using tools::ParseOrExit;
using FlagSet = ::llm::FlagSet;

// Paths in the source tree and in the shared test data (defaults of the benchmarks' flags).
std::string SourcePath(const std::string& relative);
std::string SharedPath(const std::string& relative);

// Runs a shell command and returns its standard output; an error when it exits non-zero.
absl::StatusOr<std::string> RunShell(const std::string& command);

}  // namespace llm::bench

#endif  // LLM_TOOLS_BENCH_BENCH_UTIL_H_
