// llm-bench subcommands. Each prints one JSON document on stdout and returns the exit code.
#ifndef LLM_TOOLS_BENCH_COMMANDS_H_
#define LLM_TOOLS_BENCH_COMMANDS_H_

#include <string>
#include <vector>

namespace llm::bench {

int RunTokenizerBench(const std::vector<std::string>& args);
int RunGenerateBench(const std::vector<std::string>& args);
int RunEngineBench(const std::vector<std::string>& args);
int RunServeBench(const std::vector<std::string>& args);
int RunGpuBench(const std::vector<std::string>& args);
int RunPrefillBench(const std::vector<std::string>& args);
int RunRouterBench(const std::vector<std::string>& args);
int RunAttentionBench(const std::vector<std::string>& args);
int RunAccuracyBench(const std::vector<std::string>& args);
int RunSpeculativeBench(const std::vector<std::string>& args);
int RunStructuredBench(const std::vector<std::string>& args);
int RunKvBench(const std::vector<std::string>& args);

}  // namespace llm::bench

#endif  // LLM_TOOLS_BENCH_COMMANDS_H_
