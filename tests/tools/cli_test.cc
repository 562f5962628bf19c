// End-to-end tests of the llm-cli binary.
#include <fstream>

#include "common/version.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/test_util.h"

namespace llm {
namespace {

using llm::testing::BinPath;
using llm::testing::RunCommand;
using llm::testing::SharedPath;
using ::testing::HasSubstr;
using ::testing::StartsWith;

nlohmann::json Golden() {
  std::ifstream f(SharedPath("golden/tinystories-656k.jsonl"));
  std::string line;
  std::getline(f, line);
  return nlohmann::json::parse(line);
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LLM_REQUIRE_SHARED("models/tinystories-656k");
    LLM_REQUIRE_SHARED("models/tinystories-656k-f32");
    LLM_REQUIRE_SHARED("golden/tinystories-656k.jsonl");
  }
  std::vector<std::string> Generate(const std::string& model, std::vector<std::string> extra) {
    std::vector<std::string> argv{BinPath("llm-cli"), "generate", "--model",
                                  SharedPath(model),  "--prompt", "Once upon a time"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }
};

TEST_F(CliTest, GenerateIdsReproducesGoldenForBothCheckpoints) {
  const auto g = Golden();
  for (const char* model : {"models/tinystories-656k", "models/tinystories-656k-f32"}) {
    const auto r =
        RunCommand(Generate(model, {"--max-tokens", "59", "--temperature", "0", "--ids"}));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto out = nlohmann::json::parse(r.out);
    EXPECT_EQ(out["prompt_ids"], g["prompt_ids"]) << model;
    EXPECT_EQ(out["generated_ids"], g["generated_ids"]) << model;
    EXPECT_THAT(r.out, StartsWith("{\"prompt_ids\":"));
  }
}

TEST_F(CliTest, GenerateTextIsTheGoldenText) {
  const auto r =
      RunCommand(Generate("models/tinystories-656k", {"--max-tokens", "59", "--temperature", "0"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, Golden()["text"].get<std::string>() + "\n");
}

TEST_F(CliTest, StopStringEndsTheCompletionBeforeIt) {
  const auto r = RunCommand(Generate(
      "models/tinystories-656k", {"--max-tokens", "59", "--temperature", "0", "--stop", " named"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "Once upon a time, a little girl\n");
}

TEST_F(CliTest, SeededSamplingIsRepeatable) {
  const auto args =
      std::vector<std::string>{"--max-tokens", "30",  "--temperature", "0.8", "--top-k", "40",
                               "--top-p",      "0.9", "--seed",        "7",   "--ids"};
  const auto a = RunCommand(Generate("models/tinystories-656k", args));
  const auto b = RunCommand(Generate("models/tinystories-656k", args));
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
}

TEST_F(CliTest, BadFlagsFailWithAMessageNamingThem) {
  auto r = RunCommand({BinPath("llm-cli"), "generate", "--prompt", "x"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--model"));
  r = RunCommand(Generate("models/tinystories-656k", {"--max-tokens", "1000"}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("max_tokens"));
  r = RunCommand(Generate("models/tinystories-656k", {"--max-context", "513"}));  // model: 512
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--max-context: 513 is more than the model's 512 positions"));
  r = RunCommand(Generate("models/tinystories-656k", {"--temperature", "-1"}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("sampling.temperature"));
  r = RunCommand(Generate("models/tinystories-656k", {"--top-p", "abc"}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--top-p"));
  r = RunCommand({BinPath("llm-cli"), "generate", "--model", "/no/such/model", "--prompt", "x"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("/no/such/model"));
  r = RunCommand({BinPath("llm-cli"), "frobnicate"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("frobnicate"));
}

TEST_F(CliTest, TokenizeAndDetokenizeLines) {
  const std::string tok = SharedPath("models/tinystories-656k");
  auto r =
      RunCommand({BinPath("llm-cli"), "tokenize", "--tokenizer", tok, "--add-special"},
                 "{\"text\": \"Once upon a time\"}\nnot json\n{\"text\": 5}\n{\"text\": \"\"}\n");
  EXPECT_EQ(r.exit_code, 1);  // some lines failed
  std::vector<std::string> lines;
  std::stringstream ss(r.out);
  for (std::string l; std::getline(ss, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 4u) << r.out;
  EXPECT_EQ(lines[0], "{\"ids\":[1,80,147,201,282,57]}");
  EXPECT_THAT(lines[1], HasSubstr("line 2"));
  EXPECT_THAT(lines[2], HasSubstr("line 3: text"));
  EXPECT_EQ(lines[3], "{\"ids\":[1]}");

  r = RunCommand({BinPath("llm-cli"), "detokenize", "--tokenizer", tok},
                 "{\"ids\": [1,80,147,201,282,57]}\n{\"ids\": [99999]}\n");
  ASSERT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.out, StartsWith("{\"text\":\"Once upon a time\"}\n"));
  EXPECT_THAT(r.out, HasSubstr("99999"));
  r = RunCommand({BinPath("llm-cli"), "detokenize", "--tokenizer", tok, "--keep-special"},
                 "{\"ids\": [1,80,147]}\n");
  EXPECT_EQ(r.out, "{\"text\":\"<|start_story|> On\"}\n");
}

}  // namespace
}  // namespace llm

namespace llm {
namespace {

// Every binary says which build it is.
TEST(VersionTest, EveryBinaryHasVersion) {
  for (const char* name : {"llm-worker", "llm-router", "llm-cli", "llm-bench"}) {
    const auto r = llm::testing::RunCommand({llm::testing::BinPath(name), "--version"});
    EXPECT_EQ(r.exit_code, 0) << name << ": " << r.err;
    EXPECT_EQ(r.out.rfind(std::string(name) + " " + std::string(Version()) + " (git ", 0), 0u)
        << name << ": " << r.out;
  }
}

}  // namespace
}  // namespace llm
