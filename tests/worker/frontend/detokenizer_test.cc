#include "worker/frontend/detokenizer.h"

#include <fstream>
#include <random>

#include "common/utf8.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/test_util.h"

namespace llm::frontend {
namespace {

std::vector<std::string> Corpus() {
  std::ifstream f(llm::testing::SourcePath("tests/data/tokenizer_corpus.jsonl"));
  std::vector<std::string> texts;
  std::string line;
  while (std::getline(f, line)) {
    if (!line.empty()) texts.push_back(nlohmann::json::parse(line)["text"].get<std::string>());
  }
  return texts;
}

class DetokenizerTest : public ::testing::TestWithParam<std::string> {};

// Streaming the tokens of a text gives, delta by delta, valid UTF-8 whose concatenation is the
// text a full decode of prompt + output adds after the prompt.
TEST_P(DetokenizerTest, DeltasConcatenateToTheFullDecode) {
  LLM_REQUIRE_SHARED(GetParam());
  auto tok = Tokenizer::Load(llm::testing::SharedPath(GetParam()));
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::vector<std::string> corpus = Corpus();
  ASSERT_GT(corpus.size(), 50u);
  const std::vector<int32_t> prompt = *(*tok)->Encode("Story:", true);
  const std::string prompt_text = *(*tok)->Decode(prompt, true);
  for (const std::string& text : corpus) {
    const std::vector<int32_t> output = *(*tok)->Encode(text, false);
    IncrementalDetokenizer detok(**tok, prompt, /*skip_special_tokens=*/true);
    std::string streamed;
    for (int32_t id : output) {
      const std::string delta = detok.Add(id);
      ASSERT_TRUE(IsValidUtf8(delta)) << "broken UTF-8 delta for " << text;
      streamed += delta;
    }
    streamed += detok.Flush();
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), output.begin(), output.end());
    const std::string full = *(*tok)->Decode(all, true);
    ASSERT_EQ(full.compare(0, prompt_text.size(), prompt_text), 0);
    EXPECT_EQ(streamed, full.substr(prompt_text.size())) << "text: " << text;
  }
}

// A logprob entry's bytes (BytesOf, before Add): token by token they join into exactly the
// bytes the output adds after the prompt (so a character split over tokens is each token's own
// bytes, never U+FFFD's), and a word's token keeps its leading space (decoded alone, a
// sentencepiece token loses it).
TEST_P(DetokenizerTest, LogprobBytesJoinIntoTheOutput) {
  LLM_REQUIRE_SHARED(GetParam());
  auto tok = Tokenizer::Load(llm::testing::SharedPath(GetParam()));
  ASSERT_TRUE(tok.ok()) << tok.status();
  const std::vector<int32_t> prompt = *(*tok)->Encode("Story:", true);
  const std::string prompt_bytes = *(*tok)->DecodeBytes(prompt, false);
  int split_characters = 0, spaced_words = 0;
  for (const std::string& text : Corpus()) {
    const std::vector<int32_t> output = *(*tok)->Encode(" " + text, false);
    IncrementalDetokenizer detok(**tok, prompt, /*skip_special_tokens=*/false);
    std::string joined;
    for (int32_t id : output) {
      const int32_t one[1] = {id};
      const std::string bytes = detok.BytesOf(one)[0];
      split_characters += IsValidUtf8(bytes) ? 0 : 1;
      const int32_t alone[1] = {id};
      const std::string text_alone = *(*tok)->Decode(alone, false);
      spaced_words += bytes.size() > 1 && bytes[0] == ' ' && text_alone[0] != ' ' ? 1 : 0;
      joined += bytes;
      detok.Add(id);
    }
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), output.begin(), output.end());
    const std::string full = *(*tok)->DecodeBytes(all, false);
    ASSERT_EQ(full.compare(0, prompt_bytes.size(), prompt_bytes), 0);
    EXPECT_EQ(joined, full.substr(prompt_bytes.size())) << "text: " << text;
    EXPECT_EQ(Utf8Lossy(joined), (*(*tok)->Decode(all, false)).substr(prompt_bytes.size()));
  }
  // The corpus has characters split over tokens (CJK, emoji) for the real tokenizers (the
  // TinyStories one has no byte tokens), and the sentencepiece ones strip a lone token's space.
  if (GetParam() != "models/tinystories-656k") {
    EXPECT_GT(split_characters, 0);
  }
  if (GetParam() == "tokenizers/mistral" || GetParam() == "models/tinystories-656k") {
    EXPECT_GT(spaced_words, 0);
  }
  RecordProperty("split_characters", split_characters);
  RecordProperty("spaced_words", spaced_words);
}

// Arbitrary id sequences (partial characters, specials, byte-fallback runs) never produce a
// broken UTF-8 delta.
TEST_P(DetokenizerTest, RandomIdsGiveValidUtf8) {
  LLM_REQUIRE_SHARED(GetParam());
  auto tok = Tokenizer::Load(llm::testing::SharedPath(GetParam()));
  ASSERT_TRUE(tok.ok());
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> id(0, (*tok)->vocab_size() - 1);
  for (int seq = 0; seq < 200; ++seq) {
    IncrementalDetokenizer detok(**tok, {}, seq % 2 == 0);
    for (int i = 0; i < 30; ++i) ASSERT_TRUE(IsValidUtf8(detok.Add(id(rng))));
    ASSERT_TRUE(IsValidUtf8(detok.Flush()));
  }
}

TEST(DetokenizerSplitCharTest, HoldsPartialCharactersBack) {
  LLM_REQUIRE_SHARED("tokenizers/llama3");
  auto tok = Tokenizer::Load(llm::testing::SharedPath("tokenizers/llama3"));
  ASSERT_TRUE(tok.ok());
  // " 🤗" is three tokens in Llama 3: "ĠðŁ" "¤" "Ĺ"; the first two hold partial bytes.
  IncrementalDetokenizer detok(**tok, {}, true);
  EXPECT_EQ(detok.Add(11410), "");
  EXPECT_EQ(detok.Add(97), "");
  EXPECT_EQ(detok.Add(245), " 🤗");
}

INSTANTIATE_TEST_SUITE_P(AllTokenizers, DetokenizerTest,
                         ::testing::Values("tokenizers/qwen3", "tokenizers/llama3",
                                           "tokenizers/mistral", "models/tinystories-656k"),
                         [](const auto& info) {
                           std::string n = info.param.substr(info.param.find('/') + 1);
                           for (char& c : n) {
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return n;
                         });

}  // namespace
}  // namespace llm::frontend
