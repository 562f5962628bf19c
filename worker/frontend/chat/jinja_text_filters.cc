#include "worker/frontend/chat/jinja_text_filters.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/frontend/chat/html_unescape.h"
#include "worker/frontend/chat/python_str.h"

namespace llm::frontend::jinja {

namespace {

absl::Status Error(const std::string& what) { return absl::InvalidArgumentError(what); }

// ---- textwrap ----

// textwrap's whitespace: ASCII only ('\t\n\x0b\x0c\r ').
bool IsWrapSpace(char32_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}
// textwrap's regex classes: `letter` is [^\d\W], `word_punct` is [\w!"'&.,?].
bool IsLetter(char32_t c) { return IsWordChar(c) && !IsDecimal(c); }
bool IsWordPunct(char32_t c) {
  return IsWordChar(c) || c == '!' || c == '"' || c == '\'' || c == '&' || c == '.' || c == ',' ||
         c == '?';
}

// TextWrapper._split without break_on_hyphens: runs of whitespace and runs of the rest.
std::vector<std::u32string> SplitOnSpaces(const std::u32string& t) {
  std::vector<std::u32string> chunks;
  for (size_t i = 0; i < t.size();) {
    size_t j = i;
    const bool space = IsWrapSpace(t[i]);
    while (j < t.size() && IsWrapSpace(t[j]) == space) ++j;
    chunks.push_back(t.substr(i, j - i));
    i = j;
  }
  return chunks;
}

// TextWrapper.wordsep_re's matches from `i` on, by hand: a run of whitespace; an em-dash ("--"
// or longer) after a word_punct character and before a \w one; else the shortest run of
// non-whitespace that ends in a hyphen between letters ("ab-cd" splits after "ab-"), at
// whitespace or the end, or before an em-dash.
std::vector<std::u32string> SplitAtHyphens(const std::u32string& t) {
  const auto at = [&t](size_t k) -> char32_t { return k < t.size() ? t[k] : 0; };
  const auto letter = [&](size_t k) { return k < t.size() && IsLetter(t[k]); };
  // The length of the run of '-' at k followed by a \w character, if it is two or more.
  const auto em_dash = [&](size_t k) {
    size_t j = k;
    while (at(j) == '-') ++j;
    return j - k >= 2 && j < t.size() && IsWordChar(t[j]) ? j - k : 0;
  };
  std::vector<std::u32string> chunks;
  for (size_t i = 0; i < t.size();) {
    size_t end = i;
    if (IsWrapSpace(t[i])) {
      while (end < t.size() && IsWrapSpace(t[end])) ++end;
    } else if (size_t n = i > 0 && IsWordPunct(t[i - 1]) ? em_dash(i) : 0; n > 0) {
      end = i + n;
    } else {
      for (size_t p = i + 1;; ++p) {  // the shortest run [i, p) that the regex accepts
        if (at(p) == '-') {
          const bool after_letters = (p >= 2 && letter(p - 2) && letter(p - 1)) ||
                                     (p >= 3 && letter(p - 3) && at(p - 2) == '-' && letter(p - 1));
          const bool before_letters =
              letter(p + 1) && (letter(p + 2) || (at(p + 2) == '-' && letter(p + 3)));
          if (after_letters && before_letters) {
            end = p + 1;
            break;
          }
        }
        if (p == t.size() || IsWrapSpace(t[p]) || (IsWordPunct(t[p - 1]) && em_dash(p) > 0)) {
          end = p;
          break;
        }
      }
    }
    chunks.push_back(t.substr(i, end - i));
    i = end;
  }
  return chunks;
}

bool IsBlank(const std::u32string& s) {
  return std::all_of(s.begin(), s.end(), IsSpace);  // str.strip() == ''
}

// TextWrapper._wrap_chunks without indents, max_lines or a placeholder.
std::vector<std::u32string> WrapChunks(std::vector<std::u32string> chunks, const WrapOptions& o) {
  std::vector<std::u32string> lines;
  std::reverse(chunks.begin(), chunks.end());
  const int64_t width = o.width;
  while (!chunks.empty()) {
    std::vector<std::u32string> line;
    int64_t len = 0;
    if (IsBlank(chunks.back()) && !lines.empty()) chunks.pop_back();
    while (!chunks.empty() && len + static_cast<int64_t>(chunks.back().size()) <= width) {
      len += static_cast<int64_t>(chunks.back().size());
      line.push_back(std::move(chunks.back()));
      chunks.pop_back();
    }
    if (!chunks.empty() && static_cast<int64_t>(chunks.back().size()) > width) {
      // _handle_long_word
      const int64_t space_left = width < 1 ? 1 : width - len;
      if (o.break_long_words) {
        std::u32string& chunk = chunks.back();
        auto end = static_cast<size_t>(space_left);
        if (o.break_on_hyphens && static_cast<int64_t>(chunk.size()) > space_left) {
          const size_t hyphen = chunk.rfind(U'-', end == 0 ? 0 : end - 1);
          if (hyphen != std::u32string::npos && hyphen > 0 && hyphen < end &&
              std::any_of(chunk.begin(), chunk.begin() + static_cast<int64_t>(hyphen),
                          [](char32_t c) { return c != '-'; })) {
            end = hyphen + 1;
          }
        }
        line.push_back(chunk.substr(0, end));
        chunk = chunk.substr(std::min(end, chunk.size()));
      } else if (line.empty()) {
        line.push_back(std::move(chunks.back()));
        chunks.pop_back();
      }
    }
    if (!line.empty() && IsBlank(line.back())) line.pop_back();
    if (!line.empty()) {
      std::u32string joined;
      for (const std::u32string& part : line) joined += part;
      lines.push_back(std::move(joined));
    }
  }
  return lines;
}

// ---- URLs ----

// jinja2's url_quote: urllib.parse.quote_from_bytes of the UTF-8 bytes, letters, digits and
// "_.-~" kept, '/' too unless `for_query`, other bytes as %XX; `for_query` writes ' ' as '+'.
std::string UrlQuote(const std::string& s, bool for_query) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c == '_' || c == '.' || c == '-' || c == '~' ||
        (c == '/' && !for_query)) {
      out += ch;
    } else if (c == ' ' && for_query) {
      out += '+';
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// Python's float(v) for filesizeformat.
absl::StatusOr<double> ToFloat(const Value& v) {
  using K = Value::Kind;
  if (v.is_number() || v.kind == K::kBool) return v.number();
  if (v.is_string()) {
    if (const std::optional<std::string> text = NumericText(v.s)) {
      if (const std::optional<double> f = ParseFloat(*text)) return *f;
    }
    return Error(absl::StrCat("filesizeformat: could not convert string to float: ", Repr(v)));
  }
  if (v.undefined()) return UndefinedError(v);
  return Error(
      absl::StrCat("filesizeformat: float() argument must be a string or a real number, not '",
                   TypeName(v), "'"));
}

// pprint's repr: as Repr, with dict keys sorted (a groupby tuple and a namespace print by their
// own repr, which does not sort).
std::string SortedRepr(const Value& v) {
  using K = Value::Kind;
  if (v.kind == K::kDict) {
    std::vector<const std::pair<std::string, Value>*> items;
    for (const auto& item : *v.dict) items.push_back(&item);
    std::stable_sort(items.begin(), items.end(),
                     [](const auto* a, const auto* b) { return a->first < b->first; });
    std::string out = "{";
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out += ", ";
      out += Repr(Value::Str(items[i]->first)) + ": " + SortedRepr(items[i]->second);
    }
    return out + "}";
  }
  if (v.kind == K::kList && !v.group) {
    std::string out = v.tuple ? "(" : "[";
    for (size_t i = 0; i < v.list->size(); ++i) {
      if (i > 0) out += ", ";
      out += SortedRepr((*v.list)[i]);
    }
    if (v.tuple) return out + (v.list->size() == 1 ? ",)" : ")");
    return out + "]";
  }
  return Repr(v);
}

bool HasFunction(const Value& v) {
  using K = Value::Kind;
  if (v.kind == K::kFunction) return true;
  if (v.kind == K::kList) return std::any_of(v.list->begin(), v.list->end(), HasFunction);
  if (v.kind == K::kDict) {
    return std::any_of(v.dict->begin(), v.dict->end(),
                       [](const auto& item) { return HasFunction(item.second); });
  }
  return false;
}

}  // namespace

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string Center(const std::string& s, int64_t width) {
  const auto len = static_cast<int64_t>(Decode(s).size());
  if (width <= len) return s;
  const int64_t margin = width - len;
  const int64_t left = margin / 2 + (margin & width & 1);
  return std::string(static_cast<size_t>(left), ' ') + s +
         std::string(static_cast<size_t>(margin - left), ' ');
}

absl::StatusOr<std::string> Truncate(const std::string& s, int64_t length, bool killwords,
                                     const std::string& end, int64_t leeway) {
  const auto end_len = static_cast<int64_t>(Decode(end).size());
  if (length < end_len) {
    return Error(absl::StrCat("truncate: expected length >= ", end_len, ", got ", length));
  }
  if (leeway < 0) return Error(absl::StrCat("truncate: expected leeway >= 0, got ", leeway));
  const std::u32string text = Decode(s);
  if (static_cast<int64_t>(text.size()) <= length + leeway) return s;
  std::u32string kept = text.substr(0, static_cast<size_t>(length - end_len));
  if (!killwords) kept = kept.substr(0, std::min(kept.size(), kept.rfind(U' ')));
  return Encode(kept) + end;
}

absl::StatusOr<std::string> WordWrap(const std::string& s, const WrapOptions& options) {
  const Parts lines = SplitLines(Decode(s), /*keepends=*/false);
  if (!lines.empty() && options.width <= 0) {
    return Error(absl::StrCat("wordwrap: invalid width ", options.width, " (must be > 0)"));
  }
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += options.wrapstring;
    const std::vector<std::u32string> wrapped = WrapChunks(
        options.break_on_hyphens ? SplitAtHyphens(lines[i]) : SplitOnSpaces(lines[i]), options);
    for (size_t j = 0; j < wrapped.size(); ++j) {
      if (j > 0) out += options.wrapstring;
      out += Encode(wrapped[j]);
      if (out.size() > kMaxBuiltBytes) return TooLong("wordwrap");
    }
  }
  return out;
}

absl::StatusOr<std::string> UrlEncode(const Value& v) {
  using K = Value::Kind;
  if (v.undefined()) return std::string();
  if (v.kind != K::kList && v.kind != K::kDict) return UrlQuote(ToStr(v), /*for_query=*/false);
  std::vector<std::pair<std::string, std::string>> pairs;
  if (v.kind == K::kDict) {
    for (const auto& [k, x] : *v.dict) pairs.emplace_back(k, ToStr(x));
  } else {
    for (const Value& item : *v.list) {
      // `for k, v in items`: each item unpacks into two (a list, or a 2-character string).
      std::vector<std::string> parts;
      if (item.kind == K::kList) {
        for (const Value& x : *item.list) parts.push_back(ToStr(x));
      } else if (item.is_string()) {
        parts = CodePoints(item.s);
      } else {
        return Error(
            absl::StrCat("urlencode: cannot unpack non-iterable ", TypeName(item), " object"));
      }
      if (parts.size() != 2) {
        return Error(absl::StrCat("urlencode: each item must be a (key, value) pair, got ",
                                  parts.size(), " values"));
      }
      pairs.emplace_back(parts[0], parts[1]);
    }
  }
  std::string out;
  for (size_t i = 0; i < pairs.size(); ++i) {
    if (i > 0) out += "&";
    out += UrlQuote(pairs[i].first, true) + "=" + UrlQuote(pairs[i].second, true);
    if (out.size() > kMaxBuiltBytes) return TooLong("urlencode");
  }
  return out;
}

absl::StatusOr<std::string> XmlAttr(const Value& v, bool autospace) {
  if (v.undefined()) return UndefinedError(v);
  if (v.kind != Value::Kind::kDict) {
    return Error(absl::StrCat("xmlattr: '", TypeName(v), "' object has no attribute 'items'"));
  }
  std::string out;
  for (const auto& [key, x] : *v.dict) {
    if (x.none() || x.undefined()) continue;
    if (key.find_first_of(" \t\n\r\f\v/>=") != std::string::npos) {
      return Error(
          absl::StrCat("xmlattr: Invalid character in attribute name: ", Repr(Value::Str(key))));
    }
    const std::string text = x.is_string() && x.markup ? x.s : HtmlEscape(ToStr(x));
    out += absl::StrCat(out.empty() ? "" : " ", HtmlEscape(key), "=\"", text, "\"");
    if (out.size() > kMaxBuiltBytes) return TooLong("xmlattr");
  }
  return autospace && !out.empty() ? " " + out : out;
}

absl::StatusOr<std::string> FileSizeFormat(const Value& v, bool binary) {
  absl::StatusOr<double> size = ToFloat(v);
  if (!size.ok()) return size.status();
  const double bytes = *size;
  const double base = binary ? 1024 : 1000;
  static const char* const kDecimal[] = {"kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"};
  static const char* const kBinary[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"};
  if (bytes == 1) return std::string("1 Byte");
  if (bytes < base) {
    if (std::isinf(bytes)) return Error("filesizeformat: cannot convert float infinity to integer");
    if (bytes < -0x1p63) return IntOverflowError("filesizeformat");
    return absl::StrCat(static_cast<int64_t>(std::trunc(bytes)), " Bytes");
  }
  // The first unit base**(i + 2) above the size (compared exactly, as Python compares a float
  // with an int: long double holds these powers exactly), else the last one.
  const auto unit = [binary](int i) -> long double {
    long double u = 1;
    for (int k = 0; k < i + 2; ++k) u *= binary ? 1024 : 1000;
    return u;
  };
  int i = 0;
  while (i < 7 && !(static_cast<long double>(bytes) < unit(i))) ++i;
  // Python divides by float(base**(i + 2)): the double nearest it.
  const double x = base * bytes / static_cast<double>(unit(i));
  const char* prefix = (binary ? kBinary : kDecimal)[i];
  if (std::isnan(x)) return absl::StrCat("nan ", prefix);
  if (std::isinf(x)) return absl::StrCat("inf ", prefix);
  char buf[400];
  std::snprintf(buf, sizeof(buf), "%.1f %s", x, prefix);
  return std::string(buf);
}

absl::StatusOr<std::string> PrettyPrint(const Value& v) {
  using K = Value::Kind;
  if (HasFunction(v)) {
    return absl::InvalidArgumentError("pprint: the repr of a function is not supported");
  }
  std::string out = SortedRepr(v);
  // pformat breaks a long string at line ends and after whitespace: one with neither prints whole.
  const auto one_word = [](const std::string& s) {
    const std::u32string t = Decode(s);
    const auto space = std::find_if(t.begin(), t.end(), IsSpace);
    return std::all_of(space, t.end(), IsSpace);
  };
  const bool breakable = (v.kind == K::kList && !v.group) || v.kind == K::kDict ||
                         (v.is_string() && !v.markup && !one_word(v.s));
  if (breakable && Decode(out).size() > 80) {
    return absl::InvalidArgumentError(
        "pprint: a list, dict or string whose repr is longer than 80 characters (which pformat "
        "breaks across lines) is not supported");
  }
  return out;
}

std::string StripTags(const std::string& s) {
  std::string text;
  size_t pos = 0;
  for (size_t start = s.find('<'); start != std::string::npos; start = s.find('<', pos)) {
    size_t end;
    if (s.compare(start, 4, "<!--") == 0) {
      end = s.find("-->", start + 4);
      if (end == std::string::npos) break;  // unclosed
      end += 3;
    } else {
      end = s.find('>', start);
      if (end == std::string::npos) break;
      end += 1;
    }
    text.append(s, pos, start - pos);
    pos = end;
  }
  text.append(s, pos, std::string::npos);
  // " ".join(value.split())
  const Parts words = SplitWhitespace(Decode(text), -1);
  std::u32string joined;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i > 0) joined += U' ';
    joined += words[i];
  }
  return HtmlUnescape(Encode(joined));
}

}  // namespace llm::frontend::jinja
