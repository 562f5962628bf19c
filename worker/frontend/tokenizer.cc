#include "worker/frontend/tokenizer.h"

#include <filesystem>
#include <functional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/mapped_file.h"
#include "common/status_macros.h"
#include "common/utf8.h"
#include "worker/frontend/gguf_tokenizer.h"
#include "worker/model/gguf_model.h"

namespace llm::frontend {
namespace {

using nlohmann::json;

absl::Status Prefixed(const std::string& source, const absl::Status& st) {
  if (st.ok()) return st;
  return absl::Status(st.code(), absl::StrCat(source, ": ", st.message()));
}

// tokenizer_config.json names tokens as a string or as {"content": ...}.
std::optional<std::string> ConfigToken(const json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return std::nullopt;
  const json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& path) {
  namespace fs = std::filesystem;
  if (model::IsGgufPath(path)) {  // tokenizer.ggml.* metadata as tokenizer.json
    LLM_ASSIGN_OR_RETURN(const HfTokenizerFiles files, TokenizerFilesFromGgufPath(path));
    return FromParsed(files.tokenizer, files.tokenizer_config, path);
  }
  fs::path file = path;
  if (fs::is_directory(file)) file /= "tokenizer.json";
  LLM_ASSIGN_OR_RETURN(std::string text, ReadFileToString(file.string()));
  std::string config;
  const fs::path config_path = file.parent_path() / "tokenizer_config.json";
  if (fs::exists(config_path)) {
    LLM_ASSIGN_OR_RETURN(config, ReadFileToString(config_path.string()));
  }
  return FromJson(text, config, file.string());
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view tokenizer_json,
                                                               std::string_view config_json,
                                                               const std::string& source) {
  json j = json::parse(tokenizer_json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(source + ": not a valid JSON object");
  }
  json config = json::object();
  if (!config_json.empty()) {
    config = json::parse(config_json, nullptr, false);
    if (config.is_discarded() || !config.is_object()) {
      return absl::InvalidArgumentError(source + ": tokenizer_config.json is not a JSON object");
    }
  }
  return FromParsed(j, config, source);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromParsed(const json& j, const json& config,
                                                                 const std::string& source) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  auto model = BpeModel::FromJson(j.value("model", json()));
  if (!model.ok()) return Prefixed(source, model.status());
  t->model_ = *std::move(model);
  auto normalizer = MakeNormalizer(j.value("normalizer", json()));
  if (!normalizer.ok()) return Prefixed(source, normalizer.status());
  t->normalizer_ = *std::move(normalizer);
  auto pre = MakePreTokenizer(j.value("pre_tokenizer", json()));
  if (!pre.ok()) return Prefixed(source, pre.status());
  t->pre_tokenizer_ = *std::move(pre);
  auto decoder = MakeDecoder(j.value("decoder", json()));
  if (!decoder.ok()) return Prefixed(source, decoder.status());
  t->decoder_ = *std::move(decoder);

  // Added tokens. Those marked normalized are matched by their normalized content.
  t->vocab_size_ = static_cast<int32_t>(t->model_->id_to_token().size());
  std::vector<std::string> raw_patterns, norm_patterns;
  std::vector<AddedToken> raw_tokens, norm_tokens;
  const json added = j.value("added_tokens", json::array());
  for (size_t i = 0; i < added.size(); ++i) {
    const json& a = added[i];
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
        !a.contains("content") || !a["content"].is_string() || a["id"].get<int64_t>() < 0 ||
        a["id"].get<int64_t>() > INT32_MAX / 2) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": added_tokens[", i, "] malformed"));
    }
    AddedToken tok;
    tok.id = a["id"].get<int32_t>();
    tok.content = a["content"].get<std::string>();
    tok.special = a.value("special", false);
    tok.normalized = a.value("normalized", !tok.special);
    tok.lstrip = a.value("lstrip", false);
    tok.rstrip = a.value("rstrip", false);
    tok.single_word = a.value("single_word", false);
    t->vocab_size_ = std::max(t->vocab_size_, tok.id + 1);
    t->added_by_id_[tok.id] = tok;
    t->added_by_content_.emplace(tok.content, tok.id);
    if (tok.normalized) {
      std::string pattern = tok.content;
      if (t->normalizer_) t->normalizer_->Normalize(pattern);
      norm_patterns.push_back(std::move(pattern));
      norm_tokens.push_back(std::move(tok));
    } else {
      raw_patterns.push_back(tok.content);
      raw_tokens.push_back(std::move(tok));
    }
  }
  t->raw_added_ = AddedTokenMatcher(std::move(raw_patterns), std::move(raw_tokens));
  t->normalized_added_ = AddedTokenMatcher(std::move(norm_patterns), std::move(norm_tokens));
  LLM_RETURN_IF_ERROR(
      Prefixed(source, t->LoadPostProcessor(j.value("post_processor", json()), config)));
  return t;
}

absl::Status Tokenizer::LoadPostProcessor(const json& pp, const json& config) {
  auto id_of = [&](const std::string& token) -> absl::StatusOr<int32_t> {
    const auto id = TokenToId(token);
    if (!id) return absl::InvalidArgumentError(absl::StrCat("unknown special token '", token, "'"));
    return *id;
  };
  std::function<absl::Status(const json&)> load = [&](const json& p) -> absl::Status {
    if (p.is_null()) return absl::OkStatus();
    const std::string type = p.value("type", std::string());
    if (type == "TemplateProcessing") {
      const json& special = p.value("special_tokens", json::object());
      bool after = false;
      for (const json& item : p.value("single", json::array())) {
        if (item.contains("Sequence")) {
          after = true;
          continue;
        }
        if (!item.contains("SpecialToken")) {
          return absl::InvalidArgumentError("post_processor: unknown template item");
        }
        const std::string name = item["SpecialToken"].value("id", std::string());
        std::vector<int32_t> ids;
        if (special.contains(name) && special[name].contains("ids")) {
          for (const json& id : special[name]["ids"]) ids.push_back(id.get<int32_t>());
        } else {
          LLM_ASSIGN_OR_RETURN(int32_t id, id_of(name));
          ids.push_back(id);
        }
        auto& dst = after ? suffix_ids_ : prefix_ids_;
        dst.insert(dst.end(), ids.begin(), ids.end());
      }
      return absl::OkStatus();
    }
    if (type == "BertProcessing" || type == "RobertaProcessing") {
      for (const char* key : {"cls", "sep"}) {
        if (!p.contains(key) || !p[key].is_array() || p[key].size() != 2) {
          return absl::InvalidArgumentError(absl::StrCat("post_processor ", type, ": bad ", key));
        }
      }
      prefix_ids_.push_back(p["cls"][1].get<int32_t>());
      suffix_ids_.push_back(p["sep"][1].get<int32_t>());
      return absl::OkStatus();
    }
    if (type == "ByteLevel") return absl::OkStatus();  // offsets only
    if (type == "Sequence") {
      for (const json& step : p.value("processors", json::array())) {
        LLM_RETURN_IF_ERROR(load(step));
      }
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrCat("post_processor type '", type, "' is not supported"));
  };
  LLM_RETURN_IF_ERROR(load(pp));

  if (auto bos = ConfigToken(config, "bos_token")) bos_id_ = TokenToId(*bos);
  if (auto eos = ConfigToken(config, "eos_token")) eos_id_ = TokenToId(*eos);
  if (!bos_id_ && !prefix_ids_.empty()) bos_id_ = prefix_ids_.front();
  // Without a template, tokenizer_config.json's flags decide (LlamaTokenizer style).
  if (prefix_ids_.empty() && suffix_ids_.empty()) {
    if (config.value("add_bos_token", false) && bos_id_) prefix_ids_.push_back(*bos_id_);
    if (config.value("add_eos_token", false) && eos_id_) suffix_ids_.push_back(*eos_id_);
  }
  return absl::OkStatus();
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  if (const auto it = added_by_content_.find(std::string(token)); it != added_by_content_.end()) {
    return it->second;
  }
  return model_->TokenToId(token);
}

bool Tokenizer::IsSpecial(int32_t id) const {
  const auto it = added_by_id_.find(id);
  return it != added_by_id_.end() && it->second.special;
}

void Tokenizer::EncodePiece(Piece piece, std::vector<int32_t>& out) const {
  std::vector<Piece> words;
  words.push_back(std::move(piece));
  if (pre_tokenizer_) pre_tokenizer_->Apply(words);
  for (const Piece& w : words) model_->Tokenize(w.text, out);
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text,
                                                       bool add_special_tokens) const {
  if (const size_t bad = FirstInvalidUtf8(text); bad != text.size()) {
    return absl::InvalidArgumentError(absl::StrCat("text is not valid UTF-8 (byte ", bad, ")"));
  }
  std::vector<int32_t> ids;
  if (add_special_tokens) ids = prefix_ids_;
  for (const Segment& raw : raw_added_.Split(text)) {
    if (raw.id >= 0) {
      ids.push_back(raw.id);
      continue;
    }
    std::string piece(text.substr(raw.begin, raw.end - raw.begin));
    if (normalizer_) normalizer_->Normalize(piece);
    const bool at_start = raw.begin == 0;
    if (normalized_added_.empty()) {
      EncodePiece(Piece{std::move(piece), at_start}, ids);
      continue;
    }
    for (const Segment& seg : normalized_added_.Split(piece)) {
      if (seg.id >= 0) {
        ids.push_back(seg.id);
      } else {
        EncodePiece(Piece{piece.substr(seg.begin, seg.end - seg.begin), at_start && seg.begin == 0},
                    ids);
      }
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

absl::StatusOr<std::string> Tokenizer::Decode(std::span<const int32_t> ids,
                                              bool skip_special_tokens) const {
  return DecodeChain(ids, skip_special_tokens, /*raw_bytes=*/false);
}

absl::StatusOr<std::string> Tokenizer::DecodeBytes(std::span<const int32_t> ids,
                                                   bool skip_special_tokens) const {
  return DecodeChain(ids, skip_special_tokens, /*raw_bytes=*/true);
}

absl::StatusOr<std::string> Tokenizer::DecodeChain(std::span<const int32_t> ids,
                                                   bool skip_special_tokens, bool raw_bytes) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  const auto& vocab = model_->id_to_token();
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size_) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " is outside the vocabulary [0, ", vocab_size_, ")"));
    }
    if (const auto it = added_by_id_.find(id); it != added_by_id_.end()) {
      if (skip_special_tokens && it->second.special) continue;
      tokens.push_back(it->second.content);
    } else if (id < static_cast<int32_t>(vocab.size()) && !vocab[id].empty()) {
      tokens.push_back(vocab[id]);
    }
  }
  if (!decoder_) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) out.push_back(' ');
      out += tokens[i];
    }
    return out;
  }
  decoder_->DecodeChain(tokens, raw_bytes);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

}  // namespace llm::frontend
