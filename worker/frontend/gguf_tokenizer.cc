#include "worker/frontend/gguf_tokenizer.h"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/utf8.h"
#include "worker/frontend/byte_level.h"

namespace llm::frontend {
namespace {

using nlohmann::json;

// The Split regexes of the models' own tokenizer.json files (and of transformers' table).
constexpr char kLlama3Split[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr char kQwen2Split[] = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N})"
                               R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr char kMetaspace[] = "\u2581";

absl::Status Invalid(const std::string& source, const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": tokenizer.ggml.", field, ": ", what));
}

bool HasType(const GgufVocab& v, size_t id, GgufTokenType type) {
  return id < v.token_types.size() && v.token_types[id] == static_cast<int32_t>(type);
}

absl::Status ValidateVocab(const GgufVocab& v, const std::string& source) {
  const size_t n = v.tokens.size();
  if (n == 0) return Invalid(source, "tokens", "missing or empty");
  for (size_t i = 0; i < n; ++i) {
    if (!IsValidUtf8(v.tokens[i])) {
      return Invalid(source, "tokens", absl::StrCat("[", i, "] is not valid UTF-8"));
    }
  }
  if (!v.token_types.empty() && v.token_types.size() != n) {
    return Invalid(source, "token_type",
                   absl::StrCat(v.token_types.size(), " entries for ", n, " tokens"));
  }
  for (size_t i = 0; i < v.token_types.size(); ++i) {
    if (v.token_types[i] < 0 || v.token_types[i] > 6) {
      return Invalid(source, "token_type",
                     absl::StrCat("[", i, "] = ", v.token_types[i], " is not a token type (0..6)"));
    }
  }
  if (!v.scores.empty() && v.scores.size() != n) {
    return Invalid(source, "scores", absl::StrCat(v.scores.size(), " entries for ", n, " tokens"));
  }
  for (size_t i = 0; i < v.scores.size(); ++i) {
    if (std::isnan(v.scores[i])) return Invalid(source, "scores", absl::StrCat("[", i, "] is NaN"));
  }
  const std::pair<const char*, const std::optional<int32_t>*> ids[] = {
      {"bos_token_id", &v.bos_id},
      {"eos_token_id", &v.eos_id},
      {"unknown_token_id", &v.unk_id},
      {"padding_token_id", &v.pad_id}};
  for (const auto& [field, id] : ids) {
    if (id->has_value() && (**id < 0 || static_cast<size_t>(**id) >= n)) {
      return Invalid(source, field,
                     absl::StrCat(**id, " is outside the ", n, " tokens of tokenizer.ggml.tokens"));
    }
  }
  return absl::OkStatus();
}

// Number of code points of valid UTF-8 `s` (Python's len()).
int32_t CodePoints(std::string_view s) {
  int32_t count = 0;
  for (char c : s) count += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
  return count;
}

bool InByteAlphabet(std::string_view token) {
  for (size_t pos = 0; pos < token.size();) {
    if (!CharToByte(DecodeUtf8(token, pos))) return false;
  }
  return true;
}

// How a byte-level vocabulary spells `token`: as it is when every character is in the byte
// alphabet (the normal case), else as the byte-level characters of its UTF-8 bytes.
std::string ByteLevelSpelling(const std::string& token) {
  if (InByteAlphabet(token)) return token;
  std::string out;
  AppendByteLevel(token, out);
  return out;
}

// The merges of a vocabulary that has none, as transformers' generate_merges derives them from
// the scores: every split of every token into two vocabulary tokens, ordered by the score of
// the token they make (highest first), then by the code-point lengths of the left and right
// parts (longest first); ties keep the vocabulary order.
std::vector<std::pair<std::string, std::string>> GenerateMerges(const GgufVocab& v) {
  std::unordered_map<std::string_view, int32_t> id_of;  // a repeated token keeps its last id
  std::unordered_map<std::string_view, float> score_of;
  std::vector<std::string_view> order;  // first occurrences, in id order
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const auto [it, inserted] = id_of.emplace(v.tokens[i], static_cast<int32_t>(i));
    if (inserted) order.push_back(v.tokens[i]);
    it->second = static_cast<int32_t>(i);
    score_of[v.tokens[i]] = v.scores[i];
  }
  struct Candidate {
    std::string_view left, right;
    float score;
    int32_t left_chars, right_chars;
  };
  std::vector<Candidate> all;
  for (std::string_view token : order) {
    const size_t first = all.size();
    size_t pos = 0;
    DecodeUtf8(token, pos);
    while (pos < token.size()) {
      const std::string_view left = token.substr(0, pos), right = token.substr(pos);
      if (id_of.contains(left) && id_of.contains(right)) {
        all.push_back({left, right, score_of.at(token), CodePoints(left), CodePoints(right)});
      }
      DecodeUtf8(token, pos);
    }
    std::sort(all.begin() + first, all.end(), [&](const Candidate& a, const Candidate& b) {
      return std::pair(id_of.at(a.left), id_of.at(a.right)) <
             std::pair(id_of.at(b.left), id_of.at(b.right));
    });
  }
  std::stable_sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) {
    return std::tie(a.score, a.left_chars, a.right_chars) >
           std::tie(b.score, b.left_chars, b.right_chars);
  });
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(all.size());
  for (const Candidate& c : all) merges.emplace_back(c.left, c.right);
  return merges;
}

// The file's "left right" merges as [left, right] pairs, each checked against `spellings` (the
// model vocabulary).
absl::StatusOr<json> ParseMerges(const GgufVocab& v,
                                 const std::unordered_set<std::string>& spellings,
                                 const std::string& source) {
  json merges = json::array();
  for (size_t i = 0; i < v.merges.size(); ++i) {
    const std::string& m = v.merges[i];
    const size_t space = m.find(' ', 1);
    if (space == std::string::npos || m.find(' ', space + 1) != std::string::npos) {
      return Invalid(source, "merges", absl::StrCat("[", i, "] '", m, "' is not two tokens"));
    }
    std::string left = m.substr(0, space), right = m.substr(space + 1);
    for (const std::string& part : {left, right, left + right}) {
      if (!spellings.contains(part)) {
        return Invalid(source, "merges",
                       absl::StrCat("[", i, "] '", m, "' names '", part,
                                    "', which is not in tokenizer.ggml.tokens"));
      }
    }
    merges.push_back(json::array({std::move(left), std::move(right)}));
  }
  return merges;
}

json ByteLevelPreTokenizer(bool use_regex) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", false},
          {"trim_offsets", true},
          {"use_regex", use_regex}};
}

json SplitThenByteLevel(const char* regex) {
  return {{"type", "Sequence"},
          {"pretokenizers", json::array({{{"type", "Split"},
                                          {"pattern", {{"Regex", regex}}},
                                          {"behavior", "Isolated"},
                                          {"invert", false}},
                                         ByteLevelPreTokenizer(false)})}};
}

struct BytePreTokenizer {
  json pre_tokenizer;
  bool ignore_merges = false;  // Llama 3 looks whole words up before merging
};

absl::StatusOr<BytePreTokenizer> PreTokenizerFor(const std::string& pre,
                                                 const std::string& source) {
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3" || pre == "smaug-bpe") {
    return BytePreTokenizer{SplitThenByteLevel(kLlama3Split), true};
  }
  if (pre == "qwen2" || pre == "deepseek-r1-qwen") {
    return BytePreTokenizer{SplitThenByteLevel(kQwen2Split), false};
  }
  if (pre == "smollm") {
    return BytePreTokenizer{
        {{"type", "Sequence"},
         {"pretokenizers", json::array({{{"type", "Digits"}, {"individual_digits", true}},
                                        ByteLevelPreTokenizer(true)})}},
        false};
  }
  if (pre == "gpt-2") return BytePreTokenizer{ByteLevelPreTokenizer(true), false};
  return Invalid(
      source, "pre",
      absl::StrCat("'", pre,
                   "' is not a supported pre-tokenizer for a gpt2 vocabulary (supported: "
                   "llama-bpe, llama3, llama-v3, smaug-bpe, qwen2, deepseek-r1-qwen, "
                   "smollm, gpt-2)"));
}

json BpeModelJson(json vocab, json merges, bool byte_level) {
  return {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", nullptr},
          {"continuing_subword_prefix", nullptr},
          {"end_of_word_suffix", nullptr},
          {"fuse_unk", !byte_level},
          {"byte_fallback", !byte_level},
          {"ignore_merges", false},
          {"vocab", std::move(vocab)},
          {"merges", std::move(merges)}};
}

absl::Status FillByteLevel(const GgufVocab& v, const std::string& source, json& tokenizer) {
  LLM_ASSIGN_OR_RETURN(BytePreTokenizer pre, PreTokenizerFor(v.pre, source));
  if (v.merges.empty()) return Invalid(source, "merges", "missing (a gpt2 vocabulary needs them)");
  json vocab = json::object();
  std::unordered_set<std::string> spellings;
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    std::string spelling = ByteLevelSpelling(v.tokens[i]);
    vocab[spelling] = static_cast<int32_t>(i);  // a repeated token keeps its last id
    spellings.insert(std::move(spelling));
  }
  LLM_ASSIGN_OR_RETURN(json merges, ParseMerges(v, spellings, source));
  tokenizer["model"] = BpeModelJson(std::move(vocab), std::move(merges), /*byte_level=*/true);
  tokenizer["model"]["ignore_merges"] = pre.ignore_merges;
  tokenizer["normalizer"] = nullptr;
  tokenizer["pre_tokenizer"] = std::move(pre.pre_tokenizer);
  tokenizer["decoder"] = {{"type", "ByteLevel"},
                          {"add_prefix_space", true},
                          {"trim_offsets", true},
                          {"use_regex", true}};
  return absl::OkStatus();
}

absl::Status FillSentencePiece(const GgufVocab& v, const std::string& source, json& tokenizer) {
  json vocab = json::object();
  std::unordered_set<std::string> spellings;
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    vocab[v.tokens[i]] = static_cast<int32_t>(i);  // a repeated token keeps its last id
    spellings.insert(v.tokens[i]);
  }
  json merges;
  if (!v.merges.empty()) {
    LLM_ASSIGN_OR_RETURN(merges, ParseMerges(v, spellings, source));
  } else if (v.scores.empty()) {
    return Invalid(source, "scores", "missing: a llama vocabulary without merges needs scores");
  } else {
    merges = json::array();
    for (auto& [left, right] : GenerateMerges(v)) merges.push_back({left, right});
  }
  tokenizer["model"] = BpeModelJson(std::move(vocab), std::move(merges), /*byte_level=*/false);
  if (v.unk_id) tokenizer["model"]["unk_token"] = v.tokens[*v.unk_id];
  // NOTE(gguf-spm-prefix): transformers' choice. llama.cpp instead prepends a space to every
  // piece of text after a special token and to text that starts with one; that is the legacy
  // normalizer Sequence[Prepend "▁", Replace " " -> "▁"] with a null pre-tokenizer.
  const bool prefix = v.add_space_prefix.value_or(true);
  tokenizer["normalizer"] = nullptr;
  tokenizer["pre_tokenizer"] = {{"type", "Metaspace"},
                                {"replacement", kMetaspace},
                                {"prepend_scheme", prefix ? "first" : "never"},
                                {"split", false}};
  json decoders =
      json::array({{{"type", "Replace"}, {"pattern", {{"String", kMetaspace}}}, {"content", " "}},
                   {{"type", "ByteFallback"}},
                   {{"type", "Fuse"}}});
  if (prefix) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  tokenizer["decoder"] = {{"type", "Sequence"}, {"decoders", std::move(decoders)}};
  return absl::OkStatus();
}

// CONTROL tokens and the tokens the special ids name are special; USER_DEFINED ones are not.
json AddedTokensJson(const GgufVocab& v) {
  std::unordered_set<int32_t> named;
  for (const auto& id : {v.bos_id, v.eos_id, v.unk_id, v.pad_id}) {
    if (id) named.insert(*id);
  }
  json added = json::array();
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const bool special =
        HasType(v, i, GgufTokenType::kControl) || named.contains(static_cast<int32_t>(i));
    if (!special && !HasType(v, i, GgufTokenType::kUserDefined)) continue;
    added.push_back({{"id", static_cast<int32_t>(i)},
                     {"content", v.tokens[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", special}});
  }
  return added;
}

// TemplateProcessing with BOS/EOS as the flags say; null when neither is added.
json PostProcessorJson(const GgufVocab& v, bool add_bos, bool add_eos) {
  json single = json::array(), pair = json::array(), specials = json::object();
  auto special = [&](int32_t id, int type_id) {
    specials[v.tokens[id]] = {{"id", v.tokens[id]}, {"ids", {id}}, {"tokens", {v.tokens[id]}}};
    return json{{"SpecialToken", {{"id", v.tokens[id]}, {"type_id", type_id}}}};
  };
  auto sequence = [](const char* name, int type_id) {
    return json{{"Sequence", {{"id", name}, {"type_id", type_id}}}};
  };
  if (!add_bos && !add_eos) return nullptr;
  for (int part = 0; part < 2; ++part) {
    if (add_bos) pair.push_back(special(*v.bos_id, part));
    pair.push_back(sequence(part == 0 ? "A" : "B", part));
    if (add_eos) pair.push_back(special(*v.eos_id, part));
  }
  if (add_bos) single.push_back(special(*v.bos_id, 0));
  single.push_back(sequence("A", 0));
  if (add_eos) single.push_back(special(*v.eos_id, 0));
  return {{"type", "TemplateProcessing"},
          {"single", std::move(single)},
          {"pair", std::move(pair)},
          {"special_tokens", std::move(specials)}};
}

// NOTE: transformers adds BOS to a "llama" vocabulary that does not say (so does llama.cpp).
bool AddsBos(const GgufVocab& v) { return v.add_bos.value_or(v.model == "llama") && v.bos_id; }
bool AddsEos(const GgufVocab& v) { return v.add_eos.value_or(false) && v.eos_id.has_value(); }

json ConfigJson(const GgufVocab& v, bool add_bos, bool add_eos) {
  auto name = [&](const std::optional<int32_t>& id) -> json {
    return id ? json(v.tokens[*id]) : json(nullptr);
  };
  json config = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                 {"add_bos_token", add_bos},
                 {"add_eos_token", add_eos},
                 {"bos_token", name(v.bos_id)},
                 {"eos_token", name(v.eos_id)},
                 {"unk_token", name(v.unk_id)},
                 {"pad_token", name(v.pad_id)},
                 {"clean_up_tokenization_spaces", false}};
  if (!v.chat_template.empty()) config["chat_template"] = v.chat_template;
  return config;
}

}  // namespace

absl::StatusOr<HfTokenizerFiles> TokenizerFilesFromGguf(const GgufVocab& vocab,
                                                        const std::string& source) {
  LLM_RETURN_IF_ERROR(ValidateVocab(vocab, source));
  HfTokenizerFiles files;
  json& tokenizer = files.tokenizer;
  tokenizer = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}};
  if (vocab.model == "gpt2") {
    LLM_RETURN_IF_ERROR(FillByteLevel(vocab, source, tokenizer));
  } else if (vocab.model == "llama") {
    LLM_RETURN_IF_ERROR(FillSentencePiece(vocab, source, tokenizer));
  } else {
    return Invalid(source, "model",
                   absl::StrCat("'", vocab.model, "' is not supported (gpt2, llama)"));
  }
  tokenizer["added_tokens"] = AddedTokensJson(vocab);
  tokenizer["post_processor"] = PostProcessorJson(vocab, AddsBos(vocab), AddsEos(vocab));
  files.tokenizer_config = ConfigJson(vocab, AddsBos(vocab), AddsEos(vocab));
  return files;
}

absl::StatusOr<nlohmann::json> TokenizerConfigFromGgufPath(const std::string& path) {
  LLM_ASSIGN_OR_RETURN(auto file, model::GgufFile::Open(path));
  LLM_ASSIGN_OR_RETURN(const GgufVocab vocab, ReadGgufVocab(*file));
  LLM_RETURN_IF_ERROR(ValidateVocab(vocab, path));
  return ConfigJson(vocab, AddsBos(vocab), AddsEos(vocab));
}

namespace {

template <typename T>
absl::Status ReadOptional(const model::GgufFile& f, const char* key, std::optional<T>& out) {
  if (f.Find(key) == nullptr) return absl::OkStatus();
  if constexpr (std::is_same_v<T, bool>) {
    LLM_ASSIGN_OR_RETURN(out, f.GetBool(key));
  } else {
    LLM_ASSIGN_OR_RETURN(const int64_t id, f.GetInt(key));
    if (id < 0 || id > INT32_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(f.path(), ": ", key, ": not a token id"));
    }
    out = static_cast<T>(id);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GgufVocab> ReadGgufVocab(const model::GgufFile& f) {
  GgufVocab v;
  if (f.Find("tokenizer.ggml.model") == nullptr || f.Find("tokenizer.ggml.tokens") == nullptr) {
    return absl::NotFoundError(
        absl::StrCat(f.path(), ": no tokenizer (tokenizer.ggml.model and tokens)"));
  }
  LLM_ASSIGN_OR_RETURN(v.model, f.GetString("tokenizer.ggml.model"));
  if (f.Find("tokenizer.ggml.pre") != nullptr) {
    LLM_ASSIGN_OR_RETURN(v.pre, f.GetString("tokenizer.ggml.pre"));
  }
  LLM_ASSIGN_OR_RETURN(v.tokens, f.GetStringArray("tokenizer.ggml.tokens"));
  if (f.Find("tokenizer.ggml.token_type") != nullptr) {
    LLM_ASSIGN_OR_RETURN(const std::vector<int64_t> types,
                         f.GetIntArray("tokenizer.ggml.token_type"));
    for (int64_t t : types)
      v.token_types.push_back(static_cast<int32_t>(std::clamp<int64_t>(t, -1, 99)));
  }
  if (f.Find("tokenizer.ggml.scores") != nullptr) {
    LLM_ASSIGN_OR_RETURN(const std::vector<double> scores,
                         f.GetFloatArray("tokenizer.ggml.scores"));
    v.scores.assign(scores.begin(), scores.end());
  }
  if (f.Find("tokenizer.ggml.merges") != nullptr) {
    LLM_ASSIGN_OR_RETURN(v.merges, f.GetStringArray("tokenizer.ggml.merges"));
  }
  LLM_RETURN_IF_ERROR(ReadOptional(f, "tokenizer.ggml.bos_token_id", v.bos_id));
  LLM_RETURN_IF_ERROR(ReadOptional(f, "tokenizer.ggml.eos_token_id", v.eos_id));
  LLM_RETURN_IF_ERROR(ReadOptional(f, "tokenizer.ggml.unknown_token_id", v.unk_id));
  LLM_RETURN_IF_ERROR(ReadOptional(f, "tokenizer.ggml.padding_token_id", v.pad_id));
  LLM_RETURN_IF_ERROR(ReadOptional(f, "tokenizer.ggml.add_bos_token", v.add_bos));
  LLM_RETURN_IF_ERROR(ReadOptional(f, "tokenizer.ggml.add_eos_token", v.add_eos));
  LLM_RETURN_IF_ERROR(ReadOptional(f, "tokenizer.ggml.add_space_prefix", v.add_space_prefix));
  if (f.Find("tokenizer.chat_template") != nullptr) {
    LLM_ASSIGN_OR_RETURN(v.chat_template, f.GetString("tokenizer.chat_template"));
  }
  return v;
}

absl::StatusOr<HfTokenizerFiles> TokenizerFilesFromGgufFile(const model::GgufFile& file) {
  LLM_ASSIGN_OR_RETURN(const GgufVocab vocab, ReadGgufVocab(file));
  return TokenizerFilesFromGguf(vocab, file.path());
}

absl::StatusOr<HfTokenizerFiles> TokenizerFilesFromGgufPath(const std::string& path) {
  LLM_ASSIGN_OR_RETURN(auto file, model::GgufFile::Open(path));
  return TokenizerFilesFromGgufFile(*file);
}

}  // namespace llm::frontend
