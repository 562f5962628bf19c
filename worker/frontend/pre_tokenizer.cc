#include "worker/frontend/pre_tokenizer.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/frontend/byte_level.h"
#include "worker/frontend/regex.h"

namespace llm::frontend {
namespace {

using nlohmann::json;
using Ranges = std::vector<std::pair<size_t, size_t>>;

// The GPT-2 pattern ByteLevel uses when use_regex is set.
constexpr char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Applies `split(piece) -> ranges` to every piece; sub-pieces keep at_text_start only when
// they begin where their parent began.
template <typename SplitFn>
void SplitPieces(std::vector<Piece>& pieces, SplitFn&& split) {
  std::vector<Piece> out;
  out.reserve(pieces.size() * 2);
  Ranges ranges;
  for (Piece& p : pieces) {
    ranges = split(p.text);
    for (const auto& [b, e] : ranges) {
      if (e > b) out.push_back(Piece{p.text.substr(b, e - b), p.at_text_start && b == 0});
    }
  }
  pieces.swap(out);
}

class Split : public PreTokenizer {
 public:
  Split(std::unique_ptr<Regex> re, std::string literal, SplitBehavior behavior, bool invert)
      : re_(std::move(re)), literal_(std::move(literal)), behavior_(behavior), invert_(invert) {}

  void Apply(std::vector<Piece>& pieces) const override {
    SplitPieces(pieces, [&](const std::string& text) {
      Ranges matches;
      if (re_) {
        re_->FindAll(text, matches);
      } else if (!literal_.empty()) {
        for (size_t pos = 0; (pos = text.find(literal_, pos)) != std::string::npos;
             pos += literal_.size()) {
          matches.emplace_back(pos, pos + literal_.size());
        }
      }
      return SplitByMatches(text.size(), matches, behavior_, invert_);
    });
  }

 private:
  std::unique_ptr<Regex> re_;
  std::string literal_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevel : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, std::unique_ptr<Regex> re)
      : add_prefix_space_(add_prefix_space), re_(std::move(re)) {}

  void Apply(std::vector<Piece>& pieces) const override {
    if (add_prefix_space_) {
      for (Piece& p : pieces) {
        if (p.text.empty() || p.text[0] != ' ') p.text = " " + p.text;
      }
    }
    if (re_) {
      SplitPieces(pieces, [&](const std::string& text) {
        Ranges matches;
        re_->FindAll(text, matches);
        return SplitByMatches(text.size(), matches, SplitBehavior::kIsolated, false);
      });
    }
    std::string mapped;
    for (Piece& p : pieces) {
      mapped.clear();
      AppendByteLevel(p.text, mapped);
      p.text.swap(mapped);
    }
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> re_;  // null unless use_regex
};

class Metaspace : public PreTokenizer {
 public:
  enum class Prepend { kAlways, kFirst, kNever };
  Metaspace(std::string replacement, Prepend prepend, bool split)
      : replacement_(std::move(replacement)), prepend_(prepend), split_(split) {}

  void Apply(std::vector<Piece>& pieces) const override {
    for (Piece& p : pieces) {
      std::string out;
      for (char c : p.text) {
        if (c == ' ') {
          out += replacement_;
        } else {
          out.push_back(c);
        }
      }
      const bool starts = out.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts &&
          (prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && p.at_text_start))) {
        out = replacement_ + out;
      }
      p.text.swap(out);
    }
    if (!split_) return;
    SplitPieces(pieces, [&](const std::string& text) {
      Ranges matches;
      for (size_t pos = 0; (pos = text.find(replacement_, pos)) != std::string::npos;
           pos += replacement_.size()) {
        matches.emplace_back(pos, pos + replacement_.size());
      }
      return SplitByMatches(text.size(), matches, SplitBehavior::kMergedWithNext, false);
    });
  }

 private:
  std::string replacement_;
  Prepend prepend_;
  bool split_;
};

class Digits : public PreTokenizer {
 public:
  explicit Digits(bool individual) : individual_(individual) {}
  void Apply(std::vector<Piece>& pieces) const override {
    SplitPieces(pieces, [&](const std::string& text) {
      Ranges matches;
      for (size_t i = 0; i < text.size(); ++i) {
        if (text[i] >= '0' && text[i] <= '9') matches.emplace_back(i, i + 1);
      }
      return SplitByMatches(text.size(), matches,
                            individual_ ? SplitBehavior::kIsolated : SplitBehavior::kContiguous,
                            false);
    });
  }

 private:
  bool individual_;
};

class Sequence : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void Apply(std::vector<Piece>& pieces) const override {
    for (const auto& s : steps_) s->Apply(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

absl::StatusOr<SplitBehavior> ParseBehavior(const json& j) {
  const std::string b = j.value("behavior", std::string("Isolated"));
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  return absl::InvalidArgumentError(
      absl::StrCat("pre_tokenizer Split: unknown behavior '", b, "'"));
}

}  // namespace

Ranges SplitByMatches(size_t text_size, const Ranges& matches, SplitBehavior behavior,
                      bool invert) {
  // Segments covering the text: (range, is_delimiter).
  std::vector<std::pair<std::pair<size_t, size_t>, bool>> segs;
  size_t prev = 0;
  for (const auto& m : matches) {
    if (m.first > prev) segs.push_back({{prev, m.first}, invert});
    segs.push_back({m, !invert});
    prev = m.second;
  }
  if (prev < text_size) segs.push_back({{prev, text_size}, invert});

  Ranges out;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const auto& [r, is_match] : segs) {
        if (!is_match) out.push_back(r);
      }
      break;
    case SplitBehavior::kIsolated:
      for (const auto& [r, is_match] : segs) out.push_back(r);
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const auto& [r, is_match] : segs) {
        if (is_match && !previous_match && !out.empty()) {
          out.back().second = r.second;
        } else {
          out.push_back(r);
        }
        previous_match = is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
        const auto& [r, is_match] = *it;
        if (is_match && !previous_match && !out.empty()) {
          out.back().first = r.first;
        } else {
          out.push_back(r);
        }
        previous_match = is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
    case SplitBehavior::kContiguous:
      for (const auto& [r, is_match] : segs) {
        if (is_match == previous_match && !out.empty()) {
          out.back().second = r.second;
        } else {
          out.push_back(r);
        }
        previous_match = is_match;
      }
      break;
  }
  return out;
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> MakePreTokenizer(const json& j) {
  if (j.is_null()) return nullptr;
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return absl::InvalidArgumentError("pre_tokenizer: missing 'type'");
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "Split") {
    LLM_ASSIGN_OR_RETURN(SplitBehavior behavior, ParseBehavior(j));
    const bool invert = j.value("invert", false);
    const json& pattern = j.value("pattern", json());
    if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
      LLM_ASSIGN_OR_RETURN(auto re, Regex::Compile(pattern["Regex"].get<std::string>()));
      return std::make_unique<Split>(std::move(re), "", behavior, invert);
    }
    if (pattern.contains("String") && pattern["String"].is_string()) {
      return std::make_unique<Split>(nullptr, pattern["String"].get<std::string>(), behavior,
                                     invert);
    }
    return absl::InvalidArgumentError("pre_tokenizer Split: pattern must be String or Regex");
  }
  if (type == "ByteLevel") {
    std::unique_ptr<Regex> re;
    if (j.value("use_regex", true)) {
      LLM_ASSIGN_OR_RETURN(re, Regex::Compile(kGpt2Pattern));
    }
    return std::make_unique<ByteLevel>(j.value("add_prefix_space", true), std::move(re));
  }
  if (type == "Metaspace") {
    Metaspace::Prepend prepend = Metaspace::Prepend::kAlways;
    if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string()) {
      const std::string s = j["prepend_scheme"].get<std::string>();
      if (s == "first") {
        prepend = Metaspace::Prepend::kFirst;
      } else if (s == "never") {
        prepend = Metaspace::Prepend::kNever;
      } else if (s != "always") {
        return absl::InvalidArgumentError(
            absl::StrCat("pre_tokenizer Metaspace: unknown prepend_scheme '", s, "'"));
      }
    } else if (j.contains("add_prefix_space") && !j.value("add_prefix_space", true)) {
      prepend = Metaspace::Prepend::kNever;
    }
    return std::make_unique<Metaspace>(j.value("replacement", std::string("\u2581")), prepend,
                                       j.value("split", true));
  }
  if (type == "Digits") return std::make_unique<Digits>(j.value("individual_digits", false));
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array()) {
      return absl::InvalidArgumentError("pre_tokenizer Sequence: missing 'pretokenizers'");
    }
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const auto& step : j["pretokenizers"]) {
      LLM_ASSIGN_OR_RETURN(auto p, MakePreTokenizer(step));
      if (p) steps.push_back(std::move(p));
    }
    return std::make_unique<Sequence>(std::move(steps));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("pre_tokenizer type '", type, "' is not supported"));
}

}  // namespace llm::frontend
