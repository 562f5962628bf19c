// llm-bench: benchmarks that print JSON.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/version.h"
#include "tools/bench/commands.h"

namespace {

constexpr char kUsage[] =
    "usage: llm-bench BENCHMARK [flags]   (each prints one JSON document)\n"
    "  tokenizer  encode throughput beside Hugging Face tokenizers on the same corpus\n"
    "  generate   CPU generation: prefill time and decode tokens/s for one sequence\n"
    "  engine     host time per engine step at 1..N running slots (runner returns at once)\n"
    "  serve      load a worker or router over gRPC: throughput, TTFT, TPOT (JSON)\n"
    "  router     llm-router vs nginx grpc_pass: added latency and relay messages per core\n"
    "  gpu        CUDA backend: bandwidth, batch-1 decode, throughput, busy ratio, step gap, "
    "TTFT,\n"
    "             the decode stall during a long prefill\n"
    "  prefill    any backend: TTFT and the decode stall per prompt-chunk size\n"
    "  attention  CUDA: the decode attention kernels alone, time and K/V bandwidth per shape;\n"
    "             --prefill: the prefill attention kernel, time and TFLOP/s per prompt length\n"
    "  accuracy   a model (FP8) against a reference: top-1 agreement, perplexity, logit cosine\n"
    "  speculative  speculative decoding on and off, side by side: tokens/s, acceptance\n"
    "  structured  structured output: compile and mask times per schema and tokenizer, tokens/s\n"
    "  kv         KV blocks on demand against reservations: tokens/s when answers end early\n"
    "Run `llm-bench BENCHMARK --help` for its flags.\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "--version") == 0) {
    std::printf("%s\n", llm::VersionLine("llm-bench").c_str());
    return 0;
  }
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string name = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  if (name == "tokenizer") return llm::bench::RunTokenizerBench(args);
  if (name == "generate") return llm::bench::RunGenerateBench(args);
  if (name == "engine") return llm::bench::RunEngineBench(args);
  if (name == "serve") return llm::bench::RunServeBench(args);
  if (name == "gpu") return llm::bench::RunGpuBench(args);
  if (name == "prefill") return llm::bench::RunPrefillBench(args);
  if (name == "router") return llm::bench::RunRouterBench(args);
  if (name == "attention") return llm::bench::RunAttentionBench(args);
  if (name == "accuracy") return llm::bench::RunAccuracyBench(args);
  if (name == "speculative") return llm::bench::RunSpeculativeBench(args);
  if (name == "structured") return llm::bench::RunStructuredBench(args);
  if (name == "kv") return llm::bench::RunKvBench(args);
  std::fprintf(stderr, "llm-bench: unknown benchmark '%s'\n%s", name.c_str(), kUsage);
  return 2;
}
