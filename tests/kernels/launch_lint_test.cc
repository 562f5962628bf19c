// Programmatic dependent launch (kernels/launch.cuh) is only as safe as its least careful
// kernel: one that reads an earlier kernel's output before WaitForPriorGrids races with it. This
// reads the kernels' sources and holds every kernel to the rule: each __global__ function's first
// statement is WaitForPriorGrids (or AfterPriorGrids) — so it is not inside a branch either —
// unless a "PDL: before the wait" comment opens a reviewed section that reads nothing an earlier
// kernel wrote (the GEMV's weight prefetch); and nothing in kernels/ launches with <<<...>>> or
// cudaLaunchKernel directly (so nothing bypasses Launch).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace llm::kernels {
namespace {

std::string Read(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The body of the function whose signature starts at `from`: from its first '{' to the
// matching '}'.
std::string BodyAt(const std::string& text, size_t from) {
  const size_t open = text.find('{', from);
  if (open == std::string::npos) return "";
  int depth = 0;
  for (size_t i = open; i < text.size(); ++i) {
    if (text[i] == '{') ++depth;
    if (text[i] == '}' && --depth == 0) return text.substr(open, i - open + 1);
  }
  return "";
}

TEST(LaunchLintTest, EveryKernelWaitsForPriorGridsAndLaunchesThroughLaunch) {
  const std::filesystem::path dir = std::filesystem::path(LLM_SOURCE_DIR) / "kernels";
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  int kernels = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    const std::string ext = entry.path().extension().string();
    if (ext != ".cu" && ext != ".cuh") continue;
    const std::string text = Read(entry.path());
    const std::string name = entry.path().filename().string();
    EXPECT_EQ(text.find("<<<"), std::string::npos) << name << " launches with <<<>>>, not Launch";
    if (name != "launch.cuh") {
      EXPECT_EQ(text.find("cudaLaunchKernel"), std::string::npos) << name << " bypasses Launch";
    }
    for (size_t at = text.find("__global__"); at != std::string::npos;
         at = text.find("__global__", at + 1)) {
      const std::string body = BodyAt(text, at);
      const size_t line_end = text.find('\n', at);
      const std::string signature = text.substr(at, line_end - at);
      ++kernels;
      const size_t wait =
          std::min(body.find("WaitForPriorGrids()"), body.find("AfterPriorGrids()"));
      ASSERT_NE(wait, std::string::npos) << name << ": " << signature;
      const size_t first_statement_end = body.find(';');
      const size_t marker = body.find("PDL: before the wait");
      EXPECT_TRUE(wait < first_statement_end || marker < wait)
          << name << ": " << signature << " does something before waiting for the prior grids";
    }
  }
  EXPECT_GE(kernels, 17) << "fewer kernels than kernels/ has: is the scan broken?";
}

}  // namespace
}  // namespace llm::kernels
