#include "common/utf8.h"

namespace llm {
namespace {

// Valid range of the second byte for a lead byte (Unicode Table 3-7); continuation bytes after
// the second are always 0x80..0xBF.
struct SecondByteRange {
  uint8_t lo;
  uint8_t hi;
};

SecondByteRange SecondRange(uint8_t lead) {
  switch (lead) {
    case 0xE0:
      return {0xA0, 0xBF};
    case 0xED:
      return {0x80, 0x9F};
    case 0xF0:
      return {0x90, 0xBF};
    case 0xF4:
      return {0x80, 0x8F};
    default:
      return {0x80, 0xBF};
  }
}

// Length of the valid sequence at `pos` (1..4), or -(n) where n >= 1 is the length of the
// maximal ill-formed subpart starting there.
int ScanSequence(std::string_view s, size_t pos) {
  const auto lead = static_cast<uint8_t>(s[pos]);
  if (lead < 0x80) return 1;
  int len = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    len = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    len = 3;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    len = 4;
  } else {
    return -1;
  }
  const SecondByteRange second = SecondRange(lead);
  for (int i = 1; i < len; ++i) {
    if (pos + i >= s.size()) return -i;
    const auto b = static_cast<uint8_t>(s[pos + i]);
    const uint8_t lo = i == 1 ? second.lo : 0x80;
    const uint8_t hi = i == 1 ? second.hi : 0xBF;
    if (b < lo || b > hi) return -i;
  }
  return len;
}

}  // namespace

int Utf8SequenceLength(uint8_t lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 0;
}

void AppendUtf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

char32_t DecodeUtf8(std::string_view s, size_t& pos) {
  const auto lead = static_cast<uint8_t>(s[pos]);
  const int len = Utf8SequenceLength(lead);
  if (len <= 1) {
    ++pos;
    return lead;
  }
  char32_t cp = lead & (0x7F >> len);
  for (int i = 1; i < len; ++i) cp = (cp << 6) | (static_cast<uint8_t>(s[pos + i]) & 0x3F);
  pos += len;
  return cp;
}

size_t FirstInvalidUtf8(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    // Fast path for ASCII runs.
    if (static_cast<uint8_t>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const int n = ScanSequence(s, pos);
    if (n < 0) return pos;
    pos += n;
  }
  return s.size();
}

bool IsValidUtf8(std::string_view s) { return FirstInvalidUtf8(s) == s.size(); }

std::string Utf8Lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) {
    const int n = ScanSequence(s, pos);
    if (n > 0) {
      out.append(s.substr(pos, n));
      pos += n;
    } else {
      out.append(kReplacementChar);
      pos += -n;
    }
  }
  return out;
}

}  // namespace llm
