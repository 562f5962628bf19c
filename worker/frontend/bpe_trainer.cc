#include "worker/frontend/bpe_trainer.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/frontend/byte_level.h"
#include "worker/frontend/regex.h"

namespace llm::frontend {
namespace {

using nlohmann::json;

constexpr char kSplitPattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr int kMaxLearnedMerges = 4000;

struct Vocab {
  std::vector<std::string> tokens;  // by id; "" for ids not yet assigned
  std::unordered_map<std::string, int32_t> ids;
  std::vector<std::pair<int32_t, int32_t>> merges;
  std::set<int32_t> reserved;  // special ids
  int32_t byte_id[256] = {};   // the token of each byte
  int32_t next_free = 0;

  bool full() const { return next_free >= static_cast<int32_t>(tokens.size()); }
  // Adds the merge a+b, creating its token if new. False when the vocabulary is full.
  bool AddMerge(int32_t a, int32_t b) {
    const std::string merged = tokens[a] + tokens[b];
    if (!ids.count(merged)) {
      if (full()) return false;
      tokens[next_free] = merged;
      ids[merged] = next_free;
      Advance();
    }
    merges.emplace_back(a, b);
    return true;
  }
  void Advance() {
    ++next_free;
    while (next_free < static_cast<int32_t>(tokens.size()) && reserved.count(next_free)) {
      ++next_free;
    }
  }
};

// Greedy BPE training on word frequencies: repeatedly merge the most frequent adjacent pair
// (ties to the smallest ids).
absl::Status LearnMerges(std::string_view text, Vocab& v) {
  LLM_ASSIGN_OR_RETURN(auto re, Regex::Compile(kSplitPattern));
  std::vector<std::pair<size_t, size_t>> spans;
  re->FindAll(text, spans);
  std::map<std::string, int> word_counts;
  for (const auto& [b, e] : spans) ++word_counts[std::string(text.substr(b, e - b))];
  std::vector<std::pair<std::vector<int32_t>, int>> words;
  for (const auto& [w, count] : word_counts) {
    std::vector<int32_t> symbols;
    for (char c : w) symbols.push_back(v.byte_id[static_cast<uint8_t>(c)]);
    words.emplace_back(std::move(symbols), count);
  }
  for (int m = 0; m < kMaxLearnedMerges && !v.full(); ++m) {
    std::map<std::pair<int32_t, int32_t>, int> pairs;
    for (const auto& [symbols, count] : words) {
      for (size_t i = 0; i + 1 < symbols.size(); ++i) pairs[{symbols[i], symbols[i + 1]}] += count;
    }
    auto best = pairs.end();
    for (auto it = pairs.begin(); it != pairs.end(); ++it) {
      if (best == pairs.end() || it->second > best->second) best = it;
    }
    if (best == pairs.end() || best->second < 2) break;
    const auto [a, b] = best->first;
    if (!v.AddMerge(a, b)) break;
    const int32_t merged = v.ids.at(v.tokens[a] + v.tokens[b]);
    for (auto& [symbols, count] : words) {
      std::vector<int32_t> out;
      for (size_t i = 0; i < symbols.size(); ++i) {
        if (i + 1 < symbols.size() && symbols[i] == a && symbols[i + 1] == b) {
          out.push_back(merged);
          ++i;
        } else {
          out.push_back(symbols[i]);
        }
      }
      symbols.swap(out);
    }
  }
  return absl::OkStatus();
}

// Fills the rest of the vocabulary with merges of existing tokens and printable characters:
// all two-character strings first, then longer ones, in a fixed order.
void FillMerges(Vocab& v) {
  std::vector<int32_t> alphabet;  // single-byte tokens for ' ' and printable ASCII
  for (int b = 32; b < 127; ++b) alphabet.push_back(v.byte_id[b]);
  std::vector<int32_t> frontier = alphabet;
  while (!v.full()) {
    std::vector<int32_t> next;
    for (int32_t a : frontier) {
      for (int32_t c : alphabet) {
        if (v.full()) return;
        const std::string merged = v.tokens[a] + v.tokens[c];
        if (v.ids.count(merged)) continue;
        v.AddMerge(a, c);
        next.push_back(v.ids.at(merged));
      }
    }
    if (next.empty()) return;
    frontier.swap(next);
  }
}

// The special tokens: BOS, the EOS ids (the first <|end_of_text|>), then the spec's extras.
std::vector<std::pair<int32_t, std::string>> SpecialTokens(const ByteLevelTokenizerSpec& spec) {
  std::vector<std::pair<int32_t, std::string>> specials;
  if (spec.bos_id >= 0) specials.emplace_back(spec.bos_id, "<|begin_of_text|>");
  for (size_t i = 0; i < spec.eos_ids.size(); ++i) {
    specials.emplace_back(spec.eos_ids[i],
                          i == 0 ? "<|end_of_text|>" : absl::StrCat("<|eot_", i, "|>"));
  }
  specials.insert(specials.end(), spec.extra_specials.begin(), spec.extra_specials.end());
  return specials;
}

// The vocabulary: the specials' ids reserved, the 256 bytes at the lowest ids left, then merges
// learnt from the training text and made up until every id has a token.
absl::Status BuildVocab(const ByteLevelTokenizerSpec& spec,
                        const std::vector<std::pair<int32_t, std::string>>& specials, Vocab& v) {
  v.tokens.assign(spec.vocab_size, "");
  for (const auto& [id, name] : specials) {
    if (id < 0 || id >= spec.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("special token id ", id, " must be in [0, ", spec.vocab_size, ")"));
    }
    v.reserved.insert(id);
  }
  if (spec.vocab_size <= 256 + static_cast<int32_t>(v.reserved.size())) {
    return absl::InvalidArgumentError("vocab_size too small for a byte-level tokenizer");
  }
  v.next_free = -1;
  v.Advance();
  for (int b = 0; b < 256; ++b) {
    std::string s;
    AppendByteLevel(std::string(1, static_cast<char>(b)), s);
    v.tokens[v.next_free] = s;
    v.ids[s] = v.next_free;
    v.byte_id[b] = v.next_free;
    v.Advance();
  }
  LLM_RETURN_IF_ERROR(LearnMerges(spec.training_text, v));
  FillMerges(v);
  if (!v.full()) return absl::InternalError("could not fill the vocabulary");
  return absl::OkStatus();
}

// tokenizer.json's "model": a BPE of the vocabulary (specials left to added_tokens) and merges.
json BpeModelJson(const ByteLevelTokenizerSpec& spec, const Vocab& v) {
  json model;
  model["type"] = "BPE";
  model["dropout"] = nullptr;
  model["unk_token"] = nullptr;
  model["continuing_subword_prefix"] = nullptr;
  model["end_of_word_suffix"] = nullptr;
  model["fuse_unk"] = false;
  model["byte_fallback"] = false;
  model["ignore_merges"] = false;
  json vocab = json::object();
  for (int32_t id = 0; id < spec.vocab_size; ++id) {
    if (!v.reserved.count(id)) vocab[v.tokens[id]] = id;
  }
  model["vocab"] = std::move(vocab);
  json merges = json::array();
  for (const auto& [a, b] : v.merges) merges.push_back(json::array({v.tokens[a], v.tokens[b]}));
  model["merges"] = std::move(merges);
  return model;
}

// The post-processor: BOS before each sequence where there is one, else none.
json PostProcessorJson(int32_t bos_id) {
  if (bos_id < 0) return nullptr;
  return {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"pair",
       {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
        {{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 1}}}},
        {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
      {"special_tokens",
       {{"<|begin_of_text|>",
         {{"id", "<|begin_of_text|>"}, {"ids", {bos_id}}, {"tokens", {"<|begin_of_text|>"}}}}}}};
}

json TokenizerJson(const ByteLevelTokenizerSpec& spec,
                   const std::vector<std::pair<int32_t, std::string>>& specials, json model) {
  json added = json::array();
  for (const auto& [id, name] : specials) {
    added.push_back({{"id", id},
                     {"content", name},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  json tok;
  tok["version"] = "1.0";
  tok["truncation"] = nullptr;
  tok["padding"] = nullptr;
  tok["added_tokens"] = added;
  tok["normalizer"] = nullptr;
  tok["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers",
                           {{{"type", "Split"},
                             {"pattern", {{"Regex", kSplitPattern}}},
                             {"behavior", "Isolated"},
                             {"invert", false}},
                            {{"type", "ByteLevel"},
                             {"add_prefix_space", false},
                             {"trim_offsets", true},
                             {"use_regex", false}}}}};
  tok["post_processor"] = PostProcessorJson(spec.bos_id);
  tok["decoder"] = {{"type", "ByteLevel"},
                    {"add_prefix_space", true},
                    {"trim_offsets", true},
                    {"use_regex", true}};
  tok["model"] = std::move(model);
  return tok;
}

json TokenizerConfigJson(const ByteLevelTokenizerSpec& spec) {
  json config;
  config["tokenizer_class"] = "PreTrainedTokenizerFast";
  config["add_bos_token"] = spec.bos_id >= 0;
  config["add_eos_token"] = false;
  if (spec.bos_id >= 0) config["bos_token"] = "<|begin_of_text|>";
  if (!spec.eos_ids.empty()) config["eos_token"] = "<|end_of_text|>";
  config["clean_up_tokenization_spaces"] = false;
  config["model_max_length"] = 1000000;
  return config;
}

}  // namespace

absl::StatusOr<TokenizerFiles> MakeByteLevelTokenizer(const ByteLevelTokenizerSpec& spec) {
  const std::vector<std::pair<int32_t, std::string>> specials = SpecialTokens(spec);
  Vocab v;
  LLM_RETURN_IF_ERROR(BuildVocab(spec, specials, v));
  const json tok = TokenizerJson(spec, specials, BpeModelJson(spec, v));
  TokenizerFiles files;
  files.tokenizer_json = tok.dump(1, ' ', false, json::error_handler_t::strict);
  files.tokenizer_config_json = TokenizerConfigJson(spec).dump(2);
  return files;
}

}  // namespace llm::frontend
