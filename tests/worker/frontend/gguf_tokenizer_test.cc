#include "worker/frontend/gguf_tokenizer.h"

#include <cstdio>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/frontend/tokenizer.h"

namespace llm::frontend {
namespace {

using nlohmann::json;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int32_t kNormal = static_cast<int32_t>(GgufTokenType::kNormal);
constexpr int32_t kControl = static_cast<int32_t>(GgufTokenType::kControl);
constexpr int32_t kUserDefined = static_cast<int32_t>(GgufTokenType::kUserDefined);

// A byte-level vocabulary as llama.cpp stores it: tokens already in the byte alphabet.
GgufVocab Gpt2Vocab(const std::string& pre) {
  GgufVocab v;
  v.model = "gpt2";
  v.pre = pre;
  v.tokens = {"a",
              "b",
              "c",
              "ab",
              "\xC4\xA0" /* Ġ */,
              "\xC4\xA0"
              "ab",
              "<|end|>",
              "<think>",
              "1",
              "2",
              "12"};
  v.token_types = {kNormal,  kNormal,      kNormal, kNormal, kNormal, kNormal,
                   kControl, kUserDefined, kNormal, kNormal, kNormal};
  v.merges = {"a b", "\xC4\xA0 ab", "1 2"};
  v.eos_id = 6;
  return v;
}

// A sentencepiece vocabulary as llama.cpp stores it: <unk>, <s>, </s>, the 256 byte tokens,
// pieces with scores and no merges.
GgufVocab SpmVocab() {
  GgufVocab v;
  v.model = "llama";
  v.pre = "default";
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.token_types = {static_cast<int32_t>(GgufTokenType::kUnknown), kControl, kControl};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    v.tokens.push_back(name);
    v.token_types.push_back(static_cast<int32_t>(GgufTokenType::kByte));
  }
  v.scores.assign(v.tokens.size(), 0.0f);
  const std::pair<const char*, float> pieces[] = {{"\u2581", -5},  {"a", -6},  {"b", -7},
                                                  {"\u2581a", -1}, {"ab", -2}, {"\u2581ab", -3},
                                                  {"ba", -4}};
  for (const auto& [piece, score] : pieces) {
    v.tokens.push_back(piece);
    v.token_types.push_back(kNormal);
    v.scores.push_back(score);
  }
  v.tokens.push_back("<x>");
  v.token_types.push_back(kUserDefined);
  v.scores.push_back(0);
  v.bos_id = 1;
  v.eos_id = 2;
  v.unk_id = 0;
  v.chat_template = "{{ messages }}";
  return v;
}
// Ids of SpmVocab's pieces.
constexpr int32_t kSpace = 259, kA = 260, kB = 261, kSpaceA = 262, kAb = 263, kSpaceAb = 264,
                  kBa = 265, kX = 266;

std::unique_ptr<Tokenizer> Build(const GgufVocab& v) {
  auto files = TokenizerFilesFromGguf(v, "test.gguf");
  EXPECT_TRUE(files.ok()) << files.status();
  if (!files.ok()) return nullptr;
  auto tok = Tokenizer::FromJson(files->tokenizer.dump(), files->tokenizer_config.dump(), "t");
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? *std::move(tok) : nullptr;
}

std::vector<int32_t> Encode(const Tokenizer& tok, const std::string& text, bool add_special) {
  auto ids = tok.Encode(text, add_special);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

std::string Decode(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special) {
  auto text = tok.Decode(ids, skip_special);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "";
}

TEST(GgufTokenizerTest, ByteLevelVocabulary) {
  GgufVocab v = Gpt2Vocab("qwen2");
  v.bos_id = 6;
  auto tok = Build(v);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(Encode(*tok, "ab ab", false), (std::vector<int32_t>{3, 5}));
  // Control and user-defined tokens are matched whole; only the control one is special.
  EXPECT_EQ(Encode(*tok, "ab<|end|>c<think>", false), (std::vector<int32_t>{3, 6, 2, 7}));
  EXPECT_TRUE(tok->IsSpecial(6));
  EXPECT_FALSE(tok->IsSpecial(7));
  EXPECT_EQ(Decode(*tok, {3, 5, 6, 7}, /*skip_special=*/true), "ab ab<think>");
  EXPECT_EQ(Decode(*tok, {3, 5, 6, 7}, /*skip_special=*/false), "ab ab<|end|><think>");
  // gpt2 vocabularies add no BOS unless the file says so.
  EXPECT_EQ(Encode(*tok, "ab", true), (std::vector<int32_t>{3}));
  EXPECT_EQ(tok->eos_id(), 6);
}

TEST(GgufTokenizerTest, PreTokenizerFollowsPre) {
  // qwen2 splits digits one by one; gpt-2 keeps " 12" whole so the "1 2" merge applies.
  auto qwen2 = Build(Gpt2Vocab("qwen2"));
  auto gpt2 = Build(Gpt2Vocab("gpt-2"));
  auto smollm = Build(Gpt2Vocab("smollm"));
  auto llama3 = Build(Gpt2Vocab("llama-bpe"));
  ASSERT_TRUE(qwen2 && gpt2 && smollm && llama3);
  EXPECT_EQ(Encode(*qwen2, "a 12", false), (std::vector<int32_t>{0, 4, 8, 9}));
  EXPECT_EQ(Encode(*gpt2, "a 12", false), (std::vector<int32_t>{0, 4, 10}));
  EXPECT_EQ(Encode(*smollm, "a 12", false), (std::vector<int32_t>{0, 4, 8, 9}));
  EXPECT_EQ(Encode(*llama3, "a 12", false), (std::vector<int32_t>{0, 4, 10}));

  auto files = TokenizerFilesFromGguf(Gpt2Vocab("llama-bpe"), "x");
  ASSERT_TRUE(files.ok());
  EXPECT_TRUE(files->tokenizer["model"]["ignore_merges"].get<bool>());
  EXPECT_EQ(files->tokenizer["pre_tokenizer"]["pretokenizers"][0]["type"], "Split");
  files = TokenizerFilesFromGguf(Gpt2Vocab("smollm"), "x");
  ASSERT_TRUE(files.ok());
  EXPECT_EQ(files->tokenizer["pre_tokenizer"]["pretokenizers"][0],
            json({{"type", "Digits"}, {"individual_digits", true}}));
}

TEST(GgufTokenizerTest, ByteLevelBosAndConfig) {
  GgufVocab v = Gpt2Vocab("qwen2");
  v.bos_id = 6;
  v.add_bos = true;
  v.add_eos = true;
  v.chat_template = "{{ x }}";
  auto files = TokenizerFilesFromGguf(v, "x");
  ASSERT_TRUE(files.ok());
  const json& config = files->tokenizer_config;
  EXPECT_EQ(config["bos_token"], "<|end|>");
  EXPECT_EQ(config["eos_token"], "<|end|>");
  EXPECT_TRUE(config["unk_token"].is_null());
  EXPECT_TRUE(config["add_bos_token"].get<bool>());
  EXPECT_TRUE(config["add_eos_token"].get<bool>());
  EXPECT_EQ(config["chat_template"], "{{ x }}");
  auto tok = Build(v);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(Encode(*tok, "ab", true), (std::vector<int32_t>{6, 3, 6}));
  EXPECT_EQ(tok->bos_id(), 6);
}

TEST(GgufTokenizerTest, TokenOutsideByteAlphabetIsRespelled) {
  GgufVocab v = Gpt2Vocab("qwen2");
  v.tokens.push_back("<\uff5cend\uff5c>");  // DeepSeek style, stored unrespelled
  v.token_types.push_back(kControl);
  auto files = TokenizerFilesFromGguf(v, "x");
  ASSERT_TRUE(files.ok());
  EXPECT_FALSE(files->tokenizer["model"]["vocab"].contains("<\uff5cend\uff5c>"));
  auto tok = Build(v);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(Encode(*tok, "ab<\uff5cend\uff5c>", false), (std::vector<int32_t>{3, 11}));
  EXPECT_EQ(Decode(*tok, {3, 11}, false), "ab<\uff5cend\uff5c>");
}

TEST(GgufTokenizerTest, SentencePieceMergesFromScores) {
  auto files = TokenizerFilesFromGguf(SpmVocab(), "x");
  ASSERT_TRUE(files.ok()) << files.status();
  // By the merged token's score, then the longer left part: "▁a b" before "▁ ab" (both -3).
  EXPECT_EQ(files->tokenizer["model"]["merges"],
            json::parse(R"([["▁","a"],["a","b"],["▁a","b"],["▁","ab"],["b","a"]])"));
  EXPECT_TRUE(files->tokenizer["model"]["byte_fallback"].get<bool>());
  EXPECT_EQ(files->tokenizer["model"]["unk_token"], "<unk>");
  EXPECT_EQ(files->tokenizer["pre_tokenizer"]["prepend_scheme"], "first");
}

TEST(GgufTokenizerTest, SentencePieceVocabulary) {
  auto tok = Build(SpmVocab());
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(Encode(*tok, "ab ba", false), (std::vector<int32_t>{kSpaceAb, kSpace, kBa}));
  // "llama" vocabularies add BOS when the file does not say.
  EXPECT_EQ(Encode(*tok, "ab ba", true), (std::vector<int32_t>{1, kSpaceAb, kSpace, kBa}));
  // Byte fallback for "c"; the user-defined token is matched whole, and only the start of the
  // text gets the prefix space.
  EXPECT_EQ(Encode(*tok, "c", false), (std::vector<int32_t>{kSpace, 3 + 'c'}));
  EXPECT_EQ(Encode(*tok, "a<x>b", false), (std::vector<int32_t>{kSpaceA, kX, kB}));
  EXPECT_EQ(Decode(*tok, {1, kSpaceAb, kSpace, kBa, 3 + 'c'}, true), "ab bac");
  EXPECT_EQ(Decode(*tok, {1, kSpaceAb, 2}, false), "<s> ab</s>");
  EXPECT_TRUE(tok->IsSpecial(0));  // <unk> is named by unk_id
  EXPECT_FALSE(tok->IsSpecial(kX));
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
}

TEST(GgufTokenizerTest, SentencePieceWithoutSpacePrefix) {
  GgufVocab v = SpmVocab();
  v.add_space_prefix = false;
  v.add_bos = false;
  auto tok = Build(v);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(Encode(*tok, "ab ba", true), (std::vector<int32_t>{kAb, kSpace, kBa}));
  EXPECT_EQ(Decode(*tok, {kSpaceAb}, true), " ab");
}

TEST(GgufTokenizerTest, SentencePieceWithMerges) {
  GgufVocab v = SpmVocab();
  v.scores.clear();
  v.merges = {"a b", "\u2581 ab"};
  auto tok = Build(v);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(Encode(*tok, "ab ba", false), (std::vector<int32_t>{kSpaceAb, kSpace, kB, kA}));
}

TEST(GgufTokenizerTest, ConfigNamesSpecialTokens) {
  auto files = TokenizerFilesFromGguf(SpmVocab(), "x");
  ASSERT_TRUE(files.ok());
  const json& config = files->tokenizer_config;
  EXPECT_EQ(config["bos_token"], "<s>");
  EXPECT_EQ(config["eos_token"], "</s>");
  EXPECT_EQ(config["unk_token"], "<unk>");
  EXPECT_TRUE(config["pad_token"].is_null());
  EXPECT_TRUE(config["add_bos_token"].get<bool>());
  EXPECT_FALSE(config["add_eos_token"].get<bool>());
  EXPECT_EQ(config["chat_template"], "{{ messages }}");
}

void ExpectInvalid(const GgufVocab& v, const std::string& field, const std::string& what) {
  auto files = TokenizerFilesFromGguf(v, "model.gguf");
  ASSERT_FALSE(files.ok()) << field;
  EXPECT_EQ(files.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      files.status().message(),
      AllOf(HasSubstr("model.gguf"), HasSubstr("tokenizer.ggml." + field), HasSubstr(what)));
}

TEST(GgufTokenizerTest, ErrorsNameTheField) {
  GgufVocab v = Gpt2Vocab("qwen2");
  v.model = "bert";
  ExpectInvalid(v, "model", "'bert'");
  ExpectInvalid(Gpt2Vocab("falcon"), "pre", "'falcon'");
  ExpectInvalid(Gpt2Vocab(""), "pre", "''");
  v = Gpt2Vocab("qwen2");
  v.token_types.pop_back();
  ExpectInvalid(v, "token_type", "10 entries for 11 tokens");
  v = Gpt2Vocab("qwen2");
  v.token_types[2] = 9;
  ExpectInvalid(v, "token_type", "[2] = 9");
  v = Gpt2Vocab("qwen2");
  v.bos_id = 11;
  ExpectInvalid(v, "bos_token_id", "11 is outside");
  v = Gpt2Vocab("qwen2");
  v.pad_id = -1;
  ExpectInvalid(v, "padding_token_id", "-1 is outside");
  v = Gpt2Vocab("qwen2");
  v.merges.push_back("a z");
  ExpectInvalid(v, "merges", "[3] 'a z' names 'z'");
  v = Gpt2Vocab("qwen2");
  v.merges.push_back("b c");  // "bc" is not a token
  ExpectInvalid(v, "merges", "names 'bc'");
  v = Gpt2Vocab("qwen2");
  v.merges.push_back("abc");
  ExpectInvalid(v, "merges", "is not two tokens");
  v = Gpt2Vocab("qwen2");
  v.merges.clear();
  ExpectInvalid(v, "merges", "missing");
  v = Gpt2Vocab("qwen2");
  v.tokens[1] = "\xFF";
  ExpectInvalid(v, "tokens", "[1] is not valid UTF-8");
  v = Gpt2Vocab("qwen2");
  v.tokens.clear();
  ExpectInvalid(v, "tokens", "empty");

  GgufVocab spm = SpmVocab();
  spm.scores.pop_back();
  ExpectInvalid(spm, "scores", "entries for");
  spm.scores.clear();
  ExpectInvalid(spm, "scores", "needs scores");
}

}  // namespace
}  // namespace llm::frontend
