// llm-cli quantize writes FP8 checkpoints the worker loads (each format, from a checkpoint
// directory and from a random shape), and llm-bench accuracy measures one against its original.
#include <filesystem>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/test_util.h"
#include "worker/model/quant_scheme.h"

namespace llm {
namespace {

using llm::testing::BinPath;
using llm::testing::RunCommand;

TEST(QuantizeTest, EachFormatLoadsAndGenerates) {
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  const std::string model = llm::testing::SharedPath("models/tinystories-656k");
  for (const char* kind : {"channel", "tensor", "block"}) {
    const std::string out = llm::testing::MakeTempDir(kind);
    const auto r =
        RunCommand({BinPath("llm-cli"), "quantize", "--fp8", kind, "--model", model, "--out", out});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(std::filesystem::exists(out + "/tokenizer.json")) << kind;
    auto scheme = model::LoadQuantScheme(out);
    ASSERT_TRUE(scheme.ok()) << scheme.status();
    EXPECT_EQ(model::WeightScalingName(scheme->weights), std::string(kind));
    const auto g = RunCommand({BinPath("llm-cli"), "generate", "--model", out, "--prompt",
                               "Once upon a time", "--max-tokens", "8", "--temperature", "0"});
    ASSERT_EQ(g.exit_code, 0) << kind << ": " << g.err;
    EXPECT_EQ(g.out.rfind("Once upon a time", 0), 0u) << g.out;
    // Running it again over the copied (read-only in ../shared) files works.
    EXPECT_EQ(
        RunCommand({BinPath("llm-cli"), "quantize", "--fp8", kind, "--model", model, "--out", out})
            .exit_code,
        0);
  }
}

TEST(QuantizeTest, RandomShapesAndBadArguments) {
  const std::string out = llm::testing::MakeTempDir("random");
  const auto r = RunCommand(
      {BinPath("llm-cli"), "quantize", "--fp8", "block", "--model", "random:tiny:3", "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(out + "/tokenizer.json"));
  const auto bad = RunCommand({BinPath("llm-cli"), "quantize", "--fp8", "int4", "--model",
                               "random:tiny", "--out", llm::testing::MakeTempDir("bad")});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--fp8"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("int4"), std::string::npos) << bad.err;
  const auto again = RunCommand({BinPath("llm-cli"), "quantize", "--fp8", "channel", "--model", out,
                                 "--out", llm::testing::MakeTempDir("again")});
  EXPECT_NE(again.exit_code, 0);
  EXPECT_NE(again.err.find("F8_E4M3"), std::string::npos) << again.err;
}

// The bench's figures are the bench's (docs/cuda-measurements.md); here it runs, measures the
// same thing whether the checkpoint was written per channel or quantised at load, and a model
// measured against itself agrees everywhere.
TEST(QuantizeTest, AccuracyBenchReportsAgreementAndPerplexity) {
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  const std::string model = llm::testing::SharedPath("models/tinystories-656k");
  const std::string out = llm::testing::MakeTempDir("acc");
  ASSERT_EQ(RunCommand({BinPath("llm-cli"), "quantize", "--fp8", "channel", "--model", model,
                        "--out", out})
                .exit_code,
            0);
  const auto file =
      RunCommand({BinPath("llm-bench"), "accuracy", "--model", out, "--reference", model});
  ASSERT_EQ(file.exit_code, 0) << file.err;
  const auto j = nlohmann::json::parse(file.out);
  EXPECT_EQ(j["benchmark"], "accuracy");
  EXPECT_GT(j["sets"]["golden"]["positions"].get<int>(), 0);
  EXPECT_GT(j["sets"]["heldout"]["positions"].get<int>(), 100);
  const double agreement = j["all"]["top1_agreement"];
  EXPECT_GT(agreement, 0.5);
  EXPECT_LT(agreement, 1.0);  // FP8 is not the original
  const auto online = RunCommand({BinPath("llm-bench"), "accuracy", "--model", model,
                                  "--quantization", "fp8", "--reference", model});
  ASSERT_EQ(online.exit_code, 0) << online.err;
  EXPECT_EQ(nlohmann::json::parse(online.out)["all"], j["all"]);
  const auto self =
      RunCommand({BinPath("llm-bench"), "accuracy", "--model", model, "--reference", model});
  ASSERT_EQ(self.exit_code, 0) << self.err;
  const auto s = nlohmann::json::parse(self.out)["all"];
  EXPECT_EQ(s["top1_agreement"], 1.0);
  EXPECT_EQ(s["perplexity_change"], 0.0);
}

}  // namespace
}  // namespace llm
