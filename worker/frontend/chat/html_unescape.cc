#include "worker/frontend/chat/html_unescape.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string_view>
#include <utility>

#include "worker/frontend/chat/python_str.h"

namespace llm::frontend::jinja {

namespace {

struct NamedReference {
  std::string_view name;
  std::string_view text;
};

#include "worker/frontend/chat/html_entities.inc"

const std::string_view* FindNamed(std::string_view name) {
  const auto it =
      std::lower_bound(std::begin(kNamedReferences), std::end(kNamedReferences), name,
                       [](const NamedReference& r, std::string_view n) { return r.name < n; });
  return it != std::end(kNamedReferences) && it->name == name ? &it->text : nullptr;
}

bool IsHexDigit(char32_t c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// html._replace_charref for "#digits" / "#xhex" (without the ';').
std::u32string NumericReference(std::u32string_view digits, int base) {
  uint64_t num = 0;
  for (const char32_t c : digits) {
    const uint32_t d = c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
    num = std::min<uint64_t>(num * static_cast<uint64_t>(base) + d, 0x110000);  // saturates
  }
  for (const auto& [from, to] : kInvalidCharrefs) {
    if (num == from) return std::u32string(1, to);
  }
  if ((num >= 0xD800 && num <= 0xDFFF) || num > 0x10FFFF) return U"\uFFFD";
  if (std::find(std::begin(kInvalidCodepoints), std::end(kInvalidCodepoints), num) !=
      std::end(kInvalidCodepoints)) {
    return U"";
  }
  return std::u32string(1, static_cast<char32_t>(num));
}

// html._replace_charref for a name (with its ';' if it had one).
std::u32string NamedReferenceText(const std::u32string& name) {
  if (const std::string_view* text = FindNamed(Encode(name))) return Decode(*text);
  for (size_t x = name.size() - 1; x > 1; --x) {
    if (const std::string_view* text = FindNamed(Encode(name.substr(0, x)))) {
      return Decode(*text) + name.substr(x);
    }
  }
  return U"&" + name;
}

}  // namespace

std::string HtmlUnescape(const std::string& s) {
  if (s.find('&') == std::string::npos) return s;
  const std::u32string t = Decode(s);
  std::u32string out;
  const auto digits_from = [&t](size_t k, bool hex) {
    size_t j = k;
    while (j < t.size() && (hex ? IsHexDigit(t[j]) : (t[j] >= '0' && t[j] <= '9'))) ++j;
    return j;
  };
  for (size_t i = 0; i < t.size();) {
    if (t[i] != '&') {
      out += t[i++];
      continue;
    }
    const size_t k = i + 1;
    size_t end = k;  // the match is [i, end); end == k: none
    std::u32string text;
    if (k < t.size() && t[k] == '#') {
      const bool hex = k + 1 < t.size() && (t[k + 1] == 'x' || t[k + 1] == 'X');
      const size_t from = hex ? k + 2 : k + 1;
      const size_t to = digits_from(from, hex);
      if (to > from) {
        text = NumericReference(std::u32string_view(t).substr(from, to - from), hex ? 16 : 10);
        end = to < t.size() && t[to] == ';' ? to + 1 : to;
      }
    } else {
      size_t j = k;
      while (j < t.size() && j - k < 32 && t[j] != '\t' && t[j] != '\n' && t[j] != '\f' &&
             t[j] != ' ' && t[j] != '<' && t[j] != '&' && t[j] != '#' && t[j] != ';') {
        ++j;
      }
      if (j > k) {
        end = j < t.size() && t[j] == ';' ? j + 1 : j;
        text = NamedReferenceText(t.substr(k, end - k));
      }
    }
    if (end == k) {
      out += t[i++];
      continue;
    }
    out += text;
    i = end;
  }
  return Encode(out);
}

}  // namespace llm::frontend::jinja
