// The build's identity, for --version and the llm_build_info metric: the project's version
// (CMakeLists.txt) and the git commit the build was configured from ("unknown" outside a git
// checkout, as in a source tarball).
#ifndef LLM_COMMON_VERSION_H_
#define LLM_COMMON_VERSION_H_

#include <string>
#include <string_view>

namespace llm {

std::string_view Version();
std::string_view GitCommit();
// "llm-worker 0.1.0 (git 0123456789ab)".
std::string VersionLine(std::string_view program);

}  // namespace llm

#endif  // LLM_COMMON_VERSION_H_
