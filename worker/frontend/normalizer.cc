#include "worker/frontend/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/utf8.h"
#include "worker/frontend/regex.h"
#include "worker/frontend/unicode.h"

namespace llm::frontend {
namespace {

using nlohmann::json;

bool IsAscii(const std::string& s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(int options) : options_(options) {}
  void Normalize(std::string& text) const override {
    if (IsAscii(text)) return;  // ASCII is invariant under every normal form
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                            static_cast<utf8proc_ssize_t>(text.size()), &out,
                                            static_cast<utf8proc_option_t>(options_));
    if (n >= 0) text.assign(reinterpret_cast<char*>(out), static_cast<size_t>(n));
    std::free(out);
  }

 private:
  int options_;
};

class Lowercase : public Normalizer {
 public:
  void Normalize(std::string& text) const override {
    std::string out;
    out.reserve(text.size());
    size_t pos = 0;
    while (pos < text.size()) AppendUtf8(utf8proc_tolower(DecodeUtf8(text, pos)), out);
    text.swap(out);
  }
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  void Normalize(std::string& text) const override {
    if (!text.empty()) text = prefix_ + text;
  }

 private:
  std::string prefix_;
};

class ReplaceString : public Normalizer {
 public:
  ReplaceString(std::string pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void Normalize(std::string& text) const override {
    if (pattern_.empty() || text.find(pattern_) == std::string::npos) return;
    std::string out;
    out.reserve(text.size());
    size_t pos = 0;
    for (size_t hit; (hit = text.find(pattern_, pos)) != std::string::npos;
         pos = hit + pattern_.size()) {
      out.append(text, pos, hit - pos);
      out += content_;
    }
    out.append(text, pos, std::string::npos);
    text.swap(out);
  }

 private:
  std::string pattern_, content_;
};

class ReplaceRegex : public Normalizer {
 public:
  ReplaceRegex(std::unique_ptr<Regex> re, std::string content)
      : re_(std::move(re)), content_(std::move(content)) {}
  void Normalize(std::string& text) const override {
    std::vector<std::pair<size_t, size_t>> matches;
    re_->FindAll(text, matches);
    if (matches.empty()) return;
    std::string out;
    size_t pos = 0;
    for (const auto& [b, e] : matches) {
      out.append(text, pos, b - pos);
      out += content_;
      pos = e;
    }
    out.append(text, pos, std::string::npos);
    text.swap(out);
  }

 private:
  std::unique_ptr<Regex> re_;
  std::string content_;
};

class Strip : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void Normalize(std::string& text) const override {
    if (right_) text.resize(WhitespaceSuffixStart(text));
    if (left_) text.erase(0, WhitespacePrefixEnd(text));
  }

 private:
  bool left_, right_;
};

class Sequence : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  void Normalize(std::string& text) const override {
    for (const auto& s : steps_) s->Normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

absl::StatusOr<std::string> StringField(const json& j, const char* key, const std::string& type) {
  if (!j.contains(key) || !j[key].is_string()) {
    return absl::InvalidArgumentError(absl::StrCat("normalizer ", type, ": missing '", key, "'"));
  }
  return j[key].get<std::string>();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Normalizer>> MakeNormalizer(const json& j) {
  if (j.is_null()) return nullptr;
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return absl::InvalidArgumentError("normalizer: missing 'type'");
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(UTF8PROC_STABLE | UTF8PROC_COMPOSE);
  if (type == "NFD") {
    return std::make_unique<UnicodeNormalizer>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
  }
  if (type == "NFKC") {
    return std::make_unique<UnicodeNormalizer>(UTF8PROC_STABLE | UTF8PROC_COMPOSE |
                                               UTF8PROC_COMPAT);
  }
  if (type == "NFKD") {
    return std::make_unique<UnicodeNormalizer>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE |
                                               UTF8PROC_COMPAT);
  }
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Prepend") {
    LLM_ASSIGN_OR_RETURN(std::string prefix, StringField(j, "prepend", type));
    return std::make_unique<Prepend>(std::move(prefix));
  }
  if (type == "Replace") {
    LLM_ASSIGN_OR_RETURN(std::string content, StringField(j, "content", type));
    const json& pattern = j.value("pattern", json());
    if (pattern.contains("String") && pattern["String"].is_string()) {
      return std::make_unique<ReplaceString>(pattern["String"].get<std::string>(), content);
    }
    if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
      LLM_ASSIGN_OR_RETURN(auto re, Regex::Compile(pattern["Regex"].get<std::string>()));
      return std::make_unique<ReplaceRegex>(std::move(re), content);
    }
    return absl::InvalidArgumentError("normalizer Replace: pattern must be String or Regex");
  }
  if (type == "Strip") {
    return std::make_unique<Strip>(j.value("strip_left", true), j.value("strip_right", true));
  }
  if (type == "Sequence") {
    if (!j.contains("normalizers") || !j["normalizers"].is_array()) {
      return absl::InvalidArgumentError("normalizer Sequence: missing 'normalizers'");
    }
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const auto& step : j["normalizers"]) {
      LLM_ASSIGN_OR_RETURN(auto n, MakeNormalizer(step));
      if (n) steps.push_back(std::move(n));
    }
    return std::make_unique<Sequence>(std::move(steps));
  }
  return absl::InvalidArgumentError(absl::StrCat("normalizer type '", type, "' is not supported"));
}

}  // namespace llm::frontend
