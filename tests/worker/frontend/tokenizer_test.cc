#include "worker/frontend/tokenizer.h"

#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/test_util.h"

namespace llm::frontend {
namespace {

using ::testing::HasSubstr;

TEST(TokenizerTest, GoldenPromptAndText) {
  LLM_REQUIRE_SHARED("models/tinystories-656k");
  LLM_REQUIRE_SHARED("golden/tinystories-656k.jsonl");
  auto tok = Tokenizer::Load(llm::testing::SharedPath("models/tinystories-656k"));
  ASSERT_TRUE(tok.ok()) << tok.status();
  std::ifstream golden(llm::testing::SharedPath("golden/tinystories-656k.jsonl"));
  std::string line;
  ASSERT_TRUE(std::getline(golden, line));
  const auto g = nlohmann::json::parse(line);
  auto ids = (*tok)->Encode(g["prompt"].get<std::string>(), true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, g["prompt_ids"].get<std::vector<int32_t>>());
  std::vector<int32_t> all = *ids;
  for (int32_t id : g["generated_ids"].get<std::vector<int32_t>>()) all.push_back(id);
  auto text = (*tok)->Decode(all, /*skip_special_tokens=*/true);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, g["text"].get<std::string>());
  EXPECT_EQ((*tok)->bos_id(), 1);
  EXPECT_EQ((*tok)->eos_id(), 2);
  EXPECT_TRUE((*tok)->IsSpecial(2));
}

TEST(TokenizerTest, SpecialTokensAreMatchedBeforeBpe) {
  LLM_REQUIRE_SHARED("tokenizers/qwen3");
  auto tok = Tokenizer::Load(llm::testing::SharedPath("tokenizers/qwen3"));
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto ids = (*tok)->Encode("<|im_start|>user\nhi<|im_end|>", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->front(), 151644);
  EXPECT_EQ(ids->back(), 151645);
  EXPECT_EQ((*tok)->vocab_size(), 151669);
}

TEST(TokenizerTest, ByteFallbackForUnknownCharacters) {
  LLM_REQUIRE_SHARED("tokenizers/mistral");
  auto tok = Tokenizer::Load(llm::testing::SharedPath("tokenizers/mistral"));
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto ids = (*tok)->Encode("🤗", false);
  ASSERT_TRUE(ids.ok());
  // "▁" then the four bytes F0 9F A4 97 as <0xNN> tokens.
  EXPECT_EQ(*ids, (std::vector<int32_t>{28705, 243, 162, 167, 154}));
  auto text = (*tok)->Decode(*ids, true);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "🤗");
}

TEST(TokenizerTest, RejectsInvalidUtf8AndOutOfVocabularyIds) {
  LLM_REQUIRE_SHARED("tokenizers/llama3");
  auto tok = Tokenizer::Load(llm::testing::SharedPath("tokenizers/llama3"));
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto ids = (*tok)->Encode("ok \xC3\x28", true);
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ids.status().message()), HasSubstr("UTF-8"));
  const std::vector<int32_t> bad{9906, 999999};
  auto text = (*tok)->Decode(bad, true);
  ASSERT_FALSE(text.ok());
  EXPECT_THAT(std::string(text.status().message()), HasSubstr("999999"));
}

TEST(TokenizerTest, LoadErrorsNameTheProblem) {
  auto t = Tokenizer::FromJson(R"({"model": {"type": "Unigram", "vocab": []}})", "", "x.json");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("x.json"));
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("Unigram"));
  t = Tokenizer::FromJson(
      R"({"normalizer": {"type": "Precompiled"}, "model": {"type": "BPE", "vocab": {}}})", "", "y");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("Precompiled"));
  t = Tokenizer::FromJson("{not json", "", "z.json");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("z.json"));
  t = Tokenizer::FromJson(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})", "",
                          "m.json");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("merges[0]"));
  EXPECT_FALSE(Tokenizer::Load("/nonexistent/dir").ok());
}

TEST(TokenizerTest, ConcurrentEncodesAgree) {
  LLM_REQUIRE_SHARED("tokenizers/llama3");
  auto tok = Tokenizer::Load(llm::testing::SharedPath("tokenizers/llama3"));
  ASSERT_TRUE(tok.ok());
  const std::string text = "The quick brown fox jumps over the lazy dog, again and again. ";
  const std::vector<int32_t> want = *(*tok)->Encode(text, true);
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        if (*(*tok)->Encode(text, true) != want) ++mismatches;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace llm::frontend
