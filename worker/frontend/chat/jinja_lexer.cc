#include "worker/frontend/chat/jinja_lexer.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/str_cat.h"

namespace llm::frontend::jinja {

namespace {

bool Space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool SpaceOrTab(char c) { return c == ' ' || c == '\t'; }
bool NameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {}

  absl::StatusOr<std::vector<Token>> Run() {
    bool line_starting = true;  // the text ahead starts a line (Jinja2's lexer tracks this)
    while (pos_ < src_.size()) {
      // The next tag opener.
      size_t open = pos_;
      char kind = 0;
      for (;; ++open) {
        open = src_.find('{', open);
        if (open == std::string_view::npos || open + 1 >= src_.size()) {
          open = std::string_view::npos;
          break;
        }
        const char k = src_[open + 1];
        if (k == '{' || k == '%' || k == '#') {
          kind = k;
          break;
        }
      }
      if (open == std::string_view::npos) {
        text_start_ = pos_;
        Emit(Token::Type::kText, std::string(src_.substr(pos_)));
        pos_ = src_.size();
        break;
      }
      text_start_ = pos_;
      std::string text(src_.substr(pos_, open - pos_));
      const char sign = open + 2 < src_.size() ? src_[open + 2] : 0;
      if (sign == '-') {
        while (!text.empty() && Space(text.back())) text.pop_back();
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: only spaces/tabs between the line's start and the tag.
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size() &&
            std::all_of(text.begin() + static_cast<long>(l_pos), text.end(), SpaceOrTab)) {
          text.resize(l_pos);
        }
      }
      if (!text.empty()) Emit(Token::Type::kText, text);
      pos_ = open + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (kind == '#') {
        const size_t close = src_.find("#}", pos_);
        if (close == std::string_view::npos) return Error("unterminated comment");
        const bool strip = close > pos_ && src_[close - 1] == '-';
        pos_ = close + 2;
        line_starting = AfterTag(strip, /*trim_newline=*/true);
        continue;
      }
      if (kind == '%') {
        auto raw = Raw();
        if (!raw.ok()) return raw.status();
        if (*raw >= 0) {
          line_starting = *raw == 1;
          continue;
        }
      }
      const bool block = kind == '%';
      Emit(block ? Token::Type::kBlockBegin : Token::Type::kVarBegin, "");
      auto closed = Expression(block);
      if (!closed.ok()) return closed.status();
      line_starting = *closed;
    }
    Emit(Token::Type::kEnd, "");
    return std::move(tokens_);
  }

 private:
  // After a tag's closing delimiter: `strip` ('-'): skip all whitespace; else, for blocks and
  // comments, one newline (trim_blocks). Returns whether the text ahead starts a line.
  bool AfterTag(bool strip, bool trim_newline) {
    if (strip) {
      while (pos_ < src_.size() && Space(src_[pos_])) ++pos_;
      return pos_ > 0 && src_[pos_ - 1] == '\n';
    }
    if (trim_newline && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
      return true;
    }
    return false;
  }

  // At pos_ just after "{%" (and its sign): if the tag is `raw`, its content up to
  // `{% endraw %}` becomes text, with the whitespace rules jinja2 applies there (trim_blocks is
  // not applied after `raw` itself). Returns -1 when the tag is not `raw`, else whether the text
  // after `endraw` starts a line.
  absl::StatusOr<int> Raw() {
    // `{% raw %}` / `{% raw -%}`: at `p`, returns the end of the closing `%}` and its sign.
    const auto tag_named = [&](size_t p, std::string_view name, char* close_sign) -> size_t {
      while (p < src_.size() && Space(src_[p])) ++p;
      if (src_.substr(p, name.size()) != name) return std::string_view::npos;
      p += name.size();
      if (p < src_.size() && NameChar(src_[p])) return std::string_view::npos;
      while (p < src_.size() && Space(src_[p])) ++p;
      *close_sign = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) *close_sign = src_[p++];
      if (src_.substr(p, 2) != "%}") return std::string_view::npos;
      return p + 2;
    };
    char sign = 0;
    const size_t begin_end = tag_named(pos_, "raw", &sign);
    if (begin_end == std::string_view::npos || sign == '+') return -1;
    size_t content = begin_end;
    if (sign == '-') {
      while (content < src_.size() && Space(src_[content])) ++content;
    }
    for (size_t open = src_.find("{%", content); open != std::string_view::npos;
         open = src_.find("{%", open + 1)) {
      size_t p = open + 2;
      const char open_sign = p < src_.size() && (src_[p] == '-' || src_[p] == '+') ? src_[p] : 0;
      if (open_sign != 0) ++p;
      char close_sign = 0;
      const size_t end = tag_named(p, "endraw", &close_sign);
      if (end == std::string_view::npos) continue;
      std::string text(src_.substr(content, open - content));
      if (open_sign == '-') {
        while (!text.empty() && Space(text.back())) text.pop_back();
      } else if (open_sign != '+') {
        const size_t nl = text.rfind('\n');
        if (nl != std::string::npos &&
            std::all_of(text.begin() + static_cast<long>(nl + 1), text.end(), SpaceOrTab)) {
          text.resize(nl + 1);
        }
      }
      text_start_ = content;
      if (!text.empty()) Emit(Token::Type::kText, text);
      pos_ = end;
      if (close_sign == '+') return 0;
      return AfterTag(close_sign == '-', /*trim_newline=*/true) ? 1 : 0;
    }
    return Error("missing '{% endraw %}'");
  }

  // Tokens inside {{ }} or {% %}, through the closing delimiter.
  absl::StatusOr<bool> Expression(bool block) {
    const char closer = block ? '%' : '}';
    int open = 0;  // brackets open: as in jinja2, '}}' inside them closes a dict, not the tag
    for (;;) {
      while (pos_ < src_.size() && Space(src_[pos_])) ++pos_;
      if (pos_ >= src_.size()) return Error(block ? "unterminated '{%'" : "unterminated '{{'");
      const char c = src_[pos_];
      // The closing delimiter, with its whitespace control.
      if (open == 0 && (c == '-' || (c == '+' && block)) && pos_ + 2 < src_.size() &&
          src_[pos_ + 1] == closer && src_[pos_ + 2] == '}') {
        pos_ += 3;
        Emit(block ? Token::Type::kBlockEnd : Token::Type::kVarEnd, "");
        return AfterTag(c == '-', false);
      }
      if (open == 0 && c == closer && pos_ + 1 < src_.size() && src_[pos_ + 1] == '}') {
        pos_ += 2;
        Emit(block ? Token::Type::kBlockEnd : Token::Type::kVarEnd, "");
        return AfterTag(false, block);
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = pos_;
        while (e < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) {
          ++e;
        }
        Emit(Token::Type::kName, std::string(src_.substr(pos_, e - pos_)));
        pos_ = e;
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t e = pos_;
        bool is_float = false;
        while (e < src_.size() &&
               (std::isdigit(static_cast<unsigned char>(src_[e])) || src_[e] == '_'))
          ++e;
        if (e + 1 < src_.size() && src_[e] == '.' &&
            std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
          is_float = true;
          ++e;
          while (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) ++e;
        }
        if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
          size_t f = e + 1;
          if (f < src_.size() && (src_[f] == '+' || src_[f] == '-')) ++f;
          if (f < src_.size() && std::isdigit(static_cast<unsigned char>(src_[f]))) {
            is_float = true;
            e = f;
            while (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) ++e;
          }
        }
        std::string n(src_.substr(pos_, e - pos_));
        n.erase(std::remove(n.begin(), n.end(), '_'), n.end());
        Emit(is_float ? Token::Type::kFloat : Token::Type::kInt, n);
        pos_ = e;
        continue;
      }
      if (c == '\'' || c == '"') {
        auto s = String(c);
        if (!s.ok()) return s.status();
        Emit(Token::Type::kString, *std::move(s));
        continue;
      }
      static const char* const kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                         "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                         "]",  "{",  "}",  ",",  ".",  ":",  "|"};
      bool matched = false;
      for (const char* op : kOps) {
        const std::string_view o(op);
        if (src_.substr(pos_, o.size()) == o) {
          if (o == "(" || o == "[" || o == "{") ++open;
          if ((o == ")" || o == "]" || o == "}") && open > 0) --open;
          Emit(Token::Type::kOp, std::string(o));
          pos_ += o.size();
          matched = true;
          break;
        }
      }
      if (!matched) return Error(absl::StrCat("unexpected character '", std::string(1, c), "'"));
    }
  }

  // A string literal opened by `q` at pos_, with Python's backslash escapes.
  absl::StatusOr<std::string> String(char q) {
    std::string out;
    size_t i = pos_ + 1;
    for (;;) {
      if (i >= src_.size()) return Error("unterminated string");
      const char c = src_[i];
      if (c == q) break;
      if (c != '\\') {
        out += c;
        ++i;
        continue;
      }
      if (i + 1 >= src_.size()) continue;
      const char e = src_[i + 1];
      i += 2;
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case '0':
          out += '\0';
          break;
        case 'a':
          out += '\a';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'v':
          out += '\v';
          break;
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case '\n':
          break;  // a line continuation
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (i + n > src_.size()) return Error("truncated escape in a string");
          const uint32_t cp =
              static_cast<uint32_t>(std::stoul(std::string(src_.substr(i, n)), nullptr, 16));
          i += n;
          AppendUtf8(cp, &out);
          break;
        }
        default:
          out += '\\';
          out += e;
      }
    }
    pos_ = i + 1;
    return out;
  }

  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      *out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      *out += static_cast<char>(0xc0 | (cp >> 6));
      *out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      *out += static_cast<char>(0xe0 | (cp >> 12));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      *out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      *out += static_cast<char>(0xf0 | (cp >> 18));
      *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      *out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }

  // The line of the source position `p` (counted forward from the last question).
  int LineAt(size_t p) {
    if (p < line_pos_) {
      line_pos_ = 0;
      line_ = 1;
    }
    for (; line_pos_ < p && line_pos_ < src_.size(); ++line_pos_) {
      if (src_[line_pos_] == '\n') ++line_;
    }
    return line_;
  }

  // Text tokens carry the line where they start; the others the line of the position reached.
  void Emit(Token::Type t, std::string v) {
    const size_t at = t == Token::Type::kText ? text_start_ : pos_;
    tokens_.push_back({t, std::move(v), LineAt(at)});
  }

  absl::Status Error(const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrCat("chat template line ", LineAt(pos_), ": ", what));
  }

  std::string_view src_;
  size_t pos_ = 0;
  size_t text_start_ = 0;
  size_t line_pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source) {
  // As jinja2 does before lexing: every newline sequence (\r\n, \r, \n) becomes \n, and one
  // newline at the very end of the template is dropped (keep_trailing_newline=False).
  std::string normalized;
  normalized.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      normalized += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      normalized += source[i];
    }
  }
  if (!normalized.empty() && normalized.back() == '\n') normalized.pop_back();
  return Lexer(normalized).Run();
}

}  // namespace llm::frontend::jinja
