#include "worker/frontend/unicode.h"

#include <utf8proc.h>

#include "common/utf8.h"

namespace llm::frontend {

bool IsWhitespace(char32_t c) {
  switch (c) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

bool IsWordChar(char32_t c) {
  if (c == '_') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

size_t WhitespacePrefixEnd(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    size_t next = pos;
    if (!IsWhitespace(DecodeUtf8(s, next))) break;
    pos = next;
  }
  return pos;
}

size_t WhitespaceSuffixStart(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t begin = end - 1;
    while (begin > 0 && (static_cast<uint8_t>(s[begin]) & 0xC0) == 0x80) --begin;
    size_t pos = begin;
    if (!IsWhitespace(DecodeUtf8(s, pos))) break;
    end = begin;
  }
  return end;
}

char32_t FirstChar(std::string_view s) {
  if (s.empty()) return 0;
  size_t pos = 0;
  return DecodeUtf8(s, pos);
}

char32_t LastChar(std::string_view s) {
  if (s.empty()) return 0;
  size_t begin = s.size() - 1;
  while (begin > 0 && (static_cast<uint8_t>(s[begin]) & 0xC0) == 0x80) --begin;
  return DecodeUtf8(s, begin);
}

}  // namespace llm::frontend
