#include "tools/bench/bench_util.h"

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace llm::bench {

std::string SourcePath(const std::string& relative) {
  return (std::filesystem::path(LLM_SOURCE_DIR) / relative).string();
}

std::string SharedPath(const std::string& relative) {
  return (std::filesystem::path(LLM_SHARED_DIR) / relative).lexically_normal().string();
}

absl::StatusOr<std::string> RunShell(const std::string& command) {
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return absl::InternalError("cannot run: " + command);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), pipe)) > 0;) out.append(buf, n);
  const int status = ::pclose(pipe);
  if (status != 0) {
    return absl::InternalError(absl::StrCat("command failed (status ", status, "): ", command));
  }
  return out;
}

}  // namespace llm::bench
