// Shared plumbing of the llm-bench benchmarks.
#ifndef LLM_TOOLS_BENCH_BENCH_UTIL_H_
#define LLM_TOOLS_BENCH_BENCH_UTIL_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/common/tool_util.h"

namespace llm::bench {

using tools::Fail;
using tools::ParseOrExit;
using tools::ParseSettings;
using FlagSet = ::llm::FlagSet;

// Paths in the source tree and in the shared test data (defaults of the benchmarks' flags).
std::string SourcePath(const std::string& relative);
std::string SharedPath(const std::string& relative);

// The positive integers of a comma-separated list (other items are dropped).
std::vector<int32_t> ParsePositiveInts(const std::string& list);

// Runs a shell command and returns its standard output; an error when it exits non-zero.
absl::StatusOr<std::string> RunShell(const std::string& command);

// The folder holding this executable (to find llm-router, llm-worker beside llm-bench).
std::string SelfDir();

// A TCP port on 127.0.0.1 that was free a moment ago.
absl::StatusOr<int> FreePort();

// CPU time (user + system) a process and its live children have used so far, in seconds; -1
// when unknown.
double ProcessCpuSeconds(pid_t pid);

// A child process with its output in `log_path`; SIGKILLed when destroyed.
class Subprocess {
 public:
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(const std::vector<std::string>& argv,
                                                           const std::string& log_path);
  ~Subprocess();
  pid_t pid() const { return pid_; }
  bool running();

 private:
  pid_t pid_ = -1;
};

}  // namespace llm::bench

#endif  // LLM_TOOLS_BENCH_BENCH_UTIL_H_
