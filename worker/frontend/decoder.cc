#include "worker/frontend/decoder.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/utf8.h"
#include "worker/frontend/byte_level.h"

namespace llm::frontend {
namespace {

using nlohmann::json;

// Joins all tokens, maps each token's characters back to bytes (a token with a character
// outside the table keeps its own UTF-8 bytes), then repairs invalid UTF-8 lossily (unless raw
// bytes are asked for).
class ByteLevelDecoder : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>& tokens, bool raw_bytes) const override {
    std::string bytes;
    std::string token_bytes;
    for (const std::string& t : tokens) {
      token_bytes.clear();
      bool all_mapped = true;
      size_t pos = 0;
      while (pos < t.size()) {
        const auto b = CharToByte(DecodeUtf8(t, pos));
        if (!b) {
          all_mapped = false;
          break;
        }
        token_bytes.push_back(static_cast<char>(*b));
      }
      bytes += all_mapped ? token_bytes : t;
    }
    tokens.assign(1, raw_bytes ? std::move(bytes) : Utf8Lossy(bytes));
  }
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::string pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void DecodeChain(std::vector<std::string>& tokens, bool /*raw_bytes*/) const override {
    for (std::string& t : tokens) {
      if (pattern_.empty() || t.find(pattern_) == std::string::npos) continue;
      std::string out;
      size_t pos = 0;
      for (size_t hit; (hit = t.find(pattern_, pos)) != std::string::npos;
           pos = hit + pattern_.size()) {
        out.append(t, pos, hit - pos);
        out += content_;
      }
      out.append(t, pos, std::string::npos);
      t.swap(out);
    }
  }

 private:
  std::string pattern_, content_;
};

// Runs of <0xNN> tokens become their bytes when those form valid UTF-8 (or raw bytes are
// asked for), else one U+FFFD per byte.
class ByteFallbackDecoder : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>& tokens, bool raw_bytes) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string run;
    auto flush = [&] {
      if (run.empty()) return;
      if (raw_bytes || IsValidUtf8(run)) {
        out.push_back(run);
      } else {
        for (size_t i = 0; i < run.size(); ++i) out.emplace_back(kReplacementChar);
      }
      run.clear();
    };
    for (std::string& t : tokens) {
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && IsHex(t[3]) &&
          IsHex(t[4])) {
        run.push_back(static_cast<char>(HexValue(t[3]) * 16 + HexValue(t[4])));
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens.swap(out);
  }

 private:
  static bool IsHex(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  }
  static int HexValue(char c) {
    return c <= '9' ? c - '0' : (c >= 'a' ? c - 'a' + 10 : c - 'A' + 10);
  }
};

class FuseDecoder : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>& tokens, bool /*raw_bytes*/) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

// Strips up to `start` leading and `stop` trailing copies of one character from each token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(std::string content, int start, int stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void DecodeChain(std::vector<std::string>& tokens, bool /*raw_bytes*/) const override {
    for (std::string& t : tokens) {
      size_t begin = 0;
      for (int i = 0; i < start_ && t.compare(begin, content_.size(), content_) == 0; ++i) {
        begin += content_.size();
      }
      size_t end = t.size();
      for (int i = 0; i < stop_ && end >= begin + content_.size() &&
                      t.compare(end - content_.size(), content_.size(), content_) == 0;
           ++i) {
        end -= content_.size();
      }
      t = t.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;
  int start_, stop_;
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void DecodeChain(std::vector<std::string>& tokens, bool /*raw_bytes*/) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      size_t pos = 0;
      for (size_t hit; (hit = t.find(replacement_, pos)) != std::string::npos;
           pos = hit + replacement_.size()) {
        out.append(t, pos, hit - pos);
        out.push_back(' ');
      }
      out.append(t, pos, std::string::npos);
      if (i == 0 && strip_first_ && !out.empty() && out[0] == ' ') out.erase(0, 1);
      tokens[i].swap(out);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps)
      : steps_(std::move(steps)) {}
  void DecodeChain(std::vector<std::string>& tokens, bool raw_bytes) const override {
    for (const auto& s : steps_) s->DecodeChain(tokens, raw_bytes);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Decoder>> MakeDecoder(const json& j) {
  if (j.is_null()) return nullptr;
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return absl::InvalidArgumentError("decoder: missing 'type'");
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Replace") {
    const json& pattern = j.value("pattern", json());
    if (!pattern.contains("String") || !pattern["String"].is_string() || !j.contains("content") ||
        !j["content"].is_string()) {
      return absl::InvalidArgumentError("decoder Replace: needs a String pattern and content");
    }
    return std::make_unique<ReplaceDecoder>(pattern["String"].get<std::string>(),
                                            j["content"].get<std::string>());
  }
  if (type == "Strip") {
    if (!j.contains("content") || !j["content"].is_string()) {
      return absl::InvalidArgumentError("decoder Strip: missing 'content'");
    }
    return std::make_unique<StripDecoder>(j["content"].get<std::string>(), j.value("start", 0),
                                          j.value("stop", 0));
  }
  if (type == "Metaspace") {
    bool strip_first = true;
    if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string()) {
      strip_first = j["prepend_scheme"].get<std::string>() != "never";
    } else if (j.contains("add_prefix_space")) {
      strip_first = j.value("add_prefix_space", true);
    }
    return std::make_unique<MetaspaceDecoder>(j.value("replacement", std::string("\u2581")),
                                              strip_first);
  }
  if (type == "Sequence") {
    if (!j.contains("decoders") || !j["decoders"].is_array()) {
      return absl::InvalidArgumentError("decoder Sequence: missing 'decoders'");
    }
    std::vector<std::unique_ptr<Decoder>> steps;
    for (const auto& step : j["decoders"]) {
      LLM_ASSIGN_OR_RETURN(auto d, MakeDecoder(step));
      if (d) steps.push_back(std::move(d));
    }
    return std::make_unique<SequenceDecoder>(std::move(steps));
  }
  return absl::InvalidArgumentError(absl::StrCat("decoder type '", type, "' is not supported"));
}

}  // namespace llm::frontend
