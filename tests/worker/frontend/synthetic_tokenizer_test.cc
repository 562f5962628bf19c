#include "worker/frontend/synthetic_tokenizer.h"

#include <chrono>

#include "gtest/gtest.h"

namespace llm::frontend {
namespace {

// Real shapes' vocabularies: the tokenizer has exactly the model's size, BOS and EOS special,
// and round-trips text (random:llama-3-8b starts with one of these).
TEST(SyntheticTokenizerTest, ExactVocabularyOfRealShapes) {
  struct Case {
    int32_t vocab, bos;
    std::vector<int32_t> eos;
  };
  for (const Case& c :
       {Case{512, 1, {2}}, Case{32768, 1, {2}}, Case{128256, 128000, {128001, 128008, 128009}}}) {
    const auto start = std::chrono::steady_clock::now();
    auto tok = SyntheticTokenizer(c.vocab, c.bos, c.eos);
    ASSERT_TRUE(tok.ok()) << tok.status();
    EXPECT_EQ((*tok)->vocab_size(), c.vocab);
    EXPECT_EQ((*tok)->bos_id(), c.bos);
    const std::string text = "Once upon a time, 42 dragons said: \"héllo wörld\" 🙂\n  end";
    const auto ids = (*tok)->Encode(text, true);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(ids->front(), c.bos);
    for (int32_t id : *ids) EXPECT_LT(id, c.vocab);
    EXPECT_EQ(*(*tok)->Decode(*ids, true), text);
    std::printf("vocab %d built in %.0f ms\n", c.vocab,
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                    .count());
  }
}

}  // namespace
}  // namespace llm::frontend
