#include "common/version.h"

#ifndef LLM_VERSION
#define LLM_VERSION "unknown"
#endif
#ifndef LLM_GIT_COMMIT
#define LLM_GIT_COMMIT "unknown"
#endif

namespace llm {

std::string_view Version() { return LLM_VERSION; }
std::string_view GitCommit() { return LLM_GIT_COMMIT; }

std::string VersionLine(std::string_view program) {
  std::string line(program);
  line.append(" ").append(Version()).append(" (git ").append(GitCommit()).append(")");
  return line;
}

}  // namespace llm
