// Smoke tests: the benchmarks run and print well-formed JSON (figures are not asserted; they
// belong in benchmark runs, not in tests).
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/test_util.h"

namespace llm {
namespace {

using llm::testing::BinPath;
using llm::testing::RunCommand;

TEST(BenchTest, GenerateRunsAndPrintsJson) {
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  const auto r = RunCommand({BinPath("llm-bench"), "generate", "--max-tokens", "8", "--runs", "1",
                             "--model", llm::testing::SharedPath("models/tinystories-656k")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["benchmark"], "generate");
  EXPECT_GT(j["decode_tokens_per_s_median"].get<double>(), 0.0);
}

TEST(BenchTest, GenerateBatchedDecodeReportsEveryBatch) {
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  const auto r =
      RunCommand({BinPath("llm-bench"), "generate", "--max-tokens", "6", "--runs", "1", "--batch",
                  "1,3", "--model", llm::testing::SharedPath("models/tinystories-656k")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const auto& results = j["batched_decode"]["results"];
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[1]["batch"], 3);
  EXPECT_GT(results[1]["decode_tokens_per_s_median"].get<double>(), 0.0);
  const auto bad = RunCommand({BinPath("llm-bench"), "generate", "--batch", "0", "--model",
                               llm::testing::SharedPath("models/tinystories-656k")});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--batch"), std::string::npos) << bad.err;
}

TEST(BenchTest, KvComparesOnDemandWithReservations) {
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  const auto r = RunCommand({BinPath("llm-bench"), "kv", "--model",
                             llm::testing::SharedPath("models/tinystories-656k"), "--slots", "16",
                             "--kv-blocks", "96", "--requests", "32", "--prompt", "8", "--answer",
                             "60", "--spread", "30", "--max-tokens", "400"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["benchmark"], "kv");
  ASSERT_EQ(j["runs"].size(), 3u);
  for (const auto& run : j["runs"]) {
    EXPECT_GT(run["tokens_per_second"].get<double>(), 0.0) << run["run"];
    // Every answer's tokens arrive, whichever way its end came.
    EXPECT_EQ(run["output_tokens"], j["runs"][0]["output_tokens"]) << run["run"];
  }
  const auto bad = RunCommand({BinPath("llm-bench"), "kv", "--spread", "300", "--answer", "200"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--spread"), std::string::npos) << bad.err;
}

// Speculation on and off side by side: the same greedy ids, and under the adaptive policy its
// choice for the run's batch size (a number once every candidate was measured; 96 tokens of 4
// prompts are more decode steps than that takes).
TEST(BenchTest, SpeculativeReportsThePolicysChoicePerBatch) {
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  const auto r = RunCommand({BinPath("llm-bench"), "speculative", "--model",
                             llm::testing::SharedPath("models/tinystories-656k"), "--adaptive", "1",
                             "--rounds", "1", "--max-tokens", "48", "--workloads", "repeat"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const auto& repeat = j["repeat"];
  EXPECT_EQ(repeat["greedy_ids_identical"], true) << r.out;
  EXPECT_FALSE(repeat["off"].contains("speculation_by_batch"));
  const auto& on = repeat["on"];
  ASSERT_TRUE(on["speculation_at_concurrency"].is_number_integer()) << r.out;
  const int k = on["speculation_at_concurrency"].get<int>();
  EXPECT_TRUE(k == 0 || k == 1 || k == 2 || k == 4) << k;
  EXPECT_EQ(on["speculation_by_batch"]["1"], k) << r.out;
  const auto bad = RunCommand({BinPath("llm-bench"), "speculative", "--method", "lookahead"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("lookahead"), std::string::npos) << bad.err;
}

TEST(BenchTest, TokenizerComparesWithHuggingFace) {
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  const auto r = RunCommand({BinPath("llm-bench"), "tokenizer", "--seconds", "0.05", "--tokenizer",
                             llm::testing::SharedPath("models/tinystories-656k")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["results"].size(), 1u);
  EXPECT_TRUE(j["results"][0]["same_token_count"].get<bool>());
  EXPECT_GT(j["results"][0]["ratio_ours_over_hf"].get<double>(), 0.0);
}

}  // namespace
}  // namespace llm
