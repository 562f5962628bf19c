// llm-bench tokenizer: our encode throughput and Hugging Face tokenizers' on the same corpus,
// both single-threaded, measured in the same run; the ratio is the figure to quote.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "tools/bench/bench_util.h"
#include "tools/bench/commands.h"
#include "worker/frontend/tokenizer.h"

namespace llm::bench {
namespace {

using nlohmann::json;

struct Throughput {
  double bytes_per_second = 0;       // warm: repeated passes over the corpus
  double cold_bytes_per_second = 0;  // first pass of a freshly loaded tokenizer
  double tokens_per_second = 0;
  size_t tokens_per_pass = 0;
};

using Clock = std::chrono::steady_clock;

absl::StatusOr<Throughput> TimeOurs(const std::string& dir, const std::vector<std::string>& texts,
                                    double seconds) {
  // Cold: median over three fresh loads of the first pass.
  std::vector<double> cold;
  std::unique_ptr<frontend::Tokenizer> loaded;
  for (int i = 0; i < 3; ++i) {
    LLM_ASSIGN_OR_RETURN(loaded, frontend::Tokenizer::Load(dir));
    const auto start = Clock::now();
    for (const auto& t : texts) (void)loaded->Encode(t, false);
    cold.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(cold.begin(), cold.end());
  const frontend::Tokenizer& tok = *loaded;
  size_t bytes = 0, tokens = 0;
  for (const auto& t : texts) {
    auto ids = tok.Encode(t, false);
    if (!ids.ok()) return ids.status();
    bytes += t.size();
    tokens += ids->size();
  }
  const auto start = Clock::now();
  size_t passes = 0;
  double elapsed = 0;
  do {
    for (const auto& t : texts) (void)tok.Encode(t, false);
    ++passes;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (elapsed < seconds);
  return Throughput{bytes * passes / elapsed, bytes / cold[1], tokens * passes / elapsed, tokens};
}

absl::StatusOr<Throughput> TimeHf(const std::string& python, const std::string& script,
                                  const std::string& tokenizer, const std::string& corpus,
                                  double seconds) {
  const std::string cmd =
      absl::StrCat("RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false '", python, "' '", script,
                   "' --tokenizer '", tokenizer, "' --corpus '", corpus, "' --seconds ", seconds);
  LLM_ASSIGN_OR_RETURN(std::string out, RunShell(cmd));
  json j = json::parse(out, nullptr, false);
  if (j.is_discarded() || !j.contains("bytes_per_second")) {
    return absl::InternalError("Hugging Face benchmark printed: " + out);
  }
  return Throughput{j["bytes_per_second"].get<double>(), j["cold_bytes_per_second"].get<double>(),
                    j["tokens_per_second"].get<double>(), j["tokens_per_pass"].get<size_t>()};
}

}  // namespace

int RunTokenizerBench(const std::vector<std::string>& args) {
  FlagSet flags;
  flags.Value("tokenizer", "tokenizer directory (repeatable; default: the shared ones)")
      .Value("corpus", "JSON lines {\"text\": ...}",
             SourcePath("tests/data/tokenizer_corpus.jsonl"))
      .Value("python", "Python with Hugging Face tokenizers", SourcePath(".venv/bin/python"))
      .Value("seconds", "measuring time per side and tokenizer", "2");
  if (int rc = ParseOrExit("llm-bench tokenizer", flags, args); rc >= 0) return rc;
  std::vector<std::string> dirs = flags.GetAll("tokenizer");
  if (dirs.empty()) {
    for (const char* d : {"tokenizers/qwen3", "tokenizers/llama3", "tokenizers/mistral",
                          "models/tinystories-656k"}) {
      dirs.push_back(SharedPath(d));
    }
  }
  auto seconds = flags.GetDouble("seconds");
  if (!seconds.ok()) return Fail("llm-bench tokenizer", seconds.status());
  const std::string corpus = flags.GetString("corpus");
  std::vector<std::string> texts;
  {
    std::ifstream f(corpus);
    if (!f) return Fail("llm-bench tokenizer", absl::NotFoundError(corpus + ": cannot open"));
    for (std::string line; std::getline(f, line);) {
      if (line.empty()) continue;
      json j = json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.contains("text")) {
        return Fail("llm-bench tokenizer", absl::InvalidArgumentError(corpus + ": bad line"));
      }
      texts.push_back(j["text"].get<std::string>());
    }
  }
  size_t corpus_bytes = 0;
  for (const auto& t : texts) corpus_bytes += t.size();
  json results = json::array();
  for (const std::string& dir : dirs) {
    auto ours = TimeOurs(dir, texts, *seconds);
    if (!ours.ok()) return Fail("llm-bench tokenizer", ours.status());
    auto hf = TimeHf(flags.GetString("python"), SourcePath("tools/bench/hf_tokenizer_bench.py"),
                     dir, corpus, *seconds);
    if (!hf.ok()) return Fail("llm-bench tokenizer", hf.status());
    results.push_back(
        {{"tokenizer", dir},
         {"ours_mb_per_s", ours->bytes_per_second / 1e6},
         {"hf_mb_per_s", hf->bytes_per_second / 1e6},
         {"ours_tokens_per_s", ours->tokens_per_second},
         {"hf_tokens_per_s", hf->tokens_per_second},
         {"ratio_ours_over_hf", ours->bytes_per_second / hf->bytes_per_second},
         {"cold_ours_mb_per_s", ours->cold_bytes_per_second / 1e6},
         {"cold_hf_mb_per_s", hf->cold_bytes_per_second / 1e6},
         {"cold_ratio_ours_over_hf", ours->cold_bytes_per_second / hf->cold_bytes_per_second},
         {"same_token_count", ours->tokens_per_pass == hf->tokens_per_pass}});
  }
  json out = {{"benchmark", "tokenizer"},     {"corpus", corpus}, {"corpus_lines", texts.size()},
              {"corpus_bytes", corpus_bytes}, {"threads", 1},     {"results", results}};
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace llm::bench
